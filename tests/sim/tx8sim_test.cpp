// tx8sim: the mesh and its cores, the platform contract under the PTO2
// runtime, the tile context and its movers (SPM capacity, DMA and NoC bounds,
// each error naming the task and the sizes), the cost model against
// hand-computed simulated times, and the sharding search against
// hand-computed cases.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <vector>

#include "pto2/runtime.h"
#include "pto2/sharding.h"
#include "pto2/sim/tx8sim.h"
#include "tx8_cost.h"
#include "vector_on_chip.h"

using namespace pto2;
using namespace pto2::sim;

namespace {

constexpr uint64_t kMiB = 1ull << 20;
PTO2TileContext g_seen_tile{};  // what the last k_where kernel saw

// args: out (int32 [1]). Records its tile context.
void k_where(int64_t* args) {
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 1);
  g_seen_tile = *pto2_tile(ctx);
  *static_cast<int32_t*>(pto2_tensor_data(pto2_arg_tensor(args, 0))) = ctx->tile->tile;
}

// args: in (bytes), out (bytes), scalar mode. Moves data as the mode says.
enum Mode : uint64_t {
  kLoadWhole = 0,       // load all of in into SPM, store it to out
  kSpmTooBig = 1,       // ask the SPM for more than the engine's share
  kLoadOutside = 2,     // load from past the end of in
  kStoreIntoInput = 3,  // store into in (an INPUT)
  kBadStride = 4,       // strides shorter than a row
  kNocRoundTrip = 5,    // put in's first 64 KiB into tile 15's SPM, get it back, store to out
  kNocBadTile = 6,      // a tile that is not on the chip
  kSpmDstOutside = 7,   // load past the end of the engine's SPM share
  kLoadOnly = 8,        // load all of in into SPM, nothing else
  kStorePastView = 9,   // store 64 bytes right after out's view (inside its buffer)
  kNothing = 10,        // move nothing: charged as loading in and storing out
};
void k_mover(int64_t* args) {
  const Tensor* in = pto2_arg_tensor(args, 0);
  const Tensor* out = pto2_arg_tensor(args, 1);
  const auto mode = static_cast<Mode>(args[2]);
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 3);
  const uint64_t bytes = pto2_tensor_buffer_bytes(in);
  auto* src = static_cast<uint8_t*>(pto2_tensor_data(in));
  auto* dst = static_cast<uint8_t*>(pto2_tensor_data(out));
  switch (mode) {
    case kLoadWhole: {
      void* spm = pto2_spm_alloc(ctx, bytes);
      if (spm && pto2_dma_load(ctx, spm, src, bytes, 1, bytes) == 0) pto2_dma_store(ctx, dst, bytes, spm, bytes, 1);
      return;
    }
    case kSpmTooBig: (void)pto2_spm_alloc(ctx, ctx->tile->spm_bytes + 1); return;
    case kLoadOutside: {
      void* spm = pto2_spm_alloc(ctx, 4096);
      (void)pto2_dma_load(ctx, spm, src + bytes - 16, 32, 1, 32);
      return;
    }
    case kStoreIntoInput: {
      void* spm = pto2_spm_alloc(ctx, 64);
      (void)pto2_dma_store(ctx, src, 64, spm, 64, 1);
      return;
    }
    case kBadStride: {
      void* spm = pto2_spm_alloc(ctx, 4096);
      (void)pto2_dma_load(ctx, spm, src, 64, 4, 32);
      return;
    }
    case kNocRoundTrip: {
      const uint64_t n = 64 * 1024;
      auto* a = static_cast<uint8_t*>(pto2_spm_alloc(ctx, n));
      auto* b = static_cast<uint8_t*>(pto2_spm_alloc(ctx, n));
      if (!a || !b || pto2_dma_load(ctx, a, src, n, 1, n) != 0) return;
      const uint64_t far = ctx->tile->spm_bytes + 4096;  // tile 15's CT share: nobody else's here
      if (pto2_noc_put(ctx, 15, far, a, n) != 0 || pto2_noc_get(ctx, 15, far, b, n) != 0) return;
      (void)pto2_dma_store(ctx, dst, n, b, n, 1);
      return;
    }
    case kNocBadTile: {
      void* spm = pto2_spm_alloc(ctx, 64);
      (void)pto2_noc_put(ctx, 16, 0, spm, 64);
      return;
    }
    case kStorePastView: {
      void* spm = pto2_spm_alloc(ctx, 64);
      (void)pto2_dma_store(ctx, dst + pto2_tensor_numel(out), 64, spm, 64, 1);
      return;
    }
    case kNothing: return;
    case kLoadOnly: {
      void* spm = pto2_spm_alloc(ctx, bytes);
      if (spm) (void)pto2_dma_load(ctx, spm, src, bytes, 1, bytes);
      return;
    }
    case kSpmDstOutside: {
      auto* spm = static_cast<uint8_t*>(pto2_spm_alloc(ctx, 64));
      (void)pto2_dma_load(ctx, spm + ctx->tile->spm_bytes - 32, src, 64, 1, 64);
      return;
    }
  }
}

struct Chip {
  explicit Chip(Tx8SimConfig cfg, int scheduler_threads = 1, BlockMode mode = BlockMode::kBatch) {
    Status st;
    chip = Tx8SimPlatform::create(cfg, &st);
    REQUIRE(chip);
    chip->register_kernel(0, WorkerType::kVector, k_mover);
    chip->register_kernel(0, WorkerType::kCube, k_mover);
    chip->register_kernel(1, WorkerType::kVector, k_where);
    RuntimeConfig rc;
    rc.task_window = 256;
    rc.heap_size = 16 << 20;
    rc.scheduler_threads = scheduler_threads;
    rc.stall_timeout_ms = 10000;
    rc.block_mode = mode;
    rt = Runtime::create(rc, *chip, &st);
    REQUIRE(rt);
  }
  void* alloc(uint64_t bytes) {
    void* p = nullptr;
    REQUIRE(chip->memory().alloc(bytes, &p).ok());
    return p;
  }
  // One mover task per (mode, worker type) over in -> out.
  RunResult run_movers(void* in, void* out, uint64_t bytes, std::vector<std::pair<Mode, int32_t>> tasks) {
    return rt->run([&](PTO2Runtime* p) {
      const uint32_t shape[1] = {static_cast<uint32_t>(bytes)};
      Tensor a = make_tensor_external(in, shape, 1, PTO2_UINT8);
      Tensor b = make_tensor_external(out, shape, 1, PTO2_UINT8);
      for (auto [mode, type] : tasks) {
        PTOParam params[] = {make_input_param(a), make_output_param(b), make_scalar_param(mode)};
        pto2_rt_submit_task(p, 0, type, params, 3);
      }
      return 0;
    });
  }
  std::unique_ptr<Tx8SimPlatform> chip;
  std::unique_ptr<Runtime> rt;
};

Tx8SimConfig quiet_config() {
  Tx8SimConfig cfg;
  cfg.executor_threads = 0;
  cfg.compute_scale = 0;  // only data movement costs time: figures are exact
  return cfg;
}

}  // namespace

TEST_CASE("the chip is a mesh of tiles, each an NE and a CT core, and its config is validated", "[tx8sim]") {
  Tx8SimConfig bad;
  bad.mesh_x = 0;
  Status st;
  CHECK(Tx8SimPlatform::create(bad, &st) == nullptr);
  CHECK_THAT(st.message, Catch::Contains("mesh = 0x4"));
  bad = Tx8SimConfig{};
  bad.spm_bytes = 1000;
  CHECK(Tx8SimPlatform::create(bad, &st) == nullptr);
  CHECK_THAT(st.message, Catch::Contains("spm_bytes = 1000"));
  bad = Tx8SimConfig{};
  bad.ddr_gbytes_per_s = 0;
  CHECK(Tx8SimPlatform::create(bad, &st) == nullptr);

  auto chip = Tx8SimPlatform::create(Tx8SimConfig{}, &st);
  REQUIRE(chip);
  REQUIRE(chip->core_count() == 32);
  CHECK(chip->core_type(0) == WorkerType::kCube);
  CHECK(chip->core_type(15) == WorkerType::kCube);
  CHECK(chip->core_type(16) == WorkerType::kVector);
  CHECK(chip->tile_of(16 + 6) == 6);
  CHECK(chip->core_name(6) == "NE (2,1)");
  CHECK(chip->core_name(16 + 6) == "CT (2,1)");
  CHECK(chip->group_name(15) == "tile (3,3)");
  CHECK(chip->hops(0, 15) == 6);
  CHECK(chip->hops(5, 6) == 1);
  CHECK(chip->cluster_count() == 0);  // no function groups, no pipes
  CHECK(chip->passes_block_index());
  CHECK(std::string(chip->platform_name()) == "tx8sim");
  CHECK(chip->shape() == "mesh 4x4");
}

TEST_CASE("the vector example matches its golden on tx8sim, inline and on executors", "[tx8sim][runtime]") {
  const int executors = GENERATE(0, 2);
  const int schedulers = GENERATE(1, 2);
  Tx8SimConfig cfg;
  cfg.executor_threads = executors;
  Status st;
  auto chip = Tx8SimPlatform::create(cfg, &st);
  REQUIRE(chip);
  VectorOnChip vec(*chip, schedulers);
  for (int round = 0; round < 3; ++round) {
    CHECK(vec.run() == VectorOnChip::kN);
    // Kernels that move nothing themselves are charged as loading inputs and
    // storing outputs: 2+1, 1+1, 1+1, 2+1 views of 64 KiB.
    const Tx8RunStats s = chip->run_stats();
    CHECK(s.tasks == 4);
    CHECK(s.ddr_bytes == 10 * VectorOnChip::kN * 4);
    CHECK(s.sim_ns > 0);
  }
  CHECK(chip->executor_threads() == executors);
}

TEST_CASE("a kernel sees its tile: mesh place, engine, its share of the SPM", "[tx8sim]") {
  Chip c(quiet_config());
  int32_t* out = static_cast<int32_t*>(c.alloc(64));
  RunResult r = c.rt->run([&](PTO2Runtime* p) {
    const uint32_t shape[1] = {1};
    Tensor t = make_tensor_external(out, shape, 1, PTO2_INT32);
    PTOParam params[] = {make_output_param(t)};
    pto2_rt_submit_task(p, 1, PTO2_WORKER_VECTOR, params, 1);
    return 0;
  });
  REQUIRE(r.ok());
  const PTO2TileContext& t = g_seen_tile;
  CHECK(t.mesh_x == 4);
  CHECK(t.mesh_y == 4);
  CHECK(t.tile == *out);
  CHECK(t.x == t.tile % 4);
  CHECK(t.y == t.tile / 4);
  CHECK(t.engine == PTO2_WORKER_VECTOR);
  CHECK(t.spm_bytes == c.chip->config().spm_bytes / 2);
  CHECK(t.spm != nullptr);
}

TEST_CASE("the movers copy data and charge hand-computed simulated time", "[tx8sim]") {
  Chip c(quiet_config());
  const uint64_t bytes = kMiB;
  auto* in = static_cast<uint8_t*>(c.alloc(bytes));
  auto* out = static_cast<uint8_t*>(c.alloc(bytes));
  for (uint64_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);

  SECTION("one load and one store of 1 MiB: latency + bytes / 200 GB/s each") {
    RunResult r = c.run_movers(in, out, bytes, {{kLoadWhole, PTO2_WORKER_VECTOR}});
    REQUIRE(r.ok());
    CHECK(std::memcmp(in, out, bytes) == 0);
    // 1 MiB at 200 bytes/ns is 5242.88 ns, after 100 ns of latency: the load
    // ends at 5343; the store starts there and ends 5343 later.
    const Tx8RunStats s = c.chip->run_stats();
    CHECK(s.sim_ns == 5343 + 5343);
    CHECK(s.ddr_bytes == 2 * bytes);
    CHECK(s.dma_transfers == 2);
  }
  SECTION("two tiles loading at once share the chip's DDR bandwidth") {
    RunResult r = c.rt->run([&](PTO2Runtime* p) {
      const uint32_t shape[1] = {static_cast<uint32_t>(bytes)};
      const uint32_t half[1] = {static_cast<uint32_t>(bytes / 2)};
      const uint32_t off0[1] = {0}, off1[1] = {static_cast<uint32_t>(bytes / 2)};
      Tensor a = make_tensor_external(in, shape, 1, PTO2_UINT8);
      Tensor b = make_tensor_external(out, shape, 1, PTO2_UINT8);
      // Two halves of the output: neither task waits for the other.
      Tensor b0 = tensor_view(b, off0, half), b1 = tensor_view(b, off1, half);
      PTOParam p0[] = {make_input_param(a), make_output_param(b0), make_scalar_param(kLoadOnly)};
      pto2_rt_submit_task(p, 0, PTO2_WORKER_CUBE, p0, 3);
      PTOParam p1[] = {make_input_param(a), make_output_param(b1), make_scalar_param(kLoadOnly)};
      pto2_rt_submit_task(p, 0, PTO2_WORKER_VECTOR, p1, 3);
      return 0;
    });
    REQUIRE(r.ok());
    // Both start at 0. The first load has the bandwidth to itself and ends
    // at 100 + 5242.88; the second gets what is left of the same buckets and
    // ends at 100 + 2 x 5242.88 = 10585.76, rounded up.
    const Tx8RunStats s = c.chip->run_stats();
    CHECK(s.ddr_bytes == 2 * bytes);
    CHECK(s.sim_ns == 10586);
    CHECK(s.tile_busy_ns[0] + s.tile_busy_ns[1] + s.tile_busy_ns[2] > 0);
  }
  SECTION("a NoC round trip to the far corner: hops x 4 ns + bytes / 128 GB/s each way") {
    RunResult r = c.run_movers(in, out, bytes, {{kNocRoundTrip, PTO2_WORKER_CUBE}});
    REQUIRE(r.ok());
    CHECK(std::memcmp(in, out, 64 * 1024) == 0);
    const Tx8RunStats s = c.chip->run_stats();
    CHECK(s.noc_bytes == 2 * 64 * 1024);
    CHECK(s.noc_transfers == 2);
    const uint64_t dma = 100 + 328;    // 64 KiB at 200 B/ns = 327.68, rounded up
    const uint64_t noc = 6 * 4 + 512;  // from tile 0 (the first NE) to tile 15: 6 hops
    CHECK(s.sim_ns == dma + 2 * noc + dma);
  }
  SECTION("a consumer starts after its producer in simulated time, wherever it runs") {
    RunResult r = c.rt->run([&](PTO2Runtime* p) {
      const uint32_t shape[1] = {static_cast<uint32_t>(bytes)};
      Tensor a = make_tensor_external(in, shape, 1, PTO2_UINT8);
      Tensor mid = make_tensor(shape, 1, PTO2_UINT8);
      Tensor b = make_tensor_external(out, shape, 1, PTO2_UINT8);
      PTOParam p0[] = {make_input_param(a), make_output_param(mid), make_scalar_param(kLoadWhole)};
      pto2_rt_submit_task(p, 0, PTO2_WORKER_CUBE, p0, 3);
      PTOParam p1[] = {make_input_param(mid), make_output_param(b), make_scalar_param(kLoadWhole)};
      pto2_rt_submit_task(p, 0, PTO2_WORKER_VECTOR, p1, 3);
      return 0;
    });
    REQUIRE(r.ok());
    CHECK(std::memcmp(in, out, bytes) == 0);
    CHECK(c.chip->run_stats().sim_ns == 4 * 5343);
  }
}

TEST_CASE("DDR bandwidth: a transfer charged later still gets the capacity left before it", "[tx8sim]") {
  DdrChannel ddr(200.0, 0);  // 20,000 bytes per 100 ns bucket, no latency
  // 64 bytes at 190 ns: the last tenth of bucket 1.
  CHECK(ddr.transfer(190, 64) == 191);  // 190 + 0.32 ns, rounded up
  // 1 MiB asked at 100 ns, charged after it: bucket 1 still carries 19,936
  // bytes for it, so it ends at 100 + (1 MiB + 64) / 200 = 5343.2 ns.
  CHECK(ddr.transfer(100, 1 << 20) == 5344);
  // Nothing left between 100 and 5343 ns: 200 bytes asked there go after
  // what bucket 53 carries (8,640 + 200 bytes: 5344.2 ns); before 100 ns,
  // bucket 0 is free.
  CHECK(ddr.transfer(150, 200) == 5345);
  CHECK(ddr.transfer(0, 200) == 1);
  ddr.reset();
  CHECK(ddr.transfer(0, 1 << 20) == 5243);
}

TEST_CASE("DDR bandwidth: a slow channel's transfer walks a bucket per 4 KiB, not per 100 ns", "[tx8sim]") {
  // 0.001 GB/s: a 100 ns bucket carried a tenth of a byte, and 64 KiB walked (and kept) 655,360 of them.
  DdrChannel slow(0.001, 0);
  CHECK(slow.bucket_ns() == 4096000);             // 4 KiB per bucket
  CHECK(slow.transfer(0, 64 << 10) == 65536000);  // 64 KiB at 1 byte per us
  CHECK(slow.buckets_held() == 16);
  CHECK(slow.transfer(0, 1) == 65536000 + 1000);  // after it: the channel is busy until then
  // At the default bandwidth the buckets stay 100 ns.
  CHECK(DdrChannel(200.0, 0).bucket_ns() == DdrChannel::kBucketNs);
}

TEST_CASE("movers refuse what leaves their bounds, naming the task and the sizes", "[tx8sim]") {
  Chip c(quiet_config());
  const uint64_t bytes = 8192;
  void* in = c.alloc(bytes);
  void* out = c.alloc(bytes);
  struct Case {
    Mode mode;
    std::vector<std::string> says;
  };
  const Case cases[] = {
      {kSpmTooBig, {"SPM allocation of 2097153 bytes does not fit", "share of the tile's SPM is 2097152 bytes"}},
      {kLoadOutside, {"DMA load (DDR->SPM) of 1 rows x 32 bytes", "source", "outside the views of the task's tensors"}},
      {kStoreIntoInput, {"DMA store (SPM->DDR)", "destination", "OUTPUT/INOUT"}},
      {kBadStride, {"4 rows x 64 bytes", "strides 64 (dst) and 32 (src) must be at least the row"}},
      {kNocBadTile, {"NoC put: tile 16 is not on the chip (0..15)"}},
      {kSpmDstOutside, {"destination", "outside the engine's SPM share"}},
  };
  for (const Case& k : cases) {
    RunResult r = c.run_movers(in, out, bytes, {{k.mode, PTO2_WORKER_VECTOR}});
    INFO("mode " << k.mode << ": " << r.status.message);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status.code == kInvalidArgument);
    CHECK_THAT(r.status.message, Catch::Contains("task ") && Catch::Contains("(kernel 0) on CT ("));
    for (const std::string& s : k.says) CHECK_THAT(r.status.message, Catch::Contains(s));
  }
  // The chip keeps working after a refused mover.
  RunResult ok = c.run_movers(in, out, bytes, {{kLoadWhole, PTO2_WORKER_VECTOR}});
  CHECK(ok.ok());
}

TEST_CASE("a store past the task's own view is refused even inside its buffer", "[tx8sim]") {
  Chip c(quiet_config());
  void* in = c.alloc(8192);
  void* out = c.alloc(8192);
  RunResult r = c.rt->run([&](PTO2Runtime* p) {
    const uint32_t shape[1] = {8192}, half[1] = {4096}, zero[1] = {0};
    Tensor a = make_tensor_external(in, shape, 1, PTO2_UINT8);
    Tensor b = make_tensor_external(out, shape, 1, PTO2_UINT8);
    Tensor first_half = tensor_view(b, zero, half);  // the other half may be another task's
    PTOParam params[] = {make_input_param(a), make_output_param(first_half), make_scalar_param(kStorePastView)};
    pto2_rt_submit_task(p, 0, PTO2_WORKER_VECTOR, params, 3);
    return 0;
  });
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status.message, Catch::Contains("DMA store (SPM->DDR)") &&
                                   Catch::Contains("outside the views of the task's OUTPUT/INOUT tensors"));
}

TEST_CASE("the blocks of one SPMD call share their tensors in simulated time, batched or expanded", "[tx8sim]") {
  const BlockMode mode = GENERATE(BlockMode::kBatch, BlockMode::kExpand);
  Tx8SimConfig cfg = quiet_config();
  cfg.ddr_gbytes_per_s = 1e6;  // transfers cost their latency: 100 ns in, 100 ns out
  cfg.record_events = true;
  Chip c(cfg, 1, mode);
  const uint64_t bytes = 1 << 20;
  void* in = c.alloc(bytes);
  void* out = c.alloc(bytes);
  RunResult r = c.rt->run([&](PTO2Runtime* p) {
    const uint32_t shape[1] = {static_cast<uint32_t>(bytes)};
    Tensor a = make_tensor_external(in, shape, 1, PTO2_UINT8);
    Tensor b = make_tensor_external(out, shape, 1, PTO2_UINT8);
    PTOParam params[] = {make_input_param(a), make_output_param(b), make_scalar_param(kNothing)};
    pto2_rt_submit_block_task(p, 0, PTO2_WORKER_VECTOR, params, 3, 4);
    return 0;
  });
  REQUIRE(r.ok());
  const Tx8RunStats s = c.chip->run_stats();
  CHECK(s.tasks == 4);
  // Each block is charged its quarter, once in and once out.
  CHECK(s.ddr_bytes == 2 * bytes);
  // No block waits for a sibling's write of `out`: each starts when its
  // engine is free (at 0, or where the engine's previous block ended, when
  // the scheduler put two on one engine), never later.
  std::map<std::string, uint64_t> engine_free;
  int blocks = 0;
  for (const TraceEvent& e : c.chip->trace_events()) {
    if (e.kernel_id != 0) continue;  // the movers' lanes
    ++blocks;
    CHECK(e.start_ns == engine_free[e.lane]);
    engine_free[e.lane] = e.start_ns + e.duration_ns;
    CHECK(e.duration_ns <= 210);  // 100 ns of load latency, then the store's
  }
  CHECK(blocks == 4);
}

TEST_CASE("function groups are refused: the chip has no clusters", "[tx8sim]") {
  Chip c(quiet_config());
  RunResult r = c.rt->run([&](PTO2Runtime* p) {
    const int32_t cid = pto2_rt_allocate_cluster(p);
    return cid < 0 ? 0 : 1;
  });
  CHECK_FALSE(r.ok());
}

TEST_CASE("the trace records tasks and transfers per tile in simulated time", "[tx8sim]") {
  Tx8SimConfig cfg = quiet_config();
  cfg.record_events = true;
  Chip c(cfg);
  void* in = c.alloc(4096);
  void* out = c.alloc(4096);
  REQUIRE(c.run_movers(in, out, 4096, {{kLoadWhole, PTO2_WORKER_VECTOR}}).ok());
  const std::vector<TraceEvent> ev = c.chip->trace_events();
  REQUIRE(ev.size() == 3);  // the load, the store, the task
  int tasks = 0, moves = 0;
  for (const TraceEvent& e : ev) {
    if (e.kernel_id == 0) {
      ++tasks;
      CHECK(e.lane.rfind("tile (", 0) == 0);
    } else {
      ++moves;
      CHECK_THAT(e.lane, Catch::EndsWith(" LSU"));
      CHECK_THAT(e.args_json, Catch::Contains("\"bytes\": 4096"));
    }
  }
  CHECK(tasks == 1);
  CHECK(moves == 2);
}

TEST_CASE("sharding search: hand-computed plans", "[tx8sim][sharding]") {
  SECTION("the TX8 document's example: [3, 4, 128, 4096] over 16 tiles splits the innermost dimension") {
    const uint32_t shape[4] = {3, 4, 128, 4096};
    PTO2ShardPlan p = pto2_shard_search(shape, 4, 16, 64, ~0u);
    CHECK(p.blocks == 16);
    CHECK(p.level == 4);
    CHECK(std::vector<int>(p.factor, p.factor + 4) == std::vector<int>{1, 1, 1, 16});
    // The candidates it ranked below: [1, 8, 1, 2] uses 4 x 2, [16, 1, 1, 1] only 3.
    const int32_t f1[4] = {1, 8, 1, 2}, f2[4] = {16, 1, 1, 1};
    CHECK(pto2_shard_score(shape, 4, f1, 64, nullptr) == 8);
    CHECK(pto2_shard_score(shape, 4, f2, 64, nullptr) == 3);
    // Only the outermost dimension allowed: 3 tiles of 16 (level 2).
    p = pto2_shard_search(shape, 4, 16, 64, 1u);
    CHECK(p.blocks == 3);
    CHECK(p.level == 2);
    // The naive split is the same 3.
    CHECK(pto2_shard_naive(shape, 4, 16).blocks == 3);
  }
  SECTION("alignment limits the last dimension; the search spreads the rest") {
    const uint32_t shape[4] = {1, 1, 7, 100};
    // Last dimension: ceil(100 / 16) = 7 shards at most. [1,1,1,16] -> 7,
    // [1,1,2,8] -> 14, [1,1,4,4] -> 16 (the first best), [1,1,8,2] -> 14.
    PTO2ShardPlan p = pto2_shard_search(shape, 4, 16, 16, ~0u);
    CHECK(std::vector<int>(p.factor, p.factor + 4) == std::vector<int>{1, 1, 4, 4});
    CHECK(p.blocks == 16);
    CHECK(pto2_shard_naive(shape, 4, 16).blocks == 1);
    // Shares of the last dimension in whole 16-element units: 7 units in 4.
    const uint32_t want[4][2] = {{0, 16}, {16, 48}, {48, 80}, {80, 100}};
    for (int k = 0; k < 4; ++k) {
      uint32_t b = 0, e = 0;
      pto2_shard_range(&p, shape, 16, k, 3, &b, &e);  // blocks 0..3: dimension 2's shard 0
      CHECK(b == want[k][0]);
      CHECK(e == want[k][1]);
    }
    // Block 5 is dimension 2's shard 1 (rows [1, 3) of 7), last-dimension shard 1.
    uint32_t b = 0, e = 0;
    pto2_shard_range(&p, shape, 16, 5, 2, &b, &e);
    CHECK(b == 1);
    CHECK(e == 3);
  }
  SECTION("nothing to spread: no sharding") {
    const uint32_t shape[2] = {1, 1};
    PTO2ShardPlan p = pto2_shard_search(shape, 2, 16, 1, ~0u);
    CHECK(p.blocks == 1);
    CHECK(p.level == 0);
    p = pto2_shard_search(shape, 2, 1, 1, ~0u);
    CHECK(p.blocks == 1);
  }
  SECTION("every block's shares cover the output exactly once") {
    const uint32_t shape[3] = {5, 9, 130};
    const PTO2ShardPlan p = pto2_shard_search(shape, 3, 16, 16, ~0u);
    std::vector<int> covered(5 * 9 * 130, 0);
    for (int blk = 0; blk < p.blocks; ++blk) {
      uint32_t lo[3], hi[3];
      for (int d = 0; d < 3; ++d) pto2_shard_range(&p, shape, 16, blk, d, &lo[d], &hi[d]);
      for (uint32_t i = lo[0]; i < hi[0]; ++i)
        for (uint32_t j = lo[1]; j < hi[1]; ++j)
          for (uint32_t k = lo[2]; k < hi[2]; ++k) ++covered[(i * 9 + j) * 130 + k];
    }
    for (int v : covered) REQUIRE(v == 1);
  }
}
