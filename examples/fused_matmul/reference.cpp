// Host reference for the fused matmul + activation: C = GELU(A @ B) in double,
// the tanh form of GELU as the kernel uses it.
#include <cmath>
#include <cstdint>

extern "C" int pto2_reference(uint64_t* args, int arg_count) {
  if (arg_count != 7) return 1;
  const float* A = reinterpret_cast<const float*>(args[0]);
  const float* B = reinterpret_cast<const float*>(args[1]);
  float* C = reinterpret_cast<float*>(args[2]);
  const uint64_t M = args[3], K = args[4], N = args[5];
  for (uint64_t i = 0; i < M; ++i)
    for (uint64_t j = 0; j < N; ++j) {
      double x = 0;
      for (uint64_t k = 0; k < K; ++k) x += double(A[i * K + k]) * double(B[k * N + j]);
      C[i * N + j] = float(0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
    }
  return 0;
}
