"""Shape and movement ops: reshape/view, expand, permute, transpose, squeeze, unsqueeze,
flatten/unflatten, movedim, narrow (a `slice` view), diagonal, tril/triu, flip, roll,
repeat/tile, and the scatter ops that are the derivatives of slice and diagonal.

Every function normalises its arguments (non-negative dims, clamped slice bounds,
tuples) before calling `apply`, so recorded attributes are canonical and JSON-plain.
Derivatives are Tensor ops, so gradients of any order work.
"""
import math

import numpy as np

from ..dispatch import apply  # first: importing autograd before dispatch re-enters eagerc/__init__
from ..autograd.engine import sum_to
from ..autograd.formulas import defgrad
from ..runtime.ops import OPS
from ..runtime.ops.meta import fmt_shape, inverse_permutation, normalize_dim, normalize_dims
from .._tensor import Tensor
from .inplace import inplace_method

__all__ = ["reshape", "expand", "expand_as", "broadcast_to", "permute", "transpose", "swapaxes",
           "swapdims", "t", "squeeze", "unsqueeze", "flatten", "unflatten", "ravel", "contiguous",
           "movedim", "moveaxis", "narrow", "diagonal", "tril", "triu", "flip", "fliplr", "flipud",
           "roll", "tile", "slice_scatter", "diagonal_scatter", "rot90", "diag", "diag_embed",
           "repeat_interleave", "meshgrid"]


def _sizes(args):
    """Sizes given as varargs or one sequence -> a tuple of Python ints."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    for a in args:
        if type(a) is not int:
            return tuple(int(a) for a in args)  # numpy ints, 0-d tensors
    return tuple(args)


def _wrap(op, d, nd):
    """A dim in [-nd, nd) made non-negative; anything else (and 0-d tensors) goes to
    normalize_dim, which raises the IndexError naming the op."""
    if type(d) is int:
        if 0 <= d < nd:
            return d
        if -nd <= d < 0:
            return d + nd
    return normalize_dim(op, d, nd)


def _infer(op, shape, numel):
    """Resolve one -1 in `shape` from the element count."""
    if -1 not in shape:
        return shape
    if shape.count(-1) > 1:
        raise RuntimeError(f"{op}: only one dimension can be inferred, got shape {list(shape)}")
    known = math.prod(s for s in shape if s != -1)
    if known == 0 or numel % known:
        raise RuntimeError(f"{op}: shape {list(shape)} is invalid for input of size {numel}")
    return tuple(numel // known if s == -1 else s for s in shape)


_RESHAPE = OPS["reshape"]
_EXPAND = OPS["expand"]
_PERMUTE = OPS["permute"]
_SQUEEZE = OPS["squeeze"]
_UNSQUEEZE = OPS["unsqueeze"]
_SLICE = OPS["slice"]
_SLICE_SCATTER = OPS["slice_scatter"]
_DIAGONAL = OPS["diagonal"]
_DIAGONAL_SCATTER = OPS["diagonal_scatter"]
_FLIP = OPS["flip"]
_ROLL = OPS["roll"]
_REPEAT = OPS["repeat"]
_TRIL = OPS["tril"]
_TRIU = OPS["triu"]
_IDENTITY = [tuple(range(n)) for n in range(33)]  # identity permutations, by rank


def reshape(input, *shape):
    shape = _infer("reshape", _sizes(shape), input._array.size)
    if shape == input._array.shape:
        return input
    return apply(_RESHAPE, (input,), {"shape": shape})


def view(input, *shape):
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list)) and not hasattr(shape[0], "__index__"):
        raise NotImplementedError("view(dtype) (bit reinterpretation) is not supported; use .to(dtype)")
    d = input._array
    if not d.flags.c_contiguous and type(d) is np.ndarray:
        target = _infer("view", _sizes(shape), d.size)
        try:
            d.reshape(target, copy=False)
        except ValueError:
            raise RuntimeError(
                f"view: size {fmt_shape(target)} is not compatible with the input's shape "
                f"{fmt_shape(d.shape)} and strides {input.stride()} (at least one dimension spans "
                "across two contiguous subspaces); use .reshape(...) instead") from None
    return reshape(input, *shape)


def expand(input, *sizes):
    sizes = _sizes(sizes)
    xshape = input._array.shape
    if -1 in sizes:
        lead = len(sizes) - len(xshape)
        sizes = tuple(xshape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes))
    if sizes == xshape:
        return input
    return apply(_EXPAND, (input,), {"shape": sizes})


def expand_as(input, other):
    return expand(input, tuple(other._array.shape))


def broadcast_to(input, shape):
    return expand(input, tuple(shape))


def permute(input, *dims):
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    nd = input._array.ndim
    if len(dims) != nd:
        raise RuntimeError(f"permute: number of dims {len(dims)} doesn't match the tensor's {nd} dimensions "
                           f"(shape {fmt_shape(input._array.shape)})")
    dims = tuple([_wrap("permute", d, nd) for d in dims])
    if nd < 33 and dims == _IDENTITY[nd]:
        return input
    return apply(_PERMUTE, (input,), {"dims": dims})


def transpose(input, dim0, dim1):
    nd = input._array.ndim
    d0, d1 = _wrap("transpose", dim0, nd), _wrap("transpose", dim1, nd)
    if d0 == d1:
        return input
    dims = list(range(nd))
    dims[d0], dims[d1] = d1, d0
    return apply(_PERMUTE, (input,), {"dims": tuple(dims)})


swapaxes = swapdims = transpose


def t(input):
    nd = input._array.ndim
    if nd > 2:
        raise RuntimeError(f"t: expects a tensor with <= 2 dimensions, but got {nd} "
                           f"(shape {fmt_shape(input._array.shape)}); use .mT or transpose(dim0, dim1)")
    return apply(_PERMUTE, (input,), {"dims": (1, 0)}) if nd == 2 else input


def squeeze(input, dim=None):
    if dim is not None:
        nd = input._array.ndim
        dim = _wrap("squeeze", dim, nd) if isinstance(dim, int) else normalize_dims("squeeze", tuple(dim), nd)
    return apply(_SQUEEZE, (input,), {"dim": dim})


def unsqueeze(input, dim):
    return apply(_UNSQUEEZE, (input,), {"dim": _wrap("unsqueeze", dim, input._array.ndim + 1)})


def flatten(input, start_dim=0, end_dim=-1):
    shape = input._array.shape
    nd = len(shape)
    if nd == 0:
        return reshape(input, 1)
    s = _wrap("flatten", start_dim, nd)
    e = _wrap("flatten", end_dim, nd)
    if s > e:
        raise RuntimeError(f"flatten: start_dim {start_dim} cannot come after end_dim {end_dim} "
                           f"(shape {fmt_shape(shape)})")
    if s == e:
        return input
    return reshape(input, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])


def ravel(input):
    return flatten(input)


def unflatten(input, dim, sizes):
    """Split dimension `dim` into `sizes` (one entry may be -1)."""
    shape = input._array.shape
    if not shape:
        raise RuntimeError(f"unflatten: dimension {dim} specified but the tensor has no dimensions")
    d = _wrap("unflatten", dim, len(shape))
    sizes = _sizes((sizes,) if isinstance(sizes, int) else sizes)
    n = shape[d]
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    if sizes.count(-1) > 1:
        raise RuntimeError(f"unflatten: only one dimension can be inferred, got sizes {sizes}")
    known = math.prod(k for k in sizes if k != -1)
    if -1 in sizes:
        if known == 0 or n % known:
            raise RuntimeError(f"unflatten: sizes {sizes} can't be inferred for dimension {d} of size {n} "
                               f"(input shape {fmt_shape(shape)})")
        sizes = tuple(n // known if k == -1 else k for k in sizes)
    elif known != n or any(k < 0 for k in sizes):
        raise RuntimeError(f"unflatten: sizes {sizes} don't multiply up to the size of dimension {d} ({n}) "
                           f"of the input (shape {fmt_shape(shape)})")
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


def contiguous(input, memory_format=None):
    if input._array.flags.c_contiguous:
        return input
    return apply(OPS["contiguous"], (input,))


def _dim_list(op, dims, nd):
    """int or sequence of dims -> list of non-negative dims, each in range, none repeated."""
    dims = [dims] if isinstance(dims, int) else list(dims)
    out = [_wrap(op, d, nd) for d in dims]
    if len(set(out)) != len(out):
        raise RuntimeError(f"{op}: dimension list {tuple(dims)} repeats a dimension")
    return out


def movedim(input, source, destination):
    """Move dims `source` to positions `destination`; the others keep their order."""
    nd = input._array.ndim
    src = _dim_list("movedim", source, nd)
    dst = _dim_list("movedim", destination, nd)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: source {source} and destination {destination} must name the same "
                           f"number of dimensions (got {len(src)} and {len(dst)})")
    if nd == 0:
        return input
    order = [None] * nd
    for a, b in zip(src, dst):
        order[b] = a
    rest = iter(i for i in range(nd) if i not in src)
    return permute(input, *[next(rest) if o is None else o for o in order])


moveaxis = movedim


def _slice_attrs(op, shape, dim, start, stop, step):
    """The attributes of [start:stop:step] along `dim` (Python slice rules, step > 0), normalised
    (0 <= start <= stop <= size), so recorded graphs are canonical."""
    if not shape:
        raise IndexError(f"{op}: cannot slice a 0-dim tensor")
    d = _wrap(op, dim, len(shape))
    if step is None or step <= 0:
        raise ValueError(f"{op}: step must be positive, got {step}")
    start, stop, step = slice(start, stop, step).indices(shape[d])
    return {"dim": d, "start": start, "stop": max(start, stop), "step": step}


def slice_dim(input, dim, start=None, stop=None, step=1):
    """input[..., start:stop:step] along `dim`: one `slice` view."""
    return apply(_SLICE, (input,), _slice_attrs("slice", input._array.shape, dim, start, stop,
                                                 1 if step is None else step))


def narrow(input, dim, start, length):
    shape = input._array.shape
    if not shape:
        raise RuntimeError("narrow: cannot be applied to a 0-dim tensor")
    d = _wrap("narrow", dim, len(shape))
    n = shape[d]
    start, length = int(start), int(length)
    if not -n <= start <= n:
        raise IndexError(f"narrow: start {start} is out of range for dimension {d} of size {n} "
                         f"(expected to be in range of [{-n}, {n}]; shape {fmt_shape(shape)})")
    if start < 0:
        start += n
    if length < 0:
        raise RuntimeError(f"narrow: length must be non-negative, got {length}")
    if start + length > n:
        raise RuntimeError(f"narrow: start ({start}) + length ({length}) exceeds the size ({n}) of "
                           f"dimension {d} (shape {fmt_shape(shape)})")
    return apply(_SLICE, (input,), {"dim": d, "start": start, "stop": start + length, "step": 1})


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """A copy of `input` whose slice [start:end:step] along `dim` is `src`."""
    attrs = _slice_attrs("slice_scatter", input._array.shape, dim, start, end, step)
    return apply(_SLICE_SCATTER, (input, _like(src, input)), attrs)


def _like(src, input):
    if not isinstance(src, Tensor):
        raise TypeError(f"expected src to be a Tensor, got {type(src).__name__}")
    if src._array.dtype != input._array.dtype:
        from .elementwise import cast
        src = cast(src, input.dtype)
    return src


def _diag_dims(op, input, dim1, dim2):
    shape = input._array.shape
    if len(shape) < 2:
        raise RuntimeError(f"{op}: expected a tensor with at least 2 dimensions, got shape {fmt_shape(shape)}")
    d1, d2 = _wrap(op, dim1, len(shape)), _wrap(op, dim2, len(shape))
    if d1 == d2:
        raise RuntimeError(f"{op}: dim1 and dim2 cannot be the same dimension (both are {d1}; "
                           f"shape {fmt_shape(shape)})")
    return d1, d2


def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal of the (dim1, dim2) matrices, as the last dimension: a view."""
    d1, d2 = _diag_dims("diagonal", input, dim1, dim2)
    return apply(_DIAGONAL, (input,), {"offset": int(offset), "dim1": d1, "dim2": d2})


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    d1, d2 = _diag_dims("diagonal_scatter", input, dim1, dim2)
    return apply(_DIAGONAL_SCATTER, (input, _like(src, input)), {"offset": int(offset), "dim1": d1, "dim2": d2})


def tril(input, diagonal=0):
    return apply(_TRIL, (input,), {"diagonal": int(diagonal)})


def triu(input, diagonal=0):
    return apply(_TRIU, (input,), {"diagonal": int(diagonal)})


def flip(input, *args, dims=None):
    """flip(x, dims) / x.flip(*dims) / x.flip(dims=...): reverse the order along `dims` (a copy,
    like PyTorch)."""
    if dims is None:
        dims = args[0] if len(args) == 1 and not isinstance(args[0], int) else args
    elif args:
        raise TypeError("flip() got multiple values for argument 'dims'")
    elif isinstance(dims, int):
        dims = (dims,)
    nd = input._array.ndim
    dims = normalize_dims("flip", tuple(int(d) for d in dims), nd)
    if nd == 0:
        dims = ()  # a 0-d tensor has nothing to reverse (dim 0 / -1 is still accepted)
    return apply(_FLIP, (input,), {"dims": dims})


def rot90(input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees k times in the plane of `dims`, from the first dim towards the second."""
    nd = input._array.ndim
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"rot90: expected total rotation dims == 2, but got dims = {len(dims)}")
    if nd < 2:
        raise RuntimeError(f"rot90: expected total dims >= 2, but got total dims = {nd}")
    d0, d1 = _wrap("rot90", dims[0], nd), _wrap("rot90", dims[1], nd)
    if d0 == d1:
        raise RuntimeError(f"rot90: expected rotation dims to be different, but got dim0 = {dims[0]} and "
                           f"dim1 = {dims[1]}")
    k = int(k) % 4
    if k == 1:
        return flip(input, (d1,)).transpose(d0, d1)
    if k == 2:
        return flip(input, (d0, d1))
    if k == 3:
        return flip(input, (d0,)).transpose(d0, d1)
    return input.clone()


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Matrices (in dims dim1, dim2 of the result) whose `offset` diagonal is input's last
    dimension, zeros elsewhere: a diagonal_scatter into zeros, so its gradient is a diagonal."""
    shape = tuple(input._array.shape)
    nd = len(shape) + 1
    d1, d2 = _wrap("diag_embed", dim1, nd), _wrap("diag_embed", dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diag_embed: diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = (shape[-1] if shape else 1) + abs(int(offset))
    out_shape = list(shape[:-1])
    for d in sorted((d1, d2)):
        out_shape.insert(d, n)
    from .creation import zeros
    base = zeros(tuple(out_shape), dtype=input.dtype, device=input.device)
    src = input if shape else input.reshape(1)
    return apply(_DIAGONAL_SCATTER, (base, src), {"offset": int(offset), "dim1": d1, "dim2": d2})


def diag(input, diagonal=0):
    """A 1-d input -> the square matrix with it on diagonal `diagonal`; a 2-d input -> that
    diagonal (a copy, as in PyTorch)."""
    nd = input._array.ndim
    if nd == 1:
        return diag_embed(input, diagonal, 0, 1)
    if nd == 2:
        return apply(_DIAGONAL, (input,), {"offset": int(diagonal), "dim1": 0, "dim2": 1}).clone()
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {nd}D")


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each element `repeats` times along `dim` (the flattened input without one).
    `repeats` is an int or a tensor with one count per element; repeat_interleave(counts)
    alone gives the indices arange(len(counts)) repeated by counts."""
    if repeats is None:  # the repeat_interleave(repeats) overload
        from .creation import arange
        counts = input
        if counts._array.ndim > 1:
            raise RuntimeError("repeat_interleave: repeats must be 0-dim or 1-dim tensor")
        return repeat_interleave(arange(counts.numel(), device=counts.device), counts, 0, output_size=output_size)
    if dim is None:
        input, dim = input.reshape(-1), 0
    nd = input._array.ndim
    d = _wrap("repeat_interleave", dim, max(nd, 1)) if nd else 0
    if nd == 0:
        input = input.reshape(1)
    n = input._array.shape[d]
    if isinstance(repeats, Tensor) and repeats._array.ndim == 1 and repeats._array.shape[0] != 1:
        counts = [int(c) for c in repeats.tolist()]  # data-dependent output size: a guard when traced
        if len(counts) != n:
            raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along dim, got "
                               f"{len(counts)} repeats for size {n}")
        if any(c < 0 for c in counts):
            raise RuntimeError("repeat_interleave: repeats can not be negative")
        if output_size is not None and output_size != sum(counts):
            raise RuntimeError(f"repeat_interleave: output_size {output_size} is not the sum of repeats "
                               f"{sum(counts)}")
        from .creation import tensor
        index = tensor(np.repeat(np.arange(n), counts), device=input.device)
        return input.index_select(d, index)
    r = int(repeats.reshape(()).item() if isinstance(repeats, Tensor) else repeats)
    if r < 0:
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    shape = tuple(input._array.shape)
    grown = input.unsqueeze(d + 1).expand(shape[:d + 1] + (r,) + shape[d + 1:])
    return grown.reshape(shape[:d] + (n * r,) + shape[d + 1:])


def meshgrid(*tensors, indexing=None):
    """Coordinate grids: the i-th output holds tensors[i] along its own dimension ('ij'), with
    the first two dimensions swapped for indexing='xy'. The outputs are expanded views."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        import warnings
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
                      "argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"meshgrid: indexing must be one of 'xy' or 'ij', but received: {indexing}")
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t._array.ndim > 1:
            raise RuntimeError(f"meshgrid: Expected 0D or 1D tensor in the tensor list but got a tensor of "
                               f"shape {fmt_shape(t._array.shape)}")
    if len({t._array.dtype for t in tensors}) > 1:
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    axes = list(range(len(tensors)))          # the output dimension each input runs along
    if indexing == "xy" and len(tensors) >= 2:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(tensors)
    for t, a in zip(tensors, axes):
        shape[a] = t.numel()
    out = []
    for t, a in zip(tensors, axes):
        view = [1] * len(tensors)
        view[a] = t.numel()
        out.append(t.reshape(tuple(view)).expand(tuple(shape)))
    return tuple(out)


def fliplr(input):
    if input._array.ndim < 2:
        raise RuntimeError(f"fliplr: expected a tensor with at least 2 dimensions, got shape "
                           f"{fmt_shape(input._array.shape)}")
    return flip(input, (1,))


def flipud(input):
    if input._array.ndim < 1:
        raise RuntimeError("flipud: expected a tensor with at least 1 dimension, got a 0-d tensor")
    return flip(input, (0,))


def roll(input, shifts, dims=None):
    """Shift elements along `dims` with wrap-around; without dims, the flattened tensor is rolled."""
    nd = input._array.ndim
    if dims is None:
        if not isinstance(shifts, int):
            shifts = tuple(shifts)
            if len(shifts) != 1:
                raise RuntimeError(f"roll: without dims, shifts must be a single int, got {shifts}")
            shifts = shifts[0]
        return apply(_ROLL, (input,), {"shifts": int(shifts), "dims": None})
    shifts = (int(shifts),) if isinstance(shifts, int) else tuple(int(s) for s in shifts)
    dims = (int(dims),) if isinstance(dims, int) else tuple(int(d) for d in dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll: shifts and dims must align, got {len(shifts)} shifts {shifts} and "
                           f"{len(dims)} dims {dims}")
    dims = tuple([_wrap("roll", d, nd) for d in dims])
    if nd == 0:
        return apply(_ROLL, (input,), {"shifts": 0, "dims": None})
    return apply(_ROLL, (input,), {"shifts": shifts, "dims": dims})


def repeat(input, *sizes):
    """Tensor.repeat: tile the tensor `sizes` times (sizes may add leading dimensions)."""
    return apply(_REPEAT, (input,), {"sizes": _sizes(sizes)})


def tile(input, *dims):
    dims = _sizes(dims)
    nd = input._array.ndim
    if len(dims) < nd:
        dims = (1,) * (nd - len(dims)) + dims
    return apply(_REPEAT, (input,), {"sizes": dims})


# ---------------------------------------------------------------- derivatives

def _zeros(shape, like):
    from .creation import zeros
    return zeros(tuple(shape), dtype=like.dtype, device=like.device)


def _repeat_grad(g, x_shape, sizes):
    lead = len(sizes) - len(x_shape)
    padded = (1,) * lead + tuple(x_shape)
    split = []
    for r, n in zip(sizes, padded):
        split += [r, n]
    if split:
        g = g.reshape(split).sum(dim=tuple(range(0, len(split), 2)))
    return g.reshape(tuple(x_shape))


defgrad("reshape", lambda g, x_shape: g.reshape(x_shape))
defgrad("expand", lambda g, x_shape: sum_to(g, tuple(x_shape)))
defgrad("permute", lambda g, dims: g.permute(*inverse_permutation(dims)))
defgrad("squeeze", lambda g, x_shape: g.reshape(x_shape))
defgrad("unsqueeze", lambda g, x_shape: g.reshape(x_shape))
defgrad("contiguous", lambda g: g)
defgrad("slice",
        lambda g, x_shape, dim, start, stop, step: apply(
            _SLICE_SCATTER, (_zeros(x_shape, g), g), {"dim": dim, "start": start, "stop": stop, "step": step}))
defgrad("slice_scatter",
        lambda g, src_shape, dim, start, stop, step: apply(
            _SLICE_SCATTER, (g, _zeros(src_shape, g)), {"dim": dim, "start": start, "stop": stop, "step": step}),
        lambda g, dim, start, stop, step: apply(
            _SLICE, (g,), {"dim": dim, "start": start, "stop": stop, "step": step}))
defgrad("diagonal",
        lambda g, x_shape, offset, dim1, dim2: apply(
            _DIAGONAL_SCATTER, (_zeros(x_shape, g), g), {"offset": offset, "dim1": dim1, "dim2": dim2}))
defgrad("diagonal_scatter",
        lambda g, src_shape, offset, dim1, dim2: apply(
            _DIAGONAL_SCATTER, (g, _zeros(src_shape, g)), {"offset": offset, "dim1": dim1, "dim2": dim2}),
        lambda g, offset, dim1, dim2: apply(_DIAGONAL, (g,), {"offset": offset, "dim1": dim1, "dim2": dim2}))
defgrad("tril", lambda g, diagonal: apply(_TRIL, (g,), {"diagonal": diagonal}))
defgrad("triu", lambda g, diagonal: apply(_TRIU, (g,), {"diagonal": diagonal}))
defgrad("flip", lambda g, dims: apply(_FLIP, (g,), {"dims": dims}))
defgrad("roll", lambda g, shifts, dims: apply(_ROLL, (g,), {
    "shifts": -shifts if dims is None else tuple(-s for s in shifts), "dims": dims}))
defgrad("repeat", _repeat_grad)


# every function above is a Tensor method too, but meshgrid
_METHODS = {n: globals()[n] for n in __all__ if n != "meshgrid"}
_METHODS.update(view=view, repeat=repeat, tril_=inplace_method(tril, "tril_"), triu_=inplace_method(triu, "triu_"),
                view_as=lambda self, other: reshape(self, tuple(other._array.shape)),
                reshape_as=lambda self, other: reshape(self, tuple(other._array.shape)))
for _n, _f in _METHODS.items():
    setattr(Tensor, _n, _f)
