"""pto.Worker from Python: chips and Python sub callables as forked children,
Python orchestrations, numpy arrays over shared memory. Goldens in numpy."""
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pto
import subs

N = 16384


def vector_golden(a, b):
    s = a + b
    return (s + 1) * (s + 2)


@pytest.fixture
def worker(example):
    with pto.Worker(level=3, num_chips=1, num_sub_workers=2) as w:
        handles = {
            "vector": w.register(pto.ChipCallable.from_config(example("vector")), name="vector"),
            "add_one": w.register(subs.add_one),
            "scale": w.register(subs.scale),
            "copy": w.register(subs.copy),
            "boom": w.register(subs.boom),
        }
        w.init()
        yield w, handles


def test_a_chip_then_a_python_sub_write_the_shared_arrays_in_place(worker):
    w, h = worker
    a, b, f = (w.alloc([N], np.float32) for _ in range(3))
    rng = np.random.default_rng(1)
    a[:] = rng.uniform(-1, 1, N)
    b[:] = rng.uniform(-1, 1, N)

    def orch(o, args, cfg):
        o.submit_next_level(h["vector"], pto.TaskArgs().add_tensor(a, pto.IN).add_tensor(b, pto.IN)
                            .add_tensor(f, pto.OUT).add_scalar(N), cfg)
        o.submit_sub(h["add_one"], pto.TaskArgs().add_tensor(f, pto.INOUT))  # after the chip: f is its input

    r = w.run(orch, cfg=pto.CallConfig(block_dim=4))
    assert r.ok, r.message
    assert r.tasks_succeeded == 2
    # No copy: the arrays are the shared memory the children wrote.
    np.testing.assert_allclose(f, vector_golden(a, b) + 1, rtol=1e-5)


def test_scalars_follow_the_tensors_in_the_order_added(worker):
    w, h = worker
    x = w.alloc([64], np.float32)
    x[:] = 2.0

    def orch(o, args, cfg):
        o.submit_sub(h["scale"], pto.TaskArgs().add_tensor(x, pto.INOUT).add_scalar(3))

    assert w.run(orch).ok
    np.testing.assert_array_equal(x, 6.0)


def test_scopes_and_heap_buffers_order_tasks_through_their_tensors(worker):
    w, h = worker
    a, b, out = (w.alloc([N], np.float32) for _ in range(3))
    a[:] = 0.5
    b[:] = 0.25

    def orch(o, args, cfg):
        with o.scope():
            tmp = o.alloc([N], np.float32)  # lives in the scope's heap ring
            o.submit_next_level(h["vector"], pto.TaskArgs().add_tensor(a, pto.IN).add_tensor(b, pto.IN)
                                .add_tensor(tmp, pto.OUT).add_scalar(N), cfg)
            o.submit_sub(h["add_one"], pto.TaskArgs().add_tensor(tmp, pto.INOUT))
            o.submit_sub(h["copy"], pto.TaskArgs().add_tensor(tmp, pto.IN).add_tensor(out, pto.OUTPUT_EXISTING))

    r = w.run(orch)
    assert r.ok, r.message
    np.testing.assert_allclose(out, (0.75 + 1) * (0.75 + 2) + 1, rtol=1e-6)


def test_a_python_exception_is_the_task_failure_with_its_traceback_and_poisons_its_consumers(worker):
    w, h = worker
    x = w.alloc([4], np.float32)
    x[:] = 7

    def orch(o, args, cfg):
        o.submit_sub(h["boom"], pto.TaskArgs().add_tensor(x, pto.INOUT))
        o.submit_sub(h["add_one"], pto.TaskArgs().add_tensor(x, pto.INOUT))  # consumer of the failed task

    r = w.run(orch)
    assert not r.ok
    assert r.name == "WORKER_RUN_FAILED"
    assert r.tasks_failed == 1 and r.tasks_skipped == 1
    f = r.first_failure
    assert f["outcome"] == "TASK_FAILURE"
    assert "Traceback" in f["message"] and "ValueError: bad value 7.0 in a sub callable" in f["message"]
    np.testing.assert_array_equal(x, 7)  # the consumer never ran
    with pytest.raises(pto.Error) as e:
        r.raise_for_status()
    assert e.value.name == "WORKER_RUN_FAILED"
    # The Worker goes on.
    assert w.run(lambda o, args, cfg: o.submit_sub(h["add_one"], pto.TaskArgs().add_tensor(x, pto.INOUT)) and 0).ok
    np.testing.assert_array_equal(x, 8)


def test_an_exception_in_the_orchestration_fails_the_run_with_its_traceback(worker):
    w, _ = worker

    def orch(o, args, cfg):
        raise RuntimeError("an orchestration bug")

    r = w.run(orch)
    assert not r.ok
    assert "RuntimeError: an orchestration bug" in r.message


def test_an_orchestration_that_returns_neither_none_nor_an_int_fails_its_run_and_its_orchestrator_ends(worker):
    w, _ = worker
    kept = []
    r = w.run(lambda o, args, cfg: kept.append(o) or "x")
    assert not r.ok
    assert "the orchestration returned str 'x'; it must return None or an int" in r.message
    # Its Orchestrator ended with its run (before: it stayed usable, "Unable to cast" the run's message).
    with pytest.raises(ValueError, match="ended"):
        kept[0].cancelled()
    assert w.run(lambda o, args, cfg: 0).ok


def test_arrays_of_a_closed_worker_stay_readable(tmp_path):
    script = tmp_path / "after_close.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import pto
        with pto.Worker(level=3, num_chips=0, num_sub_workers=1) as w:
            w.init()
            f = w.alloc([4], np.float32)
            f[:] = 7
        print("after close", float(f.sum()))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr  # before: -11, the arena unmapped under the array
    assert "after close 28.0" in out.stdout


def test_a_run_holding_the_last_reference_to_its_worker_ends_without_killing_the_process(tmp_path):
    # The run's arrays (its arguments, or the orchestration's closure) hold
    # the last reference to the Worker (an alloc'd array keeps its Worker
    # alive). Before, the run's end dropped them on the engine's finisher or
    # run thread: ~Worker ran there and joined that thread ("Resource deadlock
    # avoided", abort). Now they are released on a Python thread, and the
    # Worker (its children) is gone soon after.
    script = tmp_path / "last_ref.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, threading, time
        import numpy as np
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import pto, subs

        def start(via_args, pids):
            w = pto.Worker(level=3, num_chips=0, num_sub_workers=1)
            inc = w.register(subs.add_one)
            w.init()
            pids += [c["pid"] for c in w.children()]
            x = w.alloc([4], np.float32)
            if via_args:
                return w.submit(lambda o, a, c: o.submit_sub(inc, pto.TaskArgs().add_tensor(a[0], pto.INOUT)) and 0,
                                pto.TaskArgs().add_tensor(x, pto.INOUT))
            return w.submit(lambda o, a, c: o.submit_sub(inc, pto.TaskArgs().add_tensor(x, pto.INOUT)) and 0)

        def gone(pids):
            for _ in range(200):
                alive = [p for p in pids if os.path.exists(f"/proc/{{p}}")]
                if not alive:
                    return True
                time.sleep(0.05)
            return False

        for via_args in (True, False):
            pids = []
            r = start(via_args, pids).result()
            print("main", via_args, r.ok, r.message, gone(pids), flush=True)

        def in_a_thread(out):
            for via_args in (True, False):
                pids = []
                out.append((start(via_args, pids).result().ok, pids))
        out = []
        t = threading.Thread(target=in_a_thread, args=(out,))
        t.start()
        t.join(60)
        print("thread", [ok for ok, _ in out], gone([p for _, ps in out for p in ps]), flush=True)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr  # before: -6, "Resource deadlock avoided"
    assert "main True True  True" in out.stdout, out.stdout + out.stderr
    assert "main False True  True" in out.stdout, out.stdout + out.stderr
    assert "thread [True, True] True" in out.stdout, out.stdout + out.stderr


def test_a_refused_add_next_level_worker_leaves_the_inner_worker_usable():
    with pto.Worker(level=3, num_sub_workers=1) as outer, pto.Worker(level=3, num_sub_workers=1) as inner:
        with pytest.raises(pto.Error, match="only levels >= 4"):
            outer.add_next_level_worker(inner)
        # Still its own (before: destroyed, "given to a level-4 Worker").
        add_one = inner.register(subs.add_one)
        inner.init()
        x = inner.alloc([4], np.float32)
        x[:] = 1
        r = inner.run(lambda o, a, c: o.submit_sub(add_one, pto.TaskArgs().add_tensor(x, pto.INOUT)) and 0)
        assert r.ok, r.message
        np.testing.assert_array_equal(x, 2)


def test_submit_returns_a_handle_and_arguments_reach_the_orchestration(worker):
    w, h = worker
    x = w.alloc([16], np.float32)
    seen = []

    def orch(o, args, cfg):
        seen.append((args[0].shape, args[1]))
        o.submit_sub(h["add_one"], pto.TaskArgs().add_tensor(args[0], pto.INOUT))

    run = w.submit(orch, pto.TaskArgs().add_tensor(x, pto.INOUT).add_scalar(42))
    assert run.wait(30)
    assert run.done()
    assert run.result().ok
    assert seen == [((16,), 42)]
    np.testing.assert_array_equal(x, 1)


def test_memory_that_is_not_shared_is_refused_at_submit(worker):
    w, h = worker
    private = np.zeros(16, np.float32)
    errors = []

    def orch(o, args, cfg):
        try:
            o.submit_sub(h["add_one"], pto.TaskArgs().add_tensor(private, pto.INOUT))
        except pto.Error as e:
            errors.append(e)

    r = w.run(orch)
    assert not r.ok  # a refused submit also fails the run
    assert errors and "shared" in errors[0].message


def test_registration_rules(example, native_subs):
    with pto.Worker(level=3, num_chips=0, num_sub_workers=1) as w:
        w.init()
        # A native library can still be registered: it is broadcast to the running children.
        noop = w.register(pto.NativeCallable.import_(native_subs, "pto_test_add_one"))
        x = w.alloc([8], np.float32)
        assert w.run(lambda o, a, c: o.submit_sub(noop, pto.TaskArgs().add_tensor(x, pto.INOUT)) and 0).ok
        np.testing.assert_array_equal(x, 1)
        # After init(), a module-level function is registered by reference; lambdas and closures are refused.
        inc = w.register(subs.add_one)
        assert w.run(lambda o, a, c: o.submit_sub(inc, pto.TaskArgs().add_tensor(x, pto.INOUT)) and 0).ok
        np.testing.assert_array_equal(x, 2)
        with pytest.raises(ValueError, match="a lambda or a closure cannot be registered after init"):
            w.register(lambda x: None)

        def local(x):
            pass

        with pytest.raises(ValueError, match="<locals>.local: a lambda or a closure"):
            w.register(local)
    with pytest.raises(TypeError, match="unknown Worker option 'chips'"):
        pto.Worker(chips=1)
    with pytest.raises(pto.Error, match="num_sub_workers"):
        pto.Worker(num_sub_workers=1000)
    with pto.Worker(level=3, num_sub_workers=1) as w:
        with pytest.raises(ValueError, match="init"):
            w.run(lambda o, a, c: 0)


def test_child_cpus_places_the_children_and_leaves_this_process_alone():
    mine = sorted(os.sched_getaffinity(0))
    with pto.Worker(level=3, num_sub_workers=2, child_cpus=[mine[-1]]) as w:
        where = w.register(subs.cpus_of_this_process)
        w.init()
        x = w.alloc([1024], np.int32)
        x[:] = 0
        assert w.run(lambda o, a, c: o.submit_sub(where, pto.TaskArgs().add_tensor(x, pto.INOUT)) and 0).ok
        assert list(np.flatnonzero(x)) == [mine[-1]]
    assert sorted(os.sched_getaffinity(0)) == mine
    with pytest.raises(pto.Error, match="child_cpus holds -1"):
        pto.Worker(child_cpus=[-1])
    with pto.Worker(level=3, num_sub_workers=1, child_cpus=[1023]) as w:
        with pytest.raises(pto.Error, match="child_cpus: cannot run on CPUs 1023"):
            w.init()


def test_a_dtype_without_a_pto_dtype_is_refused(worker):
    w, _ = worker
    with pytest.raises(TypeError, match="has no PTO dtype"):
        w.alloc([4], np.complex64)


def test_ctrl_c_while_waiting_cancels_the_run_and_the_worker_stays_usable(tmp_path):
    script = tmp_path / "interrupt.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, threading, time
        import numpy as np
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import pto, subs
        with pto.Worker(level=3, num_chips=0, num_sub_workers=1) as w:
            slow = w.register(subs.sleep_s)
            inc = w.register(subs.add_one)
            w.init()
            x = w.alloc([4], np.float32)
            threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            t0 = time.monotonic()
            try:
                w.run(lambda o, a, c: o.submit_sub(slow, pto.TaskArgs().add_tensor(x, pto.IN).add_scalar(60)) and 0)
                print("not interrupted")
            except KeyboardInterrupt:
                print("interrupted after %.1f s" % (time.monotonic() - t0))
            r = w.run(lambda o, a, c: o.submit_sub(inc, pto.TaskArgs().add_tensor(x, pto.INOUT)) and 0)
            print("after", r.ok, r.message, float(x[0]))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert "interrupted after" in out.stdout, out.stdout + out.stderr
    seconds = float(out.stdout.split("interrupted after ")[1].split(" s")[0])
    assert seconds < 30  # the 60 s task was stopped, not waited for
    assert "after True  1.0" in out.stdout, out.stdout + out.stderr


def test_help_shows_docstrings():
    assert "L3 engine" in pto.Worker.__doc__
    assert "shared" in pto.TaskArgs.add_tensor.__doc__
    assert "scope" in pto.Orchestrator.scope.__doc__


def h2_name(module):
    return f"{module.__name__}:triple@{pto.worker._module_digest(module.__file__)}"


def test_after_init_a_function_is_found_by_reference_and_a_changed_module_is_refused(tmp_path):
    mod = tmp_path / "late_subs.py"
    mod.write_text("def triple(x):\n    x *= 3\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import late_subs
        with pto.Worker(level=3, num_chips=0, num_sub_workers=2) as w:
            w.init()
            x = w.alloc([8], np.float32)
            x[:] = 2
            # The module was imported after the children were forked: they import it themselves.
            h = w.register(late_subs.triple)
            r = w.run(lambda o, a, c: o.submit_sub(h, pto.TaskArgs().add_tensor(x, pto.INOUT)) and 0)
            assert r.ok, r.message
            np.testing.assert_array_equal(x, 6)
            # Changed on disk after it was loaded here: its digest is another one, so the new code is
            # registered as a new callable; the children import the new file and agree.
            mod.write_text("def triple(x):\n    x *= 3\n# edited\n")
            h2 = w.register(late_subs.triple)
            assert h2.digest != h.digest
            # What a sub worker does with a name whose module changed between the registration and its
            # import: refuses it (the registration fails), never runs other code under the old identity.
            stale = "late_subs:triple@" + "0" * 64
            with pytest.raises(ImportError, match="changed since triple was registered"):
                pto.worker._resolve(stale)
            assert pto.worker._resolve(h2_name(late_subs)) is late_subs.triple
    finally:
        sys.path.remove(str(tmp_path))


def level4_vector(w, example, workers):
    w.init()
    # After init(): the chip package is registered on the L3 workers (over the session for a peer), the
    # Python sub by reference on this Worker's own sub worker.
    vec = w.register(pto.ChipCallable.from_config(example("vector")))
    inc = w.register(subs.add_one)
    a, b = w.alloc([N], np.float32), w.alloc([N], np.float32)
    outs = [w.alloc([N], np.float32) for _ in workers]
    a[:] = np.linspace(-1, 1, N)
    b[:] = 0.5

    def orch(o, args, cfg):
        for f, worker in zip(outs, workers):
            o.submit_next_level(vec, pto.TaskArgs().add_tensor(a, pto.IN).add_tensor(b, pto.IN)
                                .add_tensor(f, pto.OUT).add_scalar(N), cfg, worker=worker)
            o.submit_sub(inc, pto.TaskArgs().add_tensor(f, pto.INOUT))

    r = w.run(orch)
    assert r.ok, r.message
    for f in outs:
        np.testing.assert_allclose(f, vector_golden(a, b) + 1, rtol=1e-5)


def test_level4_with_local_l3_children(example):
    with pto.Worker(level=4, num_sub_workers=1) as w:
        inner = [pto.Worker(level=3, num_chips=1) for _ in range(2)]
        for i in inner:
            w.add_next_level_worker(i)
        with pytest.raises(ValueError, match="given to a level-4 Worker"):
            inner[0].init()
        level4_vector(w, example, workers=[0, 1])
        labels = [c["label"] for c in w.children()]
        assert "l3 0" in labels and "l3 1" in labels


def test_level4_with_a_remote_ptod_peer(example, tmp_path):
    from conftest import Ptod

    peer = Ptod(str(tmp_path))
    try:
        with pto.Worker(level=4, num_sub_workers=1) as w:
            w.add_remote_worker(peer.address, name="peer")
            level4_vector(w, example, workers=[0])
            remote = [c for c in w.children() if c["remote"]]
            assert len(remote) == 1 and "peer" in remote[0]["address"] and remote[0]["tasks_run"] == 1
    finally:
        assert peer.stop() == 0


def test_groups_run_their_members_on_distinct_workers_and_complete_once(worker):
    w, h = worker
    xs = [w.alloc([32], np.float32) for _ in range(2)]
    for x in xs:
        x[:] = 1
    out = {}

    def orch(o, args, cfg):
        out["r"] = o.submit_sub_group(h["scale"], [pto.TaskArgs().add_tensor(x, pto.INOUT).add_scalar(5) for x in xs])
        # a consumer of the whole group: waits for both members
        o.submit_sub(h["add_one"], pto.TaskArgs().add_tensor(xs[0], pto.INOUT))

    r = w.run(orch)
    assert r.ok, r.message
    assert r.tasks_succeeded == 2  # the group is one task
    np.testing.assert_array_equal(xs[0], 6)
    np.testing.assert_array_equal(xs[1], 5)
    assert out["r"].task_id > 0
    assert len(out["r"].tensors) == 2 and out["r"].tensors[0][0].ctypes.data == xs[0].ctypes.data


def test_an_array_the_orchestration_drops_lives_until_its_tasks_are_done(worker):
    w, h = worker
    out = w.alloc([N], np.float32)
    seen = {}

    def orch(o, args, cfg):
        tmp = w.alloc([N], np.float32)  # only this frame refers to it
        tmp[:] = 3
        seen["tmp"] = tmp.ctypes.data
        o.submit_sub(h["scale"], pto.TaskArgs().add_tensor(tmp, pto.INOUT).add_scalar(2))
        o.submit_sub(h["copy"], pto.TaskArgs().add_tensor(tmp, pto.IN).add_tensor(out, pto.OUTPUT_EXISTING))
        del tmp
        gc.collect()
        # Had its memory been freed, the next buffer would take its place.
        other = w.alloc([N], np.float32)
        seen["other"] = other.ctypes.data
        seen["keep"] = other  # keep it past the run: only the address matters

    r = w.run(orch)
    assert r.ok, r.message
    assert seen["other"] != seen["tmp"]
    np.testing.assert_array_equal(out, 6)


def test_two_closures_of_one_factory_are_two_callables(example):
    def make(k):
        def f(x):
            x += k
        return f

    with pto.Worker(level=3, num_sub_workers=1) as w:
        one, ten = w.register(make(1)), w.register(make(10))
        assert one.digest != ten.digest
        w.init()
        x = w.alloc([4], np.float32)
        assert w.run(lambda o, a, c: (o.submit_sub(one, pto.TaskArgs().add_tensor(x, pto.INOUT)),
                                      o.submit_sub(ten, pto.TaskArgs().add_tensor(x, pto.INOUT))) and 0).ok
        np.testing.assert_array_equal(x, 11)
