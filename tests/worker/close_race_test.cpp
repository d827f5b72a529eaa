// close() against what races it (docs/worker.md, "Shutdown"): a run that
// begins while close() runs, a cancel that finishes a queued run's handle,
// an on_done that calls close(). close() returns once every run has ended
// and every handle is finished, and never waits for itself.
#include <atomic>
#include <future>
#include <thread>

#include "eventually.h"
#include "worker_support.h"

using namespace pto;
using namespace pto_test;

namespace {

struct Fixture {
  explicit Fixture(int max_runs = 4) : w({.level = 3, .num_sub_workers = 1, .max_concurrent_runs = max_runs}) {
    sleep_h = w.register_callable(NativeCallable::function("sleep_ms", sleep_ms));
    REQUIRE(w.init().ok());
  }
  OrchestrationFunction one_task(int ms) const {
    return [this, ms](Orchestrator& orch, const TaskArgsView&, const CallConfig&) {
      return orch.submit_sub(sleep_h, TaskArgs().add_scalar(ms)).ok() ? 0 : 1;
    };
  }
  RunHandle call(int ms, std::function<void(const RunResult&)> on_done) {
    return w.submit_function(one_task(ms), {}, {}, std::move(on_done), RunOptions{.detached = true});
  }
  Worker w;
  CallableHandle sleep_h;
};

}  // namespace

// begin() read closing_ under the engine's lock only after a failed try for
// a slot: a run() waiting for the only slot, woken when the run holding it
// ended, took the slot - even when close() had begun meanwhile, and even
// after close(), woken by the same end, had seen no run in the graph and
// gone on to stop the children under it. (Which of the two took the lock
// first was a coin toss; the same for a run that read closing_ unlocked just
// before close() set it.) A run that has not begun when close() begins is
// refused.
TEST_CASE("a run waiting for a slot when close() begins is refused - it never begins under a closing Worker") {
  for (int round = 0; round < 10; ++round) {
    Fixture f(1);
    RunHandle holder = f.call(500, nullptr);  // the only slot, for ~500 ms (room for a slow start)
    std::promise<RunResult> waited;
    std::future<RunResult> result = waited.get_future();
    std::thread waiter([&] { waited.set_value(f.w.run(f.one_task(0))); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // it waits for the slot
    REQUIRE(f.w.close().ok());
    const bool returned = result.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    if (!returned) waiter.detach();  // it would hang the test's end; the failure is reported
    REQUIRE(returned);
    waiter.join();
    const RunResult r = result.get();
    INFO("round " << round << ": " << r.status.message);
    CHECK(r.status.code == kWorkerClosed);
    CHECK(r.tasks_submitted == 0);
    CHECK(holder.done());
    CHECK(holder.result().ok());
  }
}

// A cancel that took a queued run out of the queue finished its handle
// (on_done) on the cancelling thread, uncounted: close() returned while that
// on_done still ran.
TEST_CASE("close() waits for a cancel that is finishing a queued run's handle") {
  Fixture f(1);
  RunHandle first = f.call(1000, nullptr);  // holds the only slot: the cancel comes well within it
  // Read on this thread after the others joined (Catch's checks are not
  // thread-safe).
  std::atomic<bool> entered{false}, left{false}, cancelled_status{false}, cancel_said{false};
  RunHandle queued = f.call(0, [&](const RunResult& r) {
    cancelled_status = r.status.code == kWorkerCancelled;
    entered = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // longer than `first` lasts
    left = true;
  });
  std::thread canceller([&] { cancel_said = queued.cancel("the test cancels it"); });
  REQUIRE(eventually([&] { return entered.load(); }));
  const Status closed = f.w.close();
  const bool left_before_close_returned = left.load();
  canceller.join();
  CHECK(closed.ok());
  CHECK(left_before_close_returned);  // close() returned after the on_done, not during it
  CHECK(cancel_said.load());
  CHECK(cancelled_status.load());
  CHECK(queued.done());
  CHECK(first.done());
  CHECK(first.result().ok());
}

// On the finisher thread close() joined that very thread (std::terminate);
// in a waiter's or a canceller's on_done it waited for its own count.
TEST_CASE("close() from inside an on_done of the same Worker is refused, and the Worker closes after") {
  Fixture f;
  std::atomic<bool> ran{false};
  Status inside;
  RunHandle h = f.call(0, [&](const RunResult&) {
    inside = f.w.close();
    ran = true;
  });
  REQUIRE(eventually([&] { return ran.load(); }));  // nobody waits: the driver ends it, the finisher finishes it
  CHECK(inside.code == kWorkerInvalidArgument);
  CHECK(inside.message.find("on_done") != std::string::npos);
  REQUIRE(h.wait(std::chrono::seconds(10)));
  CHECK(h.result().ok());
  RunResult after = f.w.run(f.one_task(0));  // still open
  CHECK(after.ok());
  CHECK(f.w.close().ok());
}
