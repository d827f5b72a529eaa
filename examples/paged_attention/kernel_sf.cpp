// AIV: softmax preparation of one block, masked to its valid columns.
// args: s [H, BS], p [H, BS] (OUTPUT), m [H] (OUTPUT), l [H] (OUTPUT), valid (int).
//   m = rowmax(s[:, :valid]), p = exp(s - m) (0 past valid), l = rowsum(p)
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* s = pto2_arg_tensor(args, 0);
  const uint64_t H = s->shapes[0], BS = s->shapes[1], valid = static_cast<uint64_t>(args[4]);
  const float* sp = pa_f32(args, 0);
  float *p = pa_f32(args, 1), *m = pa_f32(args, 2), *l = pa_f32(args, 3);
  for (uint64_t h = 0; h < H; ++h) {
    float mx = -INFINITY;
    for (uint64_t j = 0; j < valid; ++j) mx = std::fmax(mx, sp[h * BS + j]);
    float sum = 0.f;
    for (uint64_t j = 0; j < BS; ++j) {
      const float e = j < valid ? std::exp(sp[h * BS + j] - mx) : 0.f;
      p[h * BS + j] = e;
      sum += e;
    }
    m[h] = mx;
    l[h] = sum;
  }
}
