"""Reductions over dimensions: sum, mean, prod, amax, amin, argmax, argmin, all, any,
cumsum, cumprod, logcumsumexp. `dim` is None (all), an int or a tuple; negatives allowed.
Composite reductions (var, std, logsumexp, norm) are built from these in the frontend.
"""
import numpy as np

from ...runtime import dtypes
from . import declare
from .meta import Spec, fail, normalize_dims, normalize_dim, reduced_shape


def _axes(dim, ndim):
    if dim is None:
        return None
    axes = normalize_dims("reduce", dim, ndim)  # checks the range: [-1, 0] for a 0-d tensor
    return axes if ndim else None


# On numpy the kernels call the ufunc reductions themselves (np.add.reduce, not x.sum()):
# no Python frame of numpy's own then sits between the kernel and the loop, so numpy
# attributes a floating-point warning (an overflowing float16 sum) to eagerc, whose filter
# silences it (runtime/ownership.py); it also skips a Python call. cupy never warns.

_add_reduce = np.add.reduce


def array_sum(x, axis=None, keepdims=False, dtype=None):
    """x.sum(axis, keepdims, dtype) for a numpy or cupy array. bfloat16 accumulates in float32
    and rounds once, as PyTorch's does (summed in bfloat16, 1000 ones would make 256)."""
    if isinstance(x, np.ndarray):
        if dtype is None and x.dtype.kind == "V":
            return np.add.reduce(x, axis=axis, keepdims=keepdims, dtype=np.float32).astype(x.dtype)
        return np.add.reduce(x, axis=axis, keepdims=keepdims, dtype=dtype)
    return x.sum(axis=axis, keepdims=keepdims, dtype=dtype)


def array_mean(x, axis=None, keepdims=False):
    """x.mean(axis, keepdims) for a floating numpy or cupy array, numpy's numbers exactly
    (float16 accumulates in float32, and bfloat16 as in PyTorch); nan where nothing is averaged."""
    if not isinstance(x, np.ndarray):
        if x.size == 0:  # no "Mean of empty slice" warning
            return x.sum(axis=axis, keepdims=keepdims) * np.nan
        return x.mean(axis=axis, keepdims=keepdims)
    s = np.add.reduce(x, axis=axis, keepdims=keepdims, dtype=np.float32 if x.dtype.itemsize == 2 else None)
    n = x.size // s.size if s.size else 1
    return np.asarray(s / n if n else s * np.nan).astype(x.dtype, copy=False)


def _sum(xp):
    def sum_(x, dim=None, keepdim=False):
        if dim is None and not keepdim and type(x) is np.ndarray and x.dtype.kind in "fc":
            return _add_reduce(x, None)  # the common x.sum(): one ufunc call
        axis = None if dim is None else _axes(dim, x.ndim)
        return array_sum(x, axis, keepdim, np.int64 if x.dtype.kind in "biu" else None)
    return sum_


def _mean(xp):
    def mean(x, dim=None, keepdim=False):
        return array_mean(x, _axes(dim, x.ndim), keepdim)
    return mean


def _prod(xp):
    def prod(x, dim=None, keepdim=False):
        dt = np.int64 if x.dtype.kind in "biu" else None
        f = np.multiply.reduce if xp is np else xp.prod
        return xp.asarray(f(x, axis=_axes(dim, x.ndim), keepdims=keepdim, dtype=dt))
    return prod


def _extreme(name):
    def impl(xp):
        f = getattr(xp, name)

        def extreme(x, dim=None, keepdim=False):
            return xp.asarray(f(x, axis=_axes(dim, x.ndim), keepdims=keepdim))
        return extreme
    return impl


def _arg(name):
    def impl(xp):
        f = getattr(xp, name)

        def arg(x, dim=None, keepdim=False):
            if dim is None:
                r = xp.asarray(f(x.reshape(-1)))
                return r.reshape((1,) * x.ndim) if keepdim else r
            axis = normalize_dim(name, dim, x.ndim)
            if x.ndim == 0:
                axis = None
            return xp.asarray(f(x, axis=axis, keepdims=keepdim)).astype(np.int64, copy=False)
        return arg
    return impl


def _cum(name):
    def impl(xp):
        f = getattr(xp, name)
        if xp is np:
            f = {"cumsum": np.add, "cumprod": np.multiply}[name].accumulate

        def cum(x, dim):
            dt = np.int64 if x.dtype.kind in "biu" else None
            axis = normalize_dim(name, dim, x.ndim)
            if x.ndim == 0:
                return x.astype(dt or x.dtype)
            return f(x, axis=axis, dtype=dt)
        return cum
    return impl


def _reduce_rule(name, out_dtype=None, floating=False):
    def rule(x, dim=None, keepdim=False):
        if floating and not x.dtype.is_floating_point:
            fail(name, (x,), f"{name} expects a floating-point input; got {x.dtype.name} "
                 "(cast with .float() first)", RuntimeError)
        axes = normalize_dims(name, dim, len(x.shape))
        if not x.shape:
            axes = ()
        if name in ("amax", "amin", "argmax", "argmin") and any(x.shape[a] == 0 for a in axes):
            fail(name, (x,), "cannot reduce over a zero-size dimension (no identity)", IndexError)
        d = out_dtype(x.dtype) if out_dtype else x.dtype
        return Spec(reduced_shape(x.shape, axes, keepdim), d)
    return rule


def _int_to_long(d):
    return dtypes.int64 if not d.is_floating_point else d


_DIMS = dict(attrs=("dim", "keepdim"), kind="reduction")
declare("sum", ("x",), _sum, _reduce_rule("sum", _int_to_long), **_DIMS)
declare("mean", ("x",), _mean, _reduce_rule("mean", floating=True), **_DIMS)
declare("prod", ("x",), _prod, _reduce_rule("prod", _int_to_long), **_DIMS)
declare("amax", ("x",), _extreme("amax"), _reduce_rule("amax"), **_DIMS)
declare("amin", ("x",), _extreme("amin"), _reduce_rule("amin"), **_DIMS)
declare("all", ("x",), _extreme("all"), _reduce_rule("all", lambda d: dtypes.bool), **_DIMS, differentiable=False)
declare("any", ("x",), _extreme("any"), _reduce_rule("any", lambda d: dtypes.bool), **_DIMS, differentiable=False)
declare("argmax", ("x",), _arg("argmax"), _reduce_rule("argmax", lambda d: dtypes.int64),
        attrs=("dim", "keepdim"), kind="index_reduction", differentiable=False)
declare("argmin", ("x",), _arg("argmin"), _reduce_rule("argmin", lambda d: dtypes.int64),
        attrs=("dim", "keepdim"), kind="index_reduction", differentiable=False)


def _cum_rule(name):
    def rule(x, dim):
        normalize_dim(name, dim, len(x.shape))
        return Spec(x.shape, _int_to_long(x.dtype))
    return rule


declare("cumsum", ("x",), _cum("cumsum"), _cum_rule("cumsum"), attrs=("dim",), kind="scan", opmath=True)
declare("cumprod", ("x",), _cum("cumprod"), _cum_rule("cumprod"), attrs=("dim",), kind="scan", opmath=True)


def _logcumsumexp(xp):
    def logcumsumexp(x, dim):
        axis = normalize_dim("logcumsumexp", dim, x.ndim)
        if x.ndim == 0:
            return x.copy()
        # log(exp(a) + exp(b)) pairwise along the scan: exact where shifting by the max underflows
        try:
            return xp.logaddexp.accumulate(x, axis=axis)
        except (AttributeError, NotImplementedError):  # an array module without this ufunc scan
            m = xp.max(x, axis=axis, keepdims=True) if x.size else xp.zeros_like(x)
            m = xp.where(xp.isfinite(m), m, 0)
            return (xp.log(xp.cumsum(xp.exp(x - m), axis=axis)) + m).astype(x.dtype, copy=False)
    return logcumsumexp


def _logcumsumexp_rule(x, dim):
    if not x.dtype.is_floating_point:
        fail("logcumsumexp", (x,), "expected a floating-point input (as in PyTorch, there is no integer "
             "logcumsumexp: convert with .float() first)", RuntimeError)
    normalize_dim("logcumsumexp", dim, len(x.shape))
    return Spec(x.shape, x.dtype)


declare("logcumsumexp", ("x",), _logcumsumexp, _logcumsumexp_rule, attrs=("dim",), kind="scan", opmath=True)
