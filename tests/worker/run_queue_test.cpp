// The run queue alone (worker/src/run_queue.h), without threads of its own
// (max 0) and without a Worker: a detached run taken from the front by a
// thread that ends runs (WorkerImpl::start_queued, often a driving thread)
// and put back because no slot was free.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>

#include "run_queue.h"

using namespace pto;

namespace {

std::shared_ptr<RunQueue::State> detached_run(int* on_done_calls) {
  auto st = std::make_shared<RunQueue::State>();
  st->detached = true;
  st->options.detached = true;
  st->on_done = [on_done_calls](const RunResult&) { ++*on_done_calls; };
  return st;
}

// Queued, then taken from the front as WorkerImpl::start_queued takes it.
void push_and_take(RunQueue& q, const std::shared_ptr<RunQueue::State>& st) {
  REQUIRE_FALSE(q.push(st).has_value());  // queued, not refused
  REQUIRE(q.pop_detached() == st);
}

RunQueue::Execute no_thread_executes() {
  return [](const std::shared_ptr<RunQueue::State>&, bool*) -> std::optional<RunResult> {
    FAIL("a queue without threads executed a run");
    return std::nullopt;
  };
}

}  // namespace

TEST_CASE("a detached run put back without a slot is taken again first - nothing finishes it meanwhile") {
  RunQueue q(0, 0, no_thread_executes());
  int calls = 0;
  auto st = detached_run(&calls);
  push_and_take(q, st);
  CHECK(q.pop_detached() == nullptr);  // its start is unsettled: nothing overtakes it
  CHECK_FALSE(q.put_back(st).has_value());
  CHECK(calls == 0);
  CHECK_FALSE(st->finished.load());
  CHECK(q.pop_detached() == st);
  q.settle(st);
  CHECK(q.empty());
}

// Before, put_back ran on_done itself: on a thread that was driving the
// Worker (start_queued runs where a run ended), against the rule that
// on_done never runs while a thread drives (it may commit, or wait for the
// Worker). The caller now finishes it where on_done may run.
TEST_CASE("a run cancelled while taken goes back to put_back's caller to finish - no on_done inside put_back") {
  RunQueue q(0, 0, no_thread_executes());
  int calls = 0;
  auto st = detached_run(&calls);
  push_and_take(q, st);
  {
    // What RunHandle::cancel leaves on a run out of the queue and not begun.
    std::lock_guard<std::mutex> g(st->mu);
    st->cancel_requested = true;
    st->cancel_reason = "the client went away";
  }
  std::optional<RunResult> r = q.put_back(st);
  CHECK(calls == 0);
  CHECK_FALSE(st->finished.load());
  REQUIRE(r.has_value());
  CHECK(r->status.code == kWorkerCancelled);
  CHECK(r->status.message == "cancelled before it started: the client went away");
  CHECK(r->outcome == Outcome::STOPPED);
  CHECK(q.empty());  // settled, and not queued again
  CHECK(q.pop_detached() == nullptr);
  RunQueue::finish(st, std::move(*r));  // where the caller may run on_done
  CHECK(calls == 1);
  CHECK(st->finished.load());
}

// Before, push itself finished a run refused after stop(): its on_done ran
// on the submitter's thread, which may be driving the Worker (a queued
// detached run's function submitting during close()).
TEST_CASE("a run pushed after stop() goes back to push's caller to finish - no on_done inside push") {
  RunQueue q(0, 0, no_thread_executes());
  q.stop();
  int calls = 0;
  auto st = detached_run(&calls);
  std::optional<RunResult> r = q.push(st);
  CHECK(calls == 0);
  CHECK_FALSE(st->finished.load());
  REQUIRE(r.has_value());
  CHECK(r->status.code == kWorkerClosed);
  CHECK(r->status.message == "submit after close()");
  CHECK(q.empty());
  RunQueue::finish(st, std::move(*r));
  CHECK(calls == 1);
  CHECK(st->finished.load());
}
