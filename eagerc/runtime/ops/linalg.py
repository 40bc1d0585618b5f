"""Linear algebra primitives: matmul and einsum.

`matmul` follows PyTorch (and numpy): 1-d operands are vectors (vector @ matrix,
matrix @ vector, vector @ vector = dot), leading dimensions broadcast as a batch.
The kernel is `xp.matmul` itself (BLAS on the CPU, cuBLAS through cupy), so the
common 2-d case costs numpy's matmul and nothing else. mm, bmm, dot and mv are
frontend spellings of matmul that first check their stricter rank rules
(`mm_rule`, `bmm_rule`, ... below), so a traced graph holds one matmul node.

`einsum` takes its equation as an attribute. The frontend canonicalises it
(`canonical_einsum`): explicit output, every ellipsis replaced by letters, so the
rule, the kernel and the derivative read one simple form. Each label names one
dimension per operand; sizes must agree or be 1 (broadcast). A label repeated
inside one operand (diagonals, traces) is rejected.

Type promotion is settled by the frontend (it inserts `cast` nodes): the rules
here expect operands of one numeric dtype.
"""
import math
import string

import numpy as np

from ...runtime import dtypes
from . import Flops, declare
from .meta import Spec, fmt_shape

__all__ = ["array_matmul", "matmul_rule", "mm_rule", "bmm_rule", "dot_rule", "mv_rule", "outer_rule",
           "canonical_einsum", "einsum_rule"]


# ---------------------------------------------------------------- dtypes

def _common_dtype(op, specs):
    """The one dtype of the operands; bool and mixed dtypes are errors."""
    first = specs[0].dtype
    for s in specs:
        if s.dtype is dtypes.bool:
            raise TypeError(f"{op}: expected numeric tensors, got a bool tensor of shape "
                            f"{fmt_shape(s.shape)} (convert it with .float() or .long() first)")
        if s.dtype is not first:
            raise TypeError(f"{op}: expected operands of one dtype, got "
                            f"{', '.join(x.dtype.name for x in specs)} "
                            f"(the frontend casts them to their common dtype first)")
    return first


def _spec_or_type_error(op, x, what):
    if not isinstance(x, Spec):
        raise TypeError(f"{op}: expected a tensor for {what}, got {type(x).__name__} {x!r}")


# ---------------------------------------------------------------- matmul

def _broadcast_batch(op, a, b):
    """Broadcast the batch (all but the last two) dimensions of a and b."""
    ba, bb = a[:-2], b[:-2]
    n = max(len(ba), len(bb))
    pa, pb = (1,) * (n - len(ba)) + ba, (1,) * (n - len(bb)) + bb
    out = []
    for i, (x, y) in enumerate(zip(pa, pb)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(
                f"{op}: cannot broadcast the batch dimensions {fmt_shape(ba)} of {fmt_shape(a)} "
                f"and {fmt_shape(bb)} of {fmt_shape(b)}: sizes {x} and {y} differ at batch "
                f"dimension {i - n}")
        out.append(y if x == 1 else x)
    return tuple(out)


def matmul_rule(a, b):
    """Shape/dtype rule of matmul, with PyTorch's handling of 1-d operands."""
    _spec_or_type_error("matmul", a, "input")
    _spec_or_type_error("matmul", b, "other")
    sa, sb = tuple(a.shape), tuple(b.shape)
    if not sa or not sb:
        raise RuntimeError(f"matmul: both arguments need at least 1 dimension, but got "
                           f"{fmt_shape(sa)} and {fmt_shape(sb)} (use * to multiply by a 0-d tensor)")
    k_a = sa[-1]
    k_b = sb[-2] if len(sb) >= 2 else sb[0]
    if k_a != k_b:
        raise RuntimeError(f"matmul: cannot multiply {fmt_shape(sa)} by {fmt_shape(sb)}: "
                           f"inner sizes {k_a} and {k_b} differ")
    dtype = _common_dtype("matmul", (a, b))
    # a 1-d operand gets a dimension for the product (1 x k or k x 1) that the result drops
    a2 = sa if len(sa) >= 2 else (1,) + sa
    b2 = sb if len(sb) >= 2 else sb + (1,)
    shape = _broadcast_batch("matmul", a2, b2)
    if len(sa) >= 2:
        shape += (sa[-2],)
    if len(sb) >= 2:
        shape += (sb[-1],)
    return Spec(shape, dtype)


def _inner(op, sa, sb, k_a, k_b):
    if k_a != k_b:
        raise RuntimeError(f"{op}: cannot multiply {fmt_shape(sa)} by {fmt_shape(sb)}: "
                           f"inner sizes {k_a} and {k_b} differ")


def _ranks(op, a, b, na, nb, what):
    if len(a.shape) != na or len(b.shape) != nb:
        raise RuntimeError(f"{op}: expected {what}, got {fmt_shape(a.shape)} ({len(a.shape)}-d) "
                           f"and {fmt_shape(b.shape)} ({len(b.shape)}-d)")


def mm_rule(a, b):
    """mm: two matrices, no broadcasting."""
    _ranks("mm", a, b, 2, 2, "two 2-d matrices")
    _inner("mm", a.shape, b.shape, a.shape[1], b.shape[0])
    return matmul_rule(a, b)


def bmm_rule(a, b):
    """bmm: two 3-d batches of matrices with the same batch size, no broadcasting."""
    _ranks("bmm", a, b, 3, 3, "two 3-d batches of matrices")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm: batch sizes {a.shape[0]} and {b.shape[0]} differ "
                           f"({fmt_shape(a.shape)} and {fmt_shape(b.shape)}); bmm does not broadcast, "
                           f"use matmul for that")
    _inner("bmm", a.shape, b.shape, a.shape[2], b.shape[1])
    return matmul_rule(a, b)


def dot_rule(a, b):
    """dot: two 1-d vectors of one length."""
    _ranks("dot", a, b, 1, 1, "two 1-d vectors")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"dot: cannot multiply {fmt_shape(a.shape)} by {fmt_shape(b.shape)}: "
                           f"sizes {a.shape[0]} and {b.shape[0]} differ")
    return matmul_rule(a, b)


def mv_rule(a, b):
    """mv: a matrix times a vector."""
    _ranks("mv", a, b, 2, 1, "a 2-d matrix and a 1-d vector")
    _inner("mv", a.shape, b.shape, a.shape[1], b.shape[0])
    return matmul_rule(a, b)


def outer_rule(a, b):
    """outer: two 1-d vectors (the product itself is a broadcast multiply)."""
    _ranks("outer", a, b, 1, 1, "two 1-d vectors")
    return Spec((a.shape[0], b.shape[0]), a.dtype)


def _matmul_flops(out, ins, attrs):
    """2 x multiply-accumulates: each output element sums over a's last dimension."""
    return 2 * math.prod(out) * (ins[0][-1] if ins[0] else 1)


def array_matmul(a, b):
    """a @ b (numpy or cupy) in a's dtype, for the kernels that multiply matrices (linear, conv,
    pooling, resampling): ml_dtypes' bfloat16 matmul accumulates in float32 and returns
    float32, rounded once to bfloat16 here as PyTorch's bfloat16 matmul does."""
    out = a @ b
    return out if out.dtype == a.dtype else out.astype(a.dtype)


# Matrix product with batch broadcasting; 1-d operands are vectors (PyTorch semantics). The
# kernel is the ufunc xp.matmul itself: the BLAS call, no wrapper, no copies (a bfloat16
# product is a float32 one between casts: the frontend's matmul, eagerc/ops/linalg.py).
declare("matmul", ("a", "b"), None, matmul_rule, kind="linalg", ufunc="matmul",
        flops=Flops("matmul-like", _matmul_flops))


# ---------------------------------------------------------------- einsum

_LETTERS = string.ascii_letters


def _bad(equation, why):
    return RuntimeError(f"einsum: equation {equation!r}: {why}")


def _split_term(equation, term):
    """'a...b' -> (letters before '...', letters after, has_ellipsis)."""
    before, dots, after = term.partition("...")
    if "." in before or "." in after:
        raise _bad(equation, f"'.' only appears as an ellipsis '...', got {term!r}")
    for c in before + after:
        if c not in _LETTERS:
            raise _bad(equation, f"subscripts must be letters a-z or A-Z, got {c!r}")
    return before, after, bool(dots)


def canonical_einsum(equation, shapes, diagonals=False):
    """Equation in canonical form for operands of `shapes`: explicit '->' output, no
    ellipsis, no spaces. Raises an error naming what is wrong. A subscript repeated within
    an operand ('ii->i') is refused unless `diagonals` (the frontend takes those diagonals
    first, so the op itself never sees a repeat)."""
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a string, got {type(equation).__name__}")
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    if any(c in lhs or c in rhs for c in "->"):
        raise _bad(equation, "expected the form 'ij,jk->ik' with at most one '->'")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _bad(equation, f"it has subscripts for {len(terms)} operand(s) but "
                   f"{len(shapes)} operand(s) were given")
    parsed = [_split_term(equation, t) for t in terms]
    used = set("".join(b + a for b, a, _ in parsed) + rhs)
    spare = [c for c in _LETTERS if c not in used]
    # how many dimensions each operand's ellipsis covers
    ell = []
    for i, ((before, after, dots), shape) in enumerate(zip(parsed, shapes)):
        named = len(before) + len(after)
        if len(shape) < named or (not dots and len(shape) != named):
            raise _bad(equation, f"operand {i} has shape {fmt_shape(shape)} ({len(shape)}-d) but "
                       f"subscripts {terms[i]!r} name {named} dimension(s)")
        ell.append(len(shape) - named)
    n_ell = max(ell, default=0)
    if n_ell > len(spare):
        raise _bad(equation, "too many dimensions under '...'")
    ell_letters = "".join(spare[:n_ell])
    ins = [before + ell_letters[n_ell - k:] + after for (before, after, _), k in zip(parsed, ell)]
    for i, sub in enumerate(ins):
        for c in sub:
            if sub.count(c) > 1 and not diagonals:
                raise _bad(equation, f"subscript {c!r} repeats in operand {i} ({terms[i]!r}); "
                           f"the op takes no diagonals (eagerc.einsum takes them before it)")
    if arrow:
        before, after, dots = _split_term(equation, rhs)
        out = before + (ell_letters if dots else "") + after
        for c in out:
            if out.count(c) > 1:
                raise _bad(equation, f"subscript {c!r} appears more than once in the output")
            if not any(c in sub for sub in ins):
                raise _bad(equation, f"output subscript {c!r} does not appear in any operand")
    else:  # implicit output: the ellipsis, then the labels used once, in alphabetical order
        named = "".join(b + a for b, a, _ in parsed)
        out = ell_letters + "".join(sorted(c for c in set(named) if named.count(c) == 1))
    return ",".join(ins) + "->" + out


def split_einsum(equation):
    """Canonical equation -> (list of operand subscripts, output subscripts)."""
    lhs, _, out = equation.partition("->")
    return lhs.split(","), out


def einsum_rule(*specs, equation):
    for i, s in enumerate(specs):
        _spec_or_type_error("einsum", s, f"operand {i}")
    if not specs:
        raise RuntimeError("einsum: expected at least one operand")
    canonical = canonical_einsum(equation, [s.shape for s in specs])
    ins, out = split_einsum(canonical)
    sizes, where = {}, {}  # label -> its size, and the operand that set it
    for i, (sub, s) in enumerate(zip(ins, specs)):
        for c, n in zip(sub, s.shape):
            if sizes.get(c, 1) == 1:
                sizes[c], where[c] = n, i
            elif n != 1 and n != sizes[c]:
                j = where[c]
                raise _bad(equation, f"subscript {c!r} has size {sizes[c]} in operand {j} "
                           f"{fmt_shape(specs[j].shape)} but size {n} in operand {i} {fmt_shape(s.shape)}")
    dtype = _common_dtype("einsum", specs)
    return Spec(tuple(sizes[c] for c in out), dtype)


def _einsum(xp):
    def einsum(*operands, equation):
        # numpy's einsum is Python code: a floating-point warning (overflow in its matmul)
        # would name numpy's module, which eagerc's filter leaves alone (runtime/ownership.py),
        # so this kernel -- never a cheap one -- quiets them itself
        if operands[0].dtype.kind == "V":   # bfloat16: numpy's einsum refuses it; float32, rounded once
            return einsum(*(o.astype(np.float32) for o in operands), equation=equation).astype(operands[0].dtype)
        with np.errstate(all="ignore"):
            if len(operands) > 1:
                # optimize=True contracts pairs with BLAS (tensordot) instead of nested loops
                return xp.einsum(equation, *operands, optimize=True)
            out = xp.einsum(equation, operands[0])
        # one operand and no sum ('ij->ji'): numpy returns a view, but einsum's output owns its memory
        return out.copy() if xp.may_share_memory(out, operands[0]) else out
    return einsum


def _einsum_scratch(*specs, equation):
    """With three or more operands, optimize=True contracts pairs along numpy's greedy path,
    whose default memory limit keeps every intermediate within the largest operand or the
    output; at most (operands - 2) intermediates live at once. One or two operands: none."""
    if len(specs) < 3:
        return 0
    largest = max(math.prod(s.shape) for s in specs)
    largest = max(largest, math.prod(einsum_rule(*specs, equation=equation).shape))
    return (len(specs) - 2) * largest * max(s.dtype.itemsize for s in specs)


def _einsum_flops(out, ins, attrs):
    """2 x the product of every index's size (each output element sums over the others)."""
    lhs = attrs.get("equation", "").split("->")[0].replace(" ", "")
    if "..." in lhs:
        return 2 * math.prod(out)
    sizes = {}
    for term, shape in zip(lhs.split(","), ins):
        for letter, n in zip(term, shape):
            sizes[letter] = n
    return 2 * math.prod(sizes.values())


# Einstein summation over any number of operands (variadic); the equation is canonical. The
# kernel may return a view of its operand ("ij->ji").
declare("einsum", ("operands",), _einsum, einsum_rule, attrs=("equation",), scratch=_einsum_scratch,
        kind="linalg", aliases="may", flops=Flops("matmul-like", _einsum_flops))
