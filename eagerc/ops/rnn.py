"""Derivatives and decompositions of the recurrent cells' fused ops (runtime/ops/nn.py:
`lstm_cell`, `gru_cell`, the whole-sequence `lstm_layer` and their `*_backward` kernels);
eagerc.nn.functional_rnn holds the PyTorch-named cell functions and the layer loop that apply them.

xg and hg are the two projections (x W_ih^T + b_ih, h W_hh^T + b_hh), so the ops hold only the
element-wise gate math. A plain backward uses the fused backward kernel; under create_graph=True
the derivative is that kernel's decomposition (`*_backward_decomposed`, Tensor ops), so second
derivatives work. The compiler's decompose pass traces the decompositions to fuse them.

`lstm_layer(xg, h0, c0, w_hh)` runs the recurrence over a whole sequence in one node, the way
cuDNN and oneDNN do: it returns every step's h, c and activated gates (the gates are its
"reserve space": the backward recomputes nothing), its backward kernel walks back in time with
one product per step, and the derivative forms d W_hh = sum_t d gates_t^T h_{t-1} as ONE
product over all steps (where per-step nodes did T small products and T accumulations into a
fresh array). Its decompositions are per-step loops of Tensor ops, so create_graph=True
differentiates them.
"""
from ..autograd.engine import _saved_input, _saved_output
from ..autograd.formulas import defdecomp, defgrad_node
from ..dispatch import apply
from ..runtime.ops import OPS
from .creation import zeros
from .elementwise import sigmoid, tanh
from .joining import cat, stack
from .nn import _first_order

__all__ = ["lstm_cell_decomposed", "lstm_cell_backward_decomposed", "gru_cell_decomposed",
           "gru_cell_backward_decomposed", "lstm_layer_decomposed", "lstm_layer_backward_decomposed"]

_LSTM_BACKWARD, _GRU_BACKWARD = OPS["lstm_cell_backward"], OPS["gru_cell_backward"]
_LSTM_LAYER_BACKWARD, _LINEAR = OPS["lstm_layer_backward"], OPS["linear"]


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


def lstm_layer_decomposed(xg, h0, c0, w_hh):
    """The `lstm_layer` kernel's (6, T, B, H) [every h_t, c_t, i_t, f_t, g_t, o_t] as a per-step loop."""
    h, c, steps = h0, c0, []
    for t in range(xg.shape[0]):
        i, f, g, o = (xg[t] + h @ w_hh.t()).chunk(4, -1)
        i, f, g, o = sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
        c = f * c + i * g
        h = o * tanh(c)
        steps.append((h, c, i, f, g, o))
    return stack([stack(list(k)) for k in zip(*steps)])


def lstm_layer_backward_decomposed(g, h0, c0, w_hh, out):
    """The `lstm_layer_backward` kernel's (T + 1, B, 4H) as Tensor ops, back in time step by step
    (also the create_graph derivative: it differentiates through the saved gates)."""
    T, H = out.shape[1], h0.shape[-1]
    hs, cs, i, f, gg, o = out.unbind(0)
    dh = dc = None
    rows = [None] * T
    for t in range(T - 1, -1, -1):
        tc = tanh(cs[t])
        gh, gc = g[0, t], g[1, t]
        if dh is not None:
            gh, gc = gh + dh, gc + dc
        gc = gc + gh * o[t] * (1 - tc * tc)
        rows[t] = cat([(gc * gg[t] + g[2, t]) * i[t] * (1 - i[t]),
                       (gc * (c0 if t == 0 else cs[t - 1]) + g[3, t]) * f[t] * (1 - f[t]),
                       (gc * i[t] + g[4, t]) * (1 - gg[t] * gg[t]),
                       (gh * tc + g[5, t]) * o[t] * (1 - o[t])], -1)
        dh, dc = rows[t] @ w_hh, gc * f[t]
    last = cat([dh, dc, zeros(tuple(dh.shape[:-1]) + (2 * H,), dtype=dh.dtype, device=dh.device)], -1)
    return cat([stack(rows), last.unsqueeze(0)])


def _pieces(d, H, widths):
    out, at = [], 0
    for w in widths:
        out.append(d[..., at * H:(at + w) * H])
        at += w
    return out


def _cell_backward(node, g, backward_op, decomposed):
    """The cell's saved inputs (xg, hg, state) and [d xg... | d state] from the fused backward
    kernel in a plain backward, from its Tensor-op decomposition under create_graph=True."""
    xg, hg, state = (_saved_input(node, i) for i in range(3))
    d = apply(backward_op, (g, xg, hg, state)) if _first_order() else decomposed(g, xg, hg, state)
    return d, state.shape[-1]


def _lstm_cell_grad(node, g):
    d, H = _cell_backward(node, g, _LSTM_BACKWARD, lstm_cell_backward_decomposed)
    dgates, dc = _pieces(d, H, (4, 1))
    return dgates, dgates, dc


def _gru_cell_grad(node, g):
    d, H = _cell_backward(node, g, _GRU_BACKWARD, gru_cell_backward_decomposed)
    return _pieces(d, H, (3, 3, 1))


def _lstm_layer_grad(node, g):
    h0, c0, w_hh = (_saved_input(node, i) for i in (1, 2, 3))
    out = _saved_output(node)
    if _first_order():
        d = apply(_LSTM_LAYER_BACKWARD, (g, h0, c0, w_hh, out))
    else:
        d = lstm_layer_backward_decomposed(g, h0, c0, w_hh, out)
    T, B, H = out.shape[1:]
    dxg = d[:T]
    dw = None
    if node.next[3] is not None:   # sum_t d gates_t^T h_{t-1}: one product over steps 1.., h_{t-1} read
        dw = apply(_LINEAR, (dxg[0].t(), h0.t(), None))    # in place in the output, plus step 0's from h0
        if T > 1:
            dw = dw + apply(_LINEAR, (dxg[1:].reshape((T - 1) * B, 4 * H).t(), out[0, :T - 1].reshape((T - 1) * B, H).t(),
                                      None))
    return dxg, d[T, :, :H], d[T, :, H:2 * H], dw


defgrad_node("lstm_cell", _lstm_cell_grad, saves_inputs=True)
defgrad_node("lstm_layer", _lstm_layer_grad, saves_inputs=("h0", "c0", "w_hh"), saves_output=True)
defgrad_node("gru_cell", _gru_cell_grad, saves_inputs=True)
defdecomp("lstm_cell", lstm_cell_decomposed)
defdecomp("lstm_cell_backward", lstm_cell_backward_decomposed)
defdecomp("gru_cell", gru_cell_decomposed)
defdecomp("lstm_layer", lstm_layer_decomposed)
defdecomp("lstm_layer_backward", lstm_layer_backward_decomposed)
defdecomp("gru_cell_backward", gru_cell_backward_decomposed)
