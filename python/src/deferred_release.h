// Python references an engine thread lets go of, released on a Python thread
// (docs/python.md, "The GIL").
//
// Dropping a reference can run anything: the last reference to an array of
// w.alloc() drops the Worker it keeps alive, and ~Worker on the engine thread
// that ran the drop (a run's end, on the finisher or a run thread) would join
// that very thread. So what a run kept is handed here instead and released
// where Python code may run: the interpreter's main thread (a pending call),
// or the next Python thread that enters the package.
#pragma once

#include <pybind11/pybind11.h>

namespace pto_py {

namespace py = pybind11;

// With the GIL held, on any thread: `o` is released later on a Python thread.
void release_on_python_thread(py::object&& o);
// With the GIL held: releases what engine threads handed over - nothing on
// an engine thread running Python code (an orchestration that calls into
// another Worker): the last reference to its own Worker may be among it.
// Cheap when nothing waits.
void release_deferred();
// While alive, this thread is an engine thread running Python code.
class OnEngineThread {
 public:
  OnEngineThread();
  ~OnEngineThread();
  OnEngineThread(const OnEngineThread&) = delete;
  OnEngineThread& operator=(const OnEngineThread&) = delete;
};
// In a forked child: what the parent had not released yet is not the child's
// to release (forgotten, not dropped).
void forget_deferred_in_child();

}  // namespace pto_py
