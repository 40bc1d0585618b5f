"""Shape and movement ops: reshape/view, expand, permute, transpose, squeeze, ..."""
from ..autograd.formulas import defgrad
from ..dispatch import apply
from ..runtime.ops import OPS
from ..runtime.ops.meta import fmt_shape, normalize_dim
from .._tensor import Tensor


def _sizes(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    return tuple(int(a) for a in args)


def _infer(op, shape, numel):
    """Resolve one -1 in `shape` from the element count."""
    if -1 not in shape:
        return shape
    if shape.count(-1) > 1:
        raise RuntimeError(f"{op}: only one dimension can be inferred, got shape {list(shape)}")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if known == 0 or numel % known:
        raise RuntimeError(f"{op}: shape {list(shape)} is invalid for input of size {numel}")
    return tuple(numel // known if s == -1 else s for s in shape)


_RESHAPE = OPS["reshape"]


def reshape(input, *shape):
    shape = _infer("reshape", _sizes(shape), input.data.size)
    if shape == input.data.shape:
        return input
    return apply(_RESHAPE, (input,), {"shape": shape})


def view(input, *shape):
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        raise NotImplementedError("view(dtype) (bit reinterpretation) is not supported; use .to(dtype)")
    return reshape(input, *shape)


def expand(input, *sizes):
    sizes = _sizes(sizes)
    nd = input.data.ndim
    lead = len(sizes) - nd
    shape = tuple(input.data.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes))
    if shape == input.data.shape:
        return input
    return apply(OPS["expand"], (input,), {"shape": shape})


def expand_as(input, other):
    return expand(input, tuple(other.data.shape))


def broadcast_to(input, shape):
    return expand(input, tuple(shape))


def permute(input, *dims):
    dims = _sizes(dims)
    nd = input.data.ndim
    if len(dims) != nd:
        raise RuntimeError(f"permute: number of dims {len(dims)} doesn't match the tensor's {nd} dimensions "
                           f"(shape {fmt_shape(input.data.shape)})")
    dims = tuple(normalize_dim("permute", d, nd) for d in dims)
    if dims == tuple(range(nd)):
        return input
    return apply(OPS["permute"], (input,), {"dims": dims})


def transpose(input, dim0, dim1):
    nd = input.data.ndim
    if nd == 0:
        return input
    d0, d1 = normalize_dim("transpose", dim0, nd), normalize_dim("transpose", dim1, nd)
    dims = list(range(nd))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(input, *dims)


swapaxes = swapdims = transpose


def t(input):
    if input.data.ndim > 2:
        raise RuntimeError(f"t: expects a tensor with <= 2 dimensions, but got {input.data.ndim}")
    return transpose(input, 0, 1) if input.data.ndim == 2 else input


def squeeze(input, dim=None):
    if isinstance(dim, list):
        dim = tuple(dim)
    return apply(OPS["squeeze"], (input,), {"dim": dim})


def unsqueeze(input, dim):
    return apply(OPS["unsqueeze"], (input,), {"dim": int(dim)})


def flatten(input, start_dim=0, end_dim=-1):
    nd = input.data.ndim
    if nd == 0:
        return reshape(input, 1)
    s = normalize_dim("flatten", start_dim, nd)
    e = normalize_dim("flatten", end_dim, nd)
    if s > e:
        raise RuntimeError(f"flatten: start_dim {start_dim} cannot come after end_dim {end_dim}")
    shape = input.data.shape
    return reshape(input, shape[:s] + (-1,) + shape[e + 1:]) if shape[s:e + 1] else reshape(input, shape)


def contiguous(input, memory_format=None):
    if input.data.flags.c_contiguous:
        return input
    return apply(OPS["contiguous"], (input,))


defgrad("reshape", lambda g, x_shape: g.reshape(x_shape))
defgrad("expand", lambda g, x_shape: _sum_to(g, x_shape))
defgrad("permute", lambda g, dims: g.permute(*_inverse(dims)))
defgrad("squeeze", lambda g, x_shape: g.reshape(x_shape))
defgrad("unsqueeze", lambda g, x_shape: g.reshape(x_shape))
defgrad("contiguous", lambda g: g)


def _sum_to(g, shape):
    from ..autograd.engine import sum_to
    return sum_to(g, tuple(shape))


def _inverse(dims):
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return inv


_METHODS = {"reshape": reshape, "view": view, "expand": expand, "expand_as": expand_as,
            "broadcast_to": broadcast_to, "permute": permute, "transpose": transpose,
            "swapaxes": swapaxes, "swapdims": swapdims, "t": t, "squeeze": squeeze,
            "unsqueeze": unsqueeze, "flatten": flatten, "contiguous": contiguous,
            "view_as": lambda self, other: reshape(self, tuple(other.data.shape)),
            "reshape_as": lambda self, other: reshape(self, tuple(other.data.shape))}
for _n, _f in _METHODS.items():
    setattr(Tensor, _n, _f)
