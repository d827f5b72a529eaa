// Each exhaustion/deadlock class ends the run quickly with its numeric error
// code and a diagnosis — never a hang — and the Runtime stays usable.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "test_support.h"

#if defined(__SANITIZE_ADDRESS__)
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
  CHECK_THAT(r.status.message, Catch::Contains("Deadlock") && Catch::Contains("window 4") &&
                                   Catch::Contains("PTO2_RING_TASK_WINDOW >= 8"));
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
  cfg.dep_pool_size = 16;  // an edge takes 1 entry (producer done) or 2: 24 edges exhaust it either way
  Chip chip(cfg, 0);
  std::vector<int64_t> acc(8, 0), one(8, 1);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    PTO2_SCOPE(rt) {
      for (int i = 0; i < 25; ++i) {
        Tensor v = row_of(acc, 1, 0), u = row_of(one, 1, 0);
        PTOParam p[] = {make_inout_param(v), make_input_param(u), make_scalar_param(i)};
        pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, p, 3);
      }
    }
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
#if defined(__SANITIZE_ADDRESS__)
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
