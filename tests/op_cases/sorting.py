"""Op-table entries: ordering and sampling (sort, argsort, msort, topk, kthvalue, median,
nanmedian, mode, quantile, nanquantile, unique, unique_consecutive, searchsorted, bucketize,
bincount, histc, multinomial).

References are numpy's own sorts and statistics, or plain loops where numpy has no
counterpart (mode, the lower median's index, sampling). Values are `distinct` where a
gradient is checked (ties make a selection's derivative ambiguous); ties get cases of their
own, checking that ties keep their order (PyTorch's choice with stable=True).
"""
import numpy as np

import eagerc
from optable import Case, distinct, integers


def ties(rng, shape):
    return rng.integers(0, 3, shape).astype(np.float64)


def with_nan(rng, shape):
    x = distinct(rng, shape)
    x.reshape(-1)[::3] = np.nan
    return x


def increasing(rng, shape):
    """Sorted rows (the sequence searchsorted searches)."""
    return np.sort(rng.standard_normal(shape), axis=-1)


def positive(rng, shape):
    return rng.uniform(0.1, 1.0, shape)


def sparse_probs(rng, shape):
    """Non-negative weights with zeros (a zero-weight category is never drawn)."""
    return rng.uniform(0.1, 1.0, shape) * (rng.random(shape) < 0.6) + np.eye(*shape[-1:])[0]


def _argsort(x, axis=-1, descending=False):
    if x.ndim == 0:
        return np.int64(0)
    if descending:  # PyTorch: NaN is the largest value
        x = -np.where(np.isnan(x), np.inf, x) if x.dtype.kind == "f" else -x
    return np.argsort(x, axis=axis, kind="stable").astype(np.int64)


def _sort(x, axis=-1, descending=False):
    i = _argsort(x, axis, descending)
    return (x.copy(), i) if x.ndim == 0 else (np.take_along_axis(x, i, axis), i)


def _kth(x, k, axis, keepdims):
    i = np.take(_argsort(x, axis), [k - 1], axis=axis)
    v = np.take_along_axis(x, i, axis)
    return (v, i) if keepdims else (v.squeeze(axis), i.squeeze(axis))


def _median_rows(x, axis, ignore_nan):
    """Lower median and its index per row, by a loop over rows (NaN: the first NaN, or ignored)."""
    xm = np.moveaxis(x, axis, -1)
    vals, idx = np.empty(xm.shape[:-1]), np.empty(xm.shape[:-1], np.int64)
    for r in np.ndindex(*xm.shape[:-1]):
        row = xm[r]
        keep = np.flatnonzero(~np.isnan(row))
        if not ignore_nan and len(keep) < len(row):
            j = int(np.flatnonzero(np.isnan(row))[0])
        elif len(keep) == 0:  # all NaN: PyTorch's middle position among them
            j = (len(row) - 1) // 2
        else:
            order = keep[np.argsort(row[keep], kind="stable")]
            j = int(order[(len(keep) - 1) // 2])
        vals[r], idx[r] = row[j], j
    return vals, idx


def _mode(x, axis):
    xm = np.moveaxis(x, axis, -1)
    vals, idx = np.empty(xm.shape[:-1]), np.empty(xm.shape[:-1], np.int64)
    for r in np.ndindex(*xm.shape[:-1]):
        row = list(xm[r])
        best = min(set(row), key=lambda v: (-row.count(v), v))
        vals[r], idx[r] = best, len(row) - 1 - row[::-1].index(best)
    return vals, idx


def _unique_consecutive(x):
    starts = np.r_[True, x[1:] != x[:-1]] if x.size else np.zeros(0, bool)
    first = np.flatnonzero(starts)
    return x[starts], np.cumsum(starts) - 1, np.diff(np.r_[first, x.size])


def _gen():
    return eagerc.Generator().manual_seed(11)


def _draw_ref(p, n, replacement):
    """Sampling as docs/random.md states it, written independently: a loop per row and sample
    over uniform words from the runtime's Philox stream (itself checked in tests/test_random.py)."""
    from eagerc.runtime import random as R
    p2 = np.atleast_2d(p).astype(np.float64)
    u = R.uniform(11, 0, (p2.shape[0], n), np.float64)
    out = np.empty((p2.shape[0], n), np.int64)
    for r, row in enumerate(p2):
        w, drawn = row.copy(), []
        for j in range(n):
            cdf = np.cumsum(w)
            t = u[r, j] * cdf[-1]
            if cdf[-1] == 0:  # no weight left: the first category not drawn yet
                i = next(i for i in range(len(w)) if i not in drawn)
            else:
                i = next(i for i in range(len(w)) if cdf[i] > t) if t < cdf[-1] else int(np.flatnonzero(w)[-1])
            out[r, j] = i
            if not replacement:
                w[i] = 0.0
                drawn.append(i)
    return out.reshape(p.shape[:-1] + (n,))


SHAPES = [((3, 4),), ((2, 3, 4),), ((5,),), ((),)]

CASES = [
    # ------------------------------------------------ sort, argsort, msort
    Case("sort", lambda x: eagerc.sort(x), _sort, SHAPES + [((0, 3),)], make=(distinct,), grad_variants=4),
    Case("sort_dim0_descending", lambda x: x.sort(0, descending=True), lambda x: _sort(x, 0, True),
         [((3, 4),), ((5,),)], make=(distinct,)),
    Case("sort_stable_ties", lambda x: eagerc.sort(x, stable=True, dim=1), lambda x: _sort(x, 1),
         [((4, 7),)], make=(ties,), grad=False),
    Case("sort_descending_stable_ties", lambda x: x.sort(descending=True, stable=True),
         lambda x: _sort(x, -1, True), [((4, 7),)], make=(ties,), grad=False),
    Case("sort_nan_last", lambda x: x.sort(), lambda x: _sort(x), [((3, 5),)], make=(with_nan,), grad=False),
    Case("sort_int", lambda x: x.sort(0), lambda x: _sort(x, 0), [((5, 3),)], make=(integers(),), grad=False),
    Case("argsort", lambda x: eagerc.argsort(x, 1, descending=True), lambda x: _argsort(x, 1, True),
         [((3, 4),), ((2, 3, 4),)], make=(distinct,), grad=False),
    Case("argsort_method", lambda x: x.argsort(), _argsort, [((6,),), ((),)], make=(distinct,), grad=False),
    Case("msort", lambda x: eagerc.msort(x), lambda x: np.sort(x, 0), [((4, 3),)], make=(distinct,)),
    # ------------------------------------------------ topk, kthvalue
    Case("topk", lambda x: eagerc.topk(x, 2), lambda x: tuple(a[..., :2] for a in _sort(x, -1, True)),
         [((3, 4),), ((2, 3, 5),)], make=(distinct,)),
    Case("topk_smallest_dim0", lambda x: x.topk(3, dim=0, largest=False),
         lambda x: tuple(a[:3] for a in _sort(x, 0)), [((4, 3),)], make=(distinct,)),
    Case("topk_ties_first", lambda x: x.topk(2), lambda x: tuple(a[..., :2] for a in _sort(x, -1, True)),
         [((4, 6),)], make=(ties,), grad=False),
    Case("topk_0d", lambda x: x.topk(1), lambda x: (x.copy(), np.int64(0)), [((),)]),
    Case("topk_long_rows", lambda x: x.topk(7, largest=False), lambda x: tuple(a[..., :7] for a in _sort(x)),
         [((3, 100),), ((130,),)], make=(distinct,), grad_variants=1),
    Case("topk_long_rows_ties", lambda x: x.topk(9, dim=0), lambda x: tuple(a[:9] for a in _sort(x, 0, True)),
         [((80, 3),)], make=(ties,), grad=False),
    Case("topk_long_rows_nan", lambda x: x.topk(5), lambda x: tuple(a[..., :5] for a in _sort(x, -1, True)),
         [((2, 70),)], make=(with_nan,), grad=False),
    Case("kthvalue", lambda x: eagerc.kthvalue(x, 2, 1), lambda x: _kth(x, 2, 1, False), [((3, 4),), ((2, 5, 3),)],
         make=(distinct,)),
    Case("kthvalue_keepdim", lambda x: x.kthvalue(3, 0, keepdim=True), lambda x: _kth(x, 3, 0, True),
         [((4, 3),)], make=(distinct,)),
    Case("kthvalue_ties", lambda x: x.kthvalue(3), lambda x: _kth(x, 3, -1, False), [((4, 6),)], make=(ties,),
         grad=False),
    # ------------------------------------------------ median, nanmedian, mode
    Case("median", lambda x: eagerc.median(x), lambda x: np.sort(x.reshape(-1))[(x.size - 1) // 2],
         [((3, 4),), ((5,),), ((),)], make=(distinct,), grad_variants=3),
    Case("median_empty", lambda x: x.median(), lambda x: np.float64(np.nan), [((0,),)], grad=False),
    Case("median_nan", lambda x: x.median(), lambda x: np.float64(np.nan), [((3, 4),)], make=(with_nan,),
         grad=False),
    Case("median_dim", lambda x: eagerc.median(x, 1), lambda x: _median_rows(x, 1, False),
         [((3, 4),), ((2, 5, 3),)], make=(distinct,)),
    Case("median_dim_keepdim", lambda x: x.median(0, keepdim=True),
         lambda x: tuple(np.expand_dims(a, 0) for a in _median_rows(x, 0, False)), [((4, 3),)], make=(distinct,)),
    Case("median_dim_ties_nan", lambda x: x.median(-1), lambda x: _median_rows(x, -1, False),
         [((4, 6),)], make=(lambda rng, s: np.where(rng.random(s) < 0.2, np.nan, ties(rng, s)),), grad=False),
    Case("nanmedian", lambda x: eagerc.nanmedian(x), lambda x: _median_rows(x.reshape(1, -1), 1, True)[0][0],
         [((3, 4),)], make=(with_nan,)),
    Case("nanmedian_dim", lambda x: x.nanmedian(1), lambda x: _median_rows(x, 1, True), [((4, 5),)],
         make=(with_nan,), grad=False),
    Case("nanmedian_all_nan_row", lambda x: x.nanmedian(1), lambda x: _median_rows(x, 1, True), [((2, 3),)],
         make=(lambda rng, s: np.array([[np.nan] * 3, [2.0, np.nan, 1.0]]),), grad=False),
    Case("mode", lambda x: eagerc.mode(x), lambda x: _mode(x, -1), [((4, 7),), ((2, 3, 9),)], make=(ties,),
         grad=False),
    Case("mode_dim0_keepdim", lambda x: x.mode(0, keepdim=True),
         lambda x: tuple(np.expand_dims(a, 0) for a in _mode(x, 0)), [((7, 3),)], make=(ties,), grad=False),
    Case("mode_distinct", lambda x: x.mode(1), lambda x: _mode(x, 1), [((3, 4),)], make=(distinct,)),
    Case("mode_0d", lambda x: x.mode(), lambda x: (x.copy(), np.int64(0)), [((),)]),
    # ------------------------------------------------ quantile, nanquantile
    *[Case(f"quantile_{m}", (lambda m: lambda x: eagerc.quantile(x, 0.3, dim=1, interpolation=m))(m),
           (lambda m: lambda x: np.quantile(x, 0.3, axis=1, method=m))(m), [((3, 5),), ((2, 4, 3),)],
           make=(distinct,))
      for m in ("linear", "lower", "higher", "midpoint", "nearest")],
    Case("quantile_all_q_tensor", lambda x: x.quantile(eagerc.tensor([0.0, 0.25, 0.5, 1.0], dtype=x.dtype)),
         lambda x: np.quantile(x, [0.0, 0.25, 0.5, 1.0]), [((3, 4),)], make=(distinct,)),
    Case("quantile_keepdim", lambda x: x.quantile(eagerc.tensor([0.2, 0.7], dtype=x.dtype), dim=0, keepdim=True),
         lambda x: np.quantile(x, [0.2, 0.7], axis=0, keepdims=True), [((4, 3),)], make=(distinct,)),
    Case("quantile_all_keepdim", lambda x: x.quantile(0.4, keepdim=True),
         lambda x: np.quantile(x, 0.4, keepdims=True), [((3, 4),)], make=(distinct,)),
    Case("quantile_nan_row", lambda x: x.quantile(0.5, dim=1), lambda x: np.quantile(x, 0.5, axis=1),
         [((3, 5),)], make=(with_nan,), grad=False),
    Case("nanquantile", lambda x: eagerc.nanquantile(x, 0.6, dim=1), lambda x: np.nanquantile(x, 0.6, axis=1),
         [((3, 5),)], make=(with_nan,), grad=False),
    Case("nanquantile_higher", lambda x: x.nanquantile(0.35, interpolation="higher"),
         lambda x: np.nanquantile(x, 0.35, method="higher"), [((4, 5),)], make=(with_nan,), grad=False),
    # ------------------------------------------------ unique, unique_consecutive
    Case("unique", lambda x: eagerc.unique(x), np.unique, [((3, 4),), ((0,),)], make=(integers(0, 4),), grad=False),
    Case("unique_inverse_counts", lambda x: x.unique(sorted=True, return_inverse=True, return_counts=True),
         lambda x: np.unique(x, return_inverse=True, return_counts=True), [((3, 5),), ((7,),)],
         make=(integers(-2, 3),), grad=False),
    Case("unique_float_counts", lambda x: eagerc.unique(x, return_counts=True),
         lambda x: np.unique(x, return_counts=True), [((9,),)], make=(ties,), grad=False),
    Case("unique_dim", lambda x: eagerc.unique(x, dim=0, return_inverse=True, return_counts=True),
         lambda x: np.unique(x, axis=0, return_inverse=True, return_counts=True), [((6, 2),)],
         make=(integers(0, 2),), grad=False),
    Case("unique_dim1", lambda x: x.unique(dim=1), lambda x: np.unique(x, axis=1), [((2, 7),)],
         make=(integers(0, 2),), grad=False),
    Case("unique_consecutive", lambda x: eagerc.unique_consecutive(x, return_inverse=True, return_counts=True),
         _unique_consecutive, [((9,),)], make=(integers(0, 2),), grad=False),
    # ------------------------------------------------ searchsorted, bucketize
    Case("searchsorted", lambda s, v: eagerc.searchsorted(s, v), lambda s, v: np.searchsorted(s, v),
         [((6,), (3, 4)), ((5,), ())], make=(increasing,), grad=False),
    Case("searchsorted_right_int32", lambda s, v: eagerc.searchsorted(s, v, right=True, out_int32=True),
         lambda s, v: np.searchsorted(s, v, side="right").astype(np.int32), [((6,), (4,))],
         make=(lambda rng, s: np.arange(s[0], dtype=np.float64), lambda rng, s: rng.integers(-1, 7, s) * 1.0),
         grad=False, out_dtype="int32"),
    Case("searchsorted_side_sorter", lambda s, v: eagerc.searchsorted(s, v, side="right", sorter=s.argsort()),
         lambda s, v: np.searchsorted(s, v, side="right", sorter=np.argsort(s)), [((7,), (5,))],
         make=(distinct,), grad=False),
    Case("searchsorted_rows", lambda s, v: eagerc.searchsorted(s, v),
         lambda s, v: np.stack([np.searchsorted(a, b) for a, b in zip(s, v)]), [((3, 5), (3, 2))],
         make=(increasing,), grad=False),
    Case("bucketize", lambda x, b: eagerc.bucketize(x, b), lambda x, b: np.searchsorted(b, x),
         [((3, 4), (5,))], make=(None, increasing), grad=False),
    Case("bucketize_right", lambda x, b: eagerc.bucketize(x, b, right=True),
         lambda x, b: np.searchsorted(b, x, side="right"), [((7,), (4,))],
         make=(integers(0, 5), lambda rng, s: np.arange(s[0]).astype(np.int64)), grad=False),
    # ------------------------------------------------ bincount, histc
    Case("bincount", lambda x: eagerc.bincount(x), np.bincount, [((9,),), ((0,),)], make=(integers(0, 5),),
         grad=False),
    Case("bincount_minlength", lambda x: x.bincount(minlength=8), lambda x: np.bincount(x, minlength=8), [((6,),)],
         make=(integers(0, 5),), grad=False),
    Case("bincount_weights", lambda x, w: eagerc.bincount(x, w), lambda x, w: np.bincount(x, w),
         [((9,), (9,))], make=(integers(0, 5),),
         out16="float64"),   # PyTorch counts weights other than float32 in double
    Case("histc", lambda x: eagerc.histc(x, bins=6, min=-1, max=1),
         lambda x: np.histogram(x, 6, range=(-1, 1))[0].astype(x.dtype), [((40,),), ((3, 5),)], grad=False),
    Case("histc_data_range", lambda x: x.histc(bins=5), lambda x: np.histogram(x, 5)[0].astype(x.dtype),
         [((30,),)], grad=False),
    # ------------------------------------------------ multinomial: the draw against the sampling formula
    Case("multinomial_replacement", lambda p: eagerc.multinomial(p, 6, True, generator=_gen()),
         lambda p: _draw_ref(p, 6, True), [((5,),), ((3, 4),)], make=(sparse_probs,), grad=False),
    Case("multinomial_no_replacement", lambda p: p.multinomial(3, generator=_gen()),
         lambda p: _draw_ref(p, 3, False), [((6,),), ((4, 5),)], make=(sparse_probs,), grad=False),
    Case("multinomial_all", lambda p: eagerc.multinomial(p, 4, generator=_gen()),
         lambda p: _draw_ref(p, 4, False), [((2, 4),)], make=(positive,), grad=False),
]
