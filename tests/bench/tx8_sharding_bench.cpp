// pto2_tx8_sharding_bench — the sharding search (pto2/sharding.h) against a
// naive equal split on tx8sim (docs/tx8sim.md, "Sharding"), measured in the
// same run:
//
//   For each output shape: the plan each picks over the chip's 16 tiles (its
//   factors and the blocks it can use), then one block task with that many
//   blocks on tx8sim: every block loads its share of the input into its
//   tile's SPM (2-D DMA), computes on it, stores it. Printed: the simulated
//   time, the tiles' utilisation (busy engine time over 16 tiles x 2 engines
//   x simulated time, in %) and the search's ratio to the naive split. Each
//   plan's output is checked element by element.
//
// The naive split cuts the outermost dimension into min(16, its size) parts,
// what a runtime does without a search. Simulated compute is the kernels'
// host time (compute_scale 1): figures are medians of --reps runs. Nothing
// here fails on a time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pto2/kernel_abi.h"
#include "pto2/runtime.h"
#include "pto2/sharding.h"
#include "pto2/sim/tx8sim.h"

using namespace pto2;
using namespace pto2::sim;

namespace {

constexpr uint32_t kAlign = 16;  // float32 elements per alignment unit of the last dimension (64 bytes)
constexpr int kTiles = 16;

// The plan a block reads back: the orchestration's choice, by value.
PTO2ShardPlan g_plan;

// args: in, out (float32, same shape). Block b takes its plan's share: the
// rows of its box, each row's run of the last dimension, through SPM.
void k_scale(int64_t* args) {
  const Tensor* in = pto2_arg_tensor(args, 0);
  const Tensor* out = pto2_arg_tensor(args, 1);
  const PTO2KernelContext* ctx = pto2_kernel_context(args, 2);
  const int32_t nd = in->ndim;
  uint32_t lo[PTO2_MAX_DIMS] = {0, 0, 0, 0}, hi[PTO2_MAX_DIMS] = {1, 1, 1, 1};
  for (int32_t d = 0; d < nd; ++d) pto2_shard_range(&g_plan, in->shapes, kAlign, ctx->block_idx, d, &lo[d], &hi[d]);
  // The box is planes of rows: one 2-D DMA moves a run of rows of the
  // innermost outer dimension (stride apart in DDR, packed in SPM).
  const uint64_t run = hi[nd - 1] - lo[nd - 1];
  const uint64_t plane_rows = nd > 1 ? hi[nd - 2] - lo[nd - 2] : 1;
  const uint64_t stride = nd > 1 ? pto2_tensor_stride(in, nd - 2) : run;
  uint64_t planes = 1;
  for (int32_t d = 0; d + 2 < nd; ++d) planes *= hi[d] - lo[d];
  if (run == 0 || plane_rows == 0 || planes == 0) return;
  const uint64_t row_bytes = run * sizeof(float);
  const uint64_t chunk = std::max<uint64_t>(1, std::min<uint64_t>(plane_rows, (64u << 10) / row_bytes));
  auto* buf = static_cast<float*>(pto2_spm_alloc(ctx, chunk * row_bytes));
  if (!buf) return;
  const auto* src = static_cast<const float*>(pto2_tensor_data(in));
  auto* dst = static_cast<float*>(pto2_tensor_data(out));
  uint32_t idx[PTO2_MAX_DIMS] = {lo[0], lo[1], lo[2], lo[3]};
  for (uint64_t p = 0; p < planes; ++p) {
    uint64_t base = lo[nd - 1];
    for (int32_t d = 0; d + 1 < nd; ++d) base += uint64_t(d + 2 < nd ? idx[d] : lo[d]) * pto2_tensor_stride(in, d);
    for (uint64_t r = 0; r < plane_rows; r += chunk) {
      const uint64_t n = std::min<uint64_t>(chunk, plane_rows - r);
      const uint64_t off = base + r * stride;
      if (pto2_dma_load(ctx, buf, src + off, row_bytes, n, stride * sizeof(float)) != 0) return;
      for (uint64_t i = 0; i < n * run; ++i) {
        float v = buf[i];
        for (int it = 0; it < 16; ++it) v = v * 0.999f + 0.001f;  // some work per element
        buf[i] = v;
      }
      if (pto2_dma_store(ctx, dst + off, stride * sizeof(float), buf, row_bytes, n) != 0) return;
    }
    for (int32_t d = nd - 3; d >= 0; --d) {
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
    }
  }
}

struct Figures {
  double sim_us = 0, util = 0;
};

Figures run_plan(Tx8SimPlatform& chip, Runtime& rt, void* in, void* out, const std::vector<uint32_t>& shape,
                 const PTO2ShardPlan& plan, int reps) {
  std::vector<double> sim, util;
  for (int r = 0; r < reps; ++r) {
    g_plan = plan;
    RunResult res = rt.run([&](PTO2Runtime* p) {
      Tensor a = make_tensor_external(in, shape.data(), static_cast<int32_t>(shape.size()), PTO2_FLOAT32);
      Tensor b = make_tensor_external(out, shape.data(), static_cast<int32_t>(shape.size()), PTO2_FLOAT32);
      PTOParam params[] = {make_input_param(a), make_output_param(b)};
      pto2_rt_submit_block_task(p, 0, PTO2_WORKER_VECTOR, params, 2, plan.blocks);
      return 0;
    });
    if (!res.ok()) {
      std::fprintf(stderr, "run failed: %s\n", res.status.message.c_str());
      std::exit(2);
    }
    const Tx8RunStats s = chip.run_stats();
    sim.push_back(double(s.sim_ns) / 1000.0);
    util.push_back(s.utilisation());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(sim), median(util)};
}

template <typename T>
std::string dims(const T* f, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(f[i]));
  }
  s.push_back(']');
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
  Tx8SimConfig cfg;
  Status st;
  auto chip = Tx8SimPlatform::create(cfg, &st);
  if (!chip) {
    std::fprintf(stderr, "%s\n", st.message.c_str());
    return 2;
  }
  chip->register_kernel(0, WorkerType::kVector, k_scale);
  RuntimeConfig rc;
  rc.scheduler_threads = cfg.scheduler_threads();
  auto rt = Runtime::create(rc, *chip, &st);
  if (!rt) {
    std::fprintf(stderr, "%s\n", st.message.c_str());
    return 2;
  }
  const std::vector<std::vector<uint32_t>> shapes = {
      {3, 4, 128, 256}, {2, 64, 512}, {1, 7, 100}, {16, 1024}, {4, 4, 4, 640}};
  std::printf("pto2_tx8_sharding_bench: tx8sim 4x4 mesh, %d scheduler thread(s), medians of %d runs\n",
              rc.scheduler_threads, reps);
  std::printf("%-18s %-14s %6s %10s %7s   %-14s %6s %10s %7s   %s\n", "shape", "search", "blocks", "sim us", "util %",
              "naive", "blocks", "sim us", "util %", "search vs naive");
  double util_ratio_product = 1;
  for (const auto& shape : shapes) {
    const auto nd = static_cast<int32_t>(shape.size());
    uint64_t n = 1;
    for (uint32_t d : shape) n *= d;
    void *in = nullptr, *out = nullptr;
    if (!chip->memory().alloc(n * 4, &in).ok() || !chip->memory().alloc(n * 4, &out).ok()) return 2;
    std::vector<float> host(n, 1.f);
    (void)chip->memory().copy_to_device(in, host.data(), n * 4);
    const PTO2ShardPlan search = pto2_shard_search(shape.data(), nd, kTiles, kAlign, ~0u);
    const PTO2ShardPlan naive = pto2_shard_naive(shape.data(), nd, kTiles);
    // Every element written by each plan: the output starts at 0 and must
    // end as the kernel's function of 1.
    float want = 1.f;
    for (int it = 0; it < 16; ++it) want = want * 0.999f + 0.001f;
    auto checked = [&](const PTO2ShardPlan& plan) {
      std::vector<float> zero(n, 0.f);
      (void)chip->memory().copy_to_device(out, zero.data(), n * 4);
      const Figures f = run_plan(*chip, *rt, in, out, shape, plan, reps);
      (void)chip->memory().copy_from_device(zero.data(), out, n * 4);
      for (uint64_t i = 0; i < n; ++i)
        if (zero[i] != want) {
          std::fprintf(stderr, "plan %s left element %llu at %g\n", dims(plan.factor, shape.size()).c_str(),
                       (unsigned long long)i, double(zero[i]));
          std::exit(2);
        }
      return f;
    };
    const Figures fs = checked(search);
    const Figures fn = checked(naive);
    const double util_ratio = fn.util > 0 ? fs.util / fn.util : 0;
    util_ratio_product *= util_ratio > 0 ? util_ratio : 1;
    const std::string name = dims(shape.data(), shape.size());
    std::printf("%-18s %-14s %6d %10.2f %7.1f   %-14s %6d %10.2f %7.1f   utilisation %.2fx, simulated time %.2fx\n",
                name.c_str(), dims(search.factor, shape.size()).c_str(), search.blocks, fs.sim_us, fs.util,
                dims(naive.effective, shape.size()).c_str(), naive.blocks, fn.sim_us, fn.util, util_ratio,
                fs.sim_us > 0 ? fn.sim_us / fs.sim_us : 0);
    (void)chip->memory().free(in);
    (void)chip->memory().free(out);
  }
  std::printf("sharding search vs naive split: utilisation geometric mean %.2fx\n",
              std::pow(util_ratio_product, 1.0 / double(shapes.size())));
  return 0;
}
