// The Orchestrator's part of the chip's programming model (docs/runtime.md
// §12): cluster allocation for function groups, the placement rules of a
// submit (cluster, blocks, pipes), and the baseline expansion of a
// block_incore task. The batch descriptor needs nothing here: submit_one
// records block_dim and the schedulers dispatch it once per block.
#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "orchestrator.h"
#include "orchestrator_wait.h"

namespace pto2 {

namespace {
constexpr int32_t kMaxBlockDim = 1 << 16;
}

Status Orchestrator::diagnose_clusters() const {
  // Clusters this orchestration freed come back as their tasks complete; the
  // ones it still holds only it can free, and it is waiting here.
  for (int c = 0; c < s_.clusters; ++c)
    if (cluster_held_[c] == 0) return Status::Ok();
  return Status::Error(
      kClusterDeadlock,
      fmt::format("FATAL: Cluster allocation deadlock: all {} clusters are allocated by this orchestration and none "
                  "is freed, so pto2_rt_allocate_cluster can never return. Free a cluster "
                  "(pto2_rt_free_cluster) or end the scope that allocated it before allocating another; at most {} "
                  "function groups can be open at once.",
                  s_.clusters, s_.clusters));
}

int32_t Orchestrator::allocate_cluster() {
  if (!error_.ok()) return -error_.code;
  if (!refuse_in_capture("pto2_rt_allocate_cluster")) return -error_.code;
  if (s_.clusters == 0) {
    fail(kInvalidArgument, "pto2_rt_allocate_cluster: this platform has no clusters");
    return -error_.code;
  }
  int32_t got = -1;
  auto try_once = [&] {
    for (int c = 0; c < s_.clusters; ++c) {
      if (cluster_held_[c] == 0 && s_.cluster_outstanding[c].load(std::memory_order_acquire) == 0) {
        got = c;
        return true;
      }
    }
    return false;
  };
  if (!wait_for(try_once, [&] { return diagnose_clusters(); },
                [&] {
                  int held = 0, draining = 0;
                  for (int c = 0; c < s_.clusters; ++c) {
                    held += cluster_held_[c];
                    draining += cluster_held_[c] == 0 && s_.cluster_outstanding[c].load() != 0;
                  }
                  return fmt::format(
                      "[Cluster] BLOCKED: no free cluster: {} of {} allocated, {} freed but still running their "
                      "groups' tasks",
                      held, s_.clusters, draining);
                }))
    return -error_.code;
  s_.platform.cluster_claimed(got);
  cluster_held_[got] = 1;
  cluster_group_[got] = next_group_++;
  scope_clusters_.back().push_back(got);
  return got;
}

void Orchestrator::free_cluster(int32_t cluster_id) {
  if (!error_.ok()) return;
  if (!refuse_in_capture("pto2_rt_free_cluster")) return;
  if (cluster_id < 0 || cluster_id >= s_.clusters || cluster_held_[cluster_id] == 0) {
    fail(kInvalidArgument,
         fmt::format("pto2_rt_free_cluster({}): not a cluster this orchestration holds (clusters 0..{}; allocate "
                     "one with pto2_rt_allocate_cluster)",
                     cluster_id, s_.clusters - 1));
    return;
  }
  // The cluster returns to the pool once its group's tasks complete
  // (allocate_cluster waits for cluster_outstanding to reach 0).
  cluster_held_[cluster_id] = 0;
  cluster_group_[cluster_id] = -1;
  for (auto& list : scope_clusters_) list.erase(std::remove(list.begin(), list.end(), cluster_id), list.end());
}

void Orchestrator::release_scope_clusters() {
  if (scope_clusters_.empty()) return;
  for (int32_t c : scope_clusters_.back()) {
    cluster_held_[c] = 0;
    cluster_group_[c] = -1;
  }
  scope_clusters_.pop_back();
}

bool Orchestrator::validate_placement(const PTO2TaskSpec& s) {
  const bool dummy = s.kernel_id == PTO2_KERNEL_DUMMY;
  if (s.cluster_id != -1) {
    if (dummy) {
      fail(kInvalidArgument, "a dependency-only task runs on no core and cannot be pinned to a cluster");
      return false;
    }
    if (s.cluster_id < 0 || s.cluster_id >= s_.clusters || cluster_held_[s.cluster_id] == 0) {
      fail(kInvalidArgument, fmt::format("cluster_id {} is not a cluster this orchestration holds (allocate it with "
                                         "pto2_rt_allocate_cluster; clusters 0..{})",
                                         s.cluster_id, s_.clusters - 1));
      return false;
    }
  }
  if (s.block_dim < 1 || s.block_dim > kMaxBlockDim || (dummy && s.block_dim != 1)) {
    fail(kInvalidArgument, fmt::format("block_dim {} is outside 1..{}{}", s.block_dim, kMaxBlockDim,
                                       dummy ? " (a dependency-only task has one block)" : ""));
    return false;
  }
  if ((s.block_dim > 1 || s.block_idx != -1) && !s_.platform.passes_block_index()) {
    fail(kInvalidArgument, fmt::format("block_dim {} / block_idx {}: this platform gives kernels no block index, so "
                                       "every block would run the whole kernel; block tasks need a platform with a "
                                       "kernel context (a2a3sim)",
                                       s.block_dim, s.block_idx));
    return false;
  }
  if (s.block_idx != -1 &&
      (s.block_dim != 1 || s.block_num < 1 || s.block_idx < 0 || s.block_idx >= s.block_num)) {
    fail(kInvalidArgument, fmt::format("block {} of {} (block_dim {}): a block of an SPMD call needs 0 <= block_idx "
                                       "< block_num and block_dim 1",
                                       s.block_idx, s.block_num, s.block_dim));
    return false;
  }
  for (int32_t i = 0; i < s.num_params; ++i) {
    const PTOParam& p = s.params[i];
    if (p.type != PTO_PARAM_PIPE_IN && p.type != PTO_PARAM_PIPE_OUT) continue;
    const char* kind = p.type == PTO_PARAM_PIPE_IN ? "PIPE_IN" : "PIPE_OUT";
    const Tensor* t = p.tensor;
    if (t == nullptr || !pto2_is_pipe_tensor(t) || (t->addr - PTO2_PIPE_ADDR_BASE) % PTO2_PIPE_ADDR_STRIDE != 0) {
      fail(kInvalidArgument, fmt::format("param {} ({}): not a pipe tensor (make_pipe_tensor)", i, kind));
      return false;
    }
    if (s.cluster_id < 0 || pto2_pipe_cluster(t) != s.cluster_id) {
      fail(kInvalidArgument,
           fmt::format("param {} ({}): pipe {} of cluster {} is local to that cluster; only a task pinned to it "
                       "(pto2_rt_submit_task_clustered) may use it, and this task is {}",
                       i, kind, pto2_pipe_index(t), pto2_pipe_cluster(t),
                       s.cluster_id < 0 ? std::string("unpinned") : fmt::format("pinned to cluster {}", s.cluster_id)));
      return false;
    }
    if (s.block_dim != 1) {
      fail(kInvalidArgument, fmt::format("param {} ({}): a pipe joins one producer and one consumer, and a batch "
                                         "of {} blocks would share it; submit each block on its own "
                                         "(pto2_rt_submit_block_clustered)",
                                         i, kind, s.block_dim));
      return false;
    }
  }
  return true;
}

int64_t Orchestrator::submit(const PTO2TaskSpec& spec) {
  if (spec.block_dim > 1 && s_.config.block_mode == BlockMode::kExpand && error_.ok() && !done_) {
    if (!refuse_in_capture("a block_incore task expanded into blocks (PTO2_BLOCK_MODE=expand)"))
      return submit_failed(spec.params, spec.num_params, spec.deps, spec.num_deps);
    return submit_expanded(spec);
  }
  return submit_one(spec);
}

bool Orchestrator::reserve_slots(uint32_t ring, uint64_t n) {
  TaskRing& tr = s_.rings[ring];
  if (n > tr.window() - 1) {
    fail(kBlockExceedsWindow,
         fmt::format("FATAL: a block_incore task of block_dim {} expands to {} tasks (its blocks and a join), but "
                     "task ring {} holds at most {} at once. Raise task_window (PTO2_RING_TASK_WINDOW) to at least "
                     "{}, or submit it as one batch descriptor (block_mode = batch, the default), which takes one "
                     "slot.",
                     n - 1, n, ring, tr.window() - 1, std::bit_ceil(n + 1)));
    return false;
  }
  // Block-aware flow control: wait until all n slots are free, so that a
  // call never holds some of its blocks' slots while waiting for the rest.
  return wait_for([&] { return tr.window() - 1 - tr.active() >= n; },
                  [&]() -> Status {
                    // Waiting frees slots only if the oldest live task is not
                    // held by a scope this thread has open.
                    if (!ring_blocked_by_scope(ring, tr.next_seq())) return Status::Ok();
                    return Status::Error(
                        kBlockExceedsWindow,
                        fmt::format("FATAL: Flow Control Deadlock Detected! A block_incore task needs {} free slots "
                                    "of task ring {} at once, {} are free and the {} active tasks are held by open "
                                    "scopes, which only this orchestrator can end. Raise task_window "
                                    "(PTO2_RING_TASK_WINDOW) or use block_mode = batch.",
                                    n, ring, tr.window() - 1 - tr.active(), tr.active()));
                  },
                  [&] {
                    return fmt::format("[TaskRing] BLOCKED (block-aware flow control): ring={} needs {} free slots, "
                                       "{} active of window {}",
                                       ring, n, tr.active(), tr.window());
                  });
}

int64_t Orchestrator::submit_expanded(const PTO2TaskSpec& spec) {
  // Validate once, as the batch path would, before taking any slot.
  if (!validate_params(spec.worker_type, spec.params, spec.num_params) || !validate_placement(spec))
    return submit_failed(spec.params, spec.num_params, spec.deps, spec.num_deps);
  const uint32_t ring = static_cast<uint32_t>(current_ring());
  const auto blocks = static_cast<uint64_t>(spec.block_dim);
  tensor_map_->sync(/*force=*/false);
  if (!reserve_slots(ring, blocks + 1)) return submit_failed(spec.params, spec.num_params, spec.deps, spec.num_deps);

  PTO2TaskSpec b = spec;
  b.block_dim = 1;
  b.block_num = spec.block_dim;
  block_ids_.clear();
  for (int32_t k = 0; k < spec.block_dim; ++k) {
    b.block_idx = k;
    const int64_t id = submit_one(b);
    if (k == 0 && id >= 0) {
      first_block_ = static_cast<uint64_t>(id);
      first_block_owns_ = s_.descriptor_of(first_block_).packed_buffer_base != 0;
      b.deps = nullptr;  // the first block took them; the others share its producers
      b.num_deps = 0;
      sibling_ = true;
    }
    if (id < 0) {
      sibling_ = false;
      return id;
    }
    block_ids_.push_back(id);
  }
  sibling_ = false;
  // The join completes when every block has: it is the call's task id.
  PTO2TaskSpec join = pto2_task_spec(PTO2_KERNEL_DUMMY, PTO2_WORKER_VECTOR, nullptr, 0);
  join.deps = block_ids_.data();
  join.num_deps = static_cast<int32_t>(block_ids_.size());
  return submit_one(join);
}

}  // namespace pto2
