// pto2-run: runs one orchestration on one simulated a2a3 chip.
//
//   pto2-run examples/vector/kernels.toml
//
// Loads the kernel config (TOML), the kernel and orchestration libraries;
// prepares the orchestration's arguments in simulated device memory (inputs
// from .npy files or generated from the config), runs, writes every output as
// .npy, and compares each output with a golden (a .npy file, or the example's
// reference library run on the same inputs) within the configured tolerances:
//
//   f: PASS (16384/16384 elements matched)
//
// Outputs start as NaN (floats) or a 0xA5 byte pattern (integers), so an
// element no task wrote cannot pass a golden of zero; an accumulator that
// must start from data is an "inout" argument. Outputs are written as .npy
// only with --output-dir.
//
// Exit status: 0 all outputs match, 1 a mismatch, 2 an error (command line,
// config, loading, the run itself). A run's error is printed once, by the
// runtime's log.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "pto/version.h"
#include "pto2/runtime.h"
#include "pto2/sim/a2a3sim.h"
#include "pto/package/chip_package.h"
#include "pto/package/example_data.h"
#include "pto2/sim/loader.h"
#include "pto/package/npy.h"
#include "pto2/sim/tensor_dump.h"
#include "pto2/sim/trace.h"

using namespace pto2;
using namespace pto2::sim;
using namespace pto::package;

namespace {

constexpr int kExitMismatch = 1;
constexpr int kExitError = 2;

std::map<std::string, std::string> parse_pairs(const std::vector<std::string>& items, const char* flag, bool* ok) {
  std::map<std::string, std::string> m;
  for (const std::string& s : items) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "pto2-run: %s '%s': expected NAME=FILE.npy\n", flag, s.c_str());
      *ok = false;
      continue;
    }
    m[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "pto2-run — run one orchestration on one simulated a2a3 chip and check its outputs.\n\n"
      "Example:\n  pto2-run build/examples/vector/kernels.toml\n"
      "  pto2-run build/examples/vector/kernels.toml --input a=a.npy --golden f=f_ref.npy --output-dir out\n"};
  std::string config_path, output_dir, trace_path, dump_dir;
  std::vector<std::string> inputs, goldens;
  int block_dim = -1, aicpu_threads = -1, scheduler_threads = -1, executors = -2;
  uint64_t task_window = 0, heap = 0, dep_pool = 0;
  uint64_t seed = 0;
  bool no_golden = false, summary = false;
  app.add_option("config", config_path, "kernel config (TOML) of the example")->required();
  app.add_option("-i,--input", inputs, "NAME=FILE.npy: take input NAME from a file (default: generate it)");
  app.add_option("-g,--golden", goldens, "NAME=FILE.npy: compare output NAME with a file (default: reference library)");
  app.add_option("-o,--output-dir", output_dir, "write every output as DIR/NAME.npy (default: not written)");
  app.add_option("--block-dim", block_dim, "clusters of the chip, 1..24 (default: the config's)");
  app.add_option("--aicpu-threads", aicpu_threads, "AICPU threads, 1 orchestrator + schedulers, 2..4");
  app.add_option("--scheduler-threads", scheduler_threads,
                 "scheduler OS threads (default: from --aicpu-threads and CPUs)");
  app.add_option("--executor-threads", executors, "OS threads running AICore work (-1 automatic, 0 inline)");
  app.add_option("--task-window", task_window, "task ring slots per ring (PTO2_RING_TASK_WINDOW)");
  app.add_option("--heap", heap, "heap ring bytes per ring (PTO2_RING_HEAP)");
  app.add_option("--dep-pool", dep_pool, "dependency-list entries per ring (PTO2_RING_DEP_POOL)");
  app.add_option("--seed", seed, "seed for generated inputs (default: the config's)");
  app.add_flag("--no-golden", no_golden, "run and write outputs without comparing");
  app.add_flag("--summary", summary,
               "profile the run and print tasks, wall time, per-core utilisation, scheduler overhead");
  app.add_option("--trace", trace_path,
                 "write a Chrome/Perfetto JSON swimlane trace (open at ui.perfetto.dev) and print a summary");
  app.add_option("--dump-tensors", dump_dir,
                 "after each task, write its tensors as DIR/task-<id>-<kernel>-arg<i>.npy (slow; for debugging)");
  app.set_version_flag("--version", "pto2-run " PTO_VERSION_STRING);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every command-line error exits 2.
    return app.exit(e) == 0 ? 0 : kExitError;
  }
  // The runtime's log is where a run's error is told, once; here it reads as
  // the tool's own line.
  spdlog::set_pattern("pto2-run: %v");

  ChipConfig cfg;
  if (Status st = ChipConfig::load(config_path, &cfg); !st.ok()) {
    std::fprintf(stderr, "pto2-run: %s\n", st.message.c_str());
    return kExitError;
  }
  bool pairs_ok = true;
  const auto input_files = parse_pairs(inputs, "--input", &pairs_ok);
  const auto golden_files = parse_pairs(goldens, "--golden", &pairs_ok);
  if (!pairs_ok) return kExitError;
  for (const auto& [name, file] : input_files) {
    (void)file;
    if (std::none_of(cfg.args.begin(), cfg.args.end(), [&](const ArgSpec& a) { return a.name == name && a.reads(); })) {
      std::fprintf(stderr, "pto2-run: --input %s: the config has no input or inout named '%s'\n", name.c_str(),
                   name.c_str());
      return kExitError;
    }
  }
  for (const auto& [name, file] : golden_files) {
    (void)file;
    if (std::none_of(cfg.args.begin(), cfg.args.end(),
                     [&](const ArgSpec& a) { return a.name == name && a.writes(); })) {
      std::fprintf(stderr, "pto2-run: --golden %s: the config has no output or inout named '%s'\n", name.c_str(),
                   name.c_str());
      return kExitError;
    }
  }

  // Runtime config: the file's [runtime], then PTO2_* variables, then flags.
  RuntimeConfig rc = cfg.runtime;
  if (Status st = rc.apply_env(); !st.ok()) {
    std::fprintf(stderr, "pto2-run: %s\n", st.message.c_str());
    return kExitError;
  }
  if (task_window) rc.task_window = task_window;
  if (heap) rc.heap_size = heap;
  if (dep_pool) rc.dep_pool_size = dep_pool;

  A2A3SimConfig sc;
  sc.block_dim = block_dim > 0 ? block_dim : cfg.block_dim;
  sc.aicpu_threads = aicpu_threads > 0 ? aicpu_threads : cfg.aicpu_threads;
  if (executors >= -1) sc.executor_threads = executors;
  const bool profile = summary || !trace_path.empty();
  sc.record_core_times = profile;
  Status st;
  auto chip = A2A3SimPlatform::create(sc, &st);
  if (!chip) {
    std::fprintf(stderr, "pto2-run: %s\n", st.message.c_str());
    return kExitError;
  }
  rc.scheduler_threads = scheduler_threads > 0 ? scheduler_threads : sc.scheduler_threads();
  if (profile) rc.profiling = true;

  // User code.
  std::vector<KernelLibrary> kernels(cfg.kernels.size());
  for (size_t i = 0; i < cfg.kernels.size(); ++i) {
    if (Status ls = load_kernel(cfg.kernels[i].library, &kernels[i]); !ls.ok()) {
      std::fprintf(stderr, "pto2-run: kernel %d (%s): %s\n", cfg.kernels[i].func_id, cfg.kernels[i].name.c_str(),
                   ls.message.c_str());
      return kExitError;
    }
    chip->register_kernel(cfg.kernels[i].func_id, cfg.kernels[i].core_type, kernels[i].entry);
  }
  OrchestrationLibrary orch;
  if (Status ls = load_orchestration(cfg.orchestration, &orch); !ls.ok()) {
    std::fprintf(stderr, "pto2-run: orchestration: %s\n", ls.message.c_str());
    return kExitError;
  }

  // Arguments: host copies, device buffers.
  std::mt19937_64 rng(seed ? seed : cfg.seed);
  const size_t nargs = cfg.args.size();
  std::vector<std::vector<uint8_t>> host(nargs);
  std::vector<void*> device(nargs, nullptr);
  std::vector<uint64_t> dev_args(nargs), host_args(nargs);
  auto free_all = [&] {
    for (void* p : device)
      if (p) (void)chip->memory().free(p);
  };
  for (size_t i = 0; i < nargs; ++i) {
    const ArgSpec& a = cfg.args[i];
    if (a.role == ArgSpec::Role::kScalar) {
      dev_args[i] = host_args[i] = a.scalar;
      continue;
    }
    if (a.role == ArgSpec::Role::kOutput)
      fill_unwritten(a, host[i]);
    else
      host[i].assign(a.bytes(), 0);
    if (a.reads()) {
      auto f = input_files.find(a.name);
      if (f != input_files.end()) {
        NpyArray arr;
        Status rs = read_npy(f->second, &arr);
        if (rs.ok() && (arr.descr != npy_descr(a.dtype) || arr.shape != a.shape))
          rs = Status::Error(kInvalidArgument,
                             fmt::format("'{}' holds {} {}, the config wants {} [{}]", f->second, arr.descr,
                                         fmt::join(arr.shape, "x"), npy_descr(a.dtype), fmt::join(a.shape, "x")));
        if (!rs.ok()) {
          std::fprintf(stderr, "pto2-run: input %s: %s\n", a.name.c_str(), rs.message.c_str());
          free_all();
          return kExitError;
        }
        host[i] = std::move(arr.data);
      } else {
        generate_input(a, rng, host[i]);
      }
    }
    if (Status ms = chip->memory().alloc(a.bytes(), &device[i]); !ms.ok()) {
      std::fprintf(stderr, "pto2-run: argument %s: %s\n", a.name.c_str(), ms.message.c_str());
      free_all();
      return kExitError;
    }
    (void)chip->memory().copy_to_device(device[i], host[i].data(), a.bytes());
    dev_args[i] = reinterpret_cast<uint64_t>(device[i]);
    host_args[i] = reinterpret_cast<uint64_t>(host[i].data());
  }

  auto runtime = Runtime::create(rc, *chip, &st);
  if (!runtime) {
    std::fprintf(stderr, "pto2-run: %s\n", st.message.c_str());
    free_all();
    return kExitError;
  }
  auto name_of = [&](int32_t id, int32_t type) -> std::string {
    if (type == 2) return "dependency-only";
    for (const KernelSpec& k : cfg.kernels)
      if (k.func_id == id && static_cast<int32_t>(k.core_type) == type) return k.name;
    return fmt::format("func{}", id);
  };
  std::unique_ptr<TensorDump> dump;
  if (!dump_dir.empty()) {
    dump = std::make_unique<TensorDump>(dump_dir, name_of);
    if (Status ds = dump->prepare(); !ds.ok()) {
      std::fprintf(stderr, "pto2-run: %s\n", ds.message.c_str());
      free_all();
      return kExitError;
    }
    runtime->set_task_observer(dump.get());
  }
  const auto t0 = std::chrono::steady_clock::now();
  RunResult run = runtime->run(orch.config, orch.entry, dev_args.data(), static_cast<int>(nargs));
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  runtime->set_task_observer(nullptr);
  if (!run.ok()) {
    std::fprintf(stderr, "pto2-run: the run of %s failed: %s (%d)\n",
                 std::filesystem::path(cfg.orchestration).filename().c_str(), error_name(run.status.code),
                 run.status.code);
    free_all();
    return kExitError;
  }
  if (dump) {
    if (Status ds = dump->status(); !ds.ok()) {
      std::fprintf(stderr, "pto2-run: %s\n", ds.message.c_str());
      free_all();
      return kExitError;
    }
    std::printf("dumped %llu tensors to %s\n", (unsigned long long)dump->files(), dump_dir.c_str());
  }

  // Outputs.
  if (!output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(output_dir, ec);
    if (ec) {
      std::fprintf(stderr, "pto2-run: cannot create %s: %s\n", output_dir.c_str(), ec.message().c_str());
      free_all();
      return kExitError;
    }
  }
  std::vector<std::vector<uint8_t>> got(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    const ArgSpec& a = cfg.args[i];
    if (!a.writes()) continue;
    got[i].resize(a.bytes());
    (void)chip->memory().copy_from_device(got[i].data(), device[i], a.bytes());
    if (output_dir.empty()) continue;
    const std::string file = (std::filesystem::path(output_dir) / (a.name + ".npy")).string();
    if (Status ws = write_npy(file, npy_descr(a.dtype), a.shape, got[i].data(), a.bytes()); !ws.ok()) {
      std::fprintf(stderr, "pto2-run: output %s: %s\n", a.name.c_str(), ws.message.c_str());
      free_all();
      return kExitError;
    }
  }
  free_all();
  std::printf(
      "ran %s: %llu tasks in %.3f ms (orchestration %.3f ms), block_dim %d, %d scheduler thread(s), %d "
      "executor thread(s)\n",
      std::filesystem::path(cfg.orchestration).filename().c_str(), (unsigned long long)run.stats.tasks_completed,
      wall_ms, double(run.stats.orchestrator_ns) / 1e6, sc.block_dim, rc.scheduler_threads, chip->executor_threads());
  if (!trace_path.empty()) {
    if (Status ts = write_chrome_trace(trace_path, run, *chip, rc.scheduler_threads, name_of); !ts.ok()) {
      std::fprintf(stderr, "pto2-run: %s\n", ts.message.c_str());
      return kExitError;
    }
    std::printf("trace: %s (open at https://ui.perfetto.dev)\n", trace_path.c_str());
  }
  if (profile) {
    std::printf("%s\n", summarize(run, *chip).c_str());
    // Tasks per kernel, in the config's order (dependency-only tasks last).
    std::map<std::pair<int32_t, int32_t>, uint64_t> per_kernel;
    for (const TaskRecord& t : run.records) ++per_kernel[{t.kernel_id, t.worker_type}];
    std::string line;
    for (const KernelSpec& k : cfg.kernels) {
      auto it = per_kernel.find({k.func_id, static_cast<int32_t>(k.core_type)});
      line += fmt::format("{}{} {}", line.empty() ? "" : ", ", k.name, it == per_kernel.end() ? 0 : it->second);
    }
    uint64_t deps_only = 0;
    for (const auto& [key, n] : per_kernel) deps_only += key.second == 2 ? n : 0;
    if (deps_only) line += fmt::format(", dependency-only {}", deps_only);
    std::printf("tasks per kernel: %s\n", line.c_str());
  }
  if (no_golden) return 0;

  // Goldens: files first, then the reference library on the same inputs.
  bool need_reference = false;
  for (const ArgSpec& a : cfg.args) need_reference |= a.writes() && !golden_files.count(a.name);
  if (need_reference) {
    if (cfg.reference.empty()) {
      std::fprintf(stderr, "pto2-run: no golden for some outputs: give --golden NAME=FILE.npy or a [golden] library\n");
      return kExitError;
    }
    if (Status rs = run_reference(cfg, host_args); !rs.ok()) {
      std::fprintf(stderr, "pto2-run: golden: %s\n", rs.message.c_str());
      return kExitError;
    }
  }
  bool all_pass = true;
  for (size_t i = 0; i < nargs; ++i) {
    const ArgSpec& a = cfg.args[i];
    if (!a.writes()) continue;
    const std::vector<uint8_t>* want = &host[i];
    NpyArray file;
    if (auto g = golden_files.find(a.name); g != golden_files.end()) {
      Status rs = read_npy(g->second, &file);
      if (rs.ok() && (file.descr != npy_descr(a.dtype) || file.data.size() != a.bytes()))
        rs = Status::Error(kInvalidArgument, fmt::format("'{}' holds {} with {} bytes; expected {} with {}", g->second,
                                                         file.descr, file.data.size(), npy_descr(a.dtype), a.bytes()));
      if (!rs.ok()) {
        std::fprintf(stderr, "pto2-run: golden %s: %s\n", a.name.c_str(), rs.message.c_str());
        return kExitError;
      }
      want = &file.data;
    }
    const Comparison c = compare_output(a, got[i].data(), want->data());
    all_pass &= c.pass();
    std::printf("%s\n", c.describe(a).c_str());
  }
  return all_pass ? 0 : kExitMismatch;
}
