// a2a3sim: chip layout, the DATA_MAIN_BASE / COND handshake as the scheduler
// sees it, and the PTO2 runtime running real graphs on 72 logical cores with
// a bounded number of OS threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "pto2/runtime.h"
#include "pto2/sim/a2a3sim.h"
#include "vector_example.h"
#include "vector_on_chip.h"

using namespace pto2;
using namespace pto2::sim;

namespace {

std::atomic<int> g_gate{0};
std::atomic<int> g_ran{0};
PTO2KernelContext g_seen_context{};  // what the gated kernel was handed, copied before it returns

void k_gated(int64_t* args) {
  while (g_gate.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  g_seen_context = *pto2_kernel_context(args, 0);
  g_ran.fetch_add(1);
}

void k_empty(int64_t*) {}

}  // namespace

TEST_CASE("config is validated and the chip has block_dim clusters of 1 AIC + 2 AIV", "[a2a3sim]") {
  A2A3SimConfig bad;
  bad.block_dim = 25;
  Status st;
  CHECK(A2A3SimPlatform::create(bad, &st) == nullptr);
  CHECK_THAT(st.message, Catch::Contains("block_dim = 25") && Catch::Contains("PLATFORM_MAX_BLOCKDIM"));
  bad = A2A3SimConfig{};
  bad.aicpu_threads = 1;
  CHECK(A2A3SimPlatform::create(bad, &st) == nullptr);

  A2A3SimConfig cfg;
  cfg.executor_threads = 0;
  auto chip = A2A3SimPlatform::create(cfg, &st);
  REQUIRE(chip);
  REQUIRE(chip->core_count() == 72);
  int cubes = 0;
  for (int c = 0; c < 72; ++c) cubes += chip->core_type(c) == WorkerType::kCube;
  CHECK(cubes == 24);
  CHECK(chip->cluster_of(5) == 5);           // AIC 5
  CHECK(chip->cluster_of(24 + 2 * 5) == 5);  // its two AIVs
  CHECK(chip->cluster_of(24 + 2 * 5 + 1) == 5);
  CHECK(cfg.scheduler_threads() >= 1);
  CHECK(cfg.scheduler_threads() <= 3);
}

TEST_CASE("handshake: DATA_MAIN_BASE dispatches, COND reports ACK then FIN", "[a2a3sim]") {
  A2A3SimConfig cfg;
  cfg.block_dim = 2;
  cfg.executor_threads = 1;  // the core runs on another thread, so its states can be watched
  Status st;
  auto chip = A2A3SimPlatform::create(cfg, &st);
  REQUIRE(chip);
  chip->register_kernel(7, WorkerType::kVector, k_gated);
  uint64_t addr = 0;
  REQUIRE(chip->resolve_kernel(7, WorkerType::kVector, &addr));
  CHECK_FALSE(chip->resolve_kernel(7, WorkerType::kCube, &addr));  // registered for AIV only
  REQUIRE(chip->resolve_kernel(7, WorkerType::kVector, &addr));

  g_gate = 0;
  g_ran = 0;
  const int core = 3;     // an AIV
  int64_t args[1] = {0};  // room for the kernel context after 0 arguments
  DispatchPayload p;
  p.args = args;
  p.task_id = (41ull << 2) | 1;
  p.kernel_id = 7;
  p.function_bin_addr = addr;
  chip->dispatch(core, p);
  // ACK: the core took the task (DATA_MAIN_BASE cleared) and is running it.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (chip->cond(core) != (uint32_t(p.task_id) & kCondTaskMask) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  CHECK(chip->cond(core) == (uint32_t(p.task_id) & kCondTaskMask));
  CHECK(chip->data_main_base(core) == 0);
  uint64_t done = 0;
  CHECK_FALSE(chip->poll_finished(core, &done));  // ACK is not completion
  g_gate = 1;
  while (!chip->poll_finished(core, &done) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  CHECK(done == p.task_id);
  CHECK(g_ran == 1);
  CHECK(chip->cond(core) == 0);  // the FIN was consumed
  CHECK_FALSE(chip->poll_finished(core, &done));
  CHECK(chip->tasks_executed(core) == 1);
  // The kernel got its context after its (zero) arguments: cluster of AIV 3.
  const PTO2KernelContext* ctx = &g_seen_context;
  CHECK(ctx->cluster_id == chip->cluster_of(core));
  CHECK(ctx->block_idx == 0);
  CHECK(ctx->block_num == 1);
  CHECK(ctx->cluster_num == 2);
  CHECK(ctx->core_type == PTO2_WORKER_VECTOR);
  CHECK(ctx->task_id == p.task_id);
}

TEST_CASE("PTO2 runtime on a2a3sim: vector example on 72 cores, bounded OS threads", "[a2a3sim][runtime]") {
  const int executors = GENERATE(0, 1, 2);
  A2A3SimConfig cfg;
  cfg.executor_threads = executors;
  Status st;
  auto chip = A2A3SimPlatform::create(cfg, &st);
  REQUIRE(chip);
  // Inputs and output live in simulated GM, moved with the host API.
  VectorOnChip vec(*chip, cfg.scheduler_threads());
  CHECK(vec.run() == VectorOnChip::kN);
  CHECK(chip->executor_threads() == executors);
}

TEST_CASE("thousands of independent cube/vector tasks spread over the cores", "[a2a3sim][runtime]") {
  const int executors = GENERATE(0, 2);
  A2A3SimConfig cfg;
  cfg.executor_threads = executors;
  cfg.aicpu_threads = 3;
  Status st;
  auto chip = A2A3SimPlatform::create(cfg, &st);
  chip->register_kernel(0, WorkerType::kCube, k_empty);
  chip->register_kernel(0, WorkerType::kVector, k_empty);
  RuntimeConfig rc;
  rc.task_window = 256;
  rc.scheduler_threads = 2;  // more logical AICPU threads than CPUs is fine: they park
  auto rt = Runtime::create(rc, *chip, &st);
  REQUIRE(rt);
  const int n = 5000;
  RunResult r = rt->run([&](PTO2Runtime* p) {
    for (int i = 0; i < n; i += 100) {
      PTO2_SCOPE(p) {
        for (int j = 0; j < 100; ++j) {
          PTOParam s[] = {make_scalar_param(uint64_t(i + j))};
          pto2_rt_submit_task(p, 0, (i + j) % 3 == 0 ? PTO2_WORKER_CUBE : PTO2_WORKER_VECTOR, s, 1);
        }
      }
    }
    return 0;
  });
  REQUIRE(r.ok());
  uint64_t total = 0;
  int used = 0;
  for (int c = 0; c < chip->core_count(); ++c) {
    total += chip->tasks_executed(c);
    used += chip->tasks_executed(c) > 0;
  }
  CHECK(total == uint64_t(n));
  CHECK(used >= 2);  // both core types and both schedulers' shares were used
}
