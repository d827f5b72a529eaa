/* The C ABI between the L3 engine and the code it runs in child processes.
 *
 * A task's arguments reach a child as a PtoTaskArgsView: tensor descriptors
 * (PtoTensor, 40 bytes, the "ContinuousTensor" of the design) and 64-bit
 * scalars. The view points into the child's mailbox; it is valid only for the
 * duration of the call. Tensor data lives in memory shared with the parent
 * (the Worker's heap rings, its buffer arena, or a region registered with
 * pto::register_shared_memory), so a callable writes its outputs in place.
 *
 * A native sub callable (NativeCallable::import / ::blob) is a C function
 *
 *     int fn(const PtoTaskArgsView* args, char* err, size_t err_len);
 *
 * returning 0 on success. On failure it returns non-zero and may write a
 * NUL-terminated message of at most err_len bytes into err; the task then ends
 * with outcome TASK_FAILURE and that message (docs/worker.md, failure model).
 * This header is plain C so callables can be written in C or any language
 * with a C FFI.
 */
#ifndef PTO_NATIVE_ABI_H
#define PTO_NATIVE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types (PTO_FLOAT32 ...), pto_dtype_size and PTO_TENSOR_MAX_DIMS. */
#include "pto/dtype.h"

/* A dense, row-major tensor: data address + shape + dtype (PTO2DataType). */
typedef struct PtoTensor {
  uint64_t data;                       /* address; 0 = "allocate me" on OUTPUT */
  uint32_t shape[PTO_TENSOR_MAX_DIMS]; /* dims beyond ndims are 0 */
  int32_t dtype;
  int32_t ndims;
} PtoTensor;

typedef struct PtoTaskArgsView {
  int32_t tensor_count;
  int32_t scalar_count;
  const PtoTensor* tensors;
  const uint64_t* scalars;
} PtoTaskArgsView;

typedef int (*PtoSubEntryFn)(const PtoTaskArgsView* args, char* err, size_t err_len);

static inline uint64_t pto_tensor_numel(const PtoTensor* t) {
  uint64_t n = 1;
  for (int32_t i = 0; i < t->ndims; ++i) n *= t->shape[i];
  return n;
}
static inline uint64_t pto_tensor_bytes(const PtoTensor* t) { return pto_tensor_numel(t) * pto_dtype_size(t->dtype); }
static inline void* pto_tensor_data(const PtoTensor* t) { return (void*)(uintptr_t)t->data; }

#ifdef __cplusplus
}
#endif

#endif /* PTO_NATIVE_ABI_H */
