// Fills a view with a value: args: out (fp32 view), value (fp32 bits). Used on
// both core types (the config registers it as an AIC and as an AIV kernel).
#include "pto2/kernel_abi.h"

extern "C" void kernel_entry(int64_t* args) {
  const Tensor* out = pto2_arg_tensor(args, 0);
  const float v = pto2_scalar_f32(args[1]);
  float* p = static_cast<float*>(pto2_tensor_data(out));
  const uint64_t n = pto2_tensor_numel(out);
  for (uint64_t i = 0; i < n; ++i) p[i] = v;
}
