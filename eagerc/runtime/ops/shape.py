"""Shape and movement primitives. Outputs are views of the input where numpy gives
views (`view=True`: they share the input's version counter)."""
from . import declare
from .meta import Spec, fail, fmt_shape, normalize_dim, normalize_dims


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _reshape_rule(x, shape):
    if _numel(shape) != _numel(x.shape) or any(s < 0 for s in shape):
        fail("reshape", (x,), f"shape {fmt_shape(shape)} is invalid for input of size {_numel(x.shape)}")
    return Spec(tuple(shape), x.dtype)


def _expand_rule(x, shape):
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
    return lambda x, shape: xp.broadcast_to(x, shape)


def _permute(xp):
    return lambda x, dims: x.transpose(dims)


def _squeeze(xp):
    def squeeze(x, dim=None):
        if dim is None:
            return x.reshape(tuple(n for n in x.shape if n != 1))
        axes = normalize_dims("squeeze", dim, x.ndim) if x.ndim else ()
        return x.reshape(tuple(n for i, n in enumerate(x.shape) if not (i in axes and n == 1)))
    return squeeze


def _unsqueeze(xp):
    def unsqueeze(x, dim):
        return xp.expand_dims(x, normalize_dim("unsqueeze", dim, x.ndim + 1))
    return unsqueeze


def _contiguous(xp):
    return lambda x: xp.ascontiguousarray(x)


declare("reshape", ("x",), _reshape, _reshape_rule, attrs=("shape",), view=True)
declare("expand", ("x",), _expand, _expand_rule, attrs=("shape",), view=True)
declare("permute", ("x",), _permute, _permute_rule, attrs=("dims",), view=True)
declare("squeeze", ("x",), _squeeze, _squeeze_rule, attrs=("dim",), view=True)
declare("unsqueeze", ("x",), _unsqueeze, _unsqueeze_rule, attrs=("dim",), view=True)
declare("contiguous", ("x",), _contiguous, lambda x: Spec(x.shape, x.dtype))
