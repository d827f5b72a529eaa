"""pto — the PTO task runtime from Python (docs/python.md).

* :mod:`pto.chip` — run a kernel package on one simulated chip over numpy
  arrays (``pto.chip.run``, ``pto.chip.Runtime``).
* :class:`pto.Error` — what a runtime's failure raises: its code, code name
  and whole message.

The package is built by the project's CMake for Debian's interpreter,
``/usr/bin/python3``; from a build tree use ``PYTHONPATH=build/python``.
"""

from .errors import Error
from . import chip

__all__ = ["Error", "chip"]
