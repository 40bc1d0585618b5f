"""Sorting, selection, counting and sampling: sort, argsort, msort, topk, kthvalue, median,
nanmedian, mode, quantile, nanquantile, unique, unique_consecutive, searchsorted, bucketize,
bincount, histc, multinomial -- PyTorch's names, arguments, named tuples and errors.

Each is a composition: a primitive finds *indices* (argsort, argmode, searchsorted, histc,
multinomial in runtime/ops/sorting.py) and `gather` takes the values. So every value these
functions return differentiates like PyTorch's (the gradient scattered to the selected
indices; quantile's interpolation through `lerp`) with no derivative of its own, and the
compiler records plain gathers.

Output sizes that depend on the data -- unique's, unique_consecutive's, bincount's -- are
read with `data_size` (indexing.py), so under eagerc.compile they are a graph break that
names the user's line, never a size baked into the graph.
"""
import collections
import math

from ..runtime.dtypes import FLOATING_KINDS
from ..dispatch import apply
from ..runtime import dtypes
from ..runtime.ops import OPS
from ..runtime.ops.meta import normalize_dim
from ..runtime.ops.sorting import check_histc, check_multinomial
from .._tensor import Tensor
from . import creation
from .elementwise import isnan, lerp, where
from .indexing import data_size, gather, index_add, scatter
from .joining import cat
from ..amp.autocast_mode import autocast_op

__all__ = ["sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "quantile",
           "nanquantile", "unique", "unique_consecutive", "searchsorted", "bucketize", "bincount", "histc",
           "multinomial"]


def _named(name):
    return collections.namedtuple(name, ["values", "indices"])


return_types_sort, return_types_topk, return_types_kthvalue = _named("sort"), _named("topk"), _named("kthvalue")
return_types_median, return_types_nanmedian, return_types_mode = _named("median"), _named("nanmedian"), _named("mode")

_ARGSORT, _ARGTOPK, _ARGMODE, _SEARCHSORTED = OPS["argsort"], OPS["argtopk"], OPS["argmode"], OPS["searchsorted"]


# ---------------------------------------------------------------- sort, topk, kthvalue

def argsort(input, dim=-1, descending=False, stable=False):
    """Always stable (numpy's stable sort costs little more): ties keep their order, as with
    stable=True, which is one of the orders PyTorch may return without it."""
    return apply(_ARGSORT, (input,), {"dim": int(dim), "descending": bool(descending), "stable": True})


def sort(input, dim=-1, descending=False, *, stable=False):
    idx = argsort(input, dim, descending)
    return return_types_sort(gather(input, _dim0(input, dim), idx), idx)


def msort(input):
    return sort(input, 0).values


def _dim0(x, dim):
    """dim checked against x; 0 for a 0-d tensor (which gathers along its single element)."""
    return normalize_dim("sort", dim, x._array.ndim) if x._array.ndim else 0


def _size(x, d):
    return x._array.shape[d] if x._array.ndim else 1


def topk(input, k, dim=-1, largest=True, sorted=True):
    """The k largest (smallest) along dim, always sorted; ties in index order."""
    d = _dim0(input, dim)
    if not 0 <= k <= _size(input, d):
        raise RuntimeError("selected index k out of range")
    if not input._array.ndim:
        k = 1   # PyTorch gives a 0-d tensor's element for k = 0 too
    idx = apply(_ARGTOPK, (input,), {"k": int(k), "dim": d, "largest": bool(largest)})
    return return_types_topk(gather(input, d, idx), idx)


def _select(x, d, keepdim, pos, rtype):
    """(values, indices) of the sorted position `pos` (an int, or an int64 tensor of the
    keepdim shape) along dim d of x."""
    idx = argsort(x, d)
    if x._array.ndim == 0:
        return rtype(gather(x, 0, idx), idx)
    if isinstance(pos, int):
        pos = creation.full(_kept(x, d), pos, dtype=dtypes.int64, device=x.device)
    idx = gather(idx, d, pos)
    values = gather(x, d, idx)
    if not keepdim:
        values, idx = values.squeeze(d), idx.squeeze(d)
    return rtype(values, idx)


def _kept(x, d):
    shape = list(x._array.shape)
    shape[d] = 1
    return tuple(shape)


def _nonempty(name, x, d):
    if x._array.ndim and x._array.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def kthvalue(input, k, dim=-1, keepdim=False):
    d = _dim0(input, dim)
    if not 1 <= k <= _size(input, d):
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    return _select(input, d, keepdim, k - 1, return_types_kthvalue)


# ---------------------------------------------------------------- median, mode

def _median_pos(x, d, ignore_nan):
    """The sorted position of each row's (lower) median along d. NaN sorts last: median gives
    the row's first NaN where it has any; nanmedian the median of the others."""
    n = _size(x, d)
    if x._array.dtype.kind not in FLOATING_KINDS:
        return (n - 1) // 2
    nans = isnan(x).sum(d, keepdim=True)
    if ignore_nan:
        k = n - nans
        return where(k > 0, (k - 1) // 2, (n - 1) // 2)
    return where(nans > 0, n - nans, (n - 1) // 2)


def _median(name, rtype, ignore_nan, input, dim, keepdim):
    if dim is None:
        flat = input.reshape(-1)
        if flat._array.shape[0] == 0:
            return creation.full((), math.nan, dtype=input.dtype, device=input.device)
        return _select(flat, 0, False, _median_pos(flat, 0, ignore_nan), rtype).values.reshape(())
    d = _dim0(input, dim)
    _nonempty(name, input, d)
    return _select(input, d, keepdim, _median_pos(input, d, ignore_nan) if input._array.ndim else 0, rtype)


def median(input, dim=None, keepdim=False):
    """median(x): the lower of the two middle values (NaN if any); median(x, dim): (values, indices)."""
    return _median("median", return_types_median, False, input, dim, keepdim)


def nanmedian(input, dim=None, keepdim=False):
    return _median("nanmedian", return_types_nanmedian, True, input, dim, keepdim)


def mode(input, dim=-1, keepdim=False):
    """The most frequent value along dim (the smallest of equally frequent ones) and the index
    of its last occurrence."""
    d = _dim0(input, dim)
    _nonempty("mode", input, d)
    idx = apply(_ARGMODE, (input,), {"dim": d, "keepdim": True})
    values = gather(input, d, idx)
    if not keepdim and input._array.ndim:
        values, idx = values.squeeze(d), idx.squeeze(d)
    return return_types_mode(values, idx)


# ---------------------------------------------------------------- quantile

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_q(name, input, q):
    """PyTorch's checks of quantile's arguments; q as a 1-d tensor, and whether it was a scalar."""
    if input.dtype not in (dtypes.float32, dtypes.float64):
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    if input.numel() == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    if not isinstance(q, Tensor):
        if not 0 <= q <= 1:
            raise RuntimeError(f"{name}() q must be in the range [0, 1] but got {q}")
        return creation.tensor([q], dtype=input.dtype, device=input.device), True
    if q._array.ndim > 1:
        raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
    if q.dtype != input.dtype:
        raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor")
    if q.numel() and not bool(((q >= 0) & (q <= 1)).all()):   # reads values: a graph break when traced
        raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
    return q.reshape(-1), q._array.ndim == 0


def _quantile(name, input, q, dim, keepdim, interpolation, ignore_nan):
    """PyTorch's algorithm: sort each row (NaN last), rank = q * (n - 1) -- over the non-NaN
    values for nanquantile, the last (NaN) position for quantile when a row has NaN -- then
    gather below and above the rank and interpolate."""
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{name}() interpolation must be one of linear, lower, higher, midpoint or nearest. "
                           f"Got {interpolation}")
    qt, scalar_q = _quantile_q(name, input, q)
    ndim = input._array.ndim
    if dim is None:
        x, d, kept = input.reshape(-1), 0, (1,) * ndim
    else:
        d = normalize_dim(name, dim, max(ndim, 1))
        x, kept = input.reshape(-1) if ndim == 0 else input, _kept(input, d) if ndim else ()
    s = sort(x.movedim(d, -1), -1).values                       # (..., n), NaN last
    n = s._array.shape[-1]
    qcol = qt.reshape((-1,) + (1,) * s._array.ndim)             # (Q, 1, ..., 1)
    nans = isnan(s).sum(-1, keepdim=True)
    if ignore_nan:
        ranks = (qcol * (n - nans - 1)).clamp(min=0)
    else:
        ranks = where(nans > 0, float(n - 1), qcol * (n - 1))
    if interpolation in ("lower", "higher", "nearest"):
        ranks = {"lower": ranks.floor, "higher": ranks.ceil, "nearest": ranks.round}[interpolation]()
    rows = s.unsqueeze(0).expand((qt._array.shape[0],) + tuple(s._array.shape))
    below = ranks.long()
    out = gather(rows, -1, below)                               # (Q, ..., 1)
    if interpolation in ("linear", "midpoint"):
        weight = ranks - below if interpolation == "linear" else creation.full_like(ranks, 0.5)
        out = lerp(out, gather(rows, -1, ranks.ceil().long()), weight)
    out = out.reshape((-1,) + kept) if keepdim else out.squeeze(-1)
    return out.squeeze(0) if scalar_q else out


@autocast_op("quantile")
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The q-th quantiles along dim (of all elements for None), NaN where a row has NaN;
    differentiable (gather and lerp)."""
    return _quantile("quantile", input, q, dim, keepdim, interpolation, False)


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, True)


# ---------------------------------------------------------------- unique

def _runs(s, n):
    """Where runs of equal rows start in s (rows along dim 0): a bool (n,) tensor."""
    if n == 0:
        return creation.zeros(0, dtype=dtypes.bool, device=s.device)
    differs = s[1:] != s[:-1]
    if s._array.ndim > 1:
        differs = differs.reshape(n - 1, -1).any(1)
    return cat([creation.ones(1, dtype=dtypes.bool, device=s.device), differs])


def _lexsort(rows):
    """The stable order that sorts the rows of a 2-d tensor lexicographically (one stable
    argsort per column, last column first)."""
    order = creation.arange(rows._array.shape[0], device=rows.device)
    for c in reversed(range(rows._array.shape[1])):
        order = order[argsort(rows[order, c])]
    return order


def _unique(input, sort_first, return_inverse, return_counts, dim):
    if dim is None:
        rows = input.reshape(-1)
    else:
        d = normalize_dim("unique", dim, input._array.ndim)
        rows = input.movedim(d, 0)
    n = rows._array.shape[0]
    order = None
    if sort_first:
        order = argsort(rows) if rows._array.ndim == 1 else _lexsort(rows.reshape(n, -1))
        rows = rows[order]
    starts = _runs(rows, n)
    values = rows[starts]                          # a data-dependent size: a graph break when traced
    if dim is not None:
        values = values.movedim(0, d)
    out = [values]
    if return_inverse:
        run = starts.long().cumsum(0) - 1
        if order is not None:
            run = scatter(creation.zeros(n, dtype=dtypes.int64, device=input.device), 0, order, run)
        out.append(run.reshape(input.shape) if dim is None else run)
    if return_counts:
        first = starts.nonzero().reshape(-1)
        end = cat([first[1:], creation.tensor([n], device=input.device)])
        out.append(end - first)
    return out[0] if len(out) == 1 else tuple(out)


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values (or slices along dim), sorted -- as PyTorch on CPU also does for
    sorted=False -- with the inverse indices and counts on request."""
    return _unique(input, True, return_inverse, return_counts, dim)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    return _unique(input, False, return_inverse, return_counts, dim)


# ---------------------------------------------------------------- searching, counting

def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of "
                               "left while right was True")
        right = side == "right"
    if not isinstance(input, Tensor) and sorted_sequence._array.ndim != 1:
        raise RuntimeError("torch.searchsorted(): input value can be a scalar only when boundaries tensor "
                           f"dimension is 1, but we got boundaries tensor dim({sorted_sequence._array.ndim}) "
                           "and input value's dim(0) numel(1)")
    if sorter is not None:
        sorted_sequence = gather(sorted_sequence, -1, sorter)
    if not isinstance(input, Tensor):
        input = creation.tensor(input, dtype=sorted_sequence.dtype, device=sorted_sequence.device)
    return apply(_SEARCHSORTED, (sorted_sequence.detach(), input.detach()),
                 {"right": bool(right), "out_int32": bool(out_int32)})


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each value: boundaries[i-1] < x <= boundaries[i] (right=False), or
    boundaries[i-1] <= x < boundaries[i] (right=True)."""
    if boundaries._array.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries._array.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def bincount(input, weights=None, minlength=0):
    """Counts (or summed weights) of each non-negative integer value; the length is
    max(minlength, input.max() + 1), a size read from the data."""
    if input._array.ndim != 1 or input.dtype.is_floating_point or input.dtype == dtypes.bool:
        if input._array.ndim == 1:
            raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{input.dtype.name}'")
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and tuple(weights.shape) != tuple(input.shape):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    n = input._array.shape[0]
    length = minlength if n == 0 else max(minlength, data_size(input.max()) + 1)
    if n and int(input.min()) < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is None:
        dtype, weights = dtypes.int64, creation.ones(n, dtype=dtypes.int64, device=input.device)
    else:
        dtype = dtypes.float32 if weights.dtype == dtypes.float32 else dtypes.float64
        weights = weights.to(dtype)
    return index_add(creation.zeros(length, dtype=dtype, device=input.device), 0, input, weights)


def histc(input, bins=100, min=0, max=0):
    """Counts in `bins` equal bins over [min, max] (the data's range when min == max),
    values outside ignored; in input's dtype."""
    check_histc(input, bins, min, max)
    return apply(OPS["histc"], (input,), {"bins": bins, "min": float(min), "max": float(max)})


# ---------------------------------------------------------------- sampling

def multinomial(input, num_samples, replacement=False, *, generator=None):
    """num_samples category indices per row of `input` (weights, not necessarily normalised),
    drawn from the counter-based stream: one uniform word per sample (docs/random.md)."""
    check_multinomial(input, num_samples, replacement)
    words = num_samples * (input._array.shape[0] if input._array.ndim == 2 else 1)
    gen, offset = creation.reserve_words(generator, words)
    return apply(OPS["multinomial"], (input.detach(),), {"num_samples": num_samples, "replacement": bool(replacement),
                                                         "seed": gen.initial_seed(), "offset": offset})


for _n in ("sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "quantile", "nanquantile",
           "unique", "unique_consecutive", "bincount", "histc", "multinomial"):
    setattr(Tensor, _n, globals()[_n])
del _n
