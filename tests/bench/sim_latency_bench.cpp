// pto2_sim_latency_bench — is the simulated chip honest about small graphs?
//
// A reference simulator of this design, on a 2-CPU machine, quantised its
// timings to the 4 ms kernel tick because ~30 spinning threads shared 2 CPUs.
// This runs small graphs on a 72-core a2a3sim chip (block_dim 24) and prints
// the wall time per run (median, p99) and the CPU an idle chip uses, for 0
// (kernels inline on the AICPU scheduler thread), 1 and 2 executor threads.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "pto2/runtime.h"
#include "pto2/sim/a2a3sim.h"
#include "vector_example.h"

using namespace pto2;
using namespace pto2::sim;
namespace vx = pto2::vector_example;

namespace {

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 500;
  uint32_t n = 1024;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--elements") && i + 1 < argc)
      n = uint32_t(std::max(1, std::atoi(argv[++i])));
    else {
      std::printf("usage: %s [--runs N] [--elements N]\n", argv[0]);
      return 2;
    }
  }
  std::printf(
      "pto2_sim_latency_bench: vector example f=(a+b+1)(a+b+2), %u fp32, 4 tasks, %d runs per row; "
      "a2a3sim block_dim 24 (72 cores), %d usable CPUs\n",
      n, runs, usable_cpus());
  std::printf("%-10s %-10s %12s %12s %12s %16s\n", "executors", "schedulers", "median us", "p99 us", "max us",
              "idle CPU (%)");
  for (int executors : {0, 1, 2}) {
    A2A3SimConfig cfg;
    cfg.executor_threads = executors;
    Status st;
    auto chip = A2A3SimPlatform::create(cfg, &st);
    if (!chip) {
      std::fprintf(stderr, "%s\n", st.message.c_str());
      return 1;
    }
    chip->register_kernel(vx::kAdd, WorkerType::kVector, vx::add);
    chip->register_kernel(vx::kAddScalar, WorkerType::kVector, vx::add_scalar);
    chip->register_kernel(vx::kMul, WorkerType::kVector, vx::mul);
    RuntimeConfig rc;
    rc.task_window = 1024;
    rc.heap_size = 1 << 20;
    rc.scheduler_threads = cfg.scheduler_threads();
    auto rt = Runtime::create(rc, *chip, &st);
    if (!rt) {
      std::fprintf(stderr, "%s\n", st.message.c_str());
      return 1;
    }
    std::vector<float> a(n, 1.f), b(n, 2.f), f(n);
    std::vector<double> us;
    for (int r = 0; r < runs + 10; ++r) {
      RunResult res = rt->run([&](PTO2Runtime* p) {
        vx::orchestrate(p, a.data(), b.data(), f.data(), n);
        return 0;
      });
      if (!res.ok() || f[0] != 20.f || f[n - 1] != 20.f) {
        std::fprintf(stderr, "run failed: %s (f[0] = %g, expected 20)\n", res.status.message.c_str(), double(f[0]));
        return 1;
      }
      if (r >= 10) us.push_back(double(res.stats.wall_ns) / 1e3);
      // Let the chip go idle between runs, as a user's separate calls would.
      if (r % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::sort(us.begin(), us.end());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double c0 = cpu_seconds();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double idle = 100.0 * (cpu_seconds() - c0);
    std::printf("%-10d %-10d %12.1f %12.1f %12.1f %16.2f\n", chip->executor_threads(), cfg.scheduler_threads(),
                us[us.size() / 2], us[us.size() * 99 / 100], us.back(), idle);
  }
  std::printf("(the reference simulator's 4 ms tick = 4000 us per step)\n");
  return 0;
}
