#include "deferred_release.h"

#include <vector>

namespace pto_py {
namespace {

// Touched with the GIL held only. Never destroyed: an object released at
// interpreter exit must not find it gone.
std::vector<PyObject*>& waiting() {
  static auto* w = new std::vector<PyObject*>;
  return *w;
}
bool g_call_queued = false;
thread_local int tl_engine_depth = 0;

int release_pending_call(void*) {
  g_call_queued = false;
  release_deferred();
  return 0;
}

}  // namespace

void release_on_python_thread(py::object&& o) {
  if (!o) return;
  waiting().push_back(o.release().ptr());
  // The main thread runs pending calls between bytecodes; if the queue is
  // full, the next Python thread entering the package releases it instead.
  if (!g_call_queued && Py_AddPendingCall(&release_pending_call, nullptr) == 0) g_call_queued = true;
}

OnEngineThread::OnEngineThread() { ++tl_engine_depth; }
OnEngineThread::~OnEngineThread() { --tl_engine_depth; }

void release_deferred() {
  if (tl_engine_depth > 0) return;  // left to a Python thread
  // A release may run Python code that hands over more, or lets go of the
  // GIL (~PyWorker does) so that another thread hands over or releases too:
  // take a batch at a time, and touch the list only with the GIL.
  while (!waiting().empty()) {
    std::vector<PyObject*> batch;
    batch.swap(waiting());
    for (PyObject* p : batch) Py_DECREF(p);
  }
}

void forget_deferred_in_child() {
  waiting().clear();
  g_call_queued = false;
}

}  // namespace pto_py
