"""Op-table entries: reductions (sum, mean, prod, amax/amin, argmax/argmin, max/min,
var/std, logsumexp, norm, all/any, cumsum/cumprod, count_nonzero).

Each op runs over a grid of `dim` forms (None, int, negative, tuple, 0-d, empty)
with keepdim both ways; references are plain numpy. Empty variants are not
gradchecked (nothing to perturb), but the shape-rule test runs their backward.
"""
import math

import numpy as np

import eagerc
from optable import Case, distinct, away_from_zero, grad2 as _grad2, integers, booleans


def with_zeros(rng, shape):
    """Floats where about a third of the values are exactly zero."""
    return rng.integers(-1, 2, shape) * (np.abs(rng.standard_normal(shape)) + 0.5)


def one_zero(rng, shape):
    """Nonzero values except for a single exact zero (the prod gradient's hard case)."""
    x = away_from_zero(rng, shape)
    if x.size:
        x.reshape(-1)[x.size // 2] = 0.0
    return x


def two_zeros_per_row(rng, shape):
    x = away_from_zero(rng, shape)
    x[..., :2] = 0.0
    return x


def ties(rng, shape):
    """Small integers as floats: plenty of tied maxima."""
    return rng.integers(0, 3, shape).astype(np.float64)


def _axis(dim):
    return tuple(dim) if isinstance(dim, (tuple, list)) else dim


# (label, dim, keepdim, shapes): every dim form on a few shapes
GRID = [
    ("all", None, False, [(3, 4), (2, 3, 4), (5,), ()]),
    ("all_keepdim", None, True, [(3, 4), ()]),
    ("dim1", 1, False, [(3, 4), (2, 3, 4)]),
    ("dim0_keepdim", 0, True, [(3, 4), (5,)]),
    ("dim_neg", -1, False, [(3, 4), (4,), (2, 3, 4)]),
    ("dim_neg_keepdim", -2, True, [(3, 4), (2, 3, 4)]),
    ("dims", (0, 2), False, [(2, 3, 4)]),
    ("dims_neg_keepdim", (-1, 0), True, [(2, 3, 4), (3, 4)]),
    ("dims_list", [1, 2], False, [(2, 3, 4)]),
    ("zero_d", 0, False, [()]),
    ("zero_d_neg_keepdim", -1, True, [()]),
    ("empty_kept", 1, False, [(0, 3)]),      # reduces a non-empty dimension of an empty tensor
]
EMPTY = ("empty_reduced", 0, False, [(0, 3), (2, 0)])  # reduces a zero-size dimension: needs an identity


def _grid(name, fn, ref, make=None, identity=True, grad=True, dims=None, skip=(), grad_0d=True, **kw):
    """One Case per GRID row: fn(x, dim, keepdim) and ref(x, axis, keepdims).
    grad_0d=False: no gradcheck on 0-d inputs (var of one element is nan)."""
    rows = GRID + ([EMPTY] if identity else [])
    cases = []
    for label, dim, keepdim, shapes in rows:
        if label in skip or (dims is not None and label not in dims):
            continue
        gv = sum(1 for s in shapes if 0 not in s and (s or grad_0d))
        cases.append(Case(
            f"{name}_{label}",
            (lambda d, k: lambda x: fn(x, d, k))(dim, keepdim),
            (lambda d, k: lambda x: ref(x, _axis(d) if x.ndim else None, k))(dim, keepdim),
            [(s,) for s in shapes], make=(make,), grad=grad, grad_variants=gv, **kw))
    return cases


def _np_quiet(f):
    """numpy reference without warnings for empty or degenerate reductions (PyTorch gives nan silently)."""
    def ref(*args, **kwargs):
        with np.errstate(all="ignore"):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                return f(*args, **kwargs)
    return ref


def _np_logsumexp(x, axis, keepdims):
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis if axis is not None else None)


def _np_var(correction):
    return _np_quiet(lambda x, axis, keepdims: np.var(x, axis=axis, ddof=correction, keepdims=keepdims))


def _np_argext(f):
    def ref(x, axis, keepdims):
        if axis is None:
            return np.int64(f(x.reshape(-1)))
        if x.ndim == 0:
            return np.int64(0)
        return f(x, axis=axis, keepdims=keepdims).astype(np.int64)
    return ref


def _np_max_dim(values, arg):
    def ref(x, axis, keepdims):
        if x.ndim == 0:
            return x.copy(), np.int64(0)
        return values(x, axis=axis, keepdims=keepdims), arg(x, axis=axis, keepdims=keepdims).astype(np.int64)
    return ref


def _np_cum(f, dim):
    def ref(x):
        return f(x, axis=dim) if x.ndim else x.copy()  # numpy makes 0-d inputs 1-d
    return ref


def _np_norm(p):
    def ref(x, axis, keepdims):
        a = np.abs(x)
        if p == math.inf:
            return np.max(a, axis=axis, keepdims=keepdims)
        if p == -math.inf:
            return np.min(a, axis=axis, keepdims=keepdims)
        if p == 0:
            return np.sum(x != 0, axis=axis, keepdims=keepdims).astype(x.dtype)
        return np.sum(a ** p, axis=axis, keepdims=keepdims) ** (1.0 / p)
    return ref


SHAPES_CUM = [((3, 4),), ((2, 3, 4),), ((0, 3),), ((),)]

def _others(x):
    """prod_{j != i} x_j for each i, by direct products (no division)."""
    return np.array([np.prod(np.delete(x, i)) for i in range(len(x))])


def _prod_grad2_ref(x):
    return 3 * x.prod() ** 2 * _others(x)          # d(prod^3)/dx_i


def _cumprod_grad2_ref(x):
    """d(sum_k cumprod_k^3)/dx_i = sum_{k >= i} 3 cumprod_k^2 prod_{j <= k, j != i} x_j."""
    c = np.cumprod(x)
    return np.array([sum(3 * c[k] ** 2 * np.prod(np.delete(x[:k + 1], i)) for k in range(i, len(x)))
                     for i in range(len(x))])


def _logcumsumexp_loop(x):
    """300 x, scanned along axis 0 with an explicit loop of max + log1p(exp(-|a - b|))."""
    x = x * 300
    out = np.empty_like(x)
    acc = x[0]
    out[0] = acc
    for i in range(1, len(x)):
        m = np.maximum(acc, x[i])
        acc = m + np.log1p(np.exp(-np.abs(acc - x[i])))
        out[i] = acc
    return out


CASES = [
    # ------------------------------------------------ sum
    *_grid("sum", lambda x, d, k: eagerc.sum(x, d, k), lambda x, a, k: np.sum(x, axis=a, keepdims=k)),
    Case("sum_method", lambda x: x.sum(), np.sum, [((3, 4),)]),
    Case("sum_method_dim", lambda x: x.sum(dim=1, keepdim=True), lambda x: x.sum(1, keepdims=True), [((3, 4),)]),
    Case("sum_empty_dims_is_all", lambda x: x.sum(()), np.sum, [((3, 4),)]),
    Case("sum_int", lambda x: x.sum(0), lambda x: x.sum(0), [((3, 4),)], make=(integers(),), grad=False),
    Case("sum_bool", lambda x: x.sum(), lambda x: np.sum(x, dtype=np.int64), [((3, 4),), ((0,),)],
         make=(booleans,), grad=False),
    Case("sum_dtype", lambda x: eagerc.sum(x, 1, dtype=eagerc.float64), lambda x: x.sum(1), [((3, 4),)],
         out_dtype="float64"),
    # ------------------------------------------------ mean
    *_grid("mean", lambda x, d, k: eagerc.mean(x, d, k), _np_quiet(lambda x, a, k: np.mean(x, axis=a, keepdims=k))),
    Case("mean_method", lambda x: x.mean(-1), lambda x: x.mean(-1), [((3, 4),)]),
    Case("mean_int_dtype", lambda x: x.mean(dtype=eagerc.float64), lambda x: x.mean(), [((3, 4),)],
         make=(integers(),), grad=False, out_dtype="float64"),
    # ------------------------------------------------ prod
    *_grid("prod", lambda x, d, k: eagerc.prod(x, d, k), lambda x, a, k: np.prod(x, axis=a, keepdims=k),
           make=away_from_zero, dims=("all", "dim1", "dim0_keepdim", "dim_neg", "dim_neg_keepdim", "zero_d",
                                      "zero_d_neg_keepdim", "empty_kept", "empty_reduced"), rtol32=1e-3),
    Case("prod_one_zero", lambda x: x.prod(-1), lambda x: x.prod(-1), [((3, 4),), ((5,),)], make=(one_zero,)),
    Case("prod_one_zero_all", lambda x: x.prod(), lambda x: x.prod(), [((3, 4),)], make=(one_zero,)),
    Case("prod_two_zeros", lambda x: x.prod(-1), lambda x: x.prod(-1), [((3, 4),)], make=(two_zeros_per_row,)),
    Case("prod_int", lambda x: x.prod(1), lambda x: x.prod(1), [((3, 4),)], make=(integers(1, 4),), grad=False),
    # ------------------------------------------------ amax, amin
    *_grid("amax", lambda x, d, k: eagerc.amax(x, () if d is None else d, k),
           lambda x, a, k: np.max(x, axis=a, keepdims=k), make=distinct, identity=False),
    *_grid("amin", lambda x, d, k: eagerc.amin(x, () if d is None else d, k),
           lambda x, a, k: np.min(x, axis=a, keepdims=k), make=distinct, identity=False),
    Case("amax_ties", lambda x: x.amax(1), lambda x: x.max(1), [((4, 5),)], make=(ties,), grad=False),
    Case("amax_int", lambda x: x.amax(0), lambda x: x.max(0), [((3, 4),)], make=(integers(),), grad=False),
    # ------------------------------------------------ argmax, argmin
    *_grid("argmax", lambda x, d, k: eagerc.argmax(x, d, k), _np_argext(np.argmax), make=distinct,
           identity=False, skip=("all_keepdim", "dims", "dims_neg_keepdim", "dims_list"), grad=False),
    *_grid("argmin", lambda x, d, k: eagerc.argmin(x, d, k), _np_argext(np.argmin), make=distinct,
           identity=False, skip=("all_keepdim", "dims", "dims_neg_keepdim", "dims_list"), grad=False),
    Case("argmax_ties_first", lambda x: x.argmax(1), lambda x: x.argmax(1), [((4, 5),)], make=(ties,), grad=False),
    Case("argmax_int", lambda x: x.argmax(), lambda x: np.int64(x.argmax()), [((3, 4),)], make=(integers(),),
         grad=False),
    # ------------------------------------------------ max, min: value, (values, indices), elementwise
    Case("max", eagerc.max, np.max, [((3, 4),), ((5,),), ((),)], make=(distinct,), grad_variants=3),
    Case("min", lambda x: x.min(), np.min, [((3, 4),), ((2, 3, 4),), ((),)], make=(distinct,), grad_variants=3),
    Case("max_ties", lambda x: x.max(), np.max, [((4, 5),)], make=(ties,), grad=False),
    *_grid("max_dim", lambda x, d, k: eagerc.max(x, d, k),
           _np_max_dim(np.max, lambda x, axis, keepdims: np.argmax(x, axis=axis, keepdims=keepdims)),
           make=distinct, identity=False, dims=("dim1", "dim0_keepdim", "dim_neg", "dim_neg_keepdim",
                                               "zero_d", "zero_d_neg_keepdim", "empty_kept")),
    *_grid("min_dim", lambda x, d, k: x.min(d, keepdim=k),
           _np_max_dim(np.min, lambda x, axis, keepdims: np.argmin(x, axis=axis, keepdims=keepdims)),
           make=distinct, identity=False, dims=("dim1", "dim_neg_keepdim", "zero_d")),
    Case("max_dim_namedtuple", lambda x: (eagerc.max(x, dim=1).values, x.max(1).indices, tuple(x.min(0))[0]),
         lambda x: (x.max(1), x.argmax(1), x.min(0)), [((3, 4),)], make=(distinct,)),
    Case("max_binary", lambda a, b: eagerc.max(a, b), np.maximum, [((3, 4), (3, 4)), ((3, 1), (4,))],
         make=(distinct, away_from_zero)),
    Case("min_binary", lambda a, b: a.min(b), np.minimum, [((3, 4), (3, 4)), ((3, 1), (4,))],
         make=(distinct, away_from_zero)),
    # ------------------------------------------------ var, std
    *_grid("var", lambda x, d, k: eagerc.var(x, d, keepdim=k), _np_var(1), grad_0d=False),
    *_grid("var_c0", lambda x, d, k: eagerc.var(x, d, keepdim=k, correction=0), _np_var(0)),
    *_grid("std", lambda x, d, k: eagerc.std(x, d, keepdim=k),
           _np_quiet(lambda x, a, k: np.std(x, axis=a, ddof=1, keepdims=k)), grad_0d=False),
    Case("var_correction2", lambda x: x.var(1, correction=2), lambda x: x.var(1, ddof=2), [((3, 5),)]),
    Case("var_unbiased_false", lambda x: eagerc.var(x, 0, False, True), lambda x: x.var(0, keepdims=True),
         [((3, 4),)]),
    Case("var_unbiased_positional", lambda x: eagerc.var(x, False), lambda x: x.var(), [((3, 4),)]),
    Case("std_correction0_dims", lambda x: x.std((0, 2), correction=0, keepdim=True),
         lambda x: x.std((0, 2), keepdims=True), [((2, 3, 4),)]),
    Case("var_single_element_is_nan", lambda x: x.var(0), _np_quiet(lambda x: x.var(0, ddof=1)), [((1, 3),)],
         grad=False),
    Case("var_mean", lambda x: eagerc.var_mean(x, 1), lambda x: (x.var(1, ddof=1), x.mean(1)), [((3, 4),)]),
    Case("std_mean", lambda x: eagerc.std_mean(x, correction=0), lambda x: (x.std(), x.mean()), [((3, 4),)]),
    # ------------------------------------------------ logsumexp
    *_grid("logsumexp", lambda x, d, k: eagerc.logsumexp(x, d, k), _np_quiet(_np_logsumexp),
           skip=("all", "all_keepdim")),
    Case("logsumexp_large", lambda x: x.logsumexp(1), lambda x: _np_logsumexp(x, 1, False),
         [((3, 4),)], make=(lambda rng, s: rng.standard_normal(s) + 1000.0,)),
    Case("logsumexp_neg_inf_row", lambda x: x.logsumexp(1), _np_quiet(lambda x: _np_logsumexp(x, 1, False)),
         [((2, 3),)], make=(lambda rng, s: np.array([[-np.inf] * 3, [0.5, -1.0, 2.0]]),), grad=False),
    Case("logsumexp_int", lambda x: x.logsumexp(0), lambda x: _np_logsumexp(x.astype(np.float64), 0, False),
         [((3, 4),)], make=(integers(),), grad=False),
    # ------------------------------------------------ norm (torch.norm)
    *_grid("norm", lambda x, d, k: eagerc.norm(x, dim=d, keepdim=k), _np_norm(2)),
    *_grid("norm_p1", lambda x, d, k: eagerc.norm(x, 1, d, k), _np_norm(1), make=away_from_zero,
           dims=("all", "dim1", "dims_neg_keepdim", "zero_d", "empty_reduced")),
    *_grid("norm_inf", lambda x, d, k: eagerc.norm(x, math.inf, d, k), _np_norm(math.inf), make=distinct,
           identity=False, dims=("all", "dim_neg", "dims", "zero_d", "empty_kept")),
    *_grid("norm_neg_inf", lambda x, d, k: x.norm(-math.inf, d, k), _np_norm(-math.inf), make=distinct,
           identity=False, dims=("all", "dim0_keepdim")),
    *_grid("norm_p3", lambda x, d, k: x.norm(3, d, k), _np_norm(3), make=away_from_zero,
           dims=("all", "dim1", "dims")),
    *_grid("norm_p0", lambda x, d, k: x.norm(0, d, k), _np_norm(0), make=with_zeros, grad=False,
           dims=("all", "dim1")),
    *_grid("norm_fro", lambda x, d, k: x.norm("fro", d, k), _np_norm(2), dims=("all", "dims", "dims_neg_keepdim")),
    Case("norm_at_zero", lambda x: (x * 0).norm(), lambda x: np.float64(0.0), [((3, 4),)]),
    Case("norm_dtype", lambda x: x.norm(dtype=eagerc.float64), lambda x: np.linalg.norm(x), [((3, 4),)],
         out_dtype="float64"),
    # ------------------------------------------------ all, any
    *_grid("all", lambda x, d, k: eagerc.all(x, d, k), lambda x, a, k: np.all(x, axis=a, keepdims=k),
           make=booleans, grad=False),
    *_grid("any", lambda x, d, k: eagerc.any(x, d, k), lambda x, a, k: np.any(x, axis=a, keepdims=k),
           make=booleans, grad=False),
    Case("all_float", lambda x: x.all(1), lambda x: x.all(1), [((3, 4),)], make=(with_zeros,), grad=False),
    Case("any_int", lambda x: x.any(), lambda x: x.any(), [((3, 4),), ((0,),)], make=(integers(0, 2),),
         grad=False),
    Case("all_true", lambda x: eagerc.all(x > -100), lambda x: np.bool_(True), [((3, 4),), ((0, 3),)], grad=False),
    # ------------------------------------------------ cumsum, cumprod
    Case("cumsum", lambda x: eagerc.cumsum(x, 0), _np_cum(np.cumsum, 0), SHAPES_CUM, grad_variants=4),
    Case("cumsum_neg", lambda x: x.cumsum(-1), _np_cum(np.cumsum, -1), SHAPES_CUM, grad_variants=4),
    Case("cumsum_int", lambda x: x.cumsum(1), lambda x: np.cumsum(x, 1), [((3, 4),)], make=(integers(),),
         grad=False),
    Case("cumsum_bool", lambda x: x.cumsum(0), lambda x: np.cumsum(x, 0, dtype=np.int64), [((5,),)],
         make=(booleans,), grad=False),
    Case("cumsum_dtype", lambda x: x.cumsum(0, dtype=eagerc.float64), lambda x: np.cumsum(x, 0), [((4,),)],
         out_dtype="float64"),
    Case("cumprod", lambda x: eagerc.cumprod(x, 1), _np_cum(np.cumprod, 1),
         SHAPES_CUM[:2] + [((2, 0),)], make=(away_from_zero,)),
    Case("cumprod_neg", lambda x: x.cumprod(-1), _np_cum(np.cumprod, -1),
         SHAPES_CUM, make=(away_from_zero,), grad_variants=4),
    Case("cumprod_zeros", lambda x: x.cumprod(1), lambda x: np.cumprod(x, 1), [((3, 5),), ((4, 6),)],
         make=(with_zeros,), grad_variants=2),
    Case("cumprod_one_zero", lambda x: x.cumprod(0), lambda x: np.cumprod(x, 0), [((5,),), ((4, 3),)],
         make=(one_zero,)),
    Case("cumprod_int", lambda x: x.cumprod(0), lambda x: np.cumprod(x, 0), [((3, 4),)], make=(integers(1, 4),),
         grad=False),
    # ------------------------------------------------ logcumsumexp
    Case("logcumsumexp", lambda x: eagerc.logcumsumexp(x, 1), lambda x: np.log(np.cumsum(np.exp(x), 1)),
         SHAPES_CUM[:2] + [((2, 0),)]),
    Case("logcumsumexp_neg", lambda x: x.logcumsumexp(-1), lambda x: np.log(np.cumsum(np.exp(x), -1)) if x.ndim
         else x, SHAPES_CUM, grad_variants=4),
    Case("logcumsumexp_wide_range", lambda x: eagerc.logcumsumexp(x * 300, 0), _logcumsumexp_loop,
         [((6,),), ((5, 2),)]),
    # ------------------------------------------------ second derivatives at exact zeros
    Case("prod_grad2_zero", _grad2(lambda x: x.prod()), _prod_grad2_ref, [((3,),), ((4,),)], make=(one_zero,)),
    Case("prod_dim_grad2_zeros", _grad2(lambda x: x.prod(1)), lambda x: np.stack([_prod_grad2_ref(r) for r in x]),
         [((3, 4),)], make=(with_zeros,)),
    Case("cumprod_grad2_zero", _grad2(lambda x: x.cumprod(0)), _cumprod_grad2_ref, [((3,),), ((5,),)],
         make=(one_zero,)),
    # ------------------------------------------------ count_nonzero
    Case("count_nonzero", eagerc.count_nonzero, np.count_nonzero, [((3, 4),), ((0, 2),), ((),)], make=(with_zeros,),
         grad=False),
    Case("count_nonzero_dim", lambda x: x.count_nonzero(1), lambda x: np.count_nonzero(x, axis=1),
         [((3, 4),), ((2, 3, 4),), ((0, 3),)], make=(with_zeros,), grad=False),
    Case("count_nonzero_dims", lambda x: x.count_nonzero((0, -1)), lambda x: np.count_nonzero(x, axis=(0, 2)),
         [((2, 3, 4),)], make=(with_zeros,), grad=False),
    Case("count_nonzero_int", lambda x: eagerc.count_nonzero(x, -1), lambda x: np.count_nonzero(x, axis=-1),
         [((3, 4),)], make=(integers(-1, 2),), grad=False),
]
