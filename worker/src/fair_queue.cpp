#include "fair_queue.h"

#include <algorithm>

#include "run_state.h"

namespace pto {

template <class T>
void FairQueue::join(std::deque<T*>& turn, T* x, const T* last) {
  if (!turn.empty() && turn.back() == last)
    turn.insert(turn.end() - 1, x);
  else
    turn.push_back(x);
}

void FairQueue::push(TaskNode* s, bool front) {
  const RunState* run = s->run;
  auto& rq = runs_[run];
  if (!rq) {
    const int level = static_cast<int>(run->options.priority);
    std::string key = std::to_string(level) + ":" + run->options.principal;
    auto& p = principals_[key];
    if (!p) p = std::make_unique<Principal>(Principal{std::move(key), level, {}, 0, false});
    ++p->runs;
    rq = std::make_unique<RunQ>(RunQ{run, p.get(), {}, false});
  }
  if (front)
    rq->tasks.push_front(s);
  else
    rq->tasks.push_back(s);
  ++size_;
  if (rq->queued) return;
  rq->queued = true;
  Principal* p = rq->owner;
  if (front)
    p->turn.push_front(rq.get());
  else
    join(p->turn, rq.get(), p->last);
  if (p->queued) return;
  p->queued = true;
  if (front)
    levels_[p->level].push_front(p);
  else
    join(levels_[p->level], p, last_[p->level]);
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
    if (!rq->tasks.empty()) {
      p->turn.push_back(rq);
      p->last = rq;
    } else {
      rq->queued = false;
      p->last = nullptr;
    }
    turn.pop_front();
    if (!p->turn.empty()) {
      turn.push_back(p);
      last_[size_t(level)] = p;
    } else {
      p->queued = false;
      last_[size_t(level)] = nullptr;
    }
    return;
  }
}

std::vector<TaskNode*> FairQueue::take_run(const RunState* run) {
  auto it = runs_.find(run);
  if (it == runs_.end()) return {};
  RunQ* rq = it->second.get();
  std::vector<TaskNode*> out(rq->tasks.begin(), rq->tasks.end());
  size_ -= out.size();
  Principal* p = rq->owner;
  if (rq->queued) {
    p->turn.erase(std::remove(p->turn.begin(), p->turn.end(), rq), p->turn.end());
    if (p->turn.empty() && p->queued) {
      auto& turn = levels_[p->level];
      turn.erase(std::remove(turn.begin(), turn.end(), p), turn.end());
      p->queued = false;
      // Out of the turn: no longer the one served last (when it comes
      // back it comes as any other).
      if (last_[size_t(p->level)] == p) last_[size_t(p->level)] = nullptr;
    }
  }
  if (p->last == rq) p->last = nullptr;
  runs_.erase(it);
  if (--p->runs == 0) {
    if (last_[size_t(p->level)] == p) last_[size_t(p->level)] = nullptr;  // it goes: nothing may point at it
    principals_.erase(p->key);
  }
  return out;
}

}  // namespace pto
