// CT kernel: one block of batch-norm inference (orchestration.cpp). args: x,
// scale, shift, mean, var, y, eps (float32 bits), tiles, align.
//
// The block finds its channels [c0, c1) from the same sharding plan the
// orchestration chose. On a chip with tiles (tx8sim) it works out of its
// tile's SPM, as the TX8 document's operator does: the four parameter slices
// are loaded (RDMA) and folded into a per-channel multiplier and offset,
// then the block's rows of x are streamed through SPM in chunks — load
// (strided: its channels of each position), compute, store (WDMA) — the
// "split in time" of a sharded group. Elsewhere it reads and writes DDR.
#include <math.h>

#include "pto2/kernel_abi.h"
#include "pto2/sharding.h"

namespace {

constexpr uint32_t kChunkChannels = 64;  // channels folded at a time without tiles

void fold(const float* scale, const float* shift, const float* mean, const float* var, float eps, uint32_t cw,
          float* mul, float* add) {
  for (uint32_t i = 0; i < cw; ++i) {
    mul[i] = scale[i] / sqrtf(var[i] + eps);
    add[i] = shift[i] - mean[i] * mul[i];
  }
}

void normalise(float* row, uint64_t stride, uint64_t rows, uint32_t cw, const float* mul, const float* add,
               const float* in, uint64_t in_stride) {
  for (uint64_t r = 0; r < rows; ++r)
    for (uint32_t i = 0; i < cw; ++i) row[r * stride + i] = in[r * in_stride + i] * mul[i] + add[i];
}

}  // namespace

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* x = pto2_arg_tensor(args, 0);
  const Tensor* y = pto2_arg_tensor(args, 5);
  const float eps = pto2_scalar_f32(args[6]);
  const int32_t tiles = static_cast<int32_t>(args[7]);
  const uint32_t align = static_cast<uint32_t>(args[8]);
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 9);
  const uint32_t* shape = y->shapes;
  const PTO2ShardPlan plan = pto2_shard_search(shape, 4, tiles, align, 1u << 3);
  uint32_t c0 = 0, c1 = 0;
  pto2_shard_range(&plan, shape, align, ctx->block_idx, 3, &c0, &c1);
  if (c0 >= c1) return;
  const uint32_t cw = c1 - c0, channels = shape[3];
  const uint64_t positions = uint64_t(shape[0]) * shape[1] * shape[2];
  const float* xs = static_cast<const float*>(pto2_tensor_data(x)) + c0;
  float* ys = static_cast<float*>(pto2_tensor_data(y)) + c0;
  const float* params[4];
  for (int i = 0; i < 4; ++i)
    params[i] = static_cast<const float*>(pto2_tensor_data(pto2_arg_tensor(args, 1 + i))) + c0;

  if (pto2_tile(ctx) == nullptr) {  // a chip without tiles: straight from DDR
    float mul[kChunkChannels], add[kChunkChannels];
    for (uint32_t done = 0; done < cw; done += kChunkChannels) {
      const uint32_t n = cw - done < kChunkChannels ? cw - done : kChunkChannels;
      fold(params[0] + done, params[1] + done, params[2] + done, params[3] + done, eps, n, mul, add);
      normalise(ys + done, channels, positions, n, mul, add, xs + done, channels);
    }
    return;
  }
  // On a tile: parameters into SPM, folded in place.
  float* p[4];
  for (int i = 0; i < 4; ++i) {
    p[i] = static_cast<float*>(pto2_spm_alloc(ctx, cw * sizeof(float)));
    if (p[i] == nullptr || pto2_dma_load(ctx, p[i], params[i], cw * sizeof(float), 1, cw * sizeof(float)) != 0) return;
  }
  fold(p[0], p[1], p[2], p[3], eps, cw, p[0], p[1]);  // p[0] = multiplier, p[1] = offset
  // Rows of x through what is left of the SPM, at most 64 positions at a time.
  const uint64_t row_bytes = uint64_t(cw) * sizeof(float);
  const uint64_t chunk = positions < 64 ? positions : 64;
  float* buf = static_cast<float*>(pto2_spm_alloc(ctx, chunk * row_bytes));
  if (buf == nullptr) return;
  for (uint64_t r = 0; r < positions; r += chunk) {
    const uint64_t rows = positions - r < chunk ? positions - r : chunk;
    if (pto2_dma_load(ctx, buf, xs + r * channels, row_bytes, rows, channels * sizeof(float)) != 0) return;
    normalise(buf, cw, rows, cw, p[0], p[1], buf, cw);
    if (pto2_dma_store(ctx, ys + r * channels, channels * sizeof(float), buf, row_bytes, rows) != 0) return;
  }
}
