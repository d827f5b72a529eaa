"""pto.client against a real ptod (build/daemon/ptod on a private socket):
the round trip from numpy through the daemon's chip and back, and errors
with their status and the server's message."""
import re
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

import pto
import pto.client
from conftest import BUILD, Ptod

N = 16384


@pytest.fixture
def ptod(tmp_path):
    d = Ptod(str(tmp_path))
    yield d
    if d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait()


def test_a_chip_job_from_numpy_through_ptod_and_back(ptod, example):
    with pto.client.Client(ptod.address) as c:
        assert c.health() == "SERVING"
        reg = c.register_chip(example("vector"), name="vector")
        assert reg.name == "vector" and len(reg.identity.digest) == 32
        rng = np.random.default_rng(5)
        a = rng.uniform(-1, 1, N).astype(np.float32)
        b = rng.uniform(-1, 1, N).astype(np.float32)
        ta = c.upload(a, "a")
        assert ta.bytes == N * 4 and list(ta.shape) == [N]
        c.upload(b, "b")
        c.alloc([N], np.float32, "f")
        job = c.submit("vector", [("a", "in"), ("b", "in"), ("f", "out")], scalars=[N], config={"block_dim": 4},
                       label="from python")
        events = list(job.watch())
        assert events[-1].state == pto.v1.ptod_pb2.SUCCEEDED
        result = job.result()
        assert result.label == "from python" and result.callable == "vector"
        f = c.download("f")
        assert f.dtype == np.float32 and f.shape == (N,)
        s = a + b
        np.testing.assert_allclose(f, (s + 1) * (s + 2), rtol=1e-5)
        np.testing.assert_array_equal(c.download(ta.handle.id), a)  # by id, byte for byte
        assert [j.job_id for j in c.jobs()] == [job.id]
        assert c.workers().children[0].name.startswith("chip")
        names = {t.handle.name for t in c.tensors().tensors}
        assert names == {"a", "b", "f"}
        c.free("a")
        assert {t.handle.name for t in c.tensors().tensors} == {"b", "f"}
        # run(): submit and wait in one call.
        r = c.run("vector", ["b", "b", ("f", "out")], scalars=[N])
        assert r.state == pto.v1.ptod_pb2.SUCCEEDED
        np.testing.assert_allclose(c.download("f"), (2 * b + 1) * (2 * b + 2), rtol=1e-5)
    assert ptod.stop() == 0


def test_errors_carry_the_status_and_the_servers_message(ptod, example):
    with pto.client.Client(ptod.address) as c:
        with pytest.raises(pto.client.RpcError) as e:
            c.download("nothing")
        assert e.value.name == "NOT_FOUND" and "no tensor named 'nothing'" in e.value.message
        with pytest.raises(pto.client.RpcError) as e:
            c.submit("vector", [("x", "in")])
        assert e.value.name == "NOT_FOUND" and "vector" in e.value.message
        c.upload(np.zeros(4, np.float32), "t")
        with pytest.raises(pto.client.RpcError) as e:
            c.upload(np.zeros(4, np.float32), "t")
        assert e.value.name == "ALREADY_EXISTS" and "exists" in e.value.message
        with pytest.raises(pto.Error):  # a package the client cannot read: the package reader's error
            c.register_chip("/nonexistent/kernels.toml")
        with pytest.raises(ValueError, match="tag 'sideways'"):
            c.submit("vector", [("t", "sideways")])
        with pytest.raises(TypeError, match="complex64"):
            c.upload(np.zeros(4, np.complex64))
    with pto.client.Client("unix:" + ptod.dir + "/no.sock", timeout=2) as c:
        with pytest.raises(pto.client.RpcError) as e:
            c.health()
        assert e.value.name in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def test_a_job_can_be_cancelled_and_its_events_end_with_the_final_state(ptod):
    sleep_config = str(BUILD / "tests" / "worker" / "sleep_chip.toml")
    with pto.client.Client(ptod.address) as c:
        c.register_chip(sleep_config, name="sleep")
        job = c.submit("sleep", scalars=[30000])  # 30 s on the chip
        deadline = time.monotonic() + 30
        while c.jobs()[0].state != pto.v1.ptod_pb2.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert job.cancel() == "CANCELLED"  # how it ended: the reply waits for it
        events = list(job.watch())
        assert events[-1].state == pto.v1.ptod_pb2.CANCELLED
        assert job.result().state == pto.v1.ptod_pb2.CANCELLED


def test_a_token_names_the_principal_and_an_unknown_one_is_refused(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("alice user alice-token-0123456789\n")
    tokens.chmod(0o600)
    conf = tmp_path / "ptod.toml"
    conf.write_text(f'[server]\ntokens_file = "{tokens}"\n')
    d = Ptod(str(tmp_path), "--config", str(conf))
    try:
        with pto.client.Client(d.address, token="alice-token-0123456789") as alice:
            assert alice.upload(np.ones(4, np.float32), "mine").owner == "alice"
        with pto.client.Client(d.address, token="wrong-token-0123456789") as stranger:
            with pytest.raises(pto.client.RpcError) as e:
                stranger.tensors()
            assert e.value.name == "UNAUTHENTICATED"
    finally:
        assert d.stop() == 0


def test_many_jobs_in_one_call_each_with_its_result_and_a_refusal_naming_the_job(ptod, native_subs):
    with pto.client.Client(ptod.address) as c:
        c.register_import(native_subs, "pto_test_add_one", name="add_one")
        for i in range(8):
            c.upload(np.full(256, float(i), dtype=np.float32), name=f"x{i}")
        jobs = c.submit_many([{"callable": "add_one", "tensors": [(f"x{i}", "inout")]} for i in range(8)],
                             wait_s=30)
        assert [j.id for j in jobs] == sorted(j.id for j in jobs)
        assert all(j.result().state == pto.v1.ptod_pb2.SUCCEEDED for j in jobs)
        for i in range(8):
            assert np.array_equal(c.download(f"x{i}"), np.full(256, i + 1.0, dtype=np.float32))
        before = len(c.jobs())
        with pytest.raises(pto.client.RpcError) as e:
            c.submit_many(["add_one", "no_such_callable"])
        assert "jobs[1]: " in str(e.value)
        assert len(c.jobs()) == before  # nothing was queued


def test_tensors_move_through_the_fd_socket_from_plain_and_shared_arrays(ptod):
    x = np.random.default_rng(3).random((512, 300), dtype=np.float32)
    with pto.client.Client(ptod.address) as c, pto.client.Client(ptod.address, fd_transfers=False) as g:
        assert c.fd_socket and not g.fd_socket
        c.upload(x, name="x")                      # plain memory: the client's staging memfd
        assert np.array_equal(g.download("x"), x)  # and back over gRPC
        g.upload(x, name="y")
        assert np.array_equal(c.download("y"), x)  # larger than the first staging buffer: it grows
        s = c.shared_array(x.shape, np.float32)    # shared memory: no copy on this side
        s[...] = x
        info = c.upload(s, name="s")
        assert info.bytes == x.nbytes
        out = c.shared_array(x.shape, np.float32)
        assert c.download("s", out=out) is out
        assert np.array_equal(out, x)
        plain_out = np.zeros_like(x)
        assert c.download("s", out=plain_out) is plain_out and np.array_equal(plain_out, x)
        small = c.shared_array((10,), np.float32)
        with pytest.raises(pto.client.RpcError) as e:
            c.download("s", out=small)
        assert e.value.name == "OUT_OF_RANGE"
        # A view of a larger shared array: the daemon writes no further than its end.
        big = c.shared_array((2 * x.size,), np.float32)
        big[...] = 7
        with pytest.raises(pto.client.RpcError):
            c.download("s", out=big[:x.size // 2])
        assert np.all(big[x.size // 2:] == 7)
        # An empty view: 0 bytes of room on the wire reads "to the end of the memfd"; it never goes as that.
        with pytest.raises(ValueError):
            c.download("s", out=big[5:5])
        assert np.all(big[x.size // 2:] == 7)
        with pytest.raises(ValueError):
            c.download("s", out=big)  # room enough, but not the tensor's size


def test_a_jobs_log_and_trace(ptod, native_subs, example):
    with pto.client.Client(ptod.address) as c:
        c.register_import(native_subs, "pto_test_say", name="say")
        job = c.submit("say", scalars=[42])
        assert job.result(wait_s=30).state == pto.v1.ptod_pb2.SUCCEEDED
        text = b"".join(job.logs()).decode()
        assert "say 42 to stdout" in text and "say 42 on stderr" in text
        # A trace: a chip job submitted with profiling.
        c.register_chip(example("vector"), name="vector")
        a = c.upload(np.ones(N, dtype=np.float32))
        b = c.upload(np.ones(N, dtype=np.float32))
        f = c.alloc([N], np.float32)
        traced = c.submit("vector", [a, b, (f, "out")], scalars=[N], config={"enable_profiling": True})
        assert traced.result(wait_s=60).state == pto.v1.ptod_pb2.SUCCEEDED
        assert b"traceEvents" in traced.trace()
        with pytest.raises(pto.client.RpcError) as e:
            job.trace()
        assert "has no trace" in str(e.value)


def test_jobs_go_through_the_fd_socket_with_grpcs_answers(tmp_path, native_subs):
    d = Ptod(str(tmp_path), metrics="127.0.0.1:0")
    try:
        def fd_submits() -> int:
            text = urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics", timeout=10).read().decode()
            return int(re.search(r'ptod_fd_socket_requests_total\{op="submit"\} (\d+)', text).group(1))

        with pto.client.Client(d.address) as c, pto.client.Client(d.address, fd_jobs=False) as g:
            c.register_import(native_subs, "pto_test_noop", name="noop")
            assert fd_submits() == 0
            # run(): one submit that waits, its result in the reply.
            assert c.run("noop").state == pto.v1.ptod_pb2.SUCCEEDED
            assert fd_submits() == 1
            job = c.submit("noop")
            assert job.result(wait_s=30).state == pto.v1.ptod_pb2.SUCCEEDED
            assert fd_submits() == 2
            # A refusal as gRPC words it.
            with pytest.raises(pto.client.RpcError) as through_fd:
                c.submit("no_such_callable")
            with pytest.raises(pto.client.RpcError) as through_grpc:
                g.submit("no_such_callable")
            assert through_fd.value.code == through_grpc.value.code
            assert through_fd.value.message == through_grpc.value.message
            assert fd_submits() == 3
            assert g.run("noop").state == pto.v1.ptod_pb2.SUCCEEDED
            assert fd_submits() == 3
    finally:
        assert d.stop() == 0


def test_close_does_not_wait_for_a_submit_that_waits_for_its_job(ptod, native_subs):
    c = pto.client.Client(ptod.address)
    c.register_import(native_subs, "pto_test_sleep", name="sleep")
    outcome = []

    def run():
        try:
            outcome.append(c.run("sleep", scalars=[3000]).state)
        except pto.client.RpcError as e:
            outcome.append(e)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while not any(j.state == pto.v1.ptod_pb2.RUNNING for j in c.jobs()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    t0 = time.monotonic()
    c.close()  # the run's submit holds the jobs' connection meanwhile
    assert time.monotonic() - t0 < 0.5
    t.join(timeout=30)
    assert not t.is_alive()
    # The call in flight ends at once, as a closed gRPC channel's would (its
    # reply cannot come any more), not at the job's end 3 s in; the job goes
    # on in the daemon.
    assert time.monotonic() - t0 < 2.0
    assert len(outcome) == 1 and isinstance(outcome[0], pto.client.RpcError)
    assert outcome[0].name == "UNKNOWN" and "the job may have been submitted" in outcome[0].message
    with pto.client.Client(ptod.address) as again:
        job = again.jobs(limit=1)[0]
        assert again.run("sleep", scalars=[1]).state == pto.v1.ptod_pb2.SUCCEEDED
        assert pto.client.Job(again, job.job_id).result(wait_s=30).state == pto.v1.ptod_pb2.SUCCEEDED


def test_keep_freed_memory_then_transfers_over_grpc_round_trip(ptod):
    # In a process of its own: the setting is process-wide and for good.
    script = f"""
import numpy as np, pto, pto.client
pto.client.keep_freed_memory()
pto.client.keep_freed_memory(0)  # changes nothing
try:
    pto.client.keep_freed_memory(2**31)
    raise SystemExit("2**31 was taken")
except pto.Error as e:
    assert "2147483648 bytes: must be 0 or in 67108864..2147483647" in str(e), str(e)
a = np.arange(4 << 20, dtype=np.float32)
with pto.client.Client({ptod.address!r}, fd_transfers=False) as g:
    for _ in range(3):
        t = g.upload(a, name="")
        assert np.array_equal(g.download(t), a)
        g.free(t)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
