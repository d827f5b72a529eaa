"""One simulated chip from Python: run a kernel package on numpy arrays.

A kernel package is a directory with a ``kernels.toml`` (docs/sim.md) naming
its orchestration and kernel libraries and its ``[[args]]``. Inputs are numpy
arrays of exactly the dtype and shape the package declares; outputs come back
as numpy arrays.

>>> import numpy as np, pto
>>> a = np.random.rand(16384).astype(np.float32)
>>> b = np.random.rand(16384).astype(np.float32)
>>> r = pto.chip.run("build/examples/vector/kernels.toml", inputs={"a": a, "b": b})
>>> r.outputs["f"]          # (a + b + 1) * (a + b + 2)
>>> r.stats["tasks_completed"]
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from . import _pto

__all__ = ["Runtime", "Result", "run"]


class Result:
    """What a run returns: ``outputs`` (name -> numpy array, the package's
    outputs and inouts) and ``stats`` (tasks_submitted, tasks_completed,
    wall_ms, orchestration_ms, blocked_waits, block_dim, scheduler_threads).
    ``result["f"]`` is ``result.outputs["f"]``."""

    def __init__(self, outputs: Dict[str, np.ndarray], stats: Dict[str, Any]) -> None:
        self.outputs = outputs
        self.stats = stats

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]

    def __repr__(self) -> str:
        outs = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.outputs.items())
        return f"<pto.chip.Result {{{outs}}} {self.stats.get('tasks_completed')} tasks in {self.stats.get('wall_ms', 0):.3f} ms>"


class Runtime:
    """A kernel package loaded onto one simulated chip, kept for repeated runs.

    ``Runtime(config, **runtime)``: ``config`` is the package's kernels.toml;
    the keywords are runtime options — ``platform`` (``"a2a3sim"`` or
    ``"tx8sim"``, over the package's own), ``block_dim``, ``aicpu_threads``,
    ``executor_threads``, ``scheduler_threads``, ``task_window``, ``heap``,
    ``dep_pool``, ``stall_timeout_ms``, ``profile``, ``block_mode`` (``"batch"``
    or ``"expand"``: how block_incore tasks run), ``pipe_bytes``,
    ``pipe_timeout_ms`` (the clusters' pipes), ``capture_mode``
    (``"replay"``, ``"off"`` or ``"verify"``: what captured regions do; a
    Runtime's later runs replay what its first recorded, and the result's
    stats count ``regions_recorded``, ``regions_replayed`` and
    ``tasks_replayed``). An unknown keyword is a TypeError; a value the
    runtime refuses is a :class:`pto.Error`.
    """

    def __init__(self, config: str, **runtime: Any) -> None:
        self._runner = _pto.ChipRunner(str(config), **runtime)

    @property
    def args(self) -> List[Dict[str, Any]]:
        """The package's arguments in order: name, role (input, output,
        inout, scalar), and dtype and shape (tensors) or default (scalars)."""
        return self._runner.args

    def run(self, inputs: Mapping[str, Any], *, outputs: Optional[Mapping[str, np.ndarray]] = None) -> Result:
        """Runs the package once.

        ``inputs``: every input and inout as a numpy array of its dtype and
        shape; a scalar may be overridden with a Python number. ``outputs``:
        arrays to write the outputs into (otherwise new ones are made). Raises
        :class:`pto.Error` when the run fails (its code name and whole
        message), ValueError/TypeError for arguments that do not fit.
        """
        outs, stats = self._runner.run(dict(inputs), None if outputs is None else dict(outputs))
        return Result(outs, stats)


def run(config: str, inputs: Mapping[str, Any], *, outputs: Optional[Mapping[str, np.ndarray]] = None,
        **runtime: Any) -> Result:
    """Loads the package, runs it once on ``inputs`` and returns the
    :class:`Result`. For repeated runs keep a :class:`Runtime`."""
    return Runtime(config, **runtime).run(inputs, outputs=outputs)
