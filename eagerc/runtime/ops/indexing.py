"""Indexing primitives: getitem (basic indexing, a view), index (advanced indexing),
index_put (writing through an index, optionally accumulating), index_select,
index_add, gather, scatter, scatter_add and nonzero.

The index language
------------------
`getitem`, `index` and `index_put` carry the subscript as one JSON-plain attribute,
`index`: a sequence of items applied left to right, like a Python subscript:

    ("int", i)                    select position i of a dimension (the dimension goes)
    ("slice", start, stop, step)  a Python slice; None for defaults; steps may be negative
    ("none",)                     insert a dimension of size 1
    ("ellipsis",)                 as many full slices as the other items leave over
    ("tensor", k)                 index tensor k (integer dtype): advanced indexing
    ("mask", k, count)            index tensor k is a bool mask over mask.ndim dimensions
                                  holding `count` True entries

Index tensors are tensor inputs of the op -- `index(x, *indices)`,
`index_put(x, values, *indices)` -- so a traced graph records them as graph
inputs. A mask carries its number of True entries, so that every output shape in
this module follows from input shapes and attributes alone: the frontend counts the
entries (a Python value, which a tracer sees), the kernel checks the result.
Items may be tuples or lists (a program loaded from JSON has lists).

Semantics are PyTorch's: ints, slices, None and Ellipsis are applied first (that part
is a view), then the tensor items index the result by numpy's advanced-indexing rules:
the index tensors broadcast together; the broadcast dimensions replace the indexed
ones in place when the tensor items are adjacent, and come first otherwise. This is
numpy's behaviour except when an int is mixed with tensors, which numpy counts as one
more advanced index: `x[0, :, [0, 1]]` has shape (d1, 2) in PyTorch and eagerc,
(2, d1) in numpy.

Integer tensors in `index`/`index_put` may be negative (counted from the end, as in
PyTorch); gather, scatter, index_select and index_add take indices in [0, size).
Out-of-range indices raise IndexError naming the op, the index, the dimension and
its size. numpy checks bounds while it indexes, so on the CPU the detailed check only
runs to explain a failure; other array modules (cupy wraps out-of-range indices
silently) check before indexing.
"""
import math

import numpy as np

from ...runtime import dtypes
from . import declare
from .meta import Spec, fmt_shape, normalize_dim

__all__ = ["IndexBoundsError", "plan", "basic_key", "put_into", "index_shape"]

_FULL = slice(None)
_INT_KINDS = "iu"


class IndexBoundsError(IndexError):
    """An index value outside its dimension (raised by the kernels' checks)."""


# ---------------------------------------------------------------- the index language

def _item_error(op, i, it, why):
    return TypeError(f"{op}: index item {i} {tuple(it)!r} {why}; items are ('int', i), "
                     "('slice', start, stop, step), ('none',), ('ellipsis',), ('tensor', k), "
                     "('mask', k, count)")


def _check_items(op, index, ntensors, basic_only):
    """Validate the structure of `index` (what a file loader must check)."""
    if not isinstance(index, (tuple, list)):
        raise TypeError(f"{op}: attribute index must be a sequence of items, got {type(index).__name__}")
    seen = set()
    for i, it in enumerate(index):
        if not isinstance(it, (tuple, list)) or not it or not isinstance(it[0], str):
            raise _item_error(op, i, it if isinstance(it, (tuple, list)) else (it,), "is not a tagged item")
        kind = it[0]
        if kind == "int":
            if len(it) != 2 or type(it[1]) is not int:
                raise _item_error(op, i, it, "needs one int")
        elif kind == "slice":
            if len(it) != 4 or any(v is not None and type(v) is not int for v in it[1:]):
                raise _item_error(op, i, it, "needs start, stop and step (ints or None)")
            if it[3] == 0:
                raise ValueError(f"{op}: slice step cannot be zero (index item {i})")
        elif kind in ("none", "ellipsis"):
            if len(it) != 1:
                raise _item_error(op, i, it, "takes no arguments")
        elif kind in ("tensor", "mask"):
            if basic_only:
                raise _item_error(op, i, it, f"is an index tensor, which {op} does not take "
                                  "(advanced indexing is the `index` op)")
            n = 2 if kind == "tensor" else 3
            if len(it) != n or type(it[1]) is not int or not 0 <= it[1] < ntensors:
                raise _item_error(op, i, it, f"must name one of the {ntensors} index tensors")
            if it[1] in seen:
                raise _item_error(op, i, it, "names an index tensor used by another item")
            seen.add(it[1])
            if kind == "mask" and (type(it[2]) is not int or it[2] < 0):
                raise _item_error(op, i, it, "needs the number of True entries (an int >= 0)")
        else:
            raise _item_error(op, i, it, f"has an unknown tag {kind!r}")
    if len(seen) != ntensors:
        raise TypeError(f"{op}: got {ntensors} index tensors but the index uses {len(seen)}")


def basic_key(index):
    """The Python subscript for an index of int/slice/none/ellipsis items.

    It always holds an Ellipsis, so indexing an array with it gives a view even when
    every dimension gets an int (numpy would return a scalar copy for x[0, 0])."""
    key = []
    ellipsis = False
    for it in index:
        kind = it[0]
        if kind == "int":
            key.append(it[1])
        elif kind == "slice":
            key.append(slice(it[1], it[2], it[3]))
        elif kind == "none":
            key.append(None)
        else:
            key.append(Ellipsis)
            ellipsis = True
    if not ellipsis:
        key.append(Ellipsis)
    return tuple(key)


def plan(op, shape, index, tensor_ndims):
    """Resolve `index` against an array of `shape`.

    Returns (key, adv): `key` the basic subscript (ints, slices, None, full slices
    where tensors go, and a final Ellipsis, so x[key] is a view), `adv` one entry per
    tensor item: (pos, k, kind, dim, width, count) -- its first dimension in x[key],
    its tensor number, "tensor" or "mask", the dimension of x it indexes, how many
    dimensions it spans, and (masks) its True count.
    """
    ndim = len(shape)
    used = 0
    ellipsis = False
    for it in index:
        kind = it[0]
        if kind == "mask":
            used += tensor_ndims[it[1]]
        elif kind == "ellipsis":
            if ellipsis:
                raise IndexError(f"{op}: an index can only have a single ellipsis ('...')")
            ellipsis = True
        elif kind != "none":
            used += 1
    if used > ndim:
        raise IndexError(f"{op}: too many indices for tensor of dimension {ndim} "
                         f"(the index uses {used} dimensions of shape {fmt_shape(shape)})")
    key = []
    adv = []
    dim = pos = 0
    for it in index:
        kind = it[0]
        if kind == "int":
            key.append(it[1])
            dim += 1
        elif kind == "slice":
            key.append(slice(it[1], it[2], it[3]))
            dim += 1
            pos += 1
        elif kind == "none":
            key.append(None)
            pos += 1
        elif kind == "ellipsis":
            n = ndim - used
            key.extend([_FULL] * n)
            dim += n
            pos += n
        else:
            k = it[1]
            if kind == "tensor":
                w, count = 1, None
            else:
                w, count = tensor_ndims[k], it[2]
            adv.append((pos, k, kind, dim, w, count))
            key.extend([_FULL] * w)
            dim += w
            pos += w
    key.append(Ellipsis)
    return tuple(key), adv


def _basic_shape(op, shape, key):
    """The shape of x[key] for a key made by `plan` (bounds-checked)."""
    out = []
    dim = 0
    for k in key:
        if k is Ellipsis:  # plan's keys end with the only Ellipsis
            out.extend(shape[dim:])
            break
        if k is None:
            out.append(1)
        elif type(k) is slice:
            out.append(len(range(*k.indices(shape[dim]))))
            dim += 1
        else:
            n = shape[dim]
            if not -n <= k < n:
                raise IndexError(f"{op}: index {k} is out of bounds for dimension {dim} with size {n}")
            dim += 1
    return tuple(out)


def _broadcast(op, shapes, what):
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        for i, n in enumerate(s, nd - len(s)):
            if n != 1:
                if out[i] != 1 and out[i] != n:
                    raise IndexError(f"{op}: shape mismatch: {what} could not be broadcast together with "
                                     f"shapes {', '.join(fmt_shape(t) for t in shapes)}")
                out[i] = n
    return tuple(out)


def _adv_shape(op, vshape, adv, tshapes, xshape):
    """The shape of x[key][residual] given vshape = x[key].shape."""
    bshapes = []
    for pos, k, kind, dim, w, count in adv:
        if kind == "mask":
            ms = tuple(tshapes[k])
            if tuple(vshape[pos:pos + w]) != ms:
                raise IndexError(f"{op}: the shape of the mask {fmt_shape(ms)} (index tensor {k}) does not "
                                 f"match the shape of the indexed tensor {fmt_shape(xshape)} at dimension {dim}")
            bshapes.append((count,))
        else:
            bshapes.append(tuple(tshapes[k]))
    b = _broadcast(op, bshapes, "indexing tensors")
    adjacent = all(adv[i + 1][0] == adv[i][0] + adv[i][4] for i in range(len(adv) - 1))
    first = adv[0][0]
    end = adv[-1][0] + adv[-1][4]
    if adjacent:
        return tuple(vshape[:first]) + b + tuple(vshape[end:])
    covered = set()
    for pos, _, _, _, w, _ in adv:
        covered.update(range(pos, pos + w))
    return b + tuple(n for i, n in enumerate(vshape) if i not in covered)


def index_shape(op, xshape, index, tshapes):
    """The shape of indexing an array of `xshape` with `index` and index tensors of `tshapes`."""
    key, adv = plan(op, tuple(xshape), index, [len(s) for s in tshapes])
    vshape = _basic_shape(op, tuple(xshape), key)
    return _adv_shape(op, vshape, adv, tshapes, tuple(xshape)) if adv else vshape


def _residual(adv, arrays):
    """The advanced part of the subscript, applied to x[key]."""
    res = []
    cursor = 0
    for pos, k, _, _, w, _ in adv:
        while cursor < pos:
            res.append(_FULL)
            cursor += 1
        res.append(arrays[k])
        cursor = pos + w
    return tuple(res)


def _check_dtypes(op, adv, arrays):
    for _, k, kind, _, _, _ in adv:
        dt = arrays[k].dtype
        if kind == "mask":
            if dt.kind != "b":
                raise IndexError(f"{op}: index tensor {k} is declared a mask but has dtype {dt}")
        elif dt.kind not in _INT_KINDS:
            raise IndexError(f"{op}: tensors used as indices must be long, int, byte or bool tensors, "
                             f"got index tensor {k} of dtype {dtypes.from_np(dt).name}")


def _check_range(op, idx, dim, size, negative_ok):
    """IndexBoundsError if an entry of `idx` is outside dimension `dim` of length `size`."""
    if idx.size == 0:
        return
    lo = int(idx.min())
    hi = int(idx.max())
    low = -size if negative_ok else 0
    if lo < low or hi >= size:
        bad = lo if lo < low else hi
        raise IndexBoundsError(f"{op}: index {bad} is out of bounds for dimension {dim} with size {size}")


def _check_tensor_ranges(op, xshape, adv, arrays):
    for _, k, kind, dim, _, _ in adv:
        if kind == "tensor":
            _check_range(op, arrays[k], dim, xshape[dim], True)


def _check_counts(xp, op, adv, arrays):
    """A mask's True count is part of the graph (it fixes the output shape): check it."""
    for _, k, kind, _, _, count in adv:
        if kind == "mask":
            got = int(xp.count_nonzero(arrays[k]))
            if got != count:
                raise RuntimeError(f"{op}: mask index tensor {k} has {got} True entries, but the index "
                                   f"declares {count}")


def _strip(values, ndim):
    """Drop leading size-1 dimensions of `values` beyond `ndim` (numpy and PyTorch allow them)."""
    vnd = getattr(values, "ndim", 0)
    if vnd > ndim:
        extra = vnd - ndim
        if all(n == 1 for n in values.shape[:extra]):
            return values.reshape(values.shape[extra:])
    return values


_ADD_AT = {}


def _add_at(xp):
    f = _ADD_AT.get(xp)
    if f is None:
        if xp is np:
            f = np.add.at
        else:
            f = getattr(xp.add, "at", None)
            if f is None:  # older cupy
                import cupyx
                f = cupyx.scatter_add
        _ADD_AT[xp] = f
    return f


def _expand_masks(xp, res):
    """Masks as their nonzero coordinates (for scatter-adds on array modules without bool support)."""
    out = []
    for r in res:
        if getattr(r, "dtype", None) is not None and r.dtype.kind == "b":
            out.extend(xp.nonzero(r))
        else:
            out.append(r)
    return tuple(out)


def put_into(xp, out, values, indices, index, accumulate, op="index_put"):
    """Write `values` into `out[index]` in place (add them, repeats included, if `accumulate`)."""
    key, adv = plan(op, out.shape, index, [a.ndim for a in indices])
    if not adv:
        if accumulate:
            view = out[key]
            view += _strip(values, view.ndim)
        else:
            out[key] = values
        return out
    _check_dtypes(op, adv, indices)
    _check_counts(xp, op, adv, indices)
    if xp is not np:
        _check_tensor_ranges(op, out.shape, adv, indices)
    view = out[key]
    res = _residual(adv, indices)
    try:
        if accumulate:
            if getattr(values, "ndim", 0):
                values = _strip(values, len(_adv_shape(op, view.shape, adv, [a.shape for a in indices],
                                                       out.shape)))
            _add_at(xp)(view, res if xp is np else _expand_masks(xp, res), values)
        else:
            view[res] = values
    except IndexError:
        _check_tensor_ranges(op, out.shape, adv, indices)
        raise
    return out


# ---------------------------------------------------------------- getitem / index / index_put

def _getitem(xp):
    def getitem(x, index):
        return x[basic_key(index)]
    return getitem


def _getitem_rule(x, index):
    _check_items("getitem", index, 0, True)
    return Spec(index_shape("getitem", tuple(x.shape), index, ()), x.dtype)


def _index(xp):
    def index_(x, *indices, index):
        if xp is np and len(index) == 1 and index[0][0] == "tensor" and x.ndim \
                and indices[0].dtype.kind in _INT_KINDS:  # x[i], the common case, straight to numpy
            try:
                return x[indices[0]]
            except IndexError:
                _check_range("index", indices[0], 0, x.shape[0], True)
                raise
        key, adv = plan("index", x.shape, index, [a.ndim for a in indices])
        if not adv:
            return x[key].copy()
        _check_dtypes("index", adv, indices)
        _check_counts(xp, "index", adv, indices)
        if xp is not np:
            _check_tensor_ranges("index", x.shape, adv, indices)
        # x[i] and x[mask] skip the basic part (numpy is faster without the extra view)
        sub = indices[0] if len(index) == 1 else _residual(adv, indices)
        try:
            return (x if len(index) == 1 else x[key])[sub]
        except IndexError:
            _check_tensor_ranges("index", x.shape, adv, indices)
            raise
    return index_


def _tensor_specs(op, specs, index):
    for i, s in enumerate(specs):
        if not isinstance(s, Spec):
            raise TypeError(f"{op}: index input {i} must be a tensor, got {type(s).__name__} {s!r}")
    _check_items(op, index, len(specs), False)
    for it in index:
        if it[0] == "tensor":
            dt = specs[it[1]].dtype
            if dt.is_floating_point or dt is dtypes.bool:
                raise IndexError(f"{op}: tensors used as indices must be long, int, byte or bool tensors, "
                                 f"got index tensor {it[1]} of dtype {dt.name} (bool tensors are "
                                 "('mask', k, count) items)")
        elif it[0] == "mask":
            s = specs[it[1]]
            if s.dtype is not dtypes.bool:
                raise IndexError(f"{op}: mask index tensor {it[1]} must be bool, got {s.dtype.name}")
            if it[2] > math.prod(s.shape):
                raise ValueError(f"{op}: mask index tensor {it[1]} of shape {fmt_shape(s.shape)} cannot "
                                 f"hold {it[2]} True entries")
    return [tuple(s.shape) for s in specs]


def _index_rule(x, *indices, index):
    tshapes = _tensor_specs("index", indices, index)
    return Spec(index_shape("index", tuple(x.shape), index, tshapes), x.dtype)


def _index_put(xp):
    def index_put(x, values, *indices, index, accumulate):
        return put_into(xp, x.copy(), values, indices, index, accumulate)
    return index_put


def _index_put_rule(x, values, *indices, index, accumulate):
    tshapes = _tensor_specs("index_put", indices, index)
    if type(accumulate) is not bool:
        raise TypeError(f"index_put: accumulate must be a bool, got {accumulate!r}")
    target = index_shape("index_put", tuple(x.shape), index, tshapes)
    if isinstance(values, Spec):
        if values.dtype is not x.dtype:
            raise TypeError(f"index_put: values of dtype {values.dtype.name} into a tensor of dtype "
                            f"{x.dtype.name} (the frontend casts values to the target's dtype first)")
        vs = tuple(values.shape)
        while len(vs) > len(target) and vs[0] == 1:
            vs = vs[1:]
        ok = len(vs) <= len(target) and all(v == 1 or v == t for v, t in zip(vs[::-1], target[::-1]))
        if not ok:
            raise RuntimeError(f"index_put: shape mismatch: value tensor of shape {fmt_shape(values.shape)} "
                               f"cannot be broadcast to indexing result of shape {fmt_shape(target)}")
    elif not isinstance(values, (int, float, bool)):
        raise TypeError(f"index_put: values must be a tensor or a Python number, got {type(values).__name__}")
    return Spec(tuple(x.shape), x.dtype)


# basic indexing (ints, slices, None, Ellipsis): a view of x
declare("getitem", ("x",), _getitem, _getitem_rule, attrs=("index",), kind="view", aliases="view")
# advanced indexing with index tensors: index(x, *indices); a copy
declare("index", ("x", "indices"), _index, _index_rule, attrs=("index",), kind="indexing")
# x with x[index] = values (or += with accumulate, repeated indices adding up): index_put(x, values, *indices)
declare("index_put", ("x", "values", "indices"), _index_put, _index_put_rule, attrs=("index", "accumulate"),
        kind="indexing")


# ---------------------------------------------------------------- dim-wise ops
# These take tensors of one dimension or more; the frontend reshapes 0-d operands.

def _check_index_dtype(op, idx):
    if idx.dtype.kind not in _INT_KINDS:
        raise TypeError(f"{op}: expected an integer (int64) index tensor, got dtype {idx.dtype.name}")


def _index_spec(op, x, index):
    if not isinstance(index, Spec):
        raise TypeError(f"{op}: index must be a tensor, got {type(index).__name__}")
    if index.dtype.is_floating_point or index.dtype is dtypes.bool:
        raise TypeError(f"{op}: expected an integer (int64) index tensor, got dtype {index.dtype.name}")
    if not x.shape:
        raise RuntimeError(f"{op}: expected a tensor with at least one dimension, got a 0-d tensor "
                           "(the frontend reshapes 0-d operands to 1-d)")


def _vector_rule(op, x, index, dim):
    _index_spec(op, x, index)
    if len(index.shape) != 1:
        raise IndexError(f"{op}: index must be a vector (1-d), got shape {fmt_shape(index.shape)}")
    d = normalize_dim(op, dim, len(x.shape))
    shape = tuple(x.shape)
    return d, shape[:d] + (index.shape[0],) + shape[d + 1:]


def _index_select(xp):
    def index_select(x, index, dim):
        _check_index_dtype("index_select", index)
        d = normalize_dim("index_select", dim, x.ndim)
        _check_range("index_select", index, d, x.shape[d], False)
        return xp.take(x, index, axis=d)
    return index_select


def _index_select_rule(x, index, dim):
    return Spec(_vector_rule("index_select", x, index, dim)[1], x.dtype)


def _index_add(xp):
    add_at = _add_at(xp)

    def index_add(x, index, source, dim):
        _check_index_dtype("index_add", index)
        d = normalize_dim("index_add", dim, x.ndim)
        _check_range("index_add", index, d, x.shape[d], False)
        out = x.copy()
        add_at(out, (_FULL,) * d + (index,), source)
        return out
    return index_add


def _index_add_rule(x, index, source, dim):
    d, expected = _vector_rule("index_add", x, index, dim)
    if not isinstance(source, Spec):
        raise TypeError(f"index_add: source must be a tensor, got {type(source).__name__}")
    if tuple(source.shape) != expected:
        raise RuntimeError(f"index_add: source of shape {fmt_shape(source.shape)} does not fit a tensor of "
                           f"shape {fmt_shape(x.shape)} indexed along dimension {d} by {index.shape[0]} "
                           f"indices (expected source shape {fmt_shape(expected)})")
    if source.dtype is not x.dtype:
        raise TypeError(f"index_add: source dtype {source.dtype.name} differs from the tensor's "
                        f"{x.dtype.name} (the frontend casts it first)")
    return Spec(tuple(x.shape), x.dtype)


def _fit_to(shape, dim):
    """Slices taking the leading part of each dimension but `dim` (index may be smaller than x)."""
    return tuple(_FULL if d == dim else slice(0, n) for d, n in enumerate(shape))


def _grid(xp, index, dim):
    """Coordinates addressing, for every entry of `index`, the element it scatters to."""
    nd = index.ndim
    out = []
    for d, n in enumerate(index.shape):
        if d == dim:
            out.append(index)
        else:
            out.append(xp.arange(n).reshape((1,) * d + (n,) + (1,) * (nd - d - 1)))
    return tuple(out)


def _gather(xp):
    def gather(x, index, dim):
        _check_index_dtype("gather", index)
        d = normalize_dim("gather", dim, x.ndim)
        _check_range("gather", index, d, x.shape[d], False)
        return xp.take_along_axis(x[_fit_to(index.shape, d)], index, axis=d)
    return gather


def _dimwise_rule(op, x, index, dim, src=None):
    _index_spec(op, x, index)
    xs, ix = tuple(x.shape), tuple(index.shape)
    d = normalize_dim(op, dim, len(xs))
    if len(ix) != len(xs):
        raise RuntimeError(f"{op}: index tensor must have the same number of dimensions as the input "
                           f"tensor: got index of shape {fmt_shape(ix)} for input of shape {fmt_shape(xs)}")
    for i, (n, m) in enumerate(zip(ix, xs)):
        if i != d and n > m:
            raise RuntimeError(f"{op}: size does not match at dimension {i}: expected index {fmt_shape(ix)} "
                               f"to be no larger than the input {fmt_shape(xs)} apart from dimension {d}")
    if isinstance(src, Spec):
        ss = tuple(src.shape)
        if len(ss) != len(xs) or any(n > m for n, m in zip(ix, ss)):
            raise RuntimeError(f"{op}: expected index {fmt_shape(ix)} to be no larger than src {fmt_shape(ss)} "
                               f"(with as many dimensions)")
        if src.dtype is not x.dtype:
            raise TypeError(f"{op}: src dtype {src.dtype.name} differs from the input's {x.dtype.name} "
                            "(the frontend casts it first)")
    elif src is not None and not isinstance(src, (int, float, bool)):
        raise TypeError(f"{op}: src must be a tensor or a Python number, got {type(src).__name__}")
    return d


def _gather_rule(x, index, dim):
    _dimwise_rule("gather", x, index, dim)
    return Spec(tuple(index.shape), x.dtype)


def _scatter(accumulate):
    name = "scatter_add" if accumulate else "scatter"

    def impl(xp):
        add_at = _add_at(xp) if accumulate else None

        def scatter(x, index, src, dim):
            _check_index_dtype(name, index)
            d = normalize_dim(name, dim, x.ndim)
            _check_range(name, index, d, x.shape[d], False)
            out = x.copy()
            g = _grid(xp, index, d)
            if getattr(src, "ndim", 0):
                src = src[tuple(slice(0, n) for n in index.shape)]
            if accumulate:
                add_at(out, g, src)
            else:
                out[g] = src
            return out
        return scatter
    return impl


def _scatter_rule(name):
    def rule(x, index, src, dim):
        _dimwise_rule(name, x, index, dim, src)
        return Spec(tuple(x.shape), x.dtype)
    return rule


def _nonzero(xp):
    def nonzero(x, count):
        out = xp.argwhere(x)
        if out.shape[0] != count:
            raise RuntimeError(f"nonzero: the input has {out.shape[0]} nonzero entries, but the op was "
                               f"declared with count={count}")
        return out.astype(np.int64, copy=False)
    return nonzero


def _nonzero_rule(x, count):
    numel = math.prod(x.shape)
    if type(count) is not int or not 0 <= count <= numel:
        raise ValueError(f"nonzero: count must be an int in [0, {numel}] for input of shape "
                         f"{fmt_shape(x.shape)}, got {count!r}")
    return Spec((count, len(x.shape)), dtypes.int64)


declare("index_select", ("x", "index"), _index_select, _index_select_rule, attrs=("dim",), kind="indexing")
# x with source added at the positions index names along dim (repeats add up)
declare("index_add", ("x", "index", "source"), _index_add, _index_add_rule, attrs=("dim",), kind="indexing")
declare("gather", ("x", "index"), _gather, _gather_rule, attrs=("dim",), kind="indexing")
# x with src written at the positions index names along dim; src may be a number
declare("scatter", ("x", "index", "src"), _scatter(False), _scatter_rule("scatter"), attrs=("dim",), kind="indexing")
declare("scatter_add", ("x", "index", "src"), _scatter(True), _scatter_rule("scatter_add"), attrs=("dim",),
        kind="indexing")
def _nonzero_scratch(x, count):
    """argwhere's result before the count is checked: up to every element's coordinates."""
    return 8 * math.prod(x.shape) * len(x.shape)


# coordinates of the nonzero entries, shape (count, ndim); count is counted by the frontend so
# the shape is static
declare("nonzero", ("x",), _nonzero, _nonzero_rule, attrs=("count",), kind="indexing", differentiable=False,
        scratch=_nonzero_scratch)


def _isin(xp):
    def isin(elements, test_elements, invert):
        return xp.asarray(xp.isin(elements, test_elements, invert=invert))
    return isin


def _isin_rule(elements, test_elements, invert):
    shape = elements.shape if isinstance(elements, Spec) else ()
    return Spec(shape, dtypes.bool)


# a lookup of each element in a set (numpy sorts the test elements when that is faster)
declare("isin", ("elements", "test_elements"), _isin, _isin_rule, attrs=("invert",), kind="indexing",
        differentiable=False)
