// Paged attention with online softmax as SPMD stages (block_incore,
// docs/runtime.md §15), fp32: the same computation and golden as
// orchestration.cpp, but per query one block submit per stage across the
// sequence's KV blocks instead of one task per block and stage:
//   HUB  initialises the accumulators oi, li, mi
//   QK   (AIC, block_dim = nblocks)  s[j] = q @ k_j^T * scale
//   SF   (AIV, block_dim = nblocks)  p[j], m[j], l[j]
//   PV   (AIC, block_dim = nblocks)  o[j] = p[j] @ v_j
//   UP   (AIV, one task per block, in order: the online-softmax reduction is
//        sequential) folds m[j], l[j], o[j] into oi, li, mi; the last writes out
// Every UP waits for all blocks of PV (the TensorMap sees one writer of o).
// Arguments as orchestration.cpp: query [B,H,D], key_cache [NB,BS,D],
// value_cache [NB,BS,D], block_table [B,MB] int32, context_lens [B] int32,
// out [B,H,D], B, H, D, BS, MB.
#include <cmath>

#include "pto2/orchestration_api.h"

namespace {
enum : int32_t { kUP = 3, kHUB = 5, kQKs = 6, kSFs = 7, kPVs = 8 };
}  // namespace

extern "C" PTO2OrchestrationConfig aicpu_orchestration_config(uint64_t*, int) { return {11}; }

extern "C" int aicpu_orchestration_entry(PTO2Runtime* rt, uint64_t* args, int) {
  const uint32_t B = uint32_t(args[6]), H = uint32_t(args[7]), D = uint32_t(args[8]), BS = uint32_t(args[9]),
                 MB = uint32_t(args[10]);
  const auto* block_table = reinterpret_cast<const int32_t*>(args[3]);
  const auto* context_lens = reinterpret_cast<const int32_t*>(args[4]);
  const uint32_t NB = B * MB;
  const uint32_t qshape[3] = {B, H, D}, kvshape[3] = {NB, BS, D}, tshape[2] = {B, MB};
  Tensor query = make_tensor_external(reinterpret_cast<void*>(args[0]), qshape, 3, PTO2_FLOAT32);
  Tensor kcache = make_tensor_external(reinterpret_cast<void*>(args[1]), kvshape, 3, PTO2_FLOAT32);
  Tensor vcache = make_tensor_external(reinterpret_cast<void*>(args[2]), kvshape, 3, PTO2_FLOAT32);
  Tensor table = make_tensor_external(reinterpret_cast<void*>(args[3]), tshape, 2, PTO2_INT32);
  Tensor out = make_tensor_external(reinterpret_cast<void*>(args[5]), qshape, 3, PTO2_FLOAT32);
  const float scale = 1.f / std::sqrt(float(D));
  const uint32_t hd[2] = {H, D}, h1[1] = {H};

  for (uint32_t b = 0; b < B; ++b) {
    const int32_t ctx = context_lens[b];
    if (ctx <= 0 || uint32_t(ctx) > MB * BS) return 100 + int(b);  // a bad context length fails the run
    const uint32_t nblocks = (uint32_t(ctx) + BS - 1) / BS;
    for (uint32_t j = 0; j < nblocks; ++j)
      if (block_table[b * MB + j] < 0 || uint32_t(block_table[b * MB + j]) >= NB) return 200 + int(b);
    PTO2_SCOPE(rt) {
      Tensor oi = make_tensor(hd, 2, PTO2_FLOAT32), li = make_tensor(h1, 1, PTO2_FLOAT32),
             mi = make_tensor(h1, 1, PTO2_FLOAT32);
      PTOParam hub[] = {make_output_param(oi), make_output_param(li), make_output_param(mi)};
      pto2_rt_submit_task(rt, kHUB, PTO2_WORKER_VECTOR, hub, 3);
      const uint32_t q_off[3] = {b, 0, 0}, q_shape[3] = {1, H, D}, t_off[2] = {b, 0}, t_shape[2] = {1, MB};
      Tensor q = tensor_view(query, q_off, q_shape), row = tensor_view(table, t_off, t_shape);
      const uint32_t s_shape[3] = {nblocks, H, BS}, ml_shape[2] = {nblocks, H}, o_shape[3] = {nblocks, H, D};
      Tensor s = make_tensor(s_shape, 3, PTO2_FLOAT32), p = make_tensor(s_shape, 3, PTO2_FLOAT32),
             m = make_tensor(ml_shape, 2, PTO2_FLOAT32), l = make_tensor(ml_shape, 2, PTO2_FLOAT32),
             o = make_tensor(o_shape, 3, PTO2_FLOAT32);
      const auto n = int32_t(nblocks);
      PTOParam qk[] = {make_input_param(q), make_input_param(kcache), make_input_param(row), make_output_param(s),
                       make_scalar_param_f32(scale)};
      pto2_rt_submit_block_task(rt, kQKs, PTO2_WORKER_CUBE, qk, 5, n);
      PTOParam sf[] = {make_input_param(s), make_output_param(p), make_output_param(m), make_output_param(l),
                       make_scalar_param(uint64_t(ctx))};
      pto2_rt_submit_block_task(rt, kSFs, PTO2_WORKER_VECTOR, sf, 5, n);
      PTOParam pv[] = {make_input_param(p), make_input_param(vcache), make_input_param(row), make_output_param(o)};
      pto2_rt_submit_block_task(rt, kPVs, PTO2_WORKER_CUBE, pv, 4, n);
      Tensor ob = tensor_view(out, q_off, q_shape);
      for (uint32_t j = 0; j < nblocks; ++j) {
        const uint32_t ml_off[2] = {j, 0}, ml_one[2] = {1, H}, o_off[3] = {j, 0, 0}, o_one[3] = {1, H, D};
        Tensor mj = tensor_view(m, ml_off, ml_one), lj = tensor_view(l, ml_off, ml_one),
               oj = tensor_view(o, o_off, o_one);
        const bool last = j + 1 == nblocks;
        PTOParam up[] = {make_input_param(mj), make_input_param(lj), make_input_param(oj),   make_inout_param(oi),
                         make_inout_param(li), make_inout_param(mi), make_scalar_param(last), make_output_param(ob)};
        pto2_rt_submit_task(rt, kUP, PTO2_WORKER_VECTOR, up, last ? 8 : 7);
      }
    }
  }
  return pto2_rt_error(rt);
}
