"""In-place updates: write a result into an existing tensor's memory.

An in-place op computes its result like the out-of-place op (so autograd gets an
ordinary node), then copies it into the target's array, so every view of the
target sees the change. It bumps the version counter that the target shares with
its views; a backward that saved the old value then fails loudly instead of
silently using the new one.
"""
import numpy as np

from ..runtime.dtypes import FLOATING_KINDS
from .. import dispatch
from ..runtime.ops.meta import inverse_permutation
from .._tensor import wrap

__all__ = ["commit", "check_inplace", "bump_version", "drop_history", "inplace_method"]


def bump_version(t, opname):
    """Record a raw in-place write (the caller already changed t._array)."""
    _bump(t, opname)
    tracer = dispatch.active_tracer()
    if tracer is not None:  # a write the tracer cannot see as an op
        tracer.raw_write(t, opname)


def _bump(t, opname):
    vc = t._vc
    if vc is None:
        vc = t._vc = [0, opname]
    vc[0] += 1
    if len(vc) > 1:
        vc[1] = opname
    else:
        vc.append(opname)


def check_inplace(t, opname):
    if t.requires_grad and t.grad_fn is None and dispatch.grad_enabled():
        raise RuntimeError(f"{opname}: a leaf Variable that requires grad is being used in an in-place "
                           "operation. Wrap the update in `with eagerc.no_grad():` (as optimizers do) "
                           "or operate on a clone.")


def inplace_method(fn, name):
    """The Tensor method `name` (add_, tril_, scatter_...): `fn(self, ...)` computed out of place,
    then committed into self."""
    def method(self, *args, **kwargs):
        check_inplace(self, name)
        return commit(self, fn(self, *args, **kwargs), name)
    method.__name__ = name
    return method


def commit(t, result, opname):
    """Make `t` hold `result` (a Tensor computed out of place); returns t."""
    data = t._array
    rd = result._array
    if type(data) is np.ndarray and not data.flags.writeable:
        raise RuntimeError(f"{opname}: unsupported operation: more than one element of the written-to tensor "
                           "refers to a single memory location (an expanded view), or its memory is "
                           "read-only. Please clone() the tensor before performing the operation.")
    if rd.dtype != data.dtype:
        if data.dtype.kind in "iub" and rd.dtype.kind in FLOATING_KINDS or data.dtype.kind == "b" and rd.dtype.kind != "b":
            raise RuntimeError(f"{opname}: result type {rd.dtype} can't be cast to the desired output "
                               f"type {data.dtype}")
    if rd.shape != data.shape:
        try:
            rd = np.broadcast_to(rd, data.shape) if type(rd) is np.ndarray else rd
        except ValueError:
            pass
        if rd.shape != data.shape:
            raise RuntimeError(f"{opname}: output with shape {tuple(data.shape)} doesn't match the "
                               f"broadcast shape {tuple(rd.shape)}")
    if result.grad_fn is not None:
        _snapshot_saved_self(result.grad_fn, t)
    data[...] = rd
    _bump(t, opname)
    tracer = dispatch.active_tracer()
    if tracer is not None:
        tracer.mutate(t, result)
    if result.grad_fn is not None:
        # the node keeps its own copy of any output it saved (result._array), so later
        # in-place ops on t cannot corrupt it
        if getattr(t, "_base", None) is not None and dispatch.grad_enabled():
            _rewrite_bases(t, result, opname)
        t.grad_fn = result.grad_fn
        t._requires_grad = True
    else:
        drop_history(t)
    return t


def scatter_spec(op, attrs, base_shape):
    """How a new value of a `op` view (with `attrs`) is written back into its base, as one op:
    (op name, whether it reads the base, attrs), or None when the view cannot be inverted
    (expand: one element of the base would take several values). Shared by eager autograd
    (below) and the tracer's functionalisation of writes through views."""
    if op in ("reshape", "squeeze", "unsqueeze"):
        return "reshape", False, {"shape": tuple(base_shape)}
    if op == "permute":
        return "permute", False, {"dims": tuple(inverse_permutation(attrs["dims"]))}
    if op == "getitem":
        return "index_put", True, {"index": attrs["index"], "accumulate": False}
    if op == "slice":
        return "slice_scatter", True, dict(attrs)
    if op == "diagonal":
        return "diagonal_scatter", True, dict(attrs)
    return None


def _rewrite_bases(t, result, opname):
    """An in-place op with a result that requires grad wrote through view t: like PyTorch,
    every tensor t views (up to the one owning the memory) now has the history of "its old
    value with t's region replaced" -- the view op's scatter, recorded as an autograd node --
    so gradients through the base reach what was written."""
    from ..runtime.ops import OPS
    child, value = t, result
    while getattr(child, "_base", None) is not None:
        parent = child._base
        view = getattr(child, "_view", None)
        spec = None if view is None else scatter_spec(view[0], view[1] or {}, parent._array.shape)
        if spec is None:
            raise RuntimeError(
                f"{opname}: in-place modification of a `{view[0] if view else 'unknown'}` view with a result "
                "that requires grad: the write cannot be carried back to the viewed tensor (more than one "
                "element of it refers to one memory location); clone() the view first")
        if parent.grad_fn is None and parent._requires_grad:
            raise RuntimeError(f"{opname}: a view of a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
        name, reads_base, attrs = spec
        new = dispatch.apply(OPS[name], (parent, value) if reads_base else (value,), attrs)
        parent.grad_fn = new.grad_fn
        parent._requires_grad = new._requires_grad
        child, value = parent, new


def drop_history(t):
    """t was overwritten (with grad on) by a value that does not depend on its old graph:
    its old grad_fn must not route gradients any more (fill_, zero_, normal_ on a non-leaf)."""
    if t.grad_fn is not None and dispatch.grad_enabled():
        t.grad_fn = None
        t._requires_grad = False


def _snapshot_saved_self(node, t):
    """The node computing `t op= x` may have saved `t` itself; keep its old value instead."""
    saved = node.saved
    if not saved:
        return
    for i, s in enumerate(saved):
        if s is t:
            old = wrap(t._array.copy(), t._requires_grad)
            old.grad_fn = t.grad_fn
            saved[i] = old
            node.versions[i] = 0
