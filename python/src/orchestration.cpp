#include "orchestration.h"

#include <pybind11/stl.h>

#include <chrono>
#include <string>

#include "arrays.h"
#include "deferred_release.h"
#include "errors.h"
#include "sub_callables.h"

namespace pto_py {

pto::CallConfig call_config(const py::object& cfg) {
  pto::CallConfig c;
  if (cfg.is_none()) return c;
  if (py::isinstance<pto::CallConfig>(cfg)) return cfg.cast<pto::CallConfig>();
  throw py::type_error("cfg must be a pto.CallConfig");
}

namespace {

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

}  // namespace

pto::OrchestrationFunction python_orchestration(py::object fn, std::shared_ptr<RunKeep> keep) {
  // The function may hold the last reference to its Worker (a closure over
  // one of its arrays): dropped on a Python thread (deferred_release.h).
  auto holder = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      release_on_python_thread(std::move(*p));
      delete p;
    }
  });
  return [holder, keep](pto::Orchestrator& o, const pto::TaskArgsView& view, const pto::CallConfig& cfg) -> int {
    py::gil_scoped_acquire gil;
    const OnEngineThread engine;  // what it calls into releases nothing here (deferred_release.h)
    auto po = std::make_shared<PyOrchestrator>();
    po->o = &o;
    po->keep = keep;
    std::string failure;
    int rc = 0;
    try {
      py::object r = (*holder)(po, view_list(view), cfg);
      if (!r.is_none() && !py::isinstance<py::int_>(r)) {
        // Not the run's verdict: a failure that says what came back (a cast
        // would throw past the reset below and leave `o` usable after it).
        failure = "the orchestration returned " + py::str(py::type::of(r).attr("__name__")).cast<std::string>() + " " +
                  py::repr(r).cast<std::string>().substr(0, 200) + "; it must return None or an int";
        rc = 1;
      } else {
        rc = r.is_none() ? 0 : r.cast<int>();
      }
      release_on_python_thread(std::move(r));  // what came back is anything: not dropped on a run thread
    } catch (py::error_already_set& e) {
      failure = "the orchestration raised:\n" + traceback_text(e);
      rc = 1;
    } catch (const py::cast_error& e) {  // an int past a C int
      failure = std::string("the orchestration's return value: ") + e.what();
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

namespace {

py::dict failure_dict(const pto::TaskFailure& f) {
  py::dict d;
  d["task_id"] = f.task_id;
  d["callable"] = f.callable;
  d["worker"] = f.worker;
  d["outcome"] = pto::outcome_name(f.outcome);
  d["message"] = f.message;
  return d;
}

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
            release_deferred();
            py::gil_scoped_release free;
            return h.wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
          },
          py::arg("timeout"), "Waits up to `timeout` seconds; True once the run ended.")
      .def(
          "result",
          [](const pto::RunHandle& h) {
            release_deferred();
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

void bind_orchestration(py::module_& m) {
  bind_arguments(m);
  bind_orchestrator(m);
  bind_runs(m);
}

}  // namespace pto_py
