"""Stand-ins for cupy.cuda.nccl and cupy.cuda that move numpy arrays over MPI, so the NCCL
engine's own code (ids, dtype and op tables, pointers, streams, grouped send/recv) runs
on machines without a GPU: `NCCLEngine(host, nccl=nccl_standin, cuda=nccl_standin.cuda)`."""
import ctypes
import types

import numpy as np
from mpi4py import MPI

NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN = range(4)
(NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_UINT32, NCCL_INT64, NCCL_UINT64, NCCL_FLOAT16, NCCL_FLOAT32,
 NCCL_FLOAT64) = range(9)
_DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32, np.float64]
_OPS = [MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN]
calls = []  # (method, count) of every call, for tests to inspect


def get_unique_id():
    return tuple(range(-64, 64))


def _arr(ptr, count, dt):
    dt = np.dtype(_DTYPES[dt])
    return np.frombuffer((ctypes.c_char * (count * dt.itemsize)).from_address(ptr), dt)


class NcclCommunicator:
    def __init__(self, ndev, uid, rank):
        assert uid == get_unique_id() and ndev in (1, MPI.COMM_WORLD.Get_size())  # a group: all, or one rank
        self.comm = (MPI.COMM_SELF if ndev == 1 else MPI.COMM_WORLD).Dup()
        assert self.comm.Get_rank() == rank

    def _call(self, name, n):
        calls.append((name, n))

    def allReduce(self, s, r, n, dt, op, stream):
        self._call("allReduce", n)
        self.comm.Allreduce(MPI.IN_PLACE if s == r else _arr(s, n, dt), _arr(r, n, dt), _OPS[op])

    def bcast(self, p, n, dt, root, stream):
        self._call("bcast", n)
        self.comm.Bcast(_arr(p, n, dt), root=root)

    def allGather(self, s, r, n, dt, stream):
        self._call("allGather", n)
        self.comm.Allgather(_arr(s, n, dt), _arr(r, n * self.comm.Get_size(), dt))

    def reduceScatter(self, s, r, n, dt, op, stream):
        self._call("reduceScatter", n)
        self.comm.Reduce_scatter_block(_arr(s, n * self.comm.Get_size(), dt), _arr(r, n, dt), _OPS[op])

    def reduce(self, s, r, n, dt, op, root, stream):
        self._call("reduce", n)
        me = self.comm.Get_rank() == root
        self.comm.Reduce(MPI.IN_PLACE if me else _arr(s, n, dt), _arr(r, n, dt) if me else None, _OPS[op], root)

    def send(self, p, n, dt, peer, stream):
        self._call("send", n)
        self.comm.Send(_arr(p, n, dt), dest=peer)

    def recv(self, p, n, dt, peer, stream):
        self._call("recv", n)
        self.comm.Recv(_arr(p, n, dt), source=peer)


def groupStart():
    pass


def groupEnd():
    pass


class _Stream:
    ptr = 0

    def __init__(self, non_blocking=False):
        pass

    def wait_event(self, event):
        assert event.recorded


class _Event:
    done = True

    def __init__(self, disable_timing=False):
        self.recorded = False

    def record(self, stream=None):
        self.recorded = True


class _Device:
    def __init__(self, index):
        self.index = index

    def use(self):
        pass


cuda = types.SimpleNamespace(Stream=_Stream, Event=_Event, Device=_Device, get_current_stream=_Stream)
