// pto.Worker (docs/python.md, "The Worker"): the L3 engine with Python
// orchestrations (orchestration.h) and Python sub callables (sub_callables.h)
// over numpy arrays; level 4 with L3 children and remote ptod peers.
//
// The rule that keeps the GIL and the engine's locks apart: the GIL is never
// held while calling into the engine (every call here and in orchestration.cpp
// releases it first), and Python code runs only with the GIL and no engine
// lock held. So an engine thread that needs the GIL (an orchestration on a
// run thread, the fork hooks of a replacement child) always gets it.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "arrays.h"
#include "deferred_release.h"
#include "errors.h"
#include "orchestration.h"
#include "pto/package/chip_package.h"
#include "pto/v1/ptod.pb.h"
#include "pto/worker.h"
#include "remote_link.h"
#include "sub_callables.h"

namespace py = pybind11;

namespace pto_py {
namespace {

struct PyCallable {
  pto::Callable c;
};

py::object handle_repr(const pto::CallableHandle& h) {
  return py::str(fmt::format("<pto.CallableHandle {} {}>", h.id.short_hex(), pto::abi_name(h.abi)));
}

// What a level-4 Worker's remote peers (ptods) register: the RegisterRequest
// ptod's Registry takes — a chip package as its bundle, a native library by
// path and symbol.
std::string remote_request(const pto::Callable& c) {
  pto::v1::RegisterRequest req;
  if (c.kind == pto::CallableKind::CHIP) {
    pto::package::ChipBundle b;
    if (pto::Status s = pto::package::bundle_package(c.path, &b); !s.ok()) raise_error(s);
    req.mutable_chip()->set_config_toml(b.config_toml);
    for (const auto& [name, bytes] : b.libraries) (*req.mutable_chip()->mutable_libraries())[name] = bytes;
  } else if (c.kind == pto::CallableKind::NATIVE_IMPORT) {
    req.mutable_native_import()->set_library_path(c.path);
    req.mutable_native_import()->set_symbol(c.symbol);
    req.set_abi(c.abi == pto::EntryAbi::ORCHESTRATION ? pto::v1::ABI_ORCHESTRATION : pto::v1::ABI_SUB);
  } else {
    throw py::value_error("only chip packages and native imports can be registered on remote peers");
  }
  return req.SerializeAsString();
}

const std::set<std::string> kWorkerOptions = {"level",
                                              "num_chips",
                                              "num_sub_workers",
                                              "platform",
                                              "heap_ring_bytes",
                                              "buffer_arena_bytes",
                                              "spin_us",
                                              "task_timeout_ms",
                                              "max_concurrent_runs",
                                              "liveness_timeout_ms",
                                              "name",
                                              "state_dir",
                                              "init_timeout_ms",
                                              "child_cpus"};

class PyWorker {
 public:
  explicit PyWorker(const py::kwargs& kw) {
    pto::WorkerConfig c;
    // w.alloc()'s arrays keep this Worker alive: after close() they still
    // read its arena (unmapped, they faulted).
    c.keep_arena_until_destroyed = true;
    for (const auto& [k, v] : kw) {
      const std::string key = py::str(k).cast<std::string>();
      if (!kWorkerOptions.count(key))
        throw py::type_error(
            fmt::format("unknown Worker option '{}' (known: {})", key, fmt::join(kWorkerOptions, ", ")));
      if (key == "level") c.level = v.cast<int>();
      if (key == "num_chips") c.num_chips = v.cast<int>();
      if (key == "num_sub_workers") c.num_sub_workers = v.cast<int>();
      if (key == "platform") c.platform = v.cast<std::string>();
      if (key == "heap_ring_bytes") c.heap_ring_bytes = v.cast<uint64_t>();
      if (key == "buffer_arena_bytes") c.buffer_arena_bytes = v.cast<uint64_t>();
      if (key == "spin_us") c.spin_us = v.cast<uint32_t>();
      if (key == "task_timeout_ms") c.task_timeout_ms = v.cast<uint64_t>();
      if (key == "max_concurrent_runs") c.max_concurrent_runs = v.cast<int>();
      if (key == "liveness_timeout_ms") c.liveness_timeout_ms = v.cast<uint32_t>();
      if (key == "name") c.name = v.cast<std::string>();
      if (key == "state_dir") c.state_dir = v.cast<std::string>();
      if (key == "init_timeout_ms") c.init_timeout_ms = v.cast<uint32_t>();
      if (key == "child_cpus")  // any iterable of CPU numbers: a list, os.sched_getaffinity()'s set
        for (py::handle cpu : v.cast<py::iterable>()) c.child_cpus.push_back(cpu.cast<int>());
    }
    if (pto::Status s = c.validate(); !s.ok()) raise_error(s);
    w_ = std::make_unique<pto::Worker>(c);
  }
  // Closing waits for runs whose Python orchestrations need the GIL, and for
  // forks whose hooks take it: never with the GIL held.
  ~PyWorker() {
    try {
      if (w_ && Py_IsInitialized()) {
        py::gil_scoped_release free;
        w_.reset();
      }
      // Nothing may leave a destructor; close() reports its errors where it can.
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
  }
  PyWorker(const PyWorker&) = delete;
  PyWorker& operator=(const PyWorker&) = delete;

  pto::CallableHandle register_callable(const py::object& what, const std::string& name) {
    pto::Callable c;
    if (py::isinstance<PyCallable>(what)) {
      c = what.cast<PyCallable&>().c;
    } else if (PyCallable_Check(what.ptr())) {
      // Inherited through fork: the object itself is the identity (two closures
      // of one factory share a qualname); registered functions are never freed,
      // so an id is never another function's.
      c = initialized_ ? pto::NativeCallable::by_reference(reference_name(what))
                       : pto::NativeCallable::function(
                             fmt::format("{}#{:x}", qualified_name(what), reinterpret_cast<uintptr_t>(what.ptr())),
                             python_sub(what));
    } else {
      throw py::type_error("register() takes a pto callable (ChipCallable.from_config, ...) or a Python function");
    }
    // Level 4 with remote peers: what each peer registers (ptod's
    // RegisterRequest: the chip package's bundle, or the native import).
    pto::CallableOptions o;
    o.local = local_children_ > 0 || c.abi == pto::EntryAbi::SUB;
    if (remote_children_ > 0 && c.abi != pto::EntryAbi::SUB) o.remote_payload = remote_request(c);
    pto::CallableHandle h;
    {
      py::gil_scoped_release free;
      h = w().register_callable(c, o);
      if (h.ok() && !name.empty()) {
        if (pto::Status s = w().name_callable(name, h); !s.ok()) h.status = s;
      }
    }
    if (!h.ok()) raise_error(h.status);
    return h;
  }

  void init() {
    pto::Status s;
    {
      py::gil_scoped_release free;
      s = w().init();
    }
    if (!s.ok()) raise_error(s);
    initialized_ = true;
  }

  void close() {
    release_deferred();
    pto::Status s;
    {
      py::gil_scoped_release free;
      s = w().close();
    }
    if (!s.ok()) raise_error(s);
  }

  // A numpy array over the Worker's shared arena: what a chip or sub task
  // writes into it is visible here without a copy. Freed when the array (and
  // every view of it) is gone, if the Worker is still open.
  py::array alloc(const std::vector<uint32_t>& shape, const py::object& dtype, py::object self) {
    release_deferred();
    const int32_t d = pto_dtype(py::dtype::from_args(dtype));
    pto::Result<pto::ContinuousTensor> r;
    {
      py::gil_scoped_release free;
      r = w().alloc(shape, d);
    }
    if (!r.ok()) raise_error(r.status);
    auto* owner = new std::pair<py::object, pto::ContinuousTensor>(std::move(self), r.value);
    py::capsule base(owner, [](void* p) {
      auto* o = static_cast<std::pair<py::object, pto::ContinuousTensor>*>(p);
      PyWorker& w = o->first.cast<PyWorker&>();
      {
        py::gil_scoped_release free;
        if (w.w_) (void)w.w_->free(o->second);  // a closed Worker refuses, harmlessly
      }
      delete o;
    });
    return array_over(r.value, base);
  }

  // Runs `orch` as one run and waits for it. Ctrl-C while waiting cancels the
  // run, waits for it to end, and re-raises KeyboardInterrupt.
  PyRunResult run(const py::object& orch, const py::object& args, const py::object& cfg) {
    release_deferred();
    pto::RunHandle h = submit(orch, args, cfg);
    for (;;) {
      bool done;
      {
        py::gil_scoped_release free;
        done = h.wait(std::chrono::milliseconds(50));
      }
      if (done) return PyRunResult{h.result()};
      if (PyErr_CheckSignals() != 0) {
        py::error_already_set interrupted;
        {
          py::gil_scoped_release free;
          (void)h.cancel("interrupted (KeyboardInterrupt)");
          (void)h.wait(std::chrono::seconds(30));
        }
        throw interrupted;
      }
    }
  }

  pto::RunHandle submit(const py::object& orch, const py::object& args, const py::object& cfg) {
    if (!initialized_) throw py::value_error("run() and submit() need an initialised Worker: call init() first");
    pto::TaskArgs a;
    release_deferred();
    // Let go of on an engine thread (the run's end): what it kept is released
    // on a Python thread (deferred_release.h).
    auto keep = std::shared_ptr<RunKeep>(new RunKeep, [](RunKeep* k) {
      if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing to release
      py::gil_scoped_acquire gil;
      release_on_python_thread(std::move(k->objects));
      delete k;
    });
    if (!args.is_none()) {
      a = args.cast<PyTaskArgs&>().args;
      keep->add(args.cast<PyTaskArgs&>().keep);
    }
    const pto::CallConfig c = call_config(cfg);
    pto::OrchestrationFunction fn = python_orchestration(orch, keep);
    // The run's end (on an engine thread, with no engine lock held) lets go of
    // what it kept - released on a Python thread: the last reference to the
    // Worker itself may be among it.
    auto done = [keep](const pto::RunResult&) {
      if (!Py_IsInitialized()) return;
      py::gil_scoped_acquire gil;
      release_on_python_thread(std::move(keep->objects));
      keep->objects = py::list();
    };
    pto::Worker& worker = w();
    py::gil_scoped_release free;
    return worker.submit_function(std::move(fn), std::move(a), c, std::move(done));
  }

  // Level 4: an L3 Worker (not initialised) becomes a child of this one.
  void add_next_level_worker(PyWorker& inner) {
    if (!inner.w_) throw py::value_error("that Worker was already given to a level-4 Worker");
    pto::Status s;
    {
      py::gil_scoped_release free;
      s = w().add_next_level_worker(std::move(inner.w_));  // taken only when accepted
    }
    if (!s.ok()) raise_error(s);
    ++local_children_;
  }

  // Level 4: an L3 ptod elsewhere (docs/remote.md), reached over a remote
  // session at `address` ("host:port" or "unix:PATH") with its bearer token.
  void add_remote_worker(const std::string& address, const std::string& token, const std::string& name) {
    ptod::DaemonConfig::Peer p;
    p.address = address;
    p.name = name.empty() ? address : name;
    p.token = token;
    auto link = std::make_shared<ptod::GrpcRemoteLink>(p, static_cast<uint32_t>(local_children_ + remote_children_),
                                                       *session_cfg_);
    pto::Status s;
    {
      py::gil_scoped_release free;
      s = w().add_remote_worker(link);
    }
    if (!s.ok()) raise_error(s);
    ++remote_children_;
  }

  // For the benchmark (tests/bench/python_bench.py): the same submits from a
  // C++ orchestration, the baseline a Python orchestration is measured against.
  double native_submits_s(const pto::CallableHandle& h, int n, int runs) {
    py::gil_scoped_release free;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < runs; ++r) {
      pto::RunResult res = w().run([&](pto::Orchestrator& o, const pto::TaskArgsView&, const pto::CallConfig&) {
        for (int i = 0; i < n; ++i)
          if (!o.submit_sub(h).ok()) return 1;
        return 0;
      });
      if (!res.ok()) return -1;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  py::list children() const {
    std::vector<pto::ChildInfo> cs;
    {
      py::gil_scoped_release free;
      cs = w().children();
    }
    py::list out;
    for (const auto& c : cs) {
      py::dict d;
      d["label"] = c.label();
      d["pid"] = c.pid;
      d["state"] = pto::child_state_name(c.state);
      d["tasks_run"] = c.tasks_run;
      d["restarts"] = c.restarts;
      d["remote"] = c.remote;
      if (c.remote) {
        d["address"] = c.address;
        d["session"] = c.state_text;
      }
      out.append(d);
    }
    return out;
  }

 private:
  pto::Worker& w() const {
    if (!w_) throw py::value_error("this Worker was given to a level-4 Worker (add_next_level_worker): use that one");
    return *w_;
  }
  std::unique_ptr<pto::Worker> w_;
  bool initialized_ = false;
  // L3 children and remote workers added (their sum: the next remote's worker id).
  int local_children_ = 0, remote_children_ = 0;
  // What the remote links of a level-4 Worker read (session settings; their defaults).
  std::unique_ptr<ptod::DaemonConfig> session_cfg_ = std::make_unique<ptod::DaemonConfig>();
};

void bind_callables(py::module_& m) {
  py::class_<PyCallable> callable(m, "Callable", "Something a Worker can register.");
  (void)callable;
  m.def(
      "chip_callable_from_config",
      [](const std::string& path) { return PyCallable{pto::ChipCallable::from_config(path)}; }, py::arg("path"));
  m.def(
      "native_import",
      [](const std::string& lib, const std::string& sym) { return PyCallable{pto::NativeCallable::import(lib, sym)}; },
      py::arg("library"), py::arg("symbol"));

  py::class_<pto::CallableHandle>(m, "CallableHandle", "A registered callable: what a submit names.")
      .def_property_readonly("digest", [](const pto::CallableHandle& h) { return h.id.hex(); })
      .def_property_readonly("abi", [](const pto::CallableHandle& h) { return std::string(pto::abi_name(h.abi)); })
      .def("__repr__", &handle_repr);
}

}  // namespace

void bind_worker(py::module_& m) {
  install_interpreter_hooks();
  bind_orchestration(m);
  bind_callables(m);
  py::class_<PyWorker>(m, "Worker", "The L3 engine: chips and sub workers as forked children.")
      .def(py::init<const py::kwargs&>())
      .def("register", &PyWorker::register_callable, py::arg("callable"), py::arg("name") = "")
      .def("init", &PyWorker::init)
      .def("close", &PyWorker::close)
      .def(
          "alloc",
          [](py::object self, const std::vector<uint32_t>& shape, const py::object& dtype) {
            return self.cast<PyWorker&>().alloc(shape, dtype, self);
          },
          py::arg("shape"), py::arg("dtype"))
      .def("run", &PyWorker::run, py::arg("orchestration"), py::arg("args") = py::none(), py::arg("cfg") = py::none())
      .def("submit", &PyWorker::submit, py::arg("orchestration"), py::arg("args") = py::none(),
           py::arg("cfg") = py::none())
      .def("children", &PyWorker::children)
      .def("add_next_level_worker", &PyWorker::add_next_level_worker, py::arg("worker"),
           "Level 4, before init(): an L3 Worker (not initialised) becomes this one's child; it is this one's from "
           "now on.")
      .def("add_remote_worker", &PyWorker::add_remote_worker, py::arg("address"), py::arg("token") = "",
           py::arg("name") = "",
           "Level 4, before init(): an L3 ptod at `address` (host:port or unix:PATH), over a remote session.")
      .def("_native_submits_s", &PyWorker::native_submits_s, py::arg("callable"), py::arg("tasks"), py::arg("runs"),
           "Benchmark baseline: seconds for `runs` runs of `tasks` submit_sub calls from a C++ orchestration.");
}

}  // namespace pto_py
