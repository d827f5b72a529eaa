// AIV: initialise the online-softmax accumulators of one q tile.
// args: oi [H, D] (OUTPUT), li [H] (OUTPUT), mi [H] (OUTPUT).
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* oi = pto2_arg_tensor(args, 0);
  const uint64_t H = oi->shapes[0], D = oi->shapes[1];
  float *o = pa_f32(args, 0), *l = pa_f32(args, 1), *m = pa_f32(args, 2);
  for (uint64_t i = 0; i < H * D; ++i) o[i] = 0.f;
  for (uint64_t h = 0; h < H; ++h) {
    l[h] = 0.f;
    m[h] = -INFINITY;
  }
}
