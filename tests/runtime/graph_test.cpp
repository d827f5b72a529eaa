// Graph tests: real kernels, golden outputs, and execution-order constraints
// checked against the dependencies each graph must have. Every case runs at
// 1, 2 and 4 scheduler threads, with kernels inline and on executor threads.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"
#include "thread_switches.h"
#include "vector_example.h"

using namespace pto2;
using namespace pto2::test;
using pto_test::other_threads_switches;

// The shared orchestration names kernels by these ids.
static_assert(int(vector_example::kAdd) == int(kAdd) && int(vector_example::kAddScalar) == int(kAddScalar) &&
              int(vector_example::kMul) == int(kMul));

namespace {

struct Shape {
  int sched;
  int exec;
};

Shape any_shape() {
  const int sched = GENERATE(1, 2, 4);
  const int exec = GENERATE(0, 2);
  return {sched, exec};
}

bool before(const ExecLog& log, int a, int b) {
  return log.end[a].load() != 0 && log.start[b].load() != 0 && log.end[a].load() < log.start[b].load();
}

}  // namespace

TEST_CASE("vector example f = (a+b+1)(a+b+2) on 16384 fp32 matches golden", "[graph]") {
  const Shape s = any_shape();
  Chip chip(small_config(s.sched), s.exec);
  REQUIRE(chip.runtime);
  const uint32_t n = 16384;
  std::vector<float> a(n), b(n), f(n, 0.f);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = float(i % 97) * 0.5f;
    b[i] = float(i % 13) - 3.f;
  }
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    vector_example::orchestrate(rt, a.data(), b.data(), f.data(), n);
    return 0;
  });
  REQUIRE(r.ok());
  CHECK(r.stats.tasks_submitted == 4);
  CHECK(r.stats.tasks_completed == 4);
  size_t matched = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const float golden = (a[i] + b[i] + 1.f) * (a[i] + b[i] + 2.f);
    matched += std::abs(f[i] - golden) <= 1e-5f * std::max(1.f, std::abs(golden));
  }
  CHECK(matched == n);
}

namespace {

// Submits a task that mixes `u` into `v` (INOUT v, INPUT u) with tag `tag`.
int64_t mix(PTO2Runtime* rt, Tensor& v, Tensor& u, int64_t tag, int32_t type = PTO2_WORKER_VECTOR) {
  PTOParam p[] = {make_inout_param(v), make_input_param(u), make_scalar_param(uint64_t(tag))};
  return pto2_rt_submit_task(rt, type == PTO2_WORKER_CUBE ? kMixCube : kMix, type, p, 3);
}

Tensor rows(std::vector<int64_t>& buf, uint32_t nrows, uint32_t ncols, uint32_t r0, uint32_t r1) {
  const uint32_t shape[2] = {nrows, ncols};
  Tensor t = make_tensor_external(buf.data(), shape, 2, PTO2_INT64);
  const uint32_t off[2] = {r0, 0}, sh[2] = {r1 - r0, ncols};
  return tensor_view(t, off, sh);
}

}  // namespace

TEST_CASE("chain: each task waits for the previous writer (INOUT chain)", "[graph]") {
  const Shape s = any_shape();
  Chip chip(small_config(s.sched), s.exec);
  const int n = 64;
  ExecLog log(n);
  set_exec_log(&log);
  std::vector<int64_t> acc(8, 1), one(8, 1);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    Tensor v = rows(acc, 1, 8, 0, 1), u = rows(one, 1, 8, 0, 1);
    for (int i = 0; i < n; ++i) mix(rt, v, u, i, i % 2 ? PTO2_WORKER_CUBE : PTO2_WORKER_VECTOR);
    return 0;
  });
  set_exec_log(nullptr);
  REQUIRE(r.ok());
  for (int i = 1; i < n; ++i) CHECK(before(log, i - 1, i));
  int64_t golden = 1;
  for (int i = 0; i < n; ++i) golden = mix_step(golden, 1, i);
  CHECK(acc[0] == golden);
  CHECK(acc[7] == golden);
}

TEST_CASE("diamond and fan-out/fan-in order readers after writers and writers after readers", "[graph]") {
  const Shape s = any_shape();
  Chip chip(small_config(s.sched), s.exec);
  const int fan = 12;
  ExecLog log(fan + 3);
  set_exec_log(&log);
  // src (tag 0) writes X; fan readers (tags 1..fan) each read X into their own
  // row of Y; join (tag fan+1) reads all of Y into Z; then a writer of X
  // (tag fan+2) must wait for every reader of X (write-after-read).
  std::vector<int64_t> X(4, 2), Y(fan * 4, 0), Z(4, 0), src(4, 5);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    Tensor x = rows(X, 1, 4, 0, 1), s0 = rows(src, 1, 4, 0, 1);
    mix(rt, x, s0, 0);
    for (int i = 0; i < fan; ++i) {
      Tensor y = rows(Y, fan, 4, i, i + 1);
      mix(rt, y, x, 1 + i);
    }
    Tensor z = rows(Z, 1, 4, 0, 1), yall = rows(Y, fan, 4, 0, fan);
    mix(rt, z, yall, fan + 1);
    mix(rt, x, s0, fan + 2);
    return 0;
  });
  set_exec_log(nullptr);
  REQUIRE(r.ok());
  for (int i = 1; i <= fan; ++i) {
    CHECK(before(log, 0, i));        // read after write
    CHECK(before(log, i, fan + 1));  // join after all
    CHECK(before(log, i, fan + 2));  // write after read
  }
  // Golden values computed sequentially.
  const int64_t x1 = 2 * 31 + 5 + 0;
  for (int i = 0; i < fan; ++i) CHECK(Y[i * 4] == 0 * 31 + x1 + 1 + i);
  int64_t z = 0;  // z[k] mixes y[k % 48] — all 4 elements of z get rows' first 4 elements
  z = 0 * 31 + Y[0] + fan + 1;
  CHECK(Z[0] == z);
  CHECK(X[0] == x1 * 31 + 5 + fan + 2);
}

TEST_CASE("overlapping views of one buffer order each other - disjoint views run in parallel", "[graph]") {
  const Shape s = any_shape();
  Chip chip(small_config(s.sched), s.exec);
  ExecLog log(6);
  set_exec_log(&log);
  std::vector<int64_t> B(16 * 4, 1), one(4, 1);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    Tensor u = rows(one, 1, 4, 0, 1);
    Tensor a = rows(B, 16, 4, 0, 8), b = rows(B, 16, 4, 8, 16);  // disjoint halves
    Tensor mid = rows(B, 16, 4, 6, 10);                          // overlaps both
    Tensor all = rows(B, 16, 4, 0, 16);
    Tensor c = rows(B, 16, 4, 12, 14);  // inside b only
    mix(rt, a, u, 0);
    mix(rt, b, u, 1);
    mix(rt, mid, u, 2);
    mix(rt, c, u, 3);
    mix(rt, all, u, 4);
    return 0;
  });
  set_exec_log(nullptr);
  REQUIRE(r.ok());
  CHECK(before(log, 0, 2));
  CHECK(before(log, 1, 2));
  CHECK(before(log, 1, 3));
  CHECK(before(log, 2, 4));
  CHECK(before(log, 3, 4));
  // Row 7 (in a and mid and all), golden by sequential replay.
  CHECK(B[7 * 4] == ((1 * 31 + 1 + 0) * 31 + 1 + 2) * 31 + 1 + 4);
  CHECK(B[13 * 4] == ((1 * 31 + 1 + 1) * 31 + 1 + 3) * 31 + 1 + 4);
}

TEST_CASE("nested scopes: tasks in inner rings reclaim while outer scope stays open", "[graph][scope]") {
  const Shape s = any_shape();
  RuntimeConfig cfg = small_config(s.sched);
  cfg.task_window = 16;  // every ring: far fewer slots than tasks
  Chip chip(cfg, s.exec);
  std::vector<int64_t> out(4, 0), one(4, 1);
  int submitted = 0;
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    Tensor o = rows(out, 1, 4, 0, 1), u = rows(one, 1, 4, 0, 1);
    for (int g = 0; g < 10; ++g) {
      PTO2_SCOPE(rt) {        // depth 1 -> ring 1
        PTO2_SCOPE(rt) {      // depth 2 -> ring 2
          PTO2_SCOPE(rt) {    // depth 3 -> ring 3
            PTO2_SCOPE(rt) {  // depth 4 -> ring 3 as well
              for (int i = 0; i < 5; ++i, ++submitted) mix(rt, o, u, submitted);
            }
            for (int i = 0; i < 5; ++i, ++submitted) mix(rt, o, u, submitted);
          }
          for (int i = 0; i < 5; ++i, ++submitted) mix(rt, o, u, submitted);
        }
        for (int i = 0; i < 5; ++i, ++submitted) mix(rt, o, u, submitted);
      }
    }
    return 0;
  });
  REQUIRE(r.ok());
  CHECK(r.stats.tasks_completed == 200);
  int64_t golden = 0;
  for (int i = 0; i < submitted; ++i) golden = mix_step(golden, 1, i);
  CHECK(out[0] == golden);
}

TEST_CASE("runtime-allocated intermediates, explicit deps, dummy join and read_tensor", "[graph][api]") {
  const Shape s = any_shape();
  Chip chip(small_config(s.sched), s.exec);
  ExecLog log(4);
  set_exec_log(&log);
  std::vector<float> a(256), b(256), seen(256);
  std::iota(a.begin(), a.end(), 0.f);
  std::fill(b.begin(), b.end(), 10.f);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    const uint32_t shape[1] = {256};
    Tensor ta = make_tensor_external(a.data(), shape, 1, PTO2_FLOAT32);
    Tensor tb = make_tensor_external(b.data(), shape, 1, PTO2_FLOAT32);
    PTO2_SCOPE(rt) {
      Tensor c = make_tensor(shape, 1, PTO2_FLOAT32);
      PTOParam p0[] = {make_input_param(ta), make_input_param(tb), make_output_param(c)};
      const int64_t t0 = pto2_rt_submit_task(rt, kAdd, PTO2_WORKER_VECTOR, p0, 3);
      REQUIRE(t0 >= 0);
      REQUIRE(c.addr != 0);
      REQUIRE(c.addr % 1024 == 0);
      // Explicit edges: a record task that must follow t0 although it shares no tensor.
      PTOParam rec[] = {make_scalar_param(0)};
      const int64_t t1 = pto2_rt_submit_task_after(rt, kRecord, PTO2_WORKER_CUBE, rec, 1, &t0, 1);
      PTOParam rec2[] = {make_scalar_param(1)};
      const int64_t t2 = pto2_rt_submit_task_after(rt, kRecord, PTO2_WORKER_VECTOR, rec2, 1, &t1, 1);
      REQUIRE(t2 >= 0);
      // A dummy join over c: read its value from orchestration code.
      PTOParam pj[] = {make_input_param(c)};
      REQUIRE(pto2_rt_submit_dummy_task(rt, pj, 1) >= 0);
      REQUIRE(pto2_rt_read_tensor(rt, &c, seen.data(), seen.size() * sizeof(float)) == 0);
      // A slice read gives just that part.
      const uint32_t off[1] = {100}, sh[1] = {4};
      Tensor part = tensor_view(c, off, sh);
      float four[4];
      REQUIRE(pto2_rt_read_tensor(rt, &part, four, sizeof(four)) == 0);
      CHECK(four[0] == 110.f);
      CHECK(four[3] == 113.f);
    }
    return 0;
  });
  set_exec_log(nullptr);
  REQUIRE(r.ok());
  for (int i = 0; i < 256; ++i) REQUIRE(seen[i] == float(i) + 10.f);
  CHECK(before(log, 0, 1));
}

TEST_CASE("batched GEMM with INOUT accumulation across cube and vector cores", "[graph]") {
  const Shape s = any_shape();
  Chip chip(small_config(s.sched), s.exec);
  const uint32_t T = 8, groups = 4, ksteps = 4;
  std::vector<float> A(groups * ksteps * T * T), B(ksteps * T * T), C(groups * T * T, 0.f);
  for (size_t i = 0; i < A.size(); ++i) A[i] = float((i * 7) % 5) - 2.f;
  for (size_t i = 0; i < B.size(); ++i) B[i] = float((i * 3) % 7) - 3.f;
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    const uint32_t ashape[2] = {groups * ksteps * T, T}, bshape[2] = {ksteps * T, T}, cshape[2] = {groups * T, T};
    Tensor ta = make_tensor_external(A.data(), ashape, 2, PTO2_FLOAT32);
    Tensor tb = make_tensor_external(B.data(), bshape, 2, PTO2_FLOAT32);
    Tensor tc = make_tensor_external(C.data(), cshape, 2, PTO2_FLOAT32);
    for (uint32_t g = 0; g < groups; ++g) {
      PTO2_SCOPE(rt) {
        const uint32_t coff[2] = {g * T, 0}, tile[2] = {T, T};
        Tensor cg = tensor_view(tc, coff, tile);
        for (uint32_t k = 0; k < ksteps; ++k) {
          const uint32_t aoff[2] = {(g * ksteps + k) * T, 0}, boff[2] = {k * T, 0};
          Tensor ag = tensor_view(ta, aoff, tile), bk = tensor_view(tb, boff, tile);
          PTOParam p[] = {make_input_param(ag), make_input_param(bk), make_inout_param(cg)};
          pto2_rt_submit_task(rt, kMatAcc, PTO2_WORKER_CUBE, p, 3);
        }
      }
    }
    return 0;
  });
  REQUIRE(r.ok());
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t i = 0; i < T; ++i)
      for (uint32_t j = 0; j < T; ++j) {
        float golden = 0;
        for (uint32_t k = 0; k < ksteps; ++k)
          for (uint32_t x = 0; x < T; ++x) golden += A[((g * ksteps + k) * T + i) * T + x] * B[(k * T + x) * T + j];
        REQUIRE(C[(g * T + i) * T + j] == Approx(golden));
      }
}

TEST_CASE("a Runtime runs many orchestrations in a row", "[graph]") {
  Chip chip(small_config(2), 0);
  std::vector<int64_t> v(4, 0), one(4, 1);
  for (int run = 0; run < 20; ++run) {
    RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor a = rows(v, 1, 4, 0, 1), u = rows(one, 1, 4, 0, 1);
      for (int i = 0; i < 50; ++i) mix(rt, a, u, 0);
      return 0;
    });
    REQUIRE(r.ok());
    REQUIRE(r.stats.tasks_completed == 50);
  }
}

TEST_CASE("runs that publish nothing wake no scheduler thread", "[graph]") {
  // An empty run (a chip task whose orchestration submits nothing, back to
  // back) must not cost the parked scheduler threads a wake-up each.
  Chip chip(small_config(2), 0);
  std::vector<int64_t> v(4, 0), one(4, 1);
  RunResult warm = chip.runtime->run([&](PTO2Runtime* rt) {
    Tensor a = rows(v, 1, 4, 0, 1), u = rows(one, 1, 4, 0, 1);
    mix(rt, a, u, 0);
    return 0;
  });
  REQUIRE(warm.ok());
  // Past the spin budget: both scheduler threads are parked between runs.
  std::this_thread::sleep_for(std::chrono::milliseconds(50 + chip.runtime->config().spin_before_park_us / 1000));
  const uint64_t before = other_threads_switches();
  const auto t0 = std::chrono::steady_clock::now();
  // Apart, so that a thread woken by one run would have parked again before the next.
  constexpr int kRuns = 100;
  for (int i = 0; i < kRuns; ++i) {
    REQUIRE(chip.runtime->run([](PTO2Runtime*) { return 0; }).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t woken = other_threads_switches() - before;
  // A parked thread's own timeout (every 100 ms) may wake it; nothing else should.
  INFO(woken << " wake-ups of other threads over " << kRuns << " empty runs in " << ms << " ms");
  CHECK(woken <= uint64_t(4 + 4 * (ms / 100)));
}

TEST_CASE("outputs of one task are packed into one 1024-aligned heap allocation", "[graph][heap]") {
  Chip chip(small_config(1), 0);
  std::vector<int64_t> in(8, 4);
  uint64_t a0 = 0, a1 = 0, a2 = 0;
  std::vector<int64_t> r0(8), r1(8);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) {
      const uint32_t small[1] = {8}, big[1] = {200};  // 64 B and 1600 B
      Tensor x = make_tensor(small, 1, PTO2_INT64), y = make_tensor(big, 1, PTO2_INT64),
             z = make_tensor(small, 1, PTO2_INT64);
      Tensor src = make_tensor_external(in.data(), small, 1, PTO2_INT64);
      // kSlowCopy copies args[0] into args[1]; the extra outputs ride along.
      PTOParam p[] = {make_input_param(src), make_output_param(x), make_scalar_param(0), make_output_param(y),
                      make_output_param(z)};
      REQUIRE(pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, p, 5) >= 0);
      a0 = x.addr;
      a1 = y.addr;
      a2 = z.addr;
      REQUIRE(x.owner == y.owner);  // one creator owns the packed buffer
      REQUIRE(pto2_rt_read_tensor(rt, &x, r0.data(), 64) == 0);
    }
    return 0;
  });
  REQUIRE(r.ok());
  CHECK(a0 % 1024 == 0);
  CHECK(a1 == a0 + 1024);  // 64 B rounded up to the output alignment
  CHECK(a2 == a1 + 2048);  // 1600 B rounded up to 2048
  CHECK(r0 == in);
}
