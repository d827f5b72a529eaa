// pto.Worker (docs/python.md, "The Worker"): the L3 engine with Python
// orchestrations and Python sub callables over numpy arrays.
//
// The rule that keeps the GIL and the engine's locks apart: the GIL is never
// held while calling into the engine (every call below releases it first),
// and Python code runs only with the GIL and no engine lock held. So an
// engine thread that needs the GIL (an orchestration on a run thread, the
// fork hooks of a replacement child) always gets it.
//
// Sub callables written in Python run in the sub worker children, which are
// forks of this process: the fork hooks take the GIL in the forking thread
// and reinitialise the interpreter in the child (PyOS_AfterFork_Child), which
// then keeps the GIL for its life — it is the only thread that runs Python
// there.
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
#include "errors.h"
#include "pto/fork_hooks.h"
#include "pto/package/chip_package.h"
#include "pto/v1/ptod.pb.h"
#include "pto/worker.h"
#include "remote_link.h"

namespace py = pybind11;

namespace pto_py {
namespace {

// ------------------------------------------------------------------ fork

PyGILState_STATE g_fork_gil;
void fork_prepare() {
  g_fork_gil = PyGILState_Ensure();
  PyOS_BeforeFork();
}
void fork_parent() {
  PyOS_AfterFork_Parent();
  PyGILState_Release(g_fork_gil);
}
void fork_child() { PyOS_AfterFork_Child(); }  // and the child keeps the GIL

// The traceback of the exception being handled, as Python prints it.
std::string traceback_text(py::error_already_set& e) {
  try {
    py::object lines = py::module_::import("traceback").attr("format_exception")(e.type(), e.value(), e.trace());
    return py::str("").attr("join")(lines).cast<std::string>();
  } catch (...) {
    return e.what();
  }
}

// ------------------------------------------------------------- arguments

struct PyTaskArgs {
  pto::TaskArgs args;
  std::vector<py::object> keep;  // the arrays whose memory the tensors name
};

py::list view_list(const pto::TaskArgsView& v) {
  py::list out;
  for (int i = 0; i < v.tensor_count; ++i) out.append(array_over(v.tensors[i]));
  for (int i = 0; i < v.scalar_count; ++i) out.append(py::int_(v.scalars[i]));
  return out;
}

pto::CallConfig call_config(const py::object& cfg) {
  pto::CallConfig c;
  if (cfg.is_none()) return c;
  if (py::isinstance<pto::CallConfig>(cfg)) return cfg.cast<pto::CallConfig>();
  throw py::type_error("cfg must be a pto.CallConfig");
}

// ------------------------------------------------------------- callables

struct PyCallable {
  pto::Callable c;
};

py::object handle_repr(const pto::CallableHandle& h) {
  return py::str(fmt::format("<pto.CallableHandle {} {}>", h.id.short_hex(), pto::abi_name(h.abi)));
}

// A Python function as a sub callable: called in a sub worker child with one
// array per tensor (over the shared memory, no copy) and then the scalars.
// The function object is kept for the process's life (children inherit it).
pto::SubFunction python_sub(py::object fn) {
  PyObject* f = fn.release().ptr();  // one reference, never dropped
  return [f](const pto::TaskArgsView& a, std::string& error) -> int {
    py::gil_scoped_acquire gil;
    try {
      py::list args = view_list(a);
      py::object ignored = py::handle(f)(*args);
      return 0;
    } catch (py::error_already_set& e) {
      error = traceback_text(e);
      return 1;
    }
  };
}

// After init(), a Python function is registered by reference: its name is
// "module:qualname@<sha256 of the module's file>", and each sub worker
// imports the module, checks the digest and looks the function up. A lambda,
// a closure, a function of __main__ or of a module without a file cannot be
// found that way: refused, saying why.
std::string reference_name(const py::object& fn) {
  const std::string module = py::str(fn.attr("__module__")).cast<std::string>();
  const std::string qual = py::str(fn.attr("__qualname__")).cast<std::string>();
  const std::string what = module + ":" + qual;
  if (qual.find("<lambda>") != std::string::npos || qual.find("<locals>") != std::string::npos)
    throw py::value_error(what +
                          ": a lambda or a closure cannot be registered after init(): the sub workers find a "
                          "function by module and name; define it at module level, or register it before "
                          "init() (the sub workers inherit it through fork)");
  if (module == "__main__")
    throw py::value_error(what +
                          ": a function of __main__ cannot be found by name in a sub worker after init(): "
                          "put it in a module, or register it before init()");
  py::object mod = py::module_::import("sys").attr("modules")[py::str(module)];
  if (!py::hasattr(mod, "__file__") || mod.attr("__file__").is_none())
    throw py::value_error(what + ": its module has no file to import it from in a sub worker");
  py::object digest = py::module_::import("pto.worker").attr("_module_digest")(mod.attr("__file__"));
  return what + "@" + digest.cast<std::string>();
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

// The resolver each sub worker uses for a by-reference name.
pto::Status resolve_reference(const std::string& name, pto::SubFunction* out) {
  py::gil_scoped_acquire gil;
  try {
    py::object fn = py::module_::import("pto.worker").attr("_resolve")(name);
    *out = python_sub(fn);
    return pto::Status::Ok();
  } catch (py::error_already_set& e) {
    return pto::Status::Error(pto::kWorkerInvalidArgument, fmt::format("{}: {}", name, e.what()));
  }
}

std::string qualified_name(const py::object& fn) {
  const std::string module = py::str(fn.attr("__module__")).cast<std::string>();
  const std::string qual = py::hasattr(fn, "__qualname__") ? py::str(fn.attr("__qualname__")).cast<std::string>()
                                                           : py::str(fn.attr("__name__")).cast<std::string>();
  return module + ":" + qual;
}

// ------------------------------------------------------------ orchestrator

// The arrays a run's tasks name, kept alive until the run ends: an array
// dropped by the orchestration (its last reference gone when it returns)
// must not free memory a queued or running task still uses. Touched with
// the GIL only.
struct RunKeep {
  py::list objects;
  void add(const std::vector<py::object>& keep) {
    for (const auto& k : keep) objects.append(k);
  }
};

// The Orchestrator of one run, valid while its orchestration function runs.
struct PyOrchestrator {
  pto::Orchestrator* o = nullptr;
  std::shared_ptr<RunKeep> keep;
  pto::Orchestrator& get() const {
    if (!o) throw py::value_error("this Orchestrator belongs to a run that has ended");
    return *o;
  }
};

// What a submit returns: the task id, and its tensors (an OUT without
// memory got heap memory) as arrays built only when asked for — most
// orchestrations never look, and building them costs more than the submit.
struct Submitted {
  uint64_t task_id = 0;
  std::vector<std::vector<pto::ContinuousTensor>> tensors;
  py::object arrays() const {
    py::list members;
    for (const auto& ts : tensors) {
      py::list a;
      for (const auto& t : ts) a.append(t.data ? array_over(t) : py::object(py::none()));
      members.append(a);
    }
    return members.size() == 1 ? members[0] : py::object(members);
  }
};

Submitted submit_reply(pto::SubmitResult&& r) {
  if (!r.ok()) raise_error(r.status);
  return Submitted{r.task_id, std::move(r.tensors)};
}

pto::OrchestrationFunction python_orchestration(py::object fn, std::shared_ptr<RunKeep> keep) {
  auto holder = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      delete p;
    }
  });
  return [holder, keep](pto::Orchestrator& o, const pto::TaskArgsView& view, const pto::CallConfig& cfg) -> int {
    py::gil_scoped_acquire gil;
    auto po = std::make_shared<PyOrchestrator>();
    po->o = &o;
    po->keep = keep;
    std::string failure;
    int rc = 0;
    try {
      py::object r = (*holder)(po, view_list(view), cfg);
      rc = r.is_none() ? 0 : r.cast<int>();
    } catch (py::error_already_set& e) {
      failure = "the orchestration raised:\n" + traceback_text(e);
      rc = 1;
    }
    po->o = nullptr;
    if (!failure.empty()) {
      py::gil_scoped_release free;
      o.fail(failure);
    }
    return rc;
  };
}

// ---------------------------------------------------------------- results

py::dict failure_dict(const pto::TaskFailure& f) {
  py::dict d;
  d["task_id"] = f.task_id;
  d["callable"] = f.callable;
  d["worker"] = f.worker;
  d["outcome"] = pto::outcome_name(f.outcome);
  d["message"] = f.message;
  return d;
}

struct PyRunResult {
  pto::RunResult r;
};

// ----------------------------------------------------------------- worker

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
                                              "init_timeout_ms"};

class PyWorker {
 public:
  explicit PyWorker(const py::kwargs& kw) {
    pto::WorkerConfig c;
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
    } catch (...) {  // nothing may leave a destructor; close() reports its errors where it can
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
    auto keep = std::shared_ptr<RunKeep>(new RunKeep, [](RunKeep* k) {
      if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing to release
      py::gil_scoped_acquire gil;
      delete k;
    });
    if (!args.is_none()) {
      a = args.cast<PyTaskArgs&>().args;
      keep->add(args.cast<PyTaskArgs&>().keep);
    }
    const pto::CallConfig c = call_config(cfg);
    pto::OrchestrationFunction fn = python_orchestration(orch, keep);
    // The run's end lets go of what it kept (on a run thread, with no engine lock held).
    auto done = [keep](const pto::RunResult&) {
      if (!Py_IsInitialized()) return;
      py::gil_scoped_acquire gil;
      keep->objects = py::list();
    };
    pto::Worker& worker = w();
    py::gil_scoped_release free;
    return worker.submit_function(std::move(fn), std::move(a), c, std::move(done));
  }

  // Level 4: an L3 Worker (not initialised) becomes a child of this one.
  void add_next_level_worker(PyWorker& inner) {
    std::unique_ptr<pto::Worker> taken = std::move(inner.w_);
    if (!taken) throw py::value_error("that Worker was already given to a level-4 Worker");
    pto::Status s;
    {
      py::gil_scoped_release free;
      s = w().add_next_level_worker(std::move(taken));
    }
    if (!s.ok()) raise_error(s);
    ++next_level_;
    ++local_children_;
  }

  // Level 4: an L3 ptod elsewhere (docs/remote.md), reached over a remote
  // session at `address` ("host:port" or "unix:PATH") with its bearer token.
  void add_remote_worker(const std::string& address, const std::string& token, const std::string& name) {
    ptod::DaemonConfig::Peer p;
    p.address = address;
    p.name = name.empty() ? address : name;
    p.token = token;
    auto link = std::make_shared<ptod::GrpcRemoteLink>(p, static_cast<uint32_t>(next_level_), *session_cfg_);
    pto::Status s;
    {
      py::gil_scoped_release free;
      s = w().add_remote_worker(link);
    }
    if (!s.ok()) raise_error(s);
    ++next_level_;
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
  int next_level_ = 0;  // L3 children and remote workers added (the next remote's worker id)
  int local_children_ = 0, remote_children_ = 0;
  // What the remote links of a level-4 Worker read (session settings; their defaults).
  std::unique_ptr<ptod::DaemonConfig> session_cfg_ = std::make_unique<ptod::DaemonConfig>();
};

}  // namespace

namespace {

void bind_arguments(py::module_& m) {
  py::enum_<pto::TensorArgType>(m, "TensorArgType", "How a task uses a tensor (its dependencies follow from it).")
      .value("INPUT", pto::TensorArgType::INPUT)
      .value("OUTPUT", pto::TensorArgType::OUTPUT)
      .value("INOUT", pto::TensorArgType::INOUT)
      .value("OUTPUT_EXISTING", pto::TensorArgType::OUTPUT_EXISTING)
      .value("NO_DEP", pto::TensorArgType::NO_DEP);

  py::class_<pto::CallConfig>(m, "CallConfig", "How a task runs: block_dim, aicpu_thread_num, timeout_ms, profiling.")
      .def(py::init([](int block_dim, int aicpu_thread_num, uint64_t timeout_ms, bool enable_profiling) {
             pto::CallConfig c;
             c.block_dim = block_dim;
             c.aicpu_thread_num = aicpu_thread_num;
             c.timeout_ms = timeout_ms;
             c.enable_profiling = enable_profiling;
             return c;
           }),
           py::arg("block_dim") = 0, py::arg("aicpu_thread_num") = 0, py::arg("timeout_ms") = 0,
           py::arg("enable_profiling") = false)
      .def_readwrite("block_dim", &pto::CallConfig::block_dim)
      .def_readwrite("aicpu_thread_num", &pto::CallConfig::aicpu_thread_num)
      .def_readwrite("timeout_ms", &pto::CallConfig::timeout_ms)
      .def_readwrite("enable_profiling", &pto::CallConfig::enable_profiling);

  py::class_<PyTaskArgs>(m, "TaskArgs", "A task's arguments: tensors (numpy arrays with tags), then scalars.")
      .def(py::init<>())
      .def(
          "add_tensor",
          [](py::object self, const py::array& a, pto::TensorArgType tag) {
            PyTaskArgs& t = self.cast<PyTaskArgs&>();
            t.args.add_tensor(tensor_of(a), tag);
            t.keep.push_back(a);
            return self;
          },
          py::arg("array"), py::arg("tag") = pto::TensorArgType::INPUT,
          "Adds a C-contiguous array over shared memory (Worker.alloc, Orchestrator.alloc) with its tag.")
      .def(
          "add_scalar",
          [](py::object self, const py::int_& v) {
            const auto x = v.cast<long long>();
            self.cast<PyTaskArgs&>().args.add_scalar(static_cast<uint64_t>(x));
            return self;
          },
          py::arg("value"), "Adds a 64-bit integer scalar.")
      .def(
          "add_scalar_f32",
          [](py::object self, float v) {
            self.cast<PyTaskArgs&>().args.add_scalar_f32(v);
            return self;
          },
          py::arg("value"), "Adds a float32 scalar (its bits).")
      .def_property_readonly("tensor_count", [](const PyTaskArgs& t) { return t.args.tensor_count(); })
      .def_property_readonly("scalar_count", [](const PyTaskArgs& t) { return t.args.scalar_count(); });
}

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

using OrchestratorClass = py::class_<PyOrchestrator, std::shared_ptr<PyOrchestrator>>;

void bind_orchestrator_submits(OrchestratorClass& c) {
  c.def(
       "submit_next_level",
       [](const PyOrchestrator& po, const pto::CallableHandle& h, const PyTaskArgs& a, const py::object& cfg,
          int worker) {
         pto::Orchestrator& o = po.get();
         const pto::CallConfig c = call_config(cfg);
         if (po.keep) po.keep->add(a.keep);
         pto::SubmitResult r;
         {
           py::gil_scoped_release free;
           r = o.submit_next_level(h, a.args, c, worker);
         }
         return submit_reply(std::move(r));
       },
       py::arg("callable"), py::arg("args"), py::arg("cfg") = py::none(), py::arg("worker") = -1,
       "A chip task (or at level 4 an L3 task); raises pto.Error if the submit is refused.")
      .def(
          "submit_next_level_group",
          [](const PyOrchestrator& po, const pto::CallableHandle& h, const std::vector<PyTaskArgs*>& members,
             const py::object& cfg) {
            pto::Orchestrator& o = po.get();
            std::vector<pto::TaskArgs> args;
            for (auto* m : members) {
              args.push_back(m->args);
              if (po.keep) po.keep->add(m->keep);
            }
            const pto::CallConfig c = call_config(cfg);
            pto::SubmitResult r;
            {
              py::gil_scoped_release free;
              r = o.submit_next_level_group(h, args, c);
            }
            return submit_reply(std::move(r));
          },
          py::arg("callable"), py::arg("members"), py::arg("cfg") = py::none())
      .def(
          "submit_sub",
          [](const PyOrchestrator& po, const pto::CallableHandle& h, const PyTaskArgs* a, const py::object& cfg) {
            pto::Orchestrator& o = po.get();
            const pto::TaskArgs args = a ? a->args : pto::TaskArgs();
            if (a && po.keep) po.keep->add(a->keep);
            const pto::CallConfig c = call_config(cfg);
            pto::SubmitResult r;
            {
              py::gil_scoped_release free;
              r = o.submit_sub(h, args, c);
            }
            return submit_reply(std::move(r));
          },
          py::arg("callable"), py::arg("args") = nullptr, py::arg("cfg") = py::none(),
          "A sub task (a native or Python sub callable) on a sub worker.")
      .def(
          "submit_sub_group",
          [](const PyOrchestrator& po, const pto::CallableHandle& h, const std::vector<PyTaskArgs*>& members) {
            pto::Orchestrator& o = po.get();
            std::vector<pto::TaskArgs> args;
            for (auto* m : members) {
              args.push_back(m->args);
              if (po.keep) po.keep->add(m->keep);
            }
            pto::SubmitResult r;
            {
              py::gil_scoped_release free;
              r = o.submit_sub_group(h, args);
            }
            return submit_reply(std::move(r));
          },
          py::arg("callable"), py::arg("members"));
}

void bind_submitted(py::module_& m) {
  py::class_<Submitted>(m, "Submitted", "A submitted task: its id and its tensors.")
      .def_readonly("task_id", &Submitted::task_id)
      .def_property_readonly("tensors", &Submitted::arrays,
                             "The task's tensors as arrays (one list per group member; a single task's list alone); "
                             "an OUT without memory has heap memory now. Valid while the run's scope holds them.");
}

void bind_orchestrator(py::module_& m) {
  bind_submitted(m);
  OrchestratorClass c(m, "Orchestrator", "Handed to an orchestration function for its run.");
  bind_orchestrator_submits(c);
  c.def(
       "alloc",
       [](const PyOrchestrator& po, const std::vector<uint32_t>& shape, const py::object& dtype) {
         pto::Orchestrator& o = po.get();
         const int32_t d = pto_dtype(py::dtype::from_args(dtype));
         pto::Result<pto::ContinuousTensor> r;
         {
           py::gil_scoped_release free;
           r = o.alloc(shape, d);
         }
         if (!r.ok()) raise_error(r.status);
         return array_over(r.value);
       },
       py::arg("shape"), py::arg("dtype"),
       "An array in the current scope's heap ring: valid until the scope ends and its tasks finish.")
      .def("scope_begin",
           [](const PyOrchestrator& po) {
             pto::Orchestrator& o = po.get();
             py::gil_scoped_release free;
             o.scope_begin();
           })
      .def("scope_end",
           [](const PyOrchestrator& po) {
             pto::Orchestrator& o = po.get();
             pto::Status s;
             {
               py::gil_scoped_release free;
               s = o.scope_end();
             }
             if (!s.ok()) raise_error(s);
           })
      .def(
          "find_callable",
          [](const PyOrchestrator& po, const std::string& name) {
            pto::Orchestrator& o = po.get();
            pto::CallableHandle h;
            {
              py::gil_scoped_release free;
              h = o.find_callable(name);
            }
            if (!h.ok()) raise_error(h.status);
            return h;
          },
          py::arg("name"))
      .def("cancelled",
           [](const PyOrchestrator& po) {
             pto::Orchestrator& o = po.get();
             py::gil_scoped_release free;
             return o.cancelled();
           })
      .def(
          "fail",
          [](const PyOrchestrator& po, const std::string& m) {
            pto::Orchestrator& o = po.get();
            py::gil_scoped_release free;
            o.fail(m);
          },
          py::arg("message"), "Fails the run with this message; the orchestration may go on.");
}

void bind_runs(py::module_& m) {
  py::class_<PyRunResult>(m, "RunResult", "How a run ended: counts, the first failure and every failure.")
      .def_property_readonly("ok", [](const PyRunResult& r) { return r.r.ok(); })
      .def_property_readonly("code", [](const PyRunResult& r) { return r.r.status.code; })
      .def_property_readonly("name", [](const PyRunResult& r) { return std::string(pto::error_name(r.r.status.code)); })
      .def_property_readonly("message", [](const PyRunResult& r) { return r.r.status.message; })
      .def_property_readonly("outcome",
                             [](const PyRunResult& r) { return std::string(pto::outcome_name(r.r.outcome)); })
      .def_property_readonly("tasks_submitted", [](const PyRunResult& r) { return r.r.tasks_submitted; })
      .def_property_readonly("tasks_succeeded", [](const PyRunResult& r) { return r.r.tasks_succeeded; })
      .def_property_readonly("tasks_failed", [](const PyRunResult& r) { return r.r.tasks_failed; })
      .def_property_readonly("tasks_skipped", [](const PyRunResult& r) { return r.r.tasks_skipped; })
      .def_property_readonly("tasks_stopped", [](const PyRunResult& r) { return r.r.tasks_stopped; })
      .def_property_readonly("wall_ms", [](const PyRunResult& r) { return double(r.r.wall_ns) / 1e6; })
      .def_property_readonly("first_failure",
                             [](const PyRunResult& r) -> py::object {
                               if (!r.r.first_failure) return py::none();
                               return failure_dict(*r.r.first_failure);
                             })
      .def_property_readonly("failures",
                             [](const PyRunResult& r) {
                               py::list l;
                               for (const auto& f : r.r.failures) l.append(failure_dict(f));
                               return l;
                             })
      .def(
          "raise_for_status",
          [](const PyRunResult& r) {
            if (!r.r.ok()) raise_error(r.r.status);
          },
          "Raises pto.Error (the run's code, its name and message) unless the run succeeded.");

  py::class_<pto::RunHandle>(m, "RunHandle", "A run submitted with Worker.submit.")
      .def("done",
           [](const pto::RunHandle& h) {
             py::gil_scoped_release free;
             return h.done();
           })
      .def(
          "wait",
          [](const pto::RunHandle& h, double timeout_s) {
            py::gil_scoped_release free;
            return h.wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
          },
          py::arg("timeout"), "Waits up to `timeout` seconds; True once the run ended.")
      .def(
          "result",
          [](const pto::RunHandle& h) {
            {
              py::gil_scoped_release free;
              while (!h.wait(std::chrono::milliseconds(50))) {
                py::gil_scoped_acquire check;
                if (PyErr_CheckSignals() != 0) throw py::error_already_set();
              }
            }
            return PyRunResult{h.result()};
          },
          "Waits for the run to end and returns its RunResult.")
      .def(
          "cancel",
          [](const pto::RunHandle& h, const std::string& why) {
            py::gil_scoped_release free;
            return h.cancel(why);
          },
          py::arg("reason") = "cancelled");
}

}  // namespace

void bind_worker(py::module_& m) {
  pto::set_fork_hooks({fork_prepare, fork_parent, fork_child});
  pto::set_sub_function_resolver(resolve_reference);
  bind_arguments(m);
  bind_callables(m);
  bind_orchestrator(m);
  bind_runs(m);
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
