// host_build_graph: explicit add_task / add_successor graphs on the same scheduler.
#include <catch2/catch.hpp>

#include <vector>

#include "pto2/host_graph.h"
#include "test_support.h"

using namespace pto2;
using namespace pto2::test;

TEST_CASE("host graph runs exactly the added edges, through a small window", "[host_graph]") {
  const int sched = GENERATE(1, 2, 4);
  const int exec = GENERATE(0, 2);
  RuntimeConfig cfg = small_config(sched);
  cfg.task_window = 8;  // far fewer slots than tasks
  Chip chip(cfg, exec);
  // Layers of 10 tasks; each task depends on two tasks of the previous layer.
  const int layers = 12, width = 10, n = layers * width;
  HostGraph g;
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = uint64_t(i);
    REQUIRE(g.add_task(kRecord, i % 2 ? PTO2_WORKER_CUBE : PTO2_WORKER_VECTOR, &tag, 1) == i);
  }
  std::vector<std::pair<int, int>> edges;
  for (int l = 1; l < layers; ++l)
    for (int w = 0; w < width; ++w) {
      const int to = l * width + w;
      for (int from : {(l - 1) * width + w, (l - 1) * width + (w + 3) % width}) {
        REQUIRE(g.add_successor(from, to).ok());
        edges.emplace_back(from, to);
      }
    }
  CHECK(g.edge_count() == edges.size());
  ExecLog log(n);
  set_exec_log(&log);
  RunResult r = g.execute(*chip.runtime);
  set_exec_log(nullptr);
  REQUIRE(r.ok());
  CHECK(r.stats.tasks_completed == uint64_t(n));
  for (auto [from, to] : edges) REQUIRE(log.end[from].load() < log.start[to].load());
}

TEST_CASE("host graph rejects cycles and bad edges before running anything", "[host_graph]") {
  Chip chip(small_config(1), 0);
  HostGraph g;
  const uint64_t tag = 0;
  const int a = g.add_task(kRecord, PTO2_WORKER_VECTOR, &tag, 1);
  const int b = g.add_task(kRecord, PTO2_WORKER_VECTOR, &tag, 1);
  const int c = g.add_dummy_task();
  CHECK(g.add_successor(a, 5).code == kInvalidArgument);
  CHECK(g.add_successor(a, a).code == kInvalidArgument);
  REQUIRE(g.add_successor(a, b).ok());
  REQUIRE(g.add_successor(b, c).ok());
  REQUIRE(g.add_successor(c, a).ok());
  RunResult r = g.execute(*chip.runtime);
  CHECK(r.status.code == kInvalidArgument);
  CHECK_THAT(r.status.message, Catch::Contains("cycle"));
}
