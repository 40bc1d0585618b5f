"""Op-table entries: indexing (getitem/index/index_put, setitem, index_select, index_add,
gather, scatter, scatter_add, masked_fill, masked_select, take, take_along_dim, nonzero).

References are plain numpy. Where PyTorch (and eagerc) differ from numpy -- an int
mixed with index tensors is a select, not one more advanced index -- the reference
spells PyTorch's meaning with numpy (x[1][:, i] for x[1, :, i]).
"""
import numpy as np

import eagerc
from optable import Case, booleans, integers


def rows_of_distinct(n):
    """Index tensors whose rows hold distinct positions in [0, n) (scatter without repeats)."""
    def make(rng, shape):
        out = np.empty(shape, dtype=np.int64)
        flat = out.reshape(-1, shape[-1]) if shape else out.reshape(1, 1)
        for r in flat:
            r[:] = rng.permutation(n)[:shape[-1]]
        return out
    make.kind = "i"
    return make


def cols_of_distinct(n):
    """Index tensors whose columns hold distinct positions in [0, n) (scatter along dim 0)."""
    rows = rows_of_distinct(n)

    def make(rng, shape):
        return np.ascontiguousarray(rows(rng, shape[::-1]).T)
    make.kind = "i"
    return make


def distinct_values(n):
    """A 1-d index with distinct entries in [0, n) (setitem without repeated targets)."""
    def make(rng, shape):
        return rng.permutation(n)[:shape[0]].astype(np.int64)
    make.kind = "i"
    return make


def _np_set(x, key, v):
    y = x.copy()
    y[key] = v
    return y


def setitem(key):
    """fn(x, v): a non-leaf copy of x with y[key] = v (the value may require grad)."""
    def fn(x, v):
        y = x * 1
        y[key] = v
        return y
    return fn


def setitem_t(place):
    """fn(x, i, v): y[place(i)] = v for an index tensor i."""
    def fn(x, i, v):
        y = x * 1
        y[place(i)] = v
        return y
    return fn


def _np_set_select_first(x, n, i, v):
    """PyTorch's y[n, :, i] = v: the int selects first, then y[n][:, i] = v."""
    y = x.copy()
    view = y[n]
    view[:, i] = v
    return y


def _np_add_at(x, key, v):
    y = x.copy()
    np.add.at(y, key, v)
    return y


def _np_gather(x, dim, idx):
    sub = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(idx.shape))]
    return np.take_along_axis(sub, idx, axis=dim)


def _np_scatter(x, dim, idx, src, add=False):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        val = src[pos] if isinstance(src, np.ndarray) else src
        if add:
            out[tuple(tgt)] += val
        else:
            out[tuple(tgt)] = val
    return out


def _np_index_add(x, dim, idx, src):
    out = x.copy()
    for j, i in enumerate(idx):
        dst = [slice(None)] * x.ndim
        dst[dim] = i
        s = [slice(None)] * x.ndim
        s[dim] = j
        out[tuple(dst)] += src[tuple(s)]
    return out


def _np_masked_select(x, m):
    xb, mb = np.broadcast_arrays(x, m)
    return xb[mb]


def _np_take_along_dim(x, idx, dim):
    xs, ix = list(x.shape), list(idx.shape)
    xs[dim] = ix[dim] = 1
    b = np.broadcast_shapes(tuple(xs), tuple(ix))
    xb = np.broadcast_to(x, b[:dim] + (x.shape[dim],) + b[dim + 1:])
    ib = np.broadcast_to(idx, b[:dim] + (idx.shape[dim],) + b[dim + 1:])
    return np.take_along_axis(xb, ib, axis=dim)


def _t(v):
    return eagerc.tensor(v)


def _idx(lo, hi):
    return integers(lo, hi)


CASES = [
    # ---------------------------------------------------------------- basic indexing (getitem: views)
    Case("getitem_int", lambda x: x[1], lambda x: x[1], [((4, 3),), ((3,),), ((2, 3, 4),)]),
    Case("getitem_negative_int", lambda x: x[-1, -2], lambda x: x[-1, -2], [((4, 3),), ((2, 3, 4),)]),
    Case("getitem_slice", lambda x: x[1:3], lambda x: x[1:3], [((4, 3),), ((5,),), ((2, 3),)]),
    Case("getitem_step", lambda x: x[::2, 1::2], lambda x: x[::2, 1::2], [((5, 4),), ((1, 2),)]),
    Case("getitem_negative_step", lambda x: x[::-1, -1:0:-2], lambda x: x[::-1, -1:0:-2], [((4, 5),), ((3, 2),)]),
    Case("getitem_empty_slice", lambda x: x[2:2], lambda x: x[2:2], [((4, 3),)]),
    Case("getitem_none", lambda x: x[None, :, None], lambda x: x[None, :, None], [((4, 3),), ((2,),)]),
    Case("getitem_ellipsis", lambda x: x[..., 1], lambda x: x[..., 1], [((4, 3),), ((2, 3, 4),)]),
    Case("getitem_ellipsis_mid", lambda x: x[1, ..., None, 0], lambda x: x[1, ..., None, 0],
         [((2, 3, 4),), ((2, 5),)]),
    Case("getitem_all_ints", lambda x: x[1, 2] * 1, lambda x: x[1, 2], [((4, 3),)]),
    Case("getitem_0d", lambda x: x[...], lambda x: x[...], [((),), ((3,),)]),
    Case("getitem_0d_tensor_key", lambda x: x[_t(2)], lambda x: x[2], [((4, 3),)]),
    # ---------------------------------------------------------------- advanced indexing (index: copies)
    Case("index_tensor", lambda x, i: x[i], lambda x, i: x[i],
         [((5, 3), (8,)), ((5,), (2, 4)), ((5, 2, 2), (0,))], make=(None, _idx(0, 5))),
    Case("index_tensor_negative", lambda x, i: x[i], lambda x, i: x[i], [((5, 3), (6,))],
         make=(None, _idx(-5, 5))),
    Case("index_tensor_dim1", lambda x, i: x[:, i], lambda x, i: x[:, i], [((3, 5), (7,)), ((2, 5, 2), (2, 3))],
         make=(None, _idx(0, 5))),
    Case("index_list", lambda x: x[[0, 2, 0, -1]], lambda x: x[[0, 2, 0, -1]], [((4, 3),), ((3,),)]),
    Case("index_empty_list", lambda x: x[[]], lambda x: x[np.array([], dtype=np.int64)], [((4, 3),)]),
    Case("index_two_adjacent", lambda x, i, j: x[:, i, j], lambda x, i, j: x[:, i, j],
         [((2, 4, 4), (5,), (5,)), ((2, 4, 4), (3, 1), (1, 2))], make=(None, _idx(0, 4), _idx(0, 4))),
    Case("index_two_separated", lambda x, i, j: x[i, :, j], lambda x, i, j: x[i, :, j],
         [((4, 2, 4), (5,), (5,)), ((4, 3, 4), (2, 1), (3,))], make=(None, _idx(0, 4), _idx(0, 4))),
    Case("index_int_and_tensor", lambda x, i: x[1, :, i], lambda x, i: x[1][:, i],  # PyTorch: int is a select
         [((3, 2, 4), (5,))], make=(None, _idx(0, 4))),
    Case("index_slice_none_tensor", lambda x, i: x[1:, None, i], lambda x, i: x[1:, None, i],
         [((4, 5), (3,))], make=(None, _idx(0, 5))),
    Case("index_tensor_none_tensor", lambda x, i: x[i, None, i], lambda x, i: x[i, None, i],
         [((4, 4, 2), (3,))], make=(None, _idx(0, 4))),
    Case("index_mask", lambda x, m: x[m], lambda x, m: x[m], [((3, 4), (3, 4)), ((3, 4), (3,)), ((0, 2), (0, 2))],
         make=(None, booleans)),
    Case("index_mask_after_slice", lambda x, m: x[:, m], lambda x, m: x[:, m], [((2, 5, 3), (5,))],
         make=(None, booleans)),
    Case("index_mask_and_tensor", lambda x, m, i: x[m, i], lambda x, m, i: x[m, i],
         [((4, 3), (4,), (1,))], make=(None, lambda rng, s: np.array([True, False, True, True]), _idx(0, 3))),
    Case("index_bool_scalar", lambda x: x[True], lambda x: x[True], [((2, 3),)]),
    Case("index_ellipsis_tensor", lambda x, i: x[..., i], lambda x, i: x[..., i], [((2, 3, 4), (5,))],
         make=(None, _idx(0, 4))),
    Case("take", eagerc.take, lambda x, i: x.reshape(-1)[i], [((3, 4), (7,)), ((3, 4), (2, 2)), ((5,), ())],
         make=(None, _idx(-5, 5))),
    # ---------------------------------------------------------------- writing (index_put, setitem)
    Case("setitem_int", setitem(1), lambda x, v: _np_set(x, 1, v), [((4, 3), (3,)), ((4, 3), ()), ((4, 3), (1, 3))]),
    Case("setitem_slice_step", setitem((slice(None, None, -2), 0)),
         lambda x, v: _np_set(x, (slice(None, None, -2), 0), v),
         [((5, 3), (3,)), ((5, 3), (1,))]),
    Case("setitem_ellipsis_none", setitem((Ellipsis, None, 1)), lambda x, v: _np_set(x, (Ellipsis, None, 1), v),
         [((2, 3), (2, 1)), ((2, 3, 4), (3, 1))]),
    Case("setitem_scalar", lambda x: setitem((slice(1, None), 0))(x, 2.5),
         lambda x: _np_set(x, (slice(1, None), 0), 2.5),
         [((4, 3),)]),
    Case("setitem_tensor", setitem_t(lambda i: i), lambda x, i, v: _np_set(x, i, v),
         [((6, 3), (4,), (4, 3)), ((6, 3), (3,), (3,))], make=(None, distinct_values(6), None)),
    Case("setitem_tensor_dim1", setitem_t(lambda i: (slice(None), i)), lambda x, i, v: _np_set(x, (slice(None), i), v),
         [((2, 5), (3,), (2, 3)), ((2, 5), (2,), ())], make=(None, distinct_values(5), None)),
    Case("setitem_int_and_tensor", setitem_t(lambda i: (0, slice(None), i)),
         lambda x, i, v: _np_set_select_first(x, 0, i, v),
         [((2, 3, 5), (2,), (3, 2)), ((2, 3, 5), (2,), (2,))], make=(None, distinct_values(5), None)),
    Case("setitem_mask", setitem_t(lambda m: m), lambda x, m, v: _np_set(x, m, v),
         [((3, 4), (3, 4), ()), ((3, 4), (3,), (4,))], make=(None, booleans, None)),
    Case("setitem_repeated_no_grad", setitem_t(lambda i: i), lambda x, i, v: _np_set(x, i, v),
         [((3, 2), (5,), ())], make=(None, _idx(0, 3), None), grad=False),
    Case("index_put_accumulate", lambda x, i, v: eagerc.index_put(x, (i,), v, accumulate=True),
         lambda x, i, v: _np_add_at(x, i, v), [((4, 3), (7,), (7, 3)), ((4, 3), (6,), (3,)), ((4,), (5,), ())],
         make=(None, _idx(0, 4), None)),
    Case("index_put_accumulate_2d", lambda x, i, j, v: eagerc.index_put(x, (i, None, j), v, accumulate=True),
         lambda x, i, j, v: _np_add_at(x, (i, slice(None), j), v), [((3, 2, 4), (6,), (6,), (6, 2))],
         make=(None, _idx(0, 3), _idx(0, 4), None)),
    Case("index_put_method", lambda x, i, v: x.index_put((i,), v), lambda x, i, v: _np_set(x, i, v),
         [((5, 2), (3,), (3, 2))], make=(None, distinct_values(5), None)),
    Case("index_fill", lambda x, i: eagerc.index_fill(x, 1, i, -1.5),
         lambda x, i: _np_set(x, (slice(None), i), -1.5), [((3, 4), (3,)), ((2, 4, 2), (5,))], make=(None, _idx(0, 4))),
    Case("index_fill_", lambda x, i: (x * 1).index_fill_(0, i, 0.5), lambda x, i: _np_set(x, i, 0.5),
         [((4, 3), (2,))], make=(None, _idx(0, 4))),
    # ---------------------------------------------------------------- index_select / index_add
    Case("index_select", lambda x, i: eagerc.index_select(x, 0, i), lambda x, i: x[i],
         [((5, 3), (7,)), ((5,), (0,)), ((5, 2, 2), (3,))], make=(None, _idx(0, 5))),
    Case("index_select_dim", lambda x, i: x.index_select(-1, i), lambda x, i: x[..., i],
         [((2, 5), (6,)), ((3, 2, 5), (4,))], make=(None, _idx(0, 5))),
    Case("index_select_0d_index", lambda x: eagerc.index_select(x, 1, _t(2)), lambda x: x[:, 2:3],
         [((3, 4),)]),
    Case("index_add", lambda x, i, s: eagerc.index_add(x, 0, i, s), lambda x, i, s: _np_index_add(x, 0, i, s),
         [((4, 3), (6,), (6, 3)), ((4,), (5,), (5,))], make=(None, _idx(0, 4), None)),
    Case("index_add_dim_alpha", lambda x, i, s: x.index_add(1, i, s, alpha=2.0),
         lambda x, i, s: _np_index_add(x, 1, i, 2.0 * s), [((2, 4, 2), (5,), (2, 5, 2))],
         make=(None, _idx(0, 4), None)),
    Case("index_add_", lambda x, i, s: (x * 1).index_add_(0, i, s), lambda x, i, s: _np_index_add(x, 0, i, s),
         [((4, 3), (5,), (5, 3))], make=(None, _idx(0, 4), None)),
    # ---------------------------------------------------------------- gather / scatter
    Case("gather", lambda x, i: eagerc.gather(x, 1, i), lambda x, i: _np_gather(x, 1, i),
         [((4, 5), (4, 7)), ((4, 5), (2, 3)), ((2, 5, 3), (2, 4, 3)), ((4, 5), (4, 0))], make=(None, _idx(0, 5))),
    Case("gather_dim0", lambda x, i: x.gather(0, i), lambda x, i: _np_gather(x, 0, i),
         [((5, 3), (6, 3)), ((5,), (8,))], make=(None, _idx(0, 5))),
    Case("gather_0d", lambda x: eagerc.gather(x, 0, _t(0)), lambda x: x, [((),)]),
    Case("take_along_dim", lambda x, i: eagerc.take_along_dim(x, i, 1), lambda x, i: np.take_along_axis(x, i, 1),
         [((3, 5), (3, 4))], make=(None, _idx(0, 5))),
    Case("take_along_dim_broadcast", lambda x, i: eagerc.take_along_dim(x, i, 1),
         lambda x, i: _np_take_along_dim(x, i, 1), [((3, 5), (1, 2)), ((1, 5, 2), (3, 4, 1))], make=(None, _idx(0, 5))),
    Case("take_along_dim_flat", lambda x, i: x.take_along_dim(i), lambda x, i: x.reshape(-1)[i],
         [((3, 4), (5,))], make=(None, _idx(0, 12))),
    Case("scatter", lambda x, i, s: eagerc.scatter(x, 1, i, s), lambda x, i, s: _np_scatter(x, 1, i, s),
         [((3, 5), (3, 4), (3, 4)), ((3, 5), (2, 3), (3, 4)), ((2, 6, 2), (2, 3, 2), (2, 3, 2))],
         make=(None, rows_of_distinct(5), None)),
    Case("scatter_dim0", lambda x, i, s: x.scatter(0, i, s), lambda x, i, s: _np_scatter(x, 0, i, s),
         [((5, 3), (4, 3), (4, 3))], make=(None, cols_of_distinct(5), None)),
    Case("scatter_value", lambda x, i: eagerc.scatter(x, 1, i, value=-2.0), lambda x, i: _np_scatter(x, 1, i, -2.0),
         [((3, 5), (3, 2))], make=(None, _idx(0, 5))),
    Case("scatter_", lambda x, i, s: (x * 1).scatter_(1, i, s), lambda x, i, s: _np_scatter(x, 1, i, s),
         [((3, 5), (3, 2), (3, 2))], make=(None, rows_of_distinct(5), None)),
    Case("scatter_add", lambda x, i, s: eagerc.scatter_add(x, 1, i, s), lambda x, i, s: _np_scatter(x, 1, i, s, True),
         [((3, 4), (3, 6), (3, 6)), ((3, 4), (2, 3), (3, 5))], make=(None, _idx(0, 3), None)),
    Case("scatter_add_1d", lambda x, i, s: eagerc.scatter_add(x, 0, i, s),
         lambda x, i, s: _np_scatter(x, 0, i, s, True),
         [((3,), (7,), (7,)), ((3,), (2,), (4,))], make=(None, _idx(0, 3), None)),
    Case("scatter_add_", lambda x, i, s: (x * 1).scatter_add_(0, i, s), lambda x, i, s: _np_scatter(x, 0, i, s, True),
         [((3, 4), (5, 4), (5, 4))], make=(None, _idx(0, 3), None)),
    Case("scatter_reduce_add", lambda x, i, s: eagerc.scatter(x, 0, i, s, reduce="add"),
         lambda x, i, s: _np_scatter(x, 0, i, s, True), [((3, 2), (4, 2), (4, 2))], make=(None, _idx(0, 3), None)),
    # ---------------------------------------------------------------- masks
    Case("masked_fill", lambda x, m: eagerc.masked_fill(x, m, -1.0), lambda x, m: np.where(m, -1.0, x),
         [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (3, 1)), ((), ())], make=(None, booleans)),
    Case("masked_fill_tensor_value", lambda x, m, v: x.masked_fill(m, v), lambda x, m, v: np.where(m, v, x),
         [((3, 4), (3, 4), ())], make=(None, booleans, None)),
    Case("masked_fill_", lambda x, m: (x * 1).masked_fill_(m, 0.25), lambda x, m: np.where(m, 0.25, x),
         [((3, 4), (3, 4)), ((3, 4), (4,))], make=(None, booleans)),
    Case("masked_fill_int", lambda x, m: (x > 0).long().masked_fill(m, 7), lambda x, m: np.where(m, 7, x > 0),
         [((3, 4), (3, 4))], make=(None, booleans), grad=False),
    Case("masked_select", eagerc.masked_select, _np_masked_select,
         [((3, 4), (3, 4)), ((3, 1), (4,)), ((2, 3), (2, 3)), ((), ())], make=(None, booleans)),
    # ---------------------------------------------------------------- nonzero
    Case("nonzero", lambda x: eagerc.nonzero(x), np.argwhere, [((3, 4),), ((5,),), ((2, 0),), ((),)],
         make=(integers(-1, 2),), grad=False),
    Case("nonzero_bool", lambda m: m.nonzero(), np.argwhere, [((3, 4),), ((2, 2, 3),)], make=(booleans,), grad=False),
    Case("nonzero_as_tuple", lambda x: eagerc.nonzero(x, as_tuple=True), np.nonzero, [((3, 4),), ((6,),)],
         make=(integers(-1, 2),), grad=False),
    Case("nonzero_float", lambda x: (x > 0).float().nonzero(), lambda x: np.argwhere(x > 0), [((3, 4),)],
         grad=False),
    Case("where_one_arg", lambda m: eagerc.where(m), np.nonzero, [((3, 4),)], make=(booleans,), grad=False),
    Case("argwhere", eagerc.argwhere, np.argwhere, [((4, 3),)], make=(booleans,), grad=False),
    # ---------------------------------------------------------------- isin
    Case("isin", eagerc.isin, np.isin, [((3, 4), (5,)), ((6,), (2, 2)), ((0,), (3,)), ((4,), (0,))],
         make=(integers(0, 8), integers(0, 8)), grad=False),
    Case("isin_invert", lambda a, b: a.isin(b, invert=True), lambda a, b: ~np.isin(a, b), [((3, 4), (3,))],
         make=(integers(0, 5), integers(0, 5)), grad=False),
    Case("isin_scalar", lambda a: eagerc.isin(a, 2), lambda a: a == 2, [((3, 4),)], make=(integers(0, 4),),
         grad=False),
    Case("isin_promote", lambda a, b: eagerc.isin(a, b.float()), lambda a, b: np.isin(a, b), [((3, 4), (3,))],
         make=(integers(0, 5), integers(0, 5)), grad=False),
]
