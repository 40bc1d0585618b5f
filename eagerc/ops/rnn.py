"""Derivatives and decompositions of the recurrent cells' fused ops (runtime/ops/nn.py:
`lstm_cell`, `gru_cell` and their `*_backward` kernels); eagerc.nn.functional_rnn holds the
PyTorch-named cell functions and the layer loop that apply them.

xg and hg are the two projections (x W_ih^T + b_ih, h W_hh^T + b_hh), so the ops hold only the
element-wise gate math. A plain backward uses the fused backward kernel; under create_graph=True
the derivative is that kernel's decomposition (`*_backward_decomposed`, Tensor ops), so second
derivatives work. The compiler's decompose pass traces the decompositions to fuse them.
"""
from ..autograd.engine import _saved_input
from ..autograd.formulas import defdecomp, defgrad_node
from ..dispatch import apply
from ..runtime.ops import OPS
from .elementwise import sigmoid, tanh
from .joining import cat, stack
from .nn import _first_order

__all__ = ["lstm_cell_decomposed", "lstm_cell_backward_decomposed", "gru_cell_decomposed",
           "gru_cell_backward_decomposed"]

_LSTM_BACKWARD, _GRU_BACKWARD = OPS["lstm_cell_backward"], OPS["gru_cell_backward"]


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
    if _first_order():
        d = apply(_LSTM_BACKWARD, (g, xg, hg, c))
    else:
        d = lstm_cell_backward_decomposed(g, xg, hg, c)
    dgates, dc = _pieces(d, c.shape[-1], (4, 1))
    return dgates, dgates, dc


def _gru_cell_grad(node, g):
    xg, hg, h = (_saved_input(node, i) for i in range(3))
    if _first_order():
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
