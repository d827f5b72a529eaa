// The PTO2 orchestration API: the only header an orchestration library needs.
//
// Contract (docs/runtime.md §11): an orchestration is ordinary code that submits tasks
// whose tensor parameters are tagged INPUT / OUTPUT / INOUT. The runtime derives
// dependencies from the tensors' address regions (TensorMap), allocates OUTPUT
// tensors that have no address from the heap ring, and ties buffer lifetimes to
// scopes (PTO2_SCOPE).
//
// Every call goes through the function table in PTO2Runtime, so an orchestration
// library loaded with dlopen links against nothing of the runtime.
//
// Threading: all calls on one PTO2Runtime come from the thread that runs the
// orchestration function. Errors are sticky: after the first failure every
// submit returns the negative error code and the run reports that error.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pto/dtype.h"

#define PTO2_MAX_PARAMS 16

enum PTO2WorkerType : int32_t {
  PTO2_WORKER_CUBE = 0,    // AIC cores: matrix work
  PTO2_WORKER_VECTOR = 1,  // AIV cores: element-wise work
};

// Element types (pto/dtype.h), by the orchestration API's names.
enum PTO2DataType : int32_t {
  PTO2_FLOAT32 = PTO_FLOAT32,
  PTO2_FLOAT16 = PTO_FLOAT16,
  PTO2_BFLOAT16 = PTO_BFLOAT16,
  PTO2_INT32 = PTO_INT32,
  PTO2_INT64 = PTO_INT64,
  PTO2_INT16 = PTO_INT16,
  PTO2_INT8 = PTO_INT8,
  PTO2_UINT8 = PTO_UINT8,
  PTO2_FLOAT64 = PTO_FLOAT64,
};

static inline uint32_t pto2_dtype_size(int32_t dtype) { return pto_dtype_size(dtype); }

// A tensor is a view (offsets + shapes) into a dense row-major buffer of
// raw_shape starting at addr. Views of one buffer share addr and raw_shape,
// which is what lets the TensorMap compare them dimension by dimension.
struct Tensor {
  uint64_t addr;   // base of the underlying buffer; 0 = allocated by the runtime on first OUTPUT
  uint64_t owner;  // runtime-allocated buffers: creating task + 1 (set by the runtime); 0 = external
  int32_t dtype;
  int32_t ndim;
  uint32_t raw_shape[PTO2_MAX_DIMS];
  uint32_t offsets[PTO2_MAX_DIMS];
  uint32_t shapes[PTO2_MAX_DIMS];
};

// Elements in the view / in the whole buffer.
static inline uint64_t pto2_tensor_numel(const Tensor* t) {
  uint64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i) n *= t->shapes[i];
  return n;
}
static inline uint64_t pto2_tensor_buffer_bytes(const Tensor* t) {
  uint64_t n = pto2_dtype_size(t->dtype);
  for (int32_t i = 0; i < t->ndim; ++i) n *= t->raw_shape[i];
  return n;
}
// Row-major stride (in elements) of dimension d of the underlying buffer.
static inline uint64_t pto2_tensor_stride(const Tensor* t, int32_t d) {
  uint64_t s = 1;
  for (int32_t i = d + 1; i < t->ndim; ++i) s *= t->raw_shape[i];
  return s;
}
// Element offset of the view's first element inside the buffer.
static inline uint64_t pto2_tensor_start(const Tensor* t) {
  uint64_t off = 0;
  for (int32_t i = 0; i < t->ndim; ++i) off += (uint64_t)t->offsets[i] * pto2_tensor_stride(t, i);
  return off;
}
// Pointer to the view's first element (kernels use this with pto2_tensor_stride).
static inline void* pto2_tensor_data(const Tensor* t) {
  return (void*)(uintptr_t)(t->addr + pto2_tensor_start(t) * pto2_dtype_size(t->dtype));
}

// A tensor over an existing buffer (device memory the caller owns).
static inline Tensor make_tensor_external(void* ptr, const uint32_t* shapes, int32_t ndim, int32_t dtype) {
  Tensor t;
  memset(&t, 0, sizeof(t));
  t.addr = (uint64_t)(uintptr_t)ptr;
  t.dtype = dtype;
  t.ndim = ndim;
  const int32_t n = ndim < 0 ? 0 : (ndim > PTO2_MAX_DIMS ? PTO2_MAX_DIMS : ndim);  // see tensor_view
  memcpy(t.raw_shape, shapes, (size_t)n * sizeof(uint32_t));
  memcpy(t.shapes, shapes, (size_t)n * sizeof(uint32_t));
  return t;
}
// An intermediate tensor: no storage until a task names it as OUTPUT; the
// runtime then allocates it from the heap ring and writes addr/owner back.
static inline Tensor make_tensor(const uint32_t* shapes, int32_t ndim, int32_t dtype) {
  return make_tensor_external(NULL, shapes, ndim, dtype);
}
// Cluster pipes (docs/runtime.md, "Pipes"): each cluster has
// PTO2_PIPES_PER_CLUSTER bounded FIFOs joining its cores. A pipe is named by
// a pipe tensor: no storage, an address in a range no memory uses, one byte
// to the TensorMap. Only tasks pinned to that cluster may name it.
#define PTO2_PIPES_PER_CLUSTER 2
#define PTO2_PIPE_ADDR_BASE 0xFFFFF00000000000ull
#define PTO2_PIPE_ADDR_STRIDE 16ull
static inline Tensor make_pipe_tensor(int32_t cluster_id, int32_t pipe) {
  const uint32_t shape[1] = {1};
  Tensor t = make_tensor(shape, 1, PTO2_UINT8);
  t.addr = PTO2_PIPE_ADDR_BASE +
           ((uint64_t)(uint32_t)cluster_id * PTO2_PIPES_PER_CLUSTER + (uint64_t)(uint32_t)pipe) * PTO2_PIPE_ADDR_STRIDE;
  return t;
}
static inline int pto2_is_pipe_tensor(const Tensor* t) { return t->addr >= PTO2_PIPE_ADDR_BASE; }
static inline int32_t pto2_pipe_cluster(const Tensor* t) {
  return (int32_t)((t->addr - PTO2_PIPE_ADDR_BASE) / PTO2_PIPE_ADDR_STRIDE / PTO2_PIPES_PER_CLUSTER);
}
static inline int32_t pto2_pipe_index(const Tensor* t) {
  return (int32_t)((t->addr - PTO2_PIPE_ADDR_BASE) / PTO2_PIPE_ADDR_STRIDE % PTO2_PIPES_PER_CLUSTER);
}

// A sub-box of t: offsets are relative to t's view, shapes must fit inside it.
// The view shares t's buffer (and so its dependencies and lifetime). An
// out-of-range view is rejected when it is submitted.
static inline Tensor tensor_view(const Tensor& t, const uint32_t* offsets, const uint32_t* shapes) {
  Tensor v = t;
  // offsets and shapes hold t.ndim entries. Copied with memcpy, not indexed
  // in a loop up to PTO2_MAX_DIMS: an optimiser that cannot see ndim would
  // otherwise warn about reading past a caller's shorter array.
  const int32_t n = t.ndim < 0 ? 0 : (t.ndim > PTO2_MAX_DIMS ? PTO2_MAX_DIMS : t.ndim);
  uint32_t off[PTO2_MAX_DIMS] = {0, 0, 0, 0};
  memcpy(off, offsets, (size_t)n * sizeof(uint32_t));
  memcpy(v.shapes, shapes, (size_t)n * sizeof(uint32_t));
  for (int32_t i = 0; i < PTO2_MAX_DIMS; ++i) v.offsets[i] = t.offsets[i] + off[i];
  return v;
}

enum PTOParamType : int32_t {
  PTO_PARAM_INPUT = 0,
  PTO_PARAM_OUTPUT = 1,
  PTO_PARAM_INOUT = 2,
  PTO_PARAM_SCALAR = 3,
  // The two ends of a cluster's local pipe (docs/runtime.md, "Pipes"): the
  // tensor is a pipe tensor (make_pipe_tensor); the kernel pushes into a
  // PIPE_OUT and pops from a PIPE_IN with pto2_pipe_push / pto2_pipe_pop.
  PTO_PARAM_PIPE_IN = 4,
  PTO_PARAM_PIPE_OUT = 5,
};

// A task parameter. Tensor parameters point at the caller's Tensor so that
// an OUTPUT allocated by the runtime is visible to later submits.
struct PTOParam {
  PTOParamType type;
  Tensor* tensor;
  uint64_t scalar;
};

static inline PTOParam make_input_param(Tensor& t) {
  PTOParam p = {PTO_PARAM_INPUT, &t, 0};
  return p;
}
static inline PTOParam make_output_param(Tensor& t) {
  PTOParam p = {PTO_PARAM_OUTPUT, &t, 0};
  return p;
}
static inline PTOParam make_inout_param(Tensor& t) {
  PTOParam p = {PTO_PARAM_INOUT, &t, 0};
  return p;
}
static inline PTOParam make_pipe_in_param(Tensor& pipe) {
  PTOParam p = {PTO_PARAM_PIPE_IN, &pipe, 0};
  return p;
}
static inline PTOParam make_pipe_out_param(Tensor& pipe) {
  PTOParam p = {PTO_PARAM_PIPE_OUT, &pipe, 0};
  return p;
}
static inline PTOParam make_scalar_param(uint64_t v) {
  PTOParam p = {PTO_PARAM_SCALAR, NULL, v};
  return p;
}
// An fp32 scalar travels as its bit pattern; kernels read it with pto2_scalar_f32.
static inline PTOParam make_scalar_param_f32(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return make_scalar_param(bits);
}

struct PTO2Runtime;

struct PTO2RuntimeOps {
  int64_t (*submit_task)(PTO2Runtime* rt, int32_t kernel_id, int32_t worker_type, PTOParam* params, int32_t num_params,
                         const int64_t* extra_deps, int32_t num_extra_deps);
  void (*scope_begin)(PTO2Runtime* rt);
  void (*scope_end)(PTO2Runtime* rt);
  void (*orchestration_done)(PTO2Runtime* rt);
  int32_t (*read_tensor)(PTO2Runtime* rt, const Tensor* t, void* dst, uint64_t dst_bytes);
  int32_t (*error_code)(PTO2Runtime* rt);
  const char* (*error_message)(PTO2Runtime* rt);
  // Added for the chip's programming model (docs/runtime.md §15); appended so
  // a library built against the older table keeps working.
  int64_t (*submit)(PTO2Runtime* rt, const struct PTO2TaskSpec* spec);
  int32_t (*allocate_cluster)(PTO2Runtime* rt);
  void (*free_cluster)(PTO2Runtime* rt, int32_t cluster_id);
  // Added for captured regions (docs/runtime.md §16).
  int32_t (*capture_begin)(PTO2Runtime* rt, uint64_t key, Tensor* const* bindings, int32_t num_bindings);
  void (*capture_end)(PTO2Runtime* rt, int32_t completed);
};

// Everything one submit can say (docs/runtime.md §15). pto2_task_spec() fills
// the plain defaults; the wrappers below set what they need.
struct PTO2TaskSpec {
  int32_t kernel_id;
  int32_t worker_type;
  PTOParam* params;
  int32_t num_params;
  const int64_t* deps;  // extra producers (task ids), as pto2_rt_submit_task_after
  int32_t num_deps;
  int32_t cluster_id;  // -1: any core; >= 0: only the cores of this allocated cluster
  // block_incore (SPMD): block_dim > 1 runs the kernel block_dim times, each
  // block seeing its block_idx in 0..block_dim-1 and block_num = block_dim.
  int32_t block_dim;
  // One block of an SPMD call submitted on its own (the expansion): the
  // block the kernel sees and the call's block count. -1 / 0: not such a block.
  int32_t block_idx;
  int32_t block_num;
};

static inline PTO2TaskSpec pto2_task_spec(int32_t kernel_id, int32_t worker_type, PTOParam* params,
                                          int32_t num_params) {
  PTO2TaskSpec s;
  memset(&s, 0, sizeof(s));
  s.kernel_id = kernel_id;
  s.worker_type = worker_type;
  s.params = params;
  s.num_params = num_params;
  s.cluster_id = -1;
  s.block_dim = 1;
  s.block_idx = -1;
  return s;
}

struct PTO2Runtime {
  const PTO2RuntimeOps* ops;
  void* impl;
};

// Kernel id used by dependency-only tasks (see pto2_rt_submit_dummy_task).
#define PTO2_KERNEL_DUMMY (-1)

// Submits one task. Returns its task id (>= 0) or a negative PTO2 error code.
static inline int64_t pto2_rt_submit_task(PTO2Runtime* rt, int32_t kernel_id, int32_t worker_type, PTOParam* params,
                                          int32_t num_params) {
  return rt->ops->submit_task(rt, kernel_id, worker_type, params, num_params, NULL, 0);
}
// Submits a task that also waits for the given task ids (explicit edges on top
// of the ones the TensorMap derives).
static inline int64_t pto2_rt_submit_task_after(PTO2Runtime* rt, int32_t kernel_id, int32_t worker_type,
                                                PTOParam* params, int32_t num_params, const int64_t* deps,
                                                int32_t num_deps) {
  return rt->ops->submit_task(rt, kernel_id, worker_type, params, num_params, deps, num_deps);
}
// A dependency-only task: runs no kernel and occupies no core. It completes as
// soon as everything its parameters depend on has completed, and later tasks
// that touch its OUTPUT/INOUT tensors are ordered after it (a join point).
static inline int64_t pto2_rt_submit_dummy_task(PTO2Runtime* rt, PTOParam* params, int32_t num_params) {
  return rt->ops->submit_task(rt, PTO2_KERNEL_DUMMY, PTO2_WORKER_VECTOR, params, num_params, NULL, 0);
}
// --- the chip's programming model (docs/runtime.md §15) ---
// Allocates a cluster (1 AIC + 2 AIV on a2a3) for a function group. Waits
// while none is free (BLOCKED warnings); fails the run with
// PTO2 code 18 (CLUSTER_DEADLOCK) when only this orchestration could free one.
// Returns the cluster id, or a negative error code.
static inline int32_t pto2_rt_allocate_cluster(PTO2Runtime* rt) { return rt->ops->allocate_cluster(rt); }
// Ends the function group: the cluster returns to the pool once every task
// pinned to it has completed. A cluster still allocated when the scope that
// allocated it ends is released then.
static inline void pto2_rt_free_cluster(PTO2Runtime* rt, int32_t cluster_id) { rt->ops->free_cluster(rt, cluster_id); }
// A task that runs only on the cores of cluster_id (TensorMap edges still order it).
static inline int64_t pto2_rt_submit_task_clustered(PTO2Runtime* rt, int32_t kernel_id, int32_t worker_type,
                                                    PTOParam* params, int32_t num_params, int32_t cluster_id) {
  PTO2TaskSpec s = pto2_task_spec(kernel_id, worker_type, params, num_params);
  s.cluster_id = cluster_id;
  return rt->ops->submit(rt, &s);
}
// block_incore: one submit, block_dim blocks of the same kernel over the same
// parameters; each block reads its block_idx from the kernel context and
// picks its share. Consumers of its outputs wait for every block. Returns the
// task id (in the expansion mode, the id of a join task after the blocks).
static inline int64_t pto2_rt_submit_block_task(PTO2Runtime* rt, int32_t kernel_id, int32_t worker_type,
                                                PTOParam* params, int32_t num_params, int32_t block_dim) {
  PTO2TaskSpec s = pto2_task_spec(kernel_id, worker_type, params, num_params);
  s.block_dim = block_dim;
  return rt->ops->submit(rt, &s);
}
// One block of an SPMD call, pinned to a cluster (the §17.3 pattern: each
// block's function group on its own cluster). cluster_id may be -1.
static inline int64_t pto2_rt_submit_block_clustered(PTO2Runtime* rt, int32_t kernel_id, int32_t worker_type,
                                                     PTOParam* params, int32_t num_params, int32_t block_idx,
                                                     int32_t block_num, int32_t cluster_id) {
  PTO2TaskSpec s = pto2_task_spec(kernel_id, worker_type, params, num_params);
  s.block_idx = block_idx;
  s.block_num = block_num;
  s.cluster_id = cluster_id;
  return rt->ops->submit(rt, &s);
}
static inline int64_t pto2_rt_submit(PTO2Runtime* rt, const PTO2TaskSpec* spec) { return rt->ops->submit(rt, spec); }

static inline void pto2_rt_scope_begin(PTO2Runtime* rt) { rt->ops->scope_begin(rt); }
static inline void pto2_rt_scope_end(PTO2Runtime* rt) { rt->ops->scope_end(rt); }
static inline void pto2_rt_orchestration_done(PTO2Runtime* rt) { rt->ops->orchestration_done(rt); }
// Waits until every task that writes any part of t has completed, then copies
// the view's elements (row-major, dense) into dst. Returns 0 or an error code.
static inline int32_t pto2_rt_read_tensor(PTO2Runtime* rt, const Tensor* t, void* dst, uint64_t dst_bytes) {
  return rt->ops->read_tensor(rt, t, dst, dst_bytes);
}
// --- captured regions (docs/runtime.md §16) ---
// The task graph a region submits — kernels, parameters, scalars, edges,
// scopes, output allocations — is recorded on its first execution under key
// and replayed on later ones (in this run or later runs of the Runtime)
// without running the region's code: no TensorMap work, no validation, only
// the rings, the descriptors with addresses rebound and the recorded edges.
//  * bindings: the region's view of the world. Every buffer the region's
//    tasks name that the region does not allocate itself must be (a view of)
//    one of them; a replay rebinds their addresses. Their dtypes and shapes
//    are checked: a replay with other shapes records the region again.
//  * key: everything else the region's code reads that shapes its graph or
//    its scalars (sizes, loop counts, a block table) must be in the key.
//    PTO2_CAPTURE_MODE=verify runs the code every time and warns where a
//    recording would have replayed something else.
//  * The region is a scope. It may not read tensors, allocate clusters, pin
//    tasks, use pipes or expand block tasks, nor name tasks outside it.
// Returns 1 when the caller must run the region's code and then call
// pto2_rt_capture_end, 0 when the region was replayed (or the run has failed).
static inline int32_t pto2_rt_capture_begin(PTO2Runtime* rt, uint64_t key, Tensor* const* bindings,
                                            int32_t num_bindings) {
  return rt->ops->capture_begin(rt, key, bindings, num_bindings);
}
// Ends the region; its recording is kept for replays.
static inline void pto2_rt_capture_end(PTO2Runtime* rt) { rt->ops->capture_end(rt, 1); }
// Ends a region whose code did not run to its end (a return or break out of
// it): the region's scope closes and the partial recording is dropped.
static inline void pto2_rt_capture_abandon(PTO2Runtime* rt) { rt->ops->capture_end(rt, 0); }
static inline int32_t pto2_rt_error(PTO2Runtime* rt) { return rt->ops->error_code(rt); }
static inline const char* pto2_rt_error_message(PTO2Runtime* rt) { return rt->ops->error_message(rt); }
// Kept for source compatibility with the reference design; the tensor pool needs no setup.
static inline void pto2_rt_init_tensor_pool(PTO2Runtime* rt) { (void)rt; }

#ifdef __cplusplus
// RAII scope: PTO2_SCOPE(rt) { ... } — tasks submitted inside belong to it and
// its runtime-allocated buffers live until it ends and their last user is done.
struct PTO2ScopeGuard {
  PTO2Runtime* rt;
  bool once;
  explicit PTO2ScopeGuard(PTO2Runtime* r) : rt(r), once(true) { pto2_rt_scope_begin(rt); }
  ~PTO2ScopeGuard() { pto2_rt_scope_end(rt); }
  PTO2ScopeGuard(const PTO2ScopeGuard&) = delete;
  PTO2ScopeGuard& operator=(const PTO2ScopeGuard&) = delete;
};
#define PTO2_SCOPE(rt) \
  for (PTO2ScopeGuard pto2_scope_guard_((rt)); pto2_scope_guard_.once; pto2_scope_guard_.once = false)

// PTO2_CAPTURE(rt, key, bindings, n) { ... }: the block runs only when the
// region is being recorded (see pto2_rt_capture_begin). Leaving the block
// early (return, break) abandons the recording: `once` is still set then.
struct PTO2CaptureGuard {
  PTO2Runtime* rt;
  bool recording;
  bool once;
  PTO2CaptureGuard(PTO2Runtime* r, uint64_t key, Tensor* const* bindings, int32_t n)
      : rt(r), recording(pto2_rt_capture_begin(r, key, bindings, n) == 1), once(recording) {}
  ~PTO2CaptureGuard() {
    if (recording) rt->ops->capture_end(rt, once ? 0 : 1);
  }
  PTO2CaptureGuard(const PTO2CaptureGuard&) = delete;
  PTO2CaptureGuard& operator=(const PTO2CaptureGuard&) = delete;
};
#define PTO2_CAPTURE(rt, key, bindings, num_bindings)                                                           \
  for (PTO2CaptureGuard pto2_capture_guard_((rt), (key), (bindings), (num_bindings)); pto2_capture_guard_.once; \
       pto2_capture_guard_.once = false)
#endif

// What an orchestration library exports (docs/runtime.md §11).
struct PTO2OrchestrationConfig {
  int32_t expected_arg_count;
};
typedef PTO2OrchestrationConfig (*PTO2OrchestrationConfigFn)(uint64_t* args, int arg_count);
typedef int (*PTO2OrchestrationEntryFn)(PTO2Runtime* rt, uint64_t* args, int arg_count);
#define PTO2_ORCHESTRATION_CONFIG_SYMBOL "aicpu_orchestration_config"
#define PTO2_ORCHESTRATION_ENTRY_SYMBOL "aicpu_orchestration_entry"
