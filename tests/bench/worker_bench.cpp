// L3 engine overheads with real forked children (issue 4's figures):
//   * mailbox round trip of a no-op task (dispatch written -> completion seen), p50 / p99
//   * the fixed cost of one run() and the marginal cost per task in runs of 1, 16, 256
//     tasks, for no-op sub tasks and for an empty chip callable
//   * warm (runs back to back, children spinning) and cold (a pause between runs, so
//     children and the scheduler have parked) separately
//   * CPU used by the parent and its children while idle
//   * CPU-bound sub tasks longer than the spin: wall time against the work's,
//     and the parent's CPU time meanwhile
//   * queueing many runs behind a held slot (submit_function), per run, at
//     1,000 and 10,000 queued: the cost of one should not grow with the queue
// Anchors (docs/worker.md, Performance): the reference design's L3 engine, 43 us fixed per run and 8.1 us
// per task. Figures only; nothing here fails on a time.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "pto/runner.h"
#include "pto/worker.h"

using namespace pto;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

using Submit = std::function<bool(Orchestrator&)>;

// Median wall time of run() with n tasks, in microseconds.
double time_runs(Worker& w, int n, int reps, int pause_ms, const Submit& submit) {
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    if (pause_ms) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    const auto t0 = Clock::now();
    RunResult res = w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
      for (int i = 0; i < n; ++i)
        if (!submit(o)) return 1;
      return 0;
    });
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!res.ok()) {
      std::fprintf(stderr, "run failed: %s\n", res.status.message.c_str());
      std::exit(1);
    }
  }
  return median(us);
}

LatencyHistogram minus(const LatencyHistogram& a, const LatencyHistogram& b) {
  LatencyHistogram d;
  for (int i = 0; i < LatencyHistogram::kBuckets; ++i) d.counts[i] = a.counts[i] - b.counts[i];
  d.count = a.count - b.count;
  d.sum_ns = a.sum_ns - b.sum_ns;
  return d;
}

double cpu_seconds_of(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(f, s);
  const auto p = s.rfind(')');
  if (p == std::string::npos) return 0;
  std::vector<std::string> fields;
  size_t i = p + 2;
  while (i < s.size()) {
    size_t j = s.find(' ', i);
    if (j == std::string::npos) j = s.size();
    fields.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  // fields[0] is state (field 3); utime, stime are fields 14, 15.
  return (std::stod(fields[11]) + std::stod(fields[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double self_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void measure(const char* what, Worker& w, const Submit& submit) {
  std::printf("\n%s\n", what);
  // Warm: back to back.
  time_runs(w, 16, 50, 0, submit);  // warm-up
  const WorkerStats before = w.stats();
  const double t1 = time_runs(w, 1, 400, 0, submit);
  const LatencyHistogram rtt = minus(w.stats().mailbox_round_trip, before.mailbox_round_trip);
  const double t0 = time_runs(w, 0, 400, 0, submit);
  const double t16 = time_runs(w, 16, 200, 0, submit);
  const double t256 = time_runs(w, 256, 40, 0, submit);
  std::printf("  mailbox round trip (1-task runs, %llu samples): p50 %.2f us  p99 %.2f us\n",
              (unsigned long long)rtt.count, rtt.percentile_ns(0.5) / 1e3, rtt.percentile_ns(0.99) / 1e3);
  std::printf("  warm  run() with 0 tasks: %.2f us (fixed cost)\n", t0);
  std::printf("  warm  run() with 1 task: %.2f us  -> marginal %.2f us/task\n", t1, t1 - t0);
  std::printf("  warm  run() with 16 tasks: %.2f us -> marginal %.2f us/task\n", t16, (t16 - t0) / 16);
  std::printf("  warm  run() with 256 tasks: %.2f us -> marginal %.2f us/task\n", t256, (t256 - t0) / 256);
  // Fixed cost as the intercept of the 1- and 256-task runs.
  const double per = (t256 - t1) / 255, fixed = t1 - per;
  if (fixed > 0.5)
    std::printf(
        "  warm  linear fit: fixed %.2f us + %.2f us/task   (reference L3: 43 us + 8.1 us/task: %.1fx / %.1fx)\n",
        fixed, per, 43.0 / fixed, 8.1 / std::max(per, 0.001));
  else
    std::printf(
        "  warm  linear fit: fixed ~0 us (within noise) + %.2f us/task   (reference L3: 43 us + 8.1 us/task: "
        "%.1fx per task)\n",
        per, 8.1 / std::max(per, 0.001));
  // Cold: children and the scheduler parked between runs.
  const double c1 = time_runs(w, 1, 40, 30, submit);
  const double c16 = time_runs(w, 16, 20, 30, submit);
  std::printf(
      "  cold  run() with 1 task: %.2f us; with 16 tasks: %.2f us (children parked: a wake-up "
      "across vCPUs costs ~20 us one way)\n",
      c1, c16);
}

}  // namespace

// The submit cost of an orchestration: its submit loop's time per task, in
// this process and from a runner (pto/runner.h: each submit crosses the
// runner channel). No-op sub tasks on 2 sub workers; medians of 5 runs.
void runner_submit_cost(uint32_t spin_us) {
  Worker w({.level = 3, .num_sub_workers = 2, .spin_us = spin_us});
  auto noop = w.register_callable(NativeCallable::import(BENCH_NATIVE_SUBS, "pto_test_noop"));
  if (!noop.ok() || !w.init().ok() || !w.name_callable("noop", noop).ok()) std::exit(1);
  auto t = w.alloc({1}, PTO_INT64);
  if (!t.ok()) std::exit(1);
  auto* ns = reinterpret_cast<int64_t*>(t.value.data);
  constexpr uint64_t kTasks = 20000;
  RunnerPool pool;
  const OrchestrationFunction in_runner = pool.orchestration(BENCH_RUNNER_ORCHS, "pto_test_orch_submit_timed", "timed");
  const OrchestrationFunction in_process = [&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    const auto t0 = Clock::now();
    for (uint64_t i = 0; i < kTasks; ++i)
      if (!o.submit_sub(noop).ok()) return 1;
    *ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    return 0;
  };
  TaskArgs a;
  a.add_tensor(t.value, NO_DEP).add_scalar(kTasks);
  auto median_us = [&](const OrchestrationFunction& fn, double* run_us) {
    std::vector<double> submit, run;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = Clock::now();
      RunResult r = w.run_function(fn, a, {});
      run.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kTasks);
      if (!r.ok()) {
        std::fprintf(stderr, "run failed: %s\n", r.status.message.c_str());
        std::exit(1);
      }
      submit.push_back(double(*ns) / 1e3 / kTasks);
    }
    std::sort(submit.begin(), submit.end());
    std::sort(run.begin(), run.end());
    *run_us = run[2];
    return submit[2];
  };
  double run_here = 0, run_runner = 0;
  const double here = median_us(in_process, &run_here);
  const double there = median_us(in_runner, &run_runner);
  std::printf(
      "\norchestration submit cost, %llu no-op sub tasks on 2 sub workers (median of 5):\n"
      "  in this process: %.2f us/task submitting, %.2f us/task whole run\n"
      "  from a runner:   %.2f us/task submitting, %.2f us/task whole run (%.2fx)   [target <= 2 us/task]\n",
      (unsigned long long)kTasks, here, run_here, there, run_runner, there / here);
}

// Runs queued behind one that holds the Worker's only slot, as a SubmitBatch
// queues its jobs: the median cost of one submit_function, in microseconds,
// over `reps` rounds of n.
double queue_cost(Worker& w, int n, int reps) {
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    std::atomic<bool> go{false};
    std::vector<RunHandle> hs;
    hs.push_back(w.submit_function(
        [&](Orchestrator&, const TaskArgsView&, const CallConfig&) {
          const auto until = Clock::now() + std::chrono::seconds(30);
          while (!go.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::microseconds(50));
          return 0;
        },
        {}, {}, nullptr, {}));
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i)
      hs.push_back(w.submit_function([](Orchestrator&, const TaskArgsView&, const CallConfig&) { return 0; }, {}, {},
                                     nullptr, {}));
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n);
    go = true;
    for (auto& h : hs) (void)h.wait(std::chrono::seconds(60));
  }
  return median(us);
}

int main(int argc, char** argv) {
  // --spin-us N: the Workers' spin budget (default 50); --only sub|long|chip|runner|queue: one part.
  uint32_t spin_us = 50;
  std::string only;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--spin-us") spin_us = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    if (std::string(argv[i]) == "--only") only = argv[i + 1];
  }
  if (!only.empty() && only != "sub" && only != "long" && only != "chip" && only != "runner" && only != "queue") {
    std::fprintf(stderr, "--only %s: expected sub, long, chip, runner or queue\n", only.c_str());
    return 2;
  }
  const auto wanted = [&](const char* part) { return only.empty() || only == part; };
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("pto worker bench: level-3 Worker, forked children, %d CPU(s)\n", cpus);
  if (wanted("sub")) {
    Worker w({.level = 3, .num_sub_workers = 1, .spin_us = spin_us});
    auto noop = w.register_callable(NativeCallable::import(BENCH_NATIVE_SUBS, "pto_test_noop"));
    if (!noop.ok() || !w.init().ok()) {
      std::fprintf(stderr, "setup failed: %s\n", noop.status.message.c_str());
      return 1;
    }
    measure("no-op sub tasks (1 sub worker)", w, [&](Orchestrator& o) { return o.submit_sub(noop).ok(); });

    // Idle: nothing to do for 2 s.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<int> pids;
    for (const auto& c : w.children()) pids.push_back(c.pid);
    double c0 = self_cpu_seconds();
    for (int p : pids) c0 += cpu_seconds_of(p);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    double c1 = self_cpu_seconds();
    for (int p : pids) c1 += cpu_seconds_of(p);
    std::printf("\nidle for 2 s: parent + children used %.3f%% of one CPU\n", (c1 - c0) / 2.0 * 100);
  }
  if (wanted("sub")) {
    Worker w({.level = 3, .num_sub_workers = 2, .spin_us = spin_us});
    auto noop = w.register_callable(NativeCallable::import(BENCH_NATIVE_SUBS, "pto_test_noop"));
    if (!noop.ok() || !w.init().ok()) return 1;
    measure("no-op sub tasks (2 sub workers)", w, [&](Orchestrator& o) { return o.submit_sub(noop).ok(); });
  }
  if (wanted("long")) {
    // CPU-bound sub tasks longer than the driver's spin: while they run, the
    // parent should park, not take the CPUs the children compute on.
    Worker w({.level = 3, .num_sub_workers = 2, .spin_us = spin_us});
    auto busy = w.register_callable(NativeCallable::import(BENCH_NATIVE_SUBS, "pto_test_busy"));
    if (!busy.ok() || !w.init().ok()) return 1;
    constexpr int kTasks = 100, kTaskUs = 5000;
    std::vector<double> walls, cpus;
    for (int rep = 0; rep < 5; ++rep) {
      const double c0 = self_cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      const RunResult r = w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
        for (int i = 0; i < kTasks; ++i)
          if (!o.submit_sub(busy, TaskArgs().add_scalar(kTaskUs)).ok()) return 1;
        return 0;
      });
      if (!r.ok()) return 1;
      walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      cpus.push_back(self_cpu_seconds() - c0);
    }
    std::sort(walls.begin(), walls.end());
    std::sort(cpus.begin(), cpus.end());
    const double ideal = kTasks * kTaskUs / 2 / 1e6;
    std::printf(
        "\n%d CPU-bound sub tasks of %d us on 2 sub workers (spin_us %u), median of 5: %.1f ms wall (%.2fx the "
        "%.0f ms of two CPUs' work), the parent's CPU %.1f ms\n",
        kTasks, kTaskUs, spin_us, walls[2] * 1e3, walls[2] / ideal, ideal * 1e3, cpus[2] * 1e3);
  }
  if (wanted("chip")) {
    Worker w({.level = 3, .num_chips = 1, .spin_us = spin_us});
    auto empty = w.register_callable(ChipCallable::from_config(BENCH_SLEEP_CONFIG));
    if (!empty.ok() || !w.init().ok()) {
      std::fprintf(stderr, "setup failed: %s\n", empty.status.message.c_str());
      return 1;
    }
    TaskArgs zero;
    zero.add_scalar(0);
    measure("empty chip callable (1 chip: the L2 runtime runs an orchestration that submits nothing)", w,
            [&](Orchestrator& o) { return o.submit_next_level(empty, zero).ok(); });
  }
  if (wanted("runner")) runner_submit_cost(spin_us);
  if (wanted("queue")) {
    Worker w({.level = 3, .num_sub_workers = 1, .spin_us = spin_us, .max_concurrent_runs = 1});
    if (!w.init().ok()) return 1;
    (void)queue_cost(w, 10'000, 1);  // warm: the allocator's first pages
    const double small = queue_cost(w, 1'000, 5), large = queue_cost(w, 10'000, 5);
    std::printf(
        "\nqueueing runs behind a held slot (submit_function): %.3f us per run at 1,000 queued, %.3f us at 10,000: "
        "%.2fx   [flat: ~1x]\n",
        small, large, large / small);
  }
  return 0;
}
