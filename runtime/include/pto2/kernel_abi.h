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

// A tile of a spatial chip (tx8sim, docs/tx8sim.md), as its kernels see it:
// where it sits in the mesh, its scratch-pad memory (SPM) and the data
// movers. Kernels reach the movers through the pto2_spm_* / pto2_dma_* /
// pto2_noc_* helpers below, which also charge the simulated time.
struct PTO2TileOps {
  // Reserves bytes of this task's SPM (64-byte aligned); null when the
  // engine's share cannot hold them (the run fails, naming the task and sizes).
  void* (*spm_alloc)(void* impl, uint64_t bytes);
  // A 2-D copy: rows of row_bytes, dst_stride / src_stride bytes apart. kind:
  // PTO2_DMA_LOAD DDR->SPM (RDMA), PTO2_DMA_STORE SPM->DDR (WDMA),
  // PTO2_DMA_LOCAL SPM->SPM within the tile (TDMA). Returns 0 or an error code.
  int32_t (*dma)(void* impl, int32_t kind, void* dst, uint64_t dst_stride, const void* src, uint64_t src_stride,
                 uint64_t row_bytes, uint64_t rows);
  // Between this tile's SPM and another tile's, over the NoC: put copies
  // local -> (tile, offset), get copies (tile, offset) -> local.
  int32_t (*noc)(void* impl, int32_t put, int32_t tile, uint64_t remote_offset, void* local, uint64_t bytes);
};
#define PTO2_DMA_LOAD 0
#define PTO2_DMA_STORE 1
#define PTO2_DMA_LOCAL 2

struct PTO2TileContext {
  int32_t x, y;            // this tile's place in the mesh
  int32_t mesh_x, mesh_y;  // the mesh (tile index = y * mesh_x + x)
  int32_t tile;            // y * mesh_x + x
  int32_t engine;          // PTO2_WORKER_CUBE: the neural engine (NE); PTO2_WORKER_VECTOR: the CGRA tensor unit (CT)
  uint8_t* spm;            // this engine's share of the tile's SPM
  uint64_t spm_bytes;
  const PTO2TileOps* ops;
  void* impl;
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
  // Appended for spatial chips: the tile running the kernel; null on a chip
  // without tiles (a2a3sim).
  const PTO2TileContext* tile;
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

// --- tiles (tx8sim) ---
// A kernel written for tiles checks pto2_tile(ctx) != NULL; on any other chip
// it reads and writes DDR through the tensors' pointers, as everywhere.
static inline const PTO2TileContext* pto2_tile(const PTO2KernelContext* ctx) { return ctx->tile; }
static inline void* pto2_spm_alloc(const PTO2KernelContext* ctx, uint64_t bytes) {
  return ctx->tile ? ctx->tile->ops->spm_alloc(ctx->tile->impl, bytes) : (void*)0;
}
// rows x row_bytes from DDR (rows src_stride bytes apart) into SPM (packed).
static inline int32_t pto2_dma_load(const PTO2KernelContext* ctx, void* spm_dst, const void* ddr_src,
                                    uint64_t row_bytes, uint64_t rows, uint64_t src_stride) {
  return ctx->tile ? ctx->tile->ops->dma(ctx->tile->impl, PTO2_DMA_LOAD, spm_dst, row_bytes, ddr_src, src_stride,
                                         row_bytes, rows)
                   : 2;
}
// rows x row_bytes from SPM (packed) into DDR (rows dst_stride bytes apart).
static inline int32_t pto2_dma_store(const PTO2KernelContext* ctx, void* ddr_dst, uint64_t dst_stride,
                                     const void* spm_src, uint64_t row_bytes, uint64_t rows) {
  return ctx->tile ? ctx->tile->ops->dma(ctx->tile->impl, PTO2_DMA_STORE, ddr_dst, dst_stride, spm_src, row_bytes,
                                         row_bytes, rows)
                   : 2;
}
static inline int32_t pto2_noc_put(const PTO2KernelContext* ctx, int32_t tile, uint64_t remote_offset,
                                   const void* spm_src, uint64_t bytes) {
  return ctx->tile ? ctx->tile->ops->noc(ctx->tile->impl, 1, tile, remote_offset, (void*)(uintptr_t)spm_src, bytes) : 2;
}
static inline int32_t pto2_noc_get(const PTO2KernelContext* ctx, int32_t tile, uint64_t remote_offset, void* spm_dst,
                                   uint64_t bytes) {
  return ctx->tile ? ctx->tile->ops->noc(ctx->tile->impl, 0, tile, remote_offset, spm_dst, bytes) : 2;
}
