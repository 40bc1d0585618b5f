"""Joining primitives: cat and stack. Both are variadic (any number of tensor inputs,
all of one dtype: the frontend promotes and casts first, like torch.cat).

Splitting (split, chunk, unbind, tensor_split) needs no primitive of its own: each
piece is a `slice` view (runtime/ops/shape.py).
"""
from . import declare
from .meta import Spec, fail, fmt_shape, normalize_dim


def _same_dtype(op, specs):
    d = specs[0].dtype
    for s in specs[1:]:
        if s.dtype is not d:
            fail(op, specs, f"expected all tensors to have one dtype (the caller promotes them first); "
                 f"got {d.name} and {s.dtype.name}", TypeError)
    return d


def _cat_rule(*xs, dim):
    if not xs:
        raise RuntimeError("cat: expected a non-empty list of tensors")
    for i, x in enumerate(xs):
        if not isinstance(x, Spec):
            fail("cat", xs, f"expected tensors only, got {type(x).__name__} at position {i}", TypeError)
        if not x.shape:
            fail("cat", xs, f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    first = xs[0].shape
    nd = len(first)
    d = normalize_dim("cat", dim, nd)
    total = 0
    for i, x in enumerate(xs):
        if len(x.shape) != nd:
            raise RuntimeError(
                f"cat: expected all tensors to have the same number of dimensions; got {fmt_shape(first)} "
                f"and {fmt_shape(x.shape)} (tensor {i} is {len(x.shape)}-d, tensor 0 is {nd}-d)")
        for k in range(nd):
            if k != d and x.shape[k] != first[k]:
                raise RuntimeError(
                    f"cat: expected all tensors to have the same shape except in dimension {d}; got "
                    f"{fmt_shape(first)} and {fmt_shape(x.shape)} (tensor {i} has size {x.shape[k]} instead "
                    f"of {first[k]} in dimension {k})")
        total += x.shape[d]
    dtype = _same_dtype("cat", xs)
    return Spec(first[:d] + (total,) + first[d + 1:], dtype)


def _stack_rule(*xs, dim):
    if not xs:
        raise RuntimeError("stack: expected a non-empty list of tensors")
    for i, x in enumerate(xs):
        if not isinstance(x, Spec):
            fail("stack", xs, f"expected tensors only, got {type(x).__name__} at position {i}", TypeError)
    first = tuple(xs[0].shape)
    d = normalize_dim("stack", dim, len(first) + 1)
    for i, x in enumerate(xs):
        if tuple(x.shape) != first:
            fail("stack", xs, f"expected each tensor to be equal size, but got {fmt_shape(first)} at entry 0 "
                 f"and {fmt_shape(x.shape)} at entry {i}")
    dtype = _same_dtype("stack", xs)
    return Spec(first[:d] + (len(xs),) + first[d:], dtype)


def _cat(xp):
    """The joined array in C order, as torch.cat returns it. numpy's concatenate instead keeps
    its inputs' stride order: attention's backward joins dq, dk, dv as head-major permuted
    views, and the (B, T, 3H, D) result came back head-major, so the reshape to (B, T, 3C)
    that reads it (passes/layout.py's premise: a view) copied all of it a second time (two
    ~37 us copies per layer of the GPT benchmark's step)."""
    concatenate, empty, result_type = xp.concatenate, xp.empty, xp.result_type

    def cat(*xs, dim):
        for x in xs:
            if not x.flags.c_contiguous:
                break
        else:
            return concatenate(xs, axis=dim)      # C-ordered inputs give a C-ordered result
        shape = list(xs[0].shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        return concatenate(xs, axis=dim, out=empty(shape, result_type(*xs)))  # concatenate's own dtype
    return cat


def _stack(xp):
    stack_ = xp.stack

    def stack(*xs, dim):
        return stack_(xs, axis=dim)
    return stack


# concatenate any number of tensors of one dtype along `dim`
declare("cat", ("tensors",), _cat, _cat_rule, attrs=("dim",), kind="shape")
# stack any number of same-shape tensors of one dtype along a new dimension `dim`
declare("stack", ("tensors",), _stack, _stack_rule, attrs=("dim",), kind="shape")
