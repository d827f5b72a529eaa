// Host reference for paged attention: plain softmax attention per head over
// the sequence's valid positions, gathered through the block table.
#include <cmath>
#include <cstdint>
#include <vector>

extern "C" int pto2_reference(uint64_t* args, int arg_count) {
  if (arg_count != 11) return 1;
  const float* q = reinterpret_cast<const float*>(args[0]);
  const float* kc = reinterpret_cast<const float*>(args[1]);
  const float* vc = reinterpret_cast<const float*>(args[2]);
  const int32_t* table = reinterpret_cast<const int32_t*>(args[3]);
  const int32_t* lens = reinterpret_cast<const int32_t*>(args[4]);
  float* out = reinterpret_cast<float*>(args[5]);
  const uint64_t B = args[6], H = args[7], D = args[8], BS = args[9], MB = args[10];
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> s;
  for (uint64_t b = 0; b < B; ++b) {
    const uint64_t ctx = uint64_t(lens[b]);
    for (uint64_t h = 0; h < H; ++h) {
      s.assign(ctx, 0.0);
      double mx = -INFINITY;
      for (uint64_t t = 0; t < ctx; ++t) {
        const uint64_t blk = uint64_t(table[b * MB + t / BS]), row = (blk * BS + t % BS) * D;
        double acc = 0;
        for (uint64_t d = 0; d < D; ++d) acc += double(q[(b * H + h) * D + d]) * kc[row + d];
        s[t] = acc * scale;
        mx = std::fmax(mx, s[t]);
      }
      double sum = 0;
      for (uint64_t t = 0; t < ctx; ++t) sum += (s[t] = std::exp(s[t] - mx));
      for (uint64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (uint64_t t = 0; t < ctx; ++t) {
          const uint64_t blk = uint64_t(table[b * MB + t / BS]);
          acc += s[t] * vc[(blk * BS + t % BS) * D + d];
        }
        out[(b * H + h) * D + d] = float(acc / sum);
      }
    }
  }
  return 0;
}
