// The ready queue's order alone (worker/src/fair_queue.h): priorities are
// strict; within one, principals take turns, then a principal's runs, then a
// run's tasks in submission order; take_run() removes a run's tasks.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "fair_queue.h"
#include "run_state.h"

using namespace pto;

namespace {

struct Runs {
  std::vector<std::unique_ptr<RunState>> runs;
  std::vector<std::unique_ptr<TaskNode>> nodes;
  RunState* run(const std::string& principal, RunPriority p = RunPriority::NORMAL) {
    runs.push_back(std::make_unique<RunState>());
    runs.back()->id = runs.size();
    runs.back()->options.principal = principal;
    runs.back()->options.priority = p;
    return runs.back().get();
  }
  TaskNode* task(RunState* r, uint64_t id) {
    nodes.push_back(std::make_unique<TaskNode>());
    nodes.back()->run = r;
    nodes.back()->id = id;
    return nodes.back().get();
  }
};

std::vector<uint64_t> drain(FairQueue& q) {
  std::vector<uint64_t> out;
  while (TaskNode* s = q.front()) {
    out.push_back(s->id);
    q.pop_front();
  }
  CHECK(q.empty());
  return out;
}

}  // namespace

TEST_CASE("fair queue: principals take turns, a principal's runs take turns, a run keeps its order", "[fair_queue]") {
  Runs k;
  FairQueue q;
  RunState* big = k.run("alice");
  RunState* big2 = k.run("alice");
  RunState* small = k.run("bob");
  for (uint64_t i = 1; i <= 4; ++i) q.push_back(k.task(big, i));
  for (uint64_t i = 11; i <= 12; ++i) q.push_back(k.task(big2, i));
  q.push_back(k.task(small, 21));
  CHECK(q.size() == 7);
  // alice (big), bob, alice (big2), alice (big), ...: bob waits one task.
  CHECK(drain(q) == std::vector<uint64_t>{1, 21, 11, 2, 12, 3, 4});
  // The queues emptied; they refill the same way (nothing kept stale).
  q.push_back(k.task(small, 22));
  q.push_back(k.task(big, 5));
  CHECK(drain(q) == std::vector<uint64_t>{22, 5});
}

TEST_CASE("fair queue: a higher priority goes first, push_front jumps its run's queue", "[fair_queue]") {
  Runs k;
  FairQueue q;
  RunState* low = k.run("a", RunPriority::LOW);
  RunState* normal = k.run("a");
  RunState* high = k.run("b", RunPriority::HIGH);
  q.push_back(k.task(low, 1));
  q.push_back(k.task(normal, 2));
  q.push_back(k.task(normal, 3));
  q.push_back(k.task(high, 4));
  q.push_front(k.task(normal, 5));  // a retry
  CHECK(drain(q) == std::vector<uint64_t>{4, 5, 2, 3, 1});
}

TEST_CASE("fair queue: take_run removes a run's queued tasks and leaves the others in order", "[fair_queue]") {
  Runs k;
  FairQueue q;
  RunState* a = k.run("p");
  RunState* b = k.run("q");
  for (uint64_t i = 1; i <= 3; ++i) q.push_back(k.task(a, i));
  for (uint64_t i = 11; i <= 12; ++i) q.push_back(k.task(b, i));
  std::vector<uint64_t> taken;
  for (TaskNode* s : q.take_run(a)) taken.push_back(s->id);
  CHECK(taken == std::vector<uint64_t>{1, 2, 3});
  CHECK(q.size() == 2);
  CHECK(q.take_run(a).empty());
  CHECK(drain(q) == std::vector<uint64_t>{11, 12});
  // An ended run's queue is forgotten; a new run of the same principal starts clean.
  CHECK(q.take_run(b).empty());
  RunState* c = k.run("p");
  q.push_back(k.task(c, 31));
  CHECK(drain(q) == std::vector<uint64_t>{31});
}
