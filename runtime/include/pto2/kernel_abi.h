// The kernel ABI of the simulated chip — the one header a kernel author needs.
//
// A kernel is a C++ shared library exporting
//
//     extern "C" void kernel_entry(int64_t* args);
//
// args[0 .. n) are the task's parameters in submit order:
//   * a tensor parameter is a `const Tensor*` (orchestration_api.h): buffer
//     address, dtype, raw_shape (the buffer), offsets and shapes (the view);
//     use pto2_tensor_data() for the view's first element and
//     pto2_tensor_stride(t, d) for the row-major stride of dimension d;
//   * a scalar parameter is its 64-bit value.
// args[n] (right after the last parameter) is a `const PTO2KernelContext*`
// describing where the kernel runs. The kernel knows n: it is its own
// signature. A kernel must not keep pointers past its return.
#pragma once

#include <stdint.h>
#include <string.h>

#include "pto2/orchestration_api.h"

// A cluster's pipes, as a platform offers them to kernels (docs/sim.md,
// "Pipes"). Use pto2_pipe_push / pto2_pipe_pop below.
struct PTO2PipeOps {
  int32_t (*push)(void* impl, const Tensor* pipe, const void* src, uint64_t bytes);
  int32_t (*pop)(void* impl, const Tensor* pipe, void* dst, uint64_t bytes);
};

struct PTO2KernelContext {
  int32_t cluster_id;   // physical cluster of the core running the kernel, 0 .. cluster_num-1
  int32_t cluster_num;  // clusters on the chip (the chip's block_dim)
  int32_t core_id;      // global core id (AICs first, then AIVs)
  int32_t core_type;    // PTO2_WORKER_CUBE or PTO2_WORKER_VECTOR
  uint64_t task_id;     // the runtime's task id
  // The logical block: of a block_incore (SPMD) task, this block's index in
  // 0 .. block_num-1 and the task's block count; 0 and 1 for a plain task.
  int32_t block_idx;
  int32_t block_num;
  const PTO2PipeOps* pipe_ops;  // null on a platform without pipes
  void* pipe_impl;
};

typedef void (*PTO2KernelEntryFn)(int64_t* args);
#define PTO2_KERNEL_ENTRY_SYMBOL "kernel_entry"

static inline const Tensor* pto2_arg_tensor(int64_t* args, int i) { return (const Tensor*)(uintptr_t)args[i]; }
// An fp32 scalar passed with make_scalar_param_f32.
static inline float pto2_scalar_f32(int64_t arg) {
  const uint32_t bits = (uint32_t)arg;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}
static inline const PTO2KernelContext* pto2_kernel_context(int64_t* args, int num_params) {
  return (const PTO2KernelContext*)(uintptr_t)args[num_params];
}
// Copies bytes into the PIPE_OUT pipe (a parameter of this task); waits while
// the pipe has no room. Returns 0, or a PTO2 error code when the pipe cannot
// take them (more bytes than it holds: INVALID_ARGUMENT; nobody popped in
// time: STALLED, and the run fails with that diagnosis). On an error the
// kernel should return.
static inline int32_t pto2_pipe_push(const PTO2KernelContext* ctx, const Tensor* pipe, const void* src,
                                     uint64_t bytes) {
  return ctx->pipe_ops ? ctx->pipe_ops->push(ctx->pipe_impl, pipe, src, bytes) : 2;
}
// Copies the next bytes out of the PIPE_IN pipe into dst; waits until they
// were pushed. Errors as pto2_pipe_push (an empty pipe nobody pushes to is
// STALLED).
static inline int32_t pto2_pipe_pop(const PTO2KernelContext* ctx, const Tensor* pipe, void* dst, uint64_t bytes) {
  return ctx->pipe_ops ? ctx->pipe_ops->pop(ctx->pipe_impl, pipe, dst, bytes) : 2;
}
