"""The client's end of ptod's fd socket (docs/proto.md, "The fd socket").

Beside a unix gRPC socket P the daemon listens on P + ".fd". Each transfer is
one ``FdRequest`` (a little-endian uint32 length, then the message) with a
memfd attached (SCM_RIGHTS); the daemon copies between that memfd's pages and
its arena and answers with an ``FdReply`` framed alike. No byte of the tensor
crosses the socket.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import socket
import struct
import weakref
from typing import Dict, Optional, Tuple

import numpy as np

from .v1 import ptod_pb2 as pb


def socket_path(address: str) -> str:
    """The fd socket of a ``unix:`` address, "" for any other."""
    if address.startswith("unix://"):
        return address[7:] + ".fd"
    if address.startswith("unix:"):
        return address[5:] + ".fd"
    return ""


class SharedMemory:
    """memfds this process shares with the daemon, each sealed against
    shrinking (the daemon maps only such) and mapped here; found again from
    any C-contiguous numpy array that lies in one."""

    def __init__(self) -> None:
        # id(mmap) -> (weak reference, its fd, its address, its size)
        self._maps: Dict[int, Tuple[weakref.ref, int, int, int]] = {}

    def array(self, shape, dtype) -> np.ndarray:
        dt = np.dtype(dtype)
        count = int(np.prod(shape)) if len(shape) else 1
        nbytes = max(count * dt.itemsize, 1)
        fd = os.memfd_create("pto-shared-array", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        key = id(mm)
        address = np.frombuffer(mm, dtype=np.uint8).ctypes.data
        self._maps[key] = (weakref.ref(mm), fd, address, nbytes)
        # The descriptor lives as long as the mapping (the arrays over it).
        weakref.finalize(mm, self._forget, key, fd)
        return np.frombuffer(mm, dtype=dt, count=count).reshape(shape)

    def _forget(self, key: int, fd: int) -> None:
        self._maps.pop(key, None)
        os.close(fd)

    def find(self, a: np.ndarray) -> Optional[Tuple[int, int]]:
        """(fd, offset) of a C-contiguous array inside one of ours, else None."""
        if not a.flags.c_contiguous:
            return None
        base = a
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        if isinstance(base, memoryview):
            base = base.obj
        if not isinstance(base, mmap.mmap):
            return None
        entry = self._maps.get(id(base))
        if entry is None or entry[0]() is not base:
            return None
        _, fd, address, size = entry
        offset = a.ctypes.data - address
        if offset < 0 or offset + a.nbytes > size:
            return None
        return fd, offset


class NotSent(OSError):
    """The request never reached the daemon: nothing happened."""


class ReplyLost(OSError):
    """The request was sent and its reply lost: the transfer may have happened."""


class Channel:
    """One connection to the fd socket, one request at a time (the caller
    holds a lock around each call)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._sock = self._connect()

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        return s

    def close(self) -> None:
        # shutdown first: a thread blocked in this socket's recv wakes (a
        # close alone leaves it there), and the daemon sees the hang-up.
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _send(self, frame: bytes, fd: int) -> None:
        if fd < 0:  # a job: no descriptor
            self._sock.sendall(frame)
            return
        sent = socket.send_fds(self._sock, [frame], [fd])  # the descriptor rides with the first bytes
        if sent < len(frame):
            self._sock.sendall(frame[sent:])

    def call(self, req: "pb.FdRequest", fd: int, timeout: float) -> "pb.FdReply":
        body = req.SerializeToString()
        frame = struct.pack("<I", len(body)) + body
        try:
            self._sock.settimeout(timeout)
            self._send(frame, fd)
        except OSError:
            # The daemon closes a connection idle for a minute: connect again
            # and send once more (nothing of the request reached it).
            try:
                self._sock.close()
                self._sock = self._connect()
                self._sock.settimeout(timeout)
                self._send(frame, fd)
            except OSError as e:
                raise NotSent(str(e)) from None
        try:
            n = struct.unpack("<I", self._recv(4))[0]
            if n > 1 << 20:
                raise ConnectionError(f"a reply of {n} bytes")
            reply = pb.FdReply()
            reply.ParseFromString(self._recv(n))
        except (OSError, ValueError) as e:
            raise ReplyLost(str(e)) from None
        if reply.refused:  # closed at accept (too many connections), the request unread
            raise NotSent(f"the fd socket refused the connection: {reply.message}")
        return reply

    def _recv(self, n: int) -> bytes:
        chunks = []
        while n > 0:
            b = self._sock.recv(n)
            if not b:
                raise ConnectionError("the fd socket closed")
            chunks.append(b)
            n -= len(b)
        return b"".join(chunks)
