#include "pto2/sim/a2a3sim.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "cluster_pipes.h"
#include "core_threads.h"
#include "executor_pool.h"
#include "kernel_table.h"
#include "pto/base/clock.h"

namespace pto2::sim {

using pto::now_ns;

Status A2A3SimConfig::validate() const {
  auto bad = [](std::string m) { return Status::Error(kInvalidConfig, std::move(m)); };
  if (block_dim < 1 || block_dim > PLATFORM_MAX_BLOCKDIM)
    return bad(
        fmt::format("block_dim = {}: must be in 1..{} (PLATFORM_MAX_BLOCKDIM)", block_dim, PLATFORM_MAX_BLOCKDIM));
  if (aicpu_threads < 2 || aicpu_threads > PLATFORM_MAX_AICPU_THREADS)
    return bad(fmt::format("aicpu_threads = {}: must be in 2..{} (1 orchestrator + at least 1 scheduler)",
                           aicpu_threads, PLATFORM_MAX_AICPU_THREADS));
  if (executor_threads < -1 || executor_threads > 64)
    return bad(fmt::format("executor_threads = {}: must be -1 (automatic) or 0..64", executor_threads));
  if (gm_bytes < (1ull << 20)) return bad(fmt::format("gm_bytes = {}: must be at least 1 MiB", gm_bytes));
  if (pipe_bytes < 64 || pipe_bytes > (64ull << 20))
    return bad(fmt::format("pipe_bytes = {}: must be in 64..{} (64 MiB)", pipe_bytes, 64ull << 20));
  if (pipe_timeout_ms < 1) return bad(fmt::format("pipe_timeout_ms = {}: must be at least 1", pipe_timeout_ms));
  return Status::Ok();
}

int A2A3SimConfig::scheduler_threads() const { return scheduler_threads_for(aicpu_threads); }

int A2A3SimConfig::resolved_executor_threads() const { return executor_threads_for(executor_threads, aicpu_threads); }

std::unique_ptr<A2A3SimPlatform> A2A3SimPlatform::create(const A2A3SimConfig& config, Status* error) {
  Status st = config.validate();
  if (error) *error = st;
  if (!st.ok()) return nullptr;
  return std::unique_ptr<A2A3SimPlatform>(new A2A3SimPlatform(config));
}

A2A3SimPlatform::A2A3SimPlatform(const A2A3SimConfig& config)
    : config_(config), memory_(config.gm_bytes), kernels_(std::make_unique<KernelTable>()) {
  const int bd = config.block_dim;
  for (int i = 0; i < bd * (1 + PLATFORM_AIV_PER_CLUSTER); ++i) {
    cores_.push_back(std::make_unique<Core>());
    Core& c = *cores_.back();
    c.type = i < bd ? WorkerType::kCube : WorkerType::kVector;
    c.context.cluster_id = cluster_of(i);
    c.context.cluster_num = bd;
    c.context.core_id = i;
    c.context.core_type = static_cast<int32_t>(c.type);
    c.context.block_num = 1;
    c.pipe_link = {this, i};
    static const PTO2PipeOps kPipeOps = {&A2A3SimPlatform::pipe_push, &A2A3SimPlatform::pipe_pop};
    c.context.pipe_ops = &kPipeOps;
    c.context.pipe_impl = &c.pipe_link;
  }
  pipes_ = std::make_unique<ClusterPipes>(bd, config.pipe_bytes, config.pipe_timeout_ms, config.spin_before_park_us);
  pipe_cores_ = std::make_unique<CoreThreads>(
      static_cast<int>(cores_.size()),
      [this](int core) {
        run_core(core);
        wakeup_.notify();
      },
      config.spin_before_park_us);
  const int executors = config.resolved_executor_threads();
  if (executors > 0)
    executors_ = std::make_unique<ExecutorPool>(executors, static_cast<int>(cores_.size()), config.spin_before_park_us,
                                                [this](int core) {
                                                  run_core(core);
                                                  wakeup_.notify();
                                                });
}

A2A3SimPlatform::~A2A3SimPlatform() {
  // No kernel may wait on a pipe any longer; then the pipe cores stop.
  pipes_->break_all();
  pipe_cores_.reset();
  // Register protocol (docs/sim.md): the exit signal in DATA_MAIN_BASE shuts each core down.
  for (auto& c : cores_) c->data_main_base.store(kExitSignal, std::memory_order_release);
  executors_.reset();
}

int A2A3SimPlatform::executor_threads() const { return executors_ ? executors_->threads() : 0; }

std::string A2A3SimPlatform::core_name(int core) const {
  const bool cube = core < config_.block_dim;
  return fmt::format("{} {} (cluster {})", cube ? "AIC" : "AIV", cube ? core : core - config_.block_dim,
                     cluster_of(core));
}

std::string A2A3SimPlatform::group_name(int group) const { return fmt::format("cluster {}", group); }

std::string A2A3SimPlatform::shape() const { return fmt::format("block_dim {}", config_.block_dim); }

int A2A3SimPlatform::pipe_core_threads() const { return pipe_cores_->started(); }

void A2A3SimPlatform::run_starting() { pipes_->reset(); }

void A2A3SimPlatform::cluster_claimed(int cluster) {
  // Bytes a group pushed and never popped would reach the next group's
  // consumer as its data: the run fails instead, and the pipe starts empty.
  for (int pipe = 0; pipe < PTO2_PIPES_PER_CLUSTER; ++pipe) {
    if (const uint64_t left = pipes_->queued(cluster, pipe); left != 0)
      wakeup_.fault(kInvalidArgument,
                    fmt::format("pipe {} of cluster {} still held {} bytes nobody popped when its function group "
                                "ended; every byte a PIPE_OUT task pushes must be popped by a PIPE_IN task of the same "
                                "group",
                                pipe, cluster, left));
  }
  pipes_->reset_cluster(cluster);
}

// A kernel's pipe call: the pipes decide, and a failure also fails the run.
template <typename Op>
int32_t A2A3SimPlatform::pipe_call(void* impl, Op&& op) {
  auto* link = static_cast<PipeLink*>(impl);
  A2A3SimPlatform& chip = *link->chip;
  const Core& c = *chip.cores_[link->core];
  std::string why;
  const int32_t rc =
      op(*chip.pipes_, ClusterPipes::Caller{link->core, c.context.cluster_id, c.task.task_id, c.task.kernel_id}, &why);
  if (rc != kOk) chip.wakeup_.fault(rc, why);
  return rc;
}

int32_t A2A3SimPlatform::pipe_push(void* impl, const Tensor* pipe, const void* src, uint64_t bytes) {
  return pipe_call(impl, [&](ClusterPipes& pipes, const ClusterPipes::Caller& who, std::string* why) {
    return pipes.push(who, pipe, src, bytes, why);
  });
}

int32_t A2A3SimPlatform::pipe_pop(void* impl, const Tensor* pipe, void* dst, uint64_t bytes) {
  return pipe_call(impl, [&](ClusterPipes& pipes, const ClusterPipes::Caller& who, std::string* why) {
    return pipes.pop(who, pipe, dst, bytes, why);
  });
}

int A2A3SimPlatform::cluster_of(int core) const {
  const int bd = config_.block_dim;
  return core < bd ? core : (core - bd) / PLATFORM_AIV_PER_CLUSTER;
}

void A2A3SimPlatform::register_kernel(int32_t func_id, WorkerType type, KernelEntry entry) {
  kernels_->add(func_id, type, entry);
}

bool A2A3SimPlatform::resolve_kernel(int32_t kernel_id, WorkerType type, uint64_t* function_bin_addr) {
  return kernels_->resolve(kernel_id, type, function_bin_addr);
}

void A2A3SimPlatform::dispatch(int core, const DispatchPayload& payload) {
  Core& c = *cores_[core];
  c.task = payload;  // Handshake.task
  c.data_main_base.store(payload.task_id + 1, std::memory_order_release);
  if (payload.uses_pipes) {
    pipe_cores_->start(core);  // it may wait for its peer: a thread of its own
    return;
  }
  if (!executors_) {
    run_core(core);  // no spare CPU: the core's work runs on this AICPU thread
    return;
  }
  executors_->ring(core);
}

void A2A3SimPlatform::run_core(int core) {
  Core& c = *cores_[core];
  const uint64_t reg = c.data_main_base.load(std::memory_order_acquire);
  if (reg == 0 || reg == kExitSignal) return;
  c.data_main_base.store(0, std::memory_order_relaxed);  // the core took the dispatch
  const DispatchPayload& t = c.task;
  const uint32_t id_bits = static_cast<uint32_t>(reg - 1) & kCondTaskMask;
  c.cond.store(id_bits, std::memory_order_release);  // ACK
  c.context.task_id = t.task_id;
  c.context.block_idx = t.block_idx;
  c.context.block_num = t.block_num;
  const int32_t n = std::clamp(t.num_args, 0, PTO2_MAX_PARAMS);
  if (t.args != nullptr) std::copy(t.args, t.args + n, c.args);
  c.args[n] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(&c.context));
  if (config_.record_core_times) c.start_ns = now_ns();
  reinterpret_cast<KernelEntry>(t.function_bin_addr)(c.args);
  if (config_.record_core_times) c.end_ns = now_ns();
  c.executed.fetch_add(1, std::memory_order_relaxed);
  c.cond.store(kCondFin | id_bits, std::memory_order_release);  // FIN
}

bool A2A3SimPlatform::poll_finished(int core, uint64_t* task_id) {
  Core& c = *cores_[core];
  const uint32_t v = c.cond.load(std::memory_order_acquire);
  if ((v & kCondFin) == 0) return false;
  if ((v & kCondTaskMask) != (static_cast<uint32_t>(c.task.task_id) & kCondTaskMask)) return false;  // stale
  // The AICPU consumed the FIN: clear it so no later dispatch can mistake it
  // for its own completion.
  c.cond.store(0, std::memory_order_relaxed);
  *task_id = c.task.task_id;
  return true;
}

bool A2A3SimPlatform::core_times(int core, uint64_t* start_ns, uint64_t* end_ns) {
  if (!config_.record_core_times) return false;
  *start_ns = cores_[core]->start_ns;
  *end_ns = cores_[core]->end_ns;
  return true;
}

}  // namespace pto2::sim
