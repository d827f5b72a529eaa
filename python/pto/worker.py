"""The L3 engine from Python: chips and sub workers as forked children,
orchestrations and sub callables written in Python (docs/python.md).

>>> with pto.Worker(level=3, num_chips=1, num_sub_workers=1) as w:
...     vec = w.register(pto.ChipCallable.from_config("build/examples/vector/kernels.toml"))
...     check = w.register(my_module.check)       # a Python sub callable: before init()
...     w.init()
...     a = w.alloc([16384], np.float32)           # numpy over shared memory
...     ...
...     def orch(o, args, cfg):
...         o.submit_next_level(vec, pto.TaskArgs().add_tensor(a, pto.IN).add_tensor(b, pto.IN)
...                             .add_tensor(f, pto.OUT).add_scalar(16384), cfg)
...         o.submit_sub(check, pto.TaskArgs().add_tensor(f, pto.IN))
...     w.run(orch).raise_for_status()
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
from typing import Any, Callable, Iterator

from . import _pto

__all__ = ["Worker", "TaskArgs", "CallConfig", "ChipCallable", "NativeCallable", "Orchestrator", "RunResult", "Submitted",
           "RunHandle", "CallableHandle", "IN", "OUT", "INOUT", "OUTPUT_EXISTING", "NO_DEP"]

TaskArgs = _pto.TaskArgs
CallConfig = _pto.CallConfig
Orchestrator = _pto.Orchestrator
RunResult = _pto.RunResult
RunHandle = _pto.RunHandle
Submitted = _pto.Submitted
CallableHandle = _pto.CallableHandle
TensorArgType = _pto.TensorArgType
IN = TensorArgType.INPUT
OUT = TensorArgType.OUTPUT
INOUT = TensorArgType.INOUT
OUTPUT_EXISTING = TensorArgType.OUTPUT_EXISTING
NO_DEP = TensorArgType.NO_DEP


class ChipCallable:
    """A chip callable: a kernel package (its kernels.toml) run on a chip child."""

    @staticmethod
    def from_config(path: str) -> _pto.Callable:
        return _pto.chip_callable_from_config(str(path))


class NativeCallable:
    """A native sub callable: ``library:symbol`` (the sub ABI, pto/native_abi.h)."""

    @staticmethod
    def import_(library: str, symbol: str) -> _pto.Callable:
        return _pto.native_import(str(library), symbol)


@contextlib.contextmanager
def _scope(self: Orchestrator) -> Iterator[None]:
    """``with o.scope():`` — buffers allocated inside live until the scope
    ends and its tasks have finished."""
    self.scope_begin()
    try:
        yield
    finally:
        self.scope_end()


Orchestrator.scope = _scope


def _module_digest(path: str) -> str:
    """The SHA-256 of a module's file: part of a by-reference function's identity."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _resolve(name: str) -> Callable[..., Any]:
    """In a sub worker: the function a by-reference name
    ("module:qualname@digest") names, if its module is still the code that
    was registered."""
    where, digest = name.rsplit("@", 1)
    module_name, qualname = where.split(":", 1)
    module = importlib.import_module(module_name)
    now = _module_digest(module.__file__)
    if now != digest:
        raise ImportError(f"{module.__file__} changed since {qualname} was registered "
                          f"(digest {now[:16]}, registered {digest[:16]})")
    return functools.reduce(getattr, qualname.split("."), module)


class Worker(_pto.Worker):
    """``pto.Worker(level=3, num_chips=1, num_sub_workers=1, platform="a2a3sim", ...)``:
    the L3 engine. Register callables, ``init()`` (forks the children), then
    ``run(orch)`` / ``submit(orch)``; ``close()`` (or leave the ``with`` block).

    A Python function registered before ``init()`` is inherited by the sub
    workers through fork; after ``init()`` it is registered by reference
    (``module:qualname``, with the SHA-256 of the module's file in its
    identity): each sub worker imports the module, checks that it is the same
    code and looks the function up. Lambdas, closures and functions of
    ``__main__`` cannot be registered after ``init()``.

    Keywords are WorkerConfig's fields (docs/worker.md): level, num_chips,
    num_sub_workers, platform, heap_ring_bytes, buffer_arena_bytes, spin_us,
    task_timeout_ms, max_concurrent_runs, liveness_timeout_ms, name,
    state_dir, init_timeout_ms, child_cpus (a list of CPU numbers the
    children run on). An unknown one is a TypeError.
    """

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
