// The Orchestrator after a sizing failure (sizing_probe.h, docs/runtime.md
// §8): the rest of the run is measured instead of run, and the error names
// the sizes the whole run needs. Off the submit path: only a failed run
// comes here.
#include <algorithm>
#include <bit>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "log.h"
#include "orchestrator.h"

namespace pto2 {

namespace {

// Measured outputs get addresses from a range no real buffer uses.
constexpr uint64_t kProbeAddressBase = 0xF000000000000000ull;
// Entries for the measured tasks' accesses: address space, committed on use.
constexpr uint64_t kProbeMapEntries = 1ull << 22;

}  // namespace

int64_t Orchestrator::submit_failed(PTOParam* params, int32_t n, const int64_t* extra_deps, int32_t num_extra_deps) {
  if (!probe_ && is_sizing_failure(error_.code)) {
    start_probe();
    sizing_diagnosis_ = error_.message;
    probe_submit(params, n, extra_deps, num_extra_deps);  // the task that failed
    error_.message = sizing_diagnosis_ + " " + sizing_solution(false);
    return -error_.code;
  }
  return probe_ ? probe_submit(params, n, extra_deps, num_extra_deps) : -error_.code;
}

void Orchestrator::start_probe() {
  probe_ = std::make_unique<SizingProbe>();
  std::atomic<uint64_t>* none[kMaxRings];
  for (auto& a : probe_last_alive_) a.store(0, std::memory_order_relaxed);
  for (int r = 0; r < kMaxRings; ++r) none[r] = &probe_last_alive_[r];
  probe_map_ = std::make_unique<TensorMap>(kProbeMapEntries, s_.config.tensormap_buckets, s_.config.task_window, none);
  probe_addr_ = kProbeAddressBase;
  // Per ring, the oldest task an open scope holds: scope k owns the tasks
  // scope_tasks_[scope_begin_[k] ..] up to the next scope's start.
  uint64_t oldest[kMaxRings];
  std::fill(std::begin(oldest), std::end(oldest), SizingProbe::kNoTask);
  for (size_t k = 0; k < scope_begin_.size(); ++k) {
    const size_t b = scope_begin_[k], e = k + 1 < scope_begin_.size() ? scope_begin_[k + 1] : scope_tasks_.size();
    const uint64_t first = b < e ? task_seq(scope_tasks_[b]) : SizingProbe::kNoTask;
    probe_->seed_scope(first);
    const uint32_t r = static_cast<uint32_t>(std::min<size_t>(k, kMaxRings - 1));
    oldest[r] = std::min(oldest[r], first);
  }
  for (uint32_t r = 0; r < kMaxRings; ++r) {
    TaskRing& tr = s_.rings[r];
    probe_->seed_ring(r, oldest[r], tr.next_seq());
    if (oldest[r] == SizingProbe::kNoTask) continue;
    // Every task from the oldest held one on is pinned and intact (a slot is
    // reused only after its task retired). A task counts the dep-list entries
    // it reserved, not the fewer it may have used: an edge to a producer that
    // had completed takes none (§6), and a rerun may find it still running.
    for (uint64_t seq = oldest[r]; seq < tr.next_seq(); ++seq) {
      const TaskDescriptor& d = tr.descriptor(seq);
      uint64_t tensors = 0;
      for (int32_t i = 0; i < d.num_params; ++i) tensors += d.param_kind[i] != PTO_PARAM_SCALAR;
      probe_->seed_task(r, d.packed_buffer_end - d.packed_buffer_base, static_cast<uint64_t>(d.dep_reserved), tensors);
    }
  }
}

int64_t Orchestrator::probe_submit(PTOParam* params, int32_t n, const int64_t* extra_deps, int32_t num_extra_deps) {
  // Measured, not run. Only what the measurement needs is checked.
  if (n < 0 || n > PTO2_MAX_PARAMS || (n > 0 && params == nullptr)) return -error_.code;
  for (int32_t i = 0; i < n; ++i) {
    const PTOParam& p = params[i];
    if (p.type == PTO_PARAM_SCALAR) continue;
    const Tensor* t = p.tensor;
    if (t == nullptr || t->ndim < 1 || t->ndim > PTO2_MAX_DIMS || pto2_dtype_size(t->dtype) == 0) return -error_.code;
    for (int32_t d = 0; d < t->ndim; ++d)
      if (static_cast<uint64_t>(t->offsets[d]) + t->shapes[d] > t->raw_shape[d]) return -error_.code;
  }
  const uint32_t ring = static_cast<uint32_t>(current_ring());
  const uint64_t id = make_task_id(ring, probe_->next_seq(ring));
  producers_.clear();
  uint64_t out_bytes = 0, tensors = 0;
  for (int32_t i = 0; i < n; ++i) {
    PTOParam& p = params[i];
    if (p.type == PTO_PARAM_SCALAR) continue;
    ++tensors;
    Tensor* t = p.tensor;
    if (p.type == PTO_PARAM_OUTPUT && t->addr == 0) {
      const uint64_t bytes = align_up(std::max<uint64_t>(pto2_tensor_buffer_bytes(t), 1), kOutputAlign);
      out_bytes += bytes;
      t->addr = probe_addr_;
      t->owner = owner_from_task(id);
      probe_addr_ += bytes;
      continue;
    }
    const bool writer = p.type != PTO_PARAM_INPUT;
    tensor_map_->lookup(*t, writer, id, &producers_);  // live tasks of the run
    probe_map_->lookup(*t, writer, id, &producers_);   // measured tasks
    if (t->owner != 0) producers_.push_back(task_from_owner(t->owner));
  }
  for (int32_t i = 0; i < num_extra_deps && extra_deps != nullptr; ++i)
    producers_.push_back(static_cast<uint64_t>(extra_deps[i]));
  dedup_producers();
  if (probe_map_->reserve(tensors)) {
    for (int32_t i = 0; i < n; ++i) {
      if (params[i].type == PTO_PARAM_SCALAR) continue;
      probe_map_->insert(*params[i].tensor, id,
                         params[i].type == PTO_PARAM_INPUT ? TensorMap::kReader : TensorMap::kWriter);
    }
  }
  probe_->submit(ring, out_bytes, 2 * producers_.size(), tensors);
  return -error_.code;
}

std::string Orchestrator::sizing_solution(bool final) const {
  const SizingProbe::Needs& need = probe_->needs();
  const int32_t code = error_.code;
  std::string sizes;
  // The failing limit always grows; any other limit the measured run exceeds is named too.
  auto want = [&](const char* var, uint64_t needed, uint64_t have, uint64_t floor, bool failing) {
    uint64_t v = std::bit_ceil(std::max(needed, floor));
    if (failing && v <= have) v = have * 2;
    if (v <= have) return;
    sizes += fmt::format("{}{} >= {}", sizes.empty() ? "" : ", ", var, v);
  };
  want("PTO2_RING_TASK_WINDOW", need.task_window, s_.config.task_window, 4,
       code == kScopeExceedsWindow || code == kTaskRingDeadlock);
  want("PTO2_RING_HEAP", need.heap_size, s_.config.heap_size, 1024,
       code == kHeapRingDeadlock || code == kHeapRequestTooLarge);
  want("PTO2_RING_DEP_POOL", need.dep_pool_size, s_.config.dep_pool_size, 16, code == kDepPoolDeadlock);
  want("PTO2_TENSORMAP_POOL", need.tensormap_pool_size, s_.config.tensormap_pool_size, 16, code == kTensorMapDeadlock);
  const bool window = code == kScopeExceedsWindow || code == kTaskRingDeadlock;
  return fmt::format(
      "Solution: {} (sized for all {} tasks this run submitted{}; the {} from the failure on were "
      "measured, not run){}",
      sizes, probe_->measured_submits() + submitted_, final ? "" : " so far", probe_->measured_submits(),
      window ? ", or split the scope." : ".");
}

void Orchestrator::finish_probe() {
  error_.message = sizing_diagnosis_ + " " + sizing_solution(true);
  component_logger("orchestrator")->error("{} ({}): {}", error_name(error_.code), error_.code, error_.message);
}

}  // namespace pto2
