"""The Reducer: gradient buckets all-reduced while backward still runs (PyTorch DDP's design,
VLDB 2020; Horovod calls it tensor fusion).

Parameters are put in buckets in reverse module order (backward reaches the last layers
first; a module's parameters stay together), the first bucket small (1 MB) so communication starts early, the others up
to `bucket_cap_mb` (the first no larger either); one dtype and device per bucket. Each parameter has a post-accumulate
hook (`Tensor.register_post_accumulate_grad_hook`): when backward has accumulated its
.grad, the hook marks it ready; when every parameter of a bucket is ready, the bucket's
gradients are copied into one flat buffer and its non-blocking all-reduce starts -- in
bucket order, so every rank issues the same collectives in the same order. When the last
bucket has started, the reducer waits for all of them and makes each parameter's .grad a
view of its bucket (gradients are divided by the world size on their way into the bucket,
so the sum is the average). Buckets are kept from step to step, as with PyTorch's
`gradient_as_bucket_view=True`: the next synchronised backward overwrites them, so copy a
.grad to keep it longer.

With `find_unused_parameters`, the forward's autograd graph is walked once to find the
parameters it does not reach; they are marked ready at once (zeros in their bucket), and a
small all-reduce of "used" flags at the end leaves .grad alone for a parameter no rank used.
"""
import time

import numpy as np

from ... import dispatch
from ..._tensor import Tensor
from ...distributed.engines import DONE
from ...ops.inplace import bump_version
from ...runtime.device import xp_of
from ...runtime.pytree import flatten

__all__ = ["Reducer", "broadcast_coalesced", "assign_buckets", "readiness_order", "FIRST_BUCKET_BYTES"]

FIRST_BUCKET_BYTES = 1024 * 1024  # PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES


class _Bucket:
    __slots__ = ("index", "params", "offsets", "size", "dtype", "pending", "buffer", "request")

    def __init__(self, index, dtype):
        self.index, self.dtype = index, dtype
        self.params, self.offsets, self.size = [], [], 0
        self.buffer = self.request = None


def readiness_order(names):
    """Parameter indices in the order backward will likely produce their gradients: modules
    last to first, each module's parameters together (a layer's weight and bias are ready at
    once; `reversed(params)` alone would pair a weight with the previous layer's bias)."""
    groups = {}
    for i, name in enumerate(names):
        groups.setdefault(name.rpartition(".")[0], []).append(i)
    return [i for g in reversed(list(groups.values())) for i in g]


def assign_buckets(params, cap_bytes, first_bytes=FIRST_BUCKET_BYTES, order=None):
    """Parameter indices grouped into buckets in `order` (default: last parameter first), one
    dtype/device each."""
    buckets, open_ = [], {}
    for i in (reversed(range(len(params))) if order is None else order):
        a = params[i]._array
        key = (a.dtype, str(getattr(a, "device", "cpu")))
        b = open_.get(key)
        limit = min(first_bytes, cap_bytes) if b is not None and b is buckets[0] else cap_bytes
        if b is None or (b.size and (b.size + a.size) * a.dtype.itemsize > limit):
            b = open_[key] = _Bucket(len(buckets), a.dtype)
            buckets.append(b)
        b.params.append(i)
        b.offsets.append(b.size)
        b.size += a.size
    return buckets


class Reducer:
    """Averages the gradients of `params` over `group` while backward runs (see module doc)."""

    def __init__(self, params, group, bucket_cap_bytes, find_unused_parameters=False, order=None):
        self.params, self.group = params, group
        self.find_unused = find_unused_parameters
        self.buckets = assign_buckets(params, bucket_cap_bytes, order=order)
        self.bucket_of = {}
        for b in self.buckets:
            for j, i in enumerate(b.params):
                self.bucket_of[i] = (b, b.offsets[j])
        self.armed = False
        self.waited = 0.0  # seconds the last synchronised backward waited for communication at its end
        self.marked = [False] * len(params)
        self.used = None
        self.next_launch = 0
        self.arrival = None
        self.handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(params)]

    def _hook(self, i):
        def ready(param):
            if self.armed:
                tracer = dispatch.active_tracer()
                if tracer is not None:  # a compiled training step cannot replay MPI: eager from here
                    tracer.raw_write(param, "DistributedDataParallel gradient all_reduce")
                self._mark_ready(i)
        return ready

    # ------------------------------------------------------------ one iteration
    def prepare(self, outputs):
        """Called by forward when this iteration's gradients are to be synchronised."""
        self.check_finished()
        self.armed = True
        self.marked = [False] * len(self.params)
        self.next_launch = 0
        self.arrival = None
        for b in self.buckets:
            b.pending, b.request = len(b.params), None
        if self.find_unused:
            reached = _reachable_leaves(outputs)
            self.used = [id(p) in reached for p in self.params]
            for i, u in enumerate(self.used):
                if not u:
                    self._mark_ready(i)

    def check_finished(self):
        if self.armed and any(self.marked):
            missing = [i for i, m in enumerate(self.marked) if not m]
            raise RuntimeError(
                "Expected to have finished reduction in the prior iteration before starting a new one. This error "
                "indicates that your module has parameters that were not used in producing loss. You can enable "
                "unused parameter detection by passing the keyword argument `find_unused_parameters=True` to "
                "`eagerc.nn.parallel.DistributedDataParallel`, and by making sure all `forward` function outputs "
                "participate in calculating loss. Parameter indices which did not receive grad for rank "
                f"{self.group.rank()}: {' '.join(map(str, missing))}")

    def _mark_ready(self, i):
        if self.marked[i]:
            raise RuntimeError(f"Expected to mark a variable ready only once (parameter index {i}): a second "
                               "backward through the same forward needs no_sync() or a new forward")
        self.marked[i] = True
        b, _ = self.bucket_of[i]
        b.pending -= 1
        while self.next_launch < len(self.buckets) and self.buckets[self.next_launch].pending == 0:
            self._launch(self.buckets[self.next_launch])
            self.next_launch += 1
        if self.next_launch == len(self.buckets):
            self._finish()

    def _launch(self, b):
        if self.arrival is None:  # one arrival per iteration: names the missing ranks on a timeout
            self.arrival = self.group.arrive("DistributedDataParallel gradient all_reduce")
        if b.buffer is None:  # kept from step to step: a fresh one would page-fault every step
            b.buffer = xp_of(self.params[b.params[0]]._array).empty(b.size, b.dtype)
        buf, n = b.buffer, self.group.size()
        for i, o in zip(b.params, b.offsets):
            g = self.params[i]._grad
            slot = buf[o:o + self.params[i]._array.size]
            if g is None:
                slot[...] = 0
            elif n == 1:
                slot[...] = g._array.reshape(-1)
            else:  # divided on the way in (as PyTorch does): the sum is the average
                xp_of(slot).divide(g._array.reshape(-1), n, out=slot)
        b.request = self.group.engine.allreduce(buf, "sum")
        for prev in self.buckets[:b.index]:  # let the engine progress the ones already in flight
            prev.request.test()

    def _finish(self):
        self.armed = False
        g = self.group
        what = "DistributedDataParallel gradient all_reduce"
        start = time.perf_counter()
        for b in self.buckets:
            g.wait(b.request, f"{what} (bucket {b.index})", self.arrival)
        self.arrival.check(what)
        self.waited = time.perf_counter() - start
        used = self._globally_used() if self.find_unused else None
        for b in self.buckets:
            for i, o in zip(b.params, b.offsets):
                p = self.params[i]
                if used is not None and not used[i]:
                    continue  # no rank used it: its .grad stays as it was (None stays None)
                p._grad = dispatch.wrap(b.buffer[o:o + p._array.size].reshape(p._array.shape))
            b.request = None

    def _globally_used(self):
        flags = np.array(self.used, np.int32)
        self.group.wait(self.group.host.allreduce(flags, "max") if self.group.host is not None else DONE,
                        "DistributedDataParallel used-parameter all_reduce")
        return flags.astype(bool)

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def _reachable_leaves(outputs):
    """ids of the leaf tensors the autograd graph of `outputs` reaches."""
    leaves, _ = flatten(outputs, lambda x: isinstance(x, Tensor))
    seen, found = set(), set()
    stack = [t.grad_fn for t in leaves if t.grad_fn is not None]
    found.update(id(t) for t in leaves if t.grad_fn is None)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for e in node.next:
            if e is None:
                continue
            if isinstance(e, Tensor):
                found.add(id(e))
            elif e not in seen:
                stack.append(e)
    return found


def broadcast_coalesced(group, tensors, src_rank, what):
    """Copy rank `src_rank`'s values into `tensors` on every rank: one broadcast per dtype."""
    if group.size() == 1 or not tensors:
        return
    arrival = group.arrive(what)
    arrival.check(what)
    by_dtype = {}
    for t in tensors:
        by_dtype.setdefault((t._array.dtype, str(getattr(t._array, "device", "cpu"))), []).append(t)
    for ts in by_dtype.values():
        xp = xp_of(ts[0]._array)
        flat = xp.concatenate([t._array.reshape(-1) for t in ts])
        group.wait(group.engine.bcast(flat, src_rank), what, arrival)
        o = 0
        for t in ts:
            n = t._array.size
            t._array[...] = flat[o:o + n].reshape(t._array.shape)
            bump_version(t, what)
            o += n
