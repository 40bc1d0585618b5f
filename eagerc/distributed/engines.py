"""Engines: the transports under a process group -- MPI here, NCCL in nccl.py, and a
simulated one for tests and benchmarks. eagerc moves no bytes itself.

An engine works on contiguous arrays and is non-blocking throughout: every method
starts an operation and returns a request with `test() -> bool` (done yet?); the
process group (group.py) waits on requests with a deadline, so a rank that never
arrives turns into a timeout instead of a hang. Reductions are "sum", "prod", "min"
and "max"; averaging is a sum divided by the caller (MPI has no average).

Only mpi4py's buffer-based (uppercase) methods are used: its lowercase ones pickle.
"""
import time

import numpy as np

__all__ = ["MPIEngine", "SimulatedEngine", "Done", "mpi"]


def mpi():
    """mpi4py's MPI module (imported on first use: mpi4py initialises MPI on import)."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError("eagerc.distributed needs mpi4py and an MPI library: "
                           'pip install -e ".[distributed]" (the mpi4py and mpich wheels)') from e
    return MPI


class Done:
    """A request that is already complete (an operation on one rank, a no-op)."""

    def test(self):
        return True


DONE = Done()


class _MPIRequests:
    """One or more MPI requests seen as one."""
    __slots__ = ("reqs", "MPI")

    def __init__(self, MPI, *reqs):
        self.MPI, self.reqs = MPI, list(reqs)

    def test(self):
        return self.MPI.Request.Testall(self.reqs)


def _buf(a):
    """What MPI reads or writes for `a`: bool travels as uint8 (MPI's C bool has no MIN/MAX
    everywhere), float16 as its raw type where the MPI library has one."""
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a


class MPIEngine:
    """Collectives on an MPI communicator (a private duplicate: user tags never collide)."""
    name = "mpi"

    def __init__(self, comm):
        self.MPI = mpi()
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        MPI = self.MPI
        self._ops = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}

    def _r(self, *reqs):
        return _MPIRequests(self.MPI, *reqs)

    def allreduce(self, a, op):
        return self._r(self.comm.Iallreduce(self.MPI.IN_PLACE, _buf(a), self._ops[op]))

    def bcast(self, a, root):
        return self._r(self.comm.Ibcast(_buf(a), root=root))

    def allgather(self, send, recv):
        return self._r(self.comm.Iallgather(_buf(send), _buf(recv)))

    def allgatherv(self, send, recv, counts):
        return self._r(self.comm.Iallgatherv(_buf(send), [_buf(recv), counts]))

    def reduce_scatter(self, send, recv, op):
        return self._r(self.comm.Ireduce_scatter_block(_buf(send), _buf(recv), self._ops[op]))

    def reduce(self, a, op, root):
        send = self.MPI.IN_PLACE if self.rank == root else _buf(a)
        return self._r(self.comm.Ireduce(send, _buf(a) if self.rank == root else None, self._ops[op], root=root))

    def gather(self, send, recv, root):
        return self._r(self.comm.Igather(_buf(send), None if recv is None else _buf(recv), root=root))

    def scatter(self, send, recv, root):
        return self._r(self.comm.Iscatter(None if send is None else _buf(send), _buf(recv), root=root))

    def send(self, a, dst, tag):
        return self._r(self.comm.Isend(_buf(a), dest=dst, tag=tag))

    def recv(self, a, src, tag):
        return self._r(self.comm.Irecv(_buf(a), source=src, tag=tag))

    def barrier(self):
        return self._r(self.comm.Ibarrier())

    def split(self, host):
        """The same kind of engine for a new group whose host engine is `host`."""
        return MPIEngine(host.comm.Dup())

    def close(self):
        if self.comm != self.MPI.COMM_NULL and not self.MPI.Is_finalized():
            self.comm.Free()


class SimulatedEngine:
    """A stand-in for tests and benchmarks: one process playing a group of `size` identical
    ranks, whose collectives complete `latency + bytes / bandwidth` seconds after they start,
    one after another as on one link, without using a core (nothing computes while waiting).

    Results are what `size` ranks holding the same data would get: a sum multiplies by
    `size`, min/max/broadcast leave the data as it is, gathers repeat it. Use it as
    `init_process_group(backend=SimulatedEngine(...))`."""
    name = "simulated"

    def __init__(self, size=1, latency=0.0, bandwidth=float("inf")):
        self.rank, self.size = 0, size
        self.latency, self.bandwidth = latency, bandwidth
        self._link_free = 0.0
        self.log = []  # (op, nbytes, start, end): what was sent when

    def _after(self, op, nbytes):
        now = time.perf_counter()
        start = max(now, self._link_free)
        end = start + self.latency + nbytes / self.bandwidth
        self._link_free = end
        self.log.append((op, nbytes, start, end))
        return _Until(end)

    def allreduce(self, a, op):
        if op == "sum" and self.size != 1:
            a *= self.size
        elif op == "prod" and self.size != 1:
            a **= self.size
        return self._after("allreduce", a.nbytes)

    def bcast(self, a, root):
        return self._after("bcast", a.nbytes)

    def allgather(self, send, recv):
        recv.reshape(self.size, -1)[...] = send.reshape(1, -1)
        return self._after("allgather", recv.nbytes)

    def allgatherv(self, send, recv, counts):
        return self.allgather(send, recv)

    def reduce_scatter(self, send, recv, op):
        recv[...] = send.reshape(self.size, -1)[0].reshape(recv.shape)
        return self.allreduce(recv, op)

    def reduce(self, a, op, root):
        return self.allreduce(a, op)

    def gather(self, send, recv, root):
        return self.allgather(send, recv)

    def scatter(self, send, recv, root):
        recv[...] = send.reshape(self.size, -1)[0].reshape(recv.shape)
        return self._after("scatter", send.nbytes)

    def send(self, a, dst, tag):
        raise RuntimeError("the simulated engine has no peers to send to")

    recv = send

    def barrier(self):
        return self._after("barrier", 0)


class _Until:
    __slots__ = ("end",)

    def __init__(self, end):
        self.end = end

    def test(self):
        return time.perf_counter() >= self.end
