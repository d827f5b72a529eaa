// AIV: softmax preparation of one block, masked to its valid columns.
// args: s [H, BS], p [H, BS] (OUTPUT), m [H] (OUTPUT), l [H] (OUTPUT), valid (int).
//   m = rowmax(s[:, :valid]), p = exp(s - m) (0 past valid), l = rowsum(p)
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* s = pto2_arg_tensor(args, 0);
  pa_sf(pa_f32(args, 0), pa_f32(args, 1), pa_f32(args, 2), pa_f32(args, 3), s->shapes[0], s->shapes[1],
        static_cast<uint64_t>(args[4]));
}
