// Host reference for the vector example (pto2-run's golden): same arguments
// as the orchestration, host pointers.
#include <cstdint>

extern "C" int pto2_reference(uint64_t* args, int arg_count) {
  if (arg_count != 4) return 1;
  const float* a = reinterpret_cast<const float*>(args[0]);
  const float* b = reinterpret_cast<const float*>(args[1]);
  float* f = reinterpret_cast<float*>(args[2]);
  for (uint64_t i = 0; i < args[3]; ++i) {
    const float c = a[i] + b[i];
    f[i] = (c + 1.f) * (c + 2.f);
  }
  return 0;
}
