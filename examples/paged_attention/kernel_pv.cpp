// AIC: o = p @ v for one KV block.
// args: p [H, BS], v [1, BS, D] (view of value_cache), o [H, D] (OUTPUT).
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* p = pto2_arg_tensor(args, 0);
  const Tensor* v = pto2_arg_tensor(args, 1);
  pa_pv(pa_f32(args, 0), pa_f32(args, 1), pa_f32(args, 2), p->shapes[0], p->shapes[1], v->shapes[2]);
}
