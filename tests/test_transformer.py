"""nn.Transformer* against a numpy reference written here (multi-head attention, feed-forward,
layer norm; post-norm and pre-norm; bool, float and key-padding masks), float64 finite-difference
gradients, PyTorch's state_dict keys and reprs, train vs eval, compiled vs eager, and (when
PyTorch is installed) the same outputs as PyTorch given the same weights."""
import contextlib
import math
import warnings

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.autograd import gradcheck

# ---------------------------------------------------------------- the numpy reference


def P(m, name):
    """A parameter of module m as float64 numpy (None when absent)."""
    t = m.get_parameter(name) if name in dict(m.named_parameters()) else None
    return None if t is None else t.detach().numpy().astype(np.float64)


def np_linear(x, w, b):
    return x @ w.T + (0.0 if b is None else b)


def np_layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1.0 if w is None else w) + (0.0 if b is None else b)


def np_softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def additive(mask):
    """PyTorch's convention for a mask given as numpy: bool True = may not attend, float = added."""
    if mask is None:
        return 0.0
    return np.where(mask, -np.inf, 0.0) if mask.dtype == bool else mask


def np_mha(mha, q, kv, attn_mask=None, key_padding_mask=None):
    """Sequence-first (L, N, E) query, (S, N, E) key = value -> (L, N, E)."""
    prefix = ""
    E, H = mha.embed_dim, mha.num_heads
    D = E // H
    W, b = P(mha, prefix + "in_proj_weight"), P(mha, prefix + "in_proj_bias")
    bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E:2 * E], b[2 * E:])
    qp, kp, vp = np_linear(q, W[:E], bq), np_linear(kv, W[E:2 * E], bk), np_linear(kv, W[2 * E:], bv)
    L, N, S = q.shape[0], q.shape[1], kv.shape[0]

    def heads(x, n):  # (n, N, E) -> (N, H, n, D)
        return x.reshape(n, N, H, D).transpose(1, 2, 0, 3)
    scores = heads(qp, L) @ heads(kp, S).transpose(0, 1, 3, 2) / math.sqrt(D)
    scores = scores + additive(attn_mask)
    if key_padding_mask is not None:
        scores = scores + additive(key_padding_mask)[:, None, None, :]
    out = (np_softmax(scores) @ heads(vp, S)).transpose(2, 0, 1, 3).reshape(L, N, E)
    return np_linear(out, P(mha, "out_proj.weight"), P(mha, "out_proj.bias"))


def _act(name):
    if name == "relu":
        return lambda x: np.maximum(x, 0.0)
    from scipy.special import erf
    return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def np_ff(layer, x, act):
    return np_linear(act(np_linear(x, P(layer, "linear1.weight"), P(layer, "linear1.bias"))),
                     P(layer, "linear2.weight"), P(layer, "linear2.bias"))


def np_norm(layer, name, x):
    return np_layer_norm(x, P(layer, name + ".weight"), P(layer, name + ".bias"), getattr(layer, name).eps)


def np_encoder_layer(layer, x, act="relu", src_mask=None, kpm=None):
    """x (S, N, E) sequence-first; dropout off."""
    a = _act(act)

    def sa(h):
        return np_mha(layer.self_attn, h, h, src_mask, kpm)
    if layer.norm_first:
        x = x + sa(np_norm(layer, "norm1", x))
        return x + np_ff(layer, np_norm(layer, "norm2", x), a)
    x = np_norm(layer, "norm1", x + sa(x))
    return np_norm(layer, "norm2", x + np_ff(layer, x, a))


def np_decoder_layer(layer, x, mem, act="relu", tgt_mask=None, memory_mask=None, tgt_kpm=None, mem_kpm=None):
    a = _act(act)

    def sa(h):
        return np_mha(layer.self_attn, h, h, tgt_mask, tgt_kpm)

    def ca(h):
        return np_mha(layer.multihead_attn, h, mem, memory_mask, mem_kpm)
    if layer.norm_first:
        x = x + sa(np_norm(layer, "norm1", x))
        x = x + ca(np_norm(layer, "norm2", x))
        return x + np_ff(layer, np_norm(layer, "norm3", x), a)
    x = np_norm(layer, "norm1", x + sa(x))
    x = np_norm(layer, "norm2", x + ca(x))
    return np_norm(layer, "norm3", x + np_ff(layer, x, a))


def randomise(m, seed=0):
    """Nonzero biases and non-unit norm weights, so that every parameter shows in the outputs."""
    rng = np.random.default_rng(seed)
    with eagerc.no_grad():
        for _, p in m.named_parameters():
            p.copy_(eagerc.tensor(rng.standard_normal(tuple(p.shape)) * 0.4, dtype=p.dtype))
    return m


def rand(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


def T(a, **kw):
    return eagerc.tensor(a, **kw)


def seq_first(a, batch_first):
    return a.transpose(1, 0, 2) if batch_first else a


def close(actual, expected, tol=1e-10):
    np.testing.assert_allclose(actual.detach().numpy() if hasattr(actual, "detach") else actual, expected,
                               rtol=tol, atol=tol)


# ---------------------------------------------------------------- encoder layer

S, N, E, H, FF = 5, 3, 8, 2, 12


def _masks(kind):
    """(src_mask, key_padding_mask) as numpy, of the kind named."""
    causal = np.triu(np.ones((S, S), bool), 1)
    kpm = np.zeros((N, S), bool)
    kpm[0, -2:] = True
    kpm[2, -1] = True
    return {"none": (None, None),
            "bool": (causal, kpm),
            "float": (np.where(causal, -np.inf, 0.0) + 0.3 * rand(S, S, seed=7), np.where(kpm, -np.inf, 0.0)),
            "kpm_only": (None, kpm)}[kind]


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "bool", "float", "kpm_only"])
def test_encoder_layer_against_numpy(norm_first, batch_first, masks):
    layer = randomise(nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=batch_first,
                                                 norm_first=norm_first).double()).eval()
    x = rand(S, N, E)
    src_mask, kpm = _masks(masks)
    kw = {}
    if src_mask is not None:
        kw["src_mask"] = T(src_mask)
    if kpm is not None:
        kw["src_key_padding_mask"] = T(kpm)
    out = layer(T(seq_first(x, batch_first)), **kw)
    close(seq_first(out.detach().numpy(), batch_first), np_encoder_layer(layer, x, "relu", src_mask, kpm))


@pytest.mark.parametrize("activation", ["gelu", F.gelu, nn.GELU()], ids=["str", "fn", "module"])
def test_encoder_layer_activation_string_function_or_module(activation):
    layer = randomise(nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, activation=activation).double())
    x = rand(S, N, E)
    close(layer(T(x)), np_encoder_layer(layer, x, "gelu"))
    assert layer.activation_relu_or_gelu == 2
    relu = nn.TransformerEncoderLayer(E, H, FF, activation="relu")
    assert relu.activation is F.relu and relu.activation_relu_or_gelu == 1
    other = nn.TransformerEncoderLayer(E, H, FF, activation=lambda t: t.tanh())
    assert other.activation_relu_or_gelu == 0
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not swish"):
        nn.TransformerEncoderLayer(E, H, activation="swish")


def test_encoder_layer_callable_activation_values():
    layer = randomise(nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, activation=lambda t: t.tanh()).double())
    x = rand(S, N, E)
    h = np_norm(layer, "norm1", x + np_mha(layer.self_attn, x, x))
    ref = np_norm(layer, "norm2", h + np_linear(np.tanh(np_linear(h, P(layer, "linear1.weight"),
                                                                  P(layer, "linear1.bias"))),
                                                P(layer, "linear2.weight"), P(layer, "linear2.bias")))
    close(layer(T(x)), ref)


def test_encoder_layer_unbatched_and_is_causal():
    layer = randomise(nn.TransformerEncoderLayer(E, H, FF, dropout=0.0).double())
    x = rand(S, E)
    kpm = np.zeros(S, bool)
    kpm[-1] = True
    out = layer(T(x), src_key_padding_mask=T(kpm))
    assert out.shape == (S, E)
    close(out, np_encoder_layer(layer, x[:, None], kpm=kpm[None])[:, 0])
    causal = np.triu(np.ones((S, S), bool), 1)
    ref = np_encoder_layer(layer, x[:, None], src_mask=causal)[:, 0]
    close(layer(T(x), src_mask=nn.Transformer.generate_square_subsequent_mask(S, dtype=eagerc.float64),
                is_causal=True), ref)
    close(layer(T(x), is_causal=True), ref)  # eagerc builds the causal mask itself (PyTorch asks for it)


def test_encoder_layer_bias_false_and_eps():
    layer = randomise(nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, bias=False, layer_norm_eps=1e-3).double())
    assert layer.linear1.bias is None and layer.norm1.bias is None and layer.self_attn.in_proj_bias is None
    assert layer.norm1.eps == layer.norm2.eps == 1e-3
    x = rand(S, N, E)
    close(layer(T(x)), np_encoder_layer(layer, x))


# ---------------------------------------------------------------- decoder layer, stacks, Transformer

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_decoder_layer_against_numpy(norm_first, batch_first):
    layer = randomise(nn.TransformerDecoderLayer(E, H, FF, dropout=0.0, batch_first=batch_first,
                                                 norm_first=norm_first, activation="gelu").double())
    L = 4
    x, mem = rand(L, N, E), rand(S, N, E, seed=2)
    tgt_mask = np.triu(np.ones((L, L), bool), 1)
    memory_mask = 0.5 * rand(L, S, seed=3)
    tgt_kpm = np.zeros((N, L), bool)
    tgt_kpm[1, -1] = True
    mem_kpm = np.zeros((N, S), bool)
    mem_kpm[0, :2] = True
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask"):  # float memory_mask
        out = layer(T(seq_first(x, batch_first)), T(seq_first(mem, batch_first)), tgt_mask=T(tgt_mask),
                    memory_mask=T(memory_mask), tgt_key_padding_mask=T(tgt_kpm), memory_key_padding_mask=T(mem_kpm))
    ref = np_decoder_layer(layer, x, mem, "gelu", tgt_mask, memory_mask, tgt_kpm, mem_kpm)
    close(seq_first(out.detach().numpy(), batch_first), ref)
    out = layer(T(seq_first(x, batch_first)), T(seq_first(mem, batch_first)))
    close(seq_first(out.detach().numpy(), batch_first), np_decoder_layer(layer, x, mem, "gelu"))


def test_encoder_stack_deep_copies_and_final_norm():
    eagerc.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0)
    with pytest.warns(UserWarning, match="use_nested_tensor is False because encoder_layer.self_attn.batch_first"):
        enc = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(E))
    assert enc.num_layers == 3 and len(enc.layers) == 3 and enc.use_nested_tensor is False
    assert enc.enable_nested_tensor is True and enc.mask_check is True
    # copies: same starting values, separate tensors
    w = [m.linear1.weight for m in enc.layers]
    assert w[0] is not w[1] and w[0] is not layer.linear1.weight
    np.testing.assert_array_equal(w[0].detach().numpy(), w[2].detach().numpy())
    randomise(enc.double(), seed=5)
    assert not np.array_equal(enc.layers[0].linear1.weight.detach().numpy(),
                              enc.layers[1].linear1.weight.detach().numpy())
    x = rand(S, N, E)
    src_mask, kpm = _masks("bool")
    ref = x
    for m in enc.layers:
        ref = np_encoder_layer(m, ref, "relu", src_mask, kpm)
    ref = np_layer_norm(ref, P(enc, "norm.weight"), P(enc, "norm.bias"), 1e-5)
    close(enc(T(x), mask=T(src_mask), src_key_padding_mask=T(kpm)), ref)
    nonorm = nn.TransformerEncoder(enc.layers[0], 1, enable_nested_tensor=False)
    assert nonorm.norm is None and "norm" not in dict(nonorm.named_children())
    close(nonorm(T(x)), np_encoder_layer(enc.layers[0], x))


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_decoder_stack_and_transformer_against_numpy():
    model = randomise(nn.Transformer(E, H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF,
                                     dropout=0.0).double(), seed=3)
    src, tgt = rand(S, N, E), rand(4, N, E, seed=4)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(4, dtype=eagerc.float64)
    src_kpm = np.zeros((N, S), bool)
    src_kpm[1, -2:] = True
    mem = src
    for m in model.encoder.layers:
        mem = np_encoder_layer(m, mem, kpm=src_kpm)
    mem = np_norm(model.encoder, "norm", mem)
    y = tgt
    for m in model.decoder.layers:
        y = np_decoder_layer(m, y, mem, tgt_mask=tgt_mask.numpy(), mem_kpm=src_kpm)
    y = np_norm(model.decoder, "norm", y)
    out = model(T(src), T(tgt), tgt_mask=tgt_mask, src_key_padding_mask=T(src_kpm),
                memory_key_padding_mask=T(src_kpm))
    close(out, y)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        model(T(rand(S, 2, E)), T(tgt))
    with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal to d_model"):
        model(T(rand(S, N, 4)), T(rand(4, N, 4)))


def test_transformer_init_is_xavier_and_custom_parts():
    eagerc.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = nn.Transformer(64, 4, 1, 1, 128)
    w = model.encoder.layers[0].linear1.weight.detach().numpy()
    bound = math.sqrt(6 / (64 + 128))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.all(model.encoder.layers[0].linear1.bias.detach().numpy() != 0)  # 1-d: Linear's own init
    assert model.d_model == 64 and model.nhead == 4 and model.batch_first is False
    enc, dec = nn.Identity(), nn.Identity()
    custom = nn.Transformer(8, 2, custom_encoder=enc, custom_decoder=dec)
    assert custom.encoder is enc and custom.decoder is dec


def test_generate_square_subsequent_mask():
    m = nn.Transformer.generate_square_subsequent_mask(4)
    assert m.dtype == eagerc.float32 and m.shape == (4, 4)
    ref = np.where(np.triu(np.ones((4, 4), bool), 1), -np.inf, 0.0)
    np.testing.assert_array_equal(m.numpy(), ref)
    assert nn.Transformer.generate_square_subsequent_mask(2, dtype=eagerc.float64).dtype == eagerc.float64


# ---------------------------------------------------------------- masks: errors and warnings

def test_mask_dtype_errors_and_mismatch_warning():
    layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0)
    x = eagerc.randn(S, N, E)
    with pytest.raises(AssertionError, match="only bool and floating types of src_mask are supported"):
        layer(x, src_mask=eagerc.zeros(S, S, dtype=eagerc.int64))
    with pytest.raises(AssertionError, match="only bool and floating types of key_padding_mask"):
        layer.self_attn(x, x, x, key_padding_mask=eagerc.zeros(N, S, dtype=eagerc.int32))
    kpm = np.zeros((N, S), bool)
    kpm[0, -1] = True
    causal = nn.Transformer.generate_square_subsequent_mask(S)
    with pytest.warns(UserWarning, match="mismatched src_key_padding_mask and src_mask is deprecated"):
        mixed = layer(x, src_mask=causal, src_key_padding_mask=T(kpm))
    same = layer(x, src_mask=causal, src_key_padding_mask=T(np.where(kpm, -np.inf, 0.0), dtype=eagerc.float32))
    np.testing.assert_array_equal(mixed.detach().numpy(), same.detach().numpy())


def test_nested_tensor_path_zeros_padded_positions_in_eval_without_grad():
    """PyTorch's TransformerEncoder runs eval/no-grad batches through nested tensors when it can;
    what comes back is zero at the padded positions (then the final norm)."""
    eagerc.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=True)
    enc = randomise(nn.TransformerEncoder(layer, 2).double())
    assert enc.use_nested_tensor is True
    x = rand(N, S, E)
    kpm = np.zeros((N, S), bool)
    kpm[0, -2:] = True
    ref = x.transpose(1, 0, 2)
    for m in enc.layers:
        ref = np_encoder_layer(m, ref, kpm=kpm)
    ref = ref.transpose(1, 0, 2)
    close(enc(T(x), src_key_padding_mask=T(kpm)), ref)           # training mode: the plain path
    enc.eval()
    close(enc(T(x), src_key_padding_mask=T(kpm)), ref)           # parameters require grad: plain path
    with eagerc.no_grad():
        out = enc(T(x), src_key_padding_mask=T(kpm)).numpy()
    np.testing.assert_array_equal(out[0, -2:], 0.0)
    close(out[~kpm], ref[~kpm])
    not_left_aligned = kpm.copy()
    not_left_aligned[1, 0] = True                                 # padding before a real token
    ref2 = x.transpose(1, 0, 2)
    for m in enc.layers:
        ref2 = np_encoder_layer(m, ref2, kpm=not_left_aligned)
    with eagerc.no_grad():
        close(enc(T(x), src_key_padding_mask=T(not_left_aligned)), ref2.transpose(1, 0, 2))
        enc.mask_check = False
        out = enc(T(x), src_key_padding_mask=T(not_left_aligned)).numpy()
    np.testing.assert_array_equal(out[not_left_aligned], 0.0)


# ---------------------------------------------------------------- gradients (float64 finite differences)

def _functional(module, **kwargs):
    """module(x, **kwargs) as a function of (x, *parameters), for gradcheck (which perturbs copies
    of its inputs, so the parameters must come in as arguments)."""
    named = list(module.named_parameters())
    slots = [(module.get_submodule(n.rpartition(".")[0]), n.rpartition(".")[2]) for n, _ in named]

    def call(x, *ps):
        for (sub, leaf), p in zip(slots, ps):
            sub._parameters[leaf] = p
        try:
            return module(x, **kwargs)
        finally:
            for (sub, leaf), (_, p) in zip(slots, named):
                sub._parameters[leaf] = p
    return call, [p for _, p in named]


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_gradcheck(norm_first):
    layer = randomise(nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, norm_first=norm_first).double(), seed=2)
    mask = T(np.triu(np.ones((3, 3), bool), 1))
    kpm = T(np.array([[False, False, True], [False, False, False]]))
    call, params = _functional(layer, src_mask=mask, src_key_padding_mask=kpm)
    x = T(rand(3, 2, 4, seed=3), requires_grad=True)
    assert gradcheck(call, (x, *params), atol=1e-6)


def test_decoder_layer_gradcheck_input_and_memory():
    layer = randomise(nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, norm_first=True).double(), seed=4)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=eagerc.float64)
    x = T(rand(3, 2, 4, seed=5), requires_grad=True)
    mem = T(rand(2, 2, 4, seed=6), requires_grad=True)
    assert gradcheck(lambda a, b: layer(a, b, tgt_mask=tgt_mask), (x, mem), atol=1e-6)


# ---------------------------------------------------------------- state_dict keys, reprs

ENCODER_LAYER_KEYS = [
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
    "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
    "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"]
DECODER_LAYER_KEYS = [
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
    "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", "multihead_attn.out_proj.weight",
    "multihead_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
    "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"]


def test_state_dict_keys_are_pytorchs():
    assert list(nn.TransformerEncoderLayer(8, 2, 16).state_dict()) == ENCODER_LAYER_KEYS
    assert list(nn.TransformerDecoderLayer(8, 2, 16).state_dict()) == DECODER_LAYER_KEYS
    assert list(nn.TransformerEncoderLayer(8, 2, 16, bias=False).state_dict()) == [
        "self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight", "linear2.weight",
        "norm1.weight", "norm2.weight"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = nn.Transformer(8, 2, 2, 1, 16)
    expected = ([f"encoder.layers.{i}.{k}" for i in range(2) for k in ENCODER_LAYER_KEYS]
                + ["encoder.norm.weight", "encoder.norm.bias"]
                + [f"decoder.layers.0.{k}" for k in DECODER_LAYER_KEYS] + ["decoder.norm.weight", "decoder.norm.bias"])
    sd = model.state_dict()
    assert list(sd) == expected
    assert sd["encoder.layers.1.self_attn.in_proj_weight"].shape == (24, 8)
    assert sd["decoder.layers.0.linear1.weight"].shape == (16, 8)
    # a state dict with PyTorch's keys loads (strict) into a fresh model and gives the same outputs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = nn.Transformer(8, 2, 2, 1, 16, dropout=0.0).eval()
    model.eval()
    assert repr(other.load_state_dict(sd)) == "<All keys matched successfully>"
    src, tgt = eagerc.randn(5, 2, 8), eagerc.randn(3, 2, 8)
    np.testing.assert_array_equal(other(src, tgt).detach().numpy(), model(src, tgt).detach().numpy())


def _ln(d, bias=True):
    # LayerNorm's own line is LayerNorm's repr (its bias= field is another item of the same issue)
    return repr(nn.LayerNorm(d, bias=bias))


def test_reprs_follow_pytorch():
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    assert repr(layer) == (
        "TransformerEncoderLayer(\n"
        "  (self_attn): MultiheadAttention(\n"
        "    (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=True)\n"
        "  )\n"
        "  (linear1): Linear(in_features=8, out_features=16, bias=True)\n"
        "  (dropout): Dropout(p=0.1, inplace=False)\n"
        "  (linear2): Linear(in_features=16, out_features=8, bias=True)\n"
        f"  (norm1): {_ln(8)}\n"
        f"  (norm2): {_ln(8)}\n"
        "  (dropout1): Dropout(p=0.1, inplace=False)\n"
        "  (dropout2): Dropout(p=0.1, inplace=False)\n"
        ")")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, activation=nn.GELU()), 2, nn.LayerNorm(8))
    lines = repr(enc).splitlines()
    assert lines[:3] == ["TransformerEncoder(", "  (layers): ModuleList(", "    (0-1): 2 x TransformerEncoderLayer("]
    assert lines[-5:] == ["      (activation): GELU(approximate='none')", "    )", "  )", f"  (norm): {_ln(8)}", ")"]
    dec = repr(nn.TransformerDecoderLayer(8, 2, 16, bias=False)).splitlines()
    assert dec[1:7] == [
        "  (self_attn): MultiheadAttention(",
        "    (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=False)", "  )",
        "  (multihead_attn): MultiheadAttention(",
        "    (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=False)", "  )"]
    assert dec[-5:] == [f"  (norm3): {_ln(8, False)}", "  (dropout1): Dropout(p=0.1, inplace=False)",
                        "  (dropout2): Dropout(p=0.1, inplace=False)", "  (dropout3): Dropout(p=0.1, inplace=False)",
                        ")"]


def test_module_paths():
    import eagerc.nn.modules.transformer as mt
    for name in mt.__all__:
        assert getattr(nn, name) is getattr(mt, name)
    assert set(mt.__all__) == {"Transformer", "TransformerEncoder", "TransformerDecoder",
                               "TransformerEncoderLayer", "TransformerDecoderLayer"}


# ---------------------------------------------------------------- train vs eval, compile

def test_dropout_only_in_training():
    eagerc.manual_seed(0)
    layer = randomise(nn.TransformerEncoderLayer(E, H, FF, dropout=0.3).double())
    x = rand(S, N, E)
    layer.eval()
    a, b = layer(T(x)).detach().numpy(), layer(T(x)).detach().numpy()
    np.testing.assert_array_equal(a, b)
    close(a, np_encoder_layer(layer, x))
    layer.train()
    c, d = layer(T(x)).detach().numpy(), layer(T(x)).detach().numpy()
    assert not np.allclose(c, a) and not np.allclose(c, d)
    for m in layer.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    layer.self_attn.dropout = 0.0
    close(layer(T(x)), a)   # with every dropout off, training mode computes the same function


@pytest.mark.parametrize("norm_first", [False, True])
def test_compiled_encoder_matches_eager(norm_first):
    eagerc.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, norm_first=norm_first,
                                                               activation="gelu"), 2, norm=nn.LayerNorm(16))
    enc.eval()
    mask = eagerc.tensor(np.triu(np.ones((6, 6), bool), 1))
    kpm = eagerc.tensor(np.arange(6)[None, :] >= np.array([[6], [4], [5]]))

    def fwd(x):
        return enc(x, mask=mask, src_key_padding_mask=kpm)
    compiled = eagerc.compile(fwd, fullgraph=True)
    for seed in range(2):
        x = eagerc.randn(3, 6, 16, generator=eagerc.Generator().manual_seed(seed))
        np.testing.assert_allclose(compiled(x).detach().numpy(), fwd(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    with eagerc.no_grad():  # the nested-tensor emulation traces too (no mask: the padding rule applies)
        c2 = eagerc.compile(lambda x, k: enc(x, src_key_padding_mask=k), fullgraph=True)
        x = eagerc.randn(3, 6, 16)
        c2(x, kpm)                                     # the first call traces: eager's results
        out = c2(x, kpm)
        np.testing.assert_allclose(out.numpy(), enc(x, src_key_padding_mask=kpm).numpy(), rtol=1e-5, atol=1e-6)
        if not norm_first:
            assert float(out[1, 4:].abs().sum()) == float(enc.norm.bias.abs().sum() * 2)


def test_encoder_classifier_trains():
    """A two-token lookup needs attention: the label is whether the first token reappears later."""
    eagerc.manual_seed(0)
    rng = np.random.default_rng(0)

    def batch(n):
        x = rng.integers(1, 8, (n, 6))
        y = rng.integers(0, 2, n)
        for i in range(n):
            rest = x[i, 1:]
            if y[i]:
                rest[rng.integers(0, 5)] = x[i, 0]
            else:
                rest[rest == x[i, 0]] = (x[i, 0] % 7) + 1
        return eagerc.tensor(x), eagerc.tensor((x[:, 1:] == x[:, :1]).any(1).astype(np.int64))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(8, 16)
            self.pos = nn.Parameter(eagerc.randn(6, 16) * 0.1)
            self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 1)
            self.head = nn.Linear(16, 2)

        def forward(self, x):
            return self.head(self.enc(self.emb(x) + self.pos)[:, 0])
    model = Net()
    opt = eagerc.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = batch(256)
    with eagerc.no_grad():
        acc0 = (model(xt).argmax(1) == yt).float().mean().item()
    for _ in range(150):
        xb, yb = batch(64)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with eagerc.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()
    assert acc > 0.8 and acc > acc0 + 0.2, (acc0, acc)


# ---------------------------------------------------------------- against PyTorch (when installed)

def _to_torch(torch, eager_module, torch_module):
    torch_module.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in eager_module.state_dict().items()})
    return torch_module


@pytest.mark.parametrize("cfg", [dict(), dict(norm_first=True, activation="gelu"), dict(batch_first=True),
                                 dict(bias=False, layer_norm_eps=1e-3)], ids=str)
def test_transformer_against_torch(cfg):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = randomise(nn.Transformer(8, 2, 2, 2, 16, dropout=0.0, **cfg).double()).eval()
        theirs = _to_torch(torch, ours, torch.nn.Transformer(8, 2, 2, 2, 16, dropout=0.0, **cfg).double()).eval()
    assert list(theirs.state_dict()) == list(ours.state_dict())
    bf = cfg.get("batch_first", False)
    src, tgt = rand(S, N, 8), rand(4, N, 8, seed=2)
    kpm = np.zeros((N, S), bool)
    kpm[0, -2:] = True
    tgt_mask = np.triu(np.ones((4, 4), bool), 1)
    args = (seq_first(src, bf), seq_first(tgt, bf))
    out = ours(*(T(a) for a in args), tgt_mask=T(tgt_mask), src_key_padding_mask=T(kpm),
               memory_key_padding_mask=T(kpm))
    ref = theirs(*(torch.tensor(a) for a in args), tgt_mask=torch.tensor(tgt_mask),
                 src_key_padding_mask=torch.tensor(kpm), memory_key_padding_mask=torch.tensor(kpm))
    close(out, ref.detach().numpy(), 1e-9)
    g = rand(*out.shape, seed=9)
    out.backward(T(g))
    ref.backward(torch.tensor(g))
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        close(p.grad, tp[name].grad.numpy(), 1e-8)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_encoder_against_torch_nested_path_and_reprs():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = randomise(nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).double())
        theirs = _to_torch(torch, ours, torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).double())
    ours.eval()
    theirs.eval()
    x = rand(N, S, 8)
    kpm = np.zeros((N, S), bool)
    kpm[0, -2:] = True
    with eagerc.no_grad(), torch.no_grad():
        close(ours(T(x), src_key_padding_mask=T(kpm)),
              theirs(torch.tensor(x), src_key_padding_mask=torch.tensor(kpm)).numpy(), 1e-9)
    assert repr(ours).splitlines() == [line.replace("torch.", "eagerc.") for line in repr(theirs).splitlines()]


# ---------------------------------------------------------------- the example

def _one_blas_thread():
    """Small matmuls: one BLAS thread is faster, and much faster on a loaded machine."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def test_transformer_classifier_example_learns():
    pytest.importorskip("tqdm")
    from examples.transformer_classifier import main
    with _one_blas_thread():
        initial, final = main(["--steps", "200", "--quiet", "--test-size", "300"])
    assert initial < 0.45                     # 3 balanced classes: chance
    assert final > 0.6 and final > initial + 0.2, (initial, final)
