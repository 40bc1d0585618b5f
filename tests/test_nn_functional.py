"""eagerc.nn.functional beyond the op table: fused kernels vs their decompositions,
second derivatives through the fused ops, randomness (dropout), padding rows,
options and error messages. Forward values and first derivatives of every
functional against numpy references live in tests/op_cases/nn.py."""
import math
import warnings

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
import eagerc.ops.nn as nn_ops
from eagerc.autograd import gradcheck, gradgradcheck


def t64(a, requires_grad=True):
    return eagerc.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def _grads(fn, *arrays):
    """Value and input gradients of sum(fn(*inputs) * r) for a fixed random r."""
    xs = [t64(a) if np.asarray(a).dtype.kind == "f" else eagerc.tensor(a) for a in arrays]
    out = fn(*xs)
    r = eagerc.tensor(np.random.default_rng(1).standard_normal(tuple(out.shape)))
    (out * r).sum().backward()
    return out.detach().numpy(), [x.grad.numpy() for x in xs if x.requires_grad]


def _same(fast, slow, *arrays):
    v1, g1 = _grads(fast, *arrays)
    v2, g2 = _grads(slow, *arrays)
    np.testing.assert_allclose(v1, v2, rtol=1e-10, atol=1e-12)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 5)) * 3
X3 = RNG.standard_normal((2, 5, 3))
T = np.array([1, 0, 4, -100])
T3 = np.array([[0, 4, 2], [1, 1, 3]])
W = np.array([0.5, 1.0, 2.0, 1.5, 0.25])


# ---------------------------------------------------------------- fast path == decomposition

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_matches_decomposition(dim):
    _same(lambda x: F.softmax(x, dim), lambda x: nn_ops.softmax_decomposed(x, dim), X3)
    _same(lambda x: F.log_softmax(x, dim), lambda x: nn_ops.log_softmax_decomposed(x, dim), X3)


def test_linear_matches_decomposition():
    w, b = RNG.standard_normal((6, 3)), RNG.standard_normal(6)
    _same(F.linear, nn_ops.linear_decomposed, X3, w, b)
    _same(F.linear, nn_ops.linear_decomposed, X3[0, 0], w)


@pytest.mark.parametrize("ns", [(3,), (5, 3)])
def test_layer_norm_matches_decomposition(ns):
    w, b = RNG.standard_normal(ns), RNG.standard_normal(ns)
    _same(lambda x, w, b: F.layer_norm(x, ns, w, b), lambda x, w, b: nn_ops.layer_norm_decomposed(x, ns, w, b),
          X3, w, b)
    _same(lambda x: F.layer_norm(x, ns, eps=0.1), lambda x: nn_ops.layer_norm_decomposed(x, ns, eps=0.1), X3)


@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.3},
                                {"ignore_index": 4, "label_smoothing": 0.1, "reduction": "none"}])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_matches_decomposition(kw, weighted):
    w = eagerc.tensor(W) if weighted else None
    t = eagerc.tensor(np.where(T == -100, kw.get("ignore_index", -100), T))
    _same(lambda x: F.cross_entropy(x, t, w, **kw), lambda x: nn_ops.cross_entropy_decomposed(x, t, w, **kw), X)
    t3 = eagerc.tensor(T3)
    _same(lambda x: F.cross_entropy(x, t3, w, **kw), lambda x: nn_ops.cross_entropy_decomposed(x, t3, w, **kw), X3)


def test_batch_norm_matches_decomposition():
    x = RNG.standard_normal((4, 3, 2, 2))
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    _same(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
          lambda x, w, b: nn_ops.batch_norm_decomposed(x, w, b), x, w, b)
    _same(lambda x: F.batch_norm(x, None, None, training=True, eps=0.1),
          lambda x: nn_ops.batch_norm_decomposed(x, eps=0.1), x[:, :, 0])


def test_embedding_matches_decomposition():
    idx = eagerc.tensor(np.array([[0, 2, 2], [5, 1, 0]]))
    weight = RNG.standard_normal((6, 4))
    _same(lambda w: F.embedding(idx, w, padding_idx=2), lambda w: nn_ops.embedding_decomposed(idx, w, padding_idx=2),
          weight)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_decomposition(approximate):
    _same(lambda x: F.gelu(x, approximate), lambda x: nn_ops.gelu_decomposed(x, approximate), X3 * 3)


def test_gelu_float32_fast_erf_is_accurate():
    x = np.linspace(-9, 9, 20001)
    from scipy.special import erf
    ref = 0.5 * x * (1 + erf(x / math.sqrt(2)))
    out = F.gelu(eagerc.tensor(x, dtype=eagerc.float32)).numpy().astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6)
    xt = eagerc.tensor(x, dtype=eagerc.float32, requires_grad=True)
    F.gelu(xt).sum().backward()
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(xt.grad.numpy(), 0.5 * (1 + erf(x / math.sqrt(2))) + x * pdf, rtol=2e-6, atol=2e-6)


# Each fused op has two derivatives: a fused `<op>_backward` kernel for plain backward and a
# Tensor-op formula used under create_graph=True. They must agree.
@pytest.mark.parametrize("name,fn,shapes", [
    ("softmax", lambda x: F.softmax(x, 1), [(3, 4, 2)]),
    ("log_softmax", lambda x: F.log_softmax(x, -1), [(3, 4)]),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), [(2, 3, 4), (4,), (4,)]),
    ("layer_norm_2d", lambda x: F.layer_norm(x, (3, 4)), [(2, 3, 4)]),
    ("batch_norm", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [(4, 3, 2), (3,), (3,)]),
    ("gelu", F.gelu, [(3, 4)]),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [(3, 4)]),
    ("cross_entropy", lambda x: F.cross_entropy(x, eagerc.tensor([0, 3, 1])), [(3, 4)]),
    ("cross_entropy_ignore_smooth", lambda x: F.cross_entropy(x, eagerc.tensor([0, -100, 1]), label_smoothing=0.2),
     [(3, 4)]),
    ("cross_entropy_weight_none", lambda x: F.cross_entropy(
        x, eagerc.tensor([[0, 3], [2, 2]]), eagerc.tensor([1.0, 2.0, 0.5, 3.0], dtype=eagerc.float64),
        reduction="none", label_smoothing=0.1, ignore_index=2), [(2, 4, 2)]),
    ("cross_entropy_unbatched_sum", lambda x: F.cross_entropy(x, eagerc.tensor(2), reduction="sum"), [(4,)]),
])
def test_fused_backward_kernels_match_their_formulas(name, fn, shapes):
    rng = np.random.default_rng(4)
    xs = [t64(rng.standard_normal(s)) for s in shapes]
    out = fn(*xs)
    r = eagerc.tensor(rng.standard_normal(tuple(out.shape)))
    fused = eagerc.autograd.grad((out * r).sum(), xs, retain_graph=True)
    formula = eagerc.autograd.grad((out * r).sum(), xs, create_graph=True)
    for a, b in zip(fused, formula):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- second derivatives of the fused ops

# (scalar losses are reshaped to (1,): gradgradcheck's contiguous copy turns 0-d grad_outputs into 1-d)
@pytest.mark.parametrize("name,fn,shapes,first", [
    ("softmax", lambda x: F.softmax(x, 1), [(2, 3)], True),
    ("log_softmax", lambda x: F.log_softmax(x, 0), [(3, 2)], True),
    ("linear", F.linear, [(2, 3), (2, 3), (2,)], True),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (3,), w, b), [(2, 3), (3,), (3,)], True),
    ("batch_norm", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [(3, 2), (2,), (2,)], True),
    ("cross_entropy", lambda x: F.cross_entropy(x, eagerc.tensor([2, 0]), label_smoothing=0.2).reshape(1),
     [(2, 3)], True),
    ("cross_entropy_weight", lambda x: F.cross_entropy(x, eagerc.tensor([2, 0, -100]),
                                                       eagerc.tensor([1.0, 2.0, 0.5], dtype=eagerc.float64),
                                                       reduction="none"), [(3, 3)], True),
    ("embedding", lambda w: F.embedding(eagerc.tensor([[0, 2], [2, 1]]), w) ** 2, [(3, 2)], True),
    # the padding row's gradient is zero by definition (not the finite difference): second order only
    ("embedding_padding", lambda w: F.embedding(eagerc.tensor([[0, 2], [2, 1]]), w, padding_idx=1) ** 2,
     [(3, 2)], False),
    ("pad", lambda x: F.pad(x, (1, -1)) ** 2, [(2, 3)], True),
    ("gelu", F.gelu, [(2, 3)], True),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [(2, 3)], True),
])
def test_second_derivatives(name, fn, shapes, first):
    rng = np.random.default_rng(3)
    xs = [t64(rng.standard_normal(s)) for s in shapes]
    if first:
        assert gradcheck(fn, xs)
    assert gradgradcheck(fn, xs)


def test_fused_ops_float32_keep_dtype():
    x = eagerc.randn(3, 4)
    for out in (F.softmax(x, 1), F.log_softmax(x, 1), F.layer_norm(x, (4,)),
                F.cross_entropy(x, eagerc.tensor([0, 1, 3])), F.linear(x, eagerc.randn(2, 4))):
        assert out.dtype == eagerc.float32


# ---------------------------------------------------------------- embedding

def test_embedding_padding_idx_row_gets_no_gradient():
    w = t64(RNG.standard_normal((5, 3)))
    idx = eagerc.tensor([[1, 2, 1], [4, 1, 0]])
    out = F.embedding(idx, w, padding_idx=1)
    np.testing.assert_array_equal(out.detach().numpy(), w.detach().numpy()[idx.numpy()])
    out.sum().backward()
    counts = np.bincount(idx.numpy().ravel(), minlength=5).astype(float)
    counts[1] = 0
    np.testing.assert_array_equal(w.grad.numpy(), np.repeat(counts[:, None], 3, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["few repeats", "one index many times", "negative indices", "empty"])
def test_embedding_backward_sums_in_index_order_like_add_at(case, dtype):
    # the kernel adds in rounds (runtime/ops/nn.py, _scatter_add_rows); each weight row must get
    # its gradient rows summed in the order they occur, as a sequential loop does: same bits
    from eagerc.runtime.ops import OPS
    rng = np.random.default_rng(7)
    n = {"few repeats": 500, "one index many times": 300, "negative indices": 200, "empty": 0}[case]
    idx = {"few repeats": rng.integers(0, 200, n), "one index many times": np.full(n, 3),
           "negative indices": rng.integers(-20, 20, n), "empty": np.zeros(0, np.int64)}[case]
    g = (rng.standard_normal((n, 33)) * rng.choice([1e-4, 1.0, 1e4], (n, 1))).astype(dtype)
    want = np.zeros((200, 33), dtype)
    for i in range(n):
        want[idx[i]] = want[idx[i]] + g[i]
    got = OPS["embedding_backward"].cpu(g, idx, num_weights=200)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_embedding_negative_padding_idx_and_errors():
    w = t64(np.ones((5, 2)))
    F.embedding(eagerc.tensor([4, 0]), w, padding_idx=-1).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], [1, 0, 0, 0, 0])
    with pytest.raises(IndexError, match="out of range"):
        F.embedding(eagerc.tensor([5]), w)
    with pytest.raises(TypeError, match="integer"):
        F.embedding(eagerc.tensor([1.0]), w)


def test_embedding_max_norm_renormalises_rows_in_place():
    w = eagerc.tensor([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]])
    F.embedding(eagerc.tensor([0, 1]), w, max_norm=1.0)
    np.testing.assert_allclose(np.linalg.norm(w.numpy(), axis=1), [1.0, 0.5, 10.0], rtol=1e-5)


# ---------------------------------------------------------------- dropout

def test_dropout_statistics_scale_and_gradient():
    eagerc.manual_seed(0)
    x = eagerc.ones(200, 100, dtype=eagerc.float64, requires_grad=True)
    y = F.dropout(x, 0.3)
    a = y.detach().numpy()
    assert set(np.unique(a)) <= {0.0, 1 / 0.7}
    assert abs((a == 0).mean() - 0.3) < 0.02
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), a)  # d y / d x = mask / (1 - p)


def test_dropout_is_reproducible_and_identity_when_not_training():
    x = eagerc.randn(50)
    eagerc.manual_seed(7)
    a = F.dropout(x, 0.5).numpy()
    eagerc.manual_seed(7)
    b = F.dropout(x, 0.5).numpy()
    np.testing.assert_array_equal(a, b)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), np.zeros(50))
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)


def test_dropout2d_zeroes_whole_channels():
    eagerc.manual_seed(1)
    y = F.dropout2d(eagerc.ones(4, 8, 3, 3), 0.5).numpy()
    per_channel = y.reshape(4, 8, -1)
    assert np.all((per_channel == 0).all(-1) | (per_channel == 2.0).all(-1))
    assert 0 < (per_channel == 0).all(-1).mean() < 1


def test_dropout_inplace():
    x = eagerc.ones(10, 10)
    y = F.dropout(x, 0.5, inplace=True)
    assert y is x and (x.numpy() == 0).any()


# ---------------------------------------------------------------- losses: options and errors

def test_cross_entropy_errors():
    x = eagerc.randn(3, 4)
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(x, eagerc.tensor([0, 4, 1]))
    with pytest.raises(ValueError, match="target of shape"):
        F.cross_entropy(x, eagerc.tensor([0, 1]))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.cross_entropy(x, eagerc.tensor([0, 1, 2]), reduction="avg")
    with pytest.raises(TypeError, match="floating"):
        F.cross_entropy(eagerc.tensor([[1, 2]]), eagerc.tensor([0]))
    with pytest.raises(RuntimeError, match="integer dtype as target.*only when it has the input's shape"):
        F.cross_entropy(x, eagerc.rand(3, 5))


def test_cross_entropy_float_targets_follow_pytorch():
    # PyTorch: a target shaped like the input holds class probabilities (and must be floating);
    # any other shape holds class indices (and must be integers) -- a float is never rounded
    x = eagerc.tensor(X)
    with pytest.raises(RuntimeError, match="expected class indices of an integer dtype.*float64 of shape \\[4\\]"):
        F.cross_entropy(x, eagerc.tensor([1.0, 0.0, 4.0, 2.0], dtype=eagerc.float64))
    with pytest.raises(RuntimeError, match="found bool"):
        F.cross_entropy(x, eagerc.tensor([True, False, True, False]))
    with pytest.raises(RuntimeError, match="Expected floating point type for target with class probabilities, "
                                           "got int64"):
        F.cross_entropy(x, eagerc.zeros(4, 5, dtype=eagerc.int64))
    p = np.full((4, 5), 0.2)
    with pytest.raises(RuntimeError, match="ignore_index is not supported for floating point target"):
        F.cross_entropy(x, eagerc.tensor(p), ignore_index=0)
    # probabilities (with label smoothing): -sum(q * log_softmax(x)) averaged over rows, q mixed with 1/C
    q = RNG.dirichlet(np.ones(5), size=4)
    logp = X - X.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    for eps in (0.0, 0.3):
        qs = q * (1 - eps) + eps / 5
        got = F.cross_entropy(x, eagerc.tensor(q), label_smoothing=eps).item()
        assert got == pytest.approx(-(qs * logp).sum(1).mean(), rel=1e-12)
    # unbatched: a (C,) input with a (C,) float target is one probability row
    got = F.cross_entropy(eagerc.tensor(X[0]), eagerc.tensor(q[0])).item()
    assert got == pytest.approx(-(q[0] * logp[0]).sum(), rel=1e-12)


def test_nll_loss_refuses_float_targets():
    # before: a float target was compared with the class numbers, so 1.5 silently picked nothing
    with pytest.raises(RuntimeError, match="nll_loss: expected class indices of an integer dtype.*float32"):
        F.nll_loss(eagerc.randn(3, 4), eagerc.tensor([1.5, 2.0, 0.0]))


def test_cross_entropy_all_ignored_is_nan_like_pytorch():
    with np.errstate(invalid="ignore"):
        out = F.cross_entropy(eagerc.randn(2, 3), eagerc.tensor([-100, -100]))
    assert math.isnan(out.item())


def test_cross_entropy_legacy_reduction_arguments():
    x, t = eagerc.randn(4, 3), eagerc.tensor([0, 1, 2, 1])
    np.testing.assert_allclose(F.cross_entropy(x, t, size_average=False).item(),
                               F.cross_entropy(x, t, reduction="sum").item(), rtol=1e-6)
    assert F.cross_entropy(x, t, reduce=False).shape == (4,)


def test_nll_loss_out_of_bounds():
    with pytest.raises(IndexError, match="out of bounds"):
        F.nll_loss(eagerc.randn(2, 3), eagerc.tensor([3, 0]))


def test_binary_cross_entropy_clamps_log_and_checks_range():
    x = eagerc.tensor([0.0, 1.0], dtype=eagerc.float64)
    t = eagerc.tensor([1.0, 0.0], dtype=eagerc.float64)
    with np.errstate(divide="ignore"):
        assert F.binary_cross_entropy(x, t).item() == pytest.approx(100.0)
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(eagerc.tensor([1.5]), eagerc.tensor([1.0]))


def test_bce_with_logits_is_stable_for_large_logits():
    x = eagerc.tensor([1000.0, -1000.0], dtype=eagerc.float64, requires_grad=True)
    t = eagerc.tensor([0.0, 1.0], dtype=eagerc.float64)
    loss = F.binary_cross_entropy_with_logits(x, t, reduction="sum")
    assert loss.item() == pytest.approx(2000.0)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, -1.0])


def test_loss_size_mismatch_warns():
    with pytest.warns(UserWarning, match="different to the input size"):
        F.mse_loss(eagerc.randn(3, 1), eagerc.randn(3))


def test_kl_div_mean_warns_and_batchmean_divides_by_batch():
    x, t = eagerc.randn(4, 3).log_softmax(1), eagerc.randn(4, 3).softmax(1)
    with pytest.warns(UserWarning, match="batchmean"):
        F.kl_div(x, t)
    np.testing.assert_allclose(F.kl_div(x, t, reduction="batchmean").item(),
                               F.kl_div(x, t, reduction="sum").item() / 4, rtol=1e-6)


# ---------------------------------------------------------------- misc functionals

def test_softmax_implicit_dim_warns_like_pytorch():
    with pytest.warns(UserWarning, match="Implicit dimension"):
        out = F.softmax(eagerc.randn(2, 3))
    np.testing.assert_allclose(out.sum(1).numpy(), np.ones(2), rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eagerc.randn(2, 3).softmax(-1)


def test_softmax_dtype_argument_and_integer_input():
    x = eagerc.tensor([[1, 2, 3]])
    assert F.softmax(x, 1, dtype=eagerc.float64).dtype == eagerc.float64
    with pytest.raises(TypeError, match="floating"):
        F.softmax(x, 1)


def test_linear_dtype_mismatch_is_an_error():
    with pytest.raises(RuntimeError, match="one floating dtype"):
        F.linear(eagerc.randn(2, 3), eagerc.randn(4, 3, dtype=eagerc.float64))
    with pytest.raises(RuntimeError, match="in_features=3"):
        F.linear(eagerc.randn(2, 4), eagerc.randn(4, 3))


def test_one_hot_infers_num_classes():
    out = F.one_hot(eagerc.tensor([2, 0]))
    assert out.dtype == eagerc.int64
    np.testing.assert_array_equal(out.numpy(), [[0, 0, 1], [1, 0, 0]])
    with pytest.raises(RuntimeError, match="class values"):
        F.one_hot(eagerc.tensor([3]), 2)


def test_pad_errors():
    x = eagerc.randn(2, 3)
    with pytest.raises(ValueError, match="divisible by 2"):
        F.pad(x, (1,))
    with pytest.raises(ValueError, match="too large"):
        F.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="reflect"):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(NotImplementedError):
        F.pad(x, (1, 1), mode="wrap-around")


def test_sdpa_dropout_and_mask_conflict():
    q = eagerc.randn(1, 4, 3)
    eagerc.manual_seed(0)
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    eagerc.manual_seed(0)
    b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), F.scaled_dot_product_attention(q, q, q).numpy())
    with pytest.raises(RuntimeError, match="either attn_mask or is_causal"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=eagerc.ones(4, 4, dtype=eagerc.bool), is_causal=True)


def test_batch_norm_channel_mismatch_names_batch_norm_and_both_counts():
    x = eagerc.randn(4, 3, 5)
    rm, rv = eagerc.zeros(4) + 0.5, eagerc.ones(4)
    with pytest.raises(RuntimeError, match=r"batch_norm: running_mean should contain 3 elements not 4"):
        F.batch_norm(x, rm, rv, training=True)
    np.testing.assert_array_equal(rm.numpy(), 0.5)        # refused before the running stats moved
    with pytest.raises(RuntimeError, match=r"batch_norm: running_var should contain 3 elements not 4"):
        F.batch_norm(x, eagerc.zeros(3), rv)
    with pytest.raises(RuntimeError, match=r"batch_norm: weight should contain 3 elements not 4"):
        F.batch_norm(x, None, None, eagerc.ones(4), training=True)
    with pytest.raises(RuntimeError, match=r"batch_norm: bias should contain 3 elements not 2"):
        F.batch_norm(x, eagerc.zeros(3), eagerc.ones(3), None, eagerc.ones(2))


def test_batch_norm_module_checks_num_features():
    for bn, x in ((eagerc.nn.BatchNorm1d(4), eagerc.randn(4, 3, 5)), (eagerc.nn.BatchNorm2d(4), eagerc.randn(2, 3, 2, 2)),
                  (eagerc.nn.BatchNorm1d(4, affine=False, track_running_stats=False), eagerc.randn(4, 3))):
        for mode in (bn.train, bn.eval):
            mode()
            with pytest.raises(RuntimeError, match=rf"{type(bn).__name__}\(4\): expected an input with 4 "
                                                   r"channels \(num_features\) in dim 1, got 3"):
                bn(x)
        if bn.track_running_stats:
            assert bn.num_batches_tracked.item() == 0 and (bn.running_mean.numpy() == 0).all()
    with pytest.raises(ValueError, match="BatchNorm2d: expected 4D input \\(got 3D input\\)"):
        eagerc.nn.BatchNorm2d(3)(eagerc.randn(3, 4, 4))


def test_batch_norm_functional_updates_running_stats():
    x = RNG.standard_normal((6, 2, 3))
    rm, rv = eagerc.zeros(2, dtype=eagerc.float64), eagerc.ones(2, dtype=eagerc.float64)
    F.batch_norm(t64(x, False), rm, rv, training=True, momentum=0.25)
    np.testing.assert_allclose(rm.numpy(), 0.25 * x.mean((0, 2)))
    np.testing.assert_allclose(rv.numpy(), 0.75 + 0.25 * x.var((0, 2), ddof=1))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(eagerc.randn(1, 2), None, None, training=True)


def test_cosine_similarity_and_normalize_handle_zero_vectors():
    z = eagerc.zeros(2, 3, dtype=eagerc.float64, requires_grad=True)
    out = F.cosine_similarity(z, eagerc.ones(2, 3, dtype=eagerc.float64))
    np.testing.assert_array_equal(out.detach().numpy(), [0.0, 0.0])
    F.normalize(z).sum().backward()
    assert np.isfinite(z.grad.numpy()).all()


def test_functional_all_names_exist():
    for name in F.__all__:
        assert callable(getattr(F, name)), name
