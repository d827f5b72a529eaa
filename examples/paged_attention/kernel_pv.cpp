// AIC: o = p @ v for one KV block.
// args: p [H, BS], v [1, BS, D] (view of value_cache), o [H, D] (OUTPUT).
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* p = pto2_arg_tensor(args, 0);
  const Tensor* v = pto2_arg_tensor(args, 1);
  const uint64_t H = p->shapes[0], BS = p->shapes[1], D = v->shapes[2];
  const float *pp = pa_f32(args, 0), *vp = pa_f32(args, 1);
  float* o = pa_f32(args, 2);
  for (uint64_t h = 0; h < H; ++h)
    for (uint64_t d = 0; d < D; ++d) {
      float acc = 0.f;
      for (uint64_t j = 0; j < BS; ++j) acc += pp[h * BS + j] * vp[j * D + d];
      o[h * D + d] = acc;
    }
}
