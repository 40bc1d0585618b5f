"""Shape/dtype rules shared by the op declarations.

A rule takes one `Spec` per tensor input (Python scalars stay scalars) plus the
op's attributes, and returns the output `Spec` -- or raises an error that names
the op, each input's shape and dtype, and what was expected. Eager mode only calls
a rule when a kernel fails (to explain why); the tracer and the file loader call
them always.
"""
from collections import namedtuple

from ...runtime import dtypes

Spec = namedtuple("Spec", ["shape", "dtype"])


def fmt_shape(shape):
    return "(" + "x".join(str(s) for s in shape) + ")" if shape else "()"


def describe(specs):
    parts = []
    for s in specs:
        if isinstance(s, Spec):
            parts.append(f"{fmt_shape(s.shape)} {s.dtype.name}")
        else:
            parts.append(f"scalar {s!r}")
    return ", ".join(parts)


def fail(op, specs, expected, exc=RuntimeError):
    raise exc(f"{op}: got {describe(specs)}; {expected}")


def broadcast_shapes(op, specs):
    shapes = [s.shape for s in specs if isinstance(s, Spec)]
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, n in enumerate(shape, ndim - len(shape)):
            if n != 1:
                if out[i] != 1 and out[i] != n:
                    fail(op, specs, f"shapes are not broadcastable: size {out[i]} vs {n} at dimension {i - ndim}")
                out[i] = n
    return tuple(out)


def promoted(specs):
    dims = [s.dtype for s in specs if isinstance(s, Spec) and s.shape]
    zero = [s.dtype for s in specs if isinstance(s, Spec) and not s.shape]
    scalars = [s for s in specs if not isinstance(s, Spec)]
    return dtypes.result_type(dims, zero, scalars)


def normalize_dims(op, dim, ndim):
    """dim (None, int or tuple, negatives allowed) -> sorted tuple of axes."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = []
    for d in dims:
        lo = -max(ndim, 1)
        if not lo <= d < max(ndim, 1):
            raise IndexError(f"{op}: dimension {d} is out of range for a {ndim}-d tensor "
                             f"(expected to be in range of [{lo}, {max(ndim, 1) - 1}])")
        out.append(d % max(ndim, 1))
    if len(set(out)) != len(out):
        raise RuntimeError(f"{op}: dimension list {dims} repeats a dimension")
    return tuple(sorted(out))


def normalize_dim(op, dim, ndim):
    return normalize_dims(op, int(dim), ndim)[0]


def inverse_permutation(dims):
    """The permutation that undoes permute(dims) (dims non-negative, or negative counted from the end)."""
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d % len(dims)] = i
    return inv


def reduced_shape(shape, axes, keepdim):
    if keepdim:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)
