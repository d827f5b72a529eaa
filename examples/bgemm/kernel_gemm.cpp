// AIC kernel: P = A_tile @ B_tile. args: A (M×K view), B (K×N view), P (M×N).
// Views may be slices of larger matrices: rows are addressed with the
// underlying buffer's stride.
#include "pto2/kernel_abi.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* A = pto2_arg_tensor(args, 0);
  const Tensor* B = pto2_arg_tensor(args, 1);
  const Tensor* P = pto2_arg_tensor(args, 2);
  const uint32_t M = A->shapes[0], K = A->shapes[1], N = B->shapes[1];
  const float* a = static_cast<const float*>(pto2_tensor_data(A));
  const float* b = static_cast<const float*>(pto2_tensor_data(B));
  float* p = static_cast<float*>(pto2_tensor_data(P));
  const uint64_t sa = pto2_tensor_stride(A, 0), sb = pto2_tensor_stride(B, 0), sp = pto2_tensor_stride(P, 0);
  for (uint32_t i = 0; i < M; ++i)
    for (uint32_t j = 0; j < N; ++j) {
      float acc = 0.f;
      for (uint32_t k = 0; k < K; ++k) acc += a[i * sa + k] * b[k * sb + j];
      p[i * sp + j] = acc;
    }
}
