"""nn.RNN/LSTM/GRU, their cells and nn.utils.rnn against numpy recurrences written here (PyTorch's
gate order and parameter layout), float64 finite-difference gradients, packed sequences against
running each sequence alone, PyTorch's parameter names, init and reprs, compiled vs eager, and
(when PyTorch is installed) the same outputs as PyTorch given the same state_dict."""
import math

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
from eagerc.autograd import gradcheck, gradgradcheck
from eagerc.nn.utils import rnn as rnn_utils

# ---------------------------------------------------------------- the numpy reference


def sig(x):
    return 1 / (1 + np.exp(-x))


def np_step(mode, x, state, w_ih, w_hh, b_ih, b_hh, w_hr):
    """One step of PyTorch's recurrences for a batch x (B, in); state: (h,) or (h, c)."""
    xg = x @ w_ih.T + (0 if b_ih is None else b_ih)
    hg = state[0] @ w_hh.T + (0 if b_hh is None else b_hh)
    if mode == "LSTM":
        i, f, g, o = np.split(xg + hg, 4, -1)
        c = sig(f) * state[1] + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
        return (h if w_hr is None else h @ w_hr.T, c)
    if mode == "GRU":
        (xr, xz, xn), (hr, hz, hn) = np.split(xg, 3, -1), np.split(hg, 3, -1)
        r, z = sig(xr + hr), sig(xz + hz)
        n = np.tanh(xn + r * hn)
        return ((1 - z) * n + z * state[0],)
    return ((np.tanh if mode == "RNN_TANH" else lambda a: np.maximum(a, 0))(xg + hg),)


def P(m, name):
    t = dict(m.named_parameters()).get(name)
    return None if t is None else t.detach().numpy().astype(np.float64)


def np_rnn(m, x, state):
    """The whole module on time-major x (T, B, in); state: tuple of (L * D, B, size) arrays."""
    D = 2 if m.bidirectional else 1
    finals = [[] for _ in state]
    for layer in range(m.num_layers):
        outs = []
        for d in range(D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            w = [P(m, n + sfx) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")]
            s = tuple(a[layer * D + d] for a in state)
            out = [None] * len(x)
            for t in (range(len(x) - 1, -1, -1) if d else range(len(x))):
                s = np_step(m.mode, x[t], s, *w)
                out[t] = s[0]
            outs.append(np.stack(out))
            for f, a in zip(finals, s):
                f.append(a)
        x = np.concatenate(outs, -1)
    return x, tuple(np.stack(f) for f in finals)


def _module(cls, *args, **kw):
    eagerc.manual_seed(0)
    return cls(*args, **kw).double()


def _zeros_state(m, B):
    L = m.num_layers * (2 if m.bidirectional else 1)
    sizes = [m.proj_size or m.hidden_size] + ([m.hidden_size] if m.mode == "LSTM" else [])
    return tuple(np.zeros((L, B, n)) for n in sizes)


def _as_tuple(h):
    return h if isinstance(h, tuple) else (h,)


CONFIGS = [
    (nn.RNN, {}), (nn.RNN, {"nonlinearity": "relu", "num_layers": 2}), (nn.LSTM, {}),
    (nn.LSTM, {"num_layers": 2, "bidirectional": True}), (nn.LSTM, {"proj_size": 3, "num_layers": 2}),
    (nn.LSTM, {"proj_size": 2, "bidirectional": True, "bias": False}), (nn.GRU, {}),
    (nn.GRU, {"num_layers": 2, "bidirectional": True}), (nn.GRU, {"bias": False}),
]
IDS = [f"{c.__name__}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for c, kw in CONFIGS]

# ---------------------------------------------------------------- forward against the reference


@pytest.mark.parametrize("cls,kw", CONFIGS, ids=IDS)
def test_forward_matches_numpy_recurrence(cls, kw):
    m = _module(cls, 4, 6, **kw)
    x = np.random.default_rng(1).standard_normal((5, 3, 4))
    out, h = m(eagerc.tensor(x))
    ref_out, ref_h = np_rnn(m, x, _zeros_state(m, 3))
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-12, atol=1e-12)
    for a, b in zip(_as_tuple(h), ref_h):
        np.testing.assert_allclose(a.detach().numpy(), b, rtol=1e-12, atol=1e-12)
    assert isinstance(h, tuple) == (cls is nn.LSTM)


@pytest.mark.parametrize("cls,kw", CONFIGS[::2], ids=IDS[::2])
def test_initial_state_batch_first_and_unbatched(cls, kw):
    m = _module(cls, 4, 6, batch_first=True, **kw)
    r = np.random.default_rng(2)
    x = r.standard_normal((3, 5, 4))
    state = tuple(r.standard_normal(s.shape) for s in _zeros_state(m, 3))
    hx = tuple(eagerc.tensor(s) for s in state) if cls is nn.LSTM else eagerc.tensor(state[0])
    out, h = m(eagerc.tensor(x), hx)
    ref_out, ref_h = np_rnn(m, x.transpose(1, 0, 2), state)
    np.testing.assert_allclose(out.detach().numpy(), ref_out.transpose(1, 0, 2), rtol=1e-12, atol=1e-12)
    for a, b in zip(_as_tuple(h), ref_h):   # h_n is (layers * directions, B, size) even with batch_first
        np.testing.assert_allclose(a.detach().numpy(), b, rtol=1e-12, atol=1e-12)
    # unbatched: (T, in) and (L * D, size) states
    one = tuple(s[:, 0] for s in state)
    hx1 = tuple(eagerc.tensor(s) for s in one) if cls is nn.LSTM else eagerc.tensor(one[0])
    out1, h1 = m(eagerc.tensor(x[0]), hx1)
    np.testing.assert_allclose(out1.detach().numpy(), ref_out[:, 0], rtol=1e-12, atol=1e-12)
    for a, b in zip(_as_tuple(h1), ref_h):
        np.testing.assert_allclose(a.detach().numpy(), b[:, 0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls,kw", [CONFIGS[0], CONFIGS[3], CONFIGS[5], CONFIGS[7]], ids=[IDS[i] for i in (0, 3, 5, 7)])
def test_gradients_by_finite_differences(cls, kw):
    m = _module(cls, 3, 4, **kw)
    names = [n for n, _ in m.named_parameters()]
    r = np.random.default_rng(3)
    x = eagerc.tensor(r.standard_normal((4, 2, 3)), requires_grad=True)
    h0 = [eagerc.tensor(s * 0 + r.standard_normal(s.shape), requires_grad=True) for s in _zeros_state(m, 2)]
    params = [p.detach().clone().requires_grad_(True) for p in m.parameters()]

    def fn(x, *rest):
        state, ws = rest[:len(h0)], rest[len(h0):]
        for n, w in zip(names, ws):   # a functional call: the module reads the tensors passed in
            m._parameters[n] = w
        out, h = m(x, tuple(state) if cls is nn.LSTM else state[0])
        return (out * out).sum() + sum((s * s).sum() for s in _as_tuple(h))
    try:
        assert gradcheck(fn, (x, *h0, *params))
    finally:
        for n, p in zip(names, m.parameters()):
            m._parameters[n] = p


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell])
def test_second_derivatives_through_the_fused_cells(cls):
    eagerc.manual_seed(0)
    cell = cls(3, 2).double()
    r = np.random.default_rng(4)
    x = eagerc.tensor(r.standard_normal((2, 3)), requires_grad=True)
    h = eagerc.tensor(r.standard_normal((2, 2)), requires_grad=True)

    def fn(x, h):
        out = cell(x, (h, h * 0.5)) if cls is nn.LSTMCell else cell(x, h)
        return out[0] * out[1] if cls is nn.LSTMCell else out
    assert gradgradcheck(fn, (x, h))


def test_second_derivatives_through_the_lstm_layer():
    """nn.LSTM runs each layer as one lstm_layer node; under create_graph its derivative is the
    backward kernel's decomposition, differentiated again (through the saved gates too)."""
    eagerc.manual_seed(0)
    m = nn.LSTM(2, 2, bidirectional=True).double()
    r = np.random.default_rng(5)
    x = eagerc.tensor(r.standard_normal((3, 2, 2)), requires_grad=True)
    h = eagerc.tensor(r.standard_normal((2, 2, 2)), requires_grad=True)

    def fn(x, h):
        out, (hn, cn) = m(x, (h, h * 0.5))
        return out * out, hn, cn
    assert gradgradcheck(fn, (x, h))
    w = m.weight_hh_l0
    out, _ = m(x)
    (gw,) = eagerc.autograd.grad(out.sum(), w, create_graph=True)
    assert gw.requires_grad and gradcheck(lambda x: eagerc.autograd.grad(m(x)[0].pow(2).sum(), w,
                                                                         create_graph=True)[0], (x,))


def test_the_lstm_layer_node_keeps_only_what_its_derivative_reads():
    """The lstm_layer node saves h0, c0, W_hh and its output (the gates' reserve), not the input
    projections (T x B x 4H, its largest input: freed after the forward); the gradient is still
    the reference's (finite differences above). A name that is not an input is refused."""
    from eagerc.autograd.formulas import defgrad_node
    m = nn.LSTM(3, 2).double()
    x = eagerc.tensor(np.random.default_rng(6).standard_normal((4, 2, 3)), requires_grad=True)
    out, _ = m(x)
    todo, node = [out.grad_fn], None
    while todo and node is None:
        n = todo.pop()
        node = n if n.op.name == "lstm_layer" else None
        todo += [e for e in n.next if e is not None and hasattr(e, "op")]
    assert node is not None and node.saved[0] is None and node.out is not None
    assert all(node.saved[i] is not None for i in (1, 2, 3))
    with pytest.raises(TypeError, match=r"saves_inputs names \['x'\], not its inputs"):
        defgrad_node("lstm_layer", None, saves_inputs=("x",))


# ---------------------------------------------------------------- cells


@pytest.mark.parametrize("cls,mode", [(nn.RNNCell, "RNN_TANH"), (nn.LSTMCell, "LSTM"), (nn.GRUCell, "GRU")])
def test_cells_match_the_reference(cls, mode):
    eagerc.manual_seed(0)
    cell = cls(4, 5).double()
    r = np.random.default_rng(5)
    x = r.standard_normal((3, 4))
    w = [P(cell, n) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")] + [None]
    state = (r.standard_normal((3, 5)),) + ((r.standard_normal((3, 5)),) if mode == "LSTM" else ())
    hx = tuple(eagerc.tensor(s) for s in state) if mode == "LSTM" else eagerc.tensor(state[0])
    got = _as_tuple(cell(eagerc.tensor(x), hx))
    for a, b in zip(got, np_step(mode, x, state, *w)):
        np.testing.assert_allclose(a.detach().numpy(), b, rtol=1e-12, atol=1e-12)
    # default state zeros; unbatched input
    zero = tuple(np.zeros((3, 5)) for _ in state)
    for a, b in zip(_as_tuple(cell(eagerc.tensor(x))), np_step(mode, x, zero, *w)):
        np.testing.assert_allclose(a.detach().numpy(), b, rtol=1e-12, atol=1e-12)
    for a, b in zip(_as_tuple(cell(eagerc.tensor(x[1]))), np_step(mode, x[1:2], zero, *w)):
        np.testing.assert_allclose(a.detach().numpy(), b[0], rtol=1e-12, atol=1e-12)
    relu = nn.RNNCell(4, 5, nonlinearity="relu").double()
    w = [P(relu, n) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")] + [None]
    np.testing.assert_allclose(relu(eagerc.tensor(x)).detach().numpy(), np_step("RNN_RELU", x, zero[:1], *w)[0])


# ---------------------------------------------------------------- parameters, init, repr


def test_parameter_names_shapes_and_init_like_pytorch():
    m = nn.LSTM(10, 20, num_layers=2, bidirectional=True, proj_size=5)
    shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
    assert list(shapes)[:5] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0"]
    assert shapes["weight_ih_l0_reverse"] == (80, 10) and shapes["weight_hh_l0"] == (80, 5)
    assert shapes["weight_ih_l1"] == (80, 10) and shapes["weight_hr_l1_reverse"] == (5, 20)
    assert len(shapes) == 20 and list(m.state_dict()) == list(shapes)
    bound = 1 / math.sqrt(20)
    for p in m.parameters():
        a = p.detach().numpy()
        assert a.min() >= -bound and a.max() <= bound and a.std() > bound / 3
    assert [len(w) for w in m.all_weights] == [5] * 4 and m.all_weights[0][0] is m.weight_ih_l0
    assert m.flatten_parameters() is None
    g = nn.GRU(3, 4, bias=False)
    assert [n for n, _ in g.named_parameters()] == ["weight_ih_l0", "weight_hh_l0"]
    assert tuple(g.weight_ih_l0.shape) == (12, 3)
    c = nn.LSTMCell(3, 4)
    assert {n: tuple(p.shape) for n, p in c.named_parameters()} == {
        "weight_ih": (16, 3), "weight_hh": (16, 4), "bias_ih": (16,), "bias_hh": (16,)}


def test_reprs_like_pytorch():
    assert repr(nn.LSTM(10, 20, 2, proj_size=5, bidirectional=True, batch_first=True, dropout=0.1)) == \
        "LSTM(10, 20, proj_size=5, num_layers=2, batch_first=True, dropout=0.1, bidirectional=True)"
    assert repr(nn.GRU(10, 20, bias=False)) == "GRU(10, 20, bias=False)"
    assert repr(nn.RNN(3, 4, nonlinearity="relu")) == "RNN(3, 4)"
    assert repr(nn.RNNCell(3, 4, nonlinearity="relu")) == "RNNCell(3, 4, nonlinearity=relu)"
    assert repr(nn.GRUCell(3, 4, bias=False)) == "GRUCell(3, 4, bias=False)"
    assert repr(nn.LSTMCell(3, 4)) == "LSTMCell(3, 4)"


def test_errors_like_pytorch():
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="only supported for LSTM"):
        nn.GRU(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.5)
    m = nn.LSTM(3, 4)
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D, got 4D"):
        m(eagerc.zeros(1, 2, 3, 3))
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 3, got 5"):
        m(eagerc.zeros(2, 2, 5))
    with pytest.raises(RuntimeError, match="Expected hidden size \\(1, 2, 4\\), got \\[1, 3, 4\\]"):
        m(eagerc.zeros(2, 2, 3), (eagerc.zeros(1, 3, 4), eagerc.zeros(1, 2, 4)))
    with pytest.raises(RuntimeError, match="Expected sequence length to be larger than 0"):
        m(eagerc.zeros(0, 2, 3))
    with pytest.raises(RuntimeError, match="hidden0 has inconsistent hidden_size: got 5, expected 4"):
        nn.GRUCell(3, 4)(eagerc.zeros(2, 3), eagerc.zeros(2, 5))


def test_dropout_between_layers_only_in_training():
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = eagerc.randn(5, 2, 3)
    m.eval()
    a, _ = m(x)
    b, _ = m(x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    m.train()
    eagerc.manual_seed(1)
    c, _ = m(x)
    assert not np.allclose(a.detach().numpy(), c.detach().numpy())
    m.dropout = 1.0   # every output of layer 0 dropped: layer 1 sees zeros
    out, _ = m(x)
    m1 = _module(nn.GRU, 4, 4)
    m1.load_state_dict({k[:-1] + "0": v for k, v in m.state_dict().items() if k.endswith("l1")})
    ref, _ = np_rnn(m1.float(), np.zeros((5, 2, 4)), (np.zeros((1, 2, 4)),))   # layer 1 alone on zeros
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- packed sequences


@pytest.mark.parametrize("cls,kw", [CONFIGS[3], CONFIGS[4], CONFIGS[7], CONFIGS[1]], ids=[IDS[i] for i in (3, 4, 7, 1)])
def test_packed_input_equals_each_sequence_alone(cls, kw):
    m = _module(cls, 4, 6, **kw)
    r = np.random.default_rng(6)
    lengths = [3, 5, 1, 4]
    seqs = [r.standard_normal((n, 4)) for n in lengths]
    state = tuple(r.standard_normal(s.shape) for s in _zeros_state(m, 4))
    hx = tuple(eagerc.tensor(s) for s in state) if cls is nn.LSTM else eagerc.tensor(state[0])
    packed = rnn_utils.pack_sequence([eagerc.tensor(s) for s in seqs], enforce_sorted=False)
    out, h = m(packed, hx)
    assert isinstance(out, rnn_utils.PackedSequence)
    padded, got_lengths = rnn_utils.pad_packed_sequence(out, batch_first=True)
    assert got_lengths.tolist() == lengths and got_lengths.dtype == eagerc.int64
    for b, s in enumerate(seqs):
        ref_out, ref_h = np_rnn(m, s[:, None], tuple(a[:, b:b + 1] for a in state))
        np.testing.assert_allclose(padded[b, :len(s)].detach().numpy(), ref_out[:, 0], rtol=1e-12, atol=1e-12)
        assert not padded[b, len(s):].detach().numpy().any()
        for a, rh in zip(_as_tuple(h), ref_h):
            np.testing.assert_allclose(a[:, b].detach().numpy(), rh[:, 0], rtol=1e-12, atol=1e-12)


def test_pad_sequence():
    a, b = eagerc.tensor([[1.0, 2.0]] * 3), eagerc.tensor([[3.0, 4.0]])
    out = rnn_utils.pad_sequence([a, b])
    assert tuple(out.shape) == (3, 2, 2)
    np.testing.assert_array_equal(out[:, 1].numpy(), [[3, 4], [0, 0], [0, 0]])
    out = rnn_utils.pad_sequence([a, b], batch_first=True, padding_value=-1.0, padding_side="left")
    np.testing.assert_array_equal(out[1].numpy(), [[-1, -1], [-1, -1], [3, 4]])
    with pytest.raises(ValueError, match="padding_side"):
        rnn_utils.pad_sequence([a, b], padding_side="middle")


def test_pack_and_unpack_round_trip():
    r = np.random.default_rng(7)
    x = eagerc.tensor(r.standard_normal((4, 3, 2)), requires_grad=True)   # (T, B, *)
    packed = rnn_utils.pack_padded_sequence(x, eagerc.tensor([4, 2, 3]), enforce_sorted=False)
    assert packed.batch_sizes.tolist() == [3, 3, 2, 1] and packed.sorted_indices.tolist() == [0, 2, 1]
    assert packed.unsorted_indices.tolist() == [0, 2, 1]
    np.testing.assert_array_equal(packed.data.detach().numpy()[:3], x.detach().numpy()[0, [0, 2, 1]])
    data, sizes, si, ui = packed   # a named tuple
    assert data is packed.data and sizes is packed.batch_sizes
    padded, lengths = rnn_utils.pad_packed_sequence(packed, padding_value=9.0, total_length=5)
    assert tuple(padded.shape) == (5, 3, 2) and lengths.tolist() == [4, 2, 3]
    mask = np.arange(5)[:, None] < np.array([4, 2, 3])
    np.testing.assert_array_equal(padded.detach().numpy()[mask], x.detach().numpy()[mask[:4]])
    assert (padded.detach().numpy()[~mask] == 9).all()
    padded.sum().backward()   # one gather each way: gradient 1 where a step is real, 0 on padding
    np.testing.assert_array_equal(x.grad.numpy(), np.broadcast_to(mask[:4, :, None], (4, 3, 2)))
    with pytest.raises(ValueError, match="total_length=3 and max sequence length being 4"):
        rnn_utils.pad_packed_sequence(packed, total_length=3)
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        rnn_utils.pack_padded_sequence(x, [2, 4, 3])
    seqs = rnn_utils.unpack_sequence(rnn_utils.pack_sequence([x[:4, 0], x[:2, 1]]))
    assert [tuple(s.shape) for s in seqs] == [(4, 2), (2, 2)]
    p64 = packed.to(eagerc.float32)
    assert p64.data.dtype == eagerc.float32 and p64.batch_sizes is packed.batch_sizes and packed.double() is packed


# ---------------------------------------------------------------- compiled, module paths


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_compiled_matches_eager(cls):
    eagerc.manual_seed(0)
    m = cls(4, 5, num_layers=2)
    compiled = eagerc.compile(m)
    x = eagerc.randn(6, 3, 4)
    for step in range(2):
        outs = []
        for fn in (m, compiled):
            m.zero_grad()
            out, h = fn(x)
            (out.sum() + _as_tuple(h)[0].sum()).backward()
            outs.append([out.detach().numpy()] + [p.grad.numpy().copy() for p in m.parameters()])
        for a, b in zip(*outs):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_module_paths():
    from eagerc.nn.modules import rnn, transformer
    assert rnn.LSTM is nn.LSTM and rnn.RNNBase and rnn.RNNCellBase and transformer.Transformer is nn.Transformer
    assert rnn.PackedSequence is nn.utils.rnn.PackedSequence
    assert eagerc.lstm_cell and eagerc.gru_cell and eagerc.rnn_tanh_cell and eagerc.rnn_relu_cell


# ---------------------------------------------------------------- against PyTorch (optional)


@pytest.mark.parametrize("cls,kw", CONFIGS, ids=IDS)
def test_pytorch_state_dict_gives_the_same_outputs(cls, kw):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tm = getattr(torch.nn, cls.__name__)(4, 6, batch_first=True, **kw)
    m = cls(4, 6, batch_first=True, **kw)
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = np.random.default_rng(8).standard_normal((3, 5, 4)).astype(np.float32)
    tx, ex = torch.tensor(x, requires_grad=True), eagerc.tensor(x, requires_grad=True)
    lengths = [5, 2, 4]
    tp = torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, batch_first=True, enforce_sorted=False)
    ep = rnn_utils.pack_padded_sequence(ex, lengths, batch_first=True, enforce_sorted=False)
    for ti, ei in ((tx, ex), (tp, ep)):
        (to, th), (eo, eh) = tm(ti), m(ei)
        if ti is tp:
            to, eo = torch.nn.utils.rnn.pad_packed_sequence(to)[0], rnn_utils.pad_packed_sequence(eo)[0]
        np.testing.assert_allclose(eo.detach().numpy(), to.detach().numpy(), rtol=1e-5, atol=1e-6)
        for a, b in zip(_as_tuple(eh), _as_tuple(th)):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
        to.pow(2).sum().backward()
        eo.pow(2).sum().backward()
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for (n, tp_), (_, ep_) in zip(tm.named_parameters(), m.named_parameters()):
        np.testing.assert_allclose(ep_.grad.numpy(), tp_.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)


# ---------------------------------------------------------------- the example


def test_lstm_language_model_example_learns():
    pytest.importorskip("tqdm")
    from examples.lstm_language_model import main
    initial, final = main(["--steps", "40", "--quiet", "--seq-len", "16"])
    assert initial > 4.0                       # chance: ln(vocabulary) ~ 4.3
    assert final < initial - 0.8, (initial, final)
