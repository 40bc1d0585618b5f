"""Op-table entries: eagerc.nn.functional (activations, linear, normalisation, losses, ...).

Every reference below is written out with numpy, independently of eagerc. Class
targets and indices are integer inputs (no gradient); constant options such as
loss weights are closed over, so gradcheck only sees the differentiable inputs.
"""
import math

import numpy as np

import eagerc.nn.functional as F
import eagerc.ops.nn as nn_ops
from optable import Case, away_from_zero, integers, positive

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover
    _erf = np.vectorize(math.erf)

ACT_SHAPES = [((3, 4),), ((),), ((2, 0),), ((2, 3, 2),)]


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(np.minimum(beta * x, threshold))) / beta)


def _softmax(x, dim):
    e = np.exp(x - x.max(axis=dim, keepdims=True, initial=-np.inf))
    return e / e.sum(axis=dim, keepdims=True)


def _log_softmax(x, dim):
    z = x - x.max(axis=dim, keepdims=True, initial=-np.inf)
    with np.errstate(divide="ignore"):  # empty inputs
        return z - np.log(np.exp(z).sum(axis=dim, keepdims=True))


def _reduce(loss, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction](loss)


def _ref_nll(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    """PyTorch's nll_loss: class dim 1 (0 when unbatched), weighted mean over non-ignored targets."""
    if logp.ndim == 1:
        logp, target = logp[None], np.asarray(target)[None]
        out = _ref_nll(logp, target, weight, ignore_index, reduction)
        return out[0] if reduction == "none" else out
    lp = np.moveaxis(logp, 1, -1)  # (N, ..., C)
    valid = target != ignore_index
    t = np.where(valid, target, 0)
    picked = np.take_along_axis(lp, t[..., None], -1)[..., 0]
    w = (np.ones(lp.shape[-1]) if weight is None else weight)[t] * valid
    loss = -picked * w
    if reduction == "mean":
        with np.errstate(invalid="ignore"):  # an empty batch gives nan
            return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def _ref_ce(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    cd = 1 if x.ndim > 1 else 0
    C = x.shape[cd]
    logp = _log_softmax(x, cd)
    nll = _ref_nll(logp, target, weight, ignore_index, "none")
    if label_smoothing:
        w = np.ones(C) if weight is None else weight
        wshape = (C,) + (1,) * (x.ndim - cd - 1)
        smooth = -(logp * w.reshape(wshape)).sum(cd) * (target != ignore_index)
        loss = (1 - label_smoothing) * nll + label_smoothing / C * smooth
    else:
        loss = nll
    if reduction == "mean":
        valid = target != ignore_index
        w = (np.ones(C) if weight is None else weight)[np.where(valid, target, 0)] * valid
        with np.errstate(invalid="ignore"):  # an empty batch gives nan
            return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def _ref_ce_probs(x, p, weight=None, reduction="mean", label_smoothing=0.0):
    C = x.shape[1]
    if label_smoothing:
        p = p * (1 - label_smoothing) + label_smoothing / C
    terms = _log_softmax(x, 1) * p
    if weight is not None:
        terms = terms * weight.reshape((C,) + (1,) * (x.ndim - 2))
    loss = -terms.sum(1)
    return loss.sum() / (x.size // C) if reduction == "mean" else _reduce(loss, reduction)


def _ref_layer_norm(x, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axes, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def _ref_group_norm(x, groups, w, b, eps=1e-5):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(x.shape)
    cs = (1, c) + (1,) * (x.ndim - 2)
    return y * w.reshape(cs) + b.reshape(cs)


def _ref_batch_norm_train(x, w, b, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    cs = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return y * w.reshape(cs) + b.reshape(cs)


def _ref_pad(x, pad, value=0.0):
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for n, (lo, hi) in zip(x.shape, widths))
    return np.pad(x[crop], [(max(lo, 0), max(hi, 0)) for lo, hi in widths], constant_values=value)


def _ref_sdpa(q, k, v, mask=None, causal=False, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), bool))
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    return _softmax(s, -1) @ v


def _targets(classes, ignore=None):
    """Class indices in [0, classes), about a quarter replaced by `ignore` (never all of them)."""
    def make(rng, shape):
        t = rng.integers(0, classes, shape).astype(np.int64)
        if ignore is not None and t.size > 1:
            mask = rng.random(shape) < 0.25
            mask.reshape(-1)[0] = False
            t[mask] = ignore
        return t
    make.kind = "i"
    return make


def _probs(rng, shape):
    p = rng.random(shape) + 0.1
    return p / p.sum(axis=1, keepdims=True)


def _unit_interval(rng, shape):
    return rng.uniform(0.05, 0.95, shape)


def _sparse_targets(rng, shape):  # probabilities with exact zeros (0 log 0 terms)
    p = rng.random(shape)
    return np.where(p < 0.3, 0.0, p)


W4 = np.array([0.5, 2.0, 1.0, 1.5])
W5 = np.array([0.5, 1.0, 2.0, 1.5, 0.25])
W3 = np.array([2.0, 0.5, 1.0])
CE_SHAPES = [((4, 5), (4,)), ((5,), ()), ((2, 5, 3), (2, 3)), ((0, 5), (0,))]
CE_SHAPES3 = [((4, 3), (4,)), ((2, 3, 2, 2), (2, 2, 2))]


def _ce_case(name, ref_kw, make_t=None, shapes=CE_SHAPES, weight=None, **kw):
    wt = None if weight is None else __import__("eagerc").tensor(weight)
    return Case(name, lambda x, t: F.cross_entropy(x, t, weight=None if wt is None else wt.to(x.dtype), **ref_kw),
                lambda x, t: _ref_ce(x, t, weight, **ref_kw), shapes,
                make=(None, make_t or _targets(shapes[0][0][-1] if len(shapes[0][0]) == 2 else 5)), **kw)


def _ce_decomposed_case(name, ref_kw, make_t, shapes, weight=None):
    import eagerc
    wt = None if weight is None else eagerc.tensor(weight)
    return Case(name, lambda x, t: nn_ops.cross_entropy_decomposed(x, t, None if wt is None else wt.to(x.dtype),
                                                                    **ref_kw),
                lambda x, t: _ref_ce(x, t, weight, **ref_kw), shapes, make=(None, make_t), grad_variants=1)


def _tensor(a):
    import eagerc
    return eagerc.tensor(a)


CASES = [
    # ---------------------------------------------------------------- activations
    Case("nn.relu", F.relu, lambda x: np.maximum(x, 0), ACT_SHAPES, make=(away_from_zero,)),
    Case("nn.relu6", F.relu6, lambda x: np.clip(x, 0, 6), ACT_SHAPES[:1],
         make=(lambda r, s: away_from_zero(r, s) * 4,)),
    Case("nn.leaky_relu", lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x), ACT_SHAPES,
         make=(away_from_zero,)),
    Case("nn.gelu", F.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), ACT_SHAPES),
    Case("nn.gelu_tanh", lambda x: F.gelu(x, approximate="tanh"),
         lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), ACT_SHAPES),
    Case("nn.silu", F.silu, lambda x: x * _sigmoid(x), ACT_SHAPES),
    Case("nn.mish", F.mish, lambda x: x * np.tanh(np.log1p(np.exp(x))), ACT_SHAPES[:2]),
    Case("nn.elu", lambda x: F.elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(np.minimum(x, 0))),
         ACT_SHAPES, make=(away_from_zero,)),
    Case("nn.elu_large", F.elu, lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))), [((4,),)],
         make=(lambda r, s: np.array([-800.0, -3.0, 2.0, 800.0]),)),
    Case("nn.selu", F.selu, lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(
        np.minimum(x, 0))), ACT_SHAPES[:1], make=(away_from_zero,)),
    Case("nn.celu", lambda x: F.celu(x, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0) / 0.5)),
         ACT_SHAPES[:1], make=(away_from_zero,)),
    Case("nn.softplus", F.softplus, _softplus, ACT_SHAPES),
    Case("nn.softplus_beta", lambda x: F.softplus(x, beta=2.0, threshold=3.0), lambda x: _softplus(x, 2.0, 3.0),
         [((3, 4),)], make=(lambda r, s: r.standard_normal(s) * 3 + 0.05,)),
    Case("nn.softplus_large", F.softplus, _softplus, [((4,),)],
         make=(lambda r, s: np.array([-900.0, -1.0, 25.0, 900.0]),)),
    Case("nn.softsign", F.softsign, lambda x: x / (1 + np.abs(x)), ACT_SHAPES[:1], make=(away_from_zero,)),
    Case("nn.hardtanh", F.hardtanh, lambda x: np.clip(x, -1, 1), ACT_SHAPES[:1],
         make=(lambda r, s: away_from_zero(r, s) * 2 + 0.05,)),
    Case("nn.hardswish", F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6, ACT_SHAPES[:1],
         make=(lambda r, s: r.standard_normal(s) * 2,)),
    Case("nn.hardsigmoid", F.hardsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6, ACT_SHAPES[:1]),
    Case("nn.logsigmoid", F.logsigmoid, lambda x: -np.log1p(np.exp(-x)), ACT_SHAPES[:1]),
    Case("nn.tanhshrink", F.tanhshrink, lambda x: x - np.tanh(x), ACT_SHAPES[:1]),
    Case("nn.tanh", F.tanh, np.tanh, ACT_SHAPES[:1]),
    Case("nn.sigmoid", F.sigmoid, _sigmoid, ACT_SHAPES[:1]),
    Case("nn.glu", F.glu, lambda x: x[..., :2] * _sigmoid(x[..., 2:]), [((3, 4),)]),
    # ---------------------------------------------------------------- softmax family
    Case("nn.softmax", lambda x: F.softmax(x, -1), lambda x: _softmax(x, -1),
         [((3, 4),), ((2, 3, 4),), ((5,),), ((2, 0),)]),
    Case("nn.softmax_dim0", lambda x: F.softmax(x, 0), lambda x: _softmax(x, 0), [((3, 4),), ((),)]),
    Case("nn.softmax_large", lambda x: F.softmax(x, 1), lambda x: _softmax(x, 1), [((2, 3),)],
         make=(lambda r, s: np.array([[1000.0, 1001.0, -1000.0], [-5.0, 0.0, 5.0]]),)),
    Case("nn.log_softmax", lambda x: F.log_softmax(x, 1), lambda x: _log_softmax(x, 1),
         [((3, 4),), ((2, 3, 4),), ((2, 0),)]),
    Case("nn.log_softmax_0d", lambda x: F.log_softmax(x, 0), lambda x: x * 0, [((),)]),
    Case("nn.softmin", lambda x: F.softmin(x, 1), lambda x: _softmax(-x, 1), [((3, 4),)]),
    Case("nn.softmax_decomposed", lambda x: nn_ops.softmax_decomposed(x, 1), lambda x: _softmax(x, 1),
         [((3, 4),), ((2, 3, 2),)], grad_variants=1),
    Case("nn.log_softmax_decomposed", lambda x: nn_ops.log_softmax_decomposed(x, -1), lambda x: _log_softmax(x, -1),
         [((3, 4),)]),
    # ---------------------------------------------------------------- linear
    Case("nn.linear", F.linear, lambda x, w, b: x @ w.T + b,
         [((3, 4), (5, 4), (5,)), ((2, 3, 4), (5, 4), (5,)), ((4,), (2, 4), (2,)), ((0, 4), (5, 4), (5,))]),
    Case("nn.linear_nobias", F.linear, lambda x, w: x @ w.T, [((3, 4), (5, 4)), ((2, 1, 3), (2, 3))]),
    Case("nn.linear_decomposed", nn_ops.linear_decomposed, lambda x, w, b: x @ w.T + b, [((2, 3, 4), (5, 4), (5,))],
         grad_variants=1),
    Case("nn.bilinear", F.bilinear, lambda a, b, w, bias: np.einsum("ni,kij,nj->nk", a, w, b) + bias,
         [((3, 2), (3, 4), (5, 2, 4), (5,))], grad_variants=1),
    # ---------------------------------------------------------------- normalisation
    Case("nn.layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), lambda x, w, b: _ref_layer_norm(x, 1, w, b),
         [((3, 4), (4,), (4,)), ((2, 3, 4), (4,), (4,))]),
    Case("nn.layer_norm_2d", lambda x, w, b: F.layer_norm(x, (3, 4), w, b, eps=1e-3),
         lambda x, w, b: _ref_layer_norm(x, 2, w, b, 1e-3), [((2, 3, 4), (3, 4), (3, 4))], grad_variants=1),
    Case("nn.layer_norm_noaffine", lambda x: F.layer_norm(x, (5,)), lambda x: _ref_layer_norm(x, 1),
         [((3, 5),), ((5,),)]),
    Case("nn.layer_norm_decomposed", lambda x, w, b: nn_ops.layer_norm_decomposed(x, (4,), w, b),
         lambda x, w, b: _ref_layer_norm(x, 1, w, b), [((3, 4), (4,), (4,))], grad_variants=1),
    Case("nn.group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), lambda x, w, b: _ref_group_norm(x, 2, w, b),
         [((2, 4, 3), (4,), (4,)), ((2, 6, 2, 2), (6,), (6,))], grad_variants=1),
    Case("nn.rms_norm", lambda x, w: F.rms_norm(x, (4,), w, eps=1e-6),
         lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w, [((3, 4), (4,)), ((2, 3, 4), (4,))]),
    Case("nn.rms_norm_2d_noweight", lambda x: F.rms_norm(x, (3, 4), eps=1e-3),
         lambda x: x / np.sqrt((x * x).mean((-2, -1), keepdims=True) + 1e-3), [((2, 3, 4),), ((3, 4),)]),
    Case("nn.rms_norm_decomposed", lambda x, w: nn_ops.rms_norm_decomposed(x, (4,), w, 1e-6),
         lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w, [((3, 4), (4,))], grad_variants=1),
    Case("nn.batch_norm_train", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
         _ref_batch_norm_train, [((4, 3), (3,), (3,)), ((3, 2, 2, 2), (2,), (2,))], grad_variants=1),
    Case("nn.batch_norm_running_stats",  # also updates (fresh) running buffers: the batch_norm_stats kernel
         lambda x, w, b: F.batch_norm(x, _tensor(np.zeros(2)).to(x.dtype), _tensor(np.ones(2)).to(x.dtype), w, b,
                                      training=True, momentum=0.3),
         _ref_batch_norm_train, [((3, 2, 4), (2,), (2,))], grad_variants=1),
    Case("nn.batch_norm_decomposed", lambda x, w, b: nn_ops.batch_norm_decomposed(x, w, b), _ref_batch_norm_train,
         [((3, 2, 4), (2,), (2,))], grad_variants=1),
    Case("nn.batch_norm_eval",
         lambda x, w, b: F.batch_norm(x, _tensor(np.array([0.1, -0.2, 0.3])).to(x.dtype),
                                      _tensor(np.array([0.5, 1.5, 2.0])).to(x.dtype), w, b),
         lambda x, w, b: (x - np.array([0.1, -0.2, 0.3])[:, None]) / np.sqrt(np.array([0.5, 1.5, 2.0])[:, None] + 1e-5)
         * w[:, None] + b[:, None], [((2, 3, 4), (3,), (3,))]),
    Case("nn.normalize", F.normalize, lambda x: x / np.maximum(np.sqrt((x * x).sum(1, keepdims=True)), 1e-12),
         [((3, 4),), ((2, 3, 2),)]),
    Case("nn.normalize_p1", lambda x: F.normalize(x, p=1, dim=-1),
         lambda x: x / np.maximum(np.abs(x).sum(-1, keepdims=True), 1e-12), [((3, 4),)], make=(away_from_zero,)),
    Case("nn.cosine_similarity", F.cosine_similarity,
         lambda a, b: (lambda a, b: (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))(
             *np.broadcast_arrays(a, b)),
         [((3, 4), (3, 4)), ((2, 4, 3), (4, 1))]),
    Case("nn.pairwise_distance", F.pairwise_distance,
         lambda a, b: np.sqrt(((a - b + 1e-6) ** 2).sum(-1)), [((3, 4), (3, 4))]),
    # ---------------------------------------------------------------- embedding, pad, one_hot, attention
    Case("nn.embedding", lambda w, i: F.embedding(i, w), lambda w, i: w[i],
         [((6, 3), (2, 4)), ((5, 2), ()), ((4, 3), (0,))], make=(None, integers(0, 4))),
    # the padding row gets no gradient on purpose (test_nn_functional checks it), so no gradcheck here
    Case("nn.embedding_padding", lambda w, i: F.embedding(i, w, padding_idx=1), lambda w, i: w[i],
         [((6, 3), (2, 5))], make=(None, integers(0, 4)), grad=False),
    Case("nn.embedding_decomposed", lambda w, i: nn_ops.embedding_decomposed(i, w), lambda w, i: w[i],
         [((6, 3), (2, 5))], make=(None, integers(0, 4))),
    Case("nn.pad", lambda x: F.pad(x, (1, 2)), lambda x: _ref_pad(x, (1, 2)), [((3, 4),), ((2, 3, 2),), ((0, 2),)]),
    Case("nn.pad_crop", lambda x: F.pad(x, (1, -1, -1, 2), value=0.5), lambda x: _ref_pad(x, (1, -1, -1, 2), 0.5),
         [((3, 4),), ((2, 3, 4),)]),
    Case("nn.pad_reflect", lambda x: F.pad(x, (2, 1), mode="reflect"),
         lambda x: np.pad(x, [(0, 0)] * (x.ndim - 1) + [(2, 1)], mode="reflect"), [((2, 4),)]),
    Case("nn.pad_replicate", lambda x: F.pad(x, (1, 2, 2, 0), mode="replicate"),
         lambda x: np.pad(x, [(0, 0)] * (x.ndim - 2) + [(2, 0), (1, 2)], mode="edge"), [((2, 3, 3),)]),
    Case("nn.pad_circular", lambda x: F.pad(x, (1, 2), mode="circular"),
         lambda x: np.pad(x, [(0, 0)] * (x.ndim - 1) + [(1, 2)], mode="wrap"), [((2, 4),)]),
    Case("nn.one_hot", lambda t: F.one_hot(t, 5), lambda t: (t[..., None] == np.arange(5)).astype(np.int64),
         [((4,),), ((2, 3),)], make=(integers(0, 5),), grad=False),
    Case("nn.sdpa", F.scaled_dot_product_attention, _ref_sdpa, [((2, 3, 4), (2, 5, 4), (2, 5, 2))], grad_variants=1),
    Case("nn.sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7),
         lambda q, k, v: _ref_sdpa(q, k, v, causal=True, scale=0.7), [((1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 2))],
         grad_variants=1),
    Case("nn.sdpa_bool_mask",
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=_tensor(np.array(
             [[True, False, True], [False, True, True]]))),
         lambda q, k, v: _ref_sdpa(q, k, v, np.array([[True, False, True], [False, True, True]])),
         [((2, 2, 3), (2, 3, 3), (2, 3, 2))], grad_variants=1),
    Case("nn.sdpa_float_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
         lambda q, k, v, m: _ref_sdpa(q, k, v, m), [((2, 2, 3), (2, 3, 3), (2, 3, 2), (2, 3))], grad_variants=1),
    # ---------------------------------------------------------------- losses
    _ce_case("nn.cross_entropy", {}),
    _ce_case("nn.cross_entropy_sum", {"reduction": "sum"}, shapes=CE_SHAPES[:3]),
    _ce_case("nn.cross_entropy_none", {"reduction": "none"}),
    _ce_case("nn.cross_entropy_ignore", {"ignore_index": -100}, _targets(5, -100), shapes=CE_SHAPES[:3]),
    _ce_case("nn.cross_entropy_ignore_class", {"ignore_index": 2, "reduction": "sum"}, shapes=CE_SHAPES[:1]),
    _ce_case("nn.cross_entropy_smoothing", {"label_smoothing": 0.2, "ignore_index": -1}, _targets(5, -1),
             shapes=CE_SHAPES[:3], grad_variants=3),
    _ce_case("nn.cross_entropy_weight", {}, shapes=CE_SHAPES[:3], weight=W5, grad_variants=3),
    _ce_case("nn.cross_entropy_weight_smoothing_none", {"label_smoothing": 0.1, "reduction": "none",
                                                        "ignore_index": -100}, _targets(3, -100),
             shapes=CE_SHAPES3, weight=W3),
    _ce_case("nn.cross_entropy_weight_smoothing_mean", {"label_smoothing": 0.3, "ignore_index": -100},
             _targets(3, -100), shapes=CE_SHAPES3, weight=W3),
    _ce_decomposed_case("nn.cross_entropy_decomposed", {"label_smoothing": 0.1, "ignore_index": 4},
                        _targets(5, 4), CE_SHAPES[:1], weight=W5),
    _ce_decomposed_case("nn.cross_entropy_decomposed_3d", {"reduction": "none"}, _targets(5), [((2, 5, 3), (2, 3))]),
    Case("nn.cross_entropy_probs", F.cross_entropy, _ref_ce_probs, [((4, 5), (4, 5)), ((2, 3, 2), (2, 3, 2))],
         make=(None, _probs)),
    Case("nn.cross_entropy_probs_smooth_weight",
         lambda x, p: F.cross_entropy(x, p, weight=_tensor(W5).to(x.dtype), label_smoothing=0.2, reduction="sum"),
         lambda x, p: _ref_ce_probs(x, p, W5, "sum", 0.2), [((4, 5), (4, 5))], make=(None, _probs)),
    Case("nn.nll_loss", lambda x, t: F.nll_loss(x, t), lambda x, t: _ref_nll(x, t), [((4, 5), (4,)), ((5,), ())],
         make=(None, _targets(5))),
    Case("nn.nll_loss_weight_ignore",
         lambda x, t: F.nll_loss(x, t, weight=_tensor(W5).to(x.dtype), ignore_index=-100),
         lambda x, t: _ref_nll(x, t, W5, -100), [((6, 5), (6,)), ((2, 5, 3), (2, 3))], make=(None, _targets(5, -100))),
    Case("nn.nll_loss_none", lambda x, t: F.nll_loss(x, t, reduction="none"),
         lambda x, t: _ref_nll(x, t, reduction="none"), [((2, 5, 3), (2, 3))], make=(None, _targets(5))),
    Case("nn.mse_loss", F.mse_loss, lambda a, b: ((a - b) ** 2).mean(), [((3, 4), (3, 4)), ((), ())]),
    Case("nn.mse_loss_none", lambda a, b: F.mse_loss(a, b, reduction="none"), lambda a, b: (a - b) ** 2,
         [((3, 4), (3, 4))]),
    Case("nn.l1_loss", lambda a, b: F.l1_loss(a, b, reduction="sum"), lambda a, b: np.abs(a - b).sum(),
         [((3, 4), (3, 4))]),
    Case("nn.smooth_l1_loss", lambda a, b: F.smooth_l1_loss(a, b, beta=0.5),
         lambda a, b: np.where(np.abs(a - b) < 0.5, 0.5 * (a - b) ** 2 / 0.5, np.abs(a - b) - 0.25).mean(),
         [((3, 4), (3, 4))], make=(lambda r, s: r.standard_normal(s) * 0.6, None)),
    Case("nn.smooth_l1_loss_beta0", lambda a, b: F.smooth_l1_loss(a, b, beta=0.0), lambda a, b: np.abs(a - b).mean(),
         [((3, 4), (3, 4))]),
    Case("nn.huber_loss", lambda a, b: F.huber_loss(a, b, delta=0.5, reduction="none"),
         lambda a, b: np.where(np.abs(a - b) < 0.5, 0.5 * (a - b) ** 2, 0.5 * (np.abs(a - b) - 0.25)),
         [((3, 4), (3, 4))]),
    Case("nn.binary_cross_entropy", F.binary_cross_entropy,
         lambda x, t: -(t * np.log(x) + (1 - t) * np.log(1 - x)).mean(), [((3, 4), (3, 4)), ((5,), (5,))],
         make=(_unit_interval, _unit_interval)),
    Case("nn.binary_cross_entropy_weight",
         lambda x, t: F.binary_cross_entropy(x, t, _tensor(W4).to(x.dtype), reduction="sum"),
         lambda x, t: (-(t * np.log(x) + (1 - t) * np.log(1 - x)) * W4).sum(), [((3, 4), (3, 4))],
         make=(_unit_interval, _unit_interval)),
    Case("nn.binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits,
         lambda x, t: (-(t * np.log(_sigmoid(x)) + (1 - t) * np.log(1 - _sigmoid(x)))).mean(),
         [((3, 4), (3, 4)), ((), ())], make=(None, _unit_interval)),
    Case("nn.binary_cross_entropy_with_logits_pos_weight",
         lambda x, t: F.binary_cross_entropy_with_logits(x, t, pos_weight=_tensor(W4).to(x.dtype), reduction="none"),
         lambda x, t: -(W4 * t * np.log(_sigmoid(x)) + (1 - t) * np.log(1 - _sigmoid(x))),
         [((3, 4), (3, 4))], make=(lambda r, s: r.standard_normal(s) * 4, _unit_interval)),
    Case("nn.kl_div", lambda x, t: F.kl_div(x, t, reduction="batchmean"),
         lambda x, t: (t * (np.log(t) - x)).sum() / x.shape[0], [((3, 4), (3, 4))], make=(None, positive)),
    Case("nn.kl_div_zero_targets", lambda x, t: F.kl_div(x, t, reduction="none"),  # 0 log 0 = 0
         lambda x, t: np.where(t > 0, t * (np.log(np.where(t > 0, t, 1)) - x), 0), [((3, 4), (3, 4))],
         make=(None, _sparse_targets), grad=False),
    Case("nn.kl_div_log_target", lambda x, t: F.kl_div(x, t, reduction="sum", log_target=True),
         lambda x, t: (np.exp(t) * (t - x)).sum(), [((3, 4), (3, 4))]),
]


# ---------------------------------------------------------------- recurrent cells (eagerc.lstm_cell, ...)
# numpy formulas of PyTorch's recurrences: LSTM gates i, f, g, o; GRU r, z, n with b_hn inside r * (...)

def _ref_lstm_gates(xg, hg, c):
    i, f, g, o = np.split(xg + hg, 4, -1)
    c1 = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c1), c1


def _ref_lstm_cell(x, h, c, wi, wh, bi, bh):
    return _ref_lstm_gates(x @ wi.T + bi, h @ wh.T + bh, c)


def _ref_gru_gates(xg, hg, h):
    (xr, xz, xn), (hr, hz, hn) = np.split(xg, 3, -1), np.split(hg, 3, -1)
    z = _sigmoid(xz + hz)
    n = np.tanh(xn + _sigmoid(xr + hr) * hn)
    return (1 - z) * n + z * h


def _ref_gru_cell(x, h, wi, wh, bi, bh):
    return _ref_gru_gates(x @ wi.T + bi, h @ wh.T + bh, h)


def _numeric_vjp(f, g, *args, eps=1e-6):
    """sum(g * f(args)) differentiated by central differences: the reference for backward kernels."""
    out = []
    for k, a in enumerate(args):
        d = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            hi, lo = [b.copy() for b in args], [b.copy() for b in args]
            hi[k][idx] += eps
            lo[k][idx] -= eps
            d[idx] = ((g * f(*hi)).sum() - (g * f(*lo)).sum()) / (2 * eps)
        out.append(d)
    return np.concatenate(out, -1)


def _rnn(name):
    import eagerc
    return getattr(eagerc, name)


def _R():
    import eagerc.ops.rnn as R
    return R


def _ref_lstm_layer(xg, h0, c0, w_hh):
    """The lstm_layer op's (6, T, B, H): every step's h, c and activated gates i, f, g, o."""
    h, c, steps = h0, c0, []
    for x in xg:
        i, f, g, o = np.split(x + h @ w_hh.T, 4, -1)
        i, f, g, o = _sigmoid(i), _sigmoid(f), np.tanh(g), _sigmoid(o)
        c = f * c + i * g
        h = o * np.tanh(c)
        steps.append((h, c, i, f, g, o))
    return np.stack([np.stack(k) for k in zip(*steps)])


def _ref_lstm_layer_backward(g, xg, h0, c0, w_hh):
    """lstm_layer_backward's (T + 1, B, 4H) by central differences: d xg per step, then [d h0 | d c0 | 0 | 0]."""
    def vjp(k):
        return _numeric_vjp(lambda a: _ref_lstm_layer(*[a if j == k else b for j, b in enumerate((xg, h0, c0))],
                                                      w_hh), g, (xg, h0, c0)[k])
    last = np.concatenate([vjp(1), vjp(2), np.zeros(h0.shape[:-1] + (2 * h0.shape[-1],))], -1)
    return np.concatenate([vjp(0), last[None]])


def _lstm_layer(xg, h0, c0, w_hh):
    import eagerc
    from eagerc.dispatch import apply
    return apply(eagerc.runtime.ops.OPS["lstm_layer"], (xg, h0, c0, w_hh))


CELL_LSTM = [((3, 4), (3, 5), (3, 5), (20, 4), (20, 5), (20,), (20,)), ((4,), (5,), (5,), (20, 4), (20, 5), (20,), (20,))]
CELL_GRU = [((3, 4), (3, 5), (15, 4), (15, 5), (15,), (15,)), ((4,), (5,), (15, 4), (15, 5), (15,), (15,))]
CELL_RNN = [((3, 4), (3, 5), (5, 4), (5, 5), (5,), (5,))]
CASES += [
    Case("nn.lstm_cell", lambda x, h, c, wi, wh, bi, bh: _rnn("lstm_cell")(x, (h, c), wi, wh, bi, bh),
         _ref_lstm_cell, CELL_LSTM),
    Case("nn.lstm_cell_nobias", lambda x, h, c, wi, wh: _rnn("lstm_cell")(x, (h, c), wi, wh),
         lambda x, h, c, wi, wh: _ref_lstm_gates(x @ wi.T, h @ wh.T, c), [s[:5] for s in CELL_LSTM[:1]]),
    Case("nn.gru_cell", lambda x, h, wi, wh, bi, bh: _rnn("gru_cell")(x, h, wi, wh, bi, bh), _ref_gru_cell, CELL_GRU),
    Case("nn.rnn_tanh_cell", lambda *a: _rnn("rnn_tanh_cell")(*a),
         lambda x, h, wi, wh, bi, bh: np.tanh(x @ wi.T + bi + h @ wh.T + bh), CELL_RNN),
    Case("nn.rnn_relu_cell", lambda *a: _rnn("rnn_relu_cell")(*a),
         lambda x, h, wi, wh, bi, bh: np.maximum(x @ wi.T + bi + h @ wh.T + bh, 0), CELL_RNN),
    Case("nn.lstm_cell_decomposed", lambda xg, hg, c: _R().lstm_cell_decomposed(xg, hg, c),
         lambda xg, hg, c: np.stack(_ref_lstm_gates(xg, hg, c)), [((3, 8), (3, 8), (3, 2))], grad_variants=1),
    Case("nn.gru_cell_decomposed", lambda xg, hg, h: _R().gru_cell_decomposed(xg, hg, h), _ref_gru_gates,
         [((3, 6), (3, 6), (3, 2))], grad_variants=1),
    Case("nn.lstm_cell_backward_decomposed", lambda g, xg, hg, c: _R().lstm_cell_backward_decomposed(g, xg, hg, c),
         lambda g, xg, hg, c: _numeric_vjp(lambda xg, c: np.stack(_ref_lstm_gates(xg, hg, c)), g, xg, c),
         [((2, 3, 2), (3, 8), (3, 8), (3, 2))], grad_variants=1, rtol=1e-6, atol=1e-8),
    Case("nn.lstm_layer", _lstm_layer, _ref_lstm_layer,
         [((4, 3, 8), (3, 2), (3, 2), (8, 2)), ((1, 1, 4), (1, 1), (1, 1), (4, 1))]),
    Case("nn.lstm_layer_decomposed", lambda xg, h0, c0, w: _R().lstm_layer_decomposed(xg, h0, c0, w), _ref_lstm_layer,
         [((4, 3, 8), (3, 2), (3, 2), (8, 2))], grad_variants=1),
    Case("nn.lstm_layer_backward_decomposed",
         lambda g, xg, h0, c0, w: _R().lstm_layer_backward_decomposed(g, h0, c0, w, _lstm_layer(xg, h0, c0, w)),
         _ref_lstm_layer_backward, [((6, 4, 3, 2), (4, 3, 8), (3, 2), (3, 2), (8, 2))], grad_variants=1,
         rtol=1e-6, atol=1e-8),
    Case("nn.gru_cell_backward_decomposed", lambda g, xg, hg, h: _R().gru_cell_backward_decomposed(g, xg, hg, h),
         lambda g, xg, hg, h: _numeric_vjp(_ref_gru_gates, g, xg, hg, h),
         [((3, 2), (3, 6), (3, 6), (3, 2))], grad_variants=1, rtol=1e-6, atol=1e-8),
]
