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


class Channel:
    """One connection to the fd socket, one request at a time."""

    def __init__(self, path: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(path)
        except OSError:
            self._sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def call(self, req: "pb.FdRequest", fd: int, timeout: float) -> "pb.FdReply":
        self._sock.settimeout(timeout)
        body = req.SerializeToString()
        frame = struct.pack("<I", len(body)) + body
        sent = socket.send_fds(self._sock, [frame], [fd])  # the descriptor rides with the first bytes
        if sent < len(frame):
            self._sock.sendall(frame[sent:])
        n = struct.unpack("<I", self._recv(4))[0]
        reply = pb.FdReply()
        reply.ParseFromString(self._recv(n))
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
