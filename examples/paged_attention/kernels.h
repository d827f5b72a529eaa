// Shared by the paged-attention kernels: fp32, dense row-major views.
#pragma once

#include <cmath>

#include "pto2/kernel_abi.h"

inline float* pa_f32(int64_t* args, int i) { return static_cast<float*>(pto2_tensor_data(pto2_arg_tensor(args, i))); }
