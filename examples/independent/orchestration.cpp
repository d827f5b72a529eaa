// Independent cube/vector pairs: P pairs of tasks with no dependencies at all
// (each writes its own row), to measure pure dispatch throughput. Pair i: an
// AIC task fills X[i] with i, an AIV task fills Y[i] with -i. Scopes of 128
// pairs let the ring recycle slots.
// Arguments: X [P, 16], Y [P, 16] (fp32, device), P.
#include "pto2/orchestration_api.h"

extern "C" PTO2OrchestrationConfig aicpu_orchestration_config(uint64_t*, int) { return {3}; }

extern "C" int aicpu_orchestration_entry(PTO2Runtime* rt, uint64_t* args, int) {
  const uint32_t P = static_cast<uint32_t>(args[2]);
  const uint32_t shape[2] = {P, 16}, row[2] = {1, 16};
  Tensor X = make_tensor_external(reinterpret_cast<void*>(args[0]), shape, 2, PTO2_FLOAT32);
  Tensor Y = make_tensor_external(reinterpret_cast<void*>(args[1]), shape, 2, PTO2_FLOAT32);
  for (uint32_t base = 0; base < P; base += 128) {
    PTO2_SCOPE(rt) {
      for (uint32_t i = base; i < P && i < base + 128; ++i) {
        const uint32_t off[2] = {i, 0};
        Tensor x = tensor_view(X, off, row), y = tensor_view(Y, off, row);
        PTOParam pc[] = {make_output_param(x), make_scalar_param_f32(float(i))};
        pto2_rt_submit_task(rt, 0, PTO2_WORKER_CUBE, pc, 2);
        PTOParam pv[] = {make_output_param(y), make_scalar_param_f32(-float(i))};
        pto2_rt_submit_task(rt, 1, PTO2_WORKER_VECTOR, pv, 2);
      }
    }
  }
  return pto2_rt_error(rt);
}
