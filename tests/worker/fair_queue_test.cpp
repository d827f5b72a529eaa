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

TEST_CASE("fair queue: a run or principal that comes to its turn goes before the one just served", "[fair_queue]") {
  Runs k;
  FairQueue q;
  RunState* big = k.run("alice");
  for (uint64_t i = 1; i <= 4; ++i) q.push_back(k.task(big, i));
  CHECK(q.front()->id == 1);
  q.pop_front();  // big was served, alone in its turns
  // Another principal's one task: next, not after big's 2.
  RunState* small = k.run("bob");
  q.push_back(k.task(small, 21));
  CHECK(q.front()->id == 21);
  q.pop_front();
  // Another run of alice's: before big, which was served last.
  RunState* other = k.run("alice");
  q.push_back(k.task(other, 31));
  q.push_back(k.task(other, 32));
  CHECK(drain(q) == std::vector<uint64_t>{31, 2, 32, 3, 4});
  // Nobody served last (the queue ran dry): comers queue in order.
  q.push_back(k.task(big, 5));
  q.push_back(k.task(small, 22));
  CHECK(drain(q) == std::vector<uint64_t>{5, 22});
  // Before the one served last, not before the others waiting: carol and
  // dave wait, alice was served last; erin goes after carol and dave.
  RunState* carol = k.run("carol");
  RunState* dave = k.run("dave");
  for (uint64_t i = 6; i <= 7; ++i) q.push_back(k.task(big, i));
  q.pop_front();  // alice's 6
  q.push_back(k.task(carol, 41));
  q.push_back(k.task(dave, 51));
  RunState* erin = k.run("erin");
  q.push_back(k.task(erin, 61));
  CHECK(drain(q) == std::vector<uint64_t>{41, 51, 61, 7});
}

TEST_CASE("fair queue: a principal whose runs were taken out comes back as any other comer", "[fair_queue]") {
  Runs k;
  FairQueue q;
  RunState* big = k.run("alice");
  RunState* other = k.run("alice");
  q.push_back(k.task(other, 31));
  q.pop_front();  // other's queue is empty, but alice keeps it
  q.push_back(k.task(big, 1));
  q.push_back(k.task(big, 2));
  q.pop_front();  // alice served last, alone
  CHECK(q.take_run(big).size() == 1);  // alice leaves the turn (a cancelled run)
  q.push_back(k.task(other, 32));      // alice comes back first,
  RunState* carol = k.run("carol");
  q.push_back(k.task(carol, 41));  // carol after her: alice was not served since
  CHECK(drain(q) == std::vector<uint64_t>{32, 41});
}
