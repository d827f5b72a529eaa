// pto.chip's engine (docs/python.md, "One chip"): a kernel package loaded
// onto one simulated a2a3 chip with one pto2::Runtime, run as many times as
// asked. Inputs come from numpy arrays (checked against the package's
// [[args]]: dtype and shape), outputs go back as numpy arrays; the GIL is
// released while the chip runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "errors.h"
#include "pto/package/chip_package.h"
#include "pto/package/example_data.h"
#include "pto/package/npy.h"
#include "pto2/runtime.h"
#include "pto2/sim/package_chip.h"

namespace py = pybind11;
using pto::package::ArgSpec;
using pto::package::ChipConfig;

namespace pto_py {
namespace {

const char* role_name(ArgSpec::Role r) {
  switch (r) {
    case ArgSpec::Role::kInput: return "input";
    case ArgSpec::Role::kOutput: return "output";
    case ArgSpec::Role::kInout: return "inout";
    case ArgSpec::Role::kScalar: return "scalar";
  }
  return "?";
}

std::string shape_text(const std::vector<uint64_t>& s) { return fmt::format("({})", fmt::join(s, ", ")); }

// The runtime options run() and Runtime() take as keywords; anything else is
// a TypeError naming it (an option is never accepted and ignored).
const std::set<std::string> kOptions = {"platform",          "block_dim",   "aicpu_threads", "executor_threads",
                                        "scheduler_threads", "task_window", "heap",          "dep_pool",
                                        "stall_timeout_ms",  "profile",     "block_mode",    "pipe_bytes",
                                        "pipe_timeout_ms",   "capture_mode"};

// The 64-bit value of a scalar argument from a Python number: a float for a
// float32 / float64 scalar is bit-cast, as the config's `value` is.
uint64_t scalar_bits(const ArgSpec& a, const py::handle& v) {
  if (a.dtype == PTO2_FLOAT32) {
    const float f = v.cast<float>();
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
  if (a.dtype == PTO2_FLOAT64) {
    const double d = v.cast<double>();
    uint64_t b;
    std::memcpy(&b, &d, 8);
    return b;
  }
  if (!py::isinstance<py::int_>(v))
    throw py::type_error(fmt::format("scalar '{}' is an integer argument; got {}", a.name,
                                     py::str(py::type::of(v)).cast<std::string>()));
  return static_cast<uint64_t>(v.cast<int64_t>());
}

// A C-contiguous array of the argument's dtype and shape, or a ValueError
// naming the argument, what it got and what the package wants.
py::array checked_array(const ArgSpec& a, const py::handle& obj, const char* what) {
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(fmt::format("{} '{}' must be a numpy array of {} {}", what, a.name,
                                     pto::package::npy_descr(a.dtype), shape_text(a.shape)));
  py::array arr = py::reinterpret_borrow<py::array>(obj);
  const std::string want = pto::package::npy_descr(a.dtype);
  const std::string got = py::str(arr.dtype().attr("str")).cast<std::string>();
  std::vector<uint64_t> shape(arr.shape(), arr.shape() + arr.ndim());
  if (got != want || shape != a.shape)
    throw py::value_error(fmt::format("{} '{}' is {} {}; the package wants {} {}", what, a.name, got, shape_text(shape),
                                      want, shape_text(a.shape)));
  return arr;
}

class ChipRunner {
 public:
  ChipRunner(const std::string& config, const py::kwargs& options) {
    if (pto::Status s = ChipConfig::load(config, &cfg_); !s.ok()) raise_error(s);
    pto2::sim::SimChipOptions sc = pto2::sim::chip_options(cfg_);
    rc_ = cfg_.runtime;
    if (pto::Status s = rc_.apply_env(); !s.ok()) raise_error(s);
    int scheduler_threads = 0;
    for (const auto& [k, v] : options) {
      const std::string key = py::str(k).cast<std::string>();
      if (!kOptions.count(key))
        throw py::type_error(fmt::format("unknown runtime option '{}' (known: {})", key, fmt::join(kOptions, ", ")));
      if (key == "block_dim" || key == "pipe_bytes" || key == "pipe_timeout_ms") a2a3_only_ = key;
      if (key == "platform") sc.platform = v.cast<std::string>();
      if (key == "block_dim") sc.a2a3.block_dim = v.cast<int>();
      if (key == "aicpu_threads") sc.a2a3.aicpu_threads = sc.tx8.aicpu_threads = v.cast<int>();
      if (key == "executor_threads") sc.a2a3.executor_threads = sc.tx8.executor_threads = v.cast<int>();
      if (key == "scheduler_threads") scheduler_threads = v.cast<int>();
      if (key == "task_window") rc_.task_window = v.cast<uint64_t>();
      if (key == "heap") rc_.heap_size = v.cast<uint64_t>();
      if (key == "dep_pool") rc_.dep_pool_size = v.cast<uint64_t>();
      if (key == "stall_timeout_ms") rc_.stall_timeout_ms = v.cast<uint32_t>();
      if (key == "profile") sc.a2a3.record_core_times = sc.tx8.record_core_times = rc_.profiling = v.cast<bool>();
      if (key == "pipe_bytes") sc.a2a3.pipe_bytes = v.cast<uint64_t>();
      if (key == "pipe_timeout_ms") sc.a2a3.pipe_timeout_ms = v.cast<uint32_t>();
      if (key == "block_mode") {
        const std::string mode = v.cast<std::string>();
        if (mode != "batch" && mode != "expand")
          throw py::value_error(fmt::format("block_mode '{}': must be 'batch' or 'expand'", mode));
        rc_.block_mode = mode == "batch" ? pto2::BlockMode::kBatch : pto2::BlockMode::kExpand;
      }
      if (key == "capture_mode") {
        const std::string mode = v.cast<std::string>();
        if (mode == "replay")
          rc_.capture_mode = pto2::CaptureMode::kReplay;
        else if (mode == "off")
          rc_.capture_mode = pto2::CaptureMode::kOff;
        else if (mode == "verify")
          rc_.capture_mode = pto2::CaptureMode::kVerify;
        else
          throw py::value_error(fmt::format("capture_mode '{}': must be 'replay', 'off' or 'verify'", mode));
      }
    }
    if (!a2a3_only_.empty() && sc.platform != "a2a3sim")
      throw py::value_error(
          fmt::format("{} is an a2a3sim setting (its clusters and pipes); {} has neither", a2a3_only_, sc.platform));
    if (pto::Status s = pto2::sim::load_package_chip(cfg_, sc, &chip_); !s.ok()) raise_error(s);
    rc_.scheduler_threads = scheduler_threads > 0 ? scheduler_threads : chip_.options.scheduler_threads();
    pto::Status st;
    runtime_ = pto2::Runtime::create(rc_, *chip_.platform, &st);
    if (!runtime_) raise_error(st);
  }

  py::list args() const {
    py::list out;
    for (const ArgSpec& a : cfg_.args) {
      py::dict d;
      d["name"] = a.name;
      d["role"] = role_name(a.role);
      if (a.is_tensor()) {
        d["dtype"] = py::dtype(pto::package::npy_descr(a.dtype));
        d["shape"] = py::tuple(py::cast(a.shape));
      } else {
        d["default"] = a.scalar;
      }
      out.append(d);
    }
    return out;
  }

  py::tuple run(const py::dict& inputs, const py::object& outputs);

 private:
  ChipConfig cfg_;
  std::string a2a3_only_;  // an a2a3sim-only option given, if any
  pto2::sim::PackageChip chip_;
  pto2::RuntimeConfig rc_;
  std::unique_ptr<pto2::Runtime> runtime_;
  std::mutex mu_;  // one run at a time on the chip
};

// The device buffers of one run, freed however it ends.
struct DeviceArgs {
  explicit DeviceArgs(pto2::sim::DeviceMemory& m) : memory(m) {}
  ~DeviceArgs() {
    for (void* p : device)
      if (p) (void)memory.free(p);
  }
  DeviceArgs(const DeviceArgs&) = delete;
  DeviceArgs& operator=(const DeviceArgs&) = delete;
  pto2::sim::DeviceMemory& memory;
  std::vector<void*> device;
  std::vector<uint64_t> values;
};

py::tuple ChipRunner::run(const py::dict& inputs, const py::object& outputs) {
  for (const auto& [k, v] : inputs) {
    const std::string key = py::str(k).cast<std::string>();
    bool known = false;
    for (const ArgSpec& a : cfg_.args) known |= a.name == key && (a.reads() || a.role == ArgSpec::Role::kScalar);
    if (!known) throw py::value_error(fmt::format("inputs: the package has no input, inout or scalar named '{}'", key));
  }
  py::dict out_given = outputs.is_none() ? py::dict() : outputs.cast<py::dict>();
  for (const auto& [k, v] : out_given) {
    const std::string key = py::str(k).cast<std::string>();
    bool known = false;
    for (const ArgSpec& a : cfg_.args) known |= a.name == key && a.writes();
    if (!known) throw py::value_error(fmt::format("outputs: the package has no output or inout named '{}'", key));
  }
  // Taken without the GIL: another thread may hold mu_ and need the GIL back.
  std::unique_lock<std::mutex> one_run(mu_, std::defer_lock);
  {
    py::gil_scoped_release free;
    one_run.lock();
  }
  pto2::sim::DeviceMemory& memory = chip_.platform->memory();
  DeviceArgs dev(memory);
  const size_t n = cfg_.args.size();
  dev.device.assign(n, nullptr);
  dev.values.assign(n, 0);
  std::vector<uint8_t> unwritten;
  for (size_t i = 0; i < n; ++i) {
    const ArgSpec& a = cfg_.args[i];
    const py::str key(a.name);
    if (a.role == ArgSpec::Role::kScalar) {
      dev.values[i] = inputs.contains(key) ? scalar_bits(a, inputs[key]) : a.scalar;
      continue;
    }
    if (pto::Status s = memory.alloc(a.bytes(), &dev.device[i]); !s.ok())
      raise_error(pto::Status::Error(s.code, fmt::format("argument {}: {}", a.name, s.message)));
    dev.values[i] = reinterpret_cast<uint64_t>(dev.device[i]);
    if (a.reads()) {
      if (!inputs.contains(key))
        throw py::value_error(fmt::format("inputs: '{}' ({} {} {}) is missing", a.name, role_name(a.role),
                                          pto::package::npy_descr(a.dtype), shape_text(a.shape)));
      py::array arr = py::array::ensure(checked_array(a, inputs[key], "input"), py::array::c_style);
      (void)memory.copy_to_device(dev.device[i], arr.data(), a.bytes());
    } else {
      // An element no task writes reads as NaN (floats) or 0xA5 bytes, never as a plausible zero.
      pto::package::fill_unwritten(a, unwritten);
      (void)memory.copy_to_device(dev.device[i], unwritten.data(), a.bytes());
    }
  }
  pto2::RunResult r;
  {
    py::gil_scoped_release free_gil;
    r = runtime_->run(chip_.orchestration.config, chip_.orchestration.entry, dev.values.data(), static_cast<int>(n));
  }
  if (!r.ok()) raise_error(r.status);
  py::dict result;
  for (size_t i = 0; i < n; ++i) {
    const ArgSpec& a = cfg_.args[i];
    if (!a.writes()) continue;
    const py::str key(a.name);
    py::array arr;
    if (out_given.contains(key)) {
      arr = checked_array(a, out_given[key], "output");
      if (!(arr.flags() & py::array::c_style) || !arr.writeable())
        throw py::value_error(fmt::format("output '{}' must be a writable C-contiguous array", a.name));
    } else {
      arr = py::array(py::dtype(pto::package::npy_descr(a.dtype)),
                      std::vector<py::ssize_t>(a.shape.begin(), a.shape.end()));
    }
    (void)memory.copy_from_device(arr.mutable_data(), dev.device[i], a.bytes());
    result[key] = arr;
  }
  py::dict stats;
  stats["tasks_submitted"] = r.stats.tasks_submitted;
  stats["tasks_completed"] = r.stats.tasks_completed;
  stats["wall_ms"] = double(r.stats.wall_ns) / 1e6;
  stats["orchestration_ms"] = double(r.stats.orchestrator_ns) / 1e6;
  stats["blocked_waits"] = r.stats.blocked_waits;
  stats["regions_recorded"] = r.stats.regions_recorded;
  stats["regions_replayed"] = r.stats.regions_replayed;
  stats["tasks_replayed"] = r.stats.tasks_replayed;
  stats["capture_mismatches"] = r.stats.capture_mismatches;
  stats["capture_unreplayable"] = r.stats.capture_unreplayable;
  stats["platform"] = chip_.platform->platform_name();
  if (chip_.options.platform == "a2a3sim") stats["block_dim"] = chip_.options.a2a3.block_dim;
  if (const auto* tx8 = dynamic_cast<const pto2::sim::Tx8SimPlatform*>(chip_.platform.get())) {
    const pto2::sim::Tx8RunStats t = tx8->run_stats();
    stats["sim_us"] = double(t.sim_ns) / 1000.0;
    stats["tile_utilisation"] = t.utilisation();
    stats["ddr_bytes"] = t.ddr_bytes;
    stats["noc_bytes"] = t.noc_bytes;
  }
  stats["scheduler_threads"] = rc_.scheduler_threads;
  return py::make_tuple(result, stats);
}

}  // namespace

void bind_chip_runner(py::module_& m) {
  py::class_<ChipRunner>(m, "ChipRunner",
                         "A kernel package loaded onto one simulated a2a3 chip (pto.chip.Runtime wraps it).")
      .def(py::init<const std::string&, const py::kwargs&>(), py::arg("config"),
           "Loads the package's kernels.toml and libraries; keywords are runtime options.")
      .def_property_readonly("args", &ChipRunner::args, "The package's [[args]]: name, role, dtype/shape or default.")
      .def("run", &ChipRunner::run, py::arg("inputs"), py::arg("outputs") = py::none(),
           "Runs once; returns (outputs, stats).");
}

}  // namespace pto_py
