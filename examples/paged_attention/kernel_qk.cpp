// AIC: s = q @ k^T * scale for one KV block.
// args: q [1, H, D] (view of query), k [1, BS, D] (view of key_cache), s [H, BS] (OUTPUT), scale (fp32 bits).
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* q = pto2_arg_tensor(args, 0);
  const Tensor* k = pto2_arg_tensor(args, 1);
  pa_qk(pa_f32(args, 0), pa_f32(args, 1), pa_f32(args, 2), q->shapes[1], q->shapes[2], k->shapes[1],
        pto2_scalar_f32(args[3]));
}
