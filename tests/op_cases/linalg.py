"""Op-table entries: linear algebra (matmul and its spellings, einsum, outer, linalg norms).

References are numpy (np.matmul, np.einsum, np.linalg.norm), computed in float64.
"""
import math

import numpy as np

import eagerc
from optable import Case, integers, distinct, away_from_zero

MATMUL_SHAPES = [
    ((3, 4), (4, 5)),          # matrix @ matrix
    ((4,), (4, 5)),            # vector @ matrix
    ((3, 4), (4,)),            # matrix @ vector
    ((4,), (4,)),              # dot
    ((2, 3, 4), (4, 5)),       # batch @ matrix (the Linear layer)
    ((3, 4), (2, 4, 5)),       # matrix @ batch
    ((2, 1, 3, 4), (5, 4, 2)),  # batch dims broadcast
    ((4,), (2, 4, 5)),         # vector @ batch
    ((2, 3, 4), (4,)),         # batch @ vector
    ((0, 3), (3, 4)),          # empty rows
    ((3, 0), (0, 4)),          # empty inner dimension: zeros
    ((2, 0, 3, 4), (4, 1)),    # empty batch
]


def _einsum(eq):
    return lambda *xs: eagerc.einsum(eq, *xs)


def _np_einsum(eq):
    return lambda *xs: np.einsum(eq, *xs)


def einsum_case(name, eq, shapes, ref_eq=None, **kw):
    """An einsum case; ref_eq spells the equation for numpy when eagerc's form differs."""
    return Case(f"einsum_{name}", _einsum(eq), _np_einsum(ref_eq or eq), shapes, **kw)


def _with_zeros(rng, shape):
    return rng.integers(-1, 2, shape).astype(np.float64)


def _cdist(x1, x2, p):
    """Distances between rows by explicit loops over the rows."""
    batch = np.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    x1, x2 = np.broadcast_to(x1, batch + x1.shape[-2:]), np.broadcast_to(x2, batch + x2.shape[-2:])
    out = np.empty(x1.shape[:-1] + (x2.shape[-2],))
    for i in range(x1.shape[-2]):
        for j in range(x2.shape[-2]):
            d = np.abs(x1[..., i, :] - x2[..., j, :])
            out[..., i, j] = d.max(-1) if p == np.inf else (d ** p).sum(-1) ** (1 / p)
    return out


def _cross(a, b):
    a, b = np.broadcast_arrays(a, b)
    return np.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1], a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                     a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], -1)


def _np_matrix_norm(ord):
    return lambda a: np.linalg.norm(a, ord=ord, axis=(-2, -1))


CASES = [
    Case("matmul", eagerc.matmul, np.matmul, MATMUL_SHAPES, grad_variants=9),
    Case("matmul_operator", lambda a, b: a @ b, lambda a, b: a @ b, MATMUL_SHAPES[:5], grad_variants=5),
    Case("matmul_method", lambda a, b: a.matmul(b), np.matmul, MATMUL_SHAPES[:1]),
    Case("matmul_int", eagerc.matmul, np.matmul, [((3, 4), (4, 5)), ((4,), (4,)), ((2, 3, 4), (4,))],
         make=(integers(), integers()), grad=False),
    Case("matmul_promote", eagerc.matmul, lambda a, b: a @ b, [((3, 4), (4, 5)), ((2, 3, 4), (4,))],
         make=(integers(), None)),  # int64 @ float -> float
    Case("matmul_chain", lambda a, b, c: (a @ b).relu() @ c, lambda a, b, c: np.maximum(a @ b, 0) @ c,
         [((3, 4), (4, 5), (5, 2))], make=(None, None, None)),
    Case("mm", eagerc.mm, np.matmul, [((3, 4), (4, 5)), ((1, 4), (4, 1)), ((0, 2), (2, 3))]),
    Case("mm_method", lambda a, b: a.mm(b), np.matmul, [((3, 4), (4, 5))]),
    Case("bmm", eagerc.bmm, np.matmul, [((2, 3, 4), (2, 4, 5)), ((1, 2, 2), (1, 2, 3)), ((0, 2, 3), (0, 3, 1))]),
    Case("bmm_method", lambda a, b: a.bmm(b), np.matmul, [((2, 3, 4), (2, 4, 5))]),
    Case("mv", eagerc.mv, np.matmul, [((3, 4), (4,)), ((0, 4), (4,))]),
    Case("dot", eagerc.dot, np.dot, [((4,), (4,)), ((1,), (1,)), ((0,), (0,))]),
    Case("dot_method", lambda a, b: a.dot(b), np.dot, [((5,), (5,))]),
    Case("inner", eagerc.inner, np.inner, [((3, 4), (2, 4)), ((4,), (4,)), ((2, 3, 4), (4,)), ((3,), ())],
         grad_variants=4),
    Case("outer", eagerc.outer, np.outer, [((3,), (4,)), ((1,), (2,)), ((0,), (3,))]),
    Case("outer_method", lambda a, b: a.outer(b), np.outer, [((3,), (4,))]),
    # einsum: the canonical and the implicit forms, ellipses, broadcasting, sums
    einsum_case("matmul", "ij,jk->ik", [((3, 4), (4, 5)), ((0, 4), (4, 5))]),
    einsum_case("implicit", "ij,jk", [((3, 4), (4, 5))]),
    einsum_case("spaces", "ij , jk -> ki", [((3, 4), (4, 5))], ref_eq="ij,jk->ki"),
    einsum_case("batched", "bij,bjk->bik", [((2, 3, 4), (2, 4, 5)), ((1, 3, 4), (2, 4, 5))]),
    einsum_case("transpose", "ij->ji", [((3, 4),), ((0, 2),)]),
    einsum_case("permute3", "abc->cab", [((2, 3, 4),)]),
    einsum_case("sum_all", "ij->", [((3, 4),), ((0, 3),)]),
    einsum_case("zero_d", "->", [((),)]),
    einsum_case("sum_rows", "ij->j", [((3, 4),)]),
    einsum_case("outer", "i,j->ij", [((3,), (4,))]),
    einsum_case("inner", "i,i->", [((5,), (5,))]),
    einsum_case("hadamard", "ij,ij->ij", [((3, 4), (3, 4)), ((3, 4), (1, 4)), ((3, 1), (1, 4))]),
    einsum_case("bilinear", "bi,ij,bj->b", [((2, 3), (3, 4), (2, 4))]),
    einsum_case("chain3", "ijk,kl,lm->im", [((2, 3, 4), (4, 5), (5, 6))]),
    einsum_case("attention", "bhqd,bhkd->bhqk", [((2, 3, 4, 5), (2, 3, 6, 5))]),
    einsum_case("ellipsis", "...ij,...jk->...ik", [((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                                    ((3, 4), (2, 4, 5))]),
    einsum_case("ellipsis_implicit", "...ij,jk", [((2, 3, 4), (4, 5))], ref_eq="...ij,jk->...ik"),
    einsum_case("ellipsis_middle", "i...j->j...i", [((2, 3, 4, 5),)]),
    einsum_case("ellipsis_summed", "...ij->ij", [((2, 3, 4),)], ref_eq="aij->ij"),
    einsum_case("uppercase", "Ab,bC->CA", [((3, 4), (4, 5))]),
    einsum_case("scalar_operand", ",ij->ij", [((), (3, 4))]),
    Case("einsum_list", lambda a, b: eagerc.einsum("ij,jk->ik", [a, b]), np.matmul, [((3, 4), (4, 5))]),
    Case("einsum_promote", lambda a, b: eagerc.einsum("ij,j->i", a, b), lambda a, b: a @ b,
         [((3, 4), (4,))], make=(integers(), None)),
    Case("einsum_int", lambda a, b: eagerc.einsum("ij,j->i", a, b), lambda a, b: a @ b, [((3, 4), (4,))],
         make=(integers(), integers()), grad=False),
    # eagerc.linalg
    Case("linalg_vector_norm", lambda x: eagerc.linalg.vector_norm(x), lambda x: np.linalg.norm(x.ravel()),
         [((3, 4),), ((5,),), ((),), ((0, 3),)], make=(away_from_zero,), grad_variants=3),
    Case("linalg_vector_norm_dim", lambda x: eagerc.linalg.vector_norm(x, 3, dim=(0, -1), keepdim=True),
         lambda x: (np.abs(x) ** 3).sum(axis=(0, 2), keepdims=True) ** (1 / 3), [((2, 3, 4),)],
         make=(away_from_zero,)),
    Case("linalg_vector_norm_inf", lambda x: eagerc.linalg.vector_norm(x, math.inf, dim=1),
         lambda x: np.abs(x).max(axis=1), [((3, 4),)], make=(distinct,)),
    Case("linalg_vector_norm_ord0", lambda x: eagerc.linalg.vector_norm(x, 0),
         lambda x: np.float64(np.count_nonzero(x)), [((3, 4),)], make=(_with_zeros,), grad=False),
    Case("kron", eagerc.kron, np.kron, [((2, 3), (4, 5)), ((2,), (3, 4)), ((2, 1, 3), (2, 2)), ((), (3,))]),
    Case("kron_method", lambda a, b: a.kron(b), np.kron, [((3,), (2,))]),
    Case("addmm", lambda x, a, b: eagerc.addmm(x, a, b, beta=0.5, alpha=2), lambda x, a, b: 0.5 * x + 2 * (a @ b),
         [((3,), (2, 4), (4, 3)), ((2, 3), (2, 4), (4, 3)), ((2, 1), (2, 0), (0, 3))]),
    Case("addmm_default", lambda x, a, b: x.addmm(a, b), lambda x, a, b: x + a @ b, [((2, 3), (2, 4), (4, 3))]),
    Case("addmm_beta0", lambda x, a, b: eagerc.addmm(x * float("nan"), a, b, beta=0), lambda x, a, b: a @ b,
         [((2, 3), (2, 4), (4, 3))]),
    Case("addmm_", lambda x, a, b: (x * 1).addmm_(a, b, alpha=-1), lambda x, a, b: x - a @ b,
         [((2, 3), (2, 4), (4, 3))]),
    Case("cdist", eagerc.cdist, lambda a, b: _cdist(a, b, 2), [((4, 3), (5, 3)), ((2, 4, 3), (5, 3)), ((1, 2), (0, 2))]),
    Case("cdist_mm", lambda a, b: eagerc.cdist(a, b), lambda a, b: _cdist(a, b, 2), [((30, 3), (27, 3))],
         rtol=1e-6, atol=1e-9, atol16=0.1),   # |a|^2 + |b|^2 - 2ab cancels: sqrt of a rounding error
    Case("cdist_mm_forced", lambda a, b: eagerc.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
         lambda a, b: _cdist(a, b, 2), [((3, 4), (2, 4))], rtol=1e-6, atol=1e-9),
    Case("cdist_p1", lambda a, b: eagerc.cdist(a, b, 1.0), lambda a, b: _cdist(a, b, 1), [((4, 3), (5, 3))],
         make=(distinct, None)),
    Case("cdist_p3", lambda a, b: eagerc.cdist(a, b, p=3), lambda a, b: _cdist(a, b, 3), [((4, 3), (2, 5, 3))]),
    Case("cdist_inf", lambda a, b: eagerc.cdist(a, b, p=math.inf), lambda a, b: _cdist(a, b, np.inf),
         [((4, 3), (5, 3))], make=(distinct, None)),
    Case("cross", lambda a, b: eagerc.cross(a, b, dim=1), lambda a, b: np.moveaxis(_cross(np.moveaxis(a, 1, -1),
                                                                                           np.moveaxis(b, 1, -1)), -1, 1),
         [((4, 3), (4, 3)), ((2, 3, 5), (2, 3, 5))]),
    Case("linalg_cross", lambda a, b: eagerc.linalg.cross(a, b), _cross, [((4, 3), (1, 3)), ((2, 1, 3), (1, 4, 3))]),
    Case("cross_method", lambda a, b: a.cross(b, -1), _cross, [((3,), (3,))]),
    einsum_case("trace", "ii->", [((4, 4),)], ref_eq="ii->"),
    einsum_case("diagonal", "ii->i", [((3, 3),)]),
    einsum_case("batch_trace", "bii->b", [((2, 3, 3),)]),
    einsum_case("diagonal_sum", "iij->j", [((3, 3, 4),)]),
    einsum_case("diagonal_times", "ii,i->i", [((3, 3), (3,))]),
    einsum_case("triple_diagonal", "iii->i", [((2, 2, 2),)]),
    Case("linalg_norm_default", lambda x: eagerc.linalg.norm(x), lambda x: np.linalg.norm(x),
         [((3, 4),), ((2, 3, 4),)]),
    Case("linalg_norm_dim", lambda x: eagerc.linalg.norm(x, dim=-1), lambda x: np.linalg.norm(x, axis=-1),
         [((3, 4),)]),
    Case("linalg_norm_matrix_inf", lambda x: eagerc.linalg.norm(x, math.inf), lambda x: np.linalg.norm(x, np.inf),
         [((3, 4),)], make=(distinct,)),
    Case("linalg_norm_vector_1", lambda x: eagerc.linalg.norm(x, 1), lambda x: np.linalg.norm(x, 1),
         [((5,),)], make=(away_from_zero,)),
    Case("linalg_matrix_norm_fro", lambda x: eagerc.linalg.matrix_norm(x), _np_matrix_norm("fro"),
         [((3, 4),), ((2, 3, 4),)]),
    Case("linalg_matrix_norm_1", lambda x: eagerc.linalg.matrix_norm(x, 1), _np_matrix_norm(1),
         [((3, 4),), ((2, 3, 4),)], make=(distinct,)),
    Case("linalg_matrix_norm_-1", lambda x: eagerc.linalg.matrix_norm(x, -1), _np_matrix_norm(-1),
         [((3, 4),)], make=(distinct,)),
    Case("linalg_matrix_norm_inf", lambda x: eagerc.linalg.matrix_norm(x, math.inf), _np_matrix_norm(np.inf),
         [((3, 4),), ((2, 3, 4),)], make=(distinct,)),
    Case("linalg_matrix_norm_-inf_keepdim", lambda x: eagerc.linalg.matrix_norm(x, -math.inf, dim=(0, 2),
                                                                                 keepdim=True),
         lambda x: np.abs(x).sum(axis=2, keepdims=True).min(axis=0, keepdims=True), [((3, 2, 4),)],
         make=(distinct,)),
]
