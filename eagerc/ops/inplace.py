"""In-place updates: write a result into an existing tensor's memory.

An in-place op computes its result like the out-of-place op (so autograd gets an
ordinary node), then copies it into the target's array, so every view of the
target sees the change. It bumps the version counter that the target shares with
its views; a backward that saved the old value then fails loudly instead of
silently using the new one.
"""
import numpy as np

from .. import dispatch
from .._tensor import Tensor

__all__ = ["commit", "check_inplace", "bump_version", "drop_history"]


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


def commit(t, result, opname):
    """Make `t` hold `result` (a Tensor computed out of place); returns t."""
    data = t._array
    rd = result._array
    if rd.dtype != data.dtype:
        if data.dtype.kind in "iub" and rd.dtype.kind == "f" or data.dtype.kind == "b" and rd.dtype.kind != "b":
            raise RuntimeError(f"{opname}: result type {rd.dtype} can't be cast to the desired output "
                               f"type {data.dtype}")
    if rd.shape != data.shape:
        try:
            rd = np.broadcast_to(rd, data.shape) if type(rd) is np.ndarray else rd
        except ValueError:
            raise RuntimeError(f"{opname}: output with shape {tuple(data.shape)} doesn't match the "
                               f"broadcast shape {tuple(rd.shape)}") from None
        if rd.shape != data.shape:
            raise RuntimeError(f"{opname}: output with shape {tuple(data.shape)} doesn't match the "
                               f"broadcast shape {tuple(rd.shape)}")
    if result.grad_fn is not None:
        if getattr(t, "_base", None) is not None:
            raise RuntimeError(
                f"{opname}: in-place modification of a view with a result that requires grad is not "
                "supported by eagerc (the view's base would not see the gradient); use out-of-place "
                "ops, e.g. eagerc.where / index_put, or clone() the view first")
        _snapshot_saved_self(result.grad_fn, t)
    data[...] = rd
    _bump(t, opname)
    tracer = dispatch.active_tracer()
    if tracer is not None:
        tracer.mutate(t, result)
    if result.grad_fn is not None:
        # the node keeps its own copy of any output it saved (result._array), so later
        # in-place ops on t cannot corrupt it
        t.grad_fn = result.grad_fn
        t._requires_grad = True
    else:
        drop_history(t)
    return t


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
            old = Tensor.__new__(Tensor)
            old._array = t._array.copy()
            old._requires_grad = t._requires_grad
            old._grad = None
            old.grad_fn = t.grad_fn
            old._vc = None
            saved[i] = old
            node.versions[i] = 0
