#!/usr/bin/python3
"""Paged attention through a pto.Worker: the chip runs the example's kernels,
then a Python sub callable (pa_check.check, in a sub worker) computes the
golden in numpy and compares, on the same shared memory, no copies.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/paged_attention_worker.py [BUILD_DIR]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pa_check  # noqa: E402  (the sub callable's module)

import pto  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
B, H, D, BS, MB = 1, 16, 16, 16, 3

with pto.Worker(level=3, num_chips=1, num_sub_workers=1) as w:
    pa = w.register(pto.ChipCallable.from_config(f"{build}/examples/paged_attention/kernels.toml"))
    check = w.register(pa_check.check)  # before init(): the sub worker inherits it
    w.init()
    rng = np.random.default_rng(1)
    q = w.alloc([B, H, D], np.float32)
    kc = w.alloc([MB, BS, D], np.float32)
    vc = w.alloc([MB, BS, D], np.float32)
    table = w.alloc([B, MB], np.int32)
    lens = w.alloc([B], np.int32)
    out = w.alloc([B, H, D], np.float32)
    verdict = w.alloc([2], np.int64)
    q[:] = rng.uniform(-1, 1, q.shape)
    kc[:] = rng.uniform(-1, 1, kc.shape)
    vc[:] = rng.uniform(-1, 1, vc.shape)
    table[:] = np.arange(MB)
    lens[:] = MB * BS

    def orch(o, args, cfg):
        chip = pto.TaskArgs()
        for t in (q, kc, vc, table, lens):
            chip.add_tensor(t, pto.IN)
        chip.add_tensor(out, pto.OUT)
        for s in (B, H, D, BS, MB):
            chip.add_scalar(s)
        o.submit_next_level(pa, chip, cfg)
        verify = pto.TaskArgs().add_tensor(out, pto.IN)  # waits for the chip
        for t in (q, kc, vc, table, lens):
            verify.add_tensor(t, pto.IN)
        verify.add_tensor(verdict, pto.OUTPUT_EXISTING)
        for s in (B, H, D, BS, MB):
            verify.add_scalar(s)
        o.submit_sub(check, verify)

    r = w.run(orch, cfg=pto.CallConfig(block_dim=2))
    r.raise_for_status()
    matched, total = int(verdict[0]), int(verdict[1])
    print(f"ran {r.tasks_succeeded} tasks (chip + check) in {r.wall_ms:.3f} ms")
    ok = total == B * H * D and matched == total  # total: the check ran
    print(f"out: {'PASS' if ok else 'FAIL'} ({matched}/{total} elements matched)")
    sys.exit(0 if ok else 1)
