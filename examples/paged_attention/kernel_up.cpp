// AIV: online-softmax update with one block's results.
// args: mij [H], lij [H], oij [H, D] (INPUT); oi [H, D], li [H], mi [H] (INOUT);
//       last (int); out [1, H, D] (OUTPUT, present when last): out = oi / li.
#include "kernels.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* oi_t = pto2_arg_tensor(args, 3);
  const uint64_t H = oi_t->shapes[0], D = oi_t->shapes[1];
  const float *mij = pa_f32(args, 0), *lij = pa_f32(args, 1), *oij = pa_f32(args, 2);
  float *oi = pa_f32(args, 3), *li = pa_f32(args, 4), *mi = pa_f32(args, 5);
  const bool last = args[6] != 0;
  for (uint64_t h = 0; h < H; ++h) {
    const float m_new = std::fmax(mi[h], mij[h]);
    const float alpha = std::exp(mi[h] - m_new);  // exp(-inf) = 0 on the first block
    const float beta = std::exp(mij[h] - m_new);
    li[h] = alpha * li[h] + beta * lij[h];
    for (uint64_t d = 0; d < D; ++d) oi[h * D + d] = alpha * oi[h * D + d] + beta * oij[h * D + d];
    mi[h] = m_new;
  }
  if (last) {
    float* out = pa_f32(args, 7);
    for (uint64_t h = 0; h < H; ++h)
      for (uint64_t d = 0; d < D; ++d) out[h * D + d] = oi[h * D + d] / li[h];
  }
}
