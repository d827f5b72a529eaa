// Host reference for the independent pairs: X[i] = i, Y[i] = -i.
#include <cstdint>

extern "C" int pto2_reference(uint64_t* args, int arg_count) {
  if (arg_count != 3) return 1;
  float* X = reinterpret_cast<float*>(args[0]);
  float* Y = reinterpret_cast<float*>(args[1]);
  for (uint64_t i = 0; i < args[2]; ++i)
    for (uint64_t j = 0; j < 16; ++j) {
      X[i * 16 + j] = float(i);
      Y[i * 16 + j] = -float(i);
    }
  return 0;
}
