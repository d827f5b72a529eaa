// Batched GEMM with accumulation: for each group g, C[g] = sum_k A[g,k] @ B[k].
// Per group one scope; per k a GEMM on a cube core into a runtime-allocated
// tile P, then an ADD on a vector core into an INOUT view of C[g]. The INOUT
// chain on C[g] orders the ADDs; the GEMMs of a group run in parallel.
// The whole graph is a captured region (docs/runtime.md §16) keyed by G, K
// and T: the first run of a Runtime records it, later runs replay it with
// A, B and C rebound.
// Arguments: A [G*K*T, T], B [K*T, T], C [G*T, T] (fp32, device), G, K, T.
#include "pto2/orchestration_api.h"

extern "C" PTO2OrchestrationConfig aicpu_orchestration_config(uint64_t*, int) { return {6}; }

extern "C" int aicpu_orchestration_entry(PTO2Runtime* rt, uint64_t* args, int) {
  const uint32_t G = static_cast<uint32_t>(args[3]), K = static_cast<uint32_t>(args[4]),
                 T = static_cast<uint32_t>(args[5]);
  const uint32_t a_shape[2] = {G * K * T, T}, b_shape[2] = {K * T, T}, c_shape[2] = {G * T, T}, tile[2] = {T, T};
  Tensor A = make_tensor_external(reinterpret_cast<void*>(args[0]), a_shape, 2, PTO2_FLOAT32);
  Tensor B = make_tensor_external(reinterpret_cast<void*>(args[1]), b_shape, 2, PTO2_FLOAT32);
  Tensor C = make_tensor_external(reinterpret_cast<void*>(args[2]), c_shape, 2, PTO2_FLOAT32);
  Tensor* bindings[] = {&A, &B, &C};
  const uint64_t key = (uint64_t(G) << 42) | (uint64_t(K) << 21) | T;
  PTO2_CAPTURE(rt, key, bindings, 3) {
    for (uint32_t g = 0; g < G; ++g) {
      PTO2_SCOPE(rt) {
        const uint32_t c_off[2] = {g * T, 0};
        Tensor Cg = tensor_view(C, c_off, tile);
        for (uint32_t k = 0; k < K; ++k) {
          const uint32_t a_off[2] = {(g * K + k) * T, 0}, b_off[2] = {k * T, 0};
          Tensor Agk = tensor_view(A, a_off, tile), Bk = tensor_view(B, b_off, tile);
          Tensor P = make_tensor(tile, 2, PTO2_FLOAT32);
          PTOParam gemm[] = {make_input_param(Agk), make_input_param(Bk), make_output_param(P)};
          pto2_rt_submit_task(rt, 0, PTO2_WORKER_CUBE, gemm, 3);
          PTOParam add[] = {make_input_param(P), make_inout_param(Cg)};
          pto2_rt_submit_task(rt, 1, PTO2_WORKER_VECTOR, add, 2);
        }
      }
    }
  }
  return pto2_rt_error(rt);
}
