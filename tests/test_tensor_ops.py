"""PyTorch's tensor habits beyond the op table (issue 12, items 5 and 8): results that are
Python values (equal, allclose, finfo), error cases, dtype rules for Python scalars,
gradients at exact zeros, the pieces of a split, and testing.assert_close's messages.

References are numpy or hand computations; an optional test at the end compares with
PyTorch where it is installed.
"""
import math

import numpy as np
import pytest

import eagerc
from eagerc.autograd import gradcheck, gradgradcheck
from eagerc.testing import assert_close


def _f64(values, requires_grad=True):
    return eagerc.tensor(values, dtype=eagerc.float64, requires_grad=requires_grad)


# ---------------------------------------------------------------- gaps in what existed (item 8)

def test_flip_takes_dims_as_a_keyword():
    x = eagerc.arange(6).reshape(2, 3)
    assert x.flip(dims=(1,)).tolist() == [[2, 1, 0], [5, 4, 3]]
    assert eagerc.flip(x, dims=[0, 1]).tolist() == [[5, 4, 3], [2, 1, 0]]
    assert x.flip(dims=0).tolist() == [[3, 4, 5], [0, 1, 2]]
    with pytest.raises(TypeError):
        x.flip(0, dims=(1,))


def test_where_of_two_python_scalars_follows_pytorch_result_type():
    c = eagerc.tensor([True, False])
    assert eagerc.where(c, 1.0, 0.0).dtype is eagerc.float32
    assert eagerc.where(c, 1.0, 0.0).tolist() == [1.0, 0.0]
    assert eagerc.where(c, 1, 0).dtype is eagerc.int64
    assert eagerc.where(c, 1, 0.5).dtype is eagerc.float32
    assert eagerc.where(c, True, False).dtype is eagerc.bool
    eagerc.set_default_dtype(eagerc.float64)
    try:
        assert eagerc.where(c, 1.0, 0.0).dtype is eagerc.float64
    finally:
        eagerc.set_default_dtype(eagerc.float32)


def test_vector_norm_ord0_requires_grad_with_a_zero_gradient():
    x = _f64([[0.0, 2.0, -3.0], [1.0, 0.0, 0.0]])
    y = eagerc.linalg.vector_norm(x, ord=0)
    assert y.requires_grad and y.item() == 3.0
    (g,) = eagerc.autograd.grad(y, x)
    assert g.tolist() == [[0.0] * 3] * 2
    # an infinite entry counts once and does not turn the count into nan
    assert eagerc.linalg.vector_norm(eagerc.tensor([0.0, math.inf, 2.0]), ord=0).item() == 2.0


@pytest.mark.parametrize("values", [[0.0, 2.0, 3.0], [2.0, 0.0, 0.0, 5.0], [1.0, 2.0, 3.0]])
def test_prod_second_derivative_at_exact_zeros(values):
    x = _f64(values)
    assert gradgradcheck(lambda x: x.prod(), (x,))
    assert gradgradcheck(lambda x: x.reshape(1, -1).prod(1, keepdim=True), (x,))
    # by hand: d2 prod / dx_i dx_j = prod of the entries other than i and j
    (g,) = eagerc.autograd.grad(x.prod(), x, create_graph=True)
    hess = np.stack([eagerc.autograd.grad(g[i], x, retain_graph=True)[0].numpy() for i in range(len(values))])
    v = np.array(values)
    expect = np.array([[0.0 if i == j else np.prod(np.delete(v, [i, j])) for j in range(len(v))]
                       for i in range(len(v))])
    np.testing.assert_allclose(hess, expect)


@pytest.mark.parametrize("values", [[1.0, 0.0, 3.0], [0.0, 2.0, 3.0], [2.0, 0.0, 0.0, 5.0]])
def test_cumprod_second_derivative_at_exact_zeros(values):
    x = _f64(values)
    assert gradcheck(lambda x: x.cumprod(0), (x,))
    assert gradgradcheck(lambda x: x.cumprod(0), (x,))
    m = _f64([values, values[::-1]])
    assert gradgradcheck(lambda m: m.cumprod(1), (m,))


def test_split_pieces_share_one_gather_node():
    x = eagerc.randn(5, 3, requires_grad=True)
    pieces = x.unbind(0)
    gathers = {p.grad_fn.next[0] for p in pieces}
    assert len(gathers) == 1 and type(gathers.pop()) is eagerc.autograd.engine.Gather
    assert pieces[0].grad_fn.name() == "UnbindBackward0"
    assert x.split(2)[0].grad_fn.name() == "SplitBackward0"
    # only some pieces used: the others get zeros
    a, _, c = x.split([1, 2, 2])
    (a.sum() * 2 + (c * c).sum()).backward()
    expect = np.zeros((5, 3), np.float32)
    expect[0] = 2
    expect[3:] = 2 * x.detach().numpy()[3:]
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-6)


def test_unbind_backward_is_linear_in_the_number_of_pieces():
    def elements_read_by_backward(n):
        """Elements of every array the backward's ops read: a count, not a timing."""
        x = eagerc.randn(n, 16, requires_grad=True)
        total = sum(p.sum() for p in x.unbind(0))
        with eagerc.profiler.profile(record_shapes=True) as prof:
            total.backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.ones((n, 16), np.float32))
        return sum(math.prod(s) for e in prof.events() if e.shapes for s in e.shapes if s is not None)
    small, big = elements_read_by_backward(100), elements_read_by_backward(800)
    # 8x the pieces: linear work reads ~8x the elements; scattering each piece's gradient into a
    # full-size zero tensor (the old backward) read ~64x
    assert big < 12 * small, (small, big)


# ---------------------------------------------------------------- tensor habits (item 5)

def test_data_is_a_tensor_sharing_storage():
    p = eagerc.nn.Parameter(eagerc.ones(3))
    (p * 2).sum().backward()
    p.data.add_(p.grad, alpha=-0.5)
    assert p.tolist() == [0.0, 0.0, 0.0]
    m = eagerc.nn.Linear(50, 40)
    m.weight.data.normal_(0, 0.02)
    assert 0.015 < float(m.weight.std()) < 0.025


def _expand_inputs():
    x = np.arange(6.0).reshape(2, 1, 3)
    readonly = x.copy()
    readonly.setflags(write=False)
    return {"contiguous": x, "fortran": np.asfortranarray(x),
            "strided": np.arange(12.0).reshape(2, 1, 6)[:, :, ::2], "readonly": readonly,
            "expanded": np.broadcast_to(np.arange(3.0), (2, 1, 3)), "0-d": np.array(2.5)}


@pytest.mark.parametrize("layout", list(_expand_inputs()))
def test_expand_is_a_read_only_view_like_broadcast_to(layout):
    # the numpy kernel builds the zero-stride view itself (np.broadcast_to's nditer costs 2 us)
    x = _expand_inputs()[layout]
    e = eagerc.from_numpy(x).expand(4, 2, 5, 3)
    ref = np.broadcast_to(x, (4, 2, 5, 3))
    np.testing.assert_array_equal(e.numpy(), ref)
    assert e.numpy().strides == ref.strides
    assert np.shares_memory(e.numpy(), x) and not e.numpy().flags.writeable
    with pytest.raises(RuntimeError, match=r"expand: .*must match the existing size \(2\)"):
        eagerc.from_numpy(x).expand(4, 3, 5, 3) if x.ndim else eagerc.ones(2).expand(3)


def test_equal_and_allclose_return_python_bools():
    a = eagerc.tensor([1.0, 2.0])
    assert eagerc.equal(a, eagerc.tensor([1, 2])) is True
    assert eagerc.equal(a, eagerc.tensor([[1.0, 2.0]])) is False
    assert a.equal(a + 1) is False
    assert eagerc.allclose(a, a + 1e-6) is True and a.allclose(a + 1e-3) is False
    assert eagerc.allclose(eagerc.tensor([math.nan]), eagerc.tensor([math.nan]), equal_nan=True)


def test_isclose_edge_cases():
    inf, nan = math.inf, math.nan
    a = eagerc.tensor([inf, -inf, nan, 1.0, 0.0])
    b = eagerc.tensor([inf, inf, nan, 1.0 + 1e-6, 1e-9])
    assert eagerc.isclose(a, b).tolist() == [True, False, False, True, True]
    assert eagerc.isclose(a, b, equal_nan=True).tolist() == [True, False, True, True, True]
    with pytest.raises(RuntimeError, match="did not match"):
        eagerc.isclose(eagerc.tensor([1]), eagerc.tensor([1.0]))
    with pytest.raises(RuntimeError, match="greater than or equal to zero"):
        eagerc.isclose(a, b, rtol=-1)


def test_addcdiv_refuses_integer_division_and_updates_in_place():
    with pytest.raises(RuntimeError, match="integer division"):
        eagerc.addcdiv(eagerc.tensor([1.0]), eagerc.tensor([1]), eagerc.tensor([2]))
    x = eagerc.tensor([1.0, 2.0])
    assert x.addcdiv_(eagerc.tensor([1.0, 1.0]), eagerc.tensor([2.0, 4.0]), value=2) is x
    assert x.tolist() == [2.0, 2.5]
    assert eagerc.addcmul(eagerc.tensor([1]), eagerc.tensor([1]), eagerc.tensor([2]), value=2).tolist() == [5]


def test_finfo_and_iinfo_match_ieee_and_two_complement_limits():
    f = eagerc.finfo(eagerc.float32)
    assert (f.bits, f.eps, f.max, f.tiny, f.smallest_normal, f.resolution, f.dtype) == \
        (32, 2.0 ** -23, (2 - 2.0 ** -23) * 2.0 ** 127, 2.0 ** -126, 2.0 ** -126, 1e-06, "float32")
    assert f.min == -f.max and eagerc.finfo() == f and eagerc.finfo(eagerc.float16).max == 65504.0
    assert eagerc.finfo(eagerc.float64).eps == 2.0 ** -52 and eagerc.finfo(eagerc.float16).resolution == 0.001
    i = eagerc.iinfo(eagerc.int64)
    assert (i.bits, i.min, i.max, i.dtype) == (64, -2 ** 63, 2 ** 63 - 1, "int64")
    assert eagerc.iinfo(eagerc.uint8).max == 255 and eagerc.iinfo(eagerc.int8).min == -128
    assert repr(eagerc.iinfo(eagerc.int32)) == "iinfo(min=-2.14748e+09, max=2.14748e+09, dtype=int32)"
    with pytest.raises(TypeError, match="requires a floating point input type"):
        eagerc.finfo(eagerc.int64)
    with pytest.raises(TypeError, match="requires an integer input type"):
        eagerc.iinfo(eagerc.float32)


def test_integer_math_gives_the_default_float():
    a = eagerc.atan2(eagerc.tensor([1, -1]), eagerc.tensor([1, 0]))
    assert a.dtype is eagerc.float32 and np.allclose(a.numpy(), [math.pi / 4, -math.pi / 2])
    assert eagerc.erfinv(eagerc.tensor([0, 1])).tolist() == [0.0, math.inf]


def test_is_floating_point_function_and_method():
    assert eagerc.is_floating_point(eagerc.tensor([1.0])) and not eagerc.is_floating_point(eagerc.tensor([1]))
    assert eagerc.tensor([1.0], dtype=eagerc.float16).is_floating_point()


def test_shape_op_errors_name_the_problem():
    x = eagerc.zeros(2, 3)
    with pytest.raises(RuntimeError, match="rotation dims to be different"):
        x.rot90(1, (0, 0))
    with pytest.raises(RuntimeError, match="total rotation dims == 2"):
        x.rot90(1, (0,))
    with pytest.raises(RuntimeError, match="Supports 1D or 2D"):
        eagerc.diag(eagerc.zeros(2, 2, 2))
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        x.repeat_interleave(-1)
    with pytest.raises(RuntimeError, match="same size as input"):
        x.repeat_interleave(eagerc.tensor([1, 2, 3]), dim=0)
    with pytest.warns(UserWarning, match="indexing argument"):
        eagerc.meshgrid(eagerc.arange(2), eagerc.arange(3))


def test_linalg_op_errors_name_the_problem():
    with pytest.raises(RuntimeError, match="must have length 3"):
        eagerc.linalg.cross(eagerc.zeros(4), eagerc.zeros(4))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        eagerc.linalg.cross(eagerc.zeros(2, 3), eagerc.zeros(3))
    a, b = np.random.default_rng(0).standard_normal((2, 4, 3, 3))
    with pytest.warns(UserWarning, match="without specifying the dim"):  # the first dimension of size 3
        np.testing.assert_allclose(eagerc.cross(eagerc.tensor(a), eagerc.tensor(b)).numpy(), np.cross(a, b, axis=1),
                                   rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match="same number of columns"):
        eagerc.cdist(eagerc.zeros(2, 3), eagerc.zeros(2, 4))
    with pytest.raises(ValueError, match="compute_mode"):
        eagerc.cdist(eagerc.zeros(2, 3), eagerc.zeros(2, 3), compute_mode="fast")
    with pytest.raises(RuntimeError, match="sizes 2 and 3"):
        eagerc.einsum("ii->i", eagerc.zeros(2, 3))


def test_cdist_zero_distances_have_zero_gradients():
    x = eagerc.randn(3, 4, dtype=eagerc.float64, requires_grad=True)
    d = eagerc.cdist(x, x.detach())    # the difference form: exact zeros
    assert np.diag(d.detach().numpy()).tolist() == [0.0] * 3
    (g,) = eagerc.autograd.grad(d.diagonal().sum(), x)
    assert g.tolist() == [[0.0] * 4] * 3
    x = eagerc.zeros(30, 4, dtype=eagerc.float64, requires_grad=True)
    d = eagerc.cdist(x, x.detach())    # the matrix-product form (30 rows): |0|^2 + |0|^2 - 0 is exact too
    (g,) = eagerc.autograd.grad(d.sum(), x)
    assert d.detach().numpy().max() == 0 and np.abs(g.numpy()).max() == 0


def test_einsum_repeated_subscripts_differentiate():
    x = eagerc.randn(3, 3, dtype=eagerc.float64, requires_grad=True)
    assert gradcheck(lambda x: eagerc.einsum("ii->", x), (x,))
    assert gradgradcheck(lambda x: eagerc.einsum("ii,ij->j", x, x), (x,))


def test_logcumsumexp_refuses_integers_like_pytorch():
    with pytest.raises(RuntimeError, match="floating-point"):
        eagerc.logcumsumexp(eagerc.tensor([1, 2]), 0)


# ---------------------------------------------------------------- eagerc.testing.assert_close

def _message(actual, expected, **kw):
    with pytest.raises(AssertionError) as e:
        assert_close(actual, expected, **kw)
    return str(e.value)


def test_assert_close_messages_are_pytorchs():
    assert _message(eagerc.tensor([1.0, 2.0, 3.0]), eagerc.tensor([1.0, 2.5, 3.0])) == (
        "Tensor-likes are not close!\n\nMismatched elements: 1 / 3 (33.3%)\n"
        "Greatest absolute difference: 0.5 at index (1,) (up to 1e-05 allowed)\n"
        "Greatest relative difference: 0.20000000298023224 at index (1,) (up to 1.3e-06 allowed)")
    assert _message(eagerc.tensor([1, 2]), eagerc.tensor([1, 3])) == (
        "Tensor-likes are not equal!\n\nMismatched elements: 1 / 2 (50.0%)\n"
        "Greatest absolute difference: 1 at index (1,)\nGreatest relative difference: 0.3333333432674408 at index (1,)")
    assert _message(eagerc.tensor(1.0), eagerc.tensor(1.5)) == (
        "Scalars are not close!\n\nExpected 1.5 but got 1.0.\nAbsolute difference: 0.5 (up to 1e-05 allowed)\n"
        "Relative difference: 0.3333333333333333 (up to 1.3e-06 allowed)")
    assert _message(eagerc.tensor([1.0, 2.0]), eagerc.tensor([1, 2])) == \
        "The values for attribute 'dtype' do not match: eagerc.float32 != eagerc.int64."
    assert _message(eagerc.ones(2), eagerc.ones(3)) == \
        "The values for attribute 'shape' do not match: eagerc.Size([2]) != eagerc.Size([3])."
    assert _message({"a": [eagerc.ones(1)]}, {"a": [eagerc.zeros(1)]}).endswith(
        "\n\nThe failure occurred for item ['a'][0]")
    assert _message(eagerc.ones(1), eagerc.zeros(1), msg="custom") == "custom"


def test_assert_close_tolerances_and_options():
    assert_close(eagerc.tensor([1.0]), eagerc.tensor([1.0 + 1e-6]))             # float32: rtol 1.3e-6, atol 1e-5
    assert_close(eagerc.tensor([1.0], dtype=eagerc.float64), eagerc.tensor([1.0 + 1e-8], dtype=eagerc.float64))
    _message(eagerc.tensor([1.0], dtype=eagerc.float64), eagerc.tensor([1.0 + 1e-6], dtype=eagerc.float64))
    assert_close(eagerc.tensor([math.nan]), eagerc.tensor([math.nan]), equal_nan=True)
    assert_close(eagerc.tensor([1.0]), eagerc.tensor([1]), check_dtype=False)
    assert_close(eagerc.tensor([1.0]), eagerc.tensor([1.1]), rtol=0.2, atol=0)
    assert_close([1, 2.0], (1, 2.0))
    with pytest.raises(ValueError, match="must be either specified or omitted"):
        assert_close(eagerc.ones(1), eagerc.ones(1), rtol=1e-3)
    with pytest.raises(TypeError, match="No comparison pair"):
        assert_close(eagerc.ones(1), 1.0)


# ---------------------------------------------------------------- against PyTorch, where installed

def test_against_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    sq = rng.standard_normal((2, 3, 3))
    pairs = [
        (lambda m, x, y: m.atan2(x, y), (a, a[::-1].copy())),
        (lambda m, x, y: m.cdist(x, y), (a, b)),
        (lambda m, x, y: m.cdist(x, y, p=1.5), (a, b)),
        (lambda m, x, y: m.kron(x, y), (a, b)),
        (lambda m, x, y: m.linalg.cross(x[:, None], y[None]), (a, b)),
        (lambda m, x, y: m.addmm(y[:, 0], x, x.T, beta=0.3, alpha=-2), (a, a)),
        (lambda m, x: m.logcumsumexp(x * 100, 0), (a,)),
        (lambda m, x: m.erfinv(m.tanh(x)), (a,)),
        (lambda m, x: m.diag_embed(x, 1, 0, 2), (a,)),
        (lambda m, x: m.diag(x[0], -1), (a,)),
        (lambda m, x: m.rot90(x, 3, [0, 1]), (a,)),
        (lambda m, x: m.repeat_interleave(x, 2, dim=0), (a,)),
        (lambda m, x: m.einsum("bii->b", x), (sq,)),
        (lambda m, x: m.einsum("iij->j", x), (sq.transpose(1, 2, 0)[:, :, :2].copy()[:3, :3],)),
        (lambda m, x: m.stack(m.meshgrid(x[0], x[1], indexing="xy")), (a,)),
        (lambda m, x, y: m.isclose(x, x + y * 1e-5), (a, a)),
    ]
    for fn, arrays in pairs:
        ours = fn(eagerc, *[eagerc.tensor(x) for x in arrays])
        theirs = fn(torch, *[torch.tensor(x) for x in arrays])
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)
    x = torch.tensor([0.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    g, = torch.autograd.grad(x.prod(), x, create_graph=True)
    theirs = torch.autograd.grad(g.sum(), x)[0].numpy()
    y = _f64([0.0, 2.0, 3.0])
    g, = eagerc.autograd.grad(y.prod(), y, create_graph=True)
    np.testing.assert_allclose(eagerc.autograd.grad(g.sum(), y)[0].numpy(), theirs)
    assert eagerc.where(eagerc.tensor([True]), 1.0, 0).dtype.name == \
        str(torch.where(torch.tensor([True]), 1.0, 0).dtype).replace("torch.", "")
    f, tf = eagerc.finfo(eagerc.float16), torch.finfo(torch.float16)
    assert (f.eps, f.max, f.tiny, f.resolution, f.bits) == (tf.eps, tf.max, tf.tiny, tf.resolution, tf.bits)
    assert repr(eagerc.finfo(eagerc.float32)) == repr(torch.finfo(torch.float32))
