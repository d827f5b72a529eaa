// Each exhaustion/deadlock class ends the run quickly with its numeric error
// code and a diagnosis — never a hang — and the Runtime stays usable.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

#if defined(PTO_UNDER_ASAN)
#include <sanitizer/lsan_interface.h>
#endif

using namespace pto2;
using namespace pto2::test;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Tensor row_of(std::vector<int64_t>& buf, uint32_t nrows, uint32_t r) {
  const uint32_t shape[2] = {nrows, 8};
  Tensor t = make_tensor_external(buf.data(), shape, 2, PTO2_INT64);
  const uint32_t off[2] = {r, 0}, sh[2] = {1, 8};
  return tensor_view(t, off, sh);
}

// The run after a failure must work on the same Runtime.
void check_still_usable(Runtime& rt) {
  std::vector<int64_t> v(8, 0);
  RunResult r = rt.run([&](PTO2Runtime* r2) {
    Tensor t = row_of(v, 1, 0);
    PTOParam p[] = {make_output_param(t), make_scalar_param(42)};
    pto2_rt_submit_task(r2, kFill, PTO2_WORKER_VECTOR, p, 2);
    return 0;
  });
  CHECK(r.ok());
  CHECK(v[0] == 42);
}

// Applies every "PTO2_X >= N" of a FATAL message's solution to cfg; returns
// how many sizes it named.
int follow_advice(const std::string& message, RuntimeConfig* cfg) {
  static const std::regex re("(PTO2_[A-Z_]+) >= ([0-9]+)");
  int named = 0;
  for (auto it = std::sregex_iterator(message.begin(), message.end(), re); it != std::sregex_iterator(); ++it) {
    const std::string var = (*it)[1];
    const uint64_t v = std::stoull((*it)[2]);
    if (var == "PTO2_RING_TASK_WINDOW")
      cfg->task_window = v;
    else if (var == "PTO2_RING_HEAP")
      cfg->heap_size = v;
    else if (var == "PTO2_RING_DEP_POOL")
      cfg->dep_pool_size = v;
    else if (var == "PTO2_TENSORMAP_POOL")
      cfg->tensormap_pool_size = v;
    else
      FAIL("unknown variable in advice: " << var);
    ++named;
  }
  return named;
}

// Runs orch on a chip with cfg: it must fail with `code`; rerun once with the
// recommended sizes, the same orchestration must pass.
// A runtime-allocated row filled by one task, then updated (INOUT) by n - 1
// more: each links the row's owner whether or not it has completed.
void owned_chain(PTO2Runtime* rt, std::vector<int64_t>& one, int n) {
  const uint32_t shape[2] = {1, 8};
  Tensor acc = make_tensor(shape, 2, PTO2_INT64);
  PTOParam f[] = {make_output_param(acc), make_scalar_param(0)};
  pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
  for (int i = 1; i < n; ++i) {
    Tensor u = row_of(one, 1, 0);
    PTOParam p[] = {make_inout_param(acc), make_input_param(u), make_scalar_param(i)};
    pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, p, 3);
  }
}

void advice_makes_it_pass(RuntimeConfig cfg, int32_t code, const std::function<int(PTO2Runtime*)>& orch) {
  RunResult first;
  {
    Chip chip(cfg, 0);
    REQUIRE(chip.runtime);
    first = chip.runtime->run(orch);
  }
  INFO("first run: " << first.status.message);
  REQUIRE(first.status.code == code);
  CHECK(first.stats.tasks_completed <= first.stats.tasks_submitted);
  REQUIRE(follow_advice(first.status.message, &cfg) >= 1);
  Chip chip(cfg, 0);
  REQUIRE(chip.runtime);
  RunResult second = chip.runtime->run(orch);
  INFO("second run: " << second.status.message);
  CHECK(second.ok());
}

}  // namespace

TEST_CASE("window 4 with 8 tasks in one scope: SCOPE_EXCEEDS_WINDOW at once", "[deadlock]") {
  const int sched = GENERATE(1, 2, 4);
  RuntimeConfig cfg = small_config(sched);
  cfg.task_window = 4;
  Chip chip(cfg, 0);
  std::vector<int64_t> buf(8 * 8, 0);
  int64_t last = 0;
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) {
      for (uint32_t i = 0; i < 8; ++i) {
        Tensor t = row_of(buf, 8, i);
        PTOParam p[] = {make_output_param(t), make_scalar_param(i)};
        last = pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
      }
    }
    return 0;
  });
  CHECK(seconds_since(t0) < 5.0);
  CHECK(r.status.code == kScopeExceedsWindow);
  CHECK(last == -kScopeExceedsWindow);  // later submits return the sticky error
  // 8 tasks held at once: the 8th is allocated while 7 are active, so the
  // window must be at least 9 -> 16 (8 would fail again).
  CHECK_THAT(r.status.message, Catch::Contains("Deadlock") && Catch::Contains("window 4") &&
                                   Catch::Contains("PTO2_RING_TASK_WINDOW >= 16"));
  CHECK(r.stats.tasks_completed == r.stats.tasks_submitted);
  CHECK(buf[2 * 8] == 2);  // the tasks that fit did run
  check_still_usable(*chip.runtime);
}

TEST_CASE("nested scopes sharing ring 3 fill it together: TASK_RING_DEADLOCK", "[deadlock]") {
  RuntimeConfig cfg = small_config(2);
  cfg.task_window = 8;
  Chip chip(cfg, 0);
  std::vector<int64_t> buf(16 * 8, 0);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    uint32_t row = 0;
    PTO2_SCOPE(rt) PTO2_SCOPE(rt) PTO2_SCOPE(rt) {  // depth 3 -> ring 3
      for (int i = 0; i < 4; ++i, ++row) {
        Tensor t = row_of(buf, 16, row);
        PTOParam p[] = {make_output_param(t), make_scalar_param(1)};
        pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
      }
      PTO2_SCOPE(rt) {  // depth 4 -> ring 3 too
        for (int i = 0; i < 4; ++i, ++row) {
          Tensor t = row_of(buf, 16, row);
          PTOParam p[] = {make_output_param(t), make_scalar_param(1)};
          pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
        }
      }
    }
    return 0;
  });
  CHECK(r.status.code == kTaskRingDeadlock);
  check_still_usable(*chip.runtime);
}

TEST_CASE("heap ring full of buffers held by an open scope: HEAP_RING_DEADLOCK", "[deadlock]") {
  RuntimeConfig cfg = small_config(2);
  cfg.heap_size = 4096;  // four 1 KiB outputs
  Chip chip(cfg, 0);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    const uint32_t shape[2] = {1, 8};
    PTO2_SCOPE(rt) {
      for (int i = 0; i < 6; ++i) {
        Tensor t = make_tensor(shape, 2, PTO2_INT64);
        PTOParam p[] = {make_output_param(t), make_scalar_param(i)};
        pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
      }
    }
    return 0;
  });
  CHECK(r.status.code == kHeapRingDeadlock);
  CHECK_THAT(r.status.message, Catch::Contains("PTO2_RING_HEAP >="));
  check_still_usable(*chip.runtime);
}

TEST_CASE("one task's outputs larger than the heap: HEAP_REQUEST_TOO_LARGE", "[deadlock]") {
  RuntimeConfig cfg = small_config(1);
  cfg.heap_size = 4096;
  Chip chip(cfg, 0);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    const uint32_t shape[2] = {64, 16};  // 8 KiB of int64
    Tensor t = make_tensor(shape, 2, PTO2_INT64);
    PTOParam p[] = {make_output_param(t), make_scalar_param(0)};
    pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
    return 0;
  });
  CHECK(r.status.code == kHeapRequestTooLarge);
  CHECK_THAT(r.status.message, Catch::Contains("8192"));
  check_still_usable(*chip.runtime);
}

TEST_CASE("dependency-list pool full of entries held by an open scope: DEP_POOL_DEADLOCK", "[deadlock]") {
  RuntimeConfig cfg = small_config(2);
  // The chain updates a runtime-allocated buffer: every task links its
  // owner, completed or not, so each takes at least one entry and 24 exhaust
  // 16 whatever the timing. (On an external buffer an edge to a producer
  // that had completed takes none, and the run could pass.)
  cfg.dep_pool_size = 16;
  Chip chip(cfg, 0);
  std::vector<int64_t> one(8, 1);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) { owned_chain(rt, one, 25); }
    return 0;
  });
  CHECK(r.status.code == kDepPoolDeadlock);
  CHECK_THAT(r.status.message, Catch::Contains("PTO2_RING_DEP_POOL >="));
  check_still_usable(*chip.runtime);
}

TEST_CASE("TensorMap pool full of entries of unretirable tasks: TENSORMAP_DEADLOCK", "[deadlock]") {
  RuntimeConfig cfg = small_config(2);
  cfg.tensormap_pool_size = 16;
  Chip chip(cfg, 0);
  std::vector<int64_t> buf(32 * 8, 0);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) {
      for (uint32_t i = 0; i < 20; ++i) {
        Tensor t = row_of(buf, 32, i);
        PTOParam p[] = {make_output_param(t), make_scalar_param(i)};
        pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
      }
    }
    return 0;
  });
  CHECK(r.status.code == kTensorMapDeadlock);
  CHECK_THAT(r.status.message, Catch::Contains("PTO2_TENSORMAP_POOL >="));
  check_still_usable(*chip.runtime);
}

namespace {
std::atomic<bool> g_release_hung{false};
}

TEST_CASE("a hung kernel running inline: STALLED, and destroying the Runtime does not hang", "[deadlock]") {
  // The kernel runs on the scheduler thread itself and waits for the test.
  // The platform is leaked on purpose: the stuck thread returns into it later.
  auto* platform = new HostThreadPlatform(HostThreadPlatformConfig{1, 1, 0, 50});
#if defined(PTO_UNDER_ASAN)
  __lsan_ignore_object(platform);
#endif
  platform->register_kernel(0, WorkerType::kVector, [](int64_t*) {
    while (!g_release_hung.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  RuntimeConfig cfg = small_config(1);
  cfg.stall_timeout_ms = 200;
  Status st;
  auto rt = Runtime::create(cfg, *platform, &st);
  REQUIRE(rt);
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = rt->run([](PTO2Runtime* p) {
    PTOParam s[] = {make_scalar_param(0)};
    pto2_rt_submit_task(p, 0, PTO2_WORKER_VECTOR, s, 1);
    return 0;
  });
  CHECK(r.status.code == kStalled);
  rt.reset();  // must return although the kernel is still running
  CHECK(seconds_since(t0) < 2.0);
  g_release_hung = true;  // let the detached thread finish and exit
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

TEST_CASE("a kernel that never finishes in time: STALLED, then the runtime refuses runs", "[deadlock]") {
  // The buffers outlive the chip: the abandoned kernel still writes them.
  std::vector<int64_t> in(8, 1), out(8, 0);
  RuntimeConfig cfg = small_config(1);
  cfg.stall_timeout_ms = 200;
  Chip chip(cfg, /*executor_threads=*/1);
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    Tensor a = row_of(in, 1, 0), o = row_of(out, 1, 0);
    PTOParam p[] = {make_input_param(a), make_output_param(o), make_scalar_param(1500000)};
    pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, p, 3);
    return 0;
  });
  CHECK(seconds_since(t0) < 1.4);
  CHECK(r.status.code == kStalled);
  CHECK(chip.runtime->run([](PTO2Runtime*) { return 0; }).status.code == kRuntimeBroken);
}

// --- Following the advice once makes the same run pass (one case per class) ---

namespace {

int fill_rows(PTO2Runtime* rt, std::vector<int64_t>& buf, uint32_t nrows, uint32_t from, uint32_t to) {
  for (uint32_t i = from; i < to; ++i) {
    Tensor t = row_of(buf, nrows, i);
    PTOParam p[] = {make_output_param(t), make_scalar_param(i)};
    pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
  }
  return 0;
}

}  // namespace

TEST_CASE("advice: SCOPE_EXCEEDS_WINDOW, window 4 and window 8 with 3..40 tasks in one scope", "[deadlock][advice]") {
  const uint32_t tasks = GENERATE(3u, 8u, 40u);
  const uint64_t window = GENERATE(4u, 8u);
  if (tasks < window) return;  // fits (the last is allocated while tasks - 1 < window - 1 are active)
  RuntimeConfig cfg = small_config(2);
  cfg.task_window = window;
  std::vector<int64_t> buf(64 * 8, 0);
  advice_makes_it_pass(cfg, kScopeExceedsWindow, [&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) { fill_rows(rt, buf, 64, 0, tasks); }
    return 0;
  });
}

TEST_CASE("advice: the vector example (4 tasks, one scope) with window 4", "[deadlock][advice]") {
  RuntimeConfig cfg = small_config(2);
  cfg.task_window = 4;
  std::vector<float> a(1024, 1.f), b(1024, 2.f), f(1024, 0.f);
  advice_makes_it_pass(cfg, kScopeExceedsWindow, [&](PTO2Runtime* rt) {
    const uint32_t shape[1] = {1024};
    Tensor ta = make_tensor_external(a.data(), shape, 1, PTO2_FLOAT32);
    Tensor tb = make_tensor_external(b.data(), shape, 1, PTO2_FLOAT32);
    Tensor tf = make_tensor_external(f.data(), shape, 1, PTO2_FLOAT32);
    PTO2_SCOPE(rt) {
      Tensor c = make_tensor(shape, 1, PTO2_FLOAT32), d = make_tensor(shape, 1, PTO2_FLOAT32),
             e = make_tensor(shape, 1, PTO2_FLOAT32);
      PTOParam p0[] = {make_input_param(ta), make_input_param(tb), make_output_param(c)};
      pto2_rt_submit_task(rt, kAdd, PTO2_WORKER_VECTOR, p0, 3);
      PTOParam p1[] = {make_input_param(c), make_scalar_param(f32_bits(1.f)), make_output_param(d)};
      pto2_rt_submit_task(rt, kAddScalar, PTO2_WORKER_VECTOR, p1, 3);
      PTOParam p2[] = {make_input_param(c), make_scalar_param(f32_bits(2.f)), make_output_param(e)};
      pto2_rt_submit_task(rt, kAddScalar, PTO2_WORKER_VECTOR, p2, 3);
      PTOParam p3[] = {make_input_param(d), make_input_param(e), make_output_param(tf)};
      pto2_rt_submit_task(rt, kMul, PTO2_WORKER_VECTOR, p3, 3);
    }
    return 0;
  });
  CHECK(f[0] == 20.f);  // (1 + 2 + 1) * (1 + 2 + 2)
}

TEST_CASE("advice: TASK_RING_DEADLOCK, nested scopes sharing ring 3", "[deadlock][advice]") {
  RuntimeConfig cfg = small_config(2);
  cfg.task_window = 8;
  std::vector<int64_t> buf(64 * 8, 0);
  advice_makes_it_pass(cfg, kTaskRingDeadlock, [&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) PTO2_SCOPE(rt) PTO2_SCOPE(rt) {
      fill_rows(rt, buf, 64, 0, 4);
      PTO2_SCOPE(rt) { fill_rows(rt, buf, 64, 4, 8); }
      fill_rows(rt, buf, 64, 8, 20);  // after the failure: the rest of the open scope
    }
    return 0;
  });
}

TEST_CASE("advice: HEAP_RING_DEADLOCK with more allocations after the failure", "[deadlock][advice]") {
  RuntimeConfig cfg = small_config(2);
  cfg.heap_size = 4096;
  advice_makes_it_pass(cfg, kHeapRingDeadlock, [&](PTO2Runtime* rt) {
    const uint32_t shape[2] = {1, 8};
    PTO2_SCOPE(rt) {
      for (int i = 0; i < 23; ++i) {
        Tensor t = make_tensor(shape, 2, PTO2_INT64);
        PTOParam p[] = {make_output_param(t), make_scalar_param(i)};
        pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
      }
    }
    return 0;
  });
}

TEST_CASE("advice: HEAP_REQUEST_TOO_LARGE", "[deadlock][advice]") {
  RuntimeConfig cfg = small_config(1);
  cfg.heap_size = 4096;
  advice_makes_it_pass(cfg, kHeapRequestTooLarge, [&](PTO2Runtime* rt) {
    const uint32_t shape[2] = {64, 16};  // 8 KiB of int64
    PTO2_SCOPE(rt) {
      for (int i = 0; i < 3; ++i) {
        Tensor t = make_tensor(shape, 2, PTO2_INT64);
        PTOParam p[] = {make_output_param(t), make_scalar_param(0)};
        pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
      }
    }
    return 0;
  });
}

TEST_CASE("advice: DEP_POOL_DEADLOCK, 16 entries and a long INOUT chain", "[deadlock][advice]") {
  RuntimeConfig cfg = small_config(2);
  cfg.dep_pool_size = GENERATE(16u, 64u);
  std::vector<int64_t> one(8, 1);
  advice_makes_it_pass(cfg, kDepPoolDeadlock, [&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) { owned_chain(rt, one, 100); }
    return 0;
  });
}

TEST_CASE("advice: TENSORMAP_DEADLOCK, many outputs in one scope", "[deadlock][advice]") {
  RuntimeConfig cfg = small_config(2);
  cfg.tensormap_pool_size = 16;
  std::vector<int64_t> buf(64 * 8, 0);
  advice_makes_it_pass(cfg, kTensorMapDeadlock, [&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) { fill_rows(rt, buf, 64, 0, 60); }
    return 0;
  });
}

TEST_CASE("default sizes: a 60,000-task scope with one input and one output per task fits", "[deadlock][advice]") {
  RuntimeConfig cfg;  // the defaults
  cfg.scheduler_threads = 1;
  Chip chip(cfg, 0);
  REQUIRE(chip.runtime);
  std::vector<int64_t> in(8, 1), out(8, 0);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) {
      for (uint32_t i = 0; i < 60000; ++i) {
        Tensor a = row_of(in, 1, 0), o = row_of(out, 1, 0);
        PTOParam p[] = {make_input_param(a), make_output_param(o), make_scalar_param(0)};
        pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, p, 3);
      }
    }
    return 0;
  });
  INFO(r.status.message);
  CHECK(r.ok());
  CHECK(r.stats.tasks_completed == 60000);
}
