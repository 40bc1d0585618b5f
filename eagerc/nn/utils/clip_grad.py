"""Gradient clipping, in place on the `.grad` arrays (like PyTorch, outside autograd)."""
import math
import warnings

import numpy as np

from ...runtime.dtypes import FLOATING_KINDS
from ...dispatch import wrap
from ...ops.inplace import bump_version
from ...runtime.device import xp_of
from ..._tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]


def _params(parameters):
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _xp(a):
    return np if type(a) is np.ndarray else xp_of(a)


def _own_grads(parameters):
    """(gradient, its array) of each parameter that has one, the array made writable first if
    backward left a read-only (broadcast) view."""
    for p in _params(parameters):
        g = p.grad
        if g is None:
            continue
        d = g._array
        if type(d) is np.ndarray and not d.flags.writeable:
            d = g._array = d.copy()
        yield g, d


def _norm(a, p):
    """The p-norm of one array as a Python float (accumulated in float64)."""
    xp = _xp(a)
    if a.size == 0:
        return 0.0
    if p == 2.0:
        r = a.reshape(-1)
        if r.dtype.kind in FLOATING_KINDS and r.dtype.itemsize < 4:
            r = r.astype(np.float32)
        return math.sqrt(float(xp.dot(r, r)))
    if p == math.inf:
        return float(xp.abs(a).max())
    if p == -math.inf:
        return float(xp.abs(a).min())
    if p == 0:
        return float(xp.count_nonzero(a))
    if p == 1.0:
        return float(xp.abs(a).sum(dtype=np.float64))
    return float((xp.abs(a).astype(np.float64) ** p).sum()) ** (1.0 / p)


def _combine(norms, p):
    if p == math.inf:
        return max(norms)
    if p == -math.inf:
        return min(norms)
    if p == 0:
        return float(sum(norms))
    if p == 2.0:
        return math.sqrt(sum(n * n for n in norms))
    return sum(n ** p for n in norms) ** (1.0 / p)


def _norm_type(norm_type):
    if isinstance(norm_type, str):
        if norm_type in ("inf", "-inf"):
            return float(norm_type)
        raise ValueError(f"norm_type must be a number or 'inf', got {norm_type!r}")
    return float(norm_type)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The norm of the norms of `tensors` (a 0-d tensor of their dtype; 0. for none)."""
    tensors = [t for t in _params(tensors) if t is not None]
    p = _norm_type(norm_type)
    if not tensors:
        return wrap(np.zeros((), np.float32))
    with np.errstate(over="ignore", invalid="ignore"):
        total = _combine([_norm(t._array, p) for t in tensors], p)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is "
                           "non-finite, so it cannot be clipped. To disable this error and scale the "
                           "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
    d = tensors[0]._array
    dtype = d.dtype if d.dtype.kind in FLOATING_KINDS else np.float32
    return wrap(np.asarray(total, dtype=dtype))


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale every gradient by min(1, max_norm / (total_norm + 1e-6)), in place."""
    total = float(total_norm)
    coef = float(max_norm) / (total + 1e-6)
    if coef >= 1.0:  # scaling by exactly 1 would change nothing
        return
    for g, gd in _own_grads(parameters):
        with np.errstate(invalid="ignore"):  # inf * 0 is nan, as in PyTorch
            gd *= coef
        bump_version(g, "mul_")


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Clip the gradients' total norm (as if concatenated into one vector) to max_norm.

    Returns the total norm before clipping, a 0-d tensor. norm_type may be inf."""
    params = _params(parameters)
    total = get_total_norm([p.grad for p in params if p.grad is not None], norm_type, error_if_nonfinite)
    clip_grads_with_norm_(params, max_norm, total)
    return total


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    warnings.warn("nn.utils.clip_grad_norm is deprecated in favor of nn.utils.clip_grad_norm_.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient element to [-clip_value, clip_value], in place."""
    v = float(clip_value)
    for g, gd in _own_grads(parameters):
        _xp(gd).clip(gd, -v, v, out=gd)
        bump_version(g, "clamp_")
