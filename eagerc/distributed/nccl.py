"""The NCCL engine: collectives between GPUs through cupy.cuda.nccl, on a side stream.

The ranks are still MPI's: rank 0 makes NCCL's unique id and broadcasts it over the
group's host (MPI) communicator, and arrivals and JSON objects keep travelling there.
Each operation first makes its side stream wait for the work already queued on the
current stream (so the tensors are ready), then queues the NCCL call and records an
event; the request is done when that event is. Communication so overlaps with kernels
queued after it on the current stream -- backward, for DDP's buckets.

`nccl` and `cuda` are cupy.cuda.nccl and cupy.cuda by default; tests pass stand-ins
that move numpy arrays over MPI, so this code runs on machines without a GPU.
"""
import numpy as np

__all__ = ["NCCLEngine"]

_UID_BYTES = 128


def _ptr(a):
    data = a.data
    return data.ptr if hasattr(data, "ptr") else a.ctypes.data  # cupy, else numpy (stand-ins)


class _EventDone:
    __slots__ = ("event",)

    def __init__(self, event):
        self.event = event

    def test(self):
        return self.event.done


class NCCLEngine:
    name = "nccl"

    def __init__(self, host, device_id=None, nccl=None, cuda=None):
        if nccl is None or cuda is None:
            import cupy.cuda
            from cupy.cuda import nccl as cupy_nccl
            nccl, cuda = nccl or cupy_nccl, cuda or cupy.cuda
        self.host, self.nccl, self.cuda = host, nccl, cuda
        self.rank, self.size = host.rank, host.size
        if device_id is not None:
            cuda.Device(getattr(device_id, "index", device_id)).use()
        uid = np.zeros(_UID_BYTES, np.int8)
        if self.rank == 0:
            uid[:] = nccl.get_unique_id()
        host.comm.Bcast(uid, root=0)
        self.comm = nccl.NcclCommunicator(self.size, tuple(int(b) for b in uid), self.rank)
        self.stream = cuda.Stream(non_blocking=True)
        self._ops = {"sum": nccl.NCCL_SUM, "prod": nccl.NCCL_PROD, "min": nccl.NCCL_MIN, "max": nccl.NCCL_MAX}
        names = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
                 "int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
                 "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "bfloat16": "NCCL_BFLOAT16"}
        self._types = {k: getattr(nccl, v) for k, v in names.items() if hasattr(nccl, v)}

    def _type(self, a):
        name = "uint8" if a.dtype == np.bool_ else a.dtype.name
        if name not in self._types:
            raise TypeError(f"NCCL cannot move {a.dtype} tensors")
        return self._types[name]

    def _queue(self, call):
        """Run call(stream_ptr) on the side stream after the current stream's queued work."""
        cuda = self.cuda
        ready = cuda.Event(disable_timing=True)
        ready.record(cuda.get_current_stream())
        self.stream.wait_event(ready)
        call(self.stream.ptr)
        done = cuda.Event(disable_timing=True)
        done.record(self.stream)
        return _EventDone(done)

    def allreduce(self, a, op):
        return self._queue(lambda s: self.comm.allReduce(_ptr(a), _ptr(a), a.size, self._type(a), self._ops[op], s))

    def bcast(self, a, root):
        return self._queue(lambda s: self.comm.bcast(_ptr(a), a.size, self._type(a), root, s))

    def allgather(self, send, recv):
        return self._queue(lambda s: self.comm.allGather(_ptr(send), _ptr(recv), send.size, self._type(send), s))

    def allgatherv(self, send, recv, counts):
        raise NotImplementedError("NCCL has no all-gather of unequal sizes; objects travel over the host engine")

    def reduce_scatter(self, send, recv, op):
        return self._queue(lambda s: self.comm.reduceScatter(_ptr(send), _ptr(recv), recv.size, self._type(recv),
                                                             self._ops[op], s))

    def reduce(self, a, op, root):
        return self._queue(lambda s: self.comm.reduce(_ptr(a), _ptr(a), a.size, self._type(a), self._ops[op],
                                                      root, s))

    def _grouped(self, calls):
        def run(s):
            self.nccl.groupStart()
            try:
                for c in calls:
                    c(s)
            finally:
                self.nccl.groupEnd()
        return self._queue(run)

    def gather(self, send, recv, root):
        n, t = send.size, self._type(send)
        if self.rank != root:
            return self._queue(lambda s: self.comm.send(_ptr(send), n, t, root, s))
        rows = recv.reshape(self.size, -1)
        calls = [lambda s, r=r: self.comm.recv(_ptr(rows[r]), n, t, r, s) for r in range(self.size) if r != root]
        rows[root] = send.reshape(-1)
        return self._grouped(calls)

    def scatter(self, send, recv, root):
        n, t = recv.size, self._type(recv)
        if self.rank != root:
            return self._queue(lambda s: self.comm.recv(_ptr(recv), n, t, root, s))
        rows = send.reshape(self.size, -1)
        calls = [lambda s, r=r: self.comm.send(_ptr(rows[r]), n, t, r, s) for r in range(self.size) if r != root]
        recv.reshape(-1)[...] = rows[root]
        return self._grouped(calls)

    def send(self, a, dst, tag):
        return self._queue(lambda s: self.comm.send(_ptr(a), a.size, self._type(a), dst, s))

    def recv(self, a, src, tag):
        return self._queue(lambda s: self.comm.recv(_ptr(a), a.size, self._type(a), src, s))

    def barrier(self):
        return self.host.barrier()

    def split(self, host):
        """The same kind of engine for a new group whose host engine is `host`."""
        return NCCLEngine(host, nccl=self.nccl, cuda=self.cuda)

    def close(self):
        destroy = getattr(self.comm, "destroy", None)
        if destroy is not None:
            destroy()
