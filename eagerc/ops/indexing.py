"""Indexing: Tensor.__getitem__/__setitem__, index_select, index_add, index_fill,
index_put, gather, scatter, scatter_add, masked_fill, masked_select, take,
take_along_dim, nonzero/argwhere, and their derivatives.

A subscript becomes the JSON-plain index description of runtime/ops/indexing.py
(its docstring has the language and the PyTorch-vs-numpy details). Basic subscripts
(ints, slices, None, Ellipsis) run the `getitem` op, which returns a view; a subscript
with index tensors, lists or masks runs `index`, a copy. `x[i] = v` computes
`index_put` out of place and commits it in place (eagerc/ops/inplace.py), so views
see the write, version counters bump, and autograd works for non-leaf targets and
for values that require grad; without autograd it writes straight into memory.

Derivatives scatter the output gradient back: getitem/index through `index_put`
(accumulating, so repeated indices add up), gather through scatter_add,
index_select through index_add. Each of those is differentiable in turn, so double
backward works.

Like PyTorch: a 0-d integer tensor used as a key acts as an int (a view); with
repeated indices a non-accumulating write keeps the last value and the values' gradient
is g[index] for every entry (as PyTorch's); scatter with repeats is only defined up to
which value wins. Unlike PyTorch: negative slice steps work (numpy's meaning).
Not yet supported: writing, with autograd on, into a *view* of a tensor that requires
grad (`h[0][1] = v`, or `h[0] += v`, which Python runs as h[0].__iadd__): commit()
refuses in-place ops on views whose result requires grad; `h[0, 1] = v` and
`h[[0]] += v` work.
"""
import operator
import warnings

import numpy as np

from ..runtime.dtypes import FLOATING_KINDS
from .. import dispatch
from ..autograd.engine import _saved_input, sum_to
from ..autograd.formulas import defgrad, defgrad_node
from ..dispatch import apply
from ..runtime import dtypes
from ..runtime.device import xp_of
from ..runtime.ops import OPS
from ..runtime.ops.indexing import IndexBoundsError, put_into
from ..runtime.ops.meta import fmt_shape, normalize_dim
from .._tensor import Tensor
from . import creation
from .elementwise import cast, where
from .inplace import bump_version, check_inplace, commit, inplace_method as _inplace

__all__ = ["index_select", "index_add", "index_fill", "index_put", "gather", "scatter", "scatter_add",
           "masked_fill", "masked_select", "take", "take_along_dim", "nonzero", "argwhere", "isin"]

_GETITEM = OPS["getitem"]
_INDEX = OPS["index"]
_INDEX_PUT = OPS["index_put"]
_INDEX_SELECT = OPS["index_select"]
_INDEX_ADD = OPS["index_add"]
_GATHER = OPS["gather"]
_SCATTER = OPS["scatter"]
_SCATTER_ADD = OPS["scatter_add"]
_NONZERO = OPS["nonzero"]

_NONE = ("none",)
_ELLIPSIS = ("ellipsis",)
_FULL = ("slice", None, None, None)


# ---------------------------------------------------------------- subscripts

def _as_int(v, what):
    if v is None or type(v) is int:
        return v
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"slice indices must be integers or None, got {what} {type(v).__name__}") from None


def count_true(t):
    """The number of nonzero entries of `t`, as a Python int.

    Indexing with a mask and nonzero have shapes that depend on it; under a tracer it
    is computed with Tensor ops and read by `data_size`."""
    if dispatch.active_tracer() is None:
        d = t._array
        return int(np.count_nonzero(d) if type(d) is np.ndarray else xp_of(d).count_nonzero(d))
    m = t if t._array.dtype.kind == "b" else t != 0
    return data_size(m.sum())


def data_size(t):
    """A 0-d integer tensor that sizes an output (a count, a maximum), as a Python int.

    The one way sizes are read from tensor values: under a tracer `.item()` is seen, and
    the tracer recognises this function in the stack, so the user gets a graph break that
    says "data-dependent size" and names their call -- never a size baked into a graph."""
    return int(t.item())


def _index_tensor(k, device):
    """A list, tuple or numpy array used as an index, as a Tensor (empty lists are integer)."""
    a = np.asarray(k)
    if a.dtype == object:
        raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or bool tensors "
                         f"are valid indices (got a sequence that numpy reads as objects: {k!r})")
    if a.size == 0 and a.dtype.kind in FLOATING_KINDS:
        a = a.astype(np.int64)
    return creation.tensor(a, device=device)


def _tensor_item(t, x, items, tensors):
    kind = t._array.dtype.kind
    if kind == "u" and t._array.dtype.itemsize == 1:
        warnings.warn("indexing with dtype uint8 is deprecated (as in PyTorch); it is read as a bool mask: "
                      "use a bool tensor instead", UserWarning, stacklevel=4)
        t = cast(t, dtypes.bool)
        kind = "b"
    if kind not in "iub":
        raise IndexError(f"tensors used as indices must be long, int, byte or bool tensors, got a tensor "
                         f"of dtype {t.dtype.name} and shape {fmt_shape(t._array.shape)}")
    if kind in "iu" and t._array.ndim == 0:
        # PyTorch reads a 0-d integer tensor as an int: x[t] is a view, like x[int(t)]
        items.append(("int", int(t.item())))
        return
    if t._array.__class__ is not x._array.__class__:
        t = t.to(x.device)
    if kind == "b":
        items.append(("mask", len(tensors), count_true(t)))
    else:
        items.append(("tensor", len(tensors)))
    tensors.append(t)


def parse_index(x, key):
    """A subscript as (items, index tensors) of the index language."""
    if type(key) is not tuple:
        key = (key,)
    items = []
    tensors = []
    for k in key:
        tk = type(k)
        if tk is int:
            items.append(("int", k))
        elif tk is slice:
            items.append(("slice", _as_int(k.start, "start"), _as_int(k.stop, "stop"), _as_int(k.step, "step")))
        elif k is None:
            items.append(_NONE)
        elif k is Ellipsis:
            items.append(_ELLIPSIS)
        elif isinstance(k, Tensor):
            _tensor_item(k, x, items, tensors)
        elif tk is bool or tk is np.bool_:
            _tensor_item(creation.tensor(bool(k), device=x.device), x, items, tensors)
        elif isinstance(k, (list, tuple, np.ndarray)):
            _tensor_item(_index_tensor(k, x.device), x, items, tensors)
        elif hasattr(k, "__index__"):
            items.append(("int", operator.index(k)))
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or bool tensors "
                             f"are valid indices (got {tk.__name__})")
    return tuple(items), tensors


def _drop_saved(t, n):
    """index/index_put save every input (they are variadic); their derivatives read only
    the index tensors, so the first `n` inputs (x, values) are not kept alive."""
    node = t.grad_fn
    if node is not None and type(node.saved) is list:
        for i in range(n):
            node.saved[i] = None
    return t


def _getitem(x, items, tensors):
    if not tensors:
        return apply(_GETITEM, (x,), {"index": items})
    return _drop_saved(apply(_INDEX, (x, *tensors), {"index": items}), 1)


def __getitem__(self, key):
    if type(key) is int:  # the common case, kept short
        return apply(_GETITEM, (self,), {"index": (("int", key),)})
    return _getitem(self, *parse_index(self, key))


def _put(x, values, tensors, items, accumulate):
    """x with x[items] = values (or += if accumulate): the index_put op."""
    return _drop_saved(apply(_INDEX_PUT, (x, values, *tensors), {"index": items, "accumulate": accumulate}), 2)


def _value_for(x, value, op):
    """`value` as something to write into x: a Tensor of x's dtype and device, or a Python number."""
    if isinstance(value, Tensor):
        if value._array.dtype != x._array.dtype:
            value = cast(value, x.dtype)
        if value._array.__class__ is not x._array.__class__:
            value = value.to(x.device)
        return value
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (np.number, np.bool_)):
        return value.item()
    if isinstance(value, (list, tuple, np.ndarray)):
        return creation.tensor(value, dtype=x.dtype, device=x.device)
    raise TypeError(f"{op}: can't assign a {type(value).__name__} to a Tensor; expected a Tensor or a number")


def _write(x, items, tensors, value, accumulate, op):
    """Commit x[items] = value (or += with accumulate) in place; returns x."""
    check_inplace(x, op)
    if dispatch.grad_enabled() and (x._requires_grad or isinstance(value, Tensor) and value._requires_grad) \
            or dispatch.active_tracer() is not None:
        return commit(x, _put(x, value, tensors, items, accumulate), op)
    # nothing to record: write straight into x's memory
    data = x._array
    v = value._array if isinstance(value, Tensor) else value
    idx = [t._array for t in tensors]
    try:
        put_into(np if type(data) is np.ndarray else xp_of(data), data, v, idx, items, accumulate)
    except IndexBoundsError:
        raise
    except Exception as e:
        raise dispatch.explain_failure(_INDEX_PUT, [data, v, *idx],
                                       {"index": items, "accumulate": accumulate}, e) from None
    bump_version(x, op)
    return x


def __setitem__(self, key, value):
    items, tensors = parse_index(self, key)
    _write(self, items, tensors, _value_for(self, value, "__setitem__"), False, "__setitem__")


# ---------------------------------------------------------------- functions

def _check_index(op, index, x):
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}: index must be a Tensor, got {type(index).__name__}")
    if index._array.dtype.kind not in "iu":
        raise TypeError(f"{op}: expected an integer (int64) index tensor, got dtype {index.dtype.name}")
    if index._array.__class__ is not x._array.__class__:
        index = index.to(x.device)
    return index


def _same_dtype(op, src, x):
    if isinstance(src, Tensor):
        if src._array.dtype != x._array.dtype:
            src = cast(src, x.dtype)
        return src
    if isinstance(src, (bool, int, float)):
        return src
    if isinstance(src, (np.number, np.bool_)):
        return src.item()
    raise TypeError(f"{op}: expected a Tensor or a Python number, got {type(src).__name__}")


def _vec(index):
    return index.reshape(1) if index._array.ndim == 0 else index


def index_select(input, dim, index):
    """The entries of `input` at positions `index` (a vector) along `dim`."""
    return _dimwise(_INDEX_SELECT, "index_select", input, dim, _vec(_check_index("index_select", index, input)))


def index_add(input, dim, index, source, *, alpha=1):
    """input with `alpha * source` added at positions `index` along `dim` (repeats add up)."""
    index = _vec(_check_index("index_add", index, input))
    source = _same_dtype("index_add", source, input)
    if not isinstance(source, Tensor):
        raise TypeError(f"index_add: source must be a Tensor, got {type(source).__name__}")
    if alpha != 1:
        source = source * alpha
    if input._array.ndim == 0:
        normalize_dim("index_add", dim, 1)
        return apply(_INDEX_ADD, (input.reshape(1), index, source.reshape(1)), {"dim": 0}).reshape(())
    return apply(_INDEX_ADD, (input, index, source), {"dim": normalize_dim("index_add", dim, input._array.ndim)})


def _dim_items(dim, ndim):
    return (_FULL,) * normalize_dim("index_fill", dim, max(ndim, 1)) + (("tensor", 0),)


def index_fill(input, dim, index, value):
    """input with the positions `index` along `dim` set to `value` (a number or 0-d tensor)."""
    index = _vec(_check_index("index_fill", index, input))
    value = _fill_value("index_fill", input, value)
    x = input.reshape(1) if input._array.ndim == 0 else input
    out = _put(x, value, [index], _dim_items(dim, input._array.ndim), False)
    return out.reshape(()) if input._array.ndim == 0 else out


def _put_items(op, x, indices):
    """index_put's `indices` (a tuple of tensors, None for a full slice) as items and tensors."""
    if isinstance(indices, Tensor):
        indices = (indices,)
    items, tensors = [], []
    for i in indices:
        if i is None:
            items.append(_FULL)
            continue
        if not isinstance(i, Tensor):
            i = _index_tensor(i, x.device)
        if i._array.ndim == 0 and i._array.dtype.kind in "iu":  # stays an index tensor, not an int
            items.append(("tensor", len(tensors)))
            tensors.append(i if i._array.__class__ is x._array.__class__ else i.to(x.device))
            continue
        _tensor_item(i, x, items, tensors)
    return tuple(items), tensors


def index_put(input, indices, values, accumulate=False):
    """input with input[indices] = values (+= with accumulate, repeated indices adding up)."""
    items, tensors = _put_items("index_put", input, indices)
    return _put(input, _value_for(input, values, "index_put"), tensors, items, bool(accumulate))


def index_put_(input, indices, values, accumulate=False):
    items, tensors = _put_items("index_put_", input, indices)
    return _write(input, items, tensors, _value_for(input, values, "index_put_"), bool(accumulate), "index_put_")


def _dimwise(op, name, input, dim, index, src=None):
    index = _check_index(name, index, input)
    if src is not None:
        src = _same_dtype(name, src, input)
    if input._array.ndim == 0:  # the kernels take 1-d and up: a 0-d tensor acts as shape (1,)
        normalize_dim(name, dim, 1)
        args = (input.reshape(1), index.reshape(-1))
        if src is not None:
            args += (src.reshape(-1) if isinstance(src, Tensor) else src,)
        out = apply(op, args, {"dim": 0})
        return out.reshape(tuple(index._array.shape) if op is _GATHER else ())
    args = (input, index) if src is None else (input, index, src)
    return apply(op, args, {"dim": normalize_dim(name, dim, input._array.ndim)})


def gather(input, dim, index, *, sparse_grad=False):
    """out[i][j][k] = input[i][index[i][j][k]][k] (for dim=1): values picked along `dim`."""
    return _dimwise(_GATHER, "gather", input, dim, index)


def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    """input with src (a tensor or a number) written at the positions index names along dim."""
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter: expected src (a Tensor) or value (a number)")
    if reduce is not None:
        if reduce == "add":
            if not isinstance(src, Tensor):
                src = creation.full_like(index, src, dtype=input.dtype)
            return scatter_add(input, dim, index, src)
        raise NotImplementedError(f"scatter: reduce={reduce!r} is not supported (only 'add')")
    return _dimwise(_SCATTER, "scatter", input, dim, index, src)


def scatter_add(input, dim, index, src):
    """input with src added at the positions index names along dim (repeats add up)."""
    if not isinstance(src, Tensor):
        raise TypeError(f"scatter_add: src must be a Tensor, got {type(src).__name__}")
    return _dimwise(_SCATTER_ADD, "scatter_add", input, dim, index, src)


def _check_mask(op, mask):
    if not isinstance(mask, Tensor):
        raise TypeError(f"{op}: mask must be a bool Tensor, got {type(mask).__name__}")
    if mask._array.dtype.kind != "b":
        raise RuntimeError(f"{op}: expected a bool mask, got a mask of dtype {mask.dtype.name}")


def _fill_value(op, input, value):
    """A fill value for `input`: a 0-d tensor of its dtype, or a Python number of its kind."""
    if isinstance(value, Tensor):
        if value._array.ndim != 0:
            raise RuntimeError(f"{op}: only supports a 0-dimensional value tensor, but got a tensor of "
                               f"shape {fmt_shape(value._array.shape)}")
        return _value_for(input, value, op)
    if isinstance(value, (np.number, np.bool_)):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"{op}: value must be a number or a 0-d Tensor, got {type(value).__name__}")
    kind = input._array.dtype.kind
    return bool(value) if kind == "b" else int(value) if kind in "iu" else float(value)


def masked_fill(input, mask, value):
    """input with value where mask is True (mask broadcasts, as in PyTorch)."""
    _check_mask("masked_fill", mask)
    return where(mask, _fill_value("masked_fill", input, value), input)


def _broadcast_pair(op, a, b):
    try:
        shape = np.broadcast_shapes(a._array.shape, b._array.shape)
    except ValueError:
        raise RuntimeError(f"{op}: shapes {fmt_shape(a._array.shape)} and {fmt_shape(b._array.shape)} are not "
                           "broadcastable") from None
    return a.expand(shape), b.expand(shape)


def masked_select(input, mask):
    """The entries of input where mask is True, as a 1-d tensor (the two broadcast)."""
    _check_mask("masked_select", mask)
    x, m = _broadcast_pair("masked_select", input, mask)
    if m._array.__class__ is not x._array.__class__:
        m = m.to(x.device)
    return _drop_saved(apply(_INDEX, (x, m), {"index": (("mask", 0, count_true(m)),)}), 1)


def take(input, index):
    """input read as 1-d at positions index; the result has index's shape."""
    index = _check_index("take", index, input)
    return _getitem(input.reshape(-1), (("tensor", 0),), [index])


def take_along_dim(input, indices, dim=None):
    """gather with broadcasting: values of input at indices along dim (flattened if dim is None)."""
    indices = _check_index("take_along_dim", indices, input)
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1))
    nd = input._array.ndim
    if indices._array.ndim != nd:
        raise RuntimeError(f"take_along_dim: input and indices should have the same number of dimensions, "
                           f"but got {nd} dimensions for input, and {indices._array.ndim} for indices")
    d = normalize_dim("take_along_dim", dim, max(nd, 1))
    if nd:
        xs, ix = list(input._array.shape), list(indices._array.shape)
        xs[d] = ix[d] = 1
        try:
            b = list(np.broadcast_shapes(tuple(xs), tuple(ix)))
        except ValueError:
            raise RuntimeError(f"take_along_dim: input {fmt_shape(input._array.shape)} and indices "
                               f"{fmt_shape(indices._array.shape)} do not broadcast outside dimension {d}") from None
        xs, ix = list(b), list(b)
        xs[d], ix[d] = input._array.shape[d], indices._array.shape[d]
        input, indices = input.expand(tuple(xs)), indices.expand(tuple(ix))
    return gather(input, d, indices)


def nonzero(input, *, as_tuple=False):
    """Coordinates of the nonzero entries: (n, ndim) int64, or one (n,) tensor per dimension."""
    out = apply(_NONZERO, (input,), {"count": count_true(input)})
    if not as_tuple:
        return out
    if input._array.ndim == 0:
        return (creation.zeros(out._array.shape[0], dtype=dtypes.int64, device=input.device),)
    return tuple(apply(_GETITEM, (out,), {"index": (_FULL, ("int", i))}) for i in range(input._array.ndim))


def argwhere(input):
    return nonzero(input)


# ---------------------------------------------------------------- derivatives

def _zeros(shape, like):
    return creation.zeros(tuple(shape), dtype=like.dtype, device=like.device)


def _fit_value(gv, vshape):
    """Sum g[index] to the shape of the values written there (they broadcast, and may carry
    extra leading 1s)."""
    vshape = tuple(vshape)
    if len(vshape) > gv._array.ndim:
        gv = gv.reshape((1,) * (len(vshape) - gv._array.ndim) + tuple(gv._array.shape))
    return sum_to(gv, vshape)


def _index_grad(node, g):
    n = len(node.next) - 1
    tensors = [_saved_input(node, 1 + i) for i in range(n)]
    gx = None
    if node.next[0] is not None:
        gx = _put(_zeros(node.shapes[0], g), g, tensors, node.attrs["index"], True)
    return [gx] + [None] * n


def _index_put_grad(node, g):
    n = len(node.next) - 2
    tensors = [_saved_input(node, 2 + i) for i in range(n)]
    items = node.attrs["index"]
    gx = gv = None
    if node.next[0] is not None:
        # accumulate: x passes through; otherwise the written region no longer depends on x
        gx = g if node.attrs["accumulate"] else _put(g, 0, tensors, items, False)
    if node.next[1] is not None:
        gv = _fit_value(_getitem(g, items, tensors), node.shapes[1])   # g[items]
    return [gx, gv] + [None] * n


def _src_grad(g, index, src_shape, dim):
    """d/d src of scatter/scatter_add: g at the positions written, zero where index does not reach."""
    gs = apply(_GATHER, (g, index), {"dim": dim})
    if tuple(index._array.shape) != tuple(src_shape):
        items = tuple(("slice", 0, n, None) for n in index._array.shape)
        gs = _put(_zeros(src_shape, g), gs, [], items, False)
    return gs


defgrad("getitem", lambda g, x_shape, index: _put(_zeros(x_shape, g), g, [], index, False))
defgrad_node("index", _index_grad, saves_inputs=True)
defgrad_node("index_put", _index_put_grad, saves_inputs=True)
defgrad("index_select",
        lambda g, x_shape, index, dim: apply(_INDEX_ADD, (_zeros(x_shape, g), index, g), {"dim": dim}),
        None)
defgrad("index_add", lambda g: g, None,
        lambda g, index, dim: apply(_INDEX_SELECT, (g, index), {"dim": dim}))
defgrad("gather",
        lambda g, x_shape, index, dim: apply(_SCATTER_ADD, (_zeros(x_shape, g), index, g), {"dim": dim}),
        None)
defgrad("scatter", lambda g, index, dim: apply(_SCATTER, (g, index, 0), {"dim": dim}), None,
        lambda g, index, src_shape, dim: _src_grad(g, index, src_shape, dim))
defgrad("scatter_add", lambda g: g, None,
        lambda g, index, src_shape, dim: _src_grad(g, index, src_shape, dim))


# ---------------------------------------------------------------- Tensor methods

def _index_fill_(self, dim, index, value):
    index = _vec(_check_index("index_fill_", index, self))
    value = _fill_value("index_fill_", self, value)
    if self._array.ndim == 0:
        return _inplace(index_fill, "index_fill_")(self, dim, index, value)
    return _write(self, _dim_items(dim, self._array.ndim), [index], value, False, "index_fill_")


def _masked_fill_(self, mask, value):
    _check_mask("masked_fill_", mask)
    if mask._array.shape != self._array.shape:
        try:
            mask = mask.expand(tuple(self._array.shape))
        except RuntimeError:
            raise RuntimeError(f"masked_fill_: mask of shape {fmt_shape(mask._array.shape)} does not broadcast "
                               f"to the tensor's shape {fmt_shape(self._array.shape)}") from None
    value = _fill_value("masked_fill_", self, value)
    if mask._array.__class__ is not self._array.__class__:
        mask = mask.to(self.device)
    return _write(self, (("mask", 0, count_true(mask)),), [mask], value, False, "masked_fill_")


Tensor.__getitem__ = __getitem__
Tensor.__setitem__ = __setitem__

_METHODS = {n: globals()[n] for n in __all__ if n != "isin"}   # every function is a method (isin: below)
_METHODS.update(index_put_=index_put_, index_fill_=_index_fill_, masked_fill_=_masked_fill_,
                index_add_=_inplace(index_add, "index_add_"), scatter_=_inplace(scatter, "scatter_"),
                scatter_add_=_inplace(scatter_add, "scatter_add_"))
for _n, _f in _METHODS.items():
    setattr(Tensor, _n, _f)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each of `elements` occurs in `test_elements` (either may be a Python number);
    both are compared in their promoted dtype. assume_unique is accepted (numpy decides how)."""
    from .elementwise import _check_operand, _promote
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin: expected at least one of elements and test_elements to be a Tensor")
    a, b = _promote((_check_operand("isin", elements), _check_operand("isin", test_elements)))
    if not isinstance(a, Tensor):
        from .creation import tensor
        a = tensor(a, device=b.device)
    return apply(OPS["isin"], (a, b), {"invert": bool(invert)})


Tensor.isin = lambda self, test_elements, *, assume_unique=False, invert=False: isin(
    self, test_elements, assume_unique=assume_unique, invert=invert)
