// Bad input gets a clear error naming the value and the rule; the run reports
// it, later submits return it, and the Runtime keeps working.
#include <catch2/catch.hpp>

#include <vector>

#include "test_support.h"

using namespace pto2;
using namespace pto2::test;

namespace {

RunResult run_one(Runtime& rt, const std::function<void(PTO2Runtime*)>& body) {
  return rt.run([&](PTO2Runtime* r) {
    body(r);
    return 0;
  });
}

Tensor vec(std::vector<int64_t>& v) {
  const uint32_t shape[1] = {uint32_t(v.size())};
  return make_tensor_external(v.data(), shape, 1, PTO2_INT64);
}

}  // namespace

TEST_CASE("Runtime::create rejects an invalid config", "[api]") {
  HostThreadPlatform platform(HostThreadPlatformConfig{});
  RuntimeConfig cfg;
  cfg.task_window = 100;
  Status st;
  CHECK(Runtime::create(cfg, platform, &st) == nullptr);
  CHECK(st.code == kInvalidConfig);
  CHECK_THAT(st.message, Catch::Contains("100"));
}

TEST_CASE("bad submits fail the run with a message naming the value", "[api]") {
  Chip chip(small_config(1), 0);
  std::vector<int64_t> buf(8, 0);
  struct Case {
    const char* what;
    int32_t code;
    const char* needle;
    std::function<int64_t(PTO2Runtime*)> submit;
  };
  const std::vector<Case> cases = {
      {"unknown kernel", kUnknownKernel, "kernel id 99",
       [&](PTO2Runtime* rt) {
         Tensor t = vec(buf);
         PTOParam p[] = {make_output_param(t), make_scalar_param(0)};
         return pto2_rt_submit_task(rt, 99, PTO2_WORKER_VECTOR, p, 2);
       }},
      {"kernel on the wrong core type", kUnknownKernel, "CUBE",
       [&](PTO2Runtime* rt) {
         Tensor t = vec(buf);
         PTOParam p[] = {make_output_param(t), make_scalar_param(0)};
         return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_CUBE, p, 2);
       }},
      {"bad worker type", kInvalidArgument, "worker_type 7",
       [&](PTO2Runtime* rt) { return pto2_rt_submit_task(rt, kFill, 7, nullptr, 0); }},
      // The host-thread platform gives kernels no block index.
      {"a block task where kernels cannot see their block", kInvalidArgument,
       "this platform gives kernels no block index",
       [&](PTO2Runtime* rt) {
         Tensor t = vec(buf);
         PTOParam p[] = {make_output_param(t), make_scalar_param(0)};
         return pto2_rt_submit_block_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2, 4);
       }},
      {"a cluster on a platform without clusters", kInvalidArgument, "this platform has no clusters",
       [&](PTO2Runtime* rt) { return int64_t(pto2_rt_allocate_cluster(rt)); }},
      {"too many params", kInvalidArgument, "num_params 17",
       [&](PTO2Runtime* rt) {
         PTOParam p[17];
         for (auto& x : p) x = make_scalar_param(0);
         return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 17);
       }},
      {"view out of bounds", kInvalidArgument, "exceeds raw_shape[0] = 8",
       [&](PTO2Runtime* rt) {
         Tensor t = vec(buf);
         const uint32_t off[1] = {6}, sh[1] = {4};
         Tensor v = tensor_view(t, off, sh);
         PTOParam p[] = {make_output_param(v), make_scalar_param(0)};
         return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
       }},
      {"input without storage", kInvalidArgument, "no storage",
       [&](PTO2Runtime* rt) {
         const uint32_t shape[1] = {8};
         Tensor t = make_tensor(shape, 1, PTO2_INT64);
         PTOParam p[] = {make_input_param(t), make_input_param(t), make_output_param(t)};
         return pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, p, 3);
       }},
      {"null tensor", kInvalidArgument, "null",
       [&](PTO2Runtime* rt) {
         PTOParam p[] = {{PTO_PARAM_INPUT, nullptr, 0}};
         return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 1);
       }},
      {"unknown dtype", kInvalidArgument, "dtype 99",
       [&](PTO2Runtime* rt) {
         Tensor t = vec(buf);
         t.dtype = 99;
         PTOParam p[] = {make_output_param(t), make_scalar_param(0)};
         return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
       }},
      {"raw_shape whose byte size overflows", kInvalidArgument, "overflows",
       [&](PTO2Runtime* rt) {
         const uint32_t huge[2] = {0x80000000u, 0x80000000u};
         Tensor t = make_tensor(huge, 2, PTO2_FLOAT32);
         PTOParam p[] = {make_output_param(t), make_scalar_param(0)};
         return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
       }},
      {"runtime-allocated output larger than the heap", kHeapRequestTooLarge, "PTO2_RING_HEAP >=",
       [&](PTO2Runtime* rt) {
         const uint32_t big[1] = {1u << 20};  // 8 MiB of int64, heap is 1 MiB
         Tensor t = make_tensor(big, 1, PTO2_INT64);
         PTOParam p[] = {make_output_param(t), make_scalar_param(0)};
         return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
       }},
      // Before: taken, and the kernel wrote through the pipe's pseudo-address (a segfault).
      {"a pipe tensor as data", kInvalidArgument, "is a pipe tensor",
       [&](PTO2Runtime* rt) {
         Tensor t = make_pipe_tensor(0, 1);
         PTOParam p[] = {make_output_param(t), make_scalar_param(0)};
         return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
       }},
      {"dependency on a task not yet submitted", kInvalidArgument, "dependency 4000",
       [&](PTO2Runtime* rt) {
         const int64_t dep = 4000;
         PTOParam p[] = {make_scalar_param(0)};
         return pto2_rt_submit_task_after(rt, kRecord, PTO2_WORKER_VECTOR, p, 1, &dep, 1);
       }},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      int64_t first = 0, second = 0;
      RunResult r = run_one(*chip.runtime, [&](PTO2Runtime* rt) {
        first = c.submit(rt);
        PTOParam p[] = {make_scalar_param(0)};
        second = pto2_rt_submit_task(rt, kRecord, PTO2_WORKER_VECTOR, p, 1);
        CHECK(pto2_rt_error(rt) == c.code);
      });
      CHECK(first == -c.code);
      CHECK(second == -c.code);
      CHECK(r.status.code == c.code);
      CHECK_THAT(r.status.message, Catch::Contains(c.needle));
      // The runtime keeps working.
      CHECK(run_one(*chip.runtime, [](PTO2Runtime*) {}).ok());
    }
  }
}

TEST_CASE("pto2_rt_read_tensor of a tensor with a bad ndim or dtype names it, reading nothing past the tensor",
          "[api]") {
  // Before: its element count was taken from shapes[] before any check (ndim 9 read past the array).
  Chip chip(small_config(1), 0);
  std::vector<int64_t> buf(8, 0), out(8, 0);
  for (int32_t ndim : {0, 9}) {
    INFO("ndim " << ndim);
    RunResult r = run_one(*chip.runtime, [&](PTO2Runtime* rt) {
      Tensor t = vec(buf);
      t.ndim = ndim;
      CHECK(pto2_rt_read_tensor(rt, &t, out.data(), out.size() * 8) == kInvalidArgument);
    });
    CHECK(r.status.code == kInvalidArgument);
    CHECK_THAT(r.status.message, Catch::Contains("pto2_rt_read_tensor: ndim " + std::to_string(ndim)));
  }
  RunResult r = run_one(*chip.runtime, [&](PTO2Runtime* rt) {
    Tensor t = vec(buf);
    t.dtype = 99;
    CHECK(pto2_rt_read_tensor(rt, &t, out.data(), out.size() * 8) == kInvalidArgument);
  });
  CHECK_THAT(r.status.message, Catch::Contains("dtype 99"));
  CHECK(run_one(*chip.runtime, [](PTO2Runtime*) {}).ok());
}

TEST_CASE("a runtime-allocated tensor used after its scope ended is an error, not a stale read", "[api][scope]") {
  Chip chip(small_config(2), 0);
  std::vector<int64_t> out(8, 0);
  RunResult r = run_one(*chip.runtime, [&](PTO2Runtime* rt) {
    const uint32_t shape[1] = {8};
    Tensor tmp = make_tensor(shape, 1, PTO2_INT64);
    PTO2_SCOPE(rt) {
      PTOParam p[] = {make_output_param(tmp), make_scalar_param(5)};
      REQUIRE(pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2) >= 0);
    }
    Tensor o = vec(out);
    PTOParam p[] = {make_input_param(tmp), make_output_param(o), make_scalar_param(0)};
    CHECK(pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, p, 3) == -kTensorOutOfScope);
    int64_t v[8];
    CHECK(pto2_rt_read_tensor(rt, &tmp, v, sizeof(v)) == kTensorOutOfScope);
  });
  CHECK(r.status.code == kTensorOutOfScope);
  CHECK_THAT(r.status.message, Catch::Contains("scope that has ended"));
}

TEST_CASE("submit after orchestration_done, unbalanced scope_end, non-zero return", "[api]") {
  Chip chip(small_config(1), 0);
  RunResult r = run_one(*chip.runtime, [](PTO2Runtime* rt) {
    pto2_rt_orchestration_done(rt);
    PTOParam p[] = {make_scalar_param(0)};
    CHECK(pto2_rt_submit_task(rt, kRecord, PTO2_WORKER_VECTOR, p, 1) == -kOrchestrationDone);
  });
  CHECK(r.status.code == kOrchestrationDone);

  r = run_one(*chip.runtime, [](PTO2Runtime* rt) { pto2_rt_scope_end(rt); });
  CHECK(r.status.code == kInvalidArgument);
  CHECK_THAT(r.status.message, Catch::Contains("scope_end"));

  r = chip.runtime->run([](PTO2Runtime*) { return 3; });
  CHECK(r.status.code == kOrchestrationFailed);
  CHECK_THAT(r.status.message, Catch::Contains("returned 3"));

  // A scope left open by the orchestration is closed for it; the run succeeds.
  r = run_one(*chip.runtime, [](PTO2Runtime* rt) {
    pto2_rt_scope_begin(rt);
    PTOParam p[] = {make_scalar_param(0)};
    pto2_rt_submit_task(rt, kRecord, PTO2_WORKER_VECTOR, p, 1);
  });
  CHECK(r.ok());
  CHECK(r.stats.tasks_completed == 1);
}

namespace {
int g_entry_calls = 0;
PTO2OrchestrationConfig two_args(uint64_t*, int) { return {2}; }
int entry_fill(PTO2Runtime* rt, uint64_t* args, int) {
  ++g_entry_calls;
  auto* data = reinterpret_cast<int64_t*>(args[0]);
  const uint32_t shape[1] = {8};
  Tensor t = make_tensor_external(data, shape, 1, PTO2_INT64);
  PTOParam p[] = {make_output_param(t), make_scalar_param(args[1])};
  return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2) < 0;
}
}  // namespace

TEST_CASE("exported-symbol form checks the expected argument count", "[api]") {
  Chip chip(small_config(1), 0);
  std::vector<int64_t> buf(8, 0);
  uint64_t args[2] = {reinterpret_cast<uint64_t>(buf.data()), 77};
  RunResult bad = chip.runtime->run(two_args, entry_fill, args, 1);
  CHECK(bad.status.code == kInvalidArgument);
  CHECK_THAT(bad.status.message, Catch::Contains("expects 2 arguments, got 1"));
  CHECK(g_entry_calls == 0);
  RunResult ok = chip.runtime->run(two_args, entry_fill, args, 2);
  REQUIRE(ok.ok());
  CHECK(buf[7] == 77);
}

TEST_CASE("a message longer than the bound is cut in the middle, keeping head and tail", "[errors]") {
  CHECK(clip_message("short") == "short");
  const std::string head = "task 3 failed: ", tail = " Solution: PTO2_RING_TASK_WINDOW >= 128";
  const std::string long_text = head + std::string(20000, 'x') + tail;
  const std::string c = clip_message(long_text);
  CHECK(c.size() <= kMaxMessageBytes);
  CHECK(c.rfind(head, 0) == 0);
  CHECK(c.size() >= tail.size());
  CHECK(c.substr(c.size() - tail.size()) == tail);
  CHECK_THAT(c, Catch::Contains("bytes cut"));
  // Exactly at the bound: whole.
  const std::string exact(kMaxMessageBytes, 'y');
  CHECK(clip_message(exact) == exact);
  // UTF-8 sequences are never split.
  std::string utf;
  for (int i = 0; i < 5000; ++i) utf += "\xC3\xA9";  // é
  const std::string cu = clip_message(utf, 1000);
  CHECK(cu.size() <= 1000);
  const size_t marker = cu.find(" [...");
  REQUIRE(marker != std::string::npos);
  CHECK(marker % 2 == 0);  // the head ends on a character boundary
}
