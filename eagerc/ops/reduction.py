"""Reductions: sum, mean, prod, max/min (values and indices), amax, amin, argmax,
argmin, var, std, logsumexp, norm, all, any, cumsum, cumprod, logcumsumexp.

var, std, logsumexp and norm are compositions of primitives, so they differentiate
(to any order) and compile without rules of their own.
"""
import builtins
import collections
import math

import numpy as np

from ..runtime.dtypes import FLOATING_KINDS
from ..autograd.formulas import defgrad
from ..dispatch import apply, grad_enabled
from ..runtime.ops import OPS
from ..runtime.ops.meta import inverse_permutation, normalize_dims
from .._tensor import Tensor
from .elementwise import cast, logical_and, logical_or, where
from ..amp.autocast_mode import autocast_op

return_types_max = collections.namedtuple("max", ["values", "indices"])
return_types_min = collections.namedtuple("min", ["values", "indices"])


def _dim(dim):
    """dim as the ops take it: None, an int or a tuple. An empty list or tuple means every
    dimension (PyTorch's convention for sum, mean, amax, ...)."""
    if isinstance(dim, (list, tuple)):
        return tuple(dim) or None
    return dim


def _reduce(name, x, dim, keepdim, dtype=None):
    if dtype is not None:
        x = cast(x, dtype)
    return apply(OPS[name], (x,), {"dim": _dim(dim), "keepdim": bool(keepdim)})


_SUM, _EXPAND = OPS["sum"], OPS["expand"]
_SUM_ALL = {"dim": None, "keepdim": False}  # shared, never mutated: x.sum() builds no dict


def sum(input, dim=None, keepdim=False, *, dtype=None):
    if dim is None and not keepdim and dtype is None:
        return apply(_SUM, (input,), _SUM_ALL)
    return _reduce("sum", input, dim, keepdim, dtype)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    if dtype is None and input._array.dtype.kind not in FLOATING_KINDS:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating "
                           f"point or complex dtype. Got: {input.dtype.name}")
    return _reduce("mean", input, dim, keepdim, dtype)


def prod(input, dim=None, keepdim=False, *, dtype=None):
    return _reduce("prod", input, dim, keepdim, dtype)


def amax(input, dim=(), keepdim=False):
    return _reduce("amax", input, dim, keepdim)


def amin(input, dim=(), keepdim=False):
    return _reduce("amin", input, dim, keepdim)


def _one_dim(name, dim):
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
        raise TypeError(f"{name}: dim must be an int or None, got {dim!r}")
    return dim


def argmax(input, dim=None, keepdim=False):
    return _reduce("argmax", input, _one_dim("argmax", dim), keepdim)


def argmin(input, dim=None, keepdim=False):
    return _reduce("argmin", input, _one_dim("argmin", dim), keepdim)


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
    axes = normalize_dims("reduce", _dim(dim), input._array.ndim) if input._array.ndim else ()
    return math.prod(input._array.shape[a] for a in axes)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance over `dim` with `correction` (1 by default: Bessel's); var(x, False) is unbiased=False."""
    if isinstance(dim, bool):  # the var(input, unbiased) overload
        dim, unbiased = None, dim
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"var: expected a floating point tensor, got {input.dtype.name} "
                           "(std and var only support floating point dtypes)")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    dim = _dim(dim)
    centered = input - mean(input, dim, keepdim=True)
    n = _count(input, dim)
    return sum(centered * centered, dim, keepdim) / _builtin_max(n - correction, 0)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(input, dim, unbiased, keepdim, correction=correction).sqrt()


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return var(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    v, m = var_mean(input, dim, unbiased, keepdim, correction=correction)
    return v.sqrt(), m


_builtin_max = builtins.max  # this module defines its own max, min, sum, all and any


@autocast_op("logsumexp")
def logsumexp(input, dim, keepdim=False):
    """log(sum(exp(x))) over `dim`, shifted by the max so large inputs do not overflow."""
    dim = _dim(dim)
    if input._array.size == 0:  # no max to shift by; an empty sum is 0 and its log -inf
        return input.exp().sum(dim, keepdim).log()
    m = amax(input, dim, keepdim=True).detach()
    m = where(m.isfinite(), m, 0.0)
    out = (input - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze(_dim(dim))


def _zero_safe_sqrt(s):
    """sqrt(s) whose derivative at s == 0 is 0 (PyTorch's norm subgradient) instead of inf * 0."""
    zero = s == 0
    return where(zero, 0.0, where(zero, 1.0, s).sqrt())


def vector_norm(input, ord=2, dim=None, keepdim=False, *, dtype=None, op="linalg.vector_norm"):
    """The ord-norm of `input` flattened over `dim` (all dimensions if None)."""
    if dtype is not None:
        input = cast(input, dtype)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected a floating point tensor as input, got {input.dtype.name}")
    dim = _dim(dim)
    if ord in (math.inf, -math.inf):
        shape = input._array.shape
        if builtins.any(shape[d] == 0 for d in (normalize_dims(op, dim, len(shape)) if shape else ())):
            raise RuntimeError(f"{op}: cannot compute the {ord} norm over a zero-size dimension of a tensor "
                               f"of shape {tuple(shape)}: the reduction has no identity")
        a = input.abs()
        return a.amax(() if dim is None else dim, keepdim) if ord > 0 else a.amin(() if dim is None else dim,
                                                                                  keepdim)
    if isinstance(ord, str) or isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise RuntimeError(f"{op}: order {ord!r} is not supported (expected a number, inf or -inf)")
    if ord == 2:
        return _zero_safe_sqrt((input * input).sum(dim, keepdim))
    if ord == 1:
        return input.abs().sum(dim, keepdim)
    if ord == 0:  # the count of nonzeros; PyTorch's result requires grad (a zero gradient): input * 0 gives it
        return where(input != 0, 1.0, input * 0).sum(dim, keepdim)
    return (input.abs() ** ord).sum(dim, keepdim) ** (1.0 / ord)


@autocast_op("norm")
def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """torch.norm: 'fro' (and None) is the 2-norm over `dim`; numbers and inf are vector norms."""
    if p in ("fro", None):
        p = 2
    elif p in ("inf", "-inf"):
        p = float(p)
    elif p == "nuc":
        raise NotImplementedError("norm: p='nuc' needs singular values (an SVD), which eagerc does not "
                                  "implement")
    if isinstance(dim, int):
        dim = (dim,)
    return vector_norm(input, p, dim, keepdim, dtype=dtype, op="norm")


def cumsum(input, dim, *, dtype=None):
    return apply(OPS["cumsum"], (input if dtype is None else cast(input, dtype),), {"dim": int(dim)})


def cumprod(input, dim, *, dtype=None):
    return apply(OPS["cumprod"], (input if dtype is None else cast(input, dtype),), {"dim": int(dim)})


def logcumsumexp(input, dim):
    """log(cumsum(exp(x))) along `dim`, computed pairwise so no term underflows."""
    if input._array.dtype.kind not in FLOATING_KINDS:
        raise RuntimeError(f"logcumsumexp: expected a floating-point input, got {input.dtype.name} (as in "
                           "PyTorch, there is no integer logcumsumexp: convert with .float() first)")
    return apply(OPS["logcumsumexp"], (input,), {"dim": int(dim)})


def count_nonzero(input, dim=None):
    return (input != 0).sum(dim)


# ---------------------------------------------------------------- derivatives

def unreduce(g, x_shape, dim, keepdim):
    """Broadcast a reduced gradient back to the input's shape."""
    nd = len(x_shape)
    if not keepdim and nd and g._array.ndim:  # a 0-d g (a full reduction) broadcasts as it is
        axes = normalize_dims("reduce", dim, nd)
        g = g.reshape(tuple(1 if i in axes else n for i, n in enumerate(x_shape)))
    x_shape = tuple(x_shape)  # (expand's op straight away: every sum's and mean's backward runs this)
    return g if g._array.shape == x_shape else apply(_EXPAND, (g,), {"shape": x_shape})


def _mean_grad(g, x_shape, dim, keepdim):
    n = math.prod(x_shape[a] for a in (normalize_dims("mean", dim, len(x_shape)) if x_shape else ()))
    return unreduce(g, x_shape, dim, keepdim) / _builtin_max(n, 1)


def _extreme_grad(g, x, out, dim, keepdim):
    out_b = unreduce(out, x.shape, dim, keepdim)
    mask = (x == out_b).to(g.dtype)
    # ties share the gradient equally, like PyTorch's amax/amin
    return unreduce(g, x.shape, dim, keepdim) * mask / mask.sum(dim, keepdim=True)


def _cumsum_grad(g, dim):
    return g.flip(dim).cumsum(dim).flip(dim) if g.ndim else g


def _cumprod_grad(g, x, out, dim):
    """d out_k / d x_i = prod_{j < i} x_j * prod_{i < j <= k} x_j for k >= i.

    A first derivative (grad mode off while it runs) takes the O(n) path below, exact at zeros
    too. For a second one (create_graph) it is built from products alone, as PyTorch's
    cumprod_backward does then, so that its own derivative is right at exact zeros too."""
    if not g.ndim:
        return g
    if grad_enabled():
        return _cumprod_grad_products(g, x, dim)
    zero = x == 0
    zeros_so_far = zero.cumsum(dim)                        # zeros at or before each position
    before = zeros_so_far == 0                             # strictly before the first zero
    first = logical_and(zero, zeros_so_far == 1)           # the first zero itself
    safe_x = where(before, x, 1.0)
    grad_before = _cumsum_grad(g * out, dim) / safe_x      # sum_{k >= i} g_k out_k / x_i
    head = prod(safe_x, dim, keepdim=True)                 # prod_{j < z} x_j
    after_first = where(logical_or(before, first), 1.0, x).cumprod(dim)
    tail = where(before, 0.0, after_first)                 # prod_{z < j <= k} x_j for k >= z
    grad_first = head * _cumsum_grad(g * tail, dim)
    return where(before, grad_before, where(first, grad_first, 0.0))


def _cumprod_grad_products(g, x, dim):
    """The cumprod derivative without division, O(n^2) along `dim`: with x moved last,
    M[i, k] = prod_{i < j <= k} x_j (k >= i, else 0) is a cumprod of x laid over rows, then
    grad_i = (exclusive cumprod)_i * sum_k M[i, k] g_k."""
    xl, gl = x.movedim(dim, -1), g.movedim(dim, -1)
    n = xl.shape[-1]
    from .creation import ones
    upper = ones((n, n), dtype=x.dtype, device=x.device).triu(1) > 0                 # j > i
    rows = where(upper, xl.unsqueeze(-2), 1.0).cumprod(-1)            # prod_{i < j <= k} x_j, 1 for k <= i
    m = rows.triu()                                                   # only k >= i
    suffix = (m @ gl.unsqueeze(-1)).squeeze(-1)                       # sum_k M[i, k] g_k
    return (_exclusive_cumprod(xl) * suffix).movedim(-1, dim)


def _exclusive_cumprod(x):
    """prod_{j < i} x_j along the last dimension (1 for the first), without division."""
    from .joining import cat
    from .creation import ones
    one = ones(tuple(x.shape[:-1]) + (1,), dtype=x.dtype, device=x.device)
    return cat([one, x[..., :-1]], -1).cumprod(-1)


def _prod_grad(g, x, dim, keepdim):
    """d prod / d x_i = the product of the other entries: the exclusive products from the left
    times those from the right (PyTorch's prod_safe_zeros_backward). No division, so it is
    right at zeros to every order (its own derivative goes through cumprod's)."""
    if not x.ndim or not x._array.size:
        return unreduce(g, x.shape, dim, keepdim)
    shape = tuple(x.shape)
    axes = normalize_dims("prod", dim, len(shape))
    rest = tuple(i for i in range(len(shape)) if i not in axes)
    order = rest + axes
    flat = x.permute(*order).reshape(tuple(shape[i] for i in rest) + (-1,))
    others = _exclusive_cumprod(flat) * _exclusive_cumprod(flat.flip(-1)).flip(-1)
    others = others.reshape(tuple(shape[i] for i in order)).permute(*inverse_permutation(order))
    return unreduce(g, shape, dim, keepdim) * others


def _logcumsumexp_grad(g, x, out, dim):
    """sum_{k >= i} g_k exp(x_i - out_k), split by the sign of g so every term is a
    logcumsumexp of logs (PyTorch's logcumsumexp_backward); Tensor ops, so it differentiates."""
    if not g.ndim:
        return g
    lowest = float(np.finfo(x._array.dtype).min)
    log_abs = g.abs().log()

    def reversed_logcumsumexp(v):
        return logcumsumexp(v.flip(dim), dim).flip(dim)
    positive = (reversed_logcumsumexp(where(g > 0, log_abs, lowest) - out) + x).exp()
    negative = (reversed_logcumsumexp(where(g < 0, log_abs, lowest) - out) + x).exp()
    return positive - negative


defgrad("sum", lambda g, x_shape, dim, keepdim: unreduce(g, x_shape, dim, keepdim))
defgrad("mean", _mean_grad)
defgrad("prod", _prod_grad)
defgrad("amax", _extreme_grad)
defgrad("amin", _extreme_grad)
defgrad("cumsum", _cumsum_grad)
defgrad("cumprod", _cumprod_grad)
defgrad("logcumsumexp", _logcumsumexp_grad)

for _n in ("sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "max", "min", "all", "any", "var", "std",
           "logsumexp", "norm", "cumsum", "cumprod", "count_nonzero", "logcumsumexp"):
    setattr(Tensor, _n, globals()[_n])
