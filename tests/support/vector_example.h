// The reference design's vector example, f = (a + b + 1) * (a + b + 2), shared by the
// simulator tests and benchmarks: three kernels (args: tensors, then scalars)
// and the 4-task orchestration. Until examples/ ships it as kernel and
// orchestration libraries, this is its one in-tree copy.
#pragma once

#include <cstdint>
#include <cstring>

#include "pto2/orchestration_api.h"

namespace pto2::vector_example {

enum Kernel : int32_t { kAdd = 0, kAddScalar = 1, kMul = 2 };

inline const Tensor* arg_tensor(int64_t* a, int i) { return reinterpret_cast<const Tensor*>(a[i]); }
inline float* arg_f32(int64_t* a, int i) { return static_cast<float*>(pto2_tensor_data(arg_tensor(a, i))); }

// out = in0 + in1 — args: in0, in1, out (dense views)
inline void add(int64_t* a) {
  const uint64_t n = pto2_tensor_numel(arg_tensor(a, 2));
  for (uint64_t i = 0; i < n; ++i) arg_f32(a, 2)[i] = arg_f32(a, 0)[i] + arg_f32(a, 1)[i];
}
// out = in + s — args: in, s (fp32 bits), out
inline void add_scalar(int64_t* a) {
  float s;
  const uint32_t bits = static_cast<uint32_t>(a[1]);
  std::memcpy(&s, &bits, sizeof(s));  // what pto2_scalar_f32 does (kernel_abi.h is the simulator's header)
  const uint64_t n = pto2_tensor_numel(arg_tensor(a, 2));
  for (uint64_t i = 0; i < n; ++i) arg_f32(a, 2)[i] = arg_f32(a, 0)[i] + s;
}
// out = in0 * in1 — args: in0, in1, out
inline void mul(int64_t* a) {
  const uint64_t n = pto2_tensor_numel(arg_tensor(a, 2));
  for (uint64_t i = 0; i < n; ++i) arg_f32(a, 2)[i] = arg_f32(a, 0)[i] * arg_f32(a, 1)[i];
}

// Submits the 4 tasks over n floats at a, b (inputs) and f (output).
inline void orchestrate(PTO2Runtime* rt, void* a, void* b, void* f, uint32_t n) {
  const uint32_t shape[1] = {n};
  Tensor ta = make_tensor_external(a, shape, 1, PTO2_FLOAT32), tb = make_tensor_external(b, shape, 1, PTO2_FLOAT32),
         tf = make_tensor_external(f, shape, 1, PTO2_FLOAT32);
  PTO2_SCOPE(rt) {
    Tensor c = make_tensor(shape, 1, PTO2_FLOAT32), d = make_tensor(shape, 1, PTO2_FLOAT32),
           e = make_tensor(shape, 1, PTO2_FLOAT32);
    PTOParam p0[] = {make_input_param(ta), make_input_param(tb), make_output_param(c)};
    pto2_rt_submit_task(rt, kAdd, PTO2_WORKER_VECTOR, p0, 3);
    PTOParam p1[] = {make_input_param(c), make_scalar_param_f32(1.f), make_output_param(d)};
    pto2_rt_submit_task(rt, kAddScalar, PTO2_WORKER_VECTOR, p1, 3);
    PTOParam p2[] = {make_input_param(c), make_scalar_param_f32(2.f), make_output_param(e)};
    pto2_rt_submit_task(rt, kAddScalar, PTO2_WORKER_VECTOR, p2, 3);
    PTOParam p3[] = {make_input_param(d), make_input_param(e), make_output_param(tf)};
    pto2_rt_submit_task(rt, kMul, PTO2_WORKER_VECTOR, p3, 3);
  }
}

}  // namespace pto2::vector_example
