// Python orchestrations (docs/python.md, "The Worker"): pto.TaskArgs,
// pto.CallConfig, the Orchestrator a Python orchestration function receives,
// what a submit returns, and how a run ended (RunResult, RunHandle).
// The GIL is never held while calling into the engine.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "pto/worker.h"

namespace pto_py {

namespace py = pybind11;

struct PyTaskArgs {
  pto::TaskArgs args;
  std::vector<py::object> keep;  // the arrays whose memory the tensors name
};

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

struct PyRunResult {
  pto::RunResult r;
};

// None, or a pto.CallConfig (a TypeError otherwise).
pto::CallConfig call_config(const py::object& cfg);
// `fn(o, args, cfg)` as the run's orchestration; the arrays its submits name
// go into `keep`.
pto::OrchestrationFunction python_orchestration(py::object fn, std::shared_ptr<RunKeep> keep);
// TensorArgType, CallConfig, TaskArgs, Orchestrator, Submitted, RunResult, RunHandle.
void bind_orchestration(py::module_& m);

}  // namespace pto_py
