// Captured regions (docs/runtime.md §16): a PTO2_CAPTURE region recorded on
// its first execution and replayed later with its bindings rebound must
// compute exactly what plain submission computes; what cannot be replayed is
// refused by name; a recording that no longer fits is recorded again.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "pto2/runtime.h"
#include "test_support.h"

using namespace pto2;
using namespace pto2::test;

namespace {

constexpr uint32_t kRows = 8, kCols = 16;

// Host buffers of one run: X [kRows, kCols] and Y [kCols] int64, with
// padding in front so every run's buffers sit at other addresses.
struct Buffers {
  explicit Buffers(size_t pad) : storage(pad + kRows * kCols + kCols + 64) {
    x = storage.data() + pad;
    y = x + kRows * kCols + 32;
    for (uint32_t i = 0; i < kRows * kCols; ++i) x[i] = i * 3 + 1;
    for (uint32_t i = 0; i < kCols; ++i) y[i] = 1000 + i;
  }
  std::vector<int64_t> storage;
  int64_t* x;
  int64_t* y;
};

// The region: a runtime-allocated tile filled with `fill`, mixed into each
// row of X (order-sensitive kMix, one task per row, all after the fill),
// then Y mixed with the whole of X (after every row), then an inner scope
// with its own intermediate mixed into Y. `rounds` runs the region that
// many times in one orchestration: each round's reads of X and Y must see
// the previous round's writes.
int orchestrate(PTO2Runtime* rt, Buffers& b, int64_t fill, int rounds, uint64_t key = 7) {
  const uint32_t xs[2] = {kRows, kCols}, ys[1] = {kCols}, row[2] = {1, kCols};
  Tensor X = make_tensor_external(b.x, xs, 2, PTO2_INT64);
  Tensor Y = make_tensor_external(b.y, ys, 1, PTO2_INT64);
  Tensor* bindings[] = {&X, &Y};
  for (int r = 0; r < rounds; ++r) {
    PTO2_CAPTURE(rt, key, bindings, 2) {
      Tensor tile = make_tensor(ys, 1, PTO2_INT64);
      PTOParam f[] = {make_output_param(tile), make_scalar_param(static_cast<uint64_t>(fill))};
      pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
      for (uint32_t i = 0; i < kRows; ++i) {
        const uint32_t off[2] = {i, 0};
        Tensor xi = tensor_view(X, off, row);
        PTOParam m[] = {make_inout_param(xi), make_input_param(tile), make_scalar_param(i)};
        pto2_rt_submit_task(rt, i % 2 ? kMixCube : kMix, i % 2 ? PTO2_WORKER_CUBE : PTO2_WORKER_VECTOR, m, 3);
      }
      PTOParam my[] = {make_inout_param(Y), make_input_param(X), make_scalar_param(100)};
      pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, my, 3);
      PTO2_SCOPE(rt) {
        Tensor inner = make_tensor(ys, 1, PTO2_INT64);
        PTOParam fi[] = {make_output_param(inner), make_scalar_param(5)};
        pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, fi, 2);
        PTOParam mi[] = {make_inout_param(Y), make_input_param(inner), make_scalar_param(200)};
        pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, mi, 3);
      }
    }
  }
  return pto2_rt_error(rt);
}

// What the region computes, on the host.
void expected(Buffers& b, int64_t fill, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (uint32_t i = 0; i < kRows; ++i)
      for (uint32_t j = 0; j < kCols; ++j) b.x[i * kCols + j] = mix_step(b.x[i * kCols + j], fill, i);
    for (uint32_t j = 0; j < kCols; ++j) b.y[j] = mix_step(b.y[j], b.x[j % (kRows * kCols)], 100);
    for (uint32_t j = 0; j < kCols; ++j) b.y[j] = mix_step(b.y[j], 5, 200);
  }
}

bool same(const Buffers& a, const Buffers& b) {
  return std::memcmp(a.x, b.x, kRows * kCols * 8) == 0 && std::memcmp(a.y, b.y, kCols * 8) == 0;
}

RuntimeConfig config(CaptureMode mode, int threads) {
  RuntimeConfig c = small_config(threads);
  c.capture_mode = mode;
  return c;
}

}  // namespace

TEST_CASE("a replayed region computes what plain submission computes, its bindings rebound to new buffers",
          "[capture]") {
  for (int threads : {1, 2}) {
    for (int executors : {0, 2}) {
      Chip chip(config(CaptureMode::kReplay, threads), executors);
      REQUIRE(chip.runtime);
      for (int run = 0; run < 4; ++run) {
        INFO("threads " << threads << " executors " << executors << " run " << run);
        Buffers got(static_cast<size_t>(run) * 40), want(0);
        const int rounds = run == 3 ? 3 : 1;  // the last run replays three times in one orchestration
        RunResult res = chip.runtime->run([&](PTO2Runtime* rt) { return orchestrate(rt, got, 9, rounds); });
        REQUIRE(res.ok());
        expected(want, 9, rounds);
        CHECK(same(got, want));
        CHECK(res.stats.regions_recorded == (run == 0 ? 1u : 0u));
        CHECK(res.stats.regions_replayed == (run == 0 ? 0u : uint64_t(rounds)));
        CHECK(res.stats.tasks_replayed == (run == 0 ? 0u : 12u * rounds));
        // A replay adds an entry and an exit task (dependency-only) around its tasks.
        CHECK(res.stats.tasks_completed == res.stats.tasks_submitted);
      }
    }
  }
}

TEST_CASE("a region whose bindings changed shape is recorded again - a different key is another recording",
          "[capture]") {
  Chip chip(config(CaptureMode::kReplay, 2), 0);
  REQUIRE(chip.runtime);
  Buffers a(0);
  REQUIRE(chip.runtime->run([&](PTO2Runtime* rt) { return orchestrate(rt, a, 3, 1); }).ok());

  // The same key over a Y of half the length: the recording does not fit.
  std::vector<int64_t> small(kCols / 2, 4);
  RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
    const uint32_t ys[1] = {kCols / 2};
    Tensor Y = make_tensor_external(small.data(), ys, 1, PTO2_INT64);
    Tensor* one[] = {&Y};
    PTO2_CAPTURE(rt, 7, one, 1) {
      Tensor t = make_tensor(ys, 1, PTO2_INT64);
      PTOParam f[] = {make_output_param(t), make_scalar_param(2)};
      pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
      PTOParam m[] = {make_inout_param(Y), make_input_param(t), make_scalar_param(1)};
      pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, m, 3);
    }
    return pto2_rt_error(rt);
  });
  REQUIRE(res.ok());
  CHECK(res.stats.capture_mismatches == 1);
  CHECK(res.stats.regions_recorded == 1);
  CHECK(res.stats.regions_replayed == 0);
  for (int64_t v : small) CHECK(v == mix_step(4, 2, 1));

  // Key 8 is recorded beside key 7; both replay afterwards.
  Buffers b(16), c(0), want(0);
  res = chip.runtime->run([&](PTO2Runtime* rt) { return orchestrate(rt, b, 3, 1, 8); });
  REQUIRE(res.ok());
  CHECK(res.stats.regions_recorded == 1);
  res = chip.runtime->run([&](PTO2Runtime* rt) { return orchestrate(rt, c, 3, 1, 8); });
  REQUIRE(res.ok());
  CHECK(res.stats.regions_replayed == 1);
  expected(want, 3, 1);
  CHECK(same(c, want));
}

TEST_CASE("verify mode runs the region's code every time and reports where a replay would differ", "[capture]") {
  Chip chip(config(CaptureMode::kVerify, 2), 0);
  REQUIRE(chip.runtime);
  for (int64_t fill : {3, 3, 4}) {  // the fill value is not in the key: a replay would have used 3
    Buffers got(0), want(0);
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) { return orchestrate(rt, got, fill, 1); });
    REQUIRE(res.ok());
    expected(want, fill, 1);
    CHECK(same(got, want));
    CHECK(res.stats.regions_replayed == 0);
    CHECK(res.stats.regions_recorded == 1);
    CHECK(res.stats.capture_mismatches == (fill == 4 ? 1u : 0u));
  }
}

TEST_CASE("capture off runs the region's code as plain submission", "[capture]") {
  Chip chip(config(CaptureMode::kOff, 2), 0);
  REQUIRE(chip.runtime);
  for (int run = 0; run < 2; ++run) {
    Buffers got(0), want(0);
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) { return orchestrate(rt, got, 6, 2); });
    REQUIRE(res.ok());
    expected(want, 6, 2);
    CHECK(same(got, want));
    CHECK(res.stats.regions_recorded + res.stats.regions_replayed == 0);
  }
}

TEST_CASE("what a replay cannot reproduce is refused by name - the runtime stays usable", "[capture]") {
  Chip chip(config(CaptureMode::kReplay, 2), 0);
  REQUIRE(chip.runtime);
  std::vector<int64_t> buf(kCols, 1), other(kCols, 2);
  const uint32_t ys[1] = {kCols};
  auto expect_error = [&](const char* what, const std::function<void(PTO2Runtime*, Tensor&, Tensor&)>& body) {
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor Y = make_tensor_external(buf.data(), ys, 1, PTO2_INT64);
      Tensor Z = make_tensor_external(other.data(), ys, 1, PTO2_INT64);
      body(rt, Y, Z);
      return 0;
    });
    INFO(res.status.message);
    CHECK(res.status.code == kInvalidArgument);
    CHECK_THAT(res.status.message, Catch::Contains(what));
  };
  expect_error("pto2_rt_read_tensor inside a captured region", [&](PTO2Runtime* rt, Tensor& Y, Tensor&) {
    Tensor* b[] = {&Y};
    PTO2_CAPTURE(rt, 1, b, 1) {
      int64_t sink[kCols];
      pto2_rt_read_tensor(rt, &Y, sink, sizeof(sink));
    }
  });
  expect_error("neither one of the region's bindings nor allocated inside it", [&](PTO2Runtime* rt, Tensor& Y,
                                                                                    Tensor& Z) {
    Tensor* b[] = {&Y};
    PTO2_CAPTURE(rt, 2, b, 1) {
      PTOParam m[] = {make_inout_param(Z), make_input_param(Y), make_scalar_param(1)};
      pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, m, 3);
    }
  });
  expect_error("do not nest", [&](PTO2Runtime* rt, Tensor& Y, Tensor&) {
    Tensor* b[] = {&Y};
    PTO2_CAPTURE(rt, 3, b, 1) {
      PTO2_CAPTURE(rt, 4, b, 1) {}
    }
  });
  expect_error("is a task outside the region", [&](PTO2Runtime* rt, Tensor& Y, Tensor&) {
    PTOParam f[] = {make_output_param(Y), make_scalar_param(1)};
    const int64_t before = pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
    Tensor* b[] = {&Y};
    PTO2_CAPTURE(rt, 5, b, 1) {
      PTOParam m[] = {make_inout_param(Y), make_input_param(Y), make_scalar_param(1)};
      pto2_rt_submit_task_after(rt, kMix, PTO2_WORKER_VECTOR, m, 3, &before, 1);
    }
  });
  expect_error("would end the captured region's own scope", [&](PTO2Runtime* rt, Tensor& Y, Tensor&) {
    Tensor* b[] = {&Y};
    PTO2_CAPTURE(rt, 6, b, 1) { pto2_rt_scope_end(rt); }
  });
  expect_error("binding 1 names the same buffer as binding 0", [&](PTO2Runtime* rt, Tensor& Y, Tensor&) {
    Tensor* b[] = {&Y, &Y};
    PTO2_CAPTURE(rt, 7, b, 2) {}
  });
  {
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor Y = make_tensor_external(buf.data(), ys, 1, PTO2_INT64);
      Tensor* b[] = {&Y};
      pto2_rt_orchestration_done(rt);
      PTO2_CAPTURE(rt, 9, b, 1) {}
      return 0;
    });
    CHECK(res.status.code == kOrchestrationDone);
    CHECK_THAT(res.status.message, Catch::Contains("opened after pto2_rt_orchestration_done"));
  }
  expect_error("pto2_rt_orchestration_done inside a captured region", [&](PTO2Runtime* rt, Tensor& Y, Tensor&) {
    Tensor* b[] = {&Y};
    PTO2_CAPTURE(rt, 10, b, 1) { pto2_rt_orchestration_done(rt); }
  });
  expect_error("pto2_rt_free_cluster inside a captured region", [&](PTO2Runtime* rt, Tensor& Y, Tensor&) {
    Tensor* b[] = {&Y};
    PTO2_CAPTURE(rt, 11, b, 1) { pto2_rt_free_cluster(rt, 0); }
  });
  std::vector<int64_t> room(2 * kCols, 0);  // the refused task still runs: it writes all of this
  expect_error("more than the binding's", [&](PTO2Runtime* rt, Tensor&, Tensor&) {
    Tensor R = make_tensor_external(room.data(), ys, 1, PTO2_INT64);
    Tensor* b[] = {&R};
    PTO2_CAPTURE(rt, 12, b, 1) {
      const uint32_t wide[1] = {2 * kCols};  // the same base, a buffer twice the binding's
      Tensor W = make_tensor_external(room.data(), wide, 1, PTO2_INT64);
      PTOParam f[] = {make_output_param(W), make_scalar_param(1)};
      pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
    }
  });
  expect_error("binding 0 has no storage", [&](PTO2Runtime* rt, Tensor&, Tensor&) {
    Tensor T = make_tensor(ys, 1, PTO2_INT64);
    Tensor* b[] = {&T};
    PTO2_CAPTURE(rt, 8, b, 1) {}
  });
  // None of the refused regions was kept, and the runtime still runs regions.
  Buffers got(0), want(0);
  for (int run = 0; run < 2; ++run) {
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) { return orchestrate(rt, got, 2, 1, 1); });
    REQUIRE(res.ok());
    CHECK(res.stats.regions_recorded == (run == 0 ? 1u : 0u));
  }
  expected(want, 2, 2);
  CHECK(same(got, want));
}

TEST_CASE("a region left early is not kept - the next execution records it whole", "[capture]") {
  Chip chip(config(CaptureMode::kReplay, 2), 0);
  REQUIRE(chip.runtime);
  std::vector<int64_t> buf(kCols, 1);
  const uint32_t ys[1] = {kCols};
  for (int run = 0; run < 3; ++run) {
    const bool leave = run == 0;
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor Y = make_tensor_external(buf.data(), ys, 1, PTO2_INT64);
      Tensor* b[] = {&Y};
      for (int once = 0; once < 1; ++once) {
        PTO2_CAPTURE(rt, 1, b, 1) {
          PTOParam f[] = {make_output_param(Y), make_scalar_param(7)};
          pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
          if (leave) break;
          PTOParam m[] = {make_inout_param(Y), make_input_param(Y), make_scalar_param(1)};
          pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, m, 3);
        }
      }
      return pto2_rt_error(rt);
    });
    REQUIRE(res.ok());
    CHECK(res.stats.regions_recorded == (run == 1 ? 1u : 0u));
    CHECK(res.stats.regions_replayed == (run == 2 ? 1u : 0u));
    for (int64_t v : buf) CHECK(v == (leave ? 7 : mix_step(7, 7, 1)));
  }
}

namespace {

// Three nested scopes (depth 3, ring 3): `hold(rt, held)` submits what an
// open scope holds there, then the region (depth 4, also ring 3): a
// runtime-allocated tile filled, mixed 22 times, then mixed into Y — its
// first task has 23 consumers.
using Hold = std::function<void(PTO2Runtime*, int)>;
OrchestrationFn deep_region(std::vector<int64_t>& buf, int held, const Hold& hold) {
  return [&buf, held, hold](PTO2Runtime* rt) {
    const uint32_t ys[1] = {kCols};
    Tensor Y = make_tensor_external(buf.data(), ys, 1, PTO2_INT64);
    PTO2_SCOPE(rt) {
      PTO2_SCOPE(rt) {
        PTO2_SCOPE(rt) {
          hold(rt, held);
          Tensor* b[] = {&Y};
          PTO2_CAPTURE(rt, 1, b, 1) {
            Tensor t = make_tensor(ys, 1, PTO2_INT64);
            PTOParam f[] = {make_output_param(t), make_scalar_param(1)};
            pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
            for (int i = 0; i < 22; ++i) {
              PTOParam m[] = {make_inout_param(t), make_input_param(Y), make_scalar_param(static_cast<uint64_t>(i))};
              pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, m, 3);
            }
            PTOParam m[] = {make_inout_param(Y), make_input_param(t), make_scalar_param(99)};
            pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, m, 3);
          }
        }
      }
    }
    return pto2_rt_error(rt);
  };
}

// Records the region, replays it with `held` tasks in its ring (it fails
// with `code`, or at least not STALLED when code is kOk), then replays it
// again with nothing held.
void replay_fails_then_works(RuntimeConfig c, int held, int32_t code, const Hold& hold) {
  c.task_window = 64;
  c.stall_timeout_ms = 20000;
  Chip chip(c, 0);
  REQUIRE(chip.runtime);
  std::vector<int64_t> buf(kCols, 1);
  REQUIRE(chip.runtime->run(deep_region(buf, 0, hold)).ok());  // recorded
  RunResult res = chip.runtime->run(deep_region(buf, held, hold));
  INFO(res.status.message);
  CHECK(res.status.code != kOk);
  CHECK(res.status.code != kStalled);  // diagnosed, not timed out
  if (code != kOk) CHECK(res.status.code == code);
  res = chip.runtime->run(deep_region(buf, 0, hold));
  CHECK(res.ok());
  CHECK(res.stats.regions_replayed == 1);
}

}  // namespace

TEST_CASE("a replay that cannot finish fails the run with the deadlock's diagnosis - the next run works",
          "[capture]") {
  // 50 held tasks + the entry + the region's tasks overflow the 64-slot window.
  replay_fails_then_works(config(CaptureMode::kReplay, 2), 50, kOk, [](PTO2Runtime* rt, int held) {
    for (int i = 0; i < held; ++i) {
      PTOParam p[] = {make_scalar_param(static_cast<uint64_t>(i))};
      pto2_rt_submit_task(rt, kRecord, PTO2_WORKER_VECTOR, p, 1);
    }
  });
}

TEST_CASE("a replayed task whose output allocation deadlocks fails the run with the diagnosis - the next run works",
          "[capture]") {
  // 60 held tasks hold 1 KiB each of a 60 KiB heap: the region's first task,
  // with 23 consumers, waits for 1 KiB more.
  RuntimeConfig c = config(CaptureMode::kReplay, 2);
  c.heap_size = 60 * 1024;
  replay_fails_then_works(c, 60, kHeapRingDeadlock, [](PTO2Runtime* rt, int held) {
    const uint32_t kib[1] = {128};
    for (int i = 0; i < held; ++i) {
      Tensor h = make_tensor(kib, 1, PTO2_INT64);
      PTOParam p[] = {make_output_param(h), make_scalar_param(static_cast<uint64_t>(i))};
      pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
    }
  });
}

TEST_CASE("an edge from an inner scope's task that finished before the region read its output is recorded - the "
          "replay waits for it",
          "[capture]") {
  Chip chip(config(CaptureMode::kReplay, 2), 2);
  REQUIRE(chip.runtime);
  const uint32_t ys[1] = {kCols};
  for (int run = 0; run < 3; ++run) {
    INFO("run " << run);
    std::vector<int64_t> src(kCols, 7), x(kCols, 1), w(kCols, 3);
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor S = make_tensor_external(src.data(), ys, 1, PTO2_INT64);
      Tensor X = make_tensor_external(x.data(), ys, 1, PTO2_INT64);
      Tensor W = make_tensor_external(w.data(), ys, 1, PTO2_INT64);
      Tensor* b[] = {&S, &X, &W};
      PTO2_CAPTURE(rt, 1, b, 3) {
        PTO2_SCOPE(rt) {
          // X = S after 20 ms: slow, so that a reader not ordered after it sees the old X.
          PTOParam c[] = {make_input_param(S), make_output_param(X), make_scalar_param(20000)};
          pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, c, 3);
        }
        // While recording, the copy finishes (and, without the recording's
        // hold, retires) before the reader is submitted.
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
        PTOParam m[] = {make_inout_param(W), make_input_param(X), make_scalar_param(1)};
        pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, m, 3);
      }
      return pto2_rt_error(rt);
    });
    REQUIRE(res.ok());
    CHECK(res.stats.regions_replayed == (run == 0 ? 0u : 1u));
    for (int64_t v : w) CHECK(v == mix_step(3, 7, 1));
  }
}

// Submits enough small tasks that the TensorMap looks at the rings again
// (it does every few submits) and drops the entries of retired tasks.
void submit_fillers(PTO2Runtime* rt, int n = 16) {
  const uint32_t one[1] = {1};
  for (int i = 0; i < n; ++i) {
    Tensor t = make_tensor(one, 1, PTO2_INT64);
    PTOParam f[] = {make_output_param(t), make_scalar_param(0)};
    pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
  }
}

TEST_CASE(
    "an edge through a buffer the region allocated, from a task that retired before its reader was submitted, "
    "is recorded - the replay waits for it",
    "[capture]") {
  // Before: the recording took the edges of a region-allocated buffer from the TensorMap alone, which had
  // forgotten the retired writer: on a replay the reader ran beside it and read the buffer's old contents.
  Chip chip(config(CaptureMode::kReplay, 2), 2);
  REQUIRE(chip.runtime);
  const uint32_t ys[1] = {kCols};
  for (int run = 0; run < 3; ++run) {
    INFO("run " << run);
    std::vector<int64_t> src(kCols, 7), w(kCols, 3);
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor S = make_tensor_external(src.data(), ys, 1, PTO2_INT64);
      Tensor W = make_tensor_external(w.data(), ys, 1, PTO2_INT64);
      Tensor* b[] = {&S, &W};
      PTO2_CAPTURE(rt, 1, b, 2) {
        Tensor acc = make_tensor(ys, 1, PTO2_INT64);
        PTOParam f[] = {make_output_param(acc), make_scalar_param(1)};
        pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
        PTO2_SCOPE(rt) {
          // acc = S after 20 ms: slow, so that a reader not ordered after it sees acc = 1.
          PTOParam c[] = {make_input_param(S), make_output_param(acc), make_scalar_param(20000)};
          pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, c, 3);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(60));  // the copy finishes and retires
        submit_fillers(rt);
        PTOParam m[] = {make_inout_param(W), make_input_param(acc), make_scalar_param(1)};
        pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, m, 3);
      }
      return pto2_rt_error(rt);
    });
    INFO(res.status.message);
    REQUIRE(res.ok());
    CHECK(res.stats.regions_replayed == (run == 0 ? 0u : 1u));
    for (int64_t v : w) CHECK(v == mix_step(3, 7, 1));
  }
}

TEST_CASE(
    "an edge between two overlapping bindings, from a task that retired before its reader was submitted, is "
    "recorded - the replay waits for it",
    "[capture]") {
  // Before: the recording ordered accesses of one binding among themselves only; the edge from a writer of A to
  // a reader of B over the same bytes came from the TensorMap, which had forgotten the retired writer.
  Chip chip(config(CaptureMode::kReplay, 2), 2);
  REQUIRE(chip.runtime);
  const uint32_t ys[1] = {kCols}, two[1] = {2 * kCols}, at[1] = {kCols}, zero[1] = {0};
  // The writer's span in A: its upper half (B exactly), or all of A (it starts below B's base: an unsigned
  // shift wrapped it past every span, and the edge was lost again). Each its own key.
  for (int run = 0; run < 6; ++run) {
    const bool whole = run >= 3;
    INFO("run " << run << (whole ? ", the writer writes all of A" : ", the writer writes A's upper half"));
    std::vector<int64_t> src(kCols, 7), src2(2 * kCols, 7), w(kCols, 3), mem(2 * kCols, 1);
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor S = make_tensor_external(src.data(), ys, 1, PTO2_INT64);
      Tensor S2 = make_tensor_external(src2.data(), two, 1, PTO2_INT64);
      Tensor W = make_tensor_external(w.data(), ys, 1, PTO2_INT64);
      Tensor A = make_tensor_external(mem.data(), two, 1, PTO2_INT64);         // mem[0, 32)
      Tensor B = make_tensor_external(mem.data() + kCols, ys, 1, PTO2_INT64);  // mem[16, 32)
      Tensor* b[] = {&S, &S2, &W, &A, &B};
      PTO2_CAPTURE(rt, whole ? 2 : 1, b, 5) {
        PTO2_SCOPE(rt) {
          // A[16, 32) = S (or all of A = S2) after 20 ms.
          Tensor upper = whole ? A : tensor_view(A, at, ys);
          PTOParam c[] = {make_input_param(whole ? S2 : S), make_output_param(upper), make_scalar_param(20000)};
          pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, c, 3);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
        submit_fillers(rt);
        Tensor all_of_b = tensor_view(B, zero, ys);
        PTOParam m[] = {make_inout_param(W), make_input_param(all_of_b), make_scalar_param(1)};
        pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, m, 3);
      }
      return pto2_rt_error(rt);
    });
    INFO(res.status.message);
    REQUIRE(res.ok());
    CHECK(res.stats.regions_replayed == (run % 3 == 0 ? 0u : 1u));
    for (int64_t v : w) CHECK(v == mix_step(3, 7, 1));
  }
}

TEST_CASE("a region whose replay could never fit its rings runs as plain submission - not a stall", "[capture]") {
  // 100 inner scopes of one task each, and a reader of what they all wrote: recorded (and run plainly) each
  // writer retires with its scope, but a replayed task holds its slot for the reader the region submits later, so
  // a replay would fill the 64-slot window at the 63rd writer and wait for good. Before: every run after the
  // first stalled (20 s here, 60 s by default; forever with stall_timeout_ms 0).
  RuntimeConfig c = config(CaptureMode::kReplay, 2);
  c.task_window = 64;
  c.stall_timeout_ms = 3000;
  Chip chip(c, 2);
  REQUIRE(chip.runtime);
  constexpr uint32_t kBlocks = 100;
  const uint32_t all[2] = {kBlocks, kCols}, row[2] = {1, kCols}, ys[1] = {kCols};
  for (int run = 0; run < 3; ++run) {
    INFO("run " << run);
    std::vector<int64_t> out(kBlocks * kCols, 0), w(kCols, 3);
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor O = make_tensor_external(out.data(), all, 2, PTO2_INT64);
      Tensor W = make_tensor_external(w.data(), ys, 1, PTO2_INT64);
      Tensor* b[] = {&O, &W};
      PTO2_CAPTURE(rt, 1, b, 2) {
        for (uint32_t i = 0; i < kBlocks; ++i) {
          PTO2_SCOPE(rt) {
            const uint32_t off[2] = {i, 0};
            Tensor oi = tensor_view(O, off, row);
            PTOParam f[] = {make_output_param(oi), make_scalar_param(i + 1)};
            pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
          }
        }
        PTOParam m[] = {make_inout_param(W), make_input_param(O), make_scalar_param(1)};
        pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, m, 3);
      }
      return pto2_rt_error(rt);
    });
    INFO(res.status.message);
    REQUIRE(res.ok());
    CHECK(res.stats.regions_replayed == 0);
    CHECK(res.stats.capture_unreplayable == (run == 0 ? 0u : 1u));
    for (uint32_t i = 0; i < kBlocks * kCols; ++i) CHECK(out[i] == i / kCols + 1);
    for (uint32_t j = 0; j < kCols; ++j) CHECK(w[j] == mix_step(3, 1, 1));
  }
}

TEST_CASE("a region recorded inside a scope replays at the top level, and the other way round", "[capture]") {
  Chip chip(config(CaptureMode::kReplay, 2), 0);
  REQUIRE(chip.runtime);
  for (int run = 0; run < 4; ++run) {
    const bool nested = run % 2 == 0;
    Buffers got(static_cast<size_t>(run) * 8), want(0);
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
      if (!nested) return orchestrate(rt, got, 4, 1);
      int rc = 0;
      PTO2_SCOPE(rt) { rc = orchestrate(rt, got, 4, 1); }
      return rc;
    });
    INFO("run " << run << ": " << res.status.message);
    REQUIRE(res.ok());
    CHECK(res.stats.regions_replayed == (run == 0 ? 0u : 1u));
    expected(want, 4, 1);
    CHECK(same(got, want));
  }
}

TEST_CASE("bindings that overlap at another distance than recorded are recorded again", "[capture]") {
  Chip chip(config(CaptureMode::kReplay, 2), 0);
  REQUIRE(chip.runtime);
  std::vector<int64_t> mem(2048, 0);
  const uint32_t shape[1] = {1024}, half[1] = {512}, quarter[1] = {256};
  // Task 1 writes A[0..512), task 2 reads B[0..256): apart by 768 they do not
  // meet (no edge is recorded); apart by 256 they do.
  for (size_t apart : {768, 768, 256}) {
    INFO("apart " << apart);
    RunResult res = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor A = make_tensor_external(mem.data(), shape, 1, PTO2_INT64);
      Tensor B = make_tensor_external(mem.data() + apart, shape, 1, PTO2_INT64);
      Tensor* b[] = {&A, &B};
      PTO2_CAPTURE(rt, 1, b, 2) {
        const uint32_t zero[1] = {0};
        Tensor a = tensor_view(A, zero, half), bq = tensor_view(B, zero, quarter);
        PTOParam f[] = {make_output_param(a), make_scalar_param(5)};
        pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, f, 2);
        Tensor t = make_tensor(quarter, 1, PTO2_INT64);
        PTOParam c[] = {make_input_param(bq), make_output_param(t), make_scalar_param(0)};
        pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, c, 3);
      }
      return pto2_rt_error(rt);
    });
    REQUIRE(res.ok());
    if (apart == 256) {
      CHECK(res.stats.capture_mismatches == 1);
      CHECK(res.stats.regions_recorded == 1);
    }
  }
}
