"""A ptod client over numpy (docs/python.md, "The ptod client"; the wire
contract is docs/proto.md). Stubs are generated at build time from
proto/pto/v1/ptod.proto.

>>> c = pto.client.Client()                  # $PTOD_ADDRESS, else unix:/run/ptod/ptod.sock
>>> c.register_chip("build/examples/vector/kernels.toml", name="vector")
>>> a = c.upload(np.random.rand(16384).astype(np.float32), "a")
>>> ...
>>> job = c.submit("vector", [("a", "in"), ("b", "in"), ("f", "out")], scalars=[16384])
>>> for event in job.watch(): print(event.tasks_done, "/", event.tasks_total)
>>> job.result().state == pto.v1.ptod_pb2.SUCCEEDED
>>> f = c.download("f")
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from . import _fd, _pto
from .v1 import ptod_pb2 as pb
from .v1 import ptod_pb2_grpc as rpc

__all__ = ["Client", "Job", "RpcError", "keep_freed_memory"]

# numpy dtype -> pto.v1.DataType (the values of PTO2DataType).
_DTYPES = {np.dtype(np.float32): pb.FLOAT32, np.dtype(np.float16): pb.FLOAT16, np.dtype(np.int32): pb.INT32,
           np.dtype(np.int64): pb.INT64, np.dtype(np.int16): pb.INT16, np.dtype(np.int8): pb.INT8,
           np.dtype(np.uint8): pb.UINT8, np.dtype(np.float64): pb.FLOAT64}
_NUMPY = {v: k for k, v in _DTYPES.items()}
_CODES = {c.value[0]: c for c in grpc.StatusCode}  # FdReply.code -> grpc.StatusCode
_TAGS = {"in": pb.INPUT, "out": pb.OUTPUT, "inout": pb.INOUT, "out_existing": pb.OUTPUT_EXISTING,
         "nodep": pb.NO_DEP}

Tensor = Union[str, int, "pb.TensorInfo", "pb.TensorHandle"]


class RpcError(Exception):
    """A call the daemon (or the transport) refused: ``code`` (a
    grpc.StatusCode), ``name`` (``"NOT_FOUND"``, ...) and the server's
    ``message``."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.name = code.name
        self.message = message


def keep_freed_memory(nbytes: int = 64 << 20) -> None:
    """Keep up to ``nbytes`` of freed memory at the top of each of the C
    allocator's arenas for the next allocations, instead of giving it back to
    the kernel, and serve blocks up to 32 MiB from the arenas.

    For a program that moves large arrays over gRPC: grpcio otherwise reads
    chunks into pages faulted in afresh (a 256 MiB download read 0.20-0.26
    GB/s here before the call, 0.44-0.68 after; docs/python.md). Process-wide
    and for good, so it is the program's choice, not the client's; the fd
    socket (a local ptod) does not need it. ``0`` changes nothing; otherwise
    ``nbytes`` is 64 MiB to 2**31 - 1. Raises :class:`pto.Error` for a value
    out of that range or an allocator that refuses (AddressSanitizer's), and
    ``TypeError`` for a negative one.
    """
    _pto.keep_freed_memory(nbytes)


def _call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except grpc.RpcError as e:  # pragma: no branch - one translation for every call
        raise RpcError(e.code(), e.details() or "") from None


def _handle(t: Tensor) -> "pb.TensorHandle":
    if isinstance(t, pb.TensorHandle):
        return t
    if isinstance(t, pb.TensorInfo):
        return t.handle
    if isinstance(t, (int, np.integer)):
        return pb.TensorHandle(id=int(t))
    if isinstance(t, str):
        return pb.TensorHandle(name=t)
    raise TypeError(f"a tensor is a name, an id or a TensorInfo, not {type(t).__name__}")


def _ref(name_or_digest: str) -> "pb.CallableRef":
    if len(name_or_digest) == 64 and all(ch in "0123456789abcdef" for ch in name_or_digest):
        return pb.CallableRef(digest=bytes.fromhex(name_or_digest))
    return pb.CallableRef(name=name_or_digest)


class Job:
    """A submitted job: ``id``, ``watch()``, ``result()``, ``logs()``, ``trace()``, ``cancel()``."""

    def __init__(self, client: "Client", job_id: int, final: Optional["pb.JobResult"] = None) -> None:
        self._c = client
        self.id = job_id
        self._final = final  # the result a batch waited for

    def watch(self) -> Iterator["pb.JobEvent"]:
        """Its progress: the current state, each change (tasks_done /
        tasks_total while it runs), and the final event with the result."""
        stream = self._c._jobs.Watch(pb.WatchRequest(job_id=self.id), metadata=self._c._md)
        try:
            yield from stream
        except grpc.RpcError as e:
            raise RpcError(e.code(), e.details() or "") from None

    def result(self, wait_s: float = 0) -> "pb.JobResult":
        """Its result now, or once it ends within ``wait_s`` seconds."""
        if self._final is not None:
            return self._final
        return _call(self._c._jobs.Result, pb.ResultRequest(job_id=self.id, wait_ms=int(wait_s * 1000)),
                     metadata=self._c._md, timeout=self._c.timeout + wait_s)

    def _file(self, rpc_method, follow: bool) -> Iterator[bytes]:
        stream = rpc_method(pb.JobFileRequest(job_id=self.id, follow=follow), metadata=self._c._md,
                            timeout=None if follow else self._c.timeout + 600)
        try:
            for chunk in stream:
                yield chunk.data
        except grpc.RpcError as e:
            raise RpcError(e.code(), e.details() or "") from None

    def logs(self, follow: bool = False) -> Iterator[bytes]:
        """What its tasks and orchestration wrote to stdout and stderr, in
        chunks; ``follow``: and what they write until it ends."""
        return self._file(self._c._jobs.Logs, follow)

    def trace(self) -> bytes:
        """Its swimlane trace (Chrome trace JSON; submitted with ``enable_profiling``)."""
        return b"".join(self._file(self._c._jobs.Trace, False))

    def cancel(self) -> str:
        """Cancels it; the state it is in (CANCELLED, or the final state it had reached)."""
        r = _call(self._c._jobs.Cancel, pb.CancelRequest(job_id=self.id), metadata=self._c._md,
                  timeout=self._c.timeout)
        return pb.JobState.Name(r.state)

    def __repr__(self) -> str:
        return f"<pto.client.Job {self.id}>"


class Client:
    """``Client(address=None, token=None, tls=None, timeout=60, fd_transfers=True, fd_jobs=True)``.

    ``address``: ``unix:/path`` or ``host:port`` (default ``$PTOD_ADDRESS``,
    else ``unix:/run/ptod/ptod.sock``). ``token``: sent as
    ``authorization: Bearer <token>`` on every call (it names the principal,
    docs/daemon.md "Principals"). ``tls``: ``True`` (system roots) or a dict
    with ``ca``, ``cert``, ``key`` (PEM file paths) and ``server_name``.
    On a unix address tensors (``fd_transfers``) and jobs' submissions
    (``fd_jobs``) go through the daemon's fd socket when it has one
    (docs/proto.md, "The fd socket"); ``False``: gRPC. Every failure is an :class:`RpcError` with the status and the server's
    message.
    """

    def __init__(self, address: Optional[str] = None, token: Optional[str] = None,
                 tls: Union[None, bool, dict] = None, timeout: float = 60.0, fd_transfers: bool = True,
                 fd_jobs: bool = True) -> None:
        self.address = address or os.environ.get("PTOD_ADDRESS") or "unix:/run/ptod/ptod.sock"
        self.timeout = timeout
        self._md = (("authorization", f"Bearer {token}"),) if token else ()
        self._token = token or ""
        # Tensors through the daemon's fd socket when it has one (unix addresses).
        self._fd_path = _fd.socket_path(self.address) if fd_transfers and not tls else ""
        self._fd: Optional[_fd.Channel] = None
        self._shared = _fd.SharedMemory()
        self._staging: Optional[np.ndarray] = None
        self._fd_lock = threading.Lock()  # one transfer at a time uses the channel and the staging buffer
        # Jobs through the fd socket too (Jobs.Submit without gRPC), on a
        # connection of their own; one submit at a time, others take gRPC.
        self._jobs_fd_path = _fd.socket_path(self.address) if fd_jobs and not tls else ""
        self._jobs_fd: Optional[_fd.Channel] = None
        self._jobs_fd_used = 0.0
        self._jobs_fd_retry_at = 0.0  # gRPC until then: the fd socket was not there or refused
        self._jobs_fd_lock = threading.Lock()
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        if tls:
            spec = tls if isinstance(tls, dict) else {}

            def read(key):
                return open(spec[key], "rb").read() if spec.get(key) else None

            creds = grpc.ssl_channel_credentials(read("ca"), read("key"), read("cert"))
            if spec.get("server_name"):
                options.append(("grpc.ssl_target_name_override", spec["server_name"]))
            self._channel = grpc.secure_channel(self.address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(self.address, options=options)
        self._registry = rpc.RegistryStub(self._channel)
        self._tensors = rpc.TensorsStub(self._channel)
        self._jobs = rpc.JobsStub(self._channel)
        self._node = rpc.NodeStub(self._channel)

    def close(self) -> None:
        if self._fd is not None:
            self._fd.close()
            self._fd = None
        # Not under the jobs' lock: a submit waiting for its job holds it.
        jobs_fd, self._jobs_fd = self._jobs_fd, None
        if jobs_fd is not None:
            jobs_fd.close()
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _unary(self, fn, request):
        return _call(fn, request, metadata=self._md, timeout=self.timeout)

    # ---------------------------------------------------------------- registry

    def register_chip(self, kernels_toml: str, name: str = "", publish: bool = False) -> "pb.RegisterReply":
        """Registers a kernel package: its config and the libraries it names travel as a bundle."""
        config, libs = _pto.bundle_package(str(kernels_toml))
        req = pb.RegisterRequest(name=name, chip=pb.ChipBundle(config_toml=config, libraries=libs), publish=publish)
        return self._unary(self._registry.Register, req)

    def register_import(self, library: str, symbol: str, name: str = "", orchestration: bool = False,
                        publish: bool = False) -> "pb.RegisterReply":
        """Registers a native library already on the daemon's host (absolute path)."""
        req = pb.RegisterRequest(name=name, native_import=pb.NativeImport(library_path=library, symbol=symbol),
                                 abi=pb.ABI_ORCHESTRATION if orchestration else pb.ABI_SUB, publish=publish)
        return self._unary(self._registry.Register, req)

    def unregister(self, callable: str) -> None:
        self._unary(self._registry.Unregister, pb.UnregisterRequest(callable=_ref(callable)))

    def publish(self, callable: str, published: bool = True) -> None:
        self._unary(self._registry.Publish, pb.PublishRequest(callable=_ref(callable), published=published))

    def callables(self) -> Sequence["pb.CallableInfo"]:
        return self._unary(self._registry.List, pb.ListCallablesRequest()).callables

    # ----------------------------------------------------------- the fd socket

    @property
    def fd_socket(self) -> bool:
        """Whether tensors move through the daemon's fd socket (connecting on
        first use): the daemon copies between this process's memory and its
        arena, no byte crosses a socket."""
        if self._fd is None and self._fd_path:
            try:
                self._fd = _fd.Channel(self._fd_path)
            except OSError:
                self._fd_path = ""  # none there: gRPC from now on
        return self._fd is not None

    def shared_array(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """A zero-filled array in memory shared with the daemon (a memfd):
        ``upload`` from it and ``download(..., out=it)`` move its bytes with
        the daemon's one copy and none here."""
        return self._shared.array(tuple(int(d) for d in shape), dtype)

    def _fd_call(self, req: "pb.FdRequest", fd: int, nbytes: int) -> Optional["pb.FdReply"]:
        """The reply, or None when the request never reached the daemon (the
        caller uses gRPC); a lost reply is an error (it may have happened)."""
        req.token = self._token
        try:
            return self._fd.call(req, fd, self.timeout + nbytes / 50e6)
        except _fd.NotSent:
            self._fd.close()
            self._fd = None
            return None
        except _fd.ReplyLost as e:
            self._fd.close()
            self._fd = None
            raise RpcError(grpc.StatusCode.UNKNOWN,
                           f"the fd socket: the reply was lost ({e}): the transfer may have happened") from None

    def _staging_for(self, nbytes: int) -> np.ndarray:
        if self._staging is None or self._staging.nbytes < nbytes:
            self._staging = self._shared.array((max(nbytes, 1 << 20),), np.uint8)
        return self._staging

    def _upload_fd(self, a: np.ndarray, name: str) -> Optional["pb.TensorInfo"]:
        where = self._shared.find(a)
        if where is None:  # plain memory: one copy into the staging memfd
            staging = self._staging_for(a.nbytes)
            staging[:a.nbytes] = a.reshape(-1).view(np.uint8)
            where = self._shared.find(staging)
        fd, offset = where
        req = pb.FdRequest(op=pb.FdRequest.UPLOAD, name=name, shape=list(a.shape), dtype=_DTYPES[a.dtype],
                           fd_offset=offset)
        reply = self._fd_call(req, fd, a.nbytes)
        if reply is None:
            return None
        if reply.code:
            raise RpcError(_CODES[reply.code], reply.message)
        return reply.tensor

    def _download_fd(self, tensor: Tensor, out: Optional[np.ndarray]) -> Optional[np.ndarray]:
        req = pb.FdRequest(op=pb.FdRequest.DOWNLOAD, tensor=_handle(tensor))
        # An empty out is not sent as one: 0 bytes of room reads "to the end of the memfd".
        where = self._shared.find(out) if out is not None and out.nbytes else None
        if where is not None:  # straight into the caller's shared array, no further than its end
            req.fd_offset, req.bytes = where[1], out.nbytes
            reply = self._fd_call(req, where[0], out.nbytes)
            if reply is not None and reply.code:
                raise RpcError(_CODES[reply.code], reply.message)
            if reply is not None and reply.tensor.bytes != out.nbytes:
                raise ValueError(f"out has {out.nbytes} bytes; the tensor has {reply.tensor.bytes} (its first "
                                 f"bytes were written)")
            return None if reply is None else out
        staging = self._staging_for(1)
        for _ in range(2):
            fd, offset = self._shared.find(staging)
            req.fd_offset = offset
            reply = self._fd_call(req, fd, staging.nbytes)
            if reply is None:
                return None
            if reply.code == grpc.StatusCode.OUT_OF_RANGE.value[0]:  # grow to the tensor's size, once
                staging = self._staging_for(reply.tensor.bytes)
                continue
            if reply.code:
                raise RpcError(_CODES[reply.code], reply.message)
            info = reply.tensor
            if out is not None and out.nbytes != info.bytes:
                raise ValueError(f"out has {out.nbytes} bytes; the tensor has {info.bytes}")
            result = np.empty([int(d) for d in info.shape], dtype=_NUMPY[info.dtype]) if out is None else out
            result.reshape(-1).view(np.uint8)[:] = staging[:info.bytes]
            return result
        raise RpcError(grpc.StatusCode.OUT_OF_RANGE, reply.message)

    # ------------------------------------------------------------- tensors

    def upload(self, array: np.ndarray, name: str = "", chunk_bytes: int = 4 << 20) -> "pb.TensorInfo":
        """Uploads an array (made C-contiguous). Through the fd socket when
        there is one (from a ``shared_array`` without a copy here), else over
        gRPC in chunks, kept once every byte arrived and its CRC-32C matched."""
        a = np.ascontiguousarray(array)
        if a.dtype not in _DTYPES:
            raise TypeError(f"dtype {a.dtype} has no pto.v1.DataType")
        with self._fd_lock:
            info = self._upload_fd(a, name) if self.fd_socket else None
        if info is not None:
            return info
        data = memoryview(a).cast("B")
        crc = _pto.crc32c(data)
        header = pb.UploadHeader(name=name, shape=list(a.shape), dtype=_DTYPES[a.dtype])

        def chunks() -> Iterable["pb.UploadChunk"]:
            yield pb.UploadChunk(header=header)
            for off in range(0, len(data), chunk_bytes):
                yield pb.UploadChunk(data=bytes(data[off:off + chunk_bytes]))
            yield pb.UploadChunk(trailer=pb.UploadTrailer(crc32c=crc))

        return _call(self._tensors.Upload, chunks(), metadata=self._md,
                     timeout=self.timeout + len(data) / 50e6)

    def alloc(self, shape: Sequence[int], dtype: Any, name: str = "") -> "pb.TensorInfo":
        """A zero-filled tensor on the daemon (for outputs)."""
        dt = np.dtype(dtype)
        if dt not in _DTYPES:
            raise TypeError(f"dtype {dt} has no pto.v1.DataType")
        return self._unary(self._tensors.Alloc, pb.AllocRequest(name=name, shape=list(shape), dtype=_DTYPES[dt]))

    def download(self, tensor: Tensor, chunk_bytes: int = 4 << 20, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The tensor as a numpy array of its shape and dtype: through the fd
        socket when there is one (into ``out``, a ``shared_array`` of the
        tensor's size, without a copy here), else over gRPC with the CRC-32C
        the daemon sends checked (DATA_LOSS otherwise). With ``out`` the bytes
        land there and ``out`` is returned."""
        if out is not None and not out.flags.c_contiguous:
            raise ValueError("out must be C-contiguous")
        with self._fd_lock:
            got = self._download_fd(tensor, out) if self.fd_socket else None
        if got is not None:
            return got
        if out is not None:
            got = self.download(tensor, chunk_bytes)
            if got.nbytes != out.nbytes:
                raise ValueError(f"out has {out.nbytes} bytes; the tensor has {got.nbytes}")
            out.reshape(-1).view(np.uint8)[:] = got.reshape(-1).view(np.uint8)
            return out
        req = pb.DownloadRequest(tensor=_handle(tensor), chunk_bytes=chunk_bytes)
        out: Optional[np.ndarray] = None
        view: Optional[memoryview] = None
        got = crc = 0
        last = False
        try:
            for c in self._tensors.Download(req, metadata=self._md, timeout=600):
                if c.HasField("info"):
                    out = np.empty([int(d) for d in c.info.shape], dtype=_NUMPY[c.info.dtype])
                    view = memoryview(out).cast("B")
                n = len(c.data)
                view[got:got + n] = c.data
                crc = _pto.crc32c(c.data, crc)
                got += n
                if c.last:
                    last = True
                    if c.crc32c != crc:
                        raise RpcError(grpc.StatusCode.DATA_LOSS,
                                       f"download: the bytes have CRC-32C {crc:08x}, the daemon sent {c.crc32c:08x}")
        except grpc.RpcError as e:
            raise RpcError(e.code(), e.details() or "") from None
        if out is None or not last or got != out.nbytes:
            raise RpcError(grpc.StatusCode.DATA_LOSS, f"download: the stream ended after {got} bytes")
        return out

    def free(self, tensor: Tensor) -> None:
        self._unary(self._tensors.Free, pb.FreeTensorRequest(tensor=_handle(tensor)))

    def tensors(self) -> "pb.ListTensorsReply":
        return self._unary(self._tensors.List, pb.ListTensorsRequest())

    # -------------------------------------------------------------------- jobs

    def submit(self, callable: str, tensors: Sequence[Union[Tensor, Tuple[Tensor, Any]]] = (),
               scalars: Sequence[int] = (), config: Optional[dict] = None, label: str = "",
               priority: str = "normal", deadline_ms: int = 0) -> Job:
        """Runs a registered callable (name or hex digest) as a job.

        ``tensors``: daemon tensors (name, id or TensorInfo), each alone (an
        input) or as ``(tensor, tag)`` with tag ``"in"``, ``"out"``,
        ``"inout"``, ``"out_existing"`` or ``"nodep"``. ``config``: CallConfig
        fields (block_dim, aicpu_thread_num, timeout_ms, enable_profiling).
        ``priority``: ``"low"``, ``"normal"`` or ``"high"``.
        """
        req = self._request(callable, tensors, scalars, config, label, priority, deadline_ms)
        return Job(self, self._submit(req).job_id)

    def _submit(self, req: "pb.SubmitRequest") -> "pb.SubmitReply":
        """Jobs.Submit: through the fd socket on a unix address (a
        connection of its own, free), else gRPC."""
        reply = self._submit_fd(req)
        if reply is not None:
            return reply
        return _call(self._jobs.Submit, req, metadata=self._md, timeout=self.timeout + req.wait_ms / 1000)

    def _submit_fd(self, req: "pb.SubmitRequest") -> Optional["pb.SubmitReply"]:
        """The reply through the fd socket, or None: gRPC (no fd socket, the
        connection busy with another thread's job, a request larger than a
        frame, or refused unread)."""
        if not self._jobs_fd_path or time.monotonic() < self._jobs_fd_retry_at:
            return None
        if not self._jobs_fd_lock.acquire(blocking=False):
            return None
        try:
            fr = pb.FdRequest(op=pb.FdRequest.SUBMIT, token=self._token, submit=req)
            if fr.ByteSize() > 64 * 1024:  # the daemon's bound on a frame
                return None
            # The daemon closes a connection idle for a minute: one idle half
            # that long is opened again first, so that a job never races that
            # close (its reply lost, the job not run, and no way to tell).
            channel = self._jobs_fd  # a local: close() may drop the member meanwhile
            if channel is not None and time.monotonic() - self._jobs_fd_used > 30:
                channel.close()
                channel = None
            if channel is None:
                try:
                    channel = self._jobs_fd = _fd.Channel(self._jobs_fd_path)
                except OSError:
                    self._jobs_fd_retry_at = time.monotonic() + 1.0  # none there (now)
                    return None
            try:
                reply = channel.call(fr, -1, self.timeout + req.wait_ms / 1000)
            except _fd.NotSent:  # or refused: for a second, gRPC without trying
                channel.close()
                self._jobs_fd = None
                self._jobs_fd_retry_at = time.monotonic() + 1.0
                return None
            except _fd.ReplyLost as e:
                channel.close()
                self._jobs_fd = None
                raise RpcError(grpc.StatusCode.UNKNOWN,
                               f"the fd socket: the reply was lost ({e}): the job may have been submitted") from None
            self._jobs_fd_used = time.monotonic()
            if reply.code != 0:
                code = next((c for c in grpc.StatusCode if c.value[0] == reply.code), grpc.StatusCode.UNKNOWN)
                raise RpcError(code, reply.message)
            return reply.submit
        finally:
            self._jobs_fd_lock.release()

    def submit_many(self, jobs: Iterable[Union[str, dict]], wait_s: float = 0) -> List[Job]:
        """Many jobs in one call (``Jobs.SubmitBatch``): all are queued or none.

        Each item is a callable's name or a dict of :meth:`submit`'s keyword
        arguments (``{"callable": "add_one", "tensors": [("x", "inout")]}``).
        A refusal names the job (``jobs[i]: ...``). With ``wait_s`` the call
        returns once every job has ended (or the time passed); their
        ``result()`` is then at hand without another call.
        """
        batch = pb.SubmitBatchRequest(wait_ms=int(wait_s * 1000))
        for j in jobs:
            batch.jobs.append(self._request(**({"callable": j} if isinstance(j, str) else j)))
        reply = _call(self._jobs.SubmitBatch, batch, metadata=self._md, timeout=self.timeout + wait_s)
        return [Job(self, r.job_id, r.result if r.HasField("result") else None) for r in reply.jobs]

    def _request(self, callable: str, tensors: Sequence[Union[Tensor, Tuple[Tensor, Any]]] = (),
                 scalars: Sequence[int] = (), config: Optional[dict] = None, label: str = "",
                 priority: str = "normal", deadline_ms: int = 0) -> "pb.SubmitRequest":
        args = pb.TaskArgs(scalars=[int(s) & (2**64 - 1) for s in scalars])
        for t in tensors:
            tensor, tag = t if isinstance(t, tuple) else (t, "in")
            if tag not in _TAGS:
                raise ValueError(f"tag {tag!r} is not one of {', '.join(_TAGS)}")
            args.tensors.add(tensor=_handle(tensor))
            args.tags.append(_TAGS[tag])
        priorities = {"low": pb.PRIORITY_LOW, "normal": pb.PRIORITY_NORMAL, "high": pb.PRIORITY_HIGH}
        if priority not in priorities:
            raise ValueError(f"priority {priority!r} is not low, normal or high")
        return pb.SubmitRequest(callable=_ref(callable), args=args, config=pb.CallConfig(**(config or {})),
                                label=label, priority=priorities[priority], deadline_ms=deadline_ms)

    def run(self, callable: str, tensors: Sequence[Any] = (), scalars: Sequence[int] = (), **kw: Any) -> "pb.JobResult":
        """Submits and waits for the result: in the submit's own reply when
        the job ends within the client's timeout, else by ``watch`` until
        the final event."""
        req = self._request(callable, tensors, scalars, **kw)
        req.wait_ms = min(int(self.timeout * 1000), 2**32 - 1)
        reply = self._submit(req)
        if reply.HasField("result"):
            return reply.result
        job = Job(self, reply.job_id)
        final = None
        for event in job.watch():
            final = event
        return final.result if final is not None else job.result()

    def jobs(self, limit: int = 50, state: str = "", callable: str = "", label: str = "",
             since_ms: int = 0) -> Sequence["pb.JobResult"]:
        """The newest ``limit`` jobs that pass the filters (each applied when
        given; ``state`` as "succeeded", ``since_ms`` a wall-clock time)."""
        req = pb.ListJobsRequest(limit=limit, callable=callable, label=label, since_ms=since_ms)
        if state:
            req.state = pb.JobState.Value(state.upper())
        return self._unary(self._jobs.List, req).jobs

    # -------------------------------------------------------------------- node

    def workers(self) -> "pb.WorkerNode":
        return self._unary(self._node.Workers, pb.WorkersRequest()).root

    def version(self) -> "pb.VersionReply":
        return self._unary(self._node.Version, pb.VersionRequest())

    def health(self, service: str = "") -> str:
        """grpc.health.v1 Check: ``"SERVING"``, ``"NOT_SERVING"``, ... (its two
        one-field messages are encoded here: Debian ships no Python stubs for them)."""
        name = service.encode()
        request = (b"\x0a" + bytes([len(name)]) + name) if name else b""
        check = self._channel.unary_unary("/grpc.health.v1.Health/Check")
        reply = _call(check, request, metadata=self._md, timeout=self.timeout)
        status = reply[1] if len(reply) >= 2 and reply[0] == 0x08 else 0
        return {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}.get(status, str(status))
