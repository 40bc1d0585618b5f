"""Ordering and sampling primitives: argsort, argtopk, argmode, searchsorted, histc, multinomial.

Only what cannot be composed cheaply is a primitive here, and every primitive returns
indices or counts (no derivative): sort, topk, kthvalue, median and quantile take their
values with `gather` in the frontend (eagerc/ops/sorting.py), so their gradients are
gather's -- scattered to the selected indices -- without a formula of their own.

multinomial draws from the counter-based stream (docs/random.md, "Sampling"): one
uniform float64 word per sample, with or without replacement, so a draw of N samples
consumes exactly N words whatever the number of categories -- the same count eager mode,
a compiled graph and a dynamic-shape program reserve.
"""
import numpy as np

from ...runtime.dtypes import FLOATING_KINDS
from ...runtime import dtypes, random
from . import declare
from .meta import Spec, fail, fmt_shape, normalize_dim, reduced_shape


def _last(x, dim):
    """x with `dim` moved last (a 0-d array as a 1-element row), and the axis it came from."""
    if x.ndim == 0:
        return x.reshape(1), None
    axis = normalize_dim("sort", dim, x.ndim)
    return (x if axis == x.ndim - 1 else x.swapaxes(axis, -1)), axis


def _back(r, x, axis):
    return r.reshape(x.shape) if axis is None else (r if axis == x.ndim - 1 else r.swapaxes(axis, -1))


def _stable(xp, y):
    """Stable argsort along the last axis (cupy's argsort is always stable, and older versions
    reject a `kind` argument)."""
    return np.argsort(y, axis=-1, kind="stable") if xp is np else xp.argsort(y, axis=-1)


def _sorted_last(xp, y, descending):
    """Stable argsort along the last axis; descending sorts the reversed rows ascending and
    reads them backwards, so ties still keep their order (and NaN, last ascending, comes first)."""
    if not descending:
        return _stable(xp, y)
    return (y.shape[-1] - 1) - _stable(xp, y[..., ::-1])[..., ::-1]


def _argsort(xp):
    def argsort(x, dim, descending, stable):
        y, axis = _last(x, dim)
        r = _back(_sorted_last(xp, y, descending), x, axis).astype(np.int64, copy=False)
        return r if r.flags.c_contiguous else r.copy()
    return argsort


def _argtopk(xp):
    """The first k indices of the stable sort (descending for largest), without sorting
    whole rows: a partition finds each row's k-th value, the k winners (ties at the k-th
    value taken in index order) are sorted alone. Rows with NaN take the full sort."""
    def argtopk(x, k, dim, largest):
        y, axis = _last(x, dim)
        n = y.shape[-1]
        if k == n or k == 0 or n < 64 or (y.dtype.kind in FLOATING_KINDS and bool(xp.isnan(y).any())):
            r = _sorted_last(xp, y, largest)[..., :k]
        else:
            kth = xp.partition(y, n - k if largest else k - 1, axis=-1)[..., n - k if largest else k - 1, None]
            beats = y > kth if largest else y < kth
            tie = y == kth
            need = k - beats.sum(axis=-1, keepdims=True)
            win = beats | (tie & (xp.cumsum(tie, axis=-1) <= need))   # exactly k per row
            idx = xp.nonzero(win.reshape(-1, n))[1].reshape(y.shape[:-1] + (k,))
            order = _sorted_last(xp, xp.take_along_axis(y, idx, axis=-1), largest)
            r = xp.take_along_axis(idx, order, axis=-1)
        r = _back(r, x, axis).astype(np.int64, copy=False)
        return r if r.flags.c_contiguous else r.copy()
    return argtopk


def _argmode(xp):
    """The index of each row's most frequent value (the smallest of equally frequent ones),
    its last occurrence -- PyTorch's choice on CPU."""
    def argmode(x, dim, keepdim):
        y, axis = _last(x, dim)
        n = y.shape[-1]
        rows = y.reshape(-1, n)
        order = _stable(xp, rows)
        s = xp.take_along_axis(rows, order, axis=-1)
        start = xp.ones(s.shape, dtype=bool)
        start[:, 1:] = s[:, 1:] != s[:, :-1]
        pos = xp.flatnonzero(start)                        # run starts, row-major
        length = xp.diff(xp.concatenate([pos, xp.asarray([s.size])]))
        row = pos // n
        best = xp.lexsort(xp.stack([pos, -length, row]))   # per row: longest run, then smallest value
        first = xp.ones(best.shape, dtype=bool)
        first[1:] = row[best][1:] != row[best][:-1]
        pick = best[first]
        idx = order.reshape(-1)[pos[pick] + length[pick] - 1]  # stable sort: the run's last is the latest
        out = idx.reshape(y.shape[:-1])
        if axis is None:
            return out.reshape(())
        return xp.expand_dims(out, axis) if keepdim else out
    return argmode


def _searchsorted(xp):
    def searchsorted(seq, values, right, out_int32):
        side = "right" if right else "left"
        if seq.ndim <= 1:
            r = xp.searchsorted(seq, values, side=side)
        else:  # one search per row of the leading dimensions
            s2, v2 = seq.reshape(-1, seq.shape[-1]), values.reshape(-1, values.shape[-1])
            r = xp.stack([xp.searchsorted(a, b, side=side) for a, b in zip(s2, v2)]).reshape(values.shape)
        return xp.asarray(r).astype(np.int32 if out_int32 else np.int64, copy=False)
    return searchsorted


def _histc(xp):
    def histc(x, bins, min, max):
        lo, hi = float(min), float(max)
        if lo == hi and x.size:  # PyTorch: the data's own range
            lo, hi = float(x.min()), float(x.max())
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise RuntimeError(f"torch.histogram(): range of [{lo}, {hi}] is not finite")
        flat = x.reshape(-1)
        flat = flat[(flat >= lo) & (flat <= hi)]            # NaN and out-of-range values are not counted
        pos = ((flat - lo) * bins / (hi - lo)).astype(np.int64)  # PyTorch's formula, in x's dtype
        pos = xp.minimum(pos, bins - 1)                     # the right edge belongs to the last bin
        return xp.bincount(pos, minlength=bins).astype(x.dtype)
    return histc


def _multinomial(xp):
    def multinomial(probs, num_samples, replacement, seed, offset):
        p = probs.astype(np.float64).reshape(-1, probs.shape[-1])
        if not bool(xp.isfinite(p).all()) or bool((p < 0).any()):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if bool((p.sum(axis=1) <= 0).any()):
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        u = random.uniform(seed, offset, (p.shape[0], num_samples), np.float64, xp=xp)
        if replacement:
            out = xp.stack([_inverse_cdf(xp, row, ur) for row, ur in zip(p, u)])
        else:
            out = _without_replacement(xp, p, u)
        return out.reshape(probs.shape[:-1] + (num_samples,))
    return multinomial


def _inverse_cdf(xp, p, u):
    """Category i for each uniform u: the first with cdf[i] > u * total; a category of zero
    probability is never chosen (its cdf equals its predecessor's)."""
    cdf = xp.cumsum(p)
    idx = xp.searchsorted(cdf, u * cdf[-1], side="right")
    return xp.minimum(idx, int(xp.flatnonzero(p)[-1]))   # u * total rounded up to total


def _without_replacement(xp, p, u):
    """Sample j of every row by inverse CDF over the categories not drawn yet (vectorised
    over rows); a row with no probability left takes its first category not drawn yet."""
    taken = xp.zeros(p.shape, dtype=bool)
    rows = xp.arange(p.shape[0])
    out = xp.empty(u.shape, dtype=np.int64)
    for j in range(u.shape[1]):
        w = xp.where(taken, 0.0, p)
        cdf = xp.cumsum(w, axis=1)
        total = cdf[:, -1]
        idx = (cdf <= (u[:, j] * total)[:, None]).sum(axis=1)            # first cdf > u * total
        last = w.shape[1] - 1 - xp.argmax(w[:, ::-1] > 0, axis=1)       # u * total rounded up to total
        idx = xp.where(total > 0, xp.minimum(idx, last), xp.argmin(taken, axis=1))
        out[:, j] = idx
        taken[rows, idx] = True
    return out


# ---------------------------------------------------------------- shape rules

def _dim_rule(name, x, dim):
    if len(x.shape) and x.shape[normalize_dim(name, dim, len(x.shape))] == 0:
        fail(name, (x,), f"cannot reduce over the zero-size dimension {dim}", IndexError)


def _argsort_rule(x, dim, descending, stable):
    normalize_dim("sort", dim, len(x.shape))
    return Spec(tuple(x.shape), dtypes.int64)


def _argtopk_rule(x, k, dim, largest):
    shape = list(x.shape)
    if shape:
        d = normalize_dim("topk", dim, len(shape))
        if not 0 <= k <= shape[d]:
            raise RuntimeError("selected index k out of range")
        shape[d] = k
    elif k != 1:
        raise RuntimeError("selected index k out of range")
    return Spec(tuple(shape), dtypes.int64)


def _argmode_rule(x, dim, keepdim):
    axes = (normalize_dim("mode", dim, len(x.shape)),) if x.shape else ()
    _dim_rule("mode", x, dim)
    return Spec(reduced_shape(tuple(x.shape), axes, keepdim), dtypes.int64)


def _searchsorted_rule(seq, values, right, out_int32):
    vshape = tuple(values.shape) if isinstance(values, Spec) else ()
    if len(seq.shape) > 1 and tuple(seq.shape[:-1]) != vshape[:-1]:
        fail("searchsorted", (seq, values), "boundaries tensor should be 1 dimension or the first N-1 dimensions "
             f"of boundaries tensor and input value tensor must match, but we got boundaries tensor "
             f"{fmt_shape(seq.shape)} and input value tensor {fmt_shape(vshape)}")
    return Spec(vshape, dtypes.int32 if out_int32 else dtypes.int64)


def check_histc(x, bins, min, max):
    """PyTorch's checks of histc's arguments (run by the frontend, and by the rule for loaded programs)."""
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f'"histogram_cpu" not implemented for \'{x.dtype.name}\'')
    if type(bins) is not int or bins <= 0:
        raise RuntimeError(f"torch.histc(): bins must be > 0, but got {bins} for dimension 0")
    if min > max:
        raise RuntimeError(f"torch.histc(): max must be larger than min, got min={min}, max={max}")


def _histc_rule(x, bins, min, max):
    check_histc(x, bins, min, max)
    return Spec((bins,), x.dtype)


def check_multinomial(probs, num_samples, replacement):
    """PyTorch's checks of multinomial's shapes and counts (the frontend runs them before
    drawing, so a bad call never moves the generator; the loader runs them through the rule)."""
    shape, dtype = tuple(probs.shape), probs.dtype
    if not dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {dtype.name}")
    if len(shape) not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if type(num_samples) is not int or num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if shape[-1] > 2**24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    if not replacement and num_samples > shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    return shape[:-1] + (num_samples,)


def _multinomial_rule(probs, num_samples, replacement, seed, offset):
    return Spec(check_multinomial(probs, num_samples, replacement), dtypes.int64)


_INDICES = dict(kind="indexing", differentiable=False)
# the permutation that sorts each row along dim (NaN last ascending, first descending); ties keep their
# order when stable -- and always here, so sort, kthvalue and median pick PyTorch's indices for ties
declare("argsort", ("x",), _argsort, _argsort_rule, attrs=("dim", "descending", "stable"), **_INDICES)
# the indices of argsort's first k (PyTorch's topk order for distinct values; ties in index order)
declare("argtopk", ("x",), _argtopk, _argtopk_rule, attrs=("k", "dim", "largest"), **_INDICES)
declare("argmode", ("x",), _argmode, _argmode_rule, attrs=("dim", "keepdim"), kind="index_reduction",
        differentiable=False)
declare("searchsorted", ("seq", "values"), _searchsorted, _searchsorted_rule, attrs=("right", "out_int32"),
        **_INDICES)
# counts of x's values in `bins` equal bins over [min, max] (the data's range when min == max)
declare("histc", ("x",), _histc, _histc_rule, attrs=("bins", "min", "max"), **_INDICES)
declare("multinomial", ("probs",), _multinomial, _multinomial_rule,
        attrs=("num_samples", "replacement", "seed", "offset"), effects=("random",), **_INDICES)
