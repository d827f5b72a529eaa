// AIV kernel: C += P. args: P (M×N), C (M×N view, INOUT).
#include "pto2/kernel_abi.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* P = pto2_arg_tensor(args, 0);
  const Tensor* C = pto2_arg_tensor(args, 1);
  const float* p = static_cast<const float*>(pto2_tensor_data(P));
  float* c = static_cast<float*>(pto2_tensor_data(C));
  const uint64_t sp = pto2_tensor_stride(P, 0), sc = pto2_tensor_stride(C, 0);
  for (uint32_t i = 0; i < C->shapes[0]; ++i)
    for (uint32_t j = 0; j < C->shapes[1]; ++j) c[i * sc + j] += p[i * sp + j];
}
