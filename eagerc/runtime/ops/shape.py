"""Shape and movement primitives. Outputs are views of the input where numpy gives
views (`view=True`: they share the input's version counter). flip, roll, tril/triu and
repeat copy (as in PyTorch, even where numpy's own flip is a view)."""
import math

import numpy as np

from . import declare
from .meta import Spec, fail, fmt_shape, normalize_dim, normalize_dims


def _reshape_rule(x, shape):
    if math.prod(shape) != math.prod(x.shape) or any(s < 0 for s in shape):
        fail("reshape", (x,), f"shape {fmt_shape(shape)} is invalid for input of size {math.prod(x.shape)}")
    return Spec(tuple(shape), x.dtype)


def _expand_rule(x, shape):
    if any(s < 0 for s in shape):
        fail("expand", (x,), f"target sizes {tuple(shape)} must be non-negative (-1 is resolved by the caller)")
    if len(shape) < len(x.shape):
        fail("expand", (x,), f"the number of sizes provided ({len(shape)}) must be greater or equal "
             f"to the number of dimensions in the tensor ({len(x.shape)})")
    for i, (n, s) in enumerate(zip(x.shape[::-1], tuple(shape)[::-1])):
        if n != 1 and n != s:
            fail("expand", (x,), f"the expanded size of the tensor ({s}) must match the existing size "
                 f"({n}) at non-singleton dimension {len(shape) - 1 - i}; target sizes {fmt_shape(shape)}")
    return Spec(tuple(shape), x.dtype)


def _permute_rule(x, dims):
    if sorted(normalize_dims("permute", d, len(x.shape))[0] for d in dims) != list(range(len(x.shape))) \
            or len(dims) != len(x.shape):
        fail("permute", (x,), f"dims {tuple(dims)} must be a permutation of 0..{len(x.shape) - 1}")
    return Spec(tuple(x.shape[d] for d in dims), x.dtype)


def _squeeze_rule(x, dim):
    axes = normalize_dims("squeeze", dim, len(x.shape)) if dim is not None else \
        tuple(i for i, n in enumerate(x.shape) if n == 1)
    return Spec(tuple(n for i, n in enumerate(x.shape) if not (i in axes and n == 1)), x.dtype)


def _unsqueeze_rule(x, dim):
    d = normalize_dim("unsqueeze", dim, len(x.shape) + 1)
    s = list(x.shape)
    s.insert(d, 1)
    return Spec(tuple(s), x.dtype)


def _reshape(xp):
    return lambda x, shape: x.reshape(shape)


def _expand(xp):
    if xp is not np:
        return lambda x, shape: xp.broadcast_to(x, shape)
    return _np_expand


def _np_expand(x, shape):
    """np.broadcast_to(x, shape), built directly as a read-only ndarray over x's buffer with
    zero strides on the broadcast dimensions: numpy's own builds an nditer in Python (2 us, as
    much as a 64x64 multiply; a full reduction's gradient is expanded on every backward). An x
    that exports no buffer (not contiguous, e.g. an expand of an expand) takes numpy's path."""
    nd = x.ndim
    lead = len(shape) - nd
    if nd == 0:
        strides = (0,) * lead
    elif lead < 0:  # numpy raises its error, which apply explains with expand's rule
        return np.broadcast_to(x, shape)
    else:
        xshape, xstrides = x.shape, x.strides
        strides = [0] * lead
        for i in range(nd):
            n = xshape[i]
            if n == shape[lead + i]:
                strides.append(xstrides[i])
            elif n == 1:
                strides.append(0)
            else:
                return np.broadcast_to(x, shape)  # raises, as above
    try:
        out = np.ndarray(shape, x.dtype, x, 0, strides)
    except ValueError:  # no contiguous buffer to view
        return np.broadcast_to(x, shape)
    out.setflags(write=False)  # as broadcast_to's: one element seen many times is never written
    return out


def _permute(xp):
    return lambda x, dims: x.transpose(dims)


def _squeeze(xp):
    def squeeze(x, dim=None):
        s = x.shape
        if dim is None:
            return x.reshape(tuple([n for n in s if n != 1]))
        nd = len(s)
        if type(dim) is int and -nd <= dim < nd:  # the common case: one in-range dim
            if dim < 0:
                dim += nd
            return x.reshape(s[:dim] + s[dim + 1:] if s[dim] == 1 else s)
        axes = normalize_dims("squeeze", dim, nd)
        return x.reshape(tuple([n for i, n in enumerate(s) if not (i in axes and n == 1)]))
    return squeeze


def _unsqueeze(xp):
    def unsqueeze(x, dim):
        s = x.shape
        if not -len(s) - 1 <= dim <= len(s):
            raise IndexError("dimension out of range")
        if dim < 0:
            dim += len(s) + 1
        return x.reshape(s[:dim] + (1,) + s[dim:])  # inserting a unit dimension never copies
    return unsqueeze


def _contiguous(xp):
    return lambda x: xp.ascontiguousarray(x)


declare("reshape", ("x",), _reshape, _reshape_rule, attrs=("shape",), kind="reshape", aliases="view")
declare("expand", ("x",), _expand, _expand_rule, attrs=("shape",), kind="view", aliases="view")
declare("permute", ("x",), _permute, _permute_rule, attrs=("dims",), kind="view", aliases="view")
declare("squeeze", ("x",), _squeeze, _squeeze_rule, attrs=("dim",), kind="reshape", aliases="view")
declare("unsqueeze", ("x",), _unsqueeze, _unsqueeze_rule, attrs=("dim",), kind="reshape", aliases="view")
# a C-contiguous input is returned as it is
declare("contiguous", ("x",), _contiguous, lambda x: Spec(x.shape, x.dtype), kind="copy", aliases="may")


# ---------------------------------------------------------------- slicing, diagonals, movement

def _slice_len(n, start, stop, step):
    return len(range(*slice(start, stop, step).indices(n)))


def _slice_rule(x, dim, start, stop, step):
    if not x.shape:
        fail("slice", (x,), "slicing needs at least a 1-d tensor", IndexError)
    d = normalize_dim("slice", dim, len(x.shape))
    if step is None or step <= 0:
        fail("slice", (x,), f"step must be positive, got {step}", ValueError)
    s = list(x.shape)
    s[d] = _slice_len(s[d], start, stop, step)
    return Spec(tuple(s), x.dtype)


def _slice_scatter_rule(x, src, dim, start, stop, step):
    view = _slice_rule(x, dim, start, stop, step)
    if tuple(src.shape) != view.shape:
        fail("slice_scatter", (x, src), f"expected src to have the shape of the slice of input along "
             f"dimension {dim} [{start}:{stop}:{step}], {fmt_shape(view.shape)}")
    return Spec(tuple(x.shape), x.dtype)


def _diag_len(n1, n2, offset):
    return max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))


def _diagonal_rule(x, offset, dim1, dim2):
    nd = len(x.shape)
    if nd < 2:
        fail("diagonal", (x,), "expected a tensor with at least 2 dimensions")
    d1, d2 = normalize_dim("diagonal", dim1, nd), normalize_dim("diagonal", dim2, nd)
    if d1 == d2:
        fail("diagonal", (x,), f"dim1 and dim2 cannot be the same dimension (both are {d1})")
    rest = tuple(n for i, n in enumerate(x.shape) if i != d1 and i != d2)
    return Spec(rest + (_diag_len(x.shape[d1], x.shape[d2], offset),), x.dtype)


def _diagonal_scatter_rule(x, src, offset, dim1, dim2):
    view = _diagonal_rule(x, offset, dim1, dim2)
    if tuple(src.shape) != view.shape:
        fail("diagonal_scatter", (x, src), f"expected src to have the shape of the diagonal "
             f"(offset {offset}, dims {dim1} and {dim2}) of input, {fmt_shape(view.shape)}")
    return Spec(tuple(x.shape), x.dtype)


def _tri_rule(op):
    def rule(x, diagonal):
        if len(x.shape) < 2:
            fail(op, (x,), "expected a tensor with at least 2 dimensions (the last two are the matrix)")
        return Spec(tuple(x.shape), x.dtype)
    return rule


def _flip_rule(x, dims):
    normalize_dims("flip", dims, len(x.shape))
    return Spec(tuple(x.shape), x.dtype)


def _roll_rule(x, shifts, dims):
    if dims is None:
        if not isinstance(shifts, int):
            fail("roll", (x,), f"without dims, shifts must be one int (the flattened tensor is rolled), "
                 f"got {shifts!r}")
    else:
        if isinstance(shifts, int) or isinstance(dims, int) or len(shifts) != len(dims):
            fail("roll", (x,), f"shifts and dims must be tuples of the same length, got shifts={shifts!r} "
                 f"and dims={dims!r}")
        for d in dims:
            normalize_dim("roll", d, len(x.shape))
    return Spec(tuple(x.shape), x.dtype)


def _repeat_rule(x, sizes):
    if len(sizes) < len(x.shape):
        fail("repeat", (x,), f"the number of repeat sizes ({len(sizes)}, {tuple(sizes)}) can not be smaller "
             f"than the number of dimensions of the tensor ({len(x.shape)})")
    if any(s < 0 for s in sizes):
        fail("repeat", (x,), f"repeat sizes must be non-negative, got {tuple(sizes)}")
    padded = (1,) * (len(sizes) - len(x.shape)) + tuple(x.shape)
    return Spec(tuple(r * n for r, n in zip(sizes, padded)), x.dtype)


_ALL = slice(None)


def _slice(xp):
    def slice_(x, dim, start, stop, step):
        if step is None or step <= 0:
            raise ValueError("step must be positive")
        if dim < 0:
            dim += x.ndim
        return x[(_ALL,) * dim + (slice(start, stop, step),)]
    return slice_


def _slice_scatter(xp):
    def slice_scatter(x, src, dim, start, stop, step):
        if step is None or step <= 0:
            raise ValueError("step must be positive")
        if dim < 0:
            dim += x.ndim
        out = x.copy()
        index = (_ALL,) * dim + (slice(start, stop, step),)
        if out[index].shape != src.shape:
            raise ValueError("src does not have the slice's shape")
        out[index] = src
        return out
    return slice_scatter


def _diagonal(xp):
    def diagonal(x, offset, dim1, dim2):
        d = x.diagonal(offset, dim1, dim2)
        if xp is np and x.flags.writeable:
            d.flags.writeable = True  # numpy hands out read-only diagonals; torch's are writable views
        return d
    return diagonal


def _diagonal_scatter(xp):
    def diagonal_scatter(x, src, offset, dim1, dim2):
        out = x.copy()
        d = xp.diagonal(out, offset, dim1, dim2)
        if d.shape != src.shape:
            raise ValueError("src does not have the diagonal's shape")
        if xp is np:
            d.flags.writeable = True
        d[...] = src
        return out
    return diagonal_scatter


def _tri(name):
    def impl(xp):
        f = getattr(xp, name)

        def tri(x, diagonal):
            if x.ndim < 2:
                raise ValueError("expected at least 2 dimensions")
            return f(x, diagonal)
        return tri
    return impl


def _flip(xp):
    def flip(x, dims):
        if x.ndim == 0:
            return x.copy()
        return xp.flip(x, dims).copy()  # torch.flip copies (numpy's flip is a view)
    return flip


def _roll(xp):
    def roll(x, shifts, dims):
        if dims is not None and (isinstance(shifts, int) or len(shifts) != len(dims)):
            raise ValueError("shifts and dims must align")
        return xp.roll(x, shifts, dims)
    return roll


def _repeat(xp):
    def repeat(x, sizes):
        if len(sizes) < x.ndim:
            raise ValueError("fewer repeat sizes than dimensions")
        return xp.tile(x, sizes)
    return repeat


# x[..., start:stop:step] along `dim` (step > 0)
declare("slice", ("x",), _slice, _slice_rule, attrs=("dim", "start", "stop", "step"), kind="view", aliases="view")
# a copy of x with the slice replaced by src
declare("slice_scatter", ("x", "src"), _slice_scatter, _slice_scatter_rule,
        attrs=("dim", "start", "stop", "step"), kind="indexing")
# the diagonal of dims dim1/dim2 moved to the last dimension
declare("diagonal", ("x",), _diagonal, _diagonal_rule, attrs=("offset", "dim1", "dim2"), kind="view", aliases="view")
# a copy of x with the diagonal replaced by src
declare("diagonal_scatter", ("x", "src"), _diagonal_scatter, _diagonal_scatter_rule,
        attrs=("offset", "dim1", "dim2"), kind="indexing")
declare("tril", ("x",), _tri("tril"), _tri_rule("tril"), attrs=("diagonal",), kind="shape")
declare("triu", ("x",), _tri("triu"), _tri_rule("triu"), attrs=("diagonal",), kind="shape")
declare("flip", ("x",), _flip, _flip_rule, attrs=("dims",), kind="copy")     # a copy, like torch.flip
declare("roll", ("x",), _roll, _roll_rule, attrs=("shifts", "dims"), kind="copy")
# torch's Tensor.repeat (numpy's tile): sizes may add leading dimensions
declare("repeat", ("x",), _repeat, _repeat_rule, attrs=("sizes",), kind="copy")
