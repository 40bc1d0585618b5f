"""Reductions: sum, mean, prod, max/min (values and indices), amax, amin, argmax,
argmin, var, std, logsumexp, norm, all, any, cumsum, cumprod.

var, std, logsumexp and norm are compositions of primitives, so they differentiate
(to any order) and compile without rules of their own.
"""
import collections
import math

from ..autograd.formulas import defgrad
from ..dispatch import apply
from ..runtime.ops import OPS
from ..runtime.ops.meta import normalize_dims
from .._tensor import Tensor
from .elementwise import cast, where

return_types_max = collections.namedtuple("max", ["values", "indices"])
return_types_min = collections.namedtuple("min", ["values", "indices"])


def _dim(dim):
    if isinstance(dim, list):
        return tuple(dim)
    return dim


def _reduce(name, x, dim, keepdim, dtype=None):
    if dtype is not None:
        x = cast(x, dtype)
    return apply(OPS[name], (x,), {"dim": _dim(dim), "keepdim": bool(keepdim)})


def sum(input, dim=None, keepdim=False, *, dtype=None):
    return _reduce("sum", input, dim, keepdim, dtype)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    if dtype is None and input.data.dtype.kind != "f":
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating "
                           f"point or complex dtype. Got: {input.dtype.name}")
    return _reduce("mean", input, dim, keepdim, dtype)


def prod(input, dim=None, keepdim=False, *, dtype=None):
    return _reduce("prod", input, dim, keepdim, dtype)


def amax(input, dim=(), keepdim=False):
    return _reduce("amax", input, None if dim == () else dim, keepdim)


def amin(input, dim=(), keepdim=False):
    return _reduce("amin", input, None if dim == () else dim, keepdim)


def argmax(input, dim=None, keepdim=False):
    return _reduce("argmax", input, dim, keepdim)


def argmin(input, dim=None, keepdim=False):
    return _reduce("argmin", input, dim, keepdim)


def _extreme(input, dim, keepdim, other, arg, red, binary, rtype):
    if isinstance(dim, Tensor):  # max(a, b): elementwise
        return binary(input, dim)
    if other is not None:
        return binary(input, other)
    if dim is None:
        return red(input)
    idx = arg(input, dim, keepdim=True)
    from .indexing import gather
    values = gather(input, dim, idx)
    if not keepdim:
        values = values.squeeze(dim)
        idx = idx.squeeze(dim)
    return rtype(values, idx)


def max(input, dim=None, keepdim=False, *, other=None):
    """max(x) -> the largest value; max(x, dim) -> (values, indices); max(a, b) -> maximum."""
    from .elementwise import maximum
    return _extreme(input, dim, keepdim, other, argmax, amax, maximum, return_types_max)


def min(input, dim=None, keepdim=False, *, other=None):
    from .elementwise import minimum
    return _extreme(input, dim, keepdim, other, argmin, amin, minimum, return_types_min)


def all(input, dim=None, keepdim=False):
    return _reduce("all", input, dim, keepdim)


def any(input, dim=None, keepdim=False):
    return _reduce("any", input, dim, keepdim)


def _count(input, dim):
    axes = normalize_dims("reduce", _dim(dim), input.data.ndim) if input.data.ndim else ()
    n = 1
    for a in axes:
        n *= input.data.shape[a]
    return n


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    centered = input - mean(input, dim, keepdim=True)
    n = _count(input, dim)
    return sum(centered * centered, dim, keepdim) / _builtin_max(n - correction, 0)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(input, dim, unbiased, keepdim, correction=correction).sqrt()


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return std(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


_builtin_max = __builtins__["max"] if isinstance(__builtins__, dict) else __builtins__.max


def logsumexp(input, dim, keepdim=False):
    m = amax(input, dim, keepdim=True).detach()
    m = where(m.isfinite(), m, 0.0)
    out = (input - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze(_dim(dim))


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        input = cast(input, dtype)
    if p in ("fro", 2, 2.0, None):
        return (input * input).sum(dim, keepdim).sqrt()
    if p in (math.inf, "inf"):
        return input.abs().amax(() if dim is None else dim, keepdim)
    if p in (-math.inf, "-inf"):
        return input.abs().amin(() if dim is None else dim, keepdim)
    if p == 1:
        return input.abs().sum(dim, keepdim)
    if p == 0:
        return (input != 0).to(input.dtype).sum(dim, keepdim)
    return (input.abs() ** p).sum(dim, keepdim) ** (1.0 / p)


def cumsum(input, dim, *, dtype=None):
    if dtype is not None:
        input = cast(input, dtype)
    return apply(OPS["cumsum"], (input,), {"dim": int(dim)})


def cumprod(input, dim, *, dtype=None):
    if dtype is not None:
        input = cast(input, dtype)
    return apply(OPS["cumprod"], (input,), {"dim": int(dim)})


def count_nonzero(input, dim=None):
    return (input != 0).sum(dim)


# ---------------------------------------------------------------- derivatives

def unreduce(g, x_shape, dim, keepdim):
    """Broadcast a reduced gradient back to the input's shape."""
    nd = len(x_shape)
    if not keepdim and nd:
        axes = normalize_dims("reduce", dim, nd)
        g = g.reshape(tuple(1 if i in axes else n for i, n in enumerate(x_shape)))
    return g.expand(tuple(x_shape))


def _mean_grad(g, x_shape, dim, keepdim):
    n = 1
    for a in (normalize_dims("mean", dim, len(x_shape)) if x_shape else ()):
        n *= x_shape[a]
    return unreduce(g, x_shape, dim, keepdim) / _builtin_max(n, 1)


def _extreme_grad(g, x, out, dim, keepdim):
    out_b = unreduce(out, x.shape, dim, keepdim)
    mask = (x == out_b).to(g.dtype)
    # ties share the gradient equally, like PyTorch's amax/amin
    return unreduce(g, x.shape, dim, keepdim) * mask / mask.sum(dim, keepdim=True)


def _cumsum_grad(g, dim):
    return g.flip(dim).cumsum(dim).flip(dim) if g.ndim else g


def _cumprod_grad(g, x, out, dim):
    # valid for nonzero inputs: d out_k / d x_i = out_k / x_i for k >= i
    return _cumsum_grad(g * out, dim) / x if g.ndim else g


defgrad("sum", lambda g, x_shape, dim, keepdim: unreduce(g, x_shape, dim, keepdim))
defgrad("mean", _mean_grad)
defgrad("prod", lambda g, x, out, dim, keepdim: unreduce(g * out, x.shape, dim, keepdim) / x)
defgrad("amax", _extreme_grad)
defgrad("amin", _extreme_grad)
defgrad("cumsum", _cumsum_grad)
defgrad("cumprod", _cumprod_grad)

_METHODS = {"sum": sum, "mean": mean, "prod": prod, "amax": amax, "amin": amin, "argmax": argmax,
            "argmin": argmin, "max": max, "min": min, "all": all, "any": any, "var": var, "std": std,
            "logsumexp": logsumexp, "norm": norm, "cumsum": cumsum, "cumprod": cumprod,
            "count_nonzero": count_nonzero}
for _n, _f in _METHODS.items():
    setattr(Tensor, _n, _f)
