// A ready queue that serves runs fairly (docs/worker.md, "Runs"): by
// priority (HIGH, then NORMAL, then LOW: strict), and within a priority
// round robin between principals, then between the runs of a principal, then
// in submission order within a run. Taking a task moves its principal and
// its run to the back of their turns, so a principal with one ready task
// waits for at most one task of each other principal at its priority, however
// many that other principal has queued. One that comes to a turn (a principal
// to its priority's, a run to its principal's) goes before the one served
// last, when that one is at the back: it joins the round under way instead of
// waiting one more task of whoever was alone there (a one-task job beside a
// long one takes the next free worker, not the one after). Used with the
// engine lock held.
#pragma once

#include <array>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "task_node.h"

namespace pto {

class FairQueue {
 public:
  void push_back(TaskNode* s) { push(s, false); }
  // A task to serve before the rest of its run's (a retry).
  void push_front(TaskNode* s) { push(s, true); }
  // The next task in fair order; nullptr when empty.
  TaskNode* front() const;
  // Removes front(); its principal and run take their turn.
  void pop_front();
  // Every queued task of one run (a cancelled run), in order; the run's
  // queue is forgotten (called for every run when it ends).
  std::vector<TaskNode*> take_run(const RunState* run);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  struct Principal;
  // A run's queue and its principal's turn: kept while the run lives (its
  // queue empties and refills with every task of a short run: no allocation
  // per task), dropped by take_run() when the run ends.
  struct RunQ {
    const RunState* run;
    Principal* owner;
    std::deque<TaskNode*> tasks;
    bool queued = false;  // in owner->turn
  };
  struct Principal {
    std::string key;
    int level;
    std::deque<RunQ*> turn;  // its runs with ready tasks, next first
    int runs = 0;            // RunQs that name it
    bool queued = false;     // in levels_[level]
    RunQ* last = nullptr;    // the run served last, when it went to the back of `turn`
  };
  void push(TaskNode* s, bool front);
  // Puts x at the back of `turn`, or just before `last` when that is there.
  template <class T>
  static void join(std::deque<T*>& turn, T* x, const T* last);

  std::array<std::deque<Principal*>, 3> levels_;  // per priority: principals with ready tasks, next first
  std::array<Principal*, 3> last_{};              // per priority: the principal served last, when at the back
  std::unordered_map<const RunState*, std::unique_ptr<RunQ>> runs_;
  std::unordered_map<std::string, std::unique_ptr<Principal>> principals_;  // key: priority + name
  size_t size_ = 0;
};

}  // namespace pto
