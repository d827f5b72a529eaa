// pto2-run: runs one orchestration on one simulated chip (a2a3sim or tx8sim).
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

#include "pto/package/chip_package.h"
#include "pto/package/example_data.h"
#include "pto/package/npy.h"
#include "pto/version.h"
#include "pto2/runtime.h"
#include "pto2/sim/a2a3sim.h"
#include "pto2/sim/loader.h"
#include "pto2/sim/package_chip.h"
#include "pto2/sim/tensor_dump.h"
#include "pto2/sim/trace.h"

using namespace pto2;
using namespace pto2::sim;
using namespace pto::package;

namespace {

constexpr int kExitMismatch = 1;
constexpr int kExitError = 2;

// Prints the tool's one error line and gives the exit status of an error.
int fail(const std::string& message) {
  std::fprintf(stderr, "pto2-run: %s\n", message.c_str());
  return kExitError;
}

struct Options {
  std::string config_path, output_dir, trace_path, dump_dir, platform;
  std::vector<std::string> inputs, goldens;
  int block_dim = -1, aicpu_threads = -1, scheduler_threads = -1, executors = -2;
  uint64_t task_window = 0, heap = 0, dep_pool = 0;
  uint64_t seed = 0;
  int repeat = 1;
  bool no_golden = false, summary = false;
  // --input and --golden, by argument name.
  std::map<std::string, std::string> input_files, golden_files;

  bool profile() const { return summary || !trace_path.empty(); }
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("config", o.config_path, "kernel config (TOML) of the example")->required();
  app.add_option("-i,--input", o.inputs, "NAME=FILE.npy: take input NAME from a file (default: generate it)");
  app.add_option("-g,--golden", o.goldens,
                 "NAME=FILE.npy: compare output NAME with a file (default: reference library)");
  app.add_option("-o,--output-dir", o.output_dir, "write every output as DIR/NAME.npy (default: not written)");
  app.add_option("--platform", o.platform,
                 "the simulated chip: a2a3sim or tx8sim (default: the config's [runtime] platform, else a2a3sim)");
  app.add_option("--block-dim", o.block_dim, "clusters of an a2a3sim chip, 1..24 (default: the config's)");
  app.add_option("--aicpu-threads", o.aicpu_threads, "AICPU threads, 1 orchestrator + schedulers, 2..4");
  app.add_option("--scheduler-threads", o.scheduler_threads,
                 "scheduler OS threads (default: from --aicpu-threads and CPUs)");
  app.add_option("--executor-threads", o.executors, "OS threads running AICore work (-1 automatic, 0 inline)");
  app.add_option("--task-window", o.task_window, "task ring slots per ring (PTO2_RING_TASK_WINDOW)");
  app.add_option("--heap", o.heap, "heap ring bytes per ring (PTO2_RING_HEAP)");
  app.add_option("--dep-pool", o.dep_pool, "dependency-list entries per ring (PTO2_RING_DEP_POOL)");
  app.add_option("--seed", o.seed, "seed for generated inputs (default: the config's)");
  app.add_flag("--no-golden", o.no_golden, "run and write outputs without comparing");
  app.add_option("--repeat", o.repeat,
                 "run N times on one runtime, each run on fresh buffers (other addresses) with the same inputs; "
                 "runs after the first must give bit-identical outputs (captured regions replay there)")
      ->check(CLI::Range(1, 1000000));
  app.add_flag("--summary", o.summary,
               "profile the run and print tasks, wall time, per-core utilisation, scheduler overhead");
  app.add_option("--trace", o.trace_path,
                 "write a Chrome/Perfetto JSON swimlane trace (open at ui.perfetto.dev) and print a summary");
  app.add_option("--dump-tensors", o.dump_dir,
                 "after each task, write its tensors as DIR/task-<id>-<kernel>-arg<i>.npy (slow; for debugging)");
  app.set_version_flag("--version", "pto2-run " PTO_VERSION_STRING);
}

Status parse_pairs(const std::vector<std::string>& items, const char* flag, std::map<std::string, std::string>* m) {
  for (const std::string& s : items) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::Error(kInvalidArgument, fmt::format("{} '{}': expected NAME=FILE.npy", flag, s));
    (*m)[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return Status::Ok();
}

// --input names an argument the run reads, --golden one it writes.
Status check_file_names(const ChipConfig& cfg, const Options& o) {
  for (const auto& entry : o.input_files) {
    const std::string& name = entry.first;
    if (std::none_of(cfg.args.begin(), cfg.args.end(), [&](const ArgSpec& a) { return a.name == name && a.reads(); }))
      return Status::Error(kInvalidArgument,
                           fmt::format("--input {}: the config has no input or inout named '{}'", name, name));
  }
  for (const auto& entry : o.golden_files) {
    const std::string& name = entry.first;
    if (std::none_of(cfg.args.begin(), cfg.args.end(), [&](const ArgSpec& a) { return a.name == name && a.writes(); }))
      return Status::Error(kInvalidArgument,
                           fmt::format("--golden {}: the config has no output or inout named '{}'", name, name));
  }
  return Status::Ok();
}

// The chip and the user code it runs.
using Chip = PackageChip;

Status load_chip(const ChipConfig& cfg, const Options& o, Chip* chip) {
  SimChipOptions sc = chip_options(cfg, o.platform);
  if (sc.platform != "a2a3sim" && sc.platform != "tx8sim")
    return Status::Error(kInvalidArgument,
                         fmt::format("--platform {}: must be one of {}", sc.platform, known_platforms()));
  if (o.block_dim > 0 && sc.platform != "a2a3sim")
    return Status::Error(kInvalidArgument,
                         fmt::format("--block-dim {}: block_dim is a2a3sim's clusters; {}'s shape is its [tx8sim] mesh",
                                     o.block_dim, sc.platform));
  if (o.block_dim > 0) sc.a2a3.block_dim = o.block_dim;
  if (o.aicpu_threads > 0) sc.a2a3.aicpu_threads = sc.tx8.aicpu_threads = o.aicpu_threads;
  if (o.executors >= -1) sc.a2a3.executor_threads = sc.tx8.executor_threads = o.executors;
  sc.a2a3.record_core_times = sc.tx8.record_core_times = o.profile();
  sc.tx8.record_events = !o.trace_path.empty();
  return load_package_chip(cfg, sc, chip);
}

Status runtime_config(const ChipConfig& cfg, const Options& o, const Chip& chip, RuntimeConfig* rc) {
  *rc = cfg.runtime;
  if (Status st = rc->apply_env(); !st.ok()) return st;
  if (o.task_window) rc->task_window = o.task_window;
  if (o.heap) rc->heap_size = o.heap;
  if (o.dep_pool) rc->dep_pool_size = o.dep_pool;
  rc->scheduler_threads = o.scheduler_threads > 0 ? o.scheduler_threads : chip.options.scheduler_threads();
  if (o.profile()) rc->profiling = true;
  return Status::Ok();
}

// The orchestration's arguments: host copies, and device buffers that live as
// long as this object.
class Arguments {
 public:
  explicit Arguments(DeviceMemory& memory) : memory_(memory) {}
  ~Arguments() {
    for (void* p : device)
      if (p) (void)memory_.free(p);
  }
  Arguments(const Arguments&) = delete;
  Arguments& operator=(const Arguments&) = delete;

  // Inputs from files or generated, outputs filled so an unwritten element shows.
  Status prepare(const ChipConfig& cfg, const Options& o);
  // Copies what the run wrote back to the host (`got`), and into .npy files with -o.
  Status collect(const ChipConfig& cfg, const Options& o);

  std::vector<std::vector<uint8_t>> host, got;
  std::vector<void*> device;
  std::vector<uint64_t> dev_args, host_args;

 private:
  DeviceMemory& memory_;
};

Status read_input(const ArgSpec& a, const std::string& file, std::vector<uint8_t>* out) {
  NpyArray arr;
  Status rs = read_npy(file, &arr);
  if (rs.ok() && (arr.descr != npy_descr(a.dtype) || arr.shape != a.shape))
    rs = Status::Error(kInvalidArgument,
                       fmt::format("'{}' holds {} {}, the config wants {} [{}]", file, arr.descr,
                                   fmt::join(arr.shape, "x"), npy_descr(a.dtype), fmt::join(a.shape, "x")));
  if (!rs.ok()) return Status::Error(rs.code, fmt::format("input {}: {}", a.name, rs.message));
  *out = std::move(arr.data);
  return Status::Ok();
}

Status Arguments::prepare(const ChipConfig& cfg, const Options& o) {
  std::mt19937_64 rng(o.seed ? o.seed : cfg.seed);
  const size_t n = cfg.args.size();
  host.resize(n);
  device.assign(n, nullptr);
  dev_args.assign(n, 0);
  host_args.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const ArgSpec& a = cfg.args[i];
    if (a.role == ArgSpec::Role::kScalar) {
      dev_args[i] = host_args[i] = a.scalar;
      continue;
    }
    // The device buffer first: an argument larger than the device is refused
    // by name before its host copy is made (that was bad_alloc, or the OOM
    // killer, for a shape past the host's memory).
    if (Status ms = memory_.alloc(a.bytes(), &device[i]); !ms.ok())
      return Status::Error(ms.code, fmt::format("argument {}: {}", a.name, ms.message));
    if (a.role == ArgSpec::Role::kOutput)
      fill_unwritten(a, host[i]);
    else
      host[i].assign(a.bytes(), 0);
    if (a.reads()) {
      if (auto f = o.input_files.find(a.name); f != o.input_files.end()) {
        if (Status rs = read_input(a, f->second, &host[i]); !rs.ok()) return rs;
      } else {
        generate_input(a, rng, host[i]);
      }
    }
    (void)memory_.copy_to_device(device[i], host[i].data(), a.bytes());
    dev_args[i] = reinterpret_cast<uint64_t>(device[i]);
    host_args[i] = reinterpret_cast<uint64_t>(host[i].data());
  }
  return Status::Ok();
}

Status Arguments::collect(const ChipConfig& cfg, const Options& o) {
  if (!o.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.output_dir, ec);
    if (ec) return Status::Error(kInvalidArgument, fmt::format("cannot create {}: {}", o.output_dir, ec.message()));
  }
  got.assign(cfg.args.size(), {});
  for (size_t i = 0; i < cfg.args.size(); ++i) {
    const ArgSpec& a = cfg.args[i];
    if (!a.writes()) continue;
    got[i].resize(a.bytes());
    (void)memory_.copy_from_device(got[i].data(), device[i], a.bytes());
    if (o.output_dir.empty()) continue;
    const std::string file = (std::filesystem::path(o.output_dir) / (a.name + ".npy")).string();
    // numpy has no bfloat16: such outputs are written as their 16-bit patterns.
    const std::string descr = a.dtype == PTO_BFLOAT16 ? "<u2" : npy_descr(a.dtype);
    if (Status ws = write_npy(file, descr, a.shape, got[i].data(), a.bytes()); !ws.ok())
      return Status::Error(ws.code, fmt::format("output {}: {}", a.name, ws.message));
  }
  return Status::Ok();
}

// Tasks per kernel, in the config's order (dependency-only tasks last).
std::string tasks_per_kernel(const ChipConfig& cfg, const RunResult& run) {
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
  return line;
}

// Goldens: files first, then the reference library on the same inputs.
int check_goldens(const ChipConfig& cfg, const Options& o, Arguments& args) {
  bool need_reference = false;
  for (const ArgSpec& a : cfg.args) need_reference |= a.writes() && !o.golden_files.count(a.name);
  if (need_reference) {
    if (cfg.reference.empty())
      return fail("no golden for some outputs: give --golden NAME=FILE.npy or a [golden] library");
    if (Status rs = run_reference(cfg, args.host_args); !rs.ok()) return fail("golden: " + rs.message);
  }
  bool all_pass = true;
  for (size_t i = 0; i < cfg.args.size(); ++i) {
    const ArgSpec& a = cfg.args[i];
    if (!a.writes()) continue;
    const std::vector<uint8_t>* want = &args.host[i];
    NpyArray file;
    if (auto g = o.golden_files.find(a.name); g != o.golden_files.end()) {
      Status rs = read_npy(g->second, &file);
      if (rs.ok() && (file.descr != npy_descr(a.dtype) || file.data.size() != a.bytes()))
        rs = Status::Error(kInvalidArgument, fmt::format("'{}' holds {} with {} bytes; expected {} with {}", g->second,
                                                         file.descr, file.data.size(), npy_descr(a.dtype), a.bytes()));
      if (!rs.ok()) return fail(fmt::format("golden {}: {}", a.name, rs.message));
      want = &file.data;
    }
    const Comparison c = compare_output(a, args.got[i].data(), want->data());
    all_pass &= c.pass();
    std::printf("%s\n", c.describe(a).c_str());
  }
  return all_pass ? 0 : kExitMismatch;
}

std::string capture_line(const RunStats& s) {
  if (s.regions_recorded == 0 && s.regions_replayed == 0 && s.capture_unreplayable == 0) return "";
  return fmt::format("; captured regions: {} recorded, {} replayed ({} tasks){}", s.regions_recorded,
                     s.regions_replayed, s.tasks_replayed,
                     s.capture_unreplayable
                         ? fmt::format(", {} run plainly (a replay would not fit the rings)", s.capture_unreplayable)
                         : "");
}

// --repeat: runs 2..N on the same runtime, each on fresh device buffers
// allocated while the previous run's are still held (so at other addresses)
// with the same inputs; every output must equal run 1's byte for byte.
int repeat_runs(const ChipConfig& cfg, const Options& o, const Chip& chip, Runtime& runtime, const RunResult& first,
                const Arguments& first_args) {
  if (o.repeat <= 1) return 0;
  std::printf("run 1/%d: orchestration %.3f ms%s\n", o.repeat, double(first.stats.orchestrator_ns) / 1e6,
              capture_line(first.stats).c_str());
  std::unique_ptr<Arguments> held;
  for (int r = 2; r <= o.repeat; ++r) {
    auto args = std::make_unique<Arguments>(chip.platform->memory());
    if (Status st = args->prepare(cfg, o); !st.ok()) return fail(st.message);
    RunResult res = runtime.run(chip.orchestration.config, chip.orchestration.entry, args->dev_args.data(),
                                static_cast<int>(cfg.args.size()));
    if (!res.ok()) return fail(fmt::format("run {} failed: {} ({})", r, error_name(res.status.code), res.status.code));
    Options quiet = o;
    quiet.output_dir.clear();
    if (Status cs = args->collect(cfg, quiet); !cs.ok()) return fail(cs.message);
    for (size_t i = 0; i < cfg.args.size(); ++i) {
      if (!cfg.args[i].writes() || args->got[i] == first_args.got[i]) continue;
      return fail(fmt::format("run {}: output {} differs from run 1's", r, cfg.args[i].name));
    }
    std::printf("run %d/%d: orchestration %.3f ms%s, outputs bit-identical to run 1\n", r, o.repeat,
                double(res.stats.orchestrator_ns) / 1e6, capture_line(res.stats).c_str());
    held = std::move(args);  // freed after the next run's buffers exist
  }
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{
      "pto2-run — run one orchestration on one simulated chip (a2a3sim or tx8sim) and check its outputs.\n\n"
      "Example:\n  pto2-run build/examples/vector/kernels.toml\n"
      "  pto2-run build/examples/vector/kernels.toml --input a=a.npy --golden f=f_ref.npy --output-dir out\n"};
  Options o;
  add_options(app, o);
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
  if (Status st = ChipConfig::load(o.config_path, &cfg); !st.ok()) return fail(st.message);
  if (Status st = parse_pairs(o.inputs, "--input", &o.input_files); !st.ok()) return fail(st.message);
  if (Status st = parse_pairs(o.goldens, "--golden", &o.golden_files); !st.ok()) return fail(st.message);
  if (Status st = check_file_names(cfg, o); !st.ok()) return fail(st.message);
  Chip chip;
  if (Status st = load_chip(cfg, o, &chip); !st.ok()) return fail(st.message);
  RuntimeConfig rc;
  if (Status st = runtime_config(cfg, o, chip, &rc); !st.ok()) return fail(st.message);
  Arguments args(chip.platform->memory());
  if (Status st = args.prepare(cfg, o); !st.ok()) return fail(st.message);

  Status st;
  auto runtime = Runtime::create(rc, *chip.platform, &st);
  if (!runtime) return fail(st.message);
  auto name_of = [&cfg](int32_t id, int32_t type) -> std::string {
    if (type == 2) return "dependency-only";
    for (const KernelSpec& k : cfg.kernels)
      if (k.func_id == id && static_cast<int32_t>(k.core_type) == type) return k.name;
    return fmt::format("func{}", id);
  };
  std::unique_ptr<TensorDump> dump;
  if (!o.dump_dir.empty()) {
    dump = std::make_unique<TensorDump>(o.dump_dir, name_of);
    if (Status ds = dump->prepare(); !ds.ok()) return fail(ds.message);
    runtime->set_task_observer(dump.get());
  }
  const std::string orchestration_file = std::filesystem::path(cfg.orchestration).filename().string();
  const auto t0 = std::chrono::steady_clock::now();
  RunResult run = runtime->run(chip.orchestration.config, chip.orchestration.entry, args.dev_args.data(),
                               static_cast<int>(cfg.args.size()));
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  runtime->set_task_observer(nullptr);
  if (!run.ok())
    return fail(
        fmt::format("the run of {} failed: {} ({})", orchestration_file, error_name(run.status.code), run.status.code));
  if (dump) {
    if (Status ds = dump->status(); !ds.ok()) return fail(ds.message);
    std::printf("dumped %llu tensors to %s\n", (unsigned long long)dump->files(), o.dump_dir.c_str());
  }
  if (Status cs = args.collect(cfg, o); !cs.ok()) return fail(cs.message);

  std::printf(
      "ran %s: %llu tasks in %.3f ms (orchestration %.3f ms) on %s, %s, %d scheduler thread(s), %d "
      "executor thread(s)\n",
      orchestration_file.c_str(), (unsigned long long)run.stats.tasks_completed, wall_ms,
      double(run.stats.orchestrator_ns) / 1e6, chip.platform->platform_name(), chip.platform->shape().c_str(),
      rc.scheduler_threads, chip.platform->executor_threads());
  if (!o.trace_path.empty()) {
    if (Status ts = write_chrome_trace(o.trace_path, run, *chip.platform, rc.scheduler_threads, name_of); !ts.ok())
      return fail(ts.message);
    std::printf("trace: %s (open at https://ui.perfetto.dev)\n", o.trace_path.c_str());
  }
  if (o.profile()) {
    std::printf("%s\n", summarize(run, *chip.platform).c_str());
    if (const std::string extra = chip.platform->run_summary(run.stats.wall_ns); !extra.empty())
      std::printf("%s\n", extra.c_str());
    std::printf("tasks per kernel: %s\n", tasks_per_kernel(cfg, run).c_str());
  }
  if (int rc_repeat = repeat_runs(cfg, o, chip, *runtime, run, args); rc_repeat != 0) return rc_repeat;
  if (o.no_golden) return 0;
  return check_goldens(cfg, o, args);
}

}  // namespace

int main(int argc, char** argv) {
  // Errors are exit status 2 with a message; an exception that still gets
  // here (out of memory, a library's bug) is reported the same way.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what());
  } catch (...) {
    return fail("internal error");
  }
}
