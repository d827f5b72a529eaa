// AIC, block_incore: block j computes o[j] = p[j] @ v_j for the sequence's
// j-th KV block (physical block table[j]).
// args: p [nblocks, H, BS], value_cache [NB, BS, D], table [1, MB] int32 (the
//       sequence's row), o [nblocks, H, D] (OUTPUT).
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 4);
  const Tensor* p = pto2_arg_tensor(args, 0);
  const Tensor* vc = pto2_arg_tensor(args, 1);
  const uint64_t H = p->shapes[1], BS = p->shapes[2], D = vc->shapes[2];
  const auto j = static_cast<uint64_t>(ctx->block_idx);
  const auto blk = static_cast<uint64_t>(static_cast<const int32_t*>(pto2_tensor_data(pto2_arg_tensor(args, 2)))[j]);
  pa_pv(pa_f32(args, 0) + j * H * BS, pa_f32(args, 1) + blk * BS * D, pa_f32(args, 3) + j * H * D, H, BS, D);
}
