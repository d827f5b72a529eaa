// AIV, block_incore: block j prepares the softmax of s[j], masked to the
// positions of the context that fall in the sequence's j-th KV block.
// args: s [nblocks, H, BS], p [nblocks, H, BS] (OUTPUT), m [nblocks, H] (OUTPUT),
//       l [nblocks, H] (OUTPUT), context length (int).
#include <algorithm>

#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 5);
  const Tensor* s = pto2_arg_tensor(args, 0);
  const uint64_t H = s->shapes[1], BS = s->shapes[2];
  const auto j = static_cast<uint64_t>(ctx->block_idx);
  const uint64_t valid = std::min<uint64_t>(BS, static_cast<uint64_t>(args[4]) - j * BS);
  pa_sf(pa_f32(args, 0) + j * H * BS, pa_f32(args, 1) + j * H * BS, pa_f32(args, 2) + j * H, pa_f32(args, 3) + j * H,
        H, BS, valid);
}
