"""pto — the PTO task runtime from Python (docs/python.md).

* :mod:`pto.chip` — run a kernel package on one simulated chip over numpy
  arrays (``pto.chip.run``, ``pto.chip.Runtime``).
* :class:`pto.Worker` — the L3 engine: chip children and sub workers,
  orchestrations and sub callables written in Python, arrays over shared
  memory (``pto.TaskArgs``, ``pto.IN`` / ``OUT`` / ``INOUT``).
* :mod:`pto.client` — a ptod client over numpy (``pto.client.Client``).
* :class:`pto.Error` — what a runtime's failure raises: its code, code name
  and whole message.

The package is built by the project's CMake for Debian's interpreter,
``/usr/bin/python3``; from a build tree use ``PYTHONPATH=build/python``.
"""

from .errors import Error
from . import chip
from .worker import (IN, INOUT, NO_DEP, OUT, OUTPUT_EXISTING, CallableHandle, CallConfig, ChipCallable,
                     NativeCallable, Orchestrator, RunHandle, RunResult, Submitted, TaskArgs, Worker)



def __getattr__(name: str):
    # pto.client imports grpc: loaded on first use, so that `import pto` stays
    # light (and a Worker's children are forked without gRPC in the process).
    if name == "client":
        import importlib

        return importlib.import_module(".client", __name__)
    raise AttributeError(f"module 'pto' has no attribute {name!r}")


__all__ = ["Error", "chip", "client", "Worker", "TaskArgs", "CallConfig", "ChipCallable", "NativeCallable", "Orchestrator",
           "RunResult", "RunHandle", "Submitted", "CallableHandle", "IN", "OUT", "INOUT", "OUTPUT_EXISTING", "NO_DEP"]
