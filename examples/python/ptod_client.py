#!/usr/bin/python3
"""A client of a running ptod: register the vector package, upload numpy
inputs, run the job while watching its progress, download and check.

    PTOD_ADDRESS=unix:/tmp/ptod/ptod.sock PYTHONPATH=build/python \\
        /usr/bin/python3 examples/python/ptod_client.py [BUILD_DIR]
"""
import sys

import numpy as np

import pto

build = sys.argv[1] if len(sys.argv) > 1 else "build"
N = 16384
rng = np.random.default_rng(2)
a = rng.uniform(-1, 1, N).astype(np.float32)
b = rng.uniform(-1, 1, N).astype(np.float32)

with pto.client.Client() as c:
    reg = c.register_chip(f"{build}/examples/vector/kernels.toml", name="vector")
    print(f"registered vector: {reg.identity.digest.hex()[:16]}{' (existed)' if reg.existed else ''}")
    ta, tb, tf = c.upload(a), c.upload(b), c.alloc([N], np.float32)
    job = c.submit("vector", [(ta, "in"), (tb, "in"), (tf, "out")], scalars=[N], label="python example")
    for event in job.watch():
        print(f"job {job.id}: {pto.v1.ptod_pb2.JobState.Name(event.state)} {event.tasks_done}/{event.tasks_total} tasks")
    f = c.download(tf)
    for t in (ta, tb, tf):
        c.free(t)
ok = np.allclose(f, (a + b + 1) * (a + b + 2), rtol=1e-5, atol=1e-5)
print(f"f: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
