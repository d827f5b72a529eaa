// Several runs in flight on one Worker (docs/worker.md, "Runs"): they
// overlap when their tensors are disjoint and are ordered by submission when
// they touch the same bytes; ready tasks are shared by priority and round
// robin; cancellation, deadlines and task timeouts reach running work.
//
// Tasks record when they ran: the "stamp" sub callable sleeps scalars[0] ms
// and writes its start and end (CLOCK_MONOTONIC, comparable across the
// children) into int64 tensor 0 at pair scalars[1].
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pto/base/clock.h"
#include "worker_support.h"

using namespace pto;
using namespace pto_test;

namespace {

int stamp(const TaskArgsView& a, std::string&) {
  auto* t = reinterpret_cast<int64_t*>(a.tensors[0].data);
  const uint64_t slot = a.scalar_count > 1 ? a.scalars[1] : 0;
  t[2 * slot] = static_cast<int64_t>(now_ns());
  std::this_thread::sleep_for(std::chrono::milliseconds(a.scalars[0]));
  t[2 * slot + 1] = static_cast<int64_t>(now_ns());
  return 0;
}

int pause_us(const TaskArgsView& a, std::string&) {
  std::this_thread::sleep_for(std::chrono::microseconds(a.scalars[0]));
  return 0;
}

int fail_now(const TaskArgsView&, std::string& err) {
  err = "deliberate";
  return 3;
}

struct Fixture {
  explicit Fixture(int subs, int max_runs = 4) : w({.level = 3, .num_sub_workers = subs, .max_concurrent_runs = max_runs}) {
    stamp_h = w.register_callable(NativeCallable::function("stamp", stamp));
    fail_h = w.register_callable(NativeCallable::function("fail_now", fail_now));
    pause_h = w.register_callable(NativeCallable::function("pause_us", pause_us));
    REQUIRE(w.init().ok());
    auto r = w.alloc({64}, PTO_INT64);
    REQUIRE(r.ok());
    times = r.value;
    std::memset(reinterpret_cast<void*>(times.data), 0, 64 * 8);
  }
  int64_t start(int slot) const { return reinterpret_cast<int64_t*>(times.data)[2 * slot]; }
  int64_t end(int slot) const { return reinterpret_cast<int64_t*>(times.data)[2 * slot + 1]; }
  // A run with one stamp task on `data` (tag `tag`), recorded in `slot`.
  RunHandle stamp_run(const ContinuousTensor& data, TensorArgType tag, int ms, int slot, RunOptions o = {}) {
    return w.submit_function(
        [=, this](Orchestrator& orch, const TaskArgsView&, const CallConfig&) {
          TaskArgs a;
          a.add_tensor(times, NO_DEP).add_tensor(data, tag).add_scalar(ms).add_scalar(slot);
          return orch.submit_sub(stamp_h, a).ok() ? 0 : 1;
        },
        {}, {}, nullptr, o);
  }
  Worker w;
  CallableHandle stamp_h, fail_h, pause_h;
  ContinuousTensor times;
};

ContinuousTensor buffer(Worker& w) {
  auto r = w.alloc({1024}, PTO_FLOAT32);
  REQUIRE(r.ok());
  return r.value;
}

}  // namespace

TEST_CASE("two runs on disjoint tensors overlap in time") {
  Fixture f(2);
  ContinuousTensor x = buffer(f.w), y = buffer(f.w);
  const uint64_t t0 = now_ns();
  RunHandle a = f.stamp_run(x, INOUT, 300, 0), b = f.stamp_run(y, INOUT, 300, 1);
  REQUIRE(a.result().ok());
  REQUIRE(b.result().ok());
  const double wall_ms = double(now_ns() - t0) / 1e6;
  INFO("wall " << wall_ms << " ms");  // 300+ run together, 600+ one after the other
  CHECK(f.start(1) < f.end(0));  // both were running at once
  CHECK(f.start(0) < f.end(1));
}

TEST_CASE("runs that write one tensor run in submission order - runs that read it run together") {
  Fixture f(2);
  ContinuousTensor t = buffer(f.w);
  RunHandle a = f.stamp_run(t, INOUT, 300, 0);
  REQUIRE(eventually([&] { return a.progress().submitted == 1; }));
  RunHandle b = f.stamp_run(t, OUT_EXISTING, 100, 1);  // writes t after a
  REQUIRE(eventually([&] { return b.progress().submitted == 1; }));
  RunHandle c = f.stamp_run(t, IN, 300, 2), d = f.stamp_run(t, IN, 300, 3);  // read after b, together
  for (RunHandle* h : {&a, &b, &c, &d}) REQUIRE(h->result().ok());
  CHECK(f.start(1) >= f.end(0));
  CHECK(f.start(2) >= f.end(1));
  CHECK(f.start(3) >= f.end(1));
  CHECK(f.start(3) < f.end(2));  // the two readers overlapped
  CHECK(f.start(2) < f.end(3));
}

TEST_CASE("another run's failed writer orders a reader but does not skip it") {
  Fixture f(2);
  ContinuousTensor t = buffer(f.w);
  std::atomic<bool> submitted{false};
  RunHandle a = f.w.submit_function(
      [&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
        // A slow task first, so the failing writer is still pending when b reads.
        REQUIRE(o.submit_sub(f.stamp_h, TaskArgs().add_tensor(f.times, NO_DEP).add_tensor(t, INOUT).add_scalar(200))
                    .ok());
        REQUIRE(o.submit_sub(f.fail_h, TaskArgs().add_tensor(t, INOUT)).ok());
        submitted = true;
        return 0;
      },
      {}, {}, nullptr, {});
  REQUIRE(eventually([&] { return submitted.load(); }));
  RunHandle b = f.stamp_run(t, IN, 10, 5);
  const RunResult& ra = a.result();
  const RunResult& rb = b.result();
  CHECK_FALSE(ra.ok());
  CHECK(ra.tasks_failed == 1);
  REQUIRE(rb.ok());  // in its own run, a reader of a failed writer still runs
  CHECK(rb.tasks_succeeded == 1);
  CHECK(f.start(5) >= f.end(0));
}

TEST_CASE("max_concurrent_runs bounds the runs in flight - a further run waits for a slot") {
  Fixture f(2, /*max_runs=*/1);
  ContinuousTensor x = buffer(f.w), y = buffer(f.w);
  RunHandle a = f.stamp_run(x, INOUT, 200, 0), b = f.stamp_run(y, INOUT, 200, 1);
  REQUIRE(a.result().ok());
  REQUIRE(b.result().ok());
  CHECK(f.start(1) >= f.end(0));
}

TEST_CASE("runs with threads of their own end as their last task does: no thread waits out its re-check") {
  // Four runs in flight, one 1 ms task each: one run's thread drives, the others
  // sleep until their run has drained and are woken by whoever ends its last
  // task, once that thread has let the engine lock go (docs/worker.md,
  // "Waiting"). A wake-up lost on the way leaves the thread to its 100 ms
  // re-check: its run's wall time says so.
  Fixture f(2, /*max_runs=*/4);
  constexpr int kRuns = 400;
  // One attempt: how many runs took 100 ms or more.
  const auto attempt = [&] {
    std::vector<RunHandle> runs;
    runs.reserve(kRuns);
    for (int i = 0; i < kRuns; ++i)
      runs.push_back(f.w.submit_function(
          [&f](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
            TaskArgs a;
            a.add_scalar(1000);  // us: long enough that the threads of the other runs sleep
            return o.submit_sub(f.pause_h, a).ok() ? 0 : 1;
          },
          {}, {}, nullptr, {}));
    int slow = 0;
    for (RunHandle& h : runs) {
      REQUIRE(h.wait(std::chrono::seconds(60)));
      REQUIRE(h.result().ok());
      if (h.result().wall_ns >= 100'000'000) ++slow;
    }
    return slow;
  };
  // A stuck thread holds its run for 100 ms while the others go on, so the
  // count is bounded by an attempt's length: 15 of 400 (three attempts) with
  // the driver's deferred wake-ups dropped on purpose, 0 as it is. A stall
  // of the machine may slow a few runs of one attempt; a lost wake-up slows
  // every attempt: the best of up to three is checked.
  int best = kRuns;
  std::string seen;
  for (int i = 0; i < 3 && best > 3; ++i) {
    const int slow = attempt();
    best = std::min(best, slow);
    seen += (seen.empty() ? "" : ", ") + std::to_string(slow);
  }
  INFO("runs of " << kRuns << " that took 100 ms or more, per attempt: " << seen);
  CHECK(best <= 3);
}

TEST_CASE("fair sharing: a one-task run is served while a 10,000-task run is in flight") {
  for (const char* other : {"other-principal", ""}) {  // another principal, or the same one (round robin between runs)
    DYNAMIC_SECTION("the short run's principal: '" << other << "'") {
      Fixture f(1);
      ContinuousTensor x = buffer(f.w), y = buffer(f.w);
      std::atomic<bool> long_done{false};
      RunHandle big = f.w.submit_function(
          [&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
            for (int i = 0; i < 10000; ++i)  // ~0.1 ms each: a second or more of work
              if (!o.submit_sub(f.pause_h, TaskArgs().add_tensor(x, NO_DEP).add_scalar(100)).ok()) return 1;
            return 0;
          },
          {}, {}, [&](const RunResult&) { long_done = true; }, RunOptions{.principal = "bulk"});
      REQUIRE(eventually([&] { return big.progress().finished > 500; }, 15000));
      // One task of 0 ms on y: its latency is its wait for the one sub worker.
      const uint64_t t0 = now_ns();
      RunHandle one = f.stamp_run(y, INOUT, 0, 7, RunOptions{.principal = other});
      REQUIRE(one.result().ok());
      const double ms = double(now_ns() - t0) / 1e6;
      // When its task began in the child: ~1 ms alone on the machine, at most
      // 11 ms beside two busy loops. (It began after 40-170 ms in 12 of 180
      // such starts while the fork left the freed heap shared copy-on-write
      // with the children: the run thread's first malloc faulted on it page
      // by page - worker/src/engine_fork.cpp.) FIFO would take 0.9 s or more.
      const double began_ms = double(f.start(7) - static_cast<int64_t>(t0)) / 1e6;
      const RunProgress p = big.progress();
      INFO("one-task run took " << ms << " ms, its task began after " << began_ms << " ms; the bulk run had "
                                << p.finished << " of 10000 tasks done");
      CHECK_FALSE(long_done.load());  // it was really in flight
      CHECK(began_ms < 400);          // FIFO: behind ~9,000 tasks of 0.1 ms
      REQUIRE(big.result().ok());
    }
  }
}

TEST_CASE("priorities: a HIGH run's task goes before the queued tasks of a LOW run") {
  Fixture f(1);
  ContinuousTensor x = buffer(f.w), y = buffer(f.w);
  RunHandle low = f.w.submit_function(
      [&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
        for (int i = 0; i < 100; ++i)
          if (!o.submit_sub(f.stamp_h, TaskArgs().add_tensor(f.times, NO_DEP).add_tensor(x, NO_DEP).add_scalar(10))
                   .ok())
            return 1;
        return 0;
      },
      {}, {}, nullptr, RunOptions{.priority = RunPriority::LOW});
  REQUIRE(eventually([&] { return low.progress().finished >= 2; }));
  const uint64_t t0 = now_ns();
  RunHandle high = f.stamp_run(y, INOUT, 0, 9, RunOptions{.priority = RunPriority::HIGH});
  REQUIRE(high.result().ok());
  const double ms = double(now_ns() - t0) / 1e6;
  INFO("HIGH task latency " << ms << " ms, " << low.progress().finished << " LOW tasks done");
  // At most the LOW task in progress (10 ms) ahead of it, ~12 ms alone on
  // the machine; FIFO would take ~1 s (the LOW tasks left). Wide for a
  // loaded host under TSan.
  CHECK(ms < 300);
  CHECK(low.progress().finished < 90);
  REQUIRE(low.result().ok());
}

TEST_CASE("queued runs take the slot by priority, then in submission order") {
  // One slot, held until every run is queued: the queue alone orders them.
  Worker w({.level = 3, .num_sub_workers = 1, .max_concurrent_runs = 1});
  REQUIRE(w.init().ok());
  std::atomic<bool> go{false};
  RunHandle gate = w.submit_function(
      [&](Orchestrator&, const TaskArgsView&, const CallConfig&) {
        const uint64_t until = now_ns() + 10'000'000'000ull;
        while (!go.load() && now_ns() < until) std::this_thread::sleep_for(std::chrono::microseconds(100));
        return 0;
      },
      {}, {}, nullptr, {});
  constexpr RunPriority kOrder[] = {RunPriority::NORMAL, RunPriority::LOW,   RunPriority::HIGH,   RunPriority::NORMAL,
                                    RunPriority::HIGH,   RunPriority::LOW,   RunPriority::NORMAL, RunPriority::LOW,
                                    RunPriority::HIGH,   RunPriority::NORMAL};
  std::vector<RunHandle> hs;
  for (RunPriority p : kOrder)
    hs.push_back(w.submit_function([](Orchestrator&, const TaskArgsView&, const CallConfig&) { return 0; }, {}, {},
                                   nullptr, RunOptions{.priority = p}));
  go = true;
  REQUIRE(gate.wait(std::chrono::seconds(30)));
  std::vector<size_t> by_start(hs.size());
  for (size_t i = 0; i < hs.size(); ++i) {
    REQUIRE(hs[i].wait(std::chrono::seconds(30)));
    REQUIRE(hs[i].result().ok());
    by_start[i] = i;
  }
  std::sort(by_start.begin(), by_start.end(), [&](size_t a, size_t b) {
    return std::make_pair(hs[a].result().start_ns, a) < std::make_pair(hs[b].result().start_ns, b);
  });
  // HIGH 2, 4, 8; NORMAL 0, 3, 6, 9; LOW 1, 5, 7.
  CHECK(by_start == std::vector<size_t>{2, 4, 8, 0, 3, 6, 9, 1, 5, 7});
}

TEST_CASE("a batch's runs hold at most batch_width slots - in order - what is queued behind waits - HIGH goes first") {
  // Four slots, six runs of one batch two wide: each run's function holds its
  // slot for 100 ms and counts the batch's runs in flight meanwhile. Run 4
  // cannot start before two rounds of two have run (200 ms): the test cancels
  // it at once.
  Worker w({.level = 3, .num_sub_workers = 1, .max_concurrent_runs = 4});
  REQUIRE(w.init().ok());
  std::atomic<int> in_flight{0}, most{0};
  auto batch_run = [&](Orchestrator&, const TaskArgsView&, const CallConfig&) {
    const int now = ++in_flight;
    for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    --in_flight;
    return 0;
  };
  auto quick = [](Orchestrator&, const TaskArgsView&, const CallConfig&) { return 0; };
  const RunOptions in_batch{.batch = 77, .batch_width = 2};
  std::vector<RunHandle> batch;
  for (int i = 0; i < 6; ++i) batch.push_back(w.submit_function(batch_run, {}, {}, nullptr, in_batch));
  RunHandle behind = w.submit_function(quick, {}, {}, nullptr, {});  // NORMAL, after the batch
  RunHandle urgent = w.submit_function(quick, {}, {}, nullptr, RunOptions{.priority = RunPriority::HIGH});
  REQUIRE(batch[4].cancel("the test cancels a queued run of the batch"));
  for (RunHandle* h : {&behind, &urgent}) {
    REQUIRE(h->wait(std::chrono::seconds(30)));
    REQUIRE(h->result().ok());
  }
  std::vector<uint64_t> starts;
  for (int i = 0; i < 6; ++i) {
    REQUIRE(batch[i].wait(std::chrono::seconds(30)));
    if (i == 4) {
      CHECK(batch[i].result().status.code == kWorkerCancelled);
      CHECK(batch[i].result().start_ns == 0);  // it never started
      continue;
    }
    REQUIRE(batch[i].result().ok());
    starts.push_back(batch[i].result().start_ns);
  }
  CHECK(most.load() == 2);  // two at once, never more, though four slots were free
  CHECK(std::is_sorted(starts.begin(), starts.end()));
  // HIGH overtook the batch's queued runs; the NORMAL run after the batch
  // waited until the batch's last run had started.
  CHECK(urgent.result().start_ns < starts[2]);
  CHECK(behind.result().start_ns >= starts.back());
}

TEST_CASE("batch_width is refused where nothing queues the run: a detached run, run()") {
  Worker w({.level = 3, .num_sub_workers = 1});
  REQUIRE(w.init().ok());
  auto quick = [](Orchestrator&, const TaskArgsView&, const CallConfig&) { return 0; };
  RunHandle h = w.submit_function(quick, {}, {}, nullptr, RunOptions{.detached = true, .batch = 1, .batch_width = 2});
  REQUIRE(h.wait(std::chrono::seconds(30)));
  CHECK(h.result().status.code == kWorkerInvalidArgument);
  CHECK(h.result().status.message.find("batch_width 2 on a detached run") != std::string::npos);
  const RunResult r = w.run_function(quick, {}, {}, RunOptions{.batch = 1, .batch_width = 3});
  CHECK(r.status.code == kWorkerInvalidArgument);
  CHECK(r.status.message.find("batch_width 3 given to run()") != std::string::npos);
  CHECK(w.run_function(quick, {}, {}, RunOptions{.batch = 1}).ok());  // a batch without a width: no bound
}

TEST_CASE("cancelling a running run stops its running task at once - the child is replaced - other runs go on") {
  Fixture f(2);
  ContinuousTensor x = buffer(f.w), y = buffer(f.w);
  RunHandle slow = f.stamp_run(x, INOUT, 10000, 0);
  RunHandle other = f.stamp_run(y, INOUT, 400, 1);
  REQUIRE(eventually([&] { return f.start(0) != 0 && f.start(1) != 0; }));
  const auto before = f.w.children();
  const uint64_t t0 = now_ns();
  REQUIRE(slow.cancel("the test cancels it"));
  const RunResult& r = slow.result();
  const double ms = double(now_ns() - t0) / 1e6;
  INFO(r.status.message << " after " << ms << " ms");
  CHECK(ms < 1000);  // the task would run 10 s
  CHECK(r.status.code == kWorkerCancelled);
  CHECK(r.tasks_stopped == 1);
  REQUIRE(r.failures.size() == 1);
  CHECK(r.failures[0].outcome == Outcome::STOPPED);
  CHECK(r.failures[0].message.find("the test cancels it") != std::string::npos);
  CHECK_FALSE(slow.cancel("again"));  // it has ended
  REQUIRE(other.result().ok());       // the other run's task was not touched
  // The stopped child is replaced without waiting for a run.
  CHECK(eventually([&] {
    const auto now = f.w.children();
    int replaced = 0;
    for (size_t i = 0; i < now.size(); ++i)
      replaced += now[i].pid != before[i].pid && now[i].state == ChildState::IDLE && now[i].restarts == 1;
    return replaced == 1;
  }));
  CHECK(f.stamp_run(x, INOUT, 0, 2).result().ok());
}

TEST_CASE("a queued run that is cancelled never starts") {
  Fixture f(1, /*max_runs=*/1);
  ContinuousTensor x = buffer(f.w), y = buffer(f.w);
  RunHandle first = f.stamp_run(x, INOUT, 300, 0);
  RunHandle queued = f.stamp_run(y, INOUT, 0, 1);
  REQUIRE(queued.cancel("not wanted"));
  CHECK(queued.result().status.code == kWorkerCancelled);
  CHECK(queued.result().tasks_submitted == 0);
  REQUIRE(first.result().ok());
  CHECK(f.start(1) == 0);
}

// A run's handle learns its result only after its on_done, which for a
// detached run waits for the finisher: cancel() in between found the run
// id cleared and the handle not done, took the run for one not yet started,
// marked it and returned true - for a run that had ended, and said so.
TEST_CASE("cancel() of a run that has ended is false - also while its on_done still runs") {
  // Declared before the Worker: an on_done left running by a failed
  // REQUIRE ends before they do (the Worker's close waits for it).
  std::atomic<bool> entered{false}, release{false}, inline_end{false};
  const std::thread::id test_thread = std::this_thread::get_id();
  Fixture f(1);
  for (const bool detached : {false, true}) {
    INFO((detached ? "a detached run" : "a queued run with a thread of its own"));
    // A detached run whose task ends before its function returns ends on
    // this thread, on_done too (it cannot be held there): only possible
    // when this thread stalls for the task's 50 ms; then it tries again.
    bool checked = false;
    for (int attempt = 0; attempt < 5 && !checked; ++attempt) {
      entered = false;
      release = false;
      inline_end = false;
      RunHandle h = f.w.submit_function(
          [&](Orchestrator& orch, const TaskArgsView&, const CallConfig&) {
            TaskArgs a;
            a.add_scalar(50'000);  // pause_us: 50 ms
            return orch.submit_sub(f.pause_h, a).ok() ? 0 : 1;
          },
          {}, {},
          [&](const RunResult&) {
            if (std::this_thread::get_id() == test_thread) {
              inline_end = true;
              return;
            }
            entered = true;
            const uint64_t until = now_ns() + 10'000'000'000ull;  // bounded: the test fails, it does not hang
            while (!release.load() && now_ns() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          },
          RunOptions{.detached = detached});
      REQUIRE(eventually([&] { return entered.load() || inline_end.load(); }));
      if (inline_end) {
        REQUIRE(h.wait(std::chrono::seconds(30)));
        continue;
      }
      CHECK_FALSE(h.cancel("too late"));
      release = true;
      REQUIRE(h.wait(std::chrono::seconds(30)));
      CHECK(h.result().ok());
      CHECK_FALSE(h.cancel("later still"));
      checked = true;
    }
    REQUIRE(checked);
  }
}

// A queue thread takes the next run and waits with it for a slot, out of
// the queue: a cancel then found nothing queued and marked the handle, and
// the run began cancelled when the slot came - its function called (its
// submits refused). A queued run never starts: not its function either.
TEST_CASE("a run cancelled while a queue thread waits with it for a slot never calls its function") {
  Fixture f(1, /*max_runs=*/1);
  ContinuousTensor x = buffer(f.w);
  // The one slot, held 4 s by a detached run that starts on this thread
  // (nothing is queued): the one queue thread stays free.
  RunHandle first = f.stamp_run(x, INOUT, 4000, 0, RunOptions{.detached = true});
  REQUIRE(eventually([&] { return f.start(0) != 0; }));
  std::atomic<bool> called{false};
  RunHandle waiting = f.w.submit_function(
      [&](Orchestrator&, const TaskArgsView&, const CallConfig&) {
        called = true;
        return 0;
      },
      {}, {}, nullptr, {});
  // The queue thread takes it at once and waits in its start for the slot.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const uint64_t t0 = now_ns();
  REQUIRE(waiting.cancel("not wanted"));
  REQUIRE(waiting.wait(std::chrono::seconds(30)));
  const double ms = double(now_ns() - t0) / 1e6;
  const RunResult& r = waiting.result();
  INFO(r.status.message << ", ended " << ms << " ms after the cancel");
  CHECK_FALSE(called.load());
  CHECK(r.status.code == kWorkerCancelled);
  CHECK(r.status.message == "cancelled before it started: not wanted");
  CHECK(r.outcome == Outcome::STOPPED);
  CHECK(r.start_ns == 0);  // it never began
  CHECK(r.tasks_submitted == 0);
  CHECK(ms < 2000);  // not when the slot freed (~3.7 s on)
  CHECK(first.progress().running);
  REQUIRE(first.wait(std::chrono::seconds(30)));
  REQUIRE(first.result().ok());
  // The slot serves on.
  CHECK(f.w.run_function([](Orchestrator&, const TaskArgsView&, const CallConfig&) { return 0; }, {}, {}, {}).ok());
}

TEST_CASE("timeout_ms holds for sub tasks") {
  Fixture f(1);
  ContinuousTensor x = buffer(f.w);
  const uint64_t t0 = now_ns();
  RunResult r = f.w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    CallConfig c;
    c.timeout_ms = 300;
    return o.submit_sub(f.stamp_h, TaskArgs().add_tensor(f.times, NO_DEP).add_tensor(x, INOUT).add_scalar(20000), c)
                   .ok()
               ? 0
               : 1;
  });
  const double ms = double(now_ns() - t0) / 1e6;
  INFO(r.status.message);
  CHECK_FALSE(r.ok());
  REQUIRE(r.first_failure);
  CHECK(r.first_failure->outcome == Outcome::ENDPOINT_FAILURE);
  CHECK(r.first_failure->message.find("timed out") != std::string::npos);
  CHECK(ms < 2000);
}

TEST_CASE("a run's deadline cancels it and stops what runs") {
  Fixture f(1);
  ContinuousTensor x = buffer(f.w);
  const uint64_t t0 = now_ns();
  RunResult r = f.w.run_function(
      [&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
        return o.submit_sub(f.stamp_h, TaskArgs().add_tensor(f.times, NO_DEP).add_tensor(x, INOUT).add_scalar(20000))
                       .ok()
                   ? 0
                   : 1;
      },
      {}, {}, RunOptions{.deadline_ms = 300});
  const double ms = double(now_ns() - t0) / 1e6;
  INFO(r.status.message);
  CHECK(r.status.code == kWorkerCancelled);
  CHECK(r.status.message.find("deadline of 300 ms") != std::string::npos);
  CHECK(r.tasks_stopped == 1);
  CHECK(ms < 1000);
}

TEST_CASE("an orchestration sees its run cancelled and can stop early") {
  Fixture f(1);
  std::atomic<int> loops{0};
  RunHandle h = f.w.submit_function(
      [&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
        while (!o.cancelled()) {
          ++loops;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return 0;
      },
      {}, {}, nullptr, {});
  REQUIRE(eventually([&] { return loops.load() > 5; }));
  REQUIRE(h.cancel("enough"));
  CHECK(h.result().status.code == kWorkerCancelled);
}

TEST_CASE("a run from inside an orchestration of the same Worker is refused, not a deadlock") {
  Fixture f(1, 1);
  RunResult r = f.w.run([&](Orchestrator&, const TaskArgsView&, const CallConfig&) {
    RunResult inner = f.w.run([](Orchestrator&, const TaskArgsView&, const CallConfig&) { return 0; });
    return inner.status.code == kWorkerInvalidArgument ? 0 : 1;
  });
  CHECK(r.ok());
}
