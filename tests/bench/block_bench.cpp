// pto2_block_bench — what block_incore (SPMD) tasks cost (docs/runtime.md §15),
// against baselines measured in the same run:
//
//   submit     orchestrator time of one block task of block_dim 24 (one batch
//              descriptor), of the same call expanded (24 tasks and a join),
//              and of one plain task with the same parameters (2 inputs, 1
//              output). Target: the batch submit <= 3x the plain submit.
//   dispatch   end-to-end time per block with empty kernels on a2a3sim
//              (kernels inline, 1 scheduler thread): batch descriptors against
//              the expansion and against as many independent plain tasks.
//   paged attention  the example's large case through pto2-run, whole run as
//              pto2-run reports it: SPMD stages as batch descriptors, the same
//              expanded (PTO2_BLOCK_MODE=expand), and the per-block original.
//
// Figures are medians of --reps runs; nothing here fails on a time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pto2/kernel_abi.h"
#include "pto2/runtime.h"
#include "pto2/sim/a2a3sim.h"

using namespace pto2;
using namespace pto2::sim;

namespace {

constexpr int32_t kEmpty = 0;
constexpr int32_t kBlocks = 24;
constexpr uint32_t kCallsPerScope = 256;

void k_empty(int64_t*) {}

uint64_t now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

enum class Kind { kPlain, kBatch, kExpand, kPlainPerBlock };

struct Figures {
  double submit_us_per_call;
  double e2e_us_per_block;
};

// `calls` calls of one kind; each call's parameters: 2 inputs and 1 output
// (a row of a larger buffer, so calls do not depend on one another).
Figures run_once(Runtime& rt, Kind kind, uint32_t calls, std::vector<float>& buf) {
  const uint32_t tile[1] = {256}, rows[2] = {1024, 256};
  uint64_t submit_ns = 0;
  const uint64_t t0 = now_ns();
  RunResult r = rt.run([&](PTO2Runtime* p) {
    Tensor a = make_tensor_external(buf.data(), tile, 1, PTO2_FLOAT32);
    Tensor b = make_tensor_external(buf.data() + 256, tile, 1, PTO2_FLOAT32);
    Tensor c = make_tensor_external(buf.data() + 512, rows, 2, PTO2_FLOAT32);
    for (uint32_t s = 0; s < calls; s += kCallsPerScope) {
      PTO2_SCOPE(p) {
        const uint64_t start = now_ns();
        for (uint32_t i = s; i < std::min(calls, s + kCallsPerScope); ++i) {
          const uint32_t off[2] = {i % 1024, 0}, one[2] = {1, 256};
          Tensor out = tensor_view(c, off, one);
          PTOParam params[] = {make_input_param(a), make_input_param(b), make_output_param(out)};
          switch (kind) {
            case Kind::kPlain: pto2_rt_submit_task(p, kEmpty, PTO2_WORKER_VECTOR, params, 3); break;
            case Kind::kBatch:
            case Kind::kExpand: pto2_rt_submit_block_task(p, kEmpty, PTO2_WORKER_VECTOR, params, 3, kBlocks); break;
            case Kind::kPlainPerBlock:
              for (int32_t k = 0; k < kBlocks; ++k) pto2_rt_submit_task(p, kEmpty, PTO2_WORKER_VECTOR, params, 3);
              break;
          }
        }
        submit_ns += now_ns() - start;
      }
    }
    return 0;
  });
  const uint64_t wall = now_ns() - t0;
  if (!r.ok()) {
    std::fprintf(stderr, "run failed: %s\n", r.status.message.c_str());
    std::exit(1);
  }
  const double blocks = kind == Kind::kPlain ? double(calls) : double(calls) * kBlocks;
  return {double(submit_ns) / 1000.0 / calls, double(wall) / 1000.0 / blocks};
}

Figures measure(Kind kind, uint32_t calls, int reps) {
  A2A3SimConfig cfg;
  cfg.executor_threads = 0;
  Status st;
  auto chip = A2A3SimPlatform::create(cfg, &st);
  chip->register_kernel(kEmpty, WorkerType::kVector, k_empty);
  RuntimeConfig rc;
  rc.scheduler_threads = 1;
  rc.block_mode = kind == Kind::kExpand ? BlockMode::kExpand : BlockMode::kBatch;
  auto rt = Runtime::create(rc, *chip, &st);
  if (!rt) {
    std::fprintf(stderr, "runtime: %s\n", st.message.c_str());
    std::exit(1);
  }
  std::vector<float> buf(512 + 1024 * 256, 1.f);
  run_once(*rt, kind, calls / 4 + 1, buf);  // warm up: pages, caches
  std::vector<double> submit, e2e;
  for (int i = 0; i < reps; ++i) {
    const Figures f = run_once(*rt, kind, calls, buf);
    submit.push_back(f.submit_us_per_call);
    e2e.push_back(f.e2e_us_per_block);
  }
  return {median(submit), median(e2e)};
}

// Milliseconds pto2-run reports for one run ("... N tasks in X ms ..."), or -1.
double pto2_run_ms(const std::string& config, const char* block_mode) {
  const std::string cmd = std::string("env PTO2_BLOCK_MODE=") + block_mode + " '" PTO2_RUN_PATH "' '" + config +
                          "' --no-golden 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char line[1024];
  double ms = -1;
  while (std::fgets(line, sizeof line, p) != nullptr) {
    const char* at = std::strstr(line, " tasks in ");
    if (at != nullptr) ms = std::atof(at + std::strlen(" tasks in "));
  }
  return pclose(p) == 0 ? ms : -1;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t calls = 4096;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--calls") && i + 1 < argc)
      calls = uint32_t(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else {
      std::printf("usage: %s [--calls N] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  std::printf("block_incore tasks of block_dim %d, %u calls, median of %d runs\n", kBlocks, calls, reps);
  const Figures plain = measure(Kind::kPlain, calls, reps);
  const Figures batch = measure(Kind::kBatch, calls, reps);
  const Figures expand = measure(Kind::kExpand, calls, reps);
  const Figures per_block = measure(Kind::kPlainPerBlock, calls, reps);
  std::printf("submit, us per call:  plain task %.3f | block task (batch) %.3f = %.2fx plain (target <= 3x) | "
              "expanded %.3f = %.2fx plain, %.1fx the batch\n",
              plain.submit_us_per_call, batch.submit_us_per_call, batch.submit_us_per_call / plain.submit_us_per_call,
              expand.submit_us_per_call, expand.submit_us_per_call / plain.submit_us_per_call,
              expand.submit_us_per_call / batch.submit_us_per_call);
  std::printf("end to end, us per block:  batch %.3f | expanded %.3f (%.2fx the batch) | %d plain tasks per call "
              "%.3f (%.2fx the batch)\n",
              batch.e2e_us_per_block, expand.e2e_us_per_block, expand.e2e_us_per_block / batch.e2e_us_per_block,
              kBlocks, per_block.e2e_us_per_block, per_block.e2e_us_per_block / batch.e2e_us_per_block);

  const std::string spmd = std::string(PA_EXAMPLE_DIR) + "/kernels_spmd_large.toml";
  const std::string original = std::string(PA_EXAMPLE_DIR) + "/kernels_large.toml";
  std::vector<double> b, e, o;
  for (int i = 0; i < reps; ++i) {
    b.push_back(pto2_run_ms(spmd, "batch"));
    e.push_back(pto2_run_ms(spmd, "expand"));
    o.push_back(pto2_run_ms(original, "batch"));
  }
  const double mb = median(b), me = median(e), mo = median(o);
  if (mb <= 0 || me <= 0 || mo <= 0) {
    std::printf("paged attention: pto2-run failed (%.1f / %.1f / %.1f)\n", mb, me, mo);
    return 1;
  }
  std::printf("paged attention (large case, pto2-run's run time):  SPMD batch %.1f ms | SPMD expanded %.1f ms "
              "(%.2fx the batch) | per-block tasks %.1f ms (%.2fx the batch)\n",
              mb, me, me / mb, mo, mo / mb);
  return 0;
}
