// Batch-norm inference, the operator the TX8 document develops step by step:
//   y = scale * (x - mean) / sqrt(var + eps) + shift, per channel.
// x and y are NHWC float32 [N, H, W, C]; scale, shift, mean, var are [C].
// One block task: the sharding search (pto2/sharding.h) spreads the output
// over `tiles` tiles, sharding only the channel dimension (batch norm's
// statistics are per channel, so a channel's positions stay on one tile);
// each block takes its channels. On tx8sim a block stages its channels'
// parameters and its rows of x through its tile's SPM (kernel_bn.cpp).
// Arguments: x, scale, shift, mean, var, y, eps (float32), tiles, align.
#include "pto2/orchestration_api.h"
#include "pto2/sharding.h"

extern "C" PTO2OrchestrationConfig aicpu_orchestration_config(uint64_t*, int) { return {9}; }

extern "C" int aicpu_orchestration_entry(PTO2Runtime* rt, uint64_t* args, int arg_count) {
  if (arg_count != 9) return 1;
  const uint32_t n = 2, h = 14, w = 14, c = 256;  // the config's shapes
  const uint32_t shape[4] = {n, h, w, c};
  const uint32_t cshape[1] = {c};
  Tensor x = make_tensor_external(reinterpret_cast<void*>(args[0]), shape, 4, PTO2_FLOAT32);
  Tensor scale = make_tensor_external(reinterpret_cast<void*>(args[1]), cshape, 1, PTO2_FLOAT32);
  Tensor shift = make_tensor_external(reinterpret_cast<void*>(args[2]), cshape, 1, PTO2_FLOAT32);
  Tensor mean = make_tensor_external(reinterpret_cast<void*>(args[3]), cshape, 1, PTO2_FLOAT32);
  Tensor var = make_tensor_external(reinterpret_cast<void*>(args[4]), cshape, 1, PTO2_FLOAT32);
  Tensor y = make_tensor_external(reinterpret_cast<void*>(args[5]), shape, 4, PTO2_FLOAT32);
  const int32_t tiles = static_cast<int32_t>(args[7]);
  const uint32_t align = static_cast<uint32_t>(args[8]);
  // Only dimension 3 (C) may be sharded.
  const PTO2ShardPlan plan = pto2_shard_search(shape, 4, tiles, align, 1u << 3);
  PTOParam p[] = {make_input_param(x),        make_input_param(scale),
                  make_input_param(shift),    make_input_param(mean),
                  make_input_param(var),      make_output_param(y),
                  make_scalar_param(args[6]), make_scalar_param(static_cast<uint64_t>(tiles)),
                  make_scalar_param(align)};
  pto2_rt_submit_block_task(rt, 0, PTO2_WORKER_VECTOR, p, 9, plan.blocks);
  return pto2_rt_error(rt);
}
