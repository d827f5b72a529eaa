// Host reference for the batch-norm example (pto2-run's golden): the same
// arguments as the orchestration, host pointers.
#include <cmath>
#include <cstdint>
#include <cstring>

extern "C" int pto2_reference(uint64_t* args, int arg_count) {
  if (arg_count != 9) return 1;
  const uint64_t positions = 2 * 14 * 14, channels = 256;
  const auto* x = reinterpret_cast<const float*>(args[0]);
  const auto* scale = reinterpret_cast<const float*>(args[1]);
  const auto* shift = reinterpret_cast<const float*>(args[2]);
  const auto* mean = reinterpret_cast<const float*>(args[3]);
  const auto* var = reinterpret_cast<const float*>(args[4]);
  auto* y = reinterpret_cast<float*>(args[5]);
  const auto bits = static_cast<uint32_t>(args[6]);
  float eps;
  std::memcpy(&eps, &bits, sizeof(eps));
  for (uint64_t p = 0; p < positions; ++p)
    for (uint64_t c = 0; c < channels; ++c) {
      const double v = (double(x[p * channels + c]) - mean[c]) / std::sqrt(double(var[c]) + eps);
      y[p * channels + c] = static_cast<float>(v * scale[c] + shift[c]);
    }
  return 0;
}
