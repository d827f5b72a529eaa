// AIC, one block of a fused matmul + activation: the rows of C = A @ B that
// belong to this block (block_idx of block_num), computed row by row and
// pushed into the cluster's pipe for the vector core, never to global memory.
// args: A [M, K] (the whole matrix), B [K, N], pipe (PIPE_OUT).
#include <vector>

#include "pto2/kernel_abi.h"

extern "C" void kernel_entry(int64_t* args) {
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 3);
  const Tensor* a = pto2_arg_tensor(args, 0);
  const Tensor* b = pto2_arg_tensor(args, 1);
  const uint64_t M = a->shapes[0], K = a->shapes[1], N = b->shapes[1];
  const uint64_t rows = M / static_cast<uint64_t>(ctx->block_num), first = rows * static_cast<uint64_t>(ctx->block_idx);
  const auto* ap = static_cast<const float*>(pto2_tensor_data(a));
  const auto* bp = static_cast<const float*>(pto2_tensor_data(b));
  std::vector<float> row(N);
  for (uint64_t i = first; i < first + rows; ++i) {
    for (uint64_t j = 0; j < N; ++j) {
      float acc = 0.f;
      for (uint64_t k = 0; k < K; ++k) acc += ap[i * K + k] * bp[k * N + j];
      row[j] = acc;
    }
    // Waits while the pipe is full: the vector core drains it as it goes.
    if (pto2_pipe_push(ctx, pto2_arg_tensor(args, 2), row.data(), N * sizeof(float)) != 0) return;
  }
}
