// Detached runs (RunOptions::detached, docs/worker.md "Detached runs"): a run
// whose orchestration function only submits has no thread of its own once the
// function returned. It starts on the submitting thread when a slot is free,
// else on the thread whose run frees one, and ends — on_done, the handle
// done — on whichever thread drives its last task: a waiter in
// RunHandle::wait drives.
//
// The "stamp" sub callable sleeps scalars[0] ms and writes its start
// (CLOCK_MONOTONIC, comparable across the children) into int64 tensor 0 at
// scalars[1].
#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "pto/base/clock.h"
#include "scheduler.h"
#include "thread_switches.h"
#include "worker_support.h"

using namespace pto;
using namespace pto_test;

namespace {

int stamp(const TaskArgsView& a, std::string&) {
  reinterpret_cast<int64_t*>(a.tensors[0].data)[a.scalars[1]] = static_cast<int64_t>(now_ns());
  std::this_thread::sleep_for(std::chrono::milliseconds(a.scalars[0]));
  return 0;
}

// What each run's on_done saw: how often it ran and on which thread.
struct Ends {
  std::mutex mu;
  std::vector<int> calls;
  std::vector<std::thread::id> threads;
  explicit Ends(size_t n) : calls(n, 0), threads(n) {}
  std::function<void(const RunResult&)> of(size_t i) {
    return [this, i](const RunResult&) {
      std::lock_guard<std::mutex> g(mu);
      ++calls[i];
      threads[i] = std::this_thread::get_id();
    };
  }
};

int write_i(const TaskArgsView& a, std::string&) {
  float* x = reinterpret_cast<float*>(a.tensors[0].data);
  for (int k = 0; k < 1024; ++k) x[k] = static_cast<float>(a.scalars[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}

struct Fixture {
  explicit Fixture(int subs, int max_runs = 4, uint64_t heap_ring_bytes = 1 << 20, uint32_t spin_us = 50)
      : w({.level = 3,
           .num_sub_workers = subs,
           .heap_ring_bytes = heap_ring_bytes,
           .spin_us = spin_us,
           .max_concurrent_runs = max_runs}) {
    stamp_h = w.register_callable(NativeCallable::function("stamp", stamp));
    write_h = w.register_callable(NativeCallable::function("write_i", write_i));
    REQUIRE(w.init().ok());
    auto r = w.alloc({256}, PTO_INT64);
    REQUIRE(r.ok());
    starts = r.value;
    std::memset(reinterpret_cast<void*>(starts.data), 0, 256 * 8);
  }
  int64_t start(int slot) const { return reinterpret_cast<int64_t*>(starts.data)[slot]; }
  // A detached run of one stamp task of `ms`, recorded in `slot`; `fn_thread`
  // learns where its function ran.
  RunHandle call(int ms, int slot, std::function<void(const RunResult&)> on_done, RunOptions o = {},
                 std::thread::id* fn_thread = nullptr) {
    o.detached = true;
    return w.submit_function(
        [=, this](Orchestrator& orch, const TaskArgsView&, const CallConfig&) {
          if (fn_thread) *fn_thread = std::this_thread::get_id();
          return orch.submit_sub(stamp_h, TaskArgs().add_tensor(starts, NO_DEP).add_scalar(ms).add_scalar(slot)).ok()
                     ? 0
                     : 1;
        },
        {}, {}, std::move(on_done), o);
  }
  Worker w;
  CallableHandle stamp_h, write_h;
  ContinuousTensor starts;
};

// One-task calls (waiter_drives) one after another while `running` is 0,
// at most 40: the slowest call's ms, and how many there were.
double slowest_calls_while(Fixture& f, const std::atomic<int>& running, int* calls) {
  RunOptions o;
  o.waiter_drives = true;
  double worst_ms = 0;
  for (*calls = 0; *calls < 40 && running.load() == 0; ++*calls) {
    const auto t0 = std::chrono::steady_clock::now();
    RunHandle h = f.call(0, 1, nullptr, o);
    REQUIRE(h.wait(std::chrono::seconds(20)));
    REQUIRE(h.result().ok());
    worst_ms =
        std::max(worst_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return worst_ms;
}

}  // namespace

TEST_CASE("a detached run starts on the submitting thread and ends once, on a thread that drives it") {
  Fixture f(1);
  Ends ends(1);
  std::thread::id fn_thread;
  RunHandle h = f.call(0, 0, ends.of(0), {}, &fn_thread);
  CHECK(fn_thread == std::this_thread::get_id());  // a slot was free: no run thread took it
  REQUIRE(h.wait(std::chrono::seconds(20)));
  INFO(h.result().status.message);
  REQUIRE(h.result().ok());
  CHECK(h.result().tasks_succeeded == 1);
  CHECK(f.start(0) != 0);
  std::lock_guard<std::mutex> g(ends.mu);
  CHECK(ends.calls[0] == 1);
}

TEST_CASE("waiting for a detached run drives it: its end comes on the waiting thread") {
  Fixture f(1);
  Ends ends(1);
  // Long enough that the waiter is driving before the child answers.
  RunHandle h = f.call(100, 0, ends.of(0));
  REQUIRE(h.wait(std::chrono::seconds(20)));
  REQUIRE(h.result().ok());
  std::lock_guard<std::mutex> g(ends.mu);
  CHECK(ends.calls[0] == 1);
  CHECK(ends.threads[0] == std::this_thread::get_id());
}

TEST_CASE("calls whose submitter drives them (waiter_drives) wake no other thread of the Worker") {
  // ptod's waiting Submit: a one-task call, then wait() on the same thread,
  // a client's round trip apart. The waiter drives the task and ends the
  // run, so a wake-up of the Worker's scheduler thread per call (at its
  // submit) is waste.
  Fixture f(1);
  RunOptions o;
  o.waiter_drives = true;
  REQUIRE(f.call(0, 0, nullptr, o).wait(std::chrono::seconds(20)));  // the child warm
  std::this_thread::sleep_for(std::chrono::milliseconds(20));        // the scheduler thread parked
  constexpr int kCalls = 300;
  const uint64_t before = other_threads_switches();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    RunHandle h = f.call(0, 1, nullptr, o);
    REQUIRE(h.wait(std::chrono::seconds(20)));
    REQUIRE(h.result().ok());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t woken = other_threads_switches() - before;
  // The scheduler thread's own timed looks (one per ms at most) remain; a
  // wake-up per call would add 300.
  INFO(woken << " voluntary context switches of the Worker's other threads over " << kCalls << " calls in " << ms
             << " ms");
  CHECK(woken < uint64_t(kCalls / 2 + ms));
}

TEST_CASE("nobody waiting: the Worker's driver ends a detached run") {
  Fixture f(1);
  Ends ends(1);
  RunHandle h = f.call(20, 0, ends.of(0));
  REQUIRE(eventually([&] { return h.done(); }, 20000));  // done() does not drive
  REQUIRE(h.result().ok());
  std::lock_guard<std::mutex> g(ends.mu);
  CHECK(ends.calls[0] == 1);
  CHECK(ends.threads[0] != std::this_thread::get_id());
}

TEST_CASE("detached runs behind full slots start in submission order, each ending once") {
  for (int max_runs : {1, 2}) {
    DYNAMIC_SECTION("max_concurrent_runs = " << max_runs) {
      Fixture f(2, max_runs);
      constexpr int kRuns = 40;
      Ends ends(kRuns);
      std::mutex mu;
      std::vector<int> started;  // the order the runs' functions ran in
      std::vector<RunHandle> hs;
      for (int i = 0; i < kRuns; ++i)
        hs.push_back(f.w.submit_function(
            [&, i](Orchestrator& orch, const TaskArgsView&, const CallConfig&) {
              {
                std::lock_guard<std::mutex> g(mu);
                started.push_back(i);
              }
              return orch.submit_sub(f.stamp_h, TaskArgs().add_tensor(f.starts, NO_DEP).add_scalar(i % 3).add_scalar(i))
                             .ok()
                         ? 0
                         : 1;
            },
            {}, {}, ends.of(size_t(i)), RunOptions{.detached = true}));
      for (auto& h : hs) {
        REQUIRE(h.wait(std::chrono::seconds(30)));
        REQUIRE(h.result().ok());
      }
      std::lock_guard<std::mutex> g(ends.mu);
      for (int i = 0; i < kRuns; ++i) CHECK(ends.calls[size_t(i)] == 1);
      // The order the runs took their slots in.
      for (int i = 1; i < kRuns; ++i) {
        INFO("run " << i);
        CHECK(hs[size_t(i - 1)].result().start_ns != 0);
        CHECK(hs[size_t(i - 1)].result().start_ns <= hs[size_t(i)].result().start_ns);
      }
      std::lock_guard<std::mutex> g2(mu);
      REQUIRE(started.size() == size_t(kRuns));
      // With one slot a run's function runs before the next run can take
      // it; with two, two starters may each hold a slot and call their
      // functions in either order (the slots were still taken in order).
      if (max_runs == 1)
        for (int i = 0; i < kRuns; ++i) CHECK(started[size_t(i)] == i);
    }
  }
}

TEST_CASE("a detached run's function that waits for heap-ring space on a driving thread drives meanwhile") {
  // One slot with a ring of two buffers: the second run starts on the thread
  // that ends the first (the Worker's driver), and its function must wait for
  // its own earlier tasks to free ring space 30 times — tasks only a driver
  // can complete.
  Fixture f(2, 1, 2 * 4096);
  Ends ends(2);
  std::thread::id fn_thread;
  std::atomic<bool> on_driver{false};
  RunHandle first = f.call(30, 0, ends.of(0));
  RunHandle second = f.w.submit_function(
      [&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
        fn_thread = std::this_thread::get_id();
        on_driver = Scheduler::on_driving_thread();
        for (int i = 0; i < 32; ++i) {
          Scope s(o);
          auto b = o.alloc({1024}, PTO_FLOAT32);
          if (!b.ok() || !o.submit_sub(f.write_h, TaskArgs().add_tensor(b.value, OUT_EXISTING).add_scalar(i)).ok())
            return 1;
        }
        return 0;
      },
      {}, {}, ends.of(1), RunOptions{.detached = true});
  REQUIRE(eventually([&] { return second.done(); }, 60000));
  INFO(second.result().status.message);
  CHECK(second.result().ok());
  CHECK(second.result().tasks_succeeded == 32);
  CHECK(fn_thread != std::this_thread::get_id());
  CHECK(on_driver.load());  // started in the slot the first run freed, on the thread that ended it
  REQUIRE(first.result().ok());
}

TEST_CASE("cancel and deadline reach a detached run's running task") {
  Fixture f(1);
  SECTION("cancel") {
    Ends ends(1);
    RunHandle h = f.call(20000, 0, ends.of(0));
    REQUIRE(eventually([&] { return f.start(0) != 0; }));
    const uint64_t t0 = now_ns();
    REQUIRE(h.cancel("the test cancels it"));
    REQUIRE(h.wait(std::chrono::seconds(10)));
    CHECK(double(now_ns() - t0) / 1e6 < 1000);
    CHECK(h.result().status.code == kWorkerCancelled);
    CHECK(h.result().tasks_stopped == 1);
    CHECK_FALSE(h.cancel("again"));
  }
  SECTION("deadline") {
    Ends ends(1);
    const uint64_t t0 = now_ns();
    RunHandle h = f.call(20000, 0, ends.of(0), RunOptions{.deadline_ms = 300});
    REQUIRE(h.wait(std::chrono::seconds(10)));
    CHECK(double(now_ns() - t0) / 1e6 < 2000);
    CHECK(h.result().status.code == kWorkerCancelled);
    CHECK(h.result().status.message.find("deadline of 300 ms") != std::string::npos);
  }
}

TEST_CASE("a detached run that submits nothing, or fails at submit, ends at once on the submitting thread") {
  Fixture f(1);
  Ends ends(2);
  RunHandle empty = f.w.submit_function([](Orchestrator&, const TaskArgsView&, const CallConfig&) { return 0; }, {}, {},
                                        ends.of(0), RunOptions{.detached = true});
  RunHandle refused = f.w.submit_function(
      [](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
        return o.submit_sub(CallableHandle{}, TaskArgs()).ok() ? 0 : 1;  // no such callable
      },
      {}, {}, ends.of(1), RunOptions{.detached = true});
  CHECK(empty.done());  // ended before submit_function returned
  CHECK(refused.done());
  CHECK(empty.result().ok());
  CHECK_FALSE(refused.result().ok());
  std::lock_guard<std::mutex> g(ends.mu);
  for (int i = 0; i < 2; ++i) {
    CHECK(ends.calls[size_t(i)] == 1);
    CHECK(ends.threads[size_t(i)] == std::this_thread::get_id());
  }
}

// Its waiter drives, ends the run in the only slot and starts the queued ones
// there (start_queued); the empty one is refused at once. The waiter keeps
// what it ends until it stops driving, and it stopped only once its own
// run's `ended` was set, which that refusal did not set: the wait drove on
// to its deadline before it finished its own handle (5 s here; in about
// three rounds of five, those in which the waiter, not the scheduler thread,
// ended the first run).
TEST_CASE("a queued detached run refused at its start by its own driving waiter ends that wait at once") {
  Fixture f(1, 1);
  Ends ends(5);  // outlives a wait that failed
  for (int round = 0; round < 5; ++round) {
    INFO("round " << round);
    RunHandle first = f.call(300, 0, nullptr);  // the only slot, for 300 ms
    RunHandle second = f.call(0, 1, nullptr);   // queued: it takes the slot when the first ends
    RunHandle empty =
        f.w.submit_function(OrchestrationFunction(), {}, {}, ends.of(size_t(round)), RunOptions{.detached = true});
    CHECK_FALSE(empty.done());  // queued behind them (alone in the queue it would have been refused at once)
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(empty.wait(std::chrono::seconds(5)));
    const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(waited_s < 2);
    {
      std::lock_guard<std::mutex> g(ends.mu);
      CHECK(ends.calls[size_t(round)] == 1);
    }
    CHECK(empty.result().status.code == kWorkerInvalidArgument);
    for (RunHandle* h : {&first, &second}) {
      REQUIRE(h->wait(std::chrono::seconds(20)));
      CHECK(h->result().ok());
    }
  }
}

// A detached run's function started on a driving thread - the waiter's that
// ended the run before it in the only slot (start_queued) - waits there for a
// call of another Worker, which that thread then ends itself. Nested in the
// outer drive, the wait did not finish what it kept of its own call: it
// slept to its deadline (5 s) and returned false, and the call was finished
// only when the outer drive stopped (review; in the rounds in which the
// waiter, not the scheduler thread, ended the first run).
TEST_CASE("a wait nested in a function run on a driving thread finishes the other Worker's call it ends there") {
  Fixture f(1, 1);
  Fixture other(1);
  Ends ends(5);  // outlives a call whose wait failed (its on_done may come later)
  for (int round = 0; round < 5; ++round) {
    INFO("round " << round);
    RunHandle first = f.call(300, 0, nullptr);  // the only slot, for 300 ms
    std::atomic<int> inner_ok{-1};
    std::atomic<double> inner_s{0};
    RunHandle nested = f.w.submit_function(
        [&](Orchestrator&, const TaskArgsView&, const CallConfig&) {
          const auto t0 = std::chrono::steady_clock::now();
          RunHandle call = other.call(0, 2, ends.of(size_t(round)));
          inner_ok = call.wait(std::chrono::seconds(5)) ? 1 : 0;
          inner_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          return 0;
        },
        {}, {}, nullptr, RunOptions{.detached = true});
    CHECK_FALSE(nested.done());  // queued behind the first
    REQUIRE(first.wait(std::chrono::seconds(20)));
    REQUIRE(nested.wait(std::chrono::seconds(20)));
    CHECK(nested.result().ok());
    CHECK(inner_ok.load() == 1);
    CHECK(inner_s.load() < 2);
    std::lock_guard<std::mutex> g(ends.mu);
    CHECK(ends.calls[size_t(round)] == 1);
  }
}

// A queued detached run's function runs on the thread that freed its slot,
// which drives (start_queued) - or on a queue thread that was waiting for a
// slot, which does not. Cancelling a queued run on a driving thread used to
// run that run's on_done inside cancel(), there (every round in which the
// function ran on a driving thread; on a queue thread it may, and does).
TEST_CASE("a queued run cancelled from a function run on a driving thread is not finished inside cancel()") {
  Fixture f(1, 1);
  int on_driver = 0;
  for (int round = 0; round < 5; ++round) {
    INFO("round " << round);
    RunHandle first = f.call(300, 0, nullptr);  // the only slot, for 300 ms
    std::atomic<bool> in_cancel{false}, victim_ready{false}, driving{false};
    std::atomic<std::thread::id> canceller_thread{};
    std::atomic<int> victim_done_in_cancel{-1};
    std::atomic<int> cancelled{-1};
    RunHandle victim;
    RunHandle canceller = f.w.submit_function(
        [&](Orchestrator&, const TaskArgsView&, const CallConfig&) {
          if (!victim_ready.load(std::memory_order_acquire)) return 1;  // 300 ms later: never
          canceller_thread = std::this_thread::get_id();
          driving = Scheduler::on_driving_thread();
          in_cancel = true;
          cancelled = victim.cancel("not wanted") ? 1 : 0;
          in_cancel = false;
          return 0;
        },
        {}, {}, nullptr, RunOptions{.detached = true});
    // Inside cancel(): on the canceller's thread while it is in the call (a
    // finisher thread may run it meanwhile, which is not inside).
    victim = f.call(0, 1, [&](const RunResult&) {
      victim_done_in_cancel = in_cancel.load() && std::this_thread::get_id() == canceller_thread.load() ? 1 : 0;
    });
    victim_ready.store(true, std::memory_order_release);
    CHECK_FALSE(canceller.done());  // both queued behind the first
    CHECK_FALSE(victim.done());
    REQUIRE(canceller.wait(std::chrono::seconds(20)));
    CHECK(canceller.result().ok());
    CHECK(cancelled.load() == 1);
    REQUIRE(victim.wait(std::chrono::seconds(20)));  // before the locals its on_done writes go
    CHECK(victim.result().status.code == kWorkerCancelled);
    if (driving.load()) {
      ++on_driver;
      CHECK(victim_done_in_cancel.load() == 0);
    }
    REQUIRE(first.wait(std::chrono::seconds(20)));
  }
  // How many rounds tested it (the others' functions ran on a queue thread).
  WARN(on_driver << " of 5 rounds' functions ran on a driving thread");
}

TEST_CASE("close() waits for the detached runs in flight and queued - each ends once") {
  auto f = std::make_unique<Fixture>(2, 2);
  constexpr int kRuns = 12;
  Ends ends(kRuns);
  std::vector<RunHandle> hs;
  for (int i = 0; i < kRuns; ++i) hs.push_back(f->call(20, i, ends.of(size_t(i))));
  REQUIRE(f->w.close().ok());
  for (auto& h : hs) {
    CHECK(h.done());
    CHECK(h.result().ok());
  }
  std::lock_guard<std::mutex> g(ends.mu);
  for (int i = 0; i < kRuns; ++i) CHECK(ends.calls[size_t(i)] == 1);
}

TEST_CASE("detached and attached runs share the slots: every run ends, each once") {
  Fixture f(2, 2);
  constexpr int kRuns = 60;
  Ends ends(kRuns);
  std::vector<RunHandle> hs;
  for (int i = 0; i < kRuns; ++i) {
    RunOptions o;
    o.detached = i % 3 != 0;
    o.priority = i % 5 == 0 ? RunPriority::HIGH : RunPriority::NORMAL;
    hs.push_back(f.w.submit_function(
        [&f, i](Orchestrator& orch, const TaskArgsView&, const CallConfig&) {
          return orch.submit_sub(f.stamp_h, TaskArgs().add_tensor(f.starts, NO_DEP).add_scalar(i % 2).add_scalar(i))
                         .ok()
                     ? 0
                     : 1;
        },
        {}, {}, ends.of(size_t(i)), o));
  }
  for (int i = 0; i < kRuns; ++i) {
    INFO("run " << i);
    REQUIRE(hs[size_t(i)].wait(std::chrono::seconds(30)));
    CHECK(hs[size_t(i)].result().ok());
  }
  std::lock_guard<std::mutex> g(ends.mu);
  for (int i = 0; i < kRuns; ++i) CHECK(ends.calls[size_t(i)] == 1);
}

TEST_CASE("a one-task call beside a long run ends when its task does - not when the long run's drain does") {
  // The long run's thread drives its drain (help_drain) for the whole run,
  // ending other runs' tasks meanwhile. A detached run it ended used to be
  // finished (on_done, the handle done) only when it stopped driving: a
  // one-task call beside a 1 s run then waited the rest of that second.
  Fixture f(2);
  std::atomic<int> long_done{0}, submitted{0};
  RunHandle big = f.w.submit_function(
      [&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
        for (int i = 0; i < 1000; ++i)
          if (!o.submit_sub(f.stamp_h, TaskArgs().add_tensor(f.starts, NO_DEP).add_scalar(2).add_scalar(200)).ok())
            return 1;
        submitted = 1;
        return 0;
      },
      {}, {}, [&](const RunResult&) { long_done = 1; });
  // Its function returned and its thread drains, holding the drive: a call's
  // waiter that took it first would leave the long run's thread asleep, and
  // the path under test unused.
  for (int i = 0; i < 10000 && submitted.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(submitted.load() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  int calls = 0;
  const double worst_ms = slowest_calls_while(f, long_done, &calls);
  REQUIRE(big.wait(std::chrono::seconds(30)));
  REQUIRE(big.result().ok());
  INFO(calls << " calls beside the long run (1,000 tasks of 2 ms on 2 sub workers), the slowest " << worst_ms << " ms");
  REQUIRE(calls >= 10);  // the long run lasted: the calls were beside it
  // Each waits for a 2 ms task of the long run to free a worker, then its
  // own (2-3 ms measured); ended by the long run's thread it waited for the
  // rest of the run (1.04 s, and only one call fitted beside it).
  CHECK(worst_ms < 500);
}

TEST_CASE("a one-task call ended by another call's waiter that drives on is finished within a millisecond or so") {
  // A waiter drives until its own run ends, and keeps the runs it ends
  // meanwhile to finish itself. Its run here is 1,000 tasks of 1 ms with a
  // spin longer than a task, so it never parks: the calls it ends go to the
  // finisher after it has driven on for 1 ms, not when its run ends.
  Fixture f(2, 4, 1 << 20, /*spin_us=*/20'000);
  std::atomic<int> long_done{0}, submitted{0};
  std::thread waiter([&] {
    RunOptions lo;
    lo.detached = true;
    lo.waiter_drives = true;
    RunHandle big = f.w.submit_function(
        [&](Orchestrator& orch, const TaskArgsView&, const CallConfig&) {
          for (int i = 0; i < 1000; ++i)
            if (!orch.submit_sub(f.stamp_h, TaskArgs().add_tensor(f.starts, NO_DEP).add_scalar(1).add_scalar(200)).ok())
              return 1;
          submitted = 1;
          return 0;
        },
        {}, {}, nullptr, lo);
    const bool ended = big.wait(std::chrono::seconds(30)) && big.result().ok();
    long_done = ended ? 1 : 2;
  });
  for (int i = 0; i < 10000 && submitted.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(submitted.load() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the long run's waiter drives
  int calls = 0;
  const double worst_ms = slowest_calls_while(f, long_done, &calls);
  waiter.join();
  REQUIRE(long_done.load() == 1);
  INFO(calls << " calls beside the long detached run (1,000 tasks of 1 ms on 2 sub workers), the slowest " << worst_ms
             << " ms");
  REQUIRE(calls >= 10);  // the calls were beside it
  CHECK(worst_ms < 250);
}
