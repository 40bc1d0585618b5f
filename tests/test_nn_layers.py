"""Layers against numpy references, default initialisation statistics, train/eval behaviour."""
import math

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F


def np_(t):
    return t.detach().numpy()


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _uniform_bound_ok(a, bound):
    """Values inside [-bound, bound], spread over it, with the mean and std of U(-bound, bound)."""
    assert np.abs(a).max() <= bound + 1e-7
    assert np.abs(a).max() > 0.9 * bound
    n = a.size
    assert abs(a.mean()) < 4 * bound / math.sqrt(3 * n)
    assert abs(a.std() - bound / math.sqrt(3)) < 0.05 * bound


# ---------------------------------------------------------------- Linear, Bilinear, Identity

def test_linear_forward_backward_against_numpy():
    lin = nn.Linear(4, 3).double()
    x = np.random.default_rng(0).standard_normal((2, 5, 4))
    xt = eagerc.tensor(x, requires_grad=True)
    out = lin(xt)
    W, b = np_(lin.weight), np_(lin.bias)
    np.testing.assert_allclose(np_(out), x @ W.T + b, rtol=1e-12)
    g = np.random.default_rng(1).standard_normal(out.shape)
    out.backward(eagerc.tensor(g))
    np.testing.assert_allclose(lin.weight.grad.numpy(), g.reshape(-1, 3).T @ x.reshape(-1, 4), rtol=1e-10)
    np.testing.assert_allclose(lin.bias.grad.numpy(), g.sum((0, 1)), rtol=1e-10)
    np.testing.assert_allclose(xt.grad.numpy(), g @ W, rtol=1e-10)


def test_linear_default_init_matches_pytorch_distribution():
    eagerc.manual_seed(0)
    lin = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)  # kaiming_uniform_(a=sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    _uniform_bound_ok(np_(lin.weight), bound)
    _uniform_bound_ok(np_(lin.bias), bound)
    assert lin.weight.dtype == eagerc.float32 and lin.weight.shape == (300, 400)
    assert nn.Linear(3, 2, bias=False).bias is None
    assert nn.Linear(3, 2, dtype=eagerc.float64).weight.dtype == eagerc.float64


def test_init_is_reproducible_with_manual_seed():
    eagerc.manual_seed(3)
    a = np_(nn.Linear(5, 5).weight)
    eagerc.manual_seed(3)
    b = np_(nn.Linear(5, 5).weight)
    np.testing.assert_array_equal(a, b)


def test_bilinear_against_numpy():
    eagerc.manual_seed(0)
    m = nn.Bilinear(3, 4, 2).double()
    x1, x2 = np.random.default_rng(0).standard_normal((5, 3)), np.random.default_rng(1).standard_normal((5, 4))
    ref = np.einsum("ni,kij,nj->nk", x1, np_(m.weight), x2) + np_(m.bias)
    np.testing.assert_allclose(np_(m(eagerc.tensor(x1), eagerc.tensor(x2))), ref, rtol=1e-12)
    _uniform_bound_ok(np_(nn.Bilinear(100, 20, 50).weight), 1 / math.sqrt(100))


def test_identity_flatten_unflatten():
    x = eagerc.randn(2, 3, 4, 5)
    assert nn.Identity(1, key=2)(x) is x
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 2)(x).shape == (24, 5)
    assert nn.Unflatten(1, (3, 1))(eagerc.randn(2, 3, 4)).shape == (2, 3, 1, 4)
    assert nn.Unflatten(-1, (2, -1))(eagerc.randn(2, 6)).shape == (2, 2, 3)
    np.testing.assert_array_equal(np_(nn.Flatten()(x)), np_(x).reshape(2, 60))


# ---------------------------------------------------------------- Embedding

def test_embedding_layer():
    eagerc.manual_seed(0)
    emb = nn.Embedding(1000, 64, padding_idx=3)
    w = np_(emb.weight)
    np.testing.assert_array_equal(w[3], np.zeros(64))
    rest = np.delete(w, 3, axis=0)
    assert abs(rest.mean()) < 0.01 and abs(rest.std() - 1) < 0.01  # N(0, 1)
    idx = eagerc.tensor([[3, 5], [5, 7]])
    out = emb(idx)
    np.testing.assert_array_equal(np_(out), w[idx.numpy()])
    out.sum().backward()
    g = emb.weight.grad.numpy()
    assert g[3].sum() == 0 and g[5].sum() == 2 * 64 and g[7].sum() == 64
    assert nn.Embedding(10, 2, padding_idx=-1).padding_idx == 9
    pre = nn.Embedding.from_pretrained(eagerc.ones(4, 2))
    assert not pre.weight.requires_grad and pre(eagerc.tensor([1])).shape == (1, 2)


# ---------------------------------------------------------------- normalisation

def test_layer_norm_layer():
    ln = nn.LayerNorm((3, 4)).double()
    assert np.all(np_(ln.weight) == 1) and np.all(np_(ln.bias) == 0)
    with eagerc.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.normal_()
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    mu = x.mean((1, 2), keepdims=True)
    var = x.var((1, 2), keepdims=True)
    ref = (x - mu) / np.sqrt(var + 1e-5) * np_(ln.weight) + np_(ln.bias)
    np.testing.assert_allclose(np_(ln(eagerc.tensor(x))), ref, rtol=1e-10, atol=1e-12)
    assert nn.LayerNorm(4, elementwise_affine=False).weight is None
    assert nn.LayerNorm(4, bias=False).bias is None


def test_group_norm_and_rms_norm_layers():
    x = np.random.default_rng(0).standard_normal((2, 6, 5))
    gn = nn.GroupNorm(3, 6).double()
    g = x.reshape(2, 3, -1)
    ref = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(np_(gn(eagerc.tensor(x))), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)
    rms = nn.RMSNorm(5).double()
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(np_(rms(eagerc.tensor(x))), x / np.sqrt((x * x).mean(-1, keepdims=True) + eps),
                               rtol=1e-12)


def test_batch_norm_training_updates_running_stats_like_pytorch():
    bn = nn.BatchNorm1d(3, momentum=0.2).double()
    rng = np.random.default_rng(0)
    rm, rv = np.zeros(3), np.ones(3)
    for step in range(3):
        x = rng.standard_normal((8, 3, 5)) * (step + 1) + step
        out = np_(bn(eagerc.tensor(x)))
        mean, var = x.mean((0, 2)), x.var((0, 2))
        ref = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5)
        np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)
        rm = 0.8 * rm + 0.2 * mean
        rv = 0.8 * rv + 0.2 * x.var((0, 2), ddof=1)  # the running variance is unbiased
    np.testing.assert_allclose(np_(bn.running_mean), rm, rtol=1e-12)
    np.testing.assert_allclose(np_(bn.running_var), rv, rtol=1e-12)
    assert bn.num_batches_tracked.item() == 3
    bn.eval()
    x = rng.standard_normal((4, 3, 5))
    np.testing.assert_allclose(np_(bn(eagerc.tensor(x))), (x - rm[:, None]) / np.sqrt(rv[:, None] + 1e-5),
                               rtol=1e-10)
    assert bn.num_batches_tracked.item() == 3  # eval does not count


def test_batch_norm_cumulative_average_and_no_tracking():
    bn = nn.BatchNorm2d(2, momentum=None).double()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 2, 3, 3)) + i for i in range(3)]
    for x in xs:
        bn(eagerc.tensor(x))
    np.testing.assert_allclose(np_(bn.running_mean), np.mean([x.mean((0, 2, 3)) for x in xs], 0), rtol=1e-10)
    free = nn.BatchNorm2d(2, track_running_stats=False).double().eval()
    assert free.running_mean is None
    out = np_(free(eagerc.tensor(xs[0])))  # batch statistics even in eval mode
    np.testing.assert_allclose(out.mean((0, 2, 3)), 0, atol=1e-12)
    with pytest.raises(ValueError, match="expected 4D input"):
        bn(eagerc.randn(2, 2))


def test_batch_norm_gradients_against_numpy():
    bn = nn.BatchNorm1d(2).double()
    x = np.random.default_rng(0).standard_normal((5, 2))
    xt = eagerc.tensor(x, requires_grad=True)
    g = np.random.default_rng(1).standard_normal((5, 2))
    bn(xt).backward(eagerc.tensor(g))
    n = x.shape[0]
    xhat = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    ref = (g - g.mean(0) - xhat * (g * xhat).mean(0)) / np.sqrt(x.var(0) + 1e-5)
    np.testing.assert_allclose(xt.grad.numpy(), ref, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(bn.weight.grad.numpy(), (g * xhat).sum(0), rtol=1e-10)
    np.testing.assert_allclose(bn.bias.grad.numpy(), g.sum(0), rtol=1e-12)
    assert n == 5


# ---------------------------------------------------------------- dropout, activations, losses

def test_dropout_layer_train_and_eval():
    d = nn.Dropout(0.5)
    x = eagerc.ones(1000)
    y = np_(d(x))
    assert 0.4 < (y == 0).mean() < 0.6 and set(np.unique(y)) == {0.0, 2.0}
    d.eval()
    assert d(x) is x
    with pytest.raises(ValueError):
        nn.Dropout(-0.1)
    d2 = nn.Dropout2d(0.5)
    assert d2(eagerc.ones(2, 3, 4, 4)).shape == (2, 3, 4, 4)


ACTIVATIONS = [
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.LeakyReLU(0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    (nn.GELU(), lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    (nn.GELU("tanh"), lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
    (nn.ELU(0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0)))),
    (nn.Softplus(beta=2, threshold=5), lambda x: np.where(2 * x > 5, x, np.log1p(np.exp(2 * x)) / 2)),
    (nn.Tanh(), np.tanh),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.Softmax(dim=1), lambda x: _softmax(x, 1)),
    (nn.LogSoftmax(dim=1), lambda x: np.log(_softmax(x, 1))),
    (nn.Hardtanh(-0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5)),
    (nn.ReLU6(), lambda x: np.clip(x, 0, 6)),
    (nn.Mish(), lambda x: x * np.tanh(np.log1p(np.exp(x)))),
]


@pytest.mark.parametrize("module,ref", ACTIVATIONS, ids=lambda v: repr(v) if isinstance(v, nn.Module) else "")
def test_activation_modules(module, ref):
    x = np.random.default_rng(0).standard_normal((3, 4)) * 4
    np.testing.assert_allclose(np_(module(eagerc.tensor(x))), ref(x), rtol=1e-9, atol=1e-12)


def test_inplace_activation():
    x = eagerc.tensor([-1.0, 2.0])
    assert nn.ReLU(inplace=True)(x) is x
    np.testing.assert_array_equal(x.numpy(), [0.0, 2.0])


def test_loss_modules_match_functional():
    rng = np.random.default_rng(0)
    x, y = eagerc.tensor(rng.standard_normal((4, 3))), eagerc.tensor(rng.standard_normal((4, 3)))
    t = eagerc.tensor([0, 2, 1, 2])
    w = eagerc.tensor([1.0, 2.0, 0.5], dtype=eagerc.float64)
    p = eagerc.tensor(rng.uniform(0.1, 0.9, (4, 3)))
    pairs = [
        (nn.CrossEntropyLoss(weight=w, label_smoothing=0.1)(x, t),
         F.cross_entropy(x, t, weight=w, label_smoothing=0.1)),
        (nn.CrossEntropyLoss(reduction="none", ignore_index=2)(x, t), F.cross_entropy(x, t, reduction="none",
                                                                                     ignore_index=2)),
        (nn.NLLLoss(weight=w)(x.log_softmax(1), t), F.nll_loss(x.log_softmax(1), t, weight=w)),
        (nn.MSELoss()(x, y), F.mse_loss(x, y)),
        (nn.L1Loss(reduction="sum")(x, y), F.l1_loss(x, y, reduction="sum")),
        (nn.SmoothL1Loss(beta=0.3)(x, y), F.smooth_l1_loss(x, y, beta=0.3)),
        (nn.HuberLoss(delta=0.3)(x, y), F.huber_loss(x, y, delta=0.3)),
        (nn.BCELoss()(p, p.flip(0)), F.binary_cross_entropy(p, p.flip(0))),
        (nn.BCEWithLogitsLoss(pos_weight=w)(x, p), F.binary_cross_entropy_with_logits(x, p, pos_weight=w)),
        (nn.KLDivLoss(reduction="batchmean", log_target=True)(x, y),
         F.kl_div(x, y, reduction="batchmean", log_target=True)),
    ]
    for a, b in pairs:
        np.testing.assert_array_equal(np_(a), np_(b))
    assert "weight" in dict(nn.CrossEntropyLoss(weight=w).named_buffers())
    assert nn.MSELoss(size_average=False).reduction == "sum"


# ---------------------------------------------------------------- MultiheadAttention

def _np_mha(m, q, k, v, key_padding_mask=None, attn_mask=None, average=True):
    """Sequence-first (L, N, E) reference with numpy."""
    E, H = m.embed_dim, m.num_heads
    D = E // H
    W, b = np_(m.in_proj_weight), np_(m.in_proj_bias)
    qp, kp, vp = q @ W[:E].T + b[:E], k @ W[E:2 * E].T + b[E:2 * E], v @ W[2 * E:].T + b[2 * E:]
    L, N, S = q.shape[0], q.shape[1], k.shape[0]

    def heads(x, n):  # (n, N, E) -> (N, H, n, D)
        return x.reshape(n, N, H, D).transpose(1, 2, 0, 3)
    scores = heads(qp, L) @ heads(kp, S).transpose(0, 1, 3, 2) / math.sqrt(D)
    if attn_mask is not None:
        scores = np.where(attn_mask, -np.inf, scores)
    if key_padding_mask is not None:
        scores = np.where(key_padding_mask[:, None, None, :], -np.inf, scores)
    w = _softmax(scores, -1)
    out = (w @ heads(vp, S)).transpose(2, 0, 1, 3).reshape(L, N, E)
    out = out @ np_(m.out_proj.weight).T + np_(m.out_proj.bias)
    return out, (w.mean(1) if average else w)


def test_multihead_attention_init():
    eagerc.manual_seed(0)
    m = nn.MultiheadAttention(64, 4)
    w = np_(m.in_proj_weight)
    _uniform_bound_ok(w, math.sqrt(6 / (64 + 3 * 64)))  # xavier_uniform_ on (3E, E)
    assert np.all(np_(m.in_proj_bias) == 0) and np.all(np_(m.out_proj.bias) == 0)
    _uniform_bound_ok(np_(m.out_proj.weight), 1 / math.sqrt(64))
    assert [n for n, _ in m.named_parameters()] == ["in_proj_weight", "in_proj_bias", "out_proj.weight",
                                                    "out_proj.bias"]


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_against_numpy(batch_first):
    eagerc.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=batch_first).double()
    with eagerc.no_grad():
        m.in_proj_bias.normal_()
        m.out_proj.bias.normal_()
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((5, 3, 8)), rng.standard_normal((6, 3, 8))  # (L, N, E), (S, N, E)
    kpm = np.zeros((3, 6), bool)
    kpm[:, -1] = True
    am = np.zeros((5, 6), bool)
    am[0, 2] = True

    def run(**kw):
        def arr(x):
            return eagerc.tensor(x.transpose(1, 0, 2) if batch_first else x)
        out, w = m(arr(q), arr(k), arr(k), **{n: eagerc.tensor(v) if isinstance(v, np.ndarray) else v
                                              for n, v in kw.items()})
        out = np_(out)
        return (out.transpose(1, 0, 2) if batch_first else out), (None if w is None else np_(w))

    for kw in ({}, {"key_padding_mask": kpm}, {"attn_mask": am}):
        out, w = run(**kw)
        ref_out, ref_w = _np_mha(m, q, k, k, kw.get("key_padding_mask"), kw.get("attn_mask"))
        np.testing.assert_allclose(out, ref_out, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(w, ref_w, rtol=1e-10, atol=1e-12)
    out, w = run(key_padding_mask=kpm, average_attn_weights=False)
    assert w.shape == (3, 2, 5, 6)
    np.testing.assert_allclose(w, _np_mha(m, q, k, k, kpm, average=False)[1], rtol=1e-10, atol=1e-12)
    out, w = run(need_weights=False)
    assert w is None
    # a float mask is added to the scores: -inf where the bool mask is True gives the same result
    fm = np.where(am, -np.inf, 0.0)
    np.testing.assert_allclose(run(attn_mask=fm)[0], run(attn_mask=am)[0], rtol=1e-12)


def test_multihead_attention_self_attention_causal_unbatched_and_grads():
    eagerc.manual_seed(0)
    m = nn.MultiheadAttention(6, 3).double()
    x = np.random.default_rng(1).standard_normal((4, 6))
    causal = np.triu(np.ones((4, 4), bool), 1)
    xt = eagerc.tensor(x, requires_grad=True)
    out, w = m(xt, xt, xt, attn_mask=eagerc.tensor(causal))
    ref_out, ref_w = _np_mha(m, x[:, None], x[:, None], x[:, None], attn_mask=causal)
    np.testing.assert_allclose(np_(out), ref_out[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np_(w), ref_w[0], rtol=1e-10, atol=1e-12)
    assert np.all(np.triu(np_(w), 1) == 0)
    out2, _ = m(xt, xt, xt, is_causal=True)
    np.testing.assert_allclose(np_(out2), np_(out), rtol=1e-12)
    out.sum().backward()
    assert xt.grad.shape == (4, 6) and m.in_proj_weight.grad.shape == (18, 6)
    assert m.out_proj.weight.grad is not None


def test_multihead_attention_kdim_vdim():
    m = nn.MultiheadAttention(8, 2, kdim=3, vdim=5, batch_first=True)
    assert m.in_proj_weight is None and m.k_proj_weight.shape == (8, 3)
    out, w = m(eagerc.randn(2, 4, 8), eagerc.randn(2, 6, 3), eagerc.randn(2, 6, 5))
    assert out.shape == (2, 4, 8) and w.shape == (2, 4, 6)


def test_multihead_attention_dropout_only_in_training():
    m = nn.MultiheadAttention(4, 2, dropout=0.5, batch_first=True)
    x = eagerc.randn(1, 3, 4)
    m.eval()
    a, _ = m(x, x, x)
    b, _ = m(x, x, x)
    np.testing.assert_array_equal(np_(a), np_(b))
    m.train()
    eagerc.manual_seed(0)
    c, _ = m(x, x, x)
    assert not np.allclose(np_(a), np_(c))


# ---------------------------------------------------------------- a small model trains

def test_mlp_learns_xor():
    eagerc.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))
    x = eagerc.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    t = eagerc.tensor([0, 1, 1, 0])
    for _ in range(300):
        loss = F.cross_entropy(model(x), t)
        model.zero_grad()
        loss.backward()
        with eagerc.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
    assert loss.item() < 0.05
    np.testing.assert_array_equal(model(x).argmax(1).numpy(), t.numpy())
