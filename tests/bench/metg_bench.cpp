// pto2_metg_bench — minimum effective task granularity (METG, as in Task
// Bench) of the simulated chip: the smallest kernel duration at which the
// chip is at least 50% efficient, where
//   efficiency = tasks x kernel duration / (wall time x OS threads running kernels),
// each point the median of three runs; METG is the smallest grain that, with
// every larger grain measured, reaches 50%.
// Kernels busy-wait for the given time. Two patterns: independent tasks, and
// a 1-D stencil (each task reads its three neighbours of the previous step).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "pto2/runtime.h"
#include "pto2/sim/a2a3sim.h"

using namespace pto2;
using namespace pto2::sim;

namespace {

uint64_t now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// args[0] = duration in ns; any tensors follow.
void busy_wait(int64_t* args) {
  const uint64_t until = now_ns() + uint64_t(args[0]);
  while (now_ns() < until) {}
}

constexpr int kBusy = 0;

double run_pattern(Runtime& rt, bool stencil, uint64_t grain_ns, uint32_t width, uint32_t steps,
                   std::vector<float>& cells) {
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = rt.run([&](PTO2Runtime* p) {
    const uint32_t shape[2] = {2 * width, 1}, one[2] = {1, 1};
    Tensor grid = make_tensor_external(cells.data(), shape, 2, PTO2_FLOAT32);
    for (uint32_t t = 0; t < steps; ++t) {
      PTO2_SCOPE(p) {
        for (uint32_t i = 0; i < width; ++i) {
          const int type = i % 3 == 0 ? PTO2_WORKER_CUBE : PTO2_WORKER_VECTOR;
          if (!stencil) {
            PTOParam s[] = {make_scalar_param(grain_ns)};
            pto2_rt_submit_task(p, kBusy, type, s, 1);
            continue;
          }
          // Double-buffered rows: step t reads row (t%2), writes row ((t+1)%2).
          const uint32_t src = (t % 2) * width, dst = ((t + 1) % 2) * width;
          PTOParam prm[5];
          int n = 0;
          prm[n++] = make_scalar_param(grain_ns);
          Tensor in[3], out;
          for (int d = -1; d <= 1; ++d) {
            const int64_t j = int64_t(i) + d;
            if (j < 0 || j >= int64_t(width)) continue;
            const uint32_t off[2] = {src + uint32_t(j), 0};
            in[d + 1] = tensor_view(grid, off, one);
            prm[n++] = make_input_param(in[d + 1]);
          }
          const uint32_t off[2] = {dst + i, 0};
          out = tensor_view(grid, off, one);
          prm[n++] = make_output_param(out);
          pto2_rt_submit_task(p, kBusy, type, prm, n);
        }
      }
    }
    return 0;
  });
  if (!r.ok()) {
    std::fprintf(stderr, "run failed: %s\n", r.status.message.c_str());
    std::exit(1);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t steps = 500;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = uint32_t(std::max(1, std::atoi(argv[++i])));
    else {
      std::printf("usage: %s [--steps N]\n", argv[0]);
      return 2;
    }
  }
  A2A3SimConfig cfg;  // block_dim 24, automatic thread counts
  Status st;
  auto chip = A2A3SimPlatform::create(cfg, &st);
  chip->register_kernel(kBusy, WorkerType::kCube, busy_wait);
  chip->register_kernel(kBusy, WorkerType::kVector, busy_wait);
  RuntimeConfig rc;
  rc.scheduler_threads = cfg.scheduler_threads();
  auto rt = Runtime::create(rc, *chip, &st);
  if (!rt) {
    std::fprintf(stderr, "%s\n", st.message.c_str());
    return 1;
  }
  // OS threads that execute kernels: the executors, or (inline) the schedulers.
  const int lanes = chip->executor_threads() > 0 ? chip->executor_threads() : rc.scheduler_threads;
  const uint32_t width = uint32_t(8 * lanes);
  std::vector<float> cells(2 * width, 0.f);
  std::printf("pto2_metg_bench: a2a3sim block_dim 24, %d OS thread(s) running kernels, width %u x %u steps\n", lanes,
              width, steps);
  std::printf("%-12s %10s %12s %12s\n", "pattern", "grain us", "efficiency", "us/task");
  const double grains_us[] = {100, 50, 20, 10, 5, 3, 2, 1, 0.5, 0.25};
  for (bool stencil : {false, true}) {
    double metg = -1;
    for (double g : grains_us) {
      const uint64_t grain_ns = uint64_t(g * 1000);
      run_pattern(*rt, stencil, grain_ns, width, 5, cells);  // warm-up
      double walls[3];
      for (double& w : walls) w = run_pattern(*rt, stencil, grain_ns, width, steps, cells);
      std::sort(walls, walls + 3);
      const double wall = walls[1];  // median of three
      const double tasks = double(width) * steps;
      const double eff = tasks * g * 1e-6 / (wall * lanes);
      std::printf("%-12s %10.2f %11.1f%% %12.3f\n", stencil ? "stencil-1d" : "independent", g, 100 * eff,
                  wall * 1e6 / tasks);
      // METG: the smallest grain that, with every larger grain, reaches 50%.
      if (eff >= 0.5 && (metg > 0 || g == grains_us[0]))
        metg = g;
      else if (eff < 0.5)
        break;
    }
    if (metg > 0)
      std::printf("METG(50%%) %s: %.2f us (target <= 5 us)\n\n", stencil ? "stencil-1d" : "independent", metg);
    else
      std::printf("METG(50%%) %s: above %.0f us\n\n", stencil ? "stencil-1d" : "independent", grains_us[0]);
  }
  return 0;
}
