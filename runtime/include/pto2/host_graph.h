// host_build_graph (docs/runtime.md §12): the second runtime variant. The whole task
// graph is built on the host first — tasks with raw 64-bit arguments and
// explicit edges — and then executed by the same scheduler as the
// tensormap_and_ringbuffer variant. No TensorMap, no heap allocation: the
// edges are exactly the ones added.
#pragma once

#include <cstdint>
#include <vector>

#include "pto2/errors.h"
#include "pto2/runtime.h"

namespace pto2 {

class HostGraph {
 public:
  // Adds a task running kernel_id on a core of worker_type; the kernel gets
  // args[0..n) as its argument array. Returns the task's index (>= 0).
  int32_t add_task(int32_t kernel_id, int32_t worker_type, const uint64_t* args, int32_t num_args);
  // A task that runs no kernel (a join point).
  int32_t add_dummy_task();
  // `to` starts only after `from` completes. Indices must exist; from != to.
  Status add_successor(int32_t from, int32_t to);

  size_t size() const { return tasks_.size(); }
  size_t edge_count() const;

  // Executes the graph on rt and waits for it. A cycle, or a task with more
  // than PTO2_MAX_PARAMS arguments, fails before anything runs.
  RunResult execute(Runtime& rt) const;

 private:
  struct Task {
    int32_t kernel_id;
    int32_t worker_type;
    std::vector<uint64_t> args;
    std::vector<int32_t> successors;
  };
  std::vector<Task> tasks_;
};

}  // namespace pto2
