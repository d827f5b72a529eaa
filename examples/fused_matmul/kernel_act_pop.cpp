// AIV, the other half of a fused matmul + activation block: pops the rows the
// cube core pushed into the cluster's pipe and writes GELU (tanh form) of
// each into this block's rows of C.
// args: pipe (PIPE_IN), C rows [M / block_num, N] (OUTPUT, this block's view).
#include <cmath>
#include <vector>

#include "pto2/kernel_abi.h"

extern "C" void kernel_entry(int64_t* args) {
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 2);
  const Tensor* c = pto2_arg_tensor(args, 1);
  const uint64_t rows = c->shapes[0], N = c->shapes[1], stride = pto2_tensor_stride(c, 0);
  auto* cp = static_cast<float*>(pto2_tensor_data(c));
  std::vector<float> row(N);
  for (uint64_t i = 0; i < rows; ++i) {
    if (pto2_pipe_pop(ctx, pto2_arg_tensor(args, 0), row.data(), N * sizeof(float)) != 0) return;
    for (uint64_t j = 0; j < N; ++j) {
      const float x = row[j];
      cp[i * stride + j] = 0.5f * x * (1.f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    }
  }
}
