// AIV kernel: out = a + s. args: a (fp32 tensor), s (fp32 bits), out.
#include "pto2/kernel_abi.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* a = pto2_arg_tensor(args, 0);
  const float s = pto2_scalar_f32(args[1]);
  const Tensor* out = pto2_arg_tensor(args, 2);
  const float* x = static_cast<const float*>(pto2_tensor_data(a));
  float* z = static_cast<float*>(pto2_tensor_data(out));
  const uint64_t n = pto2_tensor_numel(out);
  for (uint64_t i = 0; i < n; ++i) z[i] = x[i] + s;
}
