#include "pto2/sim/trace.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

namespace pto2::sim {

namespace {

constexpr int kOrchestratorLane = 1;
constexpr int kSchedulerLane0 = 10;
constexpr int kCoreLane0 = 100;
constexpr int kClusterPid0 = 100;  // each cluster is a process of the trace: its cores' lanes side by side

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out.push_back(c);
  }
  return out;
}

std::string core_name(const A2A3SimPlatform& chip, int core) {
  const bool cube = chip.core_type(core) == WorkerType::kCube;
  const int first = cube ? 0 : chip.config().block_dim;
  return fmt::format("{} {} (cluster {})", cube ? "AIC" : "AIV", core - first, chip.cluster_of(core));
}

}  // namespace

Status write_chrome_trace(const std::string& path, const RunResult& run, const A2A3SimPlatform& chip,
                          int scheduler_threads, const KernelNamer& name_of) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Status::Error(kInvalidArgument, fmt::format("cannot write trace '{}'", path));
  const uint64_t t0 = run.start_ns;
  auto us = [&](uint64_t ns) { return double(ns >= t0 ? ns - t0 : 0) / 1000.0; };
  bool first = true;
  auto emit = [&](const std::string& ev) {
    std::fprintf(f, "%s\n    %s", first ? "" : ",", ev.c_str());
    first = false;
  };
  std::fprintf(f, "{\n  \"displayTimeUnit\": \"ns\",\n  \"traceEvents\": [");
  auto lane_in = [&](int pid, int tid, const std::string& name, int order) {
    emit(fmt::format(R"({{"name": "thread_name", "ph": "M", "pid": {}, "tid": {}, "args": {{"name": "{}"}}}})", pid,
                     tid, json_escape(name)));
    emit(fmt::format(
        R"({{"name": "thread_sort_index", "ph": "M", "pid": {}, "tid": {}, "args": {{"sort_index": {}}}}})", pid,
        tid, order));
  };
  auto lane = [&](int tid, const std::string& name, int order) { lane_in(1, tid, name, order); };
  auto core_pid = [&](int core) { return kClusterPid0 + chip.cluster_of(core); };
  emit(R"({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "a2a3sim chip"}})");
  lane(kOrchestratorLane, "orchestrator (AICPU)", 0);
  for (int s = 0; s < scheduler_threads; ++s) lane(kSchedulerLane0 + s, fmt::format("scheduler {} (AICPU)", s), 1 + s);
  std::vector<bool> used(chip.core_count(), false);
  for (const TaskRecord& r : run.records)
    if (r.core >= 0) used[r.core] = true;
  std::vector<bool> cluster_named(chip.config().block_dim, false);
  for (int c = 0; c < chip.core_count(); ++c) {
    if (!used[c]) continue;
    const int cl = chip.cluster_of(c);
    if (!cluster_named[cl]) {
      cluster_named[cl] = true;
      emit(fmt::format(R"({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": "cluster {}"}}}})",
                       kClusterPid0 + cl, cl));
      emit(fmt::format(R"({{"name": "process_sort_index", "ph": "M", "pid": {}, "args": {{"sort_index": {}}}}})",
                       kClusterPid0 + cl, 10 + cl));
    }
    // AIC first, then the AIVs, within the cluster.
    lane_in(core_pid(c), kCoreLane0 + c, core_name(chip, c), chip.core_type(c) == WorkerType::kCube ? 0 : 1 + c);
  }

  emit(fmt::format(R"({{"name": "orchestration", "ph": "X", "pid": 1, "tid": {}, "ts": {:.3f}, "dur": {:.3f}}})",
                   kOrchestratorLane, 0.0, us(run.orchestration_end_ns)));
  for (const TaskRecord& r : run.records) {
    std::string name = json_escape(name_of(r.kernel_id, r.worker_type));
    if (r.block_num > 1) name += fmt::format(" [{}/{}]", r.block_idx, r.block_num);
    const std::string args = fmt::format(
        R"("task": {}, "kernel": {}, "core": {}, "cluster": {}, "block": {}, "block_num": {}, "pinned_cluster": {}, "group": {}, "submit_us": {:.3f}, "ready_us": {:.3f}, "dispatch_us": {:.3f}, "start_us": {:.3f}, "end_us": {:.3f}, "complete_us": {:.3f})",
        r.task_id, r.kernel_id, r.core, r.cluster, r.block_idx, r.block_num, r.pinned_cluster, r.group,
        us(r.submit_ns), us(r.ready_ns), us(r.dispatch_ns), us(r.start_ns), us(r.end_ns), us(r.complete_ns));
    emit(fmt::format(R"({{"name": "submit {}", "ph": "i", "s": "t", "pid": 1, "tid": {}, "ts": {:.3f}}})", name,
                     kOrchestratorLane, us(r.submit_ns)));
    const int sched_lane = kSchedulerLane0 + r.scheduler;
    emit(fmt::format(R"({{"name": "dispatch {}", "ph": "i", "s": "t", "pid": 1, "tid": {}, "ts": {:.3f}}})", name,
                     sched_lane, us(r.dispatch_ns)));
    emit(fmt::format(R"({{"name": "complete {}", "ph": "i", "s": "t", "pid": 1, "tid": {}, "ts": {:.3f}}})", name,
                     sched_lane, us(r.complete_ns)));
    const int tid = r.core >= 0 ? kCoreLane0 + r.core : sched_lane;
    const int pid = r.core >= 0 ? core_pid(r.core) : 1;
    emit(fmt::format(
        R"({{"name": "{}", "cat": "kernel", "ph": "X", "pid": {}, "tid": {}, "ts": {:.3f}, "dur": {:.3f}, "args": {{{}}}}})",
        name, pid, tid, us(r.start_ns), double(r.end_ns - r.start_ns) / 1000.0, args));
  }
  std::fprintf(f, "\n  ]\n}\n");
  const bool ok = std::fclose(f) == 0;
  return ok ? Status::Ok() : Status::Error(kInvalidArgument, fmt::format("short write to trace '{}'", path));
}

std::string summarize(const RunResult& run, const A2A3SimPlatform& chip) {
  const double wall_us = double(run.stats.wall_ns) / 1000.0;
  std::vector<double> busy(chip.core_count(), 0.0);
  double ready_to_dispatch = 0, end_to_complete = 0;
  uint64_t on_cores = 0;
  for (const TaskRecord& r : run.records) {
    if (r.core < 0) continue;
    busy[r.core] += double(r.end_ns - r.start_ns) / 1000.0;
    ready_to_dispatch += double(r.dispatch_ns - r.ready_ns) / 1000.0;
    end_to_complete += double(r.complete_ns > r.end_ns ? r.complete_ns - r.end_ns : 0) / 1000.0;
    ++on_cores;
  }
  // A block task leaves one record per block: count its task once.
  std::vector<uint64_t> ids;
  ids.reserve(run.records.size());
  for (const TaskRecord& r : run.records) ids.push_back(r.task_id);
  std::sort(ids.begin(), ids.end());
  const auto tasks = static_cast<size_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
  std::string out = fmt::format("summary: {} tasks ({} kernel runs on cores), wall {:.1f} us", tasks, on_cores, wall_us);
  for (WorkerType type : {WorkerType::kCube, WorkerType::kVector}) {
    double sum = 0, max = 0;
    int n = 0, used = 0;
    for (int c = 0; c < chip.core_count(); ++c) {
      if (chip.core_type(c) != type) continue;
      ++n;
      used += busy[c] > 0;
      sum += busy[c];
      max = std::max(max, busy[c]);
    }
    out += fmt::format("\n  {} cores: {}/{} used, utilisation avg {:.1f}% max {:.1f}% of the wall time",
                       type == WorkerType::kCube ? "AIC" : "AIV", used, n, wall_us > 0 ? 100.0 * sum / n / wall_us : 0,
                       wall_us > 0 ? 100.0 * max / wall_us : 0);
  }
  std::string per_core;
  int listed = 0;
  for (int c = 0; c < chip.core_count(); ++c) {
    if (busy[c] <= 0) continue;
    per_core += fmt::format("{}{} {:.1f}%", listed % 8 == 0 ? "\n    " : "  ",
                            core_name(chip, c).substr(0, core_name(chip, c).find(' ', 4)),
                            wall_us > 0 ? 100.0 * busy[c] / wall_us : 0);
    ++listed;
  }
  if (listed > 0) out += "\n  per core (busy, % of wall):" + per_core;
  // Per cluster: its three cores' busy time over three times the wall time.
  std::string per_cluster;
  const int clusters = chip.config().block_dim;
  const int cores_per_cluster = 1 + PLATFORM_AIV_PER_CLUSTER;
  int clusters_used = 0;
  double cluster_sum = 0;
  for (int cl = 0; cl < clusters; ++cl) {
    double b = 0;
    for (int c = 0; c < chip.core_count(); ++c)
      if (chip.cluster_of(c) == cl) b += busy[c];
    const double pct = wall_us > 0 ? 100.0 * b / (cores_per_cluster * wall_us) : 0;
    cluster_sum += pct;
    if (b <= 0) continue;
    per_cluster += fmt::format("{}c{} {:.1f}%", clusters_used % 8 == 0 ? "\n    " : "  ", cl, pct);
    ++clusters_used;
  }
  out += fmt::format("\n  clusters: {}/{} used, utilisation avg {:.1f}% (busy core time / (3 cores x wall))",
                     clusters_used, clusters, clusters > 0 ? cluster_sum / clusters : 0);
  if (clusters_used > 0) out += "\n  per cluster (busy, % of its 3 cores' wall):" + per_cluster;
  if (on_cores > 0)
    out +=
        fmt::format("\n  scheduler overhead per task: ready->dispatch {:.2f} us, kernel end->completion seen {:.2f} us",
                    ready_to_dispatch / double(on_cores), end_to_complete / double(on_cores));
  return out;
}

}  // namespace pto2::sim
