"""Linear algebra: error messages (exact), second derivatives, promotion, and the
no-copy matmul fast path. Forward values and first derivatives are in the op table
(tests/op_cases/linalg.py)."""
import math
import re

import numpy as np
import pytest

import eagerc
from eagerc import dispatch
from eagerc.runtime.ops import OPS
from eagerc.runtime.ops.meta import Spec
from eagerc.runtime import dtypes


def z(*shape, dtype=None):
    return eagerc.zeros(*shape, dtype=dtype or eagerc.float32)


def raises(exc, message, fn, *args):
    """fn(*args) raises exc with exactly `message`."""
    with pytest.raises(exc, match="^" + re.escape(message) + "$"):
        fn(*args)


def spec(*shape, dtype=dtypes.float32):
    return Spec(shape, dtype)


# ---------------------------------------------------------------- matmul errors

def test_matmul_inner_sizes_exact_message():
    raises(RuntimeError, "matmul: cannot multiply (256x4096) by (768x320): inner sizes 4096 and 768 differ",
           lambda: z(256, 4096) @ z(768, 320))
    raises(RuntimeError, "matmul: cannot multiply (256x4096) by (768x320): inner sizes 4096 and 768 differ",
           eagerc.matmul, z(256, 4096), z(768, 320))


@pytest.mark.parametrize("sa,sb,msg", [
    ((3,), (4,), "matmul: cannot multiply (3) by (4): inner sizes 3 and 4 differ"),
    ((2, 3), (4,), "matmul: cannot multiply (2x3) by (4): inner sizes 3 and 4 differ"),
    ((4,), (3, 5), "matmul: cannot multiply (4) by (3x5): inner sizes 4 and 3 differ"),
    ((2, 3, 4), (2, 5, 6), "matmul: cannot multiply (2x3x4) by (2x5x6): inner sizes 4 and 5 differ"),
    ((2, 3, 4), (3, 4, 5), "matmul: cannot broadcast the batch dimensions (2) of (2x3x4) and (3) of (3x4x5): "
                           "sizes 2 and 3 differ at batch dimension -1"),
    ((4, 2, 3, 4), (3, 1, 4, 5), "matmul: cannot broadcast the batch dimensions (4x2) of (4x2x3x4) and (3x1) "
                                 "of (3x1x4x5): sizes 4 and 3 differ at batch dimension -2"),
    ((), (3, 4), "matmul: both arguments need at least 1 dimension, but got () and (3x4) "
                 "(use * to multiply by a 0-d tensor)"),
    ((3,), (), "matmul: both arguments need at least 1 dimension, but got (3) and () "
               "(use * to multiply by a 0-d tensor)"),
])
def test_matmul_shape_errors(sa, sb, msg):
    raises(RuntimeError, msg, eagerc.matmul, z(*sa), z(*sb))
    # the same message comes from the shape rule alone (what the tracer and the loader call)
    raises(RuntimeError, msg, OPS["matmul"].meta, spec(*sa), spec(*sb))


def test_matmul_errors_after_promotion_and_on_the_slow_path():
    raises(RuntimeError, "matmul: cannot multiply (2x3) by (4x5): inner sizes 3 and 4 differ",
           eagerc.matmul, z(2, 3, dtype=eagerc.int64), z(4, 5))


def test_matmul_type_errors():
    raises(TypeError, "matmul: expected numeric tensors, got bool (convert with .float() or .long() first)",
           eagerc.matmul, z(2, 2).bool(), z(2, 2).bool())
    raises(TypeError, "matmul: expected Tensor operands, got int", eagerc.matmul, z(2, 2), 3)
    raises(TypeError, "matmul: expected Tensor operands, got ndarray", lambda: np.ones((2, 2)) @ z(2, 2))
    with pytest.raises(TypeError):
        z(2, 2) @ 2.0
    raises(TypeError, "matmul: expected operands of one dtype, got float32, float64 (the frontend casts them "
                      "to their common dtype first)", OPS["matmul"].meta, spec(2, 2), spec(2, 2, dtype=dtypes.float64))


# ---------------------------------------------------------------- mm, bmm, mv, dot, outer

@pytest.mark.parametrize("fn,sa,sb,msg", [
    (eagerc.mm, (3,), (3, 4), "mm: expected two 2-d matrices, got (3) (1-d) and (3x4) (2-d)"),
    (eagerc.mm, (2, 3, 4), (4, 5), "mm: expected two 2-d matrices, got (2x3x4) (3-d) and (4x5) (2-d)"),
    (eagerc.mm, (2, 3), (4, 5), "mm: cannot multiply (2x3) by (4x5): inner sizes 3 and 4 differ"),
    (eagerc.bmm, (3, 4), (2, 4, 5), "bmm: expected two 3-d batches of matrices, got (3x4) (2-d) and (2x4x5) (3-d)"),
    (eagerc.bmm, (2, 3, 4), (3, 4, 5), "bmm: batch sizes 2 and 3 differ ((2x3x4) and (3x4x5)); bmm does not "
                                       "broadcast, use matmul for that"),
    (eagerc.bmm, (1, 3, 4), (2, 4, 5), "bmm: batch sizes 1 and 2 differ ((1x3x4) and (2x4x5)); bmm does not "
                                       "broadcast, use matmul for that"),
    (eagerc.bmm, (2, 3, 4), (2, 5, 6), "bmm: cannot multiply (2x3x4) by (2x5x6): inner sizes 4 and 5 differ"),
    (eagerc.mv, (3, 4), (4, 1), "mv: expected a 2-d matrix and a 1-d vector, got (3x4) (2-d) and (4x1) (2-d)"),
    (eagerc.mv, (3, 4), (5,), "mv: cannot multiply (3x4) by (5): inner sizes 4 and 5 differ"),
    (eagerc.dot, (3, 1), (3,), "dot: expected two 1-d vectors, got (3x1) (2-d) and (3) (1-d)"),
    (eagerc.dot, (), (), "dot: expected two 1-d vectors, got () (0-d) and () (0-d)"),
    (eagerc.dot, (3,), (4,), "dot: cannot multiply (3) by (4): sizes 3 and 4 differ"),
    (eagerc.outer, (3, 1), (4,), "outer: expected two 1-d vectors, got (3x1) (2-d) and (4) (1-d)"),
])
def test_strict_products_name_themselves(fn, sa, sb, msg):
    raises(RuntimeError, msg, fn, z(*sa), z(*sb))


def test_strict_products_type_errors():
    raises(TypeError, "mm: expected Tensor operands, got list", eagerc.mm, z(2, 2), [[1.0, 2.0]])
    raises(TypeError, "dot: expected numeric tensors, got bool (convert with .float() or .long() first)",
           eagerc.dot, z(2).bool(), z(2).bool())


# ---------------------------------------------------------------- einsum errors

@pytest.mark.parametrize("eq,shapes,msg", [
    ("ij,jk->ik", [(2, 3)], "einsum: equation 'ij,jk->ik': it has subscripts for 2 operand(s) but 1 operand(s) "
                            "were given"),
    ("ijk->k", [(2, 3)], "einsum: equation 'ijk->k': operand 0 has shape (2x3) (2-d) but subscripts 'ijk' name "
                         "3 dimension(s)"),
    ("i->i", [(2, 3)], "einsum: equation 'i->i': operand 0 has shape (2x3) (2-d) but subscripts 'i' name "
                       "1 dimension(s)"),
    ("ij,jk->ik", [(2, 3), (4, 5)], "einsum: equation 'ij,jk->ik': subscript 'j' has size 3 in operand 0 (2x3) "
                                    "but size 4 in operand 1 (4x5)"),
    ("ii->i", [(2, 3)], "einsum: equation 'ii->i': subscript 'i' repeats in operand 0 with sizes 2 and 3; a "
                        "repeated subscript takes a diagonal, whose sizes must match"),
    ("ij->ii", [(3, 3)], "einsum: equation 'ij->ii': subscript 'i' appears more than once in the output"),
    ("ij->k", [(3, 3)], "einsum: equation 'ij->k': output subscript 'k' does not appear in any operand"),
    ("i1->i", [(3, 3)], "einsum: equation 'i1->i': subscripts must be letters a-z or A-Z, got '1'"),
    ("i.j->i", [(3, 3)], "einsum: equation 'i.j->i': '.' only appears as an ellipsis '...', got 'i.j'"),
    ("ij->j->i", [(3, 3)], "einsum: equation 'ij->j->i': expected the form 'ij,jk->ik' with at most one '->'"),
    ("ij-i", [(3, 3)], "einsum: equation 'ij-i': expected the form 'ij,jk->ik' with at most one '->'"),
])
def test_einsum_errors(eq, shapes, msg):
    raises(RuntimeError, msg, eagerc.einsum, eq, *[z(*s) for s in shapes])


def test_einsum_argument_errors():
    raises(RuntimeError, "einsum: expected at least one operand", eagerc.einsum, "->")
    raises(TypeError, "einsum: the equation must be a string, got int", eagerc.einsum, 3, z(2))
    raises(TypeError, "einsum: expected Tensor operands, got ndarray", eagerc.einsum, "i->i", np.ones(2))


def test_einsum_rule_matches_kernel_failure():
    # a canonical equation the frontend never produced (e.g. from a file) is checked by the rule
    raises(RuntimeError, "einsum: equation 'ij,jk->ik': subscript 'j' has size 3 in operand 0 (2x3) but size 4 "
                         "in operand 1 (4x5)",
           lambda: OPS["einsum"].meta(spec(2, 3), spec(4, 5), equation="ij,jk->ik"))
    assert OPS["einsum"].meta(spec(2, 3), spec(3, 5), equation="ij,jk->ik") == Spec((2, 5), dtypes.float32)
    # the op itself never takes a diagonal (the frontend does, before it)
    raises(RuntimeError, "einsum: equation 'ii->i': subscript 'i' repeats in operand 0 ('ii'); the op takes no "
                         "diagonals (eagerc.einsum takes them before it)",
           lambda: OPS["einsum"].meta(spec(3, 3), equation="ii->i"))


# ---------------------------------------------------------------- norms

def test_norm_errors():
    with pytest.raises(NotImplementedError, match="SVD"):
        eagerc.linalg.matrix_norm(z(3, 3), "nuc")
    with pytest.raises(NotImplementedError, match="SVD"):
        eagerc.norm(z(3, 3), "nuc")
    raises(RuntimeError, "linalg.matrix_norm: the input tensor A must have at least 2 dimensions, got shape (3,)",
           eagerc.linalg.matrix_norm, z(3))
    raises(RuntimeError, "linalg.vector_norm: expected a floating point tensor as input, got int64",
           eagerc.linalg.vector_norm, z(3, dtype=eagerc.int64))
    with pytest.raises(RuntimeError, match="zero-size dimension"):
        eagerc.linalg.vector_norm(z(0, 3), math.inf)


def test_linalg_namespace():
    assert eagerc.linalg.norm is not None and eagerc.linalg.matmul is eagerc.matmul
    x = eagerc.tensor([[3.0, 4.0], [0.0, 0.0]])
    assert eagerc.linalg.norm(x).item() == pytest.approx(5.0)
    assert eagerc.linalg.norm(x, dim=1).tolist() == pytest.approx([5.0, 0.0])


def test_norm_gradient_at_zero_is_zero_like_pytorch():
    x = eagerc.zeros(3, dtype=eagerc.float64, requires_grad=True)
    eagerc.linalg.vector_norm(x).backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]
    y = eagerc.tensor([3.0, 4.0], dtype=eagerc.float64, requires_grad=True)
    eagerc.norm(y).backward()
    assert y.grad.tolist() == pytest.approx([0.6, 0.8])


# ---------------------------------------------------------------- second derivatives

def _rand(*shape, seed=0):
    rng = np.random.default_rng(seed + len(shape))
    return eagerc.tensor(rng.standard_normal(shape), dtype=eagerc.float64, requires_grad=True)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 2)), ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 2)),
                                   ((2, 1, 3, 4), (3, 4, 2)), ((4,), (2, 4, 3)), ((3, 4), (2, 4, 3))])
def test_matmul_gradgradcheck(sa, sb):
    assert eagerc.autograd.gradgradcheck(eagerc.matmul, [_rand(*sa), _rand(*sb, seed=1)])


@pytest.mark.parametrize("eq,shapes", [("ij,jk->ik", [(3, 4), (4, 2)]), ("bij,bjk->bik", [(2, 3, 4), (1, 4, 2)]),
                                       ("ij->ji", [(3, 4)]), ("ij,ij->ij", [(3, 4), (1, 4)]),
                                       ("ijk,kl,lm->im", [(2, 3, 2), (2, 3), (3, 2)]), ("ij->j", [(3, 4)]),
                                       ("ij->", [(3, 4)]), (",ij->j", [(), (3, 4)])])
def test_einsum_gradgradcheck(eq, shapes):
    xs = [_rand(*s, seed=i) for i, s in enumerate(shapes)]
    assert eagerc.autograd.gradgradcheck(lambda *a: eagerc.einsum(eq, *a), xs)


def test_matmul_create_graph_hessian_vector_product():
    # f(a) = sum((a @ b)^2): d/da = 2 (a@b) b^T, d2/da2 . v = 2 (v@b) b^T
    a, b, v = _rand(3, 4), _rand(4, 2, seed=1).detach(), _rand(3, 4, seed=2).detach()
    (ga,) = eagerc.autograd.grad(((a @ b) ** 2).sum(), a, create_graph=True)
    (hv,) = eagerc.autograd.grad((ga * v).sum(), a)
    np.testing.assert_allclose(hv.numpy(), 2 * (v.numpy() @ b.numpy()) @ b.numpy().T, rtol=1e-12)


# ---------------------------------------------------------------- promotion

@pytest.mark.parametrize("da,db,expected", [
    (eagerc.int64, eagerc.float32, eagerc.float32), (eagerc.float32, eagerc.float64, eagerc.float64),
    (eagerc.int32, eagerc.int64, eagerc.int64), (eagerc.float16, eagerc.float32, eagerc.float32),
    (eagerc.int64, eagerc.int64, eagerc.int64)])
def test_matmul_promotion(da, db, expected):
    a = eagerc.ones(2, 3, dtype=da)
    b = eagerc.ones(3, 2, dtype=db)
    for out in (a @ b, eagerc.mm(a, b), eagerc.einsum("ij,jk->ik", a, b)):
        assert out.dtype is expected
        assert out.tolist() == [[3, 3], [3, 3]]


def test_rmatmul():
    a, b = _rand(2, 3), _rand(3, 2, seed=1)
    np.testing.assert_array_equal(b.__rmatmul__(a).detach().numpy(), (a @ b).detach().numpy())


# ---------------------------------------------------------------- the fast path

class _Ops:
    def __init__(self):
        self.names = []

    def record(self, op, args, attrs, out):
        self.names.append(op.name)


def _recording(fn):
    rec = _Ops()
    dispatch.set_tracer(rec)
    try:
        fn()
    finally:
        dispatch.set_tracer(None)
    return rec.names


def test_matmul_2d_float32_is_one_blas_call():
    assert OPS["matmul"].cpu is np.matmul  # the kernel is numpy's matmul itself: no wrapper, no copies
    a = eagerc.tensor(np.ones((64, 32), np.float32))
    b = eagerc.tensor(np.ones((32, 16), np.float32))
    out = []
    assert _recording(lambda: out.append(a @ b)) == ["matmul"]
    assert out[0].dtype is eagerc.float32 and out[0]._array.flags.c_contiguous
    assert _recording(lambda: eagerc.mm(a, b)) == ["matmul"]


def test_matmul_2d_backward_only_matmuls_and_views():
    a = eagerc.tensor(np.ones((8, 4), np.float32), requires_grad=True)
    b = eagerc.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    out = a @ b
    grads, g = [], eagerc.ones(8, 3)
    names = _recording(lambda: grads.extend(eagerc.autograd.grad(out, (a, b), g)))
    assert sorted(names) == ["matmul", "matmul", "permute", "permute"], names  # transposes are views
    assert grads[0].dtype is eagerc.float32 and grads[0].shape == (8, 4)


def test_linear_pattern_backward_folds_the_batch():
    # x (batch, m, k) @ W (k, n): dW is one (k, batch*m) @ (batch*m, n) product, not a batch + a sum
    x = eagerc.tensor(np.ones((5, 8, 4), np.float32))
    w = eagerc.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    out = x @ w
    names = _recording(lambda: out.backward(eagerc.ones(5, 8, 3)))
    assert "sum" not in names and names.count("matmul") == 1, names
    np.testing.assert_allclose(w.grad.numpy(), np.full((4, 3), 40.0))


def test_einsum_output_owns_its_memory():
    x = eagerc.tensor(np.arange(6.0).reshape(2, 3))
    y = eagerc.einsum("ij->ji", x)
    assert not np.shares_memory(y._array, x._array)
    assert eagerc.einsum("ij->ij", x)._array is not x._array
