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

struct PTO2KernelContext {
  int32_t block_idx;  // cluster of the core running the kernel, 0 .. block_num-1
  int32_t block_num;  // clusters on the chip (block_dim)
  int32_t core_id;    // global core id (AICs first, then AIVs)
  int32_t core_type;  // PTO2_WORKER_CUBE or PTO2_WORKER_VECTOR
  uint64_t task_id;   // the runtime's task id
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
