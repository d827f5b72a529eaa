// AIC: s = q @ k^T * scale for one KV block.
// args: q [1, H, D] (view of query), k [1, BS, D] (view of key_cache), s [H, BS] (OUTPUT), scale (fp32 bits).
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* q = pto2_arg_tensor(args, 0);
  const Tensor* k = pto2_arg_tensor(args, 1);
  const uint64_t H = q->shapes[1], D = q->shapes[2], BS = k->shapes[1];
  const float *qp = pa_f32(args, 0), *kp = pa_f32(args, 1);
  float* s = pa_f32(args, 2);
  const float scale = pto2_scalar_f32(args[3]);
  for (uint64_t h = 0; h < H; ++h)
    for (uint64_t j = 0; j < BS; ++j) {
      float acc = 0.f;
      for (uint64_t d = 0; d < D; ++d) acc += qp[h * D + d] * kp[j * D + d];
      s[h * BS + j] = acc * scale;
    }
}
