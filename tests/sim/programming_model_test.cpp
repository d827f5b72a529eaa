// The chip's programming model on a2a3sim (docs/runtime.md §15, docs/sim.md
// "Pipes"): cluster-pinned function groups, block_incore tasks (batch
// descriptor and expansion), and cube -> vector pipes. Every case runs at 1, 2
// and 4 scheduler threads, inline and with executor threads.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "pto2/kernel_abi.h"
#include "pto2/runtime.h"
#include "pto2/sim/a2a3sim.h"

using namespace pto2;
using namespace pto2::sim;

namespace {

enum : int32_t { kMark = 0, kBlockWrite = 1, kSum = 2, kPush = 3, kPop = 4, kSleep = 5 };

// Sleeps a little on odd blocks, so that blocks finish out of order.
void jitter(int32_t block) {
  if (block % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

// kMark(out int32[1] INOUT): adds 1; records nothing else (pinning is checked
// from the profiling records).
void k_mark(int64_t* args) {
  auto* v = static_cast<int32_t*>(pto2_tensor_data(pto2_arg_tensor(args, 0)));
  *v += 1;
}

// kBlockWrite(in f32[N*W], out f32[N*W], W): block b writes its slice:
// out[b*W + i] = in[b*W + i] * 2 + b + block_num.
void k_block_write(int64_t* args) {
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 3);
  const auto* in = static_cast<const float*>(pto2_tensor_data(pto2_arg_tensor(args, 0)));
  auto* out = static_cast<float*>(pto2_tensor_data(pto2_arg_tensor(args, 1)));
  const auto w = static_cast<uint32_t>(args[2]);
  jitter(ctx->block_idx);
  for (uint32_t i = 0; i < w; ++i) {
    const uint32_t at = uint32_t(ctx->block_idx) * w + i;
    out[at] = in[at] * 2.f + float(ctx->block_idx) + float(ctx->block_num);
  }
}

// kSum(in f32[n], out f32[1], n)
void k_sum(int64_t* args) {
  const auto* in = static_cast<const float*>(pto2_tensor_data(pto2_arg_tensor(args, 0)));
  auto* out = static_cast<float*>(pto2_tensor_data(pto2_arg_tensor(args, 1)));
  const auto n = static_cast<uint32_t>(args[2]);
  float s = 0;
  for (uint32_t i = 0; i < n; ++i) s += in[i];
  *out = s;
}

// kPush(PIPE_OUT, chunks, chunk_bytes): pushes chunks of bytes 0,1,2,...
void k_push(int64_t* args) {
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 3);
  const Tensor* pipe = pto2_arg_tensor(args, 0);
  const auto chunks = static_cast<uint32_t>(args[1]), bytes = static_cast<uint32_t>(args[2]);
  std::vector<uint8_t> buf(bytes);
  uint32_t next = 0;
  for (uint32_t c = 0; c < chunks; ++c) {
    for (auto& b : buf) b = uint8_t(next++);
    if (pto2_pipe_push(ctx, pipe, buf.data(), bytes) != 0) return;
  }
}

// kPop(PIPE_IN, out u64[2] INOUT, chunks, chunk_bytes): pops them, checks the
// sequence, and records the bytes popped and the mismatches.
void k_pop(int64_t* args) {
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 4);
  const Tensor* pipe = pto2_arg_tensor(args, 0);
  auto* out = static_cast<uint64_t*>(pto2_tensor_data(pto2_arg_tensor(args, 1)));
  const auto chunks = static_cast<uint32_t>(args[2]), bytes = static_cast<uint32_t>(args[3]);
  std::vector<uint8_t> buf(bytes);
  uint32_t next = 0;
  for (uint32_t c = 0; c < chunks; ++c) {
    if (pto2_pipe_pop(ctx, pipe, buf.data(), bytes) != 0) return;
    out[0] += bytes;
    for (uint8_t b : buf) out[1] += b != uint8_t(next++);
  }
}

// Long enough that the orchestrator reaches its next allocation while the
// task still runs, even on a loaded machine.
void k_sleep(int64_t*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }

struct Chip {
  std::unique_ptr<A2A3SimPlatform> chip;
  std::unique_ptr<Runtime> rt;
};

Chip make_chip(int block_dim, int threads, int executors, BlockMode mode = BlockMode::kBatch, uint64_t window = 1024,
               uint64_t pipe_bytes = 32768, uint32_t pipe_timeout_ms = 5000) {
  A2A3SimConfig cfg;
  cfg.block_dim = block_dim;
  cfg.executor_threads = executors;
  cfg.record_core_times = true;
  cfg.pipe_bytes = pipe_bytes;
  cfg.pipe_timeout_ms = pipe_timeout_ms;
  Status st;
  Chip c;
  c.chip = A2A3SimPlatform::create(cfg, &st);
  REQUIRE(c.chip);
  for (auto type : {WorkerType::kCube, WorkerType::kVector}) {
    c.chip->register_kernel(kMark, type, k_mark);
    c.chip->register_kernel(kBlockWrite, type, k_block_write);
    c.chip->register_kernel(kSum, type, k_sum);
    c.chip->register_kernel(kPush, type, k_push);
    c.chip->register_kernel(kPop, type, k_pop);
    c.chip->register_kernel(kSleep, type, k_sleep);
  }
  RuntimeConfig rc;
  rc.task_window = window;
  rc.heap_size = 1 << 20;
  rc.scheduler_threads = threads;
  rc.profiling = true;
  rc.block_mode = mode;
  rc.stall_timeout_ms = 20000;
  c.rt = Runtime::create(rc, *c.chip, &st);
  INFO(st.message);
  REQUIRE(c.rt);
  return c;
}

Tensor ext1(void* p, uint32_t n, int32_t dtype) { return make_tensor_external(p, &n, 1, dtype); }

}  // namespace

TEST_CASE("pinned tasks run only on the cores of their cluster - TensorMap edges still order them",
          "[programming-model]") {
  const int threads = GENERATE(1, 2, 4);
  const int executors = GENERATE(0, 2);
  Chip c = make_chip(4, threads, executors);
  std::vector<int32_t> counters(8, 0);
  std::vector<int32_t> cids;
  RunResult r = c.rt->run([&](PTO2Runtime* rt) {
    for (int g = 0; g < 4; ++g) {
      const int32_t cid = pto2_rt_allocate_cluster(rt);
      if (cid < 0) return 1;
      cids.push_back(cid);
      // A chain of 20 INOUT tasks on one counter, alternating cube and vector:
      // each must see the previous one's write.
      Tensor t = ext1(&counters[g], 1, PTO2_INT32);
      for (int i = 0; i < 20; ++i) {
        PTOParam p[] = {make_inout_param(t)};
        if (pto2_rt_submit_task_clustered(rt, kMark, i % 3 == 0 ? PTO2_WORKER_CUBE : PTO2_WORKER_VECTOR, p, 1, cid) <
            0)
          return 2;
      }
      pto2_rt_free_cluster(rt, cid);
    }
    // Unpinned work beside them goes anywhere.
    Tensor u = ext1(&counters[7], 1, PTO2_INT32);
    for (int i = 0; i < 10; ++i) {
      PTOParam p[] = {make_inout_param(u)};
      pto2_rt_submit_task(rt, kMark, PTO2_WORKER_VECTOR, p, 1);
    }
    return 0;
  });
  INFO(r.status.message);
  REQUIRE(r.ok());
  for (int g = 0; g < 4; ++g) CHECK(counters[g] == 20);
  CHECK(counters[7] == 10);
  int pinned = 0;
  for (const TaskRecord& rec : r.records) {
    if (rec.pinned_cluster < 0) continue;
    ++pinned;
    CHECK(rec.cluster == rec.pinned_cluster);
    CHECK(c.chip->cluster_of(rec.core) == rec.pinned_cluster);
    CHECK(rec.group >= 0);
  }
  CHECK(pinned == 80);
}

TEST_CASE("cluster allocation waits for a freed cluster's tasks - and diagnoses the deadlock when none is freed",
          "[programming-model]") {
  const int threads = GENERATE(1, 2, 4);
  SECTION("back-pressure: a freed cluster comes back once its group's tasks completed") {
    Chip c = make_chip(2, threads, 0);
    RunResult r = c.rt->run([&](PTO2Runtime* rt) {
      const int32_t a = pto2_rt_allocate_cluster(rt), b = pto2_rt_allocate_cluster(rt);
      if (a < 0 || b < 0 || a == b) return 1;
      PTOParam none[1] = {make_scalar_param(0)};
      pto2_rt_submit_task_clustered(rt, kSleep, PTO2_WORKER_VECTOR, none, 1, a);
      pto2_rt_free_cluster(rt, a);
      // Both clusters are taken (a still runs its task): this waits for it.
      const int32_t again = pto2_rt_allocate_cluster(rt);
      return again == a ? 0 : 2;
    });
    INFO(r.status.message);
    CHECK(r.ok());
    CHECK(r.stats.blocked_waits >= 1);
  }
  SECTION("deadlock: every cluster held and none freed fails the run at once with CLUSTER_DEADLOCK") {
    Chip c = make_chip(2, threads, 0);
    int32_t third = 0;
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = c.rt->run([&](PTO2Runtime* rt) {
      pto2_rt_allocate_cluster(rt);
      pto2_rt_allocate_cluster(rt);
      third = pto2_rt_allocate_cluster(rt);
      return 0;
    });
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    CHECK(r.status.code == kClusterDeadlock);
    CHECK(third == -kClusterDeadlock);
    CHECK_THAT(r.status.message, Catch::Contains("all 2 clusters are allocated") &&
                                     Catch::Contains("pto2_rt_free_cluster"));
    // The runtime goes on.
    RunResult next = c.rt->run([](PTO2Runtime* rt) { return pto2_rt_allocate_cluster(rt) >= 0 ? 0 : 1; });
    CHECK(next.ok());
  }
  SECTION("a group is released when the scope that allocated it ends") {
    Chip c = make_chip(2, threads, 0);
    std::vector<int32_t> counter(1, 0);
    RunResult r = c.rt->run([&](PTO2Runtime* rt) {
      for (int round = 0; round < 5; ++round) {
        PTO2_SCOPE(rt) {
          const int32_t a = pto2_rt_allocate_cluster(rt), b = pto2_rt_allocate_cluster(rt);
          if (a < 0 || b < 0) return 1;
          Tensor t = ext1(counter.data(), 1, PTO2_INT32);
          PTOParam p[] = {make_inout_param(t)};
          pto2_rt_submit_task_clustered(rt, kMark, PTO2_WORKER_CUBE, p, 1, b);
        }  // neither freed: the scope's end releases both
      }
      return 0;
    });
    INFO(r.status.message);
    CHECK(r.ok());
    CHECK(counter[0] == 5);
  }
  SECTION("misuse names the value") {
    Chip c = make_chip(2, threads, 0);
    RunResult r = c.rt->run([&](PTO2Runtime* rt) {
      PTOParam p[] = {make_scalar_param(0)};
      pto2_rt_submit_task_clustered(rt, kMark, PTO2_WORKER_CUBE, p, 1, 1);  // not allocated
      return 0;
    });
    CHECK(r.status.code == kInvalidArgument);
    CHECK_THAT(r.status.message, Catch::Contains("cluster_id 1 is not a cluster this orchestration holds"));
  }
}

TEST_CASE("a block_incore task - batch descriptor and expansion give identical outputs - consumers wait for every "
          "block",
          "[programming-model]") {
  const int threads = GENERATE(1, 2, 4);
  const int executors = GENERATE(0, 2);
  const uint32_t blocks = 24, w = 64;
  std::vector<float> in(blocks * w);
  for (uint32_t i = 0; i < in.size(); ++i) in[i] = float(i % 97) * 0.5f;
  std::vector<float> outputs[2];
  float sums[2] = {0, 0};
  uint64_t submitted[2] = {0, 0};
  for (int m = 0; m < 2; ++m) {
    Chip c = make_chip(8, threads, executors, m == 0 ? BlockMode::kBatch : BlockMode::kExpand);
    std::vector<float> out(blocks * w, -1.f), sum(1, 0.f);
    RunResult r = c.rt->run([&](PTO2Runtime* rt) {
      Tensor ti = ext1(in.data(), blocks * w, PTO2_FLOAT32), to = ext1(out.data(), blocks * w, PTO2_FLOAT32);
      Tensor ts = ext1(sum.data(), 1, PTO2_FLOAT32);
      PTOParam bw[] = {make_input_param(ti), make_output_param(to), make_scalar_param(w)};
      if (pto2_rt_submit_block_task(rt, kBlockWrite, PTO2_WORKER_VECTOR, bw, 3, int32_t(blocks)) < 0) return 1;
      // The consumer reads all of it: it must run after the last block.
      PTOParam s[] = {make_input_param(to), make_output_param(ts), make_scalar_param(blocks * w)};
      return pto2_rt_submit_task(rt, kSum, PTO2_WORKER_CUBE, s, 3) < 0 ? 2 : 0;
    });
    INFO(r.status.message);
    REQUIRE(r.ok());
    outputs[m] = out;
    sums[m] = sum[0];
    submitted[m] = r.stats.tasks_submitted;
    // One record per block, every block once, with block_num = 24.
    std::vector<int> seen(blocks, 0);
    for (const TaskRecord& rec : r.records) {
      if (rec.kernel_id != kBlockWrite) continue;
      REQUIRE(rec.block_idx >= 0);
      REQUIRE(rec.block_idx < int32_t(blocks));
      ++seen[rec.block_idx];
      CHECK(rec.block_num == int32_t(blocks));
    }
    for (uint32_t b = 0; b < blocks; ++b) CHECK(seen[b] == 1);
  }
  for (uint32_t b = 0; b < blocks; ++b)
    for (uint32_t i = 0; i < w; ++i)
      REQUIRE(outputs[0][b * w + i] == in[b * w + i] * 2.f + float(b) + float(blocks));
  CHECK(outputs[0] == outputs[1]);
  const float expect = std::accumulate(outputs[0].begin(), outputs[0].end(), 0.f);
  CHECK(sums[0] == expect);
  CHECK(sums[1] == expect);
  CHECK(submitted[0] == 2);           // one batch descriptor and its consumer
  CHECK(submitted[1] == blocks + 2);  // 24 blocks, their join, the consumer
}

TEST_CASE("block-aware flow control - an expansion larger than the window is diagnosed - the batch fits",
          "[programming-model]") {
  const int threads = GENERATE(1, 2, 4);
  std::vector<float> in(40 * 4, 1.f), out(40 * 4, 0.f);
  for (BlockMode mode : {BlockMode::kExpand, BlockMode::kBatch}) {
    Chip c = make_chip(4, threads, 0, mode, /*window=*/16);
    RunResult r = c.rt->run([&](PTO2Runtime* rt) {
      Tensor ti = ext1(in.data(), 160, PTO2_FLOAT32), to = ext1(out.data(), 160, PTO2_FLOAT32);
      PTOParam bw[] = {make_input_param(ti), make_output_param(to), make_scalar_param(4)};
      pto2_rt_submit_block_task(rt, kBlockWrite, PTO2_WORKER_VECTOR, bw, 3, 40);
      return 0;
    });
    if (mode == BlockMode::kExpand) {
      CHECK(r.status.code == kBlockExceedsWindow);
      CHECK_THAT(r.status.message, Catch::Contains("block_dim 40 expands to 41 tasks") &&
                                       Catch::Contains("Raise task_window (PTO2_RING_TASK_WINDOW) to at least 64"));
    } else {
      INFO(r.status.message);
      CHECK(r.ok());
      CHECK(out[39 * 4] == 2.f + 39.f + 40.f);
    }
  }
  SECTION("expansions that fit wait for room together, many in a row") {
    Chip c = make_chip(4, threads, 0, BlockMode::kExpand, /*window=*/64);
    RunResult r = c.rt->run([&](PTO2Runtime* rt) {
      for (int i = 0; i < 20; ++i) {
        PTO2_SCOPE(rt) {  // a scope per call: its tasks retire once done, making room for the next
          Tensor ti = ext1(in.data(), 160, PTO2_FLOAT32), to = ext1(out.data(), 160, PTO2_FLOAT32);
          PTOParam bw[] = {make_input_param(ti), make_output_param(to), make_scalar_param(4)};
          if (pto2_rt_submit_block_task(rt, kBlockWrite, PTO2_WORKER_VECTOR, bw, 3, 40) < 0) return 1;
        }
      }
      return 0;
    });
    INFO(r.status.message);
    CHECK(r.ok());
    CHECK(r.stats.tasks_submitted == 20 * 41);
  }
}

TEST_CASE("a cube kernel feeds a vector kernel through a cluster pipe - with back-pressure", "[programming-model]") {
  const int threads = GENERATE(1, 2, 4);
  const int executors = GENERATE(0, 2);
  // 64 chunks of 64 bytes through a 256-byte pipe: the producer must wait
  // for the consumer again and again.
  Chip c = make_chip(2, threads, executors, BlockMode::kBatch, 1024, /*pipe_bytes=*/256);
  std::vector<uint64_t> result(2, 0);
  RunResult r = c.rt->run([&](PTO2Runtime* rt) {
    const int32_t cid = pto2_rt_allocate_cluster(rt);
    Tensor pipe = make_pipe_tensor(cid, 0);
    Tensor res = ext1(result.data(), 2, PTO2_INT64);
    // Submitted consumer first: it waits on the pipe, not on the producer.
    PTOParam pop[] = {make_pipe_in_param(pipe), make_inout_param(res), make_scalar_param(64), make_scalar_param(64)};
    pto2_rt_submit_task_clustered(rt, kPop, PTO2_WORKER_VECTOR, pop, 4, cid);
    PTOParam push[] = {make_pipe_out_param(pipe), make_scalar_param(64), make_scalar_param(64)};
    pto2_rt_submit_task_clustered(rt, kPush, PTO2_WORKER_CUBE, push, 3, cid);
    pto2_rt_free_cluster(rt, cid);
    return 0;
  });
  INFO(r.status.message);
  REQUIRE(r.ok());
  CHECK(result[0] == 64 * 64);
  CHECK(result[1] == 0);
  CHECK(c.chip->pipe_core_threads() == 2);  // the two cores that used the pipe, nothing more
}

TEST_CASE("a kernel that pops from a pipe nobody pushes to is diagnosed STALLED - the runtime goes on",
          "[programming-model]") {
  const int threads = GENERATE(1, 2, 4);
  Chip c = make_chip(2, threads, 0, BlockMode::kBatch, 1024, 256, /*pipe_timeout_ms=*/300);
  std::vector<uint64_t> result(2, 0);
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = c.rt->run([&](PTO2Runtime* rt) {
    const int32_t cid = pto2_rt_allocate_cluster(rt);
    Tensor pipe = make_pipe_tensor(cid, 1);
    Tensor res = ext1(result.data(), 2, PTO2_INT64);
    PTOParam pop[] = {make_pipe_in_param(pipe), make_inout_param(res), make_scalar_param(1), make_scalar_param(16)};
    pto2_rt_submit_task_clustered(rt, kPop, PTO2_WORKER_VECTOR, pop, 4, cid);
    return 0;
  });
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  CHECK(r.status.code == kStalled);
  CHECK_THAT(r.status.message, Catch::Contains("STALLED") && Catch::Contains("to pop 16 bytes from pipe 1") &&
                                   Catch::Contains("Recommendation"));
  CHECK_FALSE(c.rt->broken());
  // The next run finds the pipes mended and empty.
  RunResult next = c.rt->run([&](PTO2Runtime* rt) {
    const int32_t cid = pto2_rt_allocate_cluster(rt);
    Tensor pipe = make_pipe_tensor(cid, 1);
    Tensor res = ext1(result.data(), 2, PTO2_INT64);
    PTOParam push[] = {make_pipe_out_param(pipe), make_scalar_param(2), make_scalar_param(16)};
    pto2_rt_submit_task_clustered(rt, kPush, PTO2_WORKER_CUBE, push, 3, cid);
    PTOParam pop[] = {make_pipe_in_param(pipe), make_inout_param(res), make_scalar_param(2), make_scalar_param(16)};
    pto2_rt_submit_task_clustered(rt, kPop, PTO2_WORKER_VECTOR, pop, 4, cid);
    return 0;
  });
  INFO(next.status.message);
  CHECK(next.ok());
  CHECK(result[0] == 32);
}

TEST_CASE("pipe parameters belong to a task pinned to the pipe's cluster", "[programming-model]") {
  Chip c = make_chip(2, 1, 0);
  RunResult r = c.rt->run([&](PTO2Runtime* rt) {
    Tensor pipe = make_pipe_tensor(1, 0);
    PTOParam push[] = {make_pipe_out_param(pipe), make_scalar_param(1), make_scalar_param(16)};
    pto2_rt_submit_task(rt, kPush, PTO2_WORKER_CUBE, push, 3);
    return 0;
  });
  CHECK(r.status.code == kInvalidArgument);
  CHECK_THAT(r.status.message, Catch::Contains("pipe 0 of cluster 1 is local to that cluster") &&
                                   Catch::Contains("this task is unpinned"));
}

TEST_CASE("a pinned submit that fails after taking its slot leaves no pinned no-op - the cluster stays usable",
          "[programming-model]") {
  const int threads = GENERATE(1, 2, 4);
  Chip c = make_chip(2, threads, 0);
  RunResult bad = c.rt->run([&](PTO2Runtime* rt) {
    pto2_rt_allocate_cluster(rt);
    const int32_t last = pto2_rt_allocate_cluster(rt);  // the last cluster: its queue index is the highest
    PTOParam p[] = {make_scalar_param(0)};
    PTO2TaskSpec spec = pto2_task_spec(kMark, PTO2_WORKER_VECTOR, p, 1);
    spec.cluster_id = last;
    const int64_t later[1] = {1000};  // not a task submitted before this one: fails after the slot is taken
    spec.deps = later;
    spec.num_deps = 1;
    return pto2_rt_submit(rt, &spec) < 0 ? 0 : 1;
  });
  CHECK(bad.status.code == kInvalidArgument);
  CHECK_THAT(bad.status.message, Catch::Contains("dependency 1000 is not a task submitted before this one"));
  // Both clusters are free again and run their pinned tasks.
  std::vector<int32_t> counter(2, 0);
  RunResult next = c.rt->run([&](PTO2Runtime* rt) {
    for (int g = 0; g < 2; ++g) {
      const int32_t cid = pto2_rt_allocate_cluster(rt);
      if (cid < 0) return 1;
      Tensor t = ext1(&counter[g], 1, PTO2_INT32);
      PTOParam p[] = {make_inout_param(t)};
      pto2_rt_submit_task_clustered(rt, kMark, PTO2_WORKER_VECTOR, p, 1, cid);
    }
    return 0;
  });
  INFO(next.status.message);
  CHECK(next.ok());
  CHECK(counter[0] == 1);
  CHECK(counter[1] == 1);
}

TEST_CASE("bytes a group left in its pipe fail the run when the cluster goes to the next group - not passed on",
          "[programming-model]") {
  const int threads = GENERATE(1, 2, 4);
  Chip c = make_chip(1, threads, 0);  // one cluster: the second group gets the same one
  std::vector<uint64_t> first(2, 0), second(2, 0);
  RunResult r = c.rt->run([&](PTO2Runtime* rt) {
    for (auto* result : {&first, &second}) {
      const int32_t cid = pto2_rt_allocate_cluster(rt);
      if (cid < 0) return 1;
      Tensor pipe = make_pipe_tensor(cid, 0);
      Tensor res = ext1(result->data(), 2, PTO2_INT64);
      PTOParam push[] = {make_pipe_out_param(pipe), make_scalar_param(2), make_scalar_param(16)};
      pto2_rt_submit_task_clustered(rt, kPush, PTO2_WORKER_CUBE, push, 3, cid);
      // Pops one of the two chunks: 16 bytes stay behind.
      PTOParam pop[] = {make_pipe_in_param(pipe), make_inout_param(res), make_scalar_param(1), make_scalar_param(16)};
      pto2_rt_submit_task_clustered(rt, kPop, PTO2_WORKER_VECTOR, pop, 4, cid);
      pto2_rt_free_cluster(rt, cid);
    }
    return 0;
  });
  CHECK(r.status.code == kInvalidArgument);
  CHECK_THAT(r.status.message, Catch::Contains("pipe 0 of cluster 0 still held 16 bytes nobody popped"));
  // The second group read its own bytes, not the first group's leftovers.
  CHECK(first[0] == 16);
  CHECK(first[1] == 0);
  CHECK(second[0] == 16);
  CHECK(second[1] == 0);
}
