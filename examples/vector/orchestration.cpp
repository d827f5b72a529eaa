// The reference design's vector example: f = (a + b + 1) * (a + b + 2), four tasks.
//   c = a + b        (func 0)
//   d = c + 1        (func 1)      e = c + 2   (func 1)
//   f = d * e        (func 2)
// Arguments: a, b, f (device pointers to n fp32 each), n.
#include "pto2/orchestration_api.h"

extern "C" PTO2OrchestrationConfig aicpu_orchestration_config(uint64_t*, int) { return {4}; }

extern "C" int aicpu_orchestration_entry(PTO2Runtime* rt, uint64_t* args, int) {
  const uint32_t n = static_cast<uint32_t>(args[3]);
  const uint32_t shape[1] = {n};
  Tensor a = make_tensor_external(reinterpret_cast<void*>(args[0]), shape, 1, PTO2_FLOAT32);
  Tensor b = make_tensor_external(reinterpret_cast<void*>(args[1]), shape, 1, PTO2_FLOAT32);
  Tensor f = make_tensor_external(reinterpret_cast<void*>(args[2]), shape, 1, PTO2_FLOAT32);
  PTO2_SCOPE(rt) {
    Tensor c = make_tensor(shape, 1, PTO2_FLOAT32);  // intermediates live in the heap ring
    Tensor d = make_tensor(shape, 1, PTO2_FLOAT32);
    Tensor e = make_tensor(shape, 1, PTO2_FLOAT32);
    PTOParam p0[] = {make_input_param(a), make_input_param(b), make_output_param(c)};
    pto2_rt_submit_task(rt, 0, PTO2_WORKER_VECTOR, p0, 3);
    PTOParam p1[] = {make_input_param(c), make_scalar_param_f32(1.f), make_output_param(d)};
    pto2_rt_submit_task(rt, 1, PTO2_WORKER_VECTOR, p1, 3);
    PTOParam p2[] = {make_input_param(c), make_scalar_param_f32(2.f), make_output_param(e)};
    pto2_rt_submit_task(rt, 1, PTO2_WORKER_VECTOR, p2, 3);
    PTOParam p3[] = {make_input_param(d), make_input_param(e), make_output_param(f)};
    pto2_rt_submit_task(rt, 2, PTO2_WORKER_VECTOR, p3, 3);
  }
  return pto2_rt_error(rt);
}
