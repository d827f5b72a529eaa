#include "pto2/host_graph.h"

#include <fmt/format.h>

namespace pto2 {

int32_t HostGraph::add_task(int32_t kernel_id, int32_t worker_type, const uint64_t* args, int32_t num_args) {
  Task t{kernel_id, worker_type, {}, {}};
  if (num_args > 0 && args != nullptr)
    t.args.assign(args, args + num_args);
  else if (num_args > 0)
    t.args.assign(static_cast<size_t>(num_args), 0);  // rejected at execute (null args)
  tasks_.push_back(std::move(t));
  return static_cast<int32_t>(tasks_.size() - 1);
}

int32_t HostGraph::add_dummy_task() { return add_task(PTO2_KERNEL_DUMMY, PTO2_WORKER_VECTOR, nullptr, 0); }

Status HostGraph::add_successor(int32_t from, int32_t to) {
  const int32_t n = static_cast<int32_t>(tasks_.size());
  if (from < 0 || from >= n || to < 0 || to >= n)
    return Status::Error(kInvalidArgument, fmt::format("add_successor({}, {}): tasks are 0..{}", from, to, n - 1));
  if (from == to) return Status::Error(kInvalidArgument, fmt::format("add_successor({0}, {0}): a self-edge", from));
  tasks_[from].successors.push_back(to);
  return Status::Ok();
}

size_t HostGraph::edge_count() const {
  size_t e = 0;
  for (const Task& t : tasks_) e += t.successors.size();
  return e;
}

RunResult HostGraph::execute(Runtime& rt) const {
  RunResult bad;
  const size_t n = tasks_.size();
  // Kahn's algorithm: submission order must put every producer first.
  std::vector<int32_t> indegree(n, 0);
  std::vector<std::vector<int32_t>> preds(n);
  for (size_t i = 0; i < n; ++i) {
    if (tasks_[i].args.size() > PTO2_MAX_PARAMS) {
      bad.status = Status::Error(
          kInvalidArgument, fmt::format("task {} has {} args; at most {}", i, tasks_[i].args.size(), PTO2_MAX_PARAMS));
      return bad;
    }
    for (int32_t s : tasks_[i].successors) {
      ++indegree[s];
      preds[s].push_back(static_cast<int32_t>(i));
    }
  }
  std::vector<int32_t> order;
  order.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) order.push_back(static_cast<int32_t>(i));
  for (size_t k = 0; k < order.size(); ++k)
    for (int32_t s : tasks_[order[k]].successors)
      if (--indegree[s] == 0) order.push_back(s);
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i) {
      if (indegree[i] > 0) {
        bad.status = Status::Error(kInvalidArgument, fmt::format("the graph has a cycle through task {}", i));
        return bad;
      }
    }
  }

  return rt.run([&](PTO2Runtime* r) {
    std::vector<int64_t> ids(n, -1);
    std::vector<int64_t> deps;
    PTOParam params[PTO2_MAX_PARAMS];
    for (int32_t i : order) {
      const Task& t = tasks_[i];
      for (size_t a = 0; a < t.args.size(); ++a) params[a] = make_scalar_param(t.args[a]);
      deps.clear();
      for (int32_t p : preds[i]) deps.push_back(ids[p]);
      // Each task gets its own scope: with explicit edges nothing needs a
      // task to stay alive after it completes, so the ring streams any
      // number of tasks through a fixed window.
      PTO2_SCOPE(r) {
        ids[i] = pto2_rt_submit_task_after(r, t.kernel_id, t.worker_type, params, static_cast<int32_t>(t.args.size()),
                                           deps.data(), static_cast<int32_t>(deps.size()));
      }
      if (ids[i] < 0) return 0;  // the run reports the runtime's error
    }
    return 0;
  });
}

}  // namespace pto2
