"""Recurrent cells: one time step of RNN, LSTM and GRU, and the layer loop over a sequence.

PyTorch's `torch.lstm_cell`, `torch.gru_cell`, `torch.rnn_tanh_cell` and `torch.rnn_relu_cell`
(exported as `eagerc.<name>`), and `recurrent_layer`, the loop nn.RNN/LSTM/GRU run per layer and
direction. A layer computes its input projection for every time step with one `linear`, then per
step one `linear` for the hidden state and the gate math: for LSTM and GRU one fused op declared in
eagerc/runtime/ops/nn.py (`lstm_cell`, `gru_cell`), whose pairs are

| op                       | derivative                                  | decomposition                    |
|--------------------------|---------------------------------------------|----------------------------------|
| `lstm_cell(xg, hg, c)`   | `lstm_cell_backward` kernel -> d gates, d c | `lstm_cell_decomposed`           |
| `gru_cell(xg, hg, h)`    | `gru_cell_backward` kernel -> d xg, d hg, dh| `gru_cell_decomposed`            |

xg and hg are the two projections (x W_ih^T + b_ih, h W_hh^T + b_hh), so the ops hold only the
element-wise gate math and BLAS does every product. Under create_graph=True the derivative is the
backward kernel's decomposition (`*_backward_decomposed`, Tensor ops), so second derivatives work.
A plain tanh/relu RNN step is tanh(xg + hg): composed, no op of its own.
"""
from .._api import cat, sigmoid, stack, tanh
from ..autograd.engine import _saved_input
from ..autograd.formulas import defdecomp, defgrad_node
from ..dispatch import apply
from ..runtime.ops import OPS
from . import functional as F

__all__ = ["lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "lstm_cell_decomposed",
           "lstm_cell_backward_decomposed", "gru_cell_decomposed", "gru_cell_backward_decomposed"]

_LSTM, _LSTM_BACKWARD = OPS["lstm_cell"], OPS["lstm_cell_backward"]
_GRU, _GRU_BACKWARD = OPS["gru_cell"], OPS["gru_cell_backward"]


# =============================================================== PyTorch's cell functions

def _projections(input, h, w_ih, w_hh, b_ih, b_hh):
    return F.linear(input, w_ih, b_ih), F.linear(h, w_hh, b_hh)


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step (gates i, f, g, o): returns (h', c')."""
    h, c = hx
    xg, hg = _projections(input, h, w_ih, w_hh, b_ih, b_hh)
    hc = apply(_LSTM, (xg, hg, c))
    return hc[0], hc[1]


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One GRU step (gates r, z, n; b_hn inside r * (W_hn h + b_hn), as PyTorch): returns h'."""
    xg, hg = _projections(input, hx, w_ih, w_hh, b_ih, b_hh)
    return apply(_GRU, (xg, hg, hx))


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    xg, hg = _projections(input, hx, w_ih, w_hh, b_ih, b_hh)
    return tanh(xg + hg)


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    xg, hg = _projections(input, hx, w_ih, w_hh, b_ih, b_hh)
    return F.relu(xg + hg)


# =============================================================== decompositions and derivatives

def lstm_cell_decomposed(xg, hg, c):
    i, f, g, o = (xg + hg).chunk(4, -1)
    c1 = sigmoid(f) * c + sigmoid(i) * tanh(g)
    return stack([sigmoid(o) * tanh(c1), c1])


def lstm_cell_backward_decomposed(g, xg, hg, c):
    """[d gates | d c] from g = [d h', d c'], as Tensor ops (also the create_graph derivative)."""
    i, f, gg, o = (xg + hg).chunk(4, -1)
    i, f, gg, o = sigmoid(i), sigmoid(f), tanh(gg), sigmoid(o)
    tc = tanh(f * c + i * gg)
    dh, dc1 = g.unbind(0)
    dc = dc1 + dh * o * (1 - tc * tc)
    return cat([dc * gg * i * (1 - i), dc * c * f * (1 - f), dc * i * (1 - gg * gg), dh * tc * o * (1 - o),
                dc * f], -1)


def gru_cell_decomposed(xg, hg, h):
    xr, xz, xn = xg.chunk(3, -1)
    hr, hz, hn = hg.chunk(3, -1)
    z = sigmoid(xz + hz)
    n = tanh(xn + sigmoid(xr + hr) * hn)
    return (1 - z) * n + z * h


def gru_cell_backward_decomposed(g, xg, hg, h):
    """[d xg | d hg | d h] from g = d h', as Tensor ops (also the create_graph derivative)."""
    xr, xz, xn = xg.chunk(3, -1)
    hr, hz, hn = hg.chunk(3, -1)
    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
    n = tanh(xn + r * hn)
    dn = g * (1 - z) * (1 - n * n)
    dr = dn * hn * r * (1 - r)
    dz = g * (h - n) * z * (1 - z)
    return cat([dr, dz, dn, dr, dz, dn * r, g * z], -1)


def _pieces(d, H, widths):
    out, at = [], 0
    for w in widths:
        out.append(d[..., at * H:(at + w) * H])
        at += w
    return out


def _lstm_cell_grad(node, g):
    xg, hg, c = (_saved_input(node, i) for i in range(3))
    if F._first_order():
        d = apply(_LSTM_BACKWARD, (g, xg, hg, c))
    else:
        d = lstm_cell_backward_decomposed(g, xg, hg, c)
    dgates, dc = _pieces(d, c.shape[-1], (4, 1))
    return dgates, dgates, dc


def _gru_cell_grad(node, g):
    xg, hg, h = (_saved_input(node, i) for i in range(3))
    if F._first_order():
        d = apply(_GRU_BACKWARD, (g, xg, hg, h))
    else:
        d = gru_cell_backward_decomposed(g, xg, hg, h)
    return _pieces(d, h.shape[-1], (3, 3, 1))


defgrad_node("lstm_cell", _lstm_cell_grad, saves_inputs=True)
defgrad_node("gru_cell", _gru_cell_grad, saves_inputs=True)
defdecomp("lstm_cell", lstm_cell_decomposed)
defdecomp("lstm_cell_backward", lstm_cell_backward_decomposed)
defdecomp("gru_cell", gru_cell_decomposed)
defdecomp("gru_cell_backward", gru_cell_backward_decomposed)


# =============================================================== one layer, one direction, a whole sequence

def _step(mode, xg, state, w_hh, b_hh, w_hr):
    """One time step from the input projection xg: (output, new state)."""
    if mode == "LSTM":
        hc = apply(_LSTM, (xg, F.linear(state[0], w_hh, b_hh), state[1]))
        h, c = hc[0], hc[1]
        if w_hr is not None:
            h = F.linear(h, w_hr)
        return h, (h, c)
    h = state[0]
    hg = F.linear(h, w_hh, b_hh)
    if mode == "GRU":
        h = apply(_GRU, (xg, hg, h))
    else:
        h = tanh(xg + hg) if mode == "RNN_TANH" else F.relu(xg + hg)
    return h, (h,)


def recurrent_layer(mode, x, state, weights, reverse=False, batch_sizes=None):
    """Run one layer in one direction over a sequence.

    x: (T, B, in) time-major, or packed data (sum(batch_sizes), in) with `batch_sizes` (a list of
    ints, non-increasing); state: a tuple of (B, hidden) tensors (h, or h and c); weights:
    (w_ih, w_hh, b_ih, b_hh, w_hr), biases and w_hr may be None. Returns (output, final state):
    output (T, B, out), or packed (sum(batch_sizes), out)."""
    w_ih, w_hh, b_ih, b_hh, w_hr = weights
    if mode != "GRU" and b_ih is not None:     # both biases add to the gates: add them once, not per step
        b_ih, b_hh = b_ih + b_hh, None         # (GRU's b_hn sits inside r * (...), so it stays per step)
    xproj = F.linear(x, w_ih, b_ih)            # every step's input projection: one matmul
    if batch_sizes is None:
        # one view per step; unbind's backward gathers the steps' gradients back into one
        # (T, B, gates) gradient, so the projection's backward is one matmul too
        steps = xproj.unbind(0)
        if not steps:
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        order = range(len(steps) - 1, -1, -1) if reverse else range(len(steps))
        outs = [None] * len(steps)
        for t in order:
            outs[t], state = _step(mode, steps[t], state, w_hh, b_hh, w_hr)
        return stack(outs), state
    steps = xproj.split(list(batch_sizes))
    outs = [None] * len(steps)
    if reverse:  # the batch grows: sequences join with their initial state as their last step comes
        initial = state
        state = tuple(s[:batch_sizes[-1]] for s in initial)
        for t in range(len(steps) - 1, -1, -1):
            n, have = batch_sizes[t], state[0].shape[0]
            if n > have:
                state = tuple(cat([s, s0[have:n]]) for s, s0 in zip(state, initial))
            outs[t], state = _step(mode, steps[t], state, w_hh, b_hh, w_hr)
        return cat(outs), state
    finished = []  # the batch shrinks: a sequence's state is final at its last step
    for t in range(len(steps)):
        n = batch_sizes[t]
        if n < state[0].shape[0]:
            finished.append(tuple(s[n:] for s in state))
            state = tuple(s[:n] for s in state)
        outs[t], state = _step(mode, steps[t], state, w_hh, b_hh, w_hr)
    finished.append(state)
    return cat(outs), tuple(cat([f[k] for f in reversed(finished)]) for k in range(len(state)))


