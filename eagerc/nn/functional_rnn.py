"""Recurrent cells: one time step of RNN, LSTM and GRU, and the layer loop over a sequence.

PyTorch's `torch.lstm_cell`, `torch.gru_cell`, `torch.rnn_tanh_cell` and `torch.rnn_relu_cell`
(exported as `eagerc.<name>`), and `recurrent_layer`, the loop nn.RNN/LSTM/GRU run per layer and
direction. A layer computes its input projection for every time step with one `linear`. An LSTM
layer (no proj_size, not packed) is then one `lstm_layer` op over the whole sequence (its backward
one kernel too, and d W_hh one product over all steps). Other layers run per step one `linear` for
the hidden state and the gate math: for LSTM and GRU one fused op. The ops are declared in
eagerc/runtime/ops/nn.py; their derivatives and decompositions live in eagerc/ops/rnn.py:

| op                           | derivative                                   | decomposition             |
|------------------------------|----------------------------------------------|---------------------------|
| `lstm_cell(xg, hg, c)`       | `lstm_cell_backward` kernel -> d gates, d c  | `lstm_cell_decomposed`    |
| `gru_cell(xg, hg, h)`        | `gru_cell_backward` kernel -> d xg, d hg, dh | `gru_cell_decomposed`     |
| `lstm_layer(xg, h0, c0, w_hh)` | `lstm_layer_backward` kernel -> d xg, d h0, d c0; d W_hh one linear | `lstm_layer_decomposed` |

xg and hg are the two projections (x W_ih^T + b_ih, h W_hh^T + b_hh), so the ops hold only the
element-wise gate math and BLAS does every product. Under create_graph=True the derivative is the
backward kernel's decomposition (`*_backward_decomposed`, Tensor ops), so second derivatives work.
A plain tanh/relu RNN step is tanh(xg + hg): composed, no op of its own.
"""
from ..dispatch import apply
from ..ops.elementwise import tanh
from ..ops.joining import cat, stack
from ..ops.rnn import (gru_cell_backward_decomposed, gru_cell_decomposed, lstm_cell_backward_decomposed,  # noqa: F401
                       lstm_cell_decomposed)
from ..runtime.ops import OPS
from . import functional as F

__all__ = ["lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "lstm_cell_decomposed",
           "lstm_cell_backward_decomposed", "gru_cell_decomposed", "gru_cell_backward_decomposed"]

_LSTM, _GRU, _LSTM_LAYER = OPS["lstm_cell"], OPS["gru_cell"], OPS["lstm_layer"]


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
    if mode != "GRU" and b_hh is not None:     # both biases add to the gates: add them once, not per step
        b_ih, b_hh = b_hh if b_ih is None else b_ih + b_hh, None   # (GRU's b_hn sits inside r * (...))
    xproj = F.linear(x, w_ih, b_ih)            # every step's input projection: one matmul
    if batch_sizes is None:
        if xproj.shape[0] == 0:
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        if mode == "LSTM" and w_hr is None:    # the whole recurrence in one op, its backward too
            hc = apply(_LSTM_LAYER, (xproj.flip(0) if reverse else xproj, state[0], state[1], w_hh))
            hs, cs = hc.unbind(0)[:2]          # (the gates after them are the backward's)
            return (hs.flip(0) if reverse else hs), (hs[-1], cs[-1])
        # one view per step; unbind's backward gathers the steps' gradients back into one
        # (T, B, gates) gradient, so the projection's backward is one matmul too
        steps = xproj.unbind(0)
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


