#!/usr/bin/python3
"""The vector example on one simulated chip, from numpy:
f = (a + b + 1) * (a + b + 2), checked against numpy.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/vector_chip.py [BUILD_DIR]
"""
import sys

import numpy as np

import pto

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, 16384).astype(np.float32)
b = rng.uniform(-1, 1, 16384).astype(np.float32)

result = pto.chip.run(f"{build}/examples/vector/kernels.toml", inputs={"a": a, "b": b}, block_dim=4)
want = (a + b + 1) * (a + b + 2)
ok = np.allclose(result["f"], want, rtol=1e-5, atol=1e-5)
print(f"ran {result.stats['tasks_completed']} tasks in {result.stats['wall_ms']:.3f} ms")
print(f"f: {'PASS' if ok else 'FAIL'} ({np.isclose(result['f'], want, rtol=1e-5, atol=1e-5).sum()}/{want.size} elements matched)")
sys.exit(0 if ok else 1)
