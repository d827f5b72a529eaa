// Concurrency stress: random task graphs over overlapping views of shared
// buffers, random nested scopes, small rings; at 1, 2 and 4 scheduler
// threads, kernels inline and on executor threads, repeated. Two golden
// checks: the final buffers equal a sequential replay (the mixing kernel is
// order-sensitive), and every pair of conflicting tasks ran in program order.
// The second case reaches the same rows through externals at random bases
// (a buffer's row k, or a flat 1-D external over just the accessed rows), so
// conflicting tasks share bytes but not base addresses.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "test_support.h"

using namespace pto2;
using namespace pto2::test;

namespace {

constexpr uint32_t kRows = 16, kCols = 4, kBuffers = 5;

struct Access {
  uint32_t buf, r0, r1;
  uint32_t base = 0;  // the external starts at this row of the buffer (<= r0)
  bool flat = false;  // a 1-D external over rows r0..r1 instead of a 2-D view
  bool overlaps(const Access& o) const { return buf == o.buf && r0 < o.r1 && o.r0 < r1; }
};
struct Op {
  Access v;  // INOUT
  Access u;  // INPUT
  bool cube;
  int scope_delta;  // scopes opened (+n) before, or closed (-1) after
};

std::vector<Op> random_program(std::mt19937& rng, int n, bool random_bases) {
  std::vector<Op> ops;
  auto acc = [&] {
    const uint32_t b = rng() % kBuffers, r0 = rng() % kRows, len = 1 + rng() % 4;
    Access a{b, r0, std::min(kRows, r0 + len)};
    if (random_bases) {
      a.base = rng() % (r0 + 1);
      a.flat = rng() % 3 == 0;
    }
    return a;
  };
  for (int i = 0; i < n; ++i) ops.push_back({acc(), acc(), bool(rng() % 2), int(rng() % 4) - 1});
  return ops;
}

Tensor view_of(std::vector<std::vector<int64_t>>& bufs, const Access& a) {
  if (a.flat) {
    const uint32_t n[1] = {(a.r1 - a.r0) * kCols};
    return make_tensor_external(bufs[a.buf].data() + a.r0 * kCols, n, 1, PTO2_INT64);
  }
  const uint32_t shape[2] = {kRows - a.base, kCols};
  Tensor t = make_tensor_external(bufs[a.buf].data() + a.base * kCols, shape, 2, PTO2_INT64);
  const uint32_t off[2] = {a.r0 - a.base, 0}, sh[2] = {a.r1 - a.r0, kCols};
  return tensor_view(t, off, sh);
}

void replay(std::vector<std::vector<int64_t>>& bufs, const std::vector<Op>& ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const uint64_t n = (op.v.r1 - op.v.r0) * kCols, m = (op.u.r1 - op.u.r0) * kCols;
    for (uint64_t k = 0; k < n; ++k) {
      int64_t& v = bufs[op.v.buf][op.v.r0 * kCols + k];
      v = mix_step(v, bufs[op.u.buf][op.u.r0 * kCols + k % m], int64_t(i));
    }
  }
}

}  // namespace

namespace {

void run_random_graphs(int sched, int exec, bool random_bases) {
  RuntimeConfig cfg = small_config(sched);
  cfg.task_window = 64;
  cfg.dep_pool_size = 2048;
  cfg.tensormap_pool_size = 2048;
  cfg.tensormap_buckets = 16;
  Chip chip(cfg, exec);
  REQUIRE(chip.runtime);
#ifdef PTO_UNDER_TSAN
  const int n = 150, reps = 2;
#else
  const int n = 500, reps = 4;
#endif
  for (int rep = 0; rep < reps; ++rep) {
    std::mt19937 rng(1234u + 97u * rep + 7u * sched + exec);
    const std::vector<Op> ops = random_program(rng, n, random_bases);
    std::vector<std::vector<int64_t>> bufs(kBuffers), golden(kBuffers);
    for (uint32_t b = 0; b < kBuffers; ++b) {
      bufs[b].resize(kRows * kCols);
      for (size_t k = 0; k < bufs[b].size(); ++k) bufs[b][k] = int64_t(b * 1000 + k);
    }
    golden = bufs;
    replay(golden, ops);

    ExecLog log(ops.size());
    set_exec_log(&log);
    RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
      int depth = 0;
      pto2_rt_scope_begin(rt);  // keep the implicit scope (ring 0) empty
      ++depth;
      int in_scope = 0;
      for (size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.scope_delta > 0 && depth < 3) {
          pto2_rt_scope_begin(rt);
          ++depth;
          in_scope = 0;
        }
        Tensor v = view_of(bufs, op.v), u = view_of(bufs, op.u);
        PTOParam p[] = {make_inout_param(v), make_input_param(u), make_scalar_param(i)};
        if (pto2_rt_submit_task(rt, op.cube ? kMixCube : kMix, op.cube ? PTO2_WORKER_CUBE : PTO2_WORKER_VECTOR, p, 3) <
            0)
          return 1;
        if (op.scope_delta < 0 || ++in_scope >= 6) {
          pto2_rt_scope_end(rt);
          if (depth == 1)
            pto2_rt_scope_begin(rt);  // the outermost one rolls over
          else
            --depth;
          in_scope = 0;
        }
      }
      while (depth-- > 0) pto2_rt_scope_end(rt);
      return 0;
    });
    set_exec_log(nullptr);
    INFO("sched=" << sched << " exec=" << exec << " random_bases=" << random_bases << " rep=" << rep << " "
                  << r.status.message);
    REQUIRE(r.ok());
    REQUIRE(r.stats.tasks_completed == ops.size());
    for (uint32_t b = 0; b < kBuffers; ++b) REQUIRE(bufs[b] == golden[b]);
    for (size_t j = 0; j < ops.size(); ++j)
      for (size_t i = 0; i < j; ++i) {
        const bool conflict = ops[i].v.overlaps(ops[j].v) || ops[i].v.overlaps(ops[j].u) || ops[i].u.overlaps(ops[j].v);
        if (conflict) REQUIRE(log.end[i].load() < log.start[j].load());
      }
  }
}

}  // namespace

TEST_CASE("random graphs on overlapping views match a sequential replay", "[stress]") {
  const int sched = GENERATE(1, 2, 4);
  const int exec = GENERATE(0, 2);
  run_random_graphs(sched, exec, false);
}

TEST_CASE("random graphs on overlapping externals at random bases match a sequential replay", "[stress]") {
  const int sched = GENERATE(1, 2, 4);
  const int exec = GENERATE(0, 2);
  run_random_graphs(sched, exec, true);
}
