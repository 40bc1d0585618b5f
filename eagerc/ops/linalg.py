"""Linear algebra: matmul (and its stricter spellings mm, bmm, mv, dot), outer,
einsum, the `@` operator, and `eagerc.linalg` (norm, vector_norm, matrix_norm).

matmul and einsum are primitives (runtime/ops/linalg.py); everything else is built
from them. Operands of different dtypes are cast to their common dtype first
(PyTorch's promotion rules, like the elementwise ops). Derivatives are written
with Tensor ops, so they differentiate again (second derivatives, traced backward).
"""
import math

import numpy as np

from ..autograd.engine import _saved_input, sum_to
from ..autograd.formulas import defgrad, defgrad_node
from ..dispatch import apply, modes
from ..runtime.ops import OPS
from ..runtime.ops import linalg as rules
from ..runtime.ops.meta import Spec, normalize_dims
from ..runtime import dtypes
from .._tensor import Tensor
from .elementwise import result_dtype, cast
from . import reduction
from .inplace import inplace_method
from ..amp.autocast_mode import autocast_op

__all__ = ["matmul", "mm", "bmm", "mv", "dot", "inner", "outer", "ger", "einsum", "kron", "addmm", "cross",
           "cdist"]

_MATMUL = OPS["matmul"]
_EINSUM = OPS["einsum"]


def _spec(x):
    return Spec(tuple(x._array.shape), dtypes.from_np(x._array.dtype))


def _check_tensors(op, *xs):
    for x in xs:
        if not isinstance(x, Tensor):
            raise TypeError(f"{op}: expected Tensor operands, got {type(x).__name__}")


def _promoted(op, xs):
    """Operands cast to their common dtype; bool is refused (no boolean matmul)."""
    d = result_dtype(*xs)
    if d is dtypes.bool:
        raise TypeError(f"{op}: expected numeric tensors, got bool (convert with .float() or .long() first)")
    return tuple(x if x._array.dtype == d.np else cast(x, d) for x in xs)


# ---------------------------------------------------------------- matmul family

def matmul(input, other):
    """Matrix product with PyTorch semantics: 1-d operands are vectors, batch dims broadcast."""
    if isinstance(input, Tensor) and isinstance(other, Tensor) and input._array.dtype is other._array.dtype \
            and input._array.dtype.kind == "f" and modes().autocast is None:
        return apply(_MATMUL, (input, other))  # the common case: straight to np.matmul
    return _promoted_matmul("matmul", input, other)


@autocast_op("matmul")   # under autocast the inputs are cast here, so a bfloat16 product takes the path below
def _promoted_matmul(name, input, other):
    _check_tensors(name, input, other)
    a, b = _promoted(name, (input, other))
    if a._array.dtype.kind == "V":
        # bfloat16: the matmul kernel is np.matmul itself, which makes float32 of it; so the
        # product is a float32 matmul rounded once to bfloat16, as PyTorch's bfloat16 matmul
        # (float32 accumulation) -- three ops in a traced graph, one rounding
        return cast(apply(_MATMUL, (cast(a, dtypes.float32), cast(b, dtypes.float32))), a.dtype)
    return apply(_MATMUL, (a, b))


def _strict(name, rule, ok):
    """mm/bmm/mv/dot: matmul after the op's own rank check (which names the op)."""
    def f(input, other):
        _check_tensors(name, input, other)
        if not ok(input._array.shape, other._array.shape):
            rule(_spec(input), _spec(other))  # raises the op's own error
        return _promoted_matmul(name, input, other)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = rule.__doc__
    return f


mm = _strict("mm", rules.mm_rule, lambda a, b: len(a) == 2 and len(b) == 2 and a[1] == b[0])
bmm = _strict("bmm", rules.bmm_rule,
              lambda a, b: len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1])
mv = _strict("mv", rules.mv_rule, lambda a, b: len(a) == 2 and len(b) == 1 and a[1] == b[0])
dot = _strict("dot", rules.dot_rule, lambda a, b: len(a) == 1 and len(b) == 1 and a[0] == b[0])


def inner(input, other):
    """Sum of products over the last dimension (a 0-d operand multiplies)."""
    _check_tensors("inner", input, other)
    if input._array.ndim == 0 or other._array.ndim == 0:
        return input * other
    # a (A..., k), b (B..., k) -> (A..., B...): each operand gets its own letters
    la, lb = "abcdefghij"[:input._array.ndim - 1], "lmnopqrstu"[:other._array.ndim - 1]
    return einsum(f"{la}k,{lb}k->{la}{lb}", input, other)


def outer(input, vec2):
    """The outer product of two 1-d vectors: out[i, j] = input[i] * vec2[j]."""
    _check_tensors("outer", input, vec2)
    if input._array.ndim != 1 or vec2._array.ndim != 1:
        rules.outer_rule(_spec(input), _spec(vec2))
    return input.reshape(-1, 1) * vec2


ger = outer


def kron(input, other):
    """The Kronecker product: blocks other * input[i, j, ...], for operands of any rank."""
    _check_tensors("kron", input, other)
    nd = max(input._array.ndim, other._array.ndim)
    a_shape = (1,) * (nd - input._array.ndim) + tuple(input._array.shape)
    b_shape = (1,) * (nd - other._array.ndim) + tuple(other._array.shape)
    a = input.reshape(tuple(n for m in a_shape for n in (m, 1)))   # (a1, 1, a2, 1, ...)
    b = other.reshape(tuple(n for m in b_shape for n in (1, m)))   # (1, b1, 1, b2, ...)
    return (a * b).reshape(tuple(m * n for m, n in zip(a_shape, b_shape)))


@autocast_op("addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """beta * input + alpha * (mat1 @ mat2); with beta = 0 input is ignored (nan and inf too)."""
    _check_tensors("addmm", input, mat1, mat2)
    product = mm(mat1, mat2)  # noqa: F821  (mm checks that both are matrices)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product.expand(tuple(np.broadcast_shapes(input._array.shape, product._array.shape)))
    return (input if beta == 1 else input * beta) + product


def linalg_cross(input, other, *, dim=-1):
    """The cross product of 3-vectors along `dim`; the operands broadcast."""
    _check_tensors("linalg.cross", input, other)
    if input._array.ndim != other._array.ndim:
        raise RuntimeError(f"linalg.cross: inputs must have the same number of dimensions, got shapes "
                           f"{tuple(input._array.shape)} and {tuple(other._array.shape)}")
    shape = tuple(np.broadcast_shapes(input._array.shape, other._array.shape))
    d = normalize_dims("linalg.cross", dim, len(shape))[0]
    if input._array.shape[d - len(shape)] != 3 or other._array.shape[d - len(shape)] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{input._array.shape[d - len(shape)]} and {other._array.shape[d - len(shape)]}")
    a, b = input.expand(shape), other.expand(shape)
    # (a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0): each component from the next two, cyclically
    return a.roll(-1, d) * b.roll(-2, d) - a.roll(-2, d) * b.roll(-1, d)


def cross(input, other, dim=None):
    """torch.cross: linalg.cross along `dim`; without dim, the first dimension of size 3 (deprecated
    in PyTorch, which warns, as here)."""
    if dim is None:
        import warnings
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated. Please either pass "
                      "the dim explicitly or simply use torch.linalg.cross.", UserWarning, stacklevel=2)
        shape = np.broadcast_shapes(input._array.shape, other._array.shape)
        dim = next((i for i, n in enumerate(shape) if n == 3), None)
        if dim is None:
            raise RuntimeError(f"cross: no dimension of size 3 in input (shape {tuple(shape)})")
    return linalg_cross(input, other, dim=dim)


_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


@autocast_op("cdist")
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """p-norm distances between the rows of x1 (..., P, M) and of x2 (..., R, M): (..., P, R).
    For p = 2 and many rows (or compute_mode 'use_mm_for_euclid_dist') it uses PyTorch's matrix
    product form |a|^2 + |b|^2 - 2 a.b (fast, less exact for near points); else the norm of the
    differences. Zero distances have a zero gradient."""
    _check_tensors("cdist", x1, x2)
    if x1._array.ndim < 2 or x2._array.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1._array.ndim}D, "
                           f"X2 got: {x2._array.ndim}D")
    if x1._array.shape[-1] != x2._array.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1._array.shape[-1]} "
                           f"X2: {x2._array.shape[-1]}")
    if not (x1.dtype.is_floating_point and x2.dtype.is_floating_point):
        raise RuntimeError(f"cdist only supports floating-point dtypes, X1 got: {x1.dtype.name}, "
                           f"X2 got: {x2.dtype.name}")
    if p < 0:
        raise RuntimeError(f"cdist only supports non-negative p values, got {p}")
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    rows = max(x1._array.shape[-2], x2._array.shape[-2])
    if p == 2 and (compute_mode == _CDIST_MODES[1] or (compute_mode == _CDIST_MODES[0] and rows > 25)):
        x1, x2 = _promoted("cdist", (x1, x2))
        square = (x1 * x1).sum(-1, keepdim=True) + _mT((x2 * x2).sum(-1, keepdim=True)) - 2 * (x1 @ _mT(x2))
        return reduction._zero_safe_sqrt(square.clamp_min(0.0))
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)   # (..., P, R, M)
    return reduction.vector_norm(diff, p, -1, op="cdist")


# ---------------------------------------------------------------- einsum

def einsum(equation, *operands):
    """einsum('bij,bjk->bik', a, b); operands may also be passed as one list."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    _check_tensors("einsum", *operands)
    if not operands:
        raise RuntimeError("einsum: expected at least one operand")
    operands = _promoted("einsum", operands)
    canonical = rules.canonical_einsum(equation, [x._array.shape for x in operands], diagonals=True)
    ins, out = rules.split_einsum(canonical)
    if any(len(set(sub)) != len(sub) for sub in ins):
        operands, ins = zip(*(_take_diagonals(x, sub, equation, i) for i, (x, sub) in enumerate(zip(operands, ins))))
        canonical = ",".join(ins) + "->" + out
    return apply(_EINSUM, tuple(operands), {"equation": canonical})


def _take_diagonals(x, sub, equation, i):
    """An operand whose subscripts repeat a label ('ii', 'bii') -> its diagonal over those
    dimensions and subscripts naming each label once ('i', 'bi'), as PyTorch reads them."""
    while len(set(sub)) != len(sub):
        c = next(c for c in sub if sub.count(c) > 1)
        d1 = sub.index(c)
        d2 = sub.index(c, d1 + 1)
        n1, n2 = x._array.shape[d1], x._array.shape[d2]
        if n1 != n2:
            raise RuntimeError(f"einsum: equation {equation!r}: subscript {c!r} repeats in operand {i} with "
                               f"sizes {n1} and {n2}; a repeated subscript takes a diagonal, whose sizes must match")
        x = x.diagonal(0, d1, d2)  # the diagonal becomes the last dimension
        sub = sub[:d1] + sub[d1 + 1:d2] + sub[d2 + 1:] + c
    return x, sub


# ---------------------------------------------------------------- derivatives

def _mT(x):
    return x.transpose(-2, -1)


def _as_matrices(a_shape, b_shape, g):
    """View 1-d operands of matmul as matrices (1 x k and k x 1), and g to match."""
    if len(a_shape) == 1:
        g = g.unsqueeze(-2)
    if len(b_shape) == 1:
        g = g.unsqueeze(-1)
    return g


def _matmul_grad_a(g, b, a_shape):
    b_shape = tuple(b._array.shape)
    if len(a_shape) == 2 and len(b_shape) == 2:  # the common case: one matmul
        return matmul(g, _mT(b))
    if len(a_shape) == 1 and len(b_shape) == 1:  # dot
        return g * b
    g2 = _as_matrices(a_shape, b_shape, g)
    b2 = b.unsqueeze(-1) if len(b_shape) == 1 else b
    ga = matmul(g2, _mT(b2))                        # (batch..., m, k)
    a2_shape = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    return sum_to(ga, a2_shape).reshape(a_shape)    # sum the broadcast batch away


def _matmul_grad_b(g, a, b_shape):
    a_shape = tuple(a._array.shape)
    if len(a_shape) == 2 and len(b_shape) == 2:
        return matmul(_mT(a), g)
    if len(a_shape) == 1 and len(b_shape) == 1:
        return g * a
    g2 = _as_matrices(a_shape, b_shape, g)
    a2 = a.unsqueeze(0) if len(a_shape) == 1 else a
    b2_shape = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    if len(b2_shape) == 2 and a2._array.ndim > 2:
        # x (batch..., m, k) @ W (k, n), the Linear layer pattern: fold the batch into m
        # and do one (k, batch*m) @ (batch*m, n) product instead of a batch of them
        k, n = b2_shape
        gb = matmul(_mT(a2.reshape(-1, k)), g2.reshape(-1, n))
        return gb.reshape(b_shape)
    gb = matmul(_mT(a2), g2)                        # (batch..., k, n)
    return sum_to(gb, b2_shape).reshape(b_shape)


defgrad("matmul", _matmul_grad_a, _matmul_grad_b)


def _einsum_grad(node, g):
    """d/d(operand i): einsum of g with the other operands, producing operand i's labels."""
    ins, out = rules.split_einsum(node.attrs["equation"])
    xs = [_saved_input(node, i) for i in range(len(ins))]
    grads = []
    for i, sub in enumerate(ins):
        if node.next[i] is None:
            grads.append(None)
            continue
        others = [j for j in range(len(ins)) if j != i]
        present = set(out).union(*(ins[j] for j in others))
        keep = "".join(c for c in sub if c in present)  # labels summed in operand i alone are lost
        if not others and keep == out:
            r = g
        else:
            eq = ",".join([out] + [ins[j] for j in others]) + "->" + keep
            r = apply(_EINSUM, (g,) + tuple(xs[j] for j in others), {"equation": eq})
        grads.append(_fit(r, sub, keep, tuple(xs[i]._array.shape)))
    return grads


def _fit(r, sub, keep, shape):
    """Shape a gradient over labels `keep` to an operand with labels `sub` and `shape`."""
    full = tuple(r._array.shape[keep.index(c)] if c in keep else 1 for c in sub)
    if full != tuple(r._array.shape):
        r = r.reshape(full)
    summed = tuple(d for d, (n, m) in enumerate(zip(shape, full)) if n == 1 and m != 1)
    if summed:  # the operand was broadcast along these labels
        r = r.sum(summed, keepdim=True)
    return r.expand(shape)


defgrad_node("einsum", _einsum_grad, saves_inputs=True)


# ---------------------------------------------------------------- eagerc.linalg

def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """torch.linalg.vector_norm: the ord-norm of x over `dim` (all elements if None)."""
    return reduction.vector_norm(x, ord, dim, keepdim, dtype=dtype, op="linalg.vector_norm")


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """torch.linalg.matrix_norm for ord 'fro', 1, -1, inf, -inf over the two dims `dim`."""
    if dtype is not None:
        A = cast(A, dtype)
    if A._array.ndim < 2:
        raise RuntimeError(f"linalg.matrix_norm: the input tensor A must have at least 2 dimensions, "
                           f"got shape {tuple(A._array.shape)}")
    dim = tuple(dim) if isinstance(dim, (tuple, list)) else dim
    if not isinstance(dim, tuple) or len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple of ints, got {dim!r}")
    d0, d1 = normalize_dims("linalg.matrix_norm", dim[0], A._array.ndim)[0], \
        normalize_dims("linalg.matrix_norm", dim[1], A._array.ndim)[0]
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different, got {dim!r}")
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        raise NotImplementedError(f"linalg.matrix_norm: ord={ord!r} needs singular values (an SVD), "
                                  "which eagerc does not implement; ord may be 'fro', 1, -1, inf or -inf")
    if ord not in (1, -1, math.inf, -math.inf):
        raise RuntimeError(f"linalg.matrix_norm: order {ord!r} not supported "
                           "(expected 'fro', 'nuc', 1, -1, 2, -2, inf or -inf)")
    if not A.dtype.is_floating_point:
        raise RuntimeError(f"linalg.matrix_norm: expected a floating point tensor, got {A.dtype.name}")
    # ord +-1: max/min column sum (sum over the rows d0); ord +-inf: max/min row sum
    summed, kept = (d0, d1) if ord in (1, -1) else (d1, d0)
    sums = A.abs().sum(summed, keepdim=True)
    out = sums.amax(kept, keepdim=True) if ord > 0 else sums.amin(kept, keepdim=True)
    return out if keepdim else out.squeeze((d0, d1))


def _linalg_norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """torch.linalg.norm: a vector norm for an int dim (or ord None, dim None), else a matrix norm."""
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None:
        dim = tuple(dim)
        if len(dim) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if A._array.ndim == 1:
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    if A._array.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    raise RuntimeError(f"linalg.norm: if dim is not given, the input must be 1-d or 2-d when ord is "
                       f"given, got shape {tuple(A._array.shape)}")


# ---------------------------------------------------------------- Tensor methods and operators

Tensor.__matmul__ = matmul
Tensor.__rmatmul__ = lambda self, other: matmul(other, self)
for _n in ("matmul", "mm", "bmm", "mv", "dot", "inner", "outer", "ger", "kron", "addmm", "cross"):
    setattr(Tensor, _n, globals()[_n])
Tensor.addmm_ = inplace_method(addmm, "addmm_")
