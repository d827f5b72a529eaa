// Shared by the paged-attention kernels: fp32, dense row-major views.
#pragma once

#include <cmath>
#include <cstring>

#include "pto2/kernel_abi.h"

inline float* pa_f32(int64_t* args, int i) { return static_cast<float*>(pto2_tensor_data(pto2_arg_tensor(args, i))); }
inline float pa_bits_to_f32(int64_t v) {
  const uint32_t u = static_cast<uint32_t>(v);
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
