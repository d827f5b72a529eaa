// AIC, block_incore: block j of the call computes s[j] = q @ k_j^T * scale for
// the sequence's j-th KV block (physical block table[j]).
// args: q [1, H, D] (view of query), key_cache [NB, BS, D], table [1, MB] int32
//       (the sequence's row), s [nblocks, H, BS] (OUTPUT), scale (fp32 bits).
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 5);
  const Tensor* q = pto2_arg_tensor(args, 0);
  const Tensor* kc = pto2_arg_tensor(args, 1);
  const uint64_t H = q->shapes[1], D = q->shapes[2], BS = kc->shapes[1];
  const auto j = static_cast<uint64_t>(ctx->block_idx);
  const auto blk = static_cast<uint64_t>(static_cast<const int32_t*>(pto2_tensor_data(pto2_arg_tensor(args, 2)))[j]);
  pa_qk(pa_f32(args, 0), pa_f32(args, 1) + blk * BS * D, pa_f32(args, 3) + j * H * BS, H, D, BS,
        pto2_scalar_f32(args[4]));
}
