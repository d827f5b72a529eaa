// Host reference for bgemm: C[g] += sum_k A[g,k] @ B[k], k in order (the
// same summation order as the chip, so fp32 results agree closely).
#include <cstdint>
#include <vector>

extern "C" int pto2_reference(uint64_t* args, int arg_count) {
  if (arg_count != 6) return 1;
  const float* A = reinterpret_cast<const float*>(args[0]);
  const float* B = reinterpret_cast<const float*>(args[1]);
  float* C = reinterpret_cast<float*>(args[2]);
  const uint64_t G = args[3], K = args[4], T = args[5];
  for (uint64_t g = 0; g < G; ++g)
    for (uint64_t k = 0; k < K; ++k)
      for (uint64_t i = 0; i < T; ++i)
        for (uint64_t j = 0; j < T; ++j) {
          float acc = 0.f;
          for (uint64_t x = 0; x < T; ++x) acc += A[((g * K + k) * T + i) * T + x] * B[(k * T + x) * T + j];
          C[(g * T + i) * T + j] += acc;
        }
  return 0;
}
