// Back-pressure: rings and pools far smaller than the work, so slots, heap,
// dep-list entries and TensorMap entries are recycled many times while the
// results stay exact.
#include <catch2/catch.hpp>

#include <sstream>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "log.h"
#include "test_support.h"

using namespace pto2;
using namespace pto2::test;

namespace {

Tensor row_of(std::vector<int64_t>& buf, uint32_t nrows, uint32_t ncols, uint32_t r) {
  const uint32_t shape[2] = {nrows, ncols};
  Tensor t = make_tensor_external(buf.data(), shape, 2, PTO2_INT64);
  const uint32_t off[2] = {r, 0}, sh[2] = {1, ncols};
  return tensor_view(t, off, sh);
}

// The paged-attention example's shape: chunks of 13 tasks per scope — a hub that initialises a
// runtime-allocated accumulator, 11 INOUT updates, and a store to the output.
// Returns the id of the last task submitted.
int64_t paged_attention_like(PTO2Runtime* rt, std::vector<int64_t>& out, std::vector<int64_t>& in, uint32_t chunks) {
  const uint32_t acc_shape[2] = {1, 8};
  int64_t last = -1;
  for (uint32_t c = 0; c < chunks; ++c) {
    PTO2_SCOPE(rt) {
      Tensor acc = make_tensor(acc_shape, 2, PTO2_INT64);
      PTOParam hub[] = {make_output_param(acc), make_scalar_param(c)};
      pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, hub, 2);
      for (uint32_t b = 0; b < 11; ++b) {
        Tensor x = row_of(in, 11, 8, b);
        PTOParam up[] = {make_inout_param(acc), make_input_param(x), make_scalar_param(b)};
        pto2_rt_submit_task(rt, b % 2 ? kMixCube : kMix, b % 2 ? PTO2_WORKER_CUBE : PTO2_WORKER_VECTOR, up, 3);
      }
      Tensor o = row_of(out, chunks, 8, c);
      PTOParam st[] = {make_input_param(acc), make_output_param(o), make_scalar_param(0)};
      last = pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, st, 3);
    }
  }
  return last;
}

int64_t chunk_golden(uint32_t c, const std::vector<int64_t>& in, int k) {
  int64_t v = c;
  for (int b = 0; b < 11; ++b) v = mix_step(v, in[b * 8 + k], b);
  return v;
}

}  // namespace

TEST_CASE("seed back-pressure case: task window 16, 208 tasks, small heap", "[backpressure]") {
  const int sched = GENERATE(1, 2, 4);
  const int exec = GENERATE(0, 2);
  RuntimeConfig cfg = small_config(sched);
  cfg.task_window = 16;  // PTO2_RING_TASK_WINDOW=16
  cfg.heap_size = 4096;  // 4 accumulators per lap: the heap wraps every 4 chunks
  Chip chip(cfg, exec);
  REQUIRE(chip.runtime);
  const uint32_t chunks = 16;
  std::vector<int64_t> out(chunks * 8, -1), in(11 * 8);
  for (size_t i = 0; i < in.size(); ++i) in[i] = int64_t(i * 7 % 11);
  int64_t last_id = -1;
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    last_id = paged_attention_like(rt, out, in, chunks);
    return 0;
  });
  REQUIRE(r.ok());
  CHECK(r.stats.tasks_submitted == 208);
  CHECK(r.stats.tasks_completed == 208);
  // Every chunk ran in ring 1 (scope depth 1): ids 0..207 through 16 slots,
  // so each slot was reused 13 times. Whether the orchestrator had to wait
  // depends on timing (r.stats.blocked_waits).
  CHECK(last_id == int64_t((207 << 2) | 1));
  for (uint32_t c = 0; c < chunks; ++c)
    for (int k = 0; k < 8; ++k) REQUIRE(out[c * 8 + k] == chunk_golden(c, in, k));
}

TEST_CASE("heap is not reclaimed while a reader of an INOUT chain still runs", "[backpressure][lifetime]") {
  // Creator A allocates buf; B updates it (INOUT); C reads it slowly. The
  // TensorMap answers C with B, the newest writer, yet C must keep A — the
  // owner of buf's heap space — alive, or the next scope's allocation would
  // overwrite buf under C. A heap of two slots makes reuse immediate.
  const int exec = GENERATE(1, 3);
  RuntimeConfig cfg = small_config(2);
  cfg.heap_size = 2048;
  Chip chip(cfg, exec);
  const uint32_t rounds = 24;
  std::vector<int64_t> out(rounds * 8, -1), one(8, 1);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    const uint32_t shape[2] = {1, 8};
    for (uint32_t i = 0; i < rounds; ++i) {
      PTO2_SCOPE(rt) {
        Tensor buf = make_tensor(shape, 2, PTO2_INT64);
        PTOParam a[] = {make_output_param(buf), make_scalar_param(1000 + i)};
        pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, a, 2);
        Tensor u = row_of(one, 1, 8, 0);
        PTOParam b[] = {make_inout_param(buf), make_input_param(u), make_scalar_param(0)};
        pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, b, 3);
        Tensor o = row_of(out, rounds, 8, i);
        PTOParam c[] = {make_input_param(buf), make_output_param(o), make_scalar_param(2000)};
        pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, c, 3);
      }
    }
    return 0;
  });
  REQUIRE(r.ok());
  for (uint32_t i = 0; i < rounds; ++i)
    for (int k = 0; k < 8; ++k) REQUIRE(out[i * 8 + k] == int64_t(1000 + i) * 31 + 1);
}

TEST_CASE("small dep-list and TensorMap pools recycle under back-pressure", "[backpressure]") {
  const int sched = GENERATE(1, 2, 4);
  RuntimeConfig cfg = small_config(sched);
  cfg.task_window = 64;
  cfg.dep_pool_size = 16;
  cfg.tensormap_pool_size = 16;
  cfg.tensormap_buckets = 4;
  Chip chip(cfg, 1);
  std::vector<int64_t> acc(8, 0), one(8, 1);
  const int n = 300;
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    for (int i = 0; i < n; i += 3) {
      PTO2_SCOPE(rt) {
        for (int j = 0; j < 3; ++j) {
          Tensor v = row_of(acc, 1, 8, 0), u = row_of(one, 1, 8, 0);
          PTOParam p[] = {make_inout_param(v), make_input_param(u), make_scalar_param(i + j)};
          pto2_rt_submit_task(rt, kMix, PTO2_WORKER_VECTOR, p, 3);
        }
      }
    }
    return 0;
  });
  REQUIRE(r.ok());
  int64_t golden = 0;
  for (int i = 0; i < n; ++i) golden = mix_step(golden, 1, i);
  CHECK(acc[0] == golden);
}

TEST_CASE("a long wait on a full ring logs BLOCKED warnings and still completes", "[backpressure]") {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto logger = component_logger("orchestrator");
  logger->sinks().push_back(sink);
  RuntimeConfig cfg = small_config(1);
  cfg.task_window = 4;
  cfg.blocked_warn_ms = 5;
  Chip chip(cfg, 1);
  std::vector<int64_t> in(8, 3), out(8 * 8, 0);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    for (uint32_t i = 0; i < 8; ++i) {
      PTO2_SCOPE(rt) {
        Tensor a = row_of(in, 1, 8, 0), o = row_of(out, 8, 8, i);
        PTOParam p[] = {make_input_param(a), make_output_param(o), make_scalar_param(30000)};
        pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, p, 3);
      }
    }
    return 0;
  });
  logger->sinks().pop_back();
  REQUIRE(r.ok());
  CHECK(out[7 * 8] == 3);
  CHECK_THAT(captured.str(), Catch::Contains("BLOCKED"));
}
