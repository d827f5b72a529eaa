#include "fair_queue.h"

#include <algorithm>

#include "run_state.h"

namespace pto {

void FairQueue::push(TaskNode* s, bool front) {
  const RunState* run = s->run;
  const int level = static_cast<int>(run->options.priority);
  auto& rq = runs_[run];
  if (!rq) rq = std::make_unique<RunQ>(RunQ{run, {}});
  const bool run_was_idle = rq->tasks.empty();
  if (front)
    rq->tasks.push_front(s);
  else
    rq->tasks.push_back(s);
  ++size_;
  if (!run_was_idle) return;
  std::string key = std::to_string(level) + ":" + run->options.principal;
  auto& p = principals_[key];
  if (!p) p = std::make_unique<Principal>(Principal{std::move(key), {}});
  const bool principal_was_idle = p->turn.empty();
  if (front)
    p->turn.push_front(rq.get());
  else
    p->turn.push_back(rq.get());
  if (!principal_was_idle) return;
  if (front)
    levels_[level].push_front(p.get());
  else
    levels_[level].push_back(p.get());
}

TaskNode* FairQueue::front() const {
  for (int level = 2; level >= 0; --level)
    if (!levels_[level].empty()) return levels_[level].front()->turn.front()->tasks.front();
  return nullptr;
}

void FairQueue::pop_front() {
  for (int level = 2; level >= 0; --level) {
    auto& turn = levels_[level];
    if (turn.empty()) continue;
    Principal* p = turn.front();
    RunQ* rq = p->turn.front();
    rq->tasks.pop_front();
    --size_;
    p->turn.pop_front();
    if (!rq->tasks.empty())
      p->turn.push_back(rq);
    else
      runs_.erase(rq->run);
    turn.pop_front();
    if (!p->turn.empty())
      turn.push_back(p);
    else
      principals_.erase(p->key);
    return;
  }
}

void FairQueue::leave(Principal* p, int level) {
  auto& turn = levels_[level];
  turn.erase(std::remove(turn.begin(), turn.end(), p), turn.end());
  principals_.erase(p->key);
}

std::vector<TaskNode*> FairQueue::take_run(const RunState* run) {
  auto it = runs_.find(run);
  if (it == runs_.end()) return {};
  RunQ* rq = it->second.get();
  std::vector<TaskNode*> out(rq->tasks.begin(), rq->tasks.end());
  size_ -= out.size();
  const int level = static_cast<int>(run->options.priority);
  auto pk = principals_.find(std::to_string(level) + ":" + run->options.principal);
  if (pk != principals_.end()) {
    Principal* p = pk->second.get();
    p->turn.erase(std::remove(p->turn.begin(), p->turn.end(), rq), p->turn.end());
    if (p->turn.empty()) leave(p, level);
  }
  runs_.erase(it);
  return out;
}

}  // namespace pto
