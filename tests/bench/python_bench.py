#!/usr/bin/python3
"""The Python package's costs, each next to its baseline measured in the same
run (prints figures and ratios; never fails on a time):

* o.submit_sub from a Python orchestration, per task, on top of the same
  submits from a C++ orchestration (target <= 3 us);
* a Python sub callable's round trip, per task, on top of a native no-op sub
  (target <= 15 us);
* pto.client upload and download of a 256 MiB array through a real ptod,
  over gRPC (then again after pto.client.keep_freed_memory()) and through the
  fd socket (plain and shared arrays) (target >= 1 GB/s);
* pto.client run() of a trivial job (one native no-op sub task) through the
  fd socket and through gRPC, in turns with a unary call that does nothing
  (Client.version()), p50 of each.

    PYTHONPATH=build/python /usr/bin/python3 tests/bench/python_bench.py [BUILD_DIR]
"""
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import pto  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
os.environ.setdefault("PTO_BUILD_DIR", BUILD)
from conftest import Ptod  # noqa: E402  (tests/python: a real ptod on a private socket)

TASKS, RUNS, ROUNDS = 256, 20, 5


def noop(*args):
    pass


def per_task_us(seconds):
    return seconds / (TASKS * RUNS) * 1e6


def timed_python_runs(w, submit):
    def orch(o, args, cfg):
        for _ in range(TASKS):
            submit(o)

    t0 = time.perf_counter()
    for _ in range(RUNS):
        w.run(orch).raise_for_status()
    return time.perf_counter() - t0


def one_task_runs_us(w, handle, runs=400):
    """Median wall time of a run with one sub task (submit, the child's call, completion)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        w.run(lambda o, a, c: o.submit_sub(handle) and 0)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def engine_figures():
    with pto.Worker(level=3, num_chips=0, num_sub_workers=1, spin_us=200) as w:
        native = w.register(pto.NativeCallable.import_(f"{BUILD}/tests/worker/libpto_test_native_subs.so",
                                                       "pto_test_noop"))
        py_noop = w.register(noop)
        w.init()
        w._native_submits_s(native, TASKS, 2)  # warm
        cpp, py, one_native, one_py = [], [], [], []
        for _ in range(ROUNDS):  # interleaved, medians
            cpp.append(per_task_us(w._native_submits_s(native, TASKS, RUNS)))
            py.append(per_task_us(timed_python_runs(w, lambda o: o.submit_sub(native))))
            one_native.append(one_task_runs_us(w, native))
            one_py.append(one_task_runs_us(w, py_noop))
    c, p = statistics.median(cpp), statistics.median(py)
    n1, p1 = statistics.median(one_native), statistics.median(one_py)
    print(f"native no-op sub, C++ orchestration, runs of {TASKS}: {c:.2f} us/task (baseline)")
    print(f"native no-op sub, Python orchestration, runs of {TASKS}: {p:.2f} us/task: {p - c:.2f} us/task on top "
          f"of C++, {p / c:.2f}x   [target <= 3 us on top]")
    print(f"one-task runs from Python: native no-op sub {n1:.1f} us, Python no-op sub callable {p1:.1f} us: "
          f"{p1 - n1:.1f} us for the Python sub's round trip, {p1 / n1:.2f}x   [target <= 15 us]")


def transfer_rates(c, a, out=None):
    """Median GB/s of three uploads and downloads of `a` (each upload's tensor
    freed before the next, outside the timing)."""
    up, down = [], []
    for i in range(3):
        t0 = time.perf_counter()
        info = c.upload(a, f"t{i}")
        up.append(a.nbytes / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        b = c.download(info, out=out)
        down.append(a.nbytes / (time.perf_counter() - t0) / 1e9)
        assert np.array_equal(a, b)
        c.free(info)
    return statistics.median(up), statistics.median(down)


def client_figures():
    with tempfile.TemporaryDirectory() as tmp:
        d = Ptod(tmp, "--chips", "0")
        try:
            a = np.random.default_rng(0).integers(0, 255, 256 << 20, dtype=np.uint8)
            with pto.client.Client(d.address, timeout=600, fd_transfers=False) as g:
                gu, gd = transfer_rates(g, a)
            print(f"pto.client 256 MiB over gRPC, unix socket: upload {gu:.2f} GB/s, download {gd:.2f} GB/s "
                  f"(median of 3)   [target >= 1 GB/s]")
            # The same once this process keeps its freed memory (for good:
            # what follows runs with it too).
            pto.client.keep_freed_memory()
            with pto.client.Client(d.address, timeout=600, fd_transfers=False) as g:
                ku, kd = transfer_rates(g, a)
            print(f"  the same after pto.client.keep_freed_memory(): upload {ku:.2f} GB/s ({ku / gu:.2f}x), "
                  f"download {kd:.2f} GB/s ({kd / gd:.2f}x)   [target >= 1 GB/s]")
            with pto.client.Client(d.address, timeout=600) as c:
                assert c.fd_socket
                u, dn = transfer_rates(c, a)
                print(f"pto.client 256 MiB through the fd socket, plain arrays: upload {u:.2f} GB/s ({u / gu:.2f}x "
                      f"gRPC), download {dn:.2f} GB/s ({dn / gd:.2f}x gRPC)")
                s = c.shared_array(a.shape, a.dtype)
                s[...] = a
                out = c.shared_array(a.shape, a.dtype)
                out[...] = 0  # its pages exist, as an array in use has
                u, dn = transfer_rates(c, s, out)
                print(f"pto.client 256 MiB through the fd socket, shared arrays (no copy here): upload {u:.2f} GB/s "
                      f"({u / gu:.2f}x gRPC), download {dn:.2f} GB/s ({dn / gd:.2f}x gRPC)   [target >= 8 GB/s]")
        finally:
            d.stop()


def job_figures():
    with tempfile.TemporaryDirectory() as tmp:
        d = Ptod(tmp, "--chips", "0")
        try:
            with pto.client.Client(d.address) as c, pto.client.Client(d.address, fd_jobs=False) as g:
                c.register_import(os.path.abspath(os.path.join(BUILD, "tests", "worker",
                                                               "libpto_test_native_subs.so")),
                                  "pto_test_noop", name="noop")
                calls = {"floor": g.version, "gRPC": lambda: g.run("noop"), "fd": lambda: c.run("noop")}
                us = {k: [] for k in calls}
                for i in range(1200):
                    for k, call in calls.items():
                        t0 = time.perf_counter()
                        call()
                        if i >= 200:
                            us[k].append((time.perf_counter() - t0) * 1e6)
                p = {k: statistics.median(v) for k, v in us.items()}
                print(f"pto.client run() of a trivial job, in turns with a unary call (1000 rounds): floor p50 "
                      f"{p['floor']:.0f} us, through gRPC {p['gRPC']:.0f} us ({p['gRPC'] / p['floor']:.2f}x), "
                      f"through the fd socket {p['fd']:.0f} us ({p['fd'] / p['floor']:.2f}x)")
        finally:
            d.stop()


if __name__ == "__main__":
    print(f"python bench: /usr/bin/python3 {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    engine_figures()
    client_figures()
    job_figures()
