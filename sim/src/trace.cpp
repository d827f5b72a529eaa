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

}  // namespace

Status write_chrome_trace(const std::string& path, const RunResult& run, const SimChip& chip, int scheduler_threads,
                          const KernelNamer& name_of) {
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
  auto core_pid = [&](int core) { return kClusterPid0 + chip.core_group(core); };
  emit(fmt::format(R"({{"name": "process_name", "ph": "M", "pid": 1, "args": {{"name": "{} chip"}}}})",
                   chip.platform_name()));
  lane(kOrchestratorLane, "orchestrator (AICPU)", 0);
  for (int s = 0; s < scheduler_threads; ++s) lane(kSchedulerLane0 + s, fmt::format("scheduler {} (AICPU)", s), 1 + s);
  std::vector<bool> used(chip.core_count(), false);
  for (const TaskRecord& r : run.records)
    if (r.core >= 0) used[r.core] = true;
  std::vector<bool> cluster_named(chip.core_groups(), false);
  for (int c = 0; c < chip.core_count(); ++c) {
    if (!used[c]) continue;
    const int cl = chip.core_group(c);
    if (!cluster_named[cl]) {
      cluster_named[cl] = true;
      emit(fmt::format(R"({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": "{}"}}}})",
                       kClusterPid0 + cl, json_escape(chip.group_name(cl))));
      emit(fmt::format(R"({{"name": "process_sort_index", "ph": "M", "pid": {}, "args": {{"sort_index": {}}}}})",
                       kClusterPid0 + cl, 10 + cl));
    }
    // Cube cores first, then the vector cores, within the group.
    lane_in(core_pid(c), kCoreLane0 + c, chip.core_name(c), chip.core_type(c) == WorkerType::kCube ? 0 : 1 + c);
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
  // The chip's own clock (tx8sim: simulated time) as a second process: a
  // lane per tile and one per tile's data movers.
  std::vector<TraceEvent> own = chip.trace_events();
  if (!own.empty()) {
    constexpr int kOwnPid = 2;
    emit(fmt::format(R"({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": "{}"}}}})", kOwnPid,
                     json_escape(chip.trace_clock_name())));
    std::vector<std::string> lanes;
    for (const TraceEvent& e : own) lanes.push_back(e.lane);
    std::sort(lanes.begin(), lanes.end());
    lanes.erase(std::unique(lanes.begin(), lanes.end()), lanes.end());
    for (size_t i = 0; i < lanes.size(); ++i) lane_in(kOwnPid, static_cast<int>(i), lanes[i], static_cast<int>(i));
    for (const TraceEvent& e : own) {
      const auto tid = std::lower_bound(lanes.begin(), lanes.end(), e.lane) - lanes.begin();
      emit(fmt::format(
          R"({{"name": "{}", "cat": "simulated", "ph": "X", "pid": {}, "tid": {}, "ts": {:.3f}, "dur": {:.3f}, "args": {{{}}}}})",
          json_escape(e.kernel_id == -2 ? e.name : name_of(e.kernel_id, e.worker_type) + e.name), kOwnPid, tid,
          double(e.start_ns) / 1000.0, double(e.duration_ns) / 1000.0, e.args_json));
    }
  }
  std::fprintf(f, "\n  ]\n}\n");
  const bool ok = std::fclose(f) == 0;
  return ok ? Status::Ok() : Status::Error(kInvalidArgument, fmt::format("short write to trace '{}'", path));
}

std::string summarize(const RunResult& run, const SimChip& chip) {
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
    std::string type_name;  // the first word of a core's name: AIC, AIV, NE, CT
    for (int c = 0; c < chip.core_count(); ++c) {
      if (chip.core_type(c) != type) continue;
      if (n == 0) type_name = chip.core_name(c).substr(0, chip.core_name(c).find(' '));
      ++n;
      used += busy[c] > 0;
      sum += busy[c];
      max = std::max(max, busy[c]);
    }
    out += fmt::format("\n  {} cores: {}/{} used, utilisation avg {:.1f}% max {:.1f}% of the wall time", type_name,
                       used, n, wall_us > 0 ? 100.0 * sum / n / wall_us : 0, wall_us > 0 ? 100.0 * max / wall_us : 0);
  }
  std::string per_core;
  int listed = 0;
  for (int c = 0; c < chip.core_count(); ++c) {
    if (busy[c] <= 0) continue;
    per_core += fmt::format("{}{} {:.1f}%", listed % 8 == 0 ? "\n    " : "  ",
                            chip.core_name(c).substr(0, chip.core_name(c).find(' ', 4)),
                            wall_us > 0 ? 100.0 * busy[c] / wall_us : 0);
    ++listed;
  }
  if (listed > 0) out += "\n  per core (busy, % of wall):" + per_core;
  // Per group (cluster, tile): its cores' busy time over its cores times the wall time.
  std::string per_group;
  const int groups = chip.core_groups();
  const char* kind = groups > 0 ? (chip.group_name(0).rfind("tile", 0) == 0 ? "tile" : "cluster") : "group";
  int groups_used = 0;
  double group_sum = 0;
  for (int g = 0; g < groups; ++g) {
    double b = 0;
    int cores = 0;
    for (int c = 0; c < chip.core_count(); ++c) {
      if (chip.core_group(c) != g) continue;
      b += busy[c];
      ++cores;
    }
    const double pct = wall_us > 0 && cores > 0 ? 100.0 * b / (cores * wall_us) : 0;
    group_sum += pct;
    if (b <= 0) continue;
    per_group += fmt::format("{}{} {:.1f}%", groups_used % 8 == 0 ? "\n    " : "  ", chip.group_name(g), pct);
    ++groups_used;
  }
  out += fmt::format("\n  {}s: {}/{} used, utilisation avg {:.1f}% (busy core time / (its cores x wall))", kind,
                     groups_used, groups, groups > 0 ? group_sum / groups : 0);
  if (groups_used > 0) out += fmt::format("\n  per {} (busy, % of its cores' wall):", kind) + per_group;
  if (on_cores > 0)
    out +=
        fmt::format("\n  scheduler overhead per task: ready->dispatch {:.2f} us, kernel end->completion seen {:.2f} us",
                    ready_to_dispatch / double(on_cores), end_to_complete / double(on_cores));
  return out;
}

}  // namespace pto2::sim
