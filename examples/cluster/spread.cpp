// Orchestrations for a cluster (docs/remote.md), loaded by ptod with
// `ptoctl register import libpto_cluster.so SYMBOL --orchestration`.
//
// pto_spread (a level-4 ptod runs it): K instances of one next-level
// callable, spread round-robin over the next-level workers (local L3
// children and remote peers), one task per instance, all in flight at once.
// Scalars: [0..3] the callable's digest (32 bytes, little-endian words),
// [4] G = tensors per instance, [5] output mask (bit i: tensor i of an
// instance is written), [6..] scalars every instance receives. The tensors
// are the K instances' G tensors, in order.
//
// pto_noop (any level): submits nothing — what a remote round trip costs
// without work (tests/bench).
#include <cstring>

#include "pto/worker.h"

extern "C" int pto_spread(pto::Orchestrator* o, const PtoTaskArgsView* in, const pto::CallConfig* cfg) {
  if (in->scalar_count < 6) return 2;
  pto::CallableHandle h;
  std::memcpy(h.id.digest.data(), in->scalars, 32);
  h.id.kind = pto::CallableKind::CHIP;
  h.abi = pto::EntryAbi::CHIP;
  const int g = static_cast<int>(in->scalars[4]);
  const uint64_t outputs = in->scalars[5];
  if (g <= 0 || in->tensor_count % g != 0) return 3;
  const int instances = in->tensor_count / g;
  const int workers = o->num_next_level();
  for (int k = 0; k < instances; ++k) {
    pto::TaskArgs t;
    for (int i = 0; i < g; ++i) t.add_tensor(in->tensors[k * g + i], (outputs >> i) & 1 ? pto::OUT : pto::IN);
    for (int s = 6; s < in->scalar_count; ++s) t.add_scalar(in->scalars[s]);
    if (!o->submit_next_level(h, t, *cfg, k % workers).ok()) return 4;
  }
  return 0;
}

extern "C" int pto_noop(pto::Orchestrator*, const PtoTaskArgsView*, const pto::CallConfig*) { return 0; }
