// A fused matmul + activation, C = GELU(A @ B), as cube + vector function
// groups on clusters (docs/runtime.md §15): the rows of C are split into
// `blocks` blocks; each block allocates a cluster, its cube kernel computes
// the block's rows of A @ B and pushes them through the cluster's pipe, its
// vector kernel pops them and writes GELU of them into C. The intermediate
// never reaches global memory. More blocks than clusters wait for clusters
// to come free (back-pressure).
// Arguments: A [M, K], B [K, N], C [M, N] (output), M, K, N, blocks.
#include "pto2/orchestration_api.h"

namespace {
enum : int32_t { kGemmPush = 0, kActPop = 1 };
}  // namespace

extern "C" PTO2OrchestrationConfig aicpu_orchestration_config(uint64_t*, int) { return {7}; }

extern "C" int aicpu_orchestration_entry(PTO2Runtime* rt, uint64_t* args, int) {
  const uint32_t M = uint32_t(args[3]), K = uint32_t(args[4]), N = uint32_t(args[5]), blocks = uint32_t(args[6]);
  if (blocks == 0 || M % blocks != 0) return 1;  // every block takes M / blocks rows
  const uint32_t ashape[2] = {M, K}, bshape[2] = {K, N}, cshape[2] = {M, N};
  Tensor a = make_tensor_external(reinterpret_cast<void*>(args[0]), ashape, 2, PTO2_FLOAT32);
  Tensor b = make_tensor_external(reinterpret_cast<void*>(args[1]), bshape, 2, PTO2_FLOAT32);
  Tensor c = make_tensor_external(reinterpret_cast<void*>(args[2]), cshape, 2, PTO2_FLOAT32);
  const uint32_t rows = M / blocks;
  for (uint32_t blk = 0; blk < blocks; ++blk) {
    const int32_t cid = pto2_rt_allocate_cluster(rt);  // waits while every cluster is busy
    if (cid < 0) break;
    Tensor pipe = make_pipe_tensor(cid, 0);
    PTOParam gemm[] = {make_input_param(a), make_input_param(b), make_pipe_out_param(pipe)};
    pto2_rt_submit_block_clustered(rt, kGemmPush, PTO2_WORKER_CUBE, gemm, 3, int32_t(blk), int32_t(blocks), cid);
    const uint32_t off[2] = {blk * rows, 0}, shape[2] = {rows, N};
    Tensor cb = tensor_view(c, off, shape);
    PTOParam act[] = {make_pipe_in_param(pipe), make_output_param(cb)};
    pto2_rt_submit_block_clustered(rt, kActPop, PTO2_WORKER_VECTOR, act, 2, int32_t(blk), int32_t(blocks), cid);
    pto2_rt_free_cluster(rt, cid);  // back in the pool once both have run
  }
  return pto2_rt_error(rt);
}
