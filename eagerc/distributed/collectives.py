"""PyTorch's collectives over Tensors: check, start on the group's engine, finish.

Each call (1) checks its arguments on this rank, (2) exchanges its arrival with every
peer, which also proves that all ranks called the same collective with the same root,
dtype and shape (else a DistError listing each rank's call), (3) starts the engine's
non-blocking operation, and (4) returns a Work whose `wait()` finishes it: copies results
into the caller's tensors (averages, gathered lists, non-contiguous targets) and bumps
their version counters. With `async_op=False` the call waits itself.

Ranks given as `src`/`dst` are global ranks, as in PyTorch. On a rank outside `group`
a collective does nothing and returns None.
"""
import enum

import numpy as np

from .._tensor import Tensor
from ..ops.inplace import bump_version
from ..runtime.device import xp_of
from .group import _member

__all__ = ["ReduceOp", "Work", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
           "reduce_scatter_tensor", "reduce", "gather", "scatter", "send", "recv", "isend", "irecv", "barrier"]


class ReduceOp(enum.Enum):
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "prod"
    MIN = "min"
    MAX = "max"


class Work:
    """A started collective: `wait()` blocks until it is done (or the group's timeout) and
    finishes it; `is_completed()` asks without blocking."""

    def __init__(self, group, what, req, finish=None, arrival=None, result=None):
        self._group, self._what, self._req = group, what, req
        self._finish, self._arrival, self._result = finish, arrival, result

    def wait(self, timeout=None):
        if self._req is not None:
            self._group.wait(self._req, self._what, self._arrival, timeout)
            self._req = None
            if self._finish is not None:
                self._finish()
                self._finish = None
        return True

    def is_completed(self):
        if self._req is not None and self._req.test():
            self.wait()
        return self._req is None

    def result(self):
        self.wait()
        return self._result


def _tensor(t, what, name="tensor"):
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: {name} must be a Tensor, got {type(t).__name__}")
    return t


def _writable(t):
    """A contiguous array the engine may write into for Tensor t, and how to put it back."""
    a = t._array
    if a.flags.c_contiguous:
        return a, None
    tmp = a.copy()  # copy() is C-contiguous for numpy and cupy alike

    def back():
        a[...] = tmp
    return tmp, back


def _reduction(op, what):
    if isinstance(op, ReduceOp):
        return op
    for r in ReduceOp:
        if op == r.value or op == r.name or getattr(op, "name", None) == r.name:
            return r
    raise ValueError(f"{what}: unknown reduce op {op!r}; use eagerc.distributed.ReduceOp")


def _finish(*steps):
    steps = [s for s in steps if s is not None]
    if not steps:
        return None

    def run():
        for s in steps:
            s()
    return run


def _done(tensors, what):
    def bump():
        for t in tensors:
            bump_version(t, what)
    return bump


def _average(a, size):
    def avg():
        if a.dtype.kind in "fc":
            a[...] /= size
        else:
            a[...] //= size
    return avg


def _start(group, what, kind, array, root, start, finish, async_op, result=None):
    """Arrive (checked), start the engine operation, and wait unless async_op."""
    arrival = group.arrive(kind, array, root)
    arrival.check(what)
    work = Work(group, what, start(group.engine), finish, arrival, result)
    if async_op:
        return work
    work.wait()
    return None


def _root(group, rank, what, name):
    if rank is None:
        raise ValueError(f"{what}: {name} is required")
    return group.group_rank(int(rank), what)


# ---------------------------------------------------------------- collectives

def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `tensor` over the group, in place on every rank (AVG divides the sum)."""
    g = _member(group, "all_reduce")
    if g is None:
        return None
    _tensor(tensor, "all_reduce")
    op = _reduction(op, "all_reduce")
    a, back = _writable(tensor)
    engine_op = "sum" if op is ReduceOp.AVG else op.value
    avg = _average(a, g.size()) if op is ReduceOp.AVG else None
    return _start(g, "all_reduce", "all_reduce:" + op.value, a, -1, lambda e: e.allreduce(a, engine_op),
                  _finish(avg, back, _done([tensor], "all_reduce")), async_op)


def broadcast(tensor, src, group=None, async_op=False):
    """Copy rank `src`'s tensor into `tensor` on every rank."""
    g = _member(group, "broadcast")
    if g is None:
        return None
    _tensor(tensor, "broadcast")
    root = _root(g, src, "broadcast", "src")
    a, back = _writable(tensor)
    return _start(g, "broadcast", "broadcast", a, root, lambda e: e.bcast(a, root),
                  _finish(back, _done([tensor], "broadcast")), async_op)


def _same(t, ref, what, name):
    if tuple(t.shape) != tuple(ref.shape) or t.dtype != ref.dtype:
        raise ValueError(f"{what}: {name} must have the input's shape {tuple(ref.shape)} and dtype {ref.dtype}, "
                         f"got {tuple(t.shape)} {t.dtype}")


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[i] = rank i's `tensor`, on every rank."""
    g = _member(group, "all_gather")
    if g is None:
        return None
    _tensor(tensor, "all_gather")
    if len(tensor_list) != g.size():
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors; the group has {g.size()} ranks")
    for t in tensor_list:
        _same(_tensor(t, "all_gather", "tensor_list items"), tensor, "all_gather", "every tensor_list item")
    src = tensor._array
    xp = _xp(src)
    send = xp.ascontiguousarray(src)
    recv = xp.empty((g.size(),) + send.shape, send.dtype)

    def scatter_back():
        for i, t in enumerate(tensor_list):
            t._array[...] = recv[i]
    return _start(g, "all_gather", "all_gather", send, -1, lambda e: e.allgather(send, recv),
                  _finish(scatter_back, _done(tensor_list, "all_gather")), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """The ranks' inputs concatenated along dim 0 (or stacked: output shape (world, *input.shape))."""
    g = _member(group, "all_gather_into_tensor")
    if g is None:
        return None
    what = "all_gather_into_tensor"
    _tensor(output_tensor, what, "output_tensor"), _tensor(input_tensor, what, "input_tensor")
    if output_tensor.numel() != g.size() * input_tensor.numel() or output_tensor.dtype != input_tensor.dtype:
        raise ValueError(f"{what}: output_tensor must hold {g.size()} x the input ({tuple(input_tensor.shape)} "
                         f"{input_tensor.dtype}), got {tuple(output_tensor.shape)} {output_tensor.dtype}")
    send = _xp(input_tensor._array).ascontiguousarray(input_tensor._array)
    out, back = _writable(output_tensor)
    return _start(g, what, what, send, -1, lambda e: e.allgather(send, out.reshape(-1)),
                  _finish(back, _done([output_tensor], what)), async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `input` over the ranks, then rank i keeps the i-th of `world` equal chunks (dim 0)."""
    g = _member(group, "reduce_scatter_tensor")
    if g is None:
        return None
    what = "reduce_scatter_tensor"
    _tensor(output, what, "output"), _tensor(input, what, "input")
    if input.numel() != g.size() * output.numel() or output.dtype != input.dtype:
        raise ValueError(f"{what}: input must hold {g.size()} x the output ({tuple(output.shape)} {output.dtype}), "
                         f"got {tuple(input.shape)} {input.dtype}")
    op = _reduction(op, what)
    send = _xp(input._array).ascontiguousarray(input._array)
    out, back = _writable(output)
    engine_op = "sum" if op is ReduceOp.AVG else op.value
    avg = _average(out, g.size()) if op is ReduceOp.AVG else None
    return _start(g, what, what + ":" + op.value, send, -1,
                  lambda e: e.reduce_scatter(send.reshape(-1), out.reshape(-1), engine_op),
                  _finish(avg, back, _done([output], what)), async_op)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `tensor` over the ranks into rank `dst`'s tensor (the others keep theirs)."""
    g = _member(group, "reduce")
    if g is None:
        return None
    _tensor(tensor, "reduce")
    op = _reduction(op, "reduce")
    root = _root(g, dst, "reduce", "dst")
    mine = g.rank() == root
    a, back = _writable(tensor) if mine else (_xp(tensor._array).ascontiguousarray(tensor._array), None)
    engine_op = "sum" if op is ReduceOp.AVG else op.value
    avg = _average(a, g.size()) if op is ReduceOp.AVG and mine else None
    done = _done([tensor], "reduce") if mine else None
    return _start(g, "reduce", "reduce:" + op.value, a, root, lambda e: e.reduce(a, engine_op, root),
                  _finish(avg, back, done), async_op)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    """On rank `dst`, gather_list[i] = rank i's tensor; the other ranks pass no list."""
    g = _member(group, "gather")
    if g is None:
        return None
    _tensor(tensor, "gather")
    root = _root(g, dst, "gather", "dst")
    send = _xp(tensor._array).ascontiguousarray(tensor._array)
    recv = finish = None
    if g.rank() == root:
        if gather_list is None or len(gather_list) != g.size():
            raise ValueError(f"gather: rank {dst} (dst) must pass gather_list with {g.size()} tensors")
        for t in gather_list:
            _same(_tensor(t, "gather", "gather_list items"), tensor, "gather", "every gather_list item")
        recv = _xp(send).empty((g.size(),) + send.shape, send.dtype)

        def finish():
            for i, t in enumerate(gather_list):
                t._array[...] = recv[i]
            _done(gather_list, "gather")()
    elif gather_list:
        raise ValueError(f"gather: only rank {dst} (dst) passes gather_list")
    return _start(g, "gather", "gather", send, root, lambda e: e.gather(send, recv, root), finish, async_op)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    """Rank i's `tensor` = scatter_list[i] of rank `src`."""
    g = _member(group, "scatter")
    if g is None:
        return None
    _tensor(tensor, "scatter")
    root = _root(g, src, "scatter", "src")
    send = None
    if g.rank() == root:
        if scatter_list is None or len(scatter_list) != g.size():
            raise ValueError(f"scatter: rank {src} (src) must pass scatter_list with {g.size()} tensors")
        for t in scatter_list:
            _same(_tensor(t, "scatter", "scatter_list items"), tensor, "scatter", "every scatter_list item")
        send = _xp(tensor._array).stack([t._array for t in scatter_list])
    elif scatter_list:
        raise ValueError(f"scatter: only rank {src} (src) passes scatter_list")
    a, back = _writable(tensor)
    return _start(g, "scatter", "scatter", a, root, lambda e: e.scatter(send, a, root),
                  _finish(back, _done([tensor], "scatter")), async_op)


def barrier(group=None, async_op=False, device_ids=None):
    """Wait until every rank of the group has called barrier (its arrival is the barrier)."""
    g = _member(group, "barrier")
    if g is None:
        return None
    arrival = g.arrive("barrier")
    work = Work(g, "barrier", arrival, None, arrival)
    if async_op:
        return work
    arrival.check("barrier")
    return None


# ---------------------------------------------------------------- point to point

def isend(tensor, dst, group=None, tag=0):
    g = _member(group, "isend")
    if g is None:
        return None
    _tensor(tensor, "send")
    peer = _root(g, dst, "send", "dst")
    a = _xp(tensor._array).ascontiguousarray(tensor._array)
    return Work(g, f"send to rank {dst} (tag {tag})", g.engine.send(a, peer, tag), result=a)


def irecv(tensor, src=None, group=None, tag=0):
    g = _member(group, "irecv")
    if g is None:
        return None
    _tensor(tensor, "recv")
    if src is None:
        raise NotImplementedError("recv from any source (src=None): name the sending rank")
    peer = _root(g, src, "recv", "src")
    a, back = _writable(tensor)
    return Work(g, f"recv from rank {src} (tag {tag})", g.engine.recv(a, peer, tag),
                _finish(back, _done([tensor], "recv")), result=src)


def send(tensor, dst, group=None, tag=0):
    w = isend(tensor, dst, group, tag)
    if w is not None:
        w.wait()


def recv(tensor, src=None, group=None, tag=0):
    """Receive into `tensor`; returns the sender's rank."""
    w = irecv(tensor, src, group, tag)
    return -1 if w is None else w.result()


def _xp(a):
    return np if type(a) is np.ndarray else xp_of(a)
