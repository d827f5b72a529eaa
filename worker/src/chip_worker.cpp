#include "chip_worker.h"

#include <fmt/format.h>

#include <cstring>

#include "pto/worker.h"
#include "pto2/sim/tensor_dump.h"
#include "pto2/sim/trace.h"

namespace pto {

using pto::package::ArgSpec;

Status ChipWorker::install(const Digest& digest, const std::string& config_path) {
  if (has(digest)) return Status::Ok();
  auto p = std::make_unique<Prepared>();
  if (Status s = pto::package::ChipConfig::load(config_path, &p->cfg); !s.ok()) return s;
  if (!p->cfg.platform.empty() && p->cfg.platform != platform_)
    return Status::Error(
        kWorkerInvalidArgument,
        fmt::format("the package is for {} ([runtime] platform) and this chip is {}", p->cfg.platform, platform_));
  p->kernels.resize(p->cfg.kernels.size());
  for (size_t i = 0; i < p->cfg.kernels.size(); ++i)
    if (Status s = pto2::sim::load_kernel(p->cfg.kernels[i].library, &p->kernels[i]); !s.ok()) return s;
  if (Status s = pto2::sim::load_orchestration(p->cfg.orchestration, &p->orch); !s.ok()) return s;
  prepared_[digest] = std::move(p);
  return Status::Ok();
}

ChipWorker::~ChipWorker() {
  for (auto& [key, e] : engines_) tear_down(e);
}

void ChipWorker::tear_down(Engine& e) {
  // A runtime whose run stalled may still have a kernel executing inside the
  // platform: both are then left alone (leaked) rather than freed under it.
  if (e.runtime && e.runtime->broken()) {
    e.runtime.reset();  // detaches its threads and leaks its memory (Runtime::~Runtime)
    (void)e.chip.release();
    return;
  }
  e.runtime.reset();
  e.chip.reset();
}

void ChipWorker::remove(const Digest& digest) {
  for (auto it = engines_.begin(); it != engines_.end();) {
    if (it->first.digest == digest) {
      tear_down(it->second);
      it = engines_.erase(it);
    } else {
      ++it;
    }
  }
  prepared_.erase(digest);
}

Status ChipWorker::engine_for(const Digest& digest, Prepared& p, int block_dim, int aicpu, bool profiling,
                              Engine** out) {
  const EngineKey key{digest, block_dim, aicpu, profiling};
  for (auto it = engines_.begin(); it != engines_.end(); ++it) {
    if (!(it->first == key)) continue;
    engines_.splice(engines_.begin(), engines_, it);  // most recently used
    *out = &engines_.front().second;
    return Status::Ok();
  }
  while (engines_.size() >= kMaxEngines) {
    tear_down(engines_.back().second);
    engines_.pop_back();
  }
  pto2::sim::SimChipOptions sc = pto2::sim::chip_options(p.cfg, platform_);
  sc.a2a3.block_dim = block_dim;
  sc.a2a3.aicpu_threads = sc.tx8.aicpu_threads = aicpu;
  sc.a2a3.record_core_times = sc.tx8.record_core_times = profiling;
  Status st;
  Engine e;
  if (st = pto2::sim::create_sim_chip(sc, &e.chip); !st.ok()) return st;
  for (size_t i = 0; i < p.cfg.kernels.size(); ++i)
    e.chip->register_kernel(p.cfg.kernels[i].func_id, p.cfg.kernels[i].core_type, p.kernels[i].entry);
  pto2::RuntimeConfig rc = p.cfg.runtime;
  if (Status s = rc.apply_env(); !s.ok()) return s;
  rc.scheduler_threads = sc.scheduler_threads();
  rc.profiling = profiling;
  e.runtime = pto2::Runtime::create(rc, *e.chip, &st);
  if (!e.runtime) return st;
  engines_.emplace_front(key, std::move(e));
  *out = &engines_.front().second;
  return Status::Ok();
}

void ChipWorker::set_progress_sink(std::atomic<uint64_t>* submitted, std::atomic<uint64_t>* completed) {
  std::lock_guard<std::mutex> g(progress_mu_);
  sink_submitted_ = submitted;
  sink_completed_ = completed;
}

pto2::RunResult ChipWorker::run_published(Engine& e, const Prepared& p, std::vector<uint64_t>& dev) {
  {
    std::lock_guard<std::mutex> g(progress_mu_);
    running_ = e.runtime.get();
  }
  pto2::RunResult rr = e.runtime->run(p.orch.config, p.orch.entry, dev.data(), static_cast<int>(dev.size()));
  std::lock_guard<std::mutex> g(progress_mu_);
  running_ = nullptr;
  if (sink_submitted_) {
    sink_submitted_->store(rr.stats.tasks_submitted, std::memory_order_relaxed);
    sink_completed_->store(rr.stats.tasks_completed, std::memory_order_relaxed);
  }
  return rr;
}

void ChipWorker::publish_progress() const {
  std::lock_guard<std::mutex> g(progress_mu_);
  if (!running_ || !sink_submitted_) return;
  const pto2::Runtime::Progress p = running_->progress();
  sink_submitted_->store(p.submitted, std::memory_order_relaxed);
  sink_completed_->store(p.completed, std::memory_order_relaxed);
}

// A task's arguments against the callable's signature (its kernel config's
// [[args]]). Messages name the callable by its digest, the dtypes by name,
// and no path or address: they reach the daemon's clients.
Status ChipWorker::check_args(const Digest& digest, const Prepared& p, const TaskArgsView& args) {
  const auto& specs = p.cfg.args;
  int n_tensors = 0, n_scalars = 0;
  for (const ArgSpec& a : specs) ++(a.role == ArgSpec::Role::kScalar ? n_scalars : n_tensors);
  // The messages' parts are built only for a message: this runs on every task.
  const auto callable = [&] { return to_hex(digest).substr(0, 16); };
  if (args.tensor_count != n_tensors) {
    std::string names;
    for (const ArgSpec& a : specs)
      if (a.role != ArgSpec::Role::kScalar) names += (names.empty() ? "" : ", ") + a.name;
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("chip callable {} takes {} tensors ({}); the task passed {}", callable(),
                                     n_tensors, names, args.tensor_count));
  }
  if (args.scalar_count != 0 && args.scalar_count != n_scalars)
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("chip callable {} takes {} scalars (or none, for the config's values); the task "
                                     "passed {}",
                                     callable(), n_scalars, args.scalar_count));
  for (int i = 0, t = 0; i < static_cast<int>(specs.size()); ++i) {
    const ArgSpec& a = specs[i];
    if (a.role == ArgSpec::Role::kScalar) continue;
    const ContinuousTensor& x = args.tensors[t++];
    if (x.dtype != a.dtype || tensor_bytes(x) != a.bytes() || x.data == 0)
      return Status::Error(
          kWorkerInvalidArgument,
          fmt::format("chip callable {}: tensor {} ('{}') must be {} with {} bytes; the task passed {}", callable(),
                      t - 1, a.name, pto_dtype_name(a.dtype), a.bytes(),
                      x.data == 0 ? std::string("no buffer")
                                  : fmt::format("{} with {} bytes", pto_dtype_name(x.dtype), tensor_bytes(x))));
  }
  return Status::Ok();
}

Status ChipWorker::run(const Digest& digest, const TaskArgsView& args, const CallConfig& cfg) {
  auto it = prepared_.find(digest);
  if (it == prepared_.end())
    return Status::Error(kWorkerNotRegistered, "chip callable " + to_hex(digest) + " is not installed on this chip");
  Prepared& p = *it->second;
  const auto& specs = p.cfg.args;
  if (Status s = check_args(digest, p, args); !s.ok()) return s;
  if (cfg.enable_pmu)
    return Status::Error(kWorkerInvalidArgument,
                         "enable_pmu: the simulated chip (a2a3sim) has no performance "
                         "counters; leave enable_pmu at 0");
  const std::string prefix(cfg.output_prefix, strnlen(cfg.output_prefix, sizeof cfg.output_prefix));
  if (cfg.enable_dump_tensor && prefix.empty())
    return Status::Error(kWorkerInvalidArgument,
                         "enable_dump_tensor needs an output_prefix: the directory the "
                         "tensors are written to");
  if (cfg.block_dim > 0 && platform_ != "a2a3sim")
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("CallConfig block_dim {}: block_dim is a2a3sim's clusters; this chip is {}",
                                     cfg.block_dim, platform_));
  Engine* e = nullptr;
  if (Status s = engine_for(digest, p, cfg.block_dim > 0 ? cfg.block_dim : p.cfg.block_dim,
                            cfg.aicpu_thread_num > 0 ? cfg.aicpu_thread_num : p.cfg.aicpu_threads,
                            cfg.enable_profiling != 0, &e);
      !s.ok())
    return s;

  // Host (shared) tensors -> the chip's global memory, in the config's argument order.
  auto& gm = e->chip->memory();
  std::vector<uint64_t> dev(specs.size());
  std::vector<void*> owned;
  auto free_all = [&] {
    for (void* q : owned) (void)gm.free(q);
  };
  Status status;
  for (int i = 0, t = 0, s = 0; i < static_cast<int>(specs.size()); ++i) {
    const ArgSpec& a = specs[i];
    if (a.role == ArgSpec::Role::kScalar) {
      dev[i] = args.scalar_count ? args.scalars[s] : a.scalar;
      ++s;
      continue;
    }
    const ContinuousTensor& x = args.tensors[t++];
    void* d = nullptr;
    if (status = gm.alloc(a.bytes(), &d); !status.ok()) break;
    owned.push_back(d);
    if (status = gm.copy_to_device(d, reinterpret_cast<const void*>(x.data), a.bytes()); !status.ok()) break;
    dev[i] = reinterpret_cast<uint64_t>(d);
  }
  if (!status.ok()) {
    free_all();
    return status;
  }
  auto name_of = [&](int32_t id, int32_t type) -> std::string {
    if (type == 2) return "dependency-only";
    for (const auto& k : p.cfg.kernels)
      if (k.func_id == id && static_cast<int32_t>(k.core_type) == type) return k.name;
    return fmt::format("func{}", id);
  };
  std::unique_ptr<pto2::sim::TensorDump> dump;
  if (cfg.enable_dump_tensor) {
    dump = std::make_unique<pto2::sim::TensorDump>(prefix, name_of);
    if (Status s = dump->prepare(); !s.ok()) {
      free_all();
      return s;
    }
    e->runtime->set_task_observer(dump.get());
  }
  pto2::RunResult rr = run_published(*e, p, dev);
  if (dump) e->runtime->set_task_observer(nullptr);
  if (rr.ok()) {
    for (int i = 0, t = 0; i < static_cast<int>(specs.size()); ++i) {
      const ArgSpec& a = specs[i];
      if (a.role == ArgSpec::Role::kScalar) continue;
      const ContinuousTensor& x = args.tensors[t++];
      if (a.writes())
        (void)gm.copy_from_device(reinterpret_cast<void*>(x.data), reinterpret_cast<void*>(dev[i]), a.bytes());
    }
  }
  free_all();
  if (dump && rr.ok())
    if (Status ds = dump->status(); !ds.ok()) return ds;
  if (rr.ok() && cfg.enable_profiling && !prefix.empty()) {
    const std::string path = prefix + ".json";
    if (Status ts = pto2::sim::write_chrome_trace(path, rr, *e->chip, e->runtime->config().scheduler_threads, name_of);
        !ts.ok())
      return ts;
  }
  if (!rr.ok())
    return Status::Error(rr.status.code,
                         fmt::format("chip run of {} failed: {} ({}): {}", p.cfg.path, pto2::error_name(rr.status.code),
                                     rr.status.code, rr.status.message));
  return Status::Ok();
}

}  // namespace pto
