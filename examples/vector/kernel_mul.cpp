// AIV kernel: out = a * b. args: a, b, out (fp32 tensors of the same shape).
#include "pto2/kernel_abi.h"

extern "C" void kernel_entry(int64_t* args) {
  const float* x = static_cast<const float*>(pto2_tensor_data(pto2_arg_tensor(args, 0)));
  const float* y = static_cast<const float*>(pto2_tensor_data(pto2_arg_tensor(args, 1)));
  const Tensor* out = pto2_arg_tensor(args, 2);
  float* z = static_cast<float*>(pto2_tensor_data(out));
  const uint64_t n = pto2_tensor_numel(out);
  for (uint64_t i = 0; i < n; ++i) z[i] = x[i] * y[i];
}
