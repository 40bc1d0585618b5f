"""eagerc.nn.functional: PyTorch's functional neural-network API.

Most functions are compositions of eagerc ops, so they differentiate (to any order)
and trace without rules of their own. The hot composites -- linear, softmax,
log_softmax, layer_norm, batch_norm (training), cross_entropy (class indices), gelu,
embedding and constant pad -- run one fused kernel declared in
`eagerc/runtime/ops/nn.py` (its docstring has the table). For each, this file holds

- the PyTorch-named function that applies the fused op,
- its derivative (`defgrad` / `defgrad_node`): a formula written with Tensor ops, used
  under create_graph=True, and a fused `<op>_backward` kernel for plain backward,
- its decomposition into primitives (`softmax_decomposed`, ...), attached to the op with
  `defdecomp`: the tests check it against the fast path and the compiler uses it to fuse.
"""
import math
import warnings

from .. import _api as _E  # noqa: F401  (attaches every Tensor method)
from .._api import (arange, exp, log, log1p, expm1, erf, minimum, rand, relu as _relu, sigmoid as _sigmoid,
                    tanh as _tanh, where)
from .._tensor import Tensor
from ..autograd.engine import _saved_input
from ..autograd.formulas import defdecomp, defgrad, defgrad_node
from .. import dispatch
from ..dispatch import apply
from ..runtime.ops import OPS, no_part
from ..runtime.ops import nn as _nn_kernels  # noqa: F401  (declares the fused ops)

__all__ = [
    # linear and activations
    "linear", "bilinear", "relu", "relu_", "relu6", "leaky_relu", "gelu", "silu", "elu", "selu", "celu",
    "softplus", "softsign", "tanh", "sigmoid", "hardtanh", "hardsigmoid", "hardswish", "mish",
    "logsigmoid", "tanhshrink", "softmax", "softmin", "log_softmax", "glu",
    # regularisation, embedding, normalisation
    "dropout", "dropout1d", "dropout2d", "embedding", "embedding_bag", "layer_norm", "group_norm", "rms_norm",
    "batch_norm", "normalize", "cosine_similarity", "pairwise_distance", "one_hot", "pad",
    "scaled_dot_product_attention", "multi_head_attention_forward",
    # losses
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
    # decompositions of the fused ops
    "linear_decomposed", "softmax_decomposed", "log_softmax_decomposed", "layer_norm_decomposed",
    "cross_entropy_decomposed", "embedding_decomposed", "gelu_decomposed", "batch_norm_decomposed",
    # decompositions of the fused backward kernels (for the compiler's decompose pass)
    "softmax_backward_decomposed", "log_softmax_backward_decomposed", "gelu_backward_decomposed",
    "layer_norm_backward_decomposed", "layer_norm_weight_backward_decomposed",
    "cross_entropy_backward_decomposed",
]

_LINEAR, _SOFTMAX, _LOG_SOFTMAX = OPS["linear"], OPS["softmax"], OPS["log_softmax"]
_LAYER_NORM, _CROSS_ENTROPY, _PAD = OPS["layer_norm"], OPS["cross_entropy"], OPS["pad"]
_EMBEDDING, _EMBEDDING_BACKWARD = OPS["embedding"], OPS["embedding_backward"]
_GELU, _GELU_BACKWARD = OPS["gelu"], OPS["gelu_backward"]
_SOFTMAX_BACKWARD, _LOG_SOFTMAX_BACKWARD = OPS["softmax_backward"], OPS["log_softmax_backward"]
_LAYER_NORM_BACKWARD, _LAYER_NORM_WEIGHT_BACKWARD = OPS["layer_norm_backward"], OPS["layer_norm_weight_backward"]
_CROSS_ENTROPY_BACKWARD = OPS["cross_entropy_backward"]
_BATCH_NORM, _BATCH_NORM_STATS = OPS["batch_norm"], OPS["batch_norm_stats"]
_BATCH_NORM_BACKWARD, _BATCH_NORM_WEIGHT_BACKWARD = OPS["batch_norm_backward"], OPS["batch_norm_weight_backward"]


def _first_order():
    """True while a plain backward runs (grad mode off): derivatives may use the fused
    `*_backward` kernels. Under create_graph=True they use their Tensor-op formulas."""
    return not dispatch.grad_enabled()


def _float_input(name, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(x).__name__}")
    if x._array.dtype.kind != "f":
        raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype.name} "
                        "(convert with .float() first)")


# =============================================================== linear

def linear(input, weight, bias=None):
    """y = input @ weight.T + bias (one fused op; `linear_decomposed` is matmul + add)."""
    d = input._array.dtype
    if weight._array.dtype is not d or (bias is not None and bias._array.dtype is not d) or d.kind != "f":
        raise RuntimeError(f"linear: expected input, weight and bias of one floating dtype, got "
                           f"{input.dtype.name}, {weight.dtype.name}"
                           f"{'' if bias is None else ', ' + bias.dtype.name}")
    return apply(_LINEAR, (input, weight, bias))


def linear_decomposed(input, weight, bias=None):
    out = input @ weight.t()
    return out if bias is None else out + bias


def _linear_grad(node, g):
    x_edge, w_edge, b_edge = node.next
    weight = _saved_input(node, 1)
    gx = gw = gb = None
    if x_edge is not None:
        gx = apply(_LINEAR, (g, weight.t(), None))  # g @ weight
    g2 = g.reshape(-1, g.shape[-1]) if g.ndim != 2 else g
    if w_edge is not None:
        x = _saved_input(node, 0)
        x2 = x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x
        gw = apply(_LINEAR, (g2.t(), x2.t(), None))  # g2.T @ x2
    if b_edge is not None:
        gb = g2.sum(0).reshape(node.shapes[2])
    return gx, gw, gb


defgrad_node("linear", _linear_grad, saves_inputs=True)
defdecomp("linear", linear_decomposed)


def bilinear(input1, input2, weight, bias=None):
    """y_k = x1 @ W_k @ x2 + b_k, weight of shape (out, in1, in2)."""
    from .._api import einsum
    out = einsum("...i,kij,...j->...k", input1, weight, input2)
    return out if bias is None else out + bias


# =============================================================== activations

def relu(input, inplace=False):
    if inplace:
        return input.relu_()
    return _relu(input)


def relu_(input):
    return input.relu_()


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    out = input.clamp(min_val, max_val)
    return input.copy_(out) if inplace else out


def leaky_relu(input, negative_slope=0.01, inplace=False):
    out = where(input > 0, input, input * negative_slope)
    return input.copy_(out) if inplace else out


def gelu(input, approximate="none"):
    """x * Phi(x): exact with erf ('none'), or the tanh approximation ('tanh'). One fused op."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if input._array.dtype.kind != "f":
        _float_input("gelu", input)
    return apply(_GELU, (input,), {"approximate": approximate})


def gelu_decomposed(input, approximate="none"):
    """The fused gelu op as primitives, with the kernel's constants and order of operations."""
    if approximate == "none":
        return input * (erf(input * _nn_kernels._SQRT_HALF) + 1) * 0.5
    if approximate == "tanh":
        inner = (input * input * 0.044715 + 1) * (input * _nn_kernels._SQRT_2_OVER_PI)
        return input * (_tanh(inner) + 1) * 0.5
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def gelu_backward_decomposed(grad, input, approximate="none"):
    """The fused gelu_backward kernel as elementwise primitives: grad * gelu'(input)."""
    x = input
    if approximate == "tanh":
        k = _nn_kernels._SQRT_2_OVER_PI
        x2 = x * x
        t = _tanh(x * k * (x2 * 0.044715 + 1))
        d = (t + 1) * 0.5 + x * 0.5 * (1 - t * t) * k * (x2 * (3 * 0.044715) + 1)
    elif approximate == "none":   # Phi(x) + x phi(x)
        d = (erf(x * _nn_kernels._SQRT_HALF) + 1) * 0.5 + exp(x * x * -0.5) * x * _nn_kernels._INV_SQRT_2PI
    else:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return d * grad


def silu(input, inplace=False):
    out = input * _sigmoid(input)
    return input.copy_(out) if inplace else out


def mish(input, inplace=False):
    out = input * _tanh(softplus(input))
    return input.copy_(out) if inplace else out


def elu(input, alpha=1.0, inplace=False):
    # expm1 only sees non-positive values, so the unused branch never overflows
    out = where(input > 0, input, expm1(minimum(input, 0.0)) * alpha)
    return input.copy_(out) if inplace else out


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(input, inplace=False):
    out = elu(input, _SELU_ALPHA) * _SELU_SCALE
    return input.copy_(out) if inplace else out


def celu(input, alpha=1.0, inplace=False):
    out = where(input > 0, input, expm1(minimum(input, 0.0) / alpha) * alpha)
    return input.copy_(out) if inplace else out


def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""
    bx = input * beta if beta != 1 else input
    soft = log1p(exp(minimum(bx, float(threshold))))  # clamped: no inf in the unused branch
    if beta != 1:
        soft = soft / beta
    return where(bx > threshold, input, soft)


def softsign(input):
    return input / (input.abs() + 1)


def tanh(input):
    return _tanh(input)


def sigmoid(input):
    return _sigmoid(input)


def hardsigmoid(input, inplace=False):
    out = (input + 3).clamp(0.0, 6.0) / 6
    return input.copy_(out) if inplace else out


def hardswish(input, inplace=False):
    out = input * (input + 3).clamp(0.0, 6.0) / 6
    return input.copy_(out) if inplace else out


def logsigmoid(input):
    return -softplus(-input)


def tanhshrink(input):
    return input - _tanh(input)


def glu(input, dim=-1):
    a, b = input.chunk(2, dim)
    return a * _sigmoid(b)


def _softmax_dim(name, ndim, stacklevel):
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include "
                  "dim=X as an argument.", UserWarning, stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    if dim is None:
        dim = _softmax_dim("softmax", input.ndim, _stacklevel)
    if input._array.dtype.kind != "f":
        _float_input("softmax", input)
    return apply(_SOFTMAX, (input,), {"dim": dim})


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    if dim is None:
        dim = _softmax_dim("log_softmax", input.ndim, _stacklevel)
    if input._array.dtype.kind != "f":
        _float_input("log_softmax", input)
    return apply(_LOG_SOFTMAX, (input,), {"dim": dim})


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(-input, dim, _stacklevel + 1, dtype)


def softmax_decomposed(input, dim):
    if input.ndim == 0:
        return input * 0 + 1
    shifted = input - input.amax(dim, keepdim=True).detach()
    e = shifted.exp()
    return e / e.sum(dim, keepdim=True)


def log_softmax_decomposed(input, dim):
    if input.ndim == 0:
        return input * 0
    shifted = input - input.amax(dim, keepdim=True).detach()
    return shifted - shifted.exp().sum(dim, keepdim=True).log()


def softmax_backward_decomposed(grad, output, dim):
    """The fused softmax_backward kernel as primitives (its order: g*out - out*sum(g*out))."""
    if output.ndim == 0:
        return grad * 0
    gx = grad * output
    return gx - output * gx.sum(dim, keepdim=True)


def log_softmax_backward_decomposed(grad, output, dim):
    if output.ndim == 0:
        return grad * 0
    return grad - output.exp() * grad.sum(dim, keepdim=True)


def _softmax_grad(g, out, dim):
    if _first_order():
        return apply(_SOFTMAX_BACKWARD, (g, out), {"dim": dim})
    return out * (g - (g * out).sum(dim, keepdim=True))


def _log_softmax_grad(g, out, dim):
    if _first_order():
        return apply(_LOG_SOFTMAX_BACKWARD, (g, out), {"dim": dim})
    return g - out.exp() * g.sum(dim, keepdim=True)


def _gelu_grad(g, x, approximate):
    if _first_order():
        return apply(_GELU_BACKWARD, (g, x), {"approximate": approximate})
    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        t = _tanh((x + x * x * x * 0.044715) * k)
        return g * ((t + 1) * 0.5 + x * (1 - t * t) * (x * x * (3 * 0.044715) + 1) * (0.5 * k))
    cdf = (erf(x * (1 / math.sqrt(2))) + 1) * 0.5
    pdf = exp(x * x * -0.5) * (1 / math.sqrt(2 * math.pi))
    return g * (cdf + x * pdf)


defgrad("softmax", _softmax_grad)
defgrad("log_softmax", _log_softmax_grad)
defgrad("gelu", _gelu_grad)
defdecomp("softmax", softmax_decomposed)
defdecomp("log_softmax", log_softmax_decomposed)
defdecomp("softmax_backward", softmax_backward_decomposed)
defdecomp("log_softmax_backward", log_softmax_backward_decomposed)
defdecomp("gelu", gelu_decomposed)
defdecomp("gelu_backward", gelu_backward_decomposed)
for _n in ("softmax", "log_softmax", "softmin"):
    setattr(Tensor, _n, lambda self, dim=None, dtype=None, _f=globals()[_n]: _f(self, dim, 4, dtype))


# =============================================================== dropout

def _check_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _dropout_mask_apply(input, p, mask_shape, inplace):
    if p == 1.0:
        out = input * 0.0
    else:
        keep = rand(mask_shape, dtype=input.dtype, device=input.device) >= p  # counter-based stream
        out = where(keep, input * (1.0 / (1.0 - p)), 0.0)
    return input.copy_(out) if inplace else out


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability p and scale the rest by 1/(1-p); identity when not training."""
    _check_p(p)
    if not training or p == 0.0:
        return input
    return _dropout_mask_apply(input, p, tuple(input.shape), inplace)


def _channel_dropout(name, input, p, training, inplace, spatial):
    _check_p(p)
    if not training or p == 0.0:
        return input
    nd = input.ndim
    if nd not in (spatial + 1, spatial + 2):
        raise RuntimeError(f"{name}: expected a {spatial + 1}-d (unbatched) or {spatial + 2}-d (batched) "
                           f"input, got shape {tuple(input.shape)}")
    lead = tuple(input.shape[:nd - spatial])
    return _dropout_mask_apply(input, p, lead + (1,) * spatial, inplace)


def dropout1d(input, p=0.5, training=True, inplace=False):
    return _channel_dropout("dropout1d", input, p, training, inplace, 1)


def dropout2d(input, p=0.5, training=True, inplace=False):
    return _channel_dropout("dropout2d", input, p, training, inplace, 2)


# =============================================================== embedding

def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of `weight` picked by the integer `input`; the padding_idx row gets no gradient."""
    if input._array.dtype.kind not in "iu":
        raise TypeError(f"embedding: expected integer indices (Long or Int), got {input.dtype.name}")
    n = weight.shape[0]
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise ValueError(f"embedding: padding_idx {padding_idx} must be within num_embeddings ({n})")
        padding_idx = int(padding_idx) % n
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: scale_grad_by_freq and sparse gradients are not supported")
    if max_norm is not None:
        _embedding_renorm_(weight, input, max_norm, norm_type)
    if input._array.size:
        lo, hi = int(input._array.min()), int(input._array.max())
        if lo < 0 or hi >= n:
            raise IndexError(f"embedding: index {hi if hi >= n else lo} is out of range for "
                             f"{n} embeddings")
    return apply(_EMBEDDING, (weight, input), {"padding_idx": padding_idx})


def _embedding_renorm_(weight, input, max_norm, norm_type):
    from ..autograd.grad_mode import no_grad
    xp_rows = input._array.reshape(-1)
    rows = sorted(set(int(i) for i in (xp_rows.tolist() if hasattr(xp_rows, "tolist") else xp_rows)))
    with no_grad():
        w = weight._array
        for r in rows:
            norm = float((abs(w[r]) ** norm_type).sum() ** (1.0 / norm_type))
            if norm > max_norm:
                w[r] *= max_norm / (norm + 1e-7)


def embedding_decomposed(input, weight, padding_idx=None):
    out = weight.index_select(0, input.reshape(-1)).reshape(tuple(input.shape) + (weight.shape[1],))
    if padding_idx is None:
        return out
    return where((input != padding_idx).unsqueeze(-1), out, out.detach())


def _embedding_backward(g, indices, num_weights, padding_idx):
    return apply(_EMBEDDING_BACKWARD, (g, indices), {"num_weights": num_weights, "padding_idx": padding_idx})


def _embedding_double_backward(g, indices, padding_idx):
    out = apply(_EMBEDDING, (g, indices), {"padding_idx": padding_idx})
    return out if padding_idx is None else out * (indices != padding_idx).unsqueeze(-1)


defgrad("embedding", lambda g, indices, weight_shape, padding_idx:
        _embedding_backward(g, indices, weight_shape[0], padding_idx), None)
defgrad("embedding_backward", _embedding_double_backward, None)
defdecomp("embedding", lambda weight, indices, padding_idx=None: embedding_decomposed(indices, weight, padding_idx))
no_part("decomposition", "a scatter-add by index: one kernel, no primitives to fuse", ["embedding_backward"])


# =============================================================== normalisation

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the last len(normalized_shape) dims (one fused op)."""
    ns = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(int(s) for s in normalized_shape)
    if input._array.dtype.kind != "f":
        _float_input("layer_norm", input)
    return apply(_LAYER_NORM, (input, weight, bias), {"normalized_shape": ns, "eps": float(eps)})


def _ln_flat(t, ns):
    """t (shape [*, *ns]) with the normalised dims flattened into one last dim: every
    reduction is then over the last dim (which fusing backends handle); a no-op for one dim."""
    if len(ns) == 1:
        return t
    features = 1
    for s in ns:
        features *= s
    return t.reshape(tuple(t.shape[:t.ndim - len(ns)]) + (features,))


def _ln_normalized(x, eps):
    """(xhat, 1/std) of x normalised over its last dim, in the fused kernel's order of operations."""
    xc = x - x.mean(-1, keepdim=True)
    rstd = ((xc * xc).mean(-1, keepdim=True) + eps).rsqrt()
    return xc * rstd, rstd


def _ns(normalized_shape):
    return (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(normalized_shape)


def layer_norm_decomposed(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """The fused layer_norm op as primitives: keepdim reductions over the (flattened) last dim."""
    ns = _ns(normalized_shape)
    y, _ = _ln_normalized(_ln_flat(input, ns), eps)
    if weight is not None:
        y = y * _ln_flat(weight, ns)
    if bias is not None:
        y = y + _ln_flat(bias, ns)
    return y if len(ns) == 1 else y.reshape(tuple(input.shape))


def layer_norm_backward_decomposed(grad, input, weight, normalized_shape, eps=1e-5):
    """The fused layer_norm_backward kernel (d loss / d input) as primitives:
    (gy - mean(gy) - xhat * mean(gy * xhat)) * rstd with gy = grad * weight, per row."""
    ns = _ns(normalized_shape)
    xhat, rstd = _ln_normalized(_ln_flat(input, ns), eps)
    gy = _ln_flat(grad, ns)
    if weight is not None:
        gy = gy * _ln_flat(weight, ns)
    gx = (gy - gy.mean(-1, keepdim=True) - xhat * (gy * xhat).mean(-1, keepdim=True)) * rstd
    return gx if len(ns) == 1 else gx.reshape(tuple(input.shape))


def layer_norm_weight_backward_decomposed(grad, input, normalized_shape, eps=1e-5):
    """The fused layer_norm_weight_backward kernel (d loss / d weight) as primitives: the per-row
    product grad * xhat, then one sum over the leading (row) dims as the last step."""
    ns = _ns(normalized_shape)
    x = _ln_flat(input, ns)
    xhat, _ = _ln_normalized(x, eps)
    gw = _ln_flat(grad, ns) * xhat
    if gw.ndim > 1:
        features = gw.shape[-1]
        rows = 1
        for s in gw.shape[:-1]:
            rows *= s
        gw = (gw if gw.ndim == 2 else gw.reshape(rows, features)).sum(0)
    return gw if len(ns) == 1 else gw.reshape(ns)


def _layer_norm_grad(node, g):
    x = _saved_input(node, 0)
    weight = _saved_input(node, 1)
    x_edge, w_edge, b_edge = node.next
    k = len(node.attrs["normalized_shape"])
    axes = tuple(range(x.ndim - k, x.ndim))
    lead = tuple(range(x.ndim - k))
    gx = gw = gb = None
    if b_edge is not None:
        gb = g.sum(lead) if lead else g
    if _first_order():
        if x_edge is not None:
            gx = apply(_LAYER_NORM_BACKWARD, (g, x, weight), node.attrs)
        if w_edge is not None:
            gw = apply(_LAYER_NORM_WEIGHT_BACKWARD, (g, x), node.attrs)
        return gx, gw, gb
    xc = x - x.mean(axes, keepdim=True)
    rstd = ((xc * xc).mean(axes, keepdim=True) + node.attrs["eps"]).rsqrt()
    xhat = xc * rstd
    if x_edge is not None:
        gy = g * weight if weight is not None else g
        gx = (gy - gy.mean(axes, keepdim=True) - xhat * (gy * xhat).mean(axes, keepdim=True)) * rstd
    if w_edge is not None:
        gw = (g * xhat).sum(lead) if lead else g * xhat
    return gx, gw, gb


defgrad_node("layer_norm", _layer_norm_grad, saves_inputs=True)
defdecomp("layer_norm", lambda x, weight, bias, normalized_shape, eps:
          layer_norm_decomposed(x, normalized_shape, weight, bias, eps))
defdecomp("layer_norm_backward", lambda g, x, weight, normalized_shape, eps:
          layer_norm_backward_decomposed(g, x, weight, normalized_shape, eps))
defdecomp("layer_norm_weight_backward", lambda g, x, normalized_shape, eps:
          layer_norm_weight_backward_decomposed(g, x, normalized_shape, eps))


def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise each of `num_groups` channel groups of an (N, C, *) input."""
    if input.ndim < 2:
        raise RuntimeError(f"group_norm: expected an input of shape (N, C, *), got {tuple(input.shape)}")
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(f"group_norm: number of channels {c} must be divisible by num_groups {num_groups}")
    grouped = input.reshape(n, num_groups, -1)
    y = layer_norm(grouped, (grouped.shape[-1],), None, None, eps).reshape(tuple(input.shape))
    if weight is not None:
        y = y * weight.reshape(_channel_shape(input))
    if bias is not None:
        y = y + bias.reshape(_channel_shape(input))
    return y


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight over the last dims; eps defaults to the dtype's epsilon."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(ns):]) != ns:
        raise RuntimeError(f"rms_norm: expected an input of shape [*, {', '.join(map(str, ns))}], "
                           f"got {tuple(input.shape)}")
    if eps is None:
        import numpy as np
        eps = float(np.finfo(input._array.dtype).eps)
    axes = tuple(range(input.ndim - len(ns), input.ndim))
    y = input * ((input * input).mean(axes, keepdim=True) + eps).rsqrt()
    return y if weight is None else y * weight


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    """Normalise each channel of an (N, C, *) input by batch statistics (training: one fused op,
    and the running buffers are updated in place) or by the running statistics (eval)."""
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of shape (N, C, *), got {tuple(input.shape)}")
    if input._array.dtype.kind != "f":
        _float_input("batch_norm", input)
    channels = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != channels:  # checked first: no buffer is touched on error
            raise RuntimeError(f"batch_norm: {name} should contain {channels} elements not {t.numel()} "
                               f"(the input's dim 1 has {channels} channels; input shape {list(input.shape)})")
    if training:
        count = input.numel() // channels
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{list(input.shape)}")
        if running_mean is not None or running_var is not None:
            from ..autograd.grad_mode import no_grad
            with no_grad():
                stats = apply(_BATCH_NORM_STATS, (input,))
                if running_mean is not None:
                    running_mean.mul_(1 - momentum).add_(stats[0].to(running_mean.dtype) * momentum)
                if running_var is not None:
                    unbiased = stats[1] * (count / (count - 1))
                    running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype) * momentum)
        return apply(_BATCH_NORM, (input, weight, bias), {"eps": float(eps)})
    if running_mean is None or running_var is None:
        raise RuntimeError("batch_norm: running_mean and running_var are needed when training=False")
    shape = _channel_shape(input)
    scale = (running_var + eps).rsqrt()  # per-channel vectors first, then two passes over the input
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    return input * scale.reshape(shape) + shift.reshape(shape)


def batch_norm_decomposed(input, weight=None, bias=None, eps=1e-5):
    """The fused training-mode batch_norm op as primitives."""
    axes = (0,) + tuple(range(2, input.ndim))
    shape = _channel_shape(input)
    xc = input - input.mean(axes, keepdim=True)
    y = xc * ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _batch_norm_grad(node, g):
    x = _saved_input(node, 0)
    weight = _saved_input(node, 1)
    x_edge, w_edge, b_edge = node.next
    eps = node.attrs["eps"]
    axes = (0,) + tuple(range(2, x.ndim))
    gx = gw = gb = None
    if b_edge is not None:
        gb = g.sum(axes)
    if _first_order():
        if x_edge is not None:
            gx = apply(_BATCH_NORM_BACKWARD, (g, x, weight), node.attrs)
        if w_edge is not None:
            gw = apply(_BATCH_NORM_WEIGHT_BACKWARD, (g, x), node.attrs)
        return gx, gw, gb
    xc = x - x.mean(axes, keepdim=True)
    rstd = ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
    xhat = xc * rstd
    if x_edge is not None:
        gy = g * weight.reshape(_channel_shape(x)) if weight is not None else g
        gx = (gy - gy.mean(axes, keepdim=True) - xhat * (gy * xhat).mean(axes, keepdim=True)) * rstd
    if w_edge is not None:
        gw = (g * xhat).sum(axes)
    return gx, gw, gb


defgrad_node("batch_norm", _batch_norm_grad, saves_inputs=True)
defdecomp("batch_norm", batch_norm_decomposed)
no_part("decomposition", "reduces over every axis but the channel's: a kernel of its own, not a row kernel",
        ["batch_norm_backward", "batch_norm_weight_backward", "batch_norm_stats"])


def _norm(x, p, dim, eps):
    if p == 2:  # clamp the squared norm: finite gradients even for an all-zero vector
        return (x * x).sum(dim, keepdim=True).clamp_min(eps * eps).sqrt()
    return x.norm(p, dim, keepdim=True).clamp_min(eps)


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """input / max(||input||_p, eps) along dim."""
    return input / _norm(input, p, dim, eps)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    x1, x2 = _broadcast_pair(x1, x2)
    return ((x1 / _norm(x1, 2, dim, eps)) * (x2 / _norm(x2, 2, dim, eps))).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    d = x1 - x2 + eps
    return d.norm(p, -1, keepdim)


def _broadcast_pair(a, b):
    if tuple(a.shape) == tuple(b.shape):
        return a, b
    import numpy as np
    shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    return a.expand(shape), b.expand(shape)


# =============================================================== one_hot, pad

def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding along a new last dimension."""
    if tensor._array.dtype.kind not in "iu":
        raise RuntimeError("one_hot is only applicable to index tensor (an integer dtype)")
    if num_classes == -1:
        num_classes = int(tensor._array.max()) + 1 if tensor._array.size else 0
    if tensor._array.size and (int(tensor._array.min()) < 0 or int(tensor._array.max()) >= num_classes):
        raise RuntimeError(f"one_hot: class values must be in [0, {num_classes})")
    return (tensor.unsqueeze(-1) == arange(num_classes, device=tensor.device)).long()


def pad(input, pad, mode="constant", value=None):
    """Pad the last len(pad)//2 dims; pad = (last_lo, last_hi, prev_lo, prev_hi, ...).
    'constant' (negative widths crop), 'reflect', 'replicate' and 'circular'."""
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2:
        raise ValueError(f"pad: padding length must be divisible by 2, got {len(pad)}")
    if len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: padding length {len(pad)} is too large for a {input.ndim}-d input")
    if mode == "constant":
        return apply(_PAD, (input,), {"pad": pad, "value": 0.0 if value is None else value})
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode {mode!r} is not supported (constant, reflect, replicate, circular)")
    if value:
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    import numpy as np
    out = input
    for i in range(len(pad) // 2):
        dim = input.ndim - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        n = out.shape[dim]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise ValueError(f"pad: padding ({lo}, {hi}) should be less than the input size {n} "
                             f"of dimension {dim} in reflect mode")
        idx = np.arange(-lo, n + hi)
        if mode == "reflect":
            idx = np.abs(idx)
            idx = np.where(idx >= n, 2 * (n - 1) - idx, idx)
        elif mode == "replicate":
            idx = np.clip(idx, 0, n - 1)
        else:
            idx = idx % n
        out = out.index_select(dim, _E.tensor(idx, device=input.device))
    return out


defgrad("pad", lambda g, pad: apply(_PAD, (g,), {"pad": tuple(-p for p in pad), "value": 0.0}))


# =============================================================== attention

def _causal_mask(L, S, device):
    return arange(L, device=device).unsqueeze(1) >= arange(S, device=device)  # True: may attend


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(q @ k^T * scale + mask) @ v over the last two dims.

    A bool attn_mask marks the positions that may be attended (True); a float one is
    added to the scores. is_causal masks the upper triangle."""
    L, S = query.shape[-2], key.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(rep, -3)
        value = value.repeat_interleave(rep, -3)
    scores = (query * scale) @ key.transpose(-2, -1)
    if is_causal:
        if attn_mask is not None:
            raise RuntimeError("scaled_dot_product_attention: pass either attn_mask or is_causal, not both")
        attn_mask = _causal_mask(L, S, query.device)
    if attn_mask is not None:
        if attn_mask._array.dtype.kind == "b":
            scores = where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value


def _merge_masks(attn_mask, key_padding_mask, bsz, num_heads, L, S, dtype):
    """One additive float mask of shape (N, H, L, S) (or broadcastable), or None."""
    mask = None
    if attn_mask is not None:
        if attn_mask._array.dtype.kind == "b":  # MHA's bool convention: True = not allowed
            attn_mask = where(attn_mask, float("-inf"), 0.0).to(dtype)
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (L, S):
                raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                   f"{(L, S)}.")
            mask = attn_mask
        elif attn_mask.ndim == 3:
            if tuple(attn_mask.shape) != (bsz * num_heads, L, S):
                raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                   f"{(bsz * num_heads, L, S)}.")
            mask = attn_mask.reshape(bsz, num_heads, L, S)
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, S):
            raise RuntimeError(f"expected key_padding_mask of shape {(bsz, S)}, but got "
                               f"{tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask
        if kpm._array.dtype.kind == "b":
            kpm = where(kpm, float("-inf"), 0.0).to(dtype)
        kpm = kpm.reshape(bsz, 1, 1, S)
        mask = kpm if mask is None else mask + kpm
    return mask


def multi_head_attention_forward(query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight,
                                 out_proj_bias, dropout_p=0.0, training=True, key_padding_mask=None,
                                 need_weights=True, attn_mask=None, average_attn_weights=True, is_causal=False,
                                 q_proj_weight=None, k_proj_weight=None, v_proj_weight=None):
    """nn.MultiheadAttention's computation on sequence-first inputs (L, N, E) / (S, N, E).

    Returns (output (L, N, E), weights (N, L, S) averaged over heads, or (N, H, L, S), or None)."""
    L, bsz, E = query.shape
    S = key.shape[0]
    head_dim = E // num_heads
    if q_proj_weight is None:
        if query is key and key is value:  # self-attention: one projection GEMM
            q, k, v = linear(query, in_proj_weight, in_proj_bias).chunk(3, -1)
        else:
            wq, wk, wv = in_proj_weight.chunk(3, 0)
            bq, bk, bv = in_proj_bias.chunk(3, 0) if in_proj_bias is not None else (None, None, None)
            q, k, v = linear(query, wq, bq), linear(key, wk, bk), linear(value, wv, bv)
    else:
        bq, bk, bv = in_proj_bias.chunk(3, 0) if in_proj_bias is not None else (None, None, None)
        q, k, v = linear(query, q_proj_weight, bq), linear(key, k_proj_weight, bk), linear(value, v_proj_weight, bv)
    # (L, N, E) -> (N, H, L, D)
    q = q.reshape(L, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    k = k.reshape(S, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    v = v.reshape(S, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    if is_causal and attn_mask is None:
        attn_mask = ~_causal_mask(L, S, query.device)
    mask = _merge_masks(attn_mask, key_padding_mask, bsz, num_heads, L, S, q.dtype)
    scores = (q * (1.0 / math.sqrt(head_dim))) @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores + mask
    weights = softmax(scores, -1)
    if dropout_p > 0.0 and training:
        weights = dropout(weights, dropout_p)
    out = (weights @ v).permute(2, 0, 1, 3).reshape(L, bsz, E)
    out = linear(out, out_proj_weight, out_proj_bias)
    if not need_weights:
        return out, None
    return out, (weights.mean(1) if average_attn_weights else weights)


# =============================================================== losses

def _reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return ("mean" if size_average else "sum") if reduce else "none"


_REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _check_same_size(name, input, target):
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(f"{name}: using a target size ({tuple(target.shape)}) that is different to the input size "
                      f"({tuple(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", UserWarning, stacklevel=3)


def _class_dim(input):
    return 1 if input.ndim > 1 else 0


def _class_shape(input):
    """Shape that broadcasts a (C,) vector along the class dimension."""
    return (-1,) + (1,) * (input.ndim - 2) if input.ndim > 1 else (-1,)


def _index_target_shape(input):
    """The shape of class-index targets for `input`: (N, d1, ...) for (N, C, d1, ...), () for (C,)."""
    return () if input.ndim == 1 else (input.shape[0],) + tuple(input.shape[2:])


def _check_index_dtype(name, input, target):
    """Class indices are integers (PyTorch requires Long); a float target is refused, never rounded."""
    if target._array.dtype.kind not in "iu":
        raise RuntimeError(f"{name}: expected class indices of an integer dtype as target (PyTorch: scalar "
                           f"type Long), but found {target.dtype.name} of shape {list(target.shape)}"
                           + (f"; a float target holds class probabilities only when it has the input's "
                              f"shape {list(input.shape)}" if name == "cross_entropy" else ""))


def _check_targets(name, input, target, ignore_index):
    cd = _class_dim(input)
    C = input.shape[cd]
    expected = _index_target_shape(input)
    if tuple(target.shape) != expected:
        raise ValueError(f"{name}: expected target of shape {expected} for input of shape {tuple(input.shape)}, "
                         f"got {tuple(target.shape)}")
    t = target._array
    if t.size:
        bad = ((t < 0) | (t >= C)) & (t != ignore_index)
        if bool(bad.any()):
            raise IndexError(f"{name}: target {int(t[bad].reshape(-1)[0])} is out of bounds for {C} classes")
    return cd, C


def _nll_terms(input, target, weight, ignore_index):
    """Per-element -weight[t] * input[..., t, ...] and the weights weight[t] * (t != ignore_index)."""
    _check_index_dtype("nll_loss", input, target)
    cd, C = _check_targets("nll_loss", input, target, ignore_index)
    hit = target.unsqueeze(cd) == arange(C, device=input.device).reshape(_class_shape(input))
    wt = (target != ignore_index).to(input.dtype)
    if weight is not None:
        wt = where(hit, weight.reshape(_class_shape(input)), 0.0).sum(cd) * wt
    return -where(hit, input, 0.0).sum(cd) * wt, wt


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """-weight[t] * input[n, t] for class-index targets t (input holds log-probabilities)."""
    reduction = _reduction(size_average, reduce, reduction)
    loss, wt = _nll_terms(input, target, weight, ignore_index)
    if reduction == "mean":
        return loss.sum() / wt.sum()
    return _reduce(loss, reduction)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """log_softmax over dim 1 (dim 0 for an unbatched (C,) input) followed by nll_loss, or by
    -sum(target * log_softmax) for class-probability targets. Class-index targets run one fused op."""
    reduction = _reduction(size_average, reduce, reduction)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if tuple(target.shape) == tuple(input.shape):  # PyTorch's rule: the input's shape means probabilities
        if target._array.dtype.kind != "f":
            raise RuntimeError(f"cross_entropy: Expected floating point type for target with class "
                               f"probabilities, got {target.dtype.name} (a target of the input's shape "
                               f"{list(input.shape)} holds class probabilities; class indices have shape "
                               f"{list(_index_target_shape(input))})")
        if ignore_index >= 0:
            raise RuntimeError(f"cross_entropy: ignore_index is not supported for floating point target "
                               f"(class probabilities), got ignore_index={ignore_index}")
        return _cross_entropy_probs(input, target, weight, reduction, label_smoothing)
    _check_index_dtype("cross_entropy", input, target)
    if input._array.dtype.kind != "f":
        _float_input("cross_entropy", input)
    if weight is not None and weight._array.dtype is not input._array.dtype:
        weight = weight.to(input.dtype)
    return apply(_CROSS_ENTROPY, (input, target, weight),
                 {"ignore_index": int(ignore_index), "reduction": reduction,
                  "label_smoothing": float(label_smoothing)})


def _cross_entropy_probs(input, target, weight, reduction, label_smoothing):
    cd = _class_dim(input)
    C = input.shape[cd]
    logp = log_softmax(input, cd)
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / C
    terms = logp * target
    if weight is not None:
        terms = terms * weight.reshape(_class_shape(input))
    loss = -terms.sum(cd)
    if reduction == "mean":
        return loss.sum() / max(input.numel() // C, 1) if C else loss.sum()
    return _reduce(loss, reduction)


def _classes_last(input):
    """Logits with the class dim last: (C,) and (N, C) as they are, (N, C, d1, ...) moved to
    (N, d1, ..., C), whose leading dims are then the target's."""
    return input.movedim(1, -1) if input.ndim > 2 else input


def cross_entropy_decomposed(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """The fused cross_entropy op as primitives, in its order of operations: with z = x - max(x)
    and lse = log(sum(exp(z))) per row, the loss is (lse - z[t]) * w[t] * (t != ignore_index)
    (mixed with the smoothing term), z[t] picked by a one-hot compare against arange(C) --
    elementwise ops and reductions over the class dim, moved last for (N, C, d...) inputs."""
    _check_targets("cross_entropy", input, target, ignore_index)
    x = _classes_last(input)
    C = x.shape[-1]
    z = x - x.amax(-1, keepdim=True).detach()
    lse = z.exp().sum(-1).log()
    hit = target.unsqueeze(-1) == arange(C, device=input.device)
    valid = (target != ignore_index).to(input.dtype)
    wt = valid if weight is None else where(hit, weight, 0.0).sum(-1) * valid
    loss = (lse - where(hit, z, 0.0).sum(-1)) * wt       # -w[t] log p[t]
    if label_smoothing:  # -sum_c w_c log p_c
        if weight is None:
            smooth = lse * C - z.sum(-1)
        else:
            smooth = lse * weight.sum() - (z * weight).sum(-1)
        loss = loss * (1 - label_smoothing) + smooth * valid * (label_smoothing / C)
    if reduction == "mean":
        return loss.sum() / wt.sum()      # 0 / 0 = nan when every target is ignored, like the kernel
    return _reduce(loss, reduction)


def cross_entropy_backward_decomposed(grad, input, target, weight=None, ignore_index=-100, reduction="mean",
                                      label_smoothing=0.0):
    """The fused cross_entropy_backward kernel as primitives, in its order of operations:
    softmax(x) * coef - target distribution per row, scaled by the incoming gradient (divided by
    the total weight for 'mean'). Per row only elementwise ops, keepdim reductions over the class
    dim and a one-hot compare against arange(C); the mean's denominator is a sum over the targets."""
    _check_targets("cross_entropy", input, target, ignore_index)
    x = _classes_last(input)
    C = x.shape[-1]
    e = (x - x.amax(-1, keepdim=True)).exp()
    p = e / e.sum(-1, keepdim=True)
    hit = target.unsqueeze(-1) == arange(C, device=input.device)
    valid = (target != ignore_index).unsqueeze(-1).to(input.dtype)
    eps = label_smoothing
    if weight is None:
        wt = valid
        onehot = hit.to(input.dtype)
        gx = ((p - onehot * (1 - eps)) - eps / C if eps else p - onehot) * valid
    else:
        wt = where(hit, weight, 0.0).sum(-1, keepdim=True) * valid      # w[t] * valid
        if eps:
            coef = wt * (1 - eps) + valid * (weight.sum() * eps / C)
            gx = p * coef - where(hit, wt * (1 - eps), 0.0) - valid * (weight * (eps / C))
        else:
            gx = p * wt - where(hit, wt, 0.0)
    if reduction == "none":
        gx = gx * grad.unsqueeze(-1)
    elif reduction == "sum":
        gx = gx * grad
    else:
        gx = gx * (grad / wt.sum())
    return gx.movedim(-1, 1) if input.ndim > 2 else gx


def _cross_entropy_grad(g, x, target, weight, ignore_index, reduction, label_smoothing):
    """d loss / d x = scale * valid * (softmax(x) * coef - target distribution)."""
    if _first_order():
        return apply(_CROSS_ENTROPY_BACKWARD, (g, x, target, weight),
                     {"ignore_index": ignore_index, "reduction": reduction, "label_smoothing": label_smoothing})
    cd = _class_dim(x)
    C = x.shape[cd]
    cshape = _class_shape(x)
    p = softmax(x, cd)
    hit = target.unsqueeze(cd) == arange(C, device=x.device).reshape(cshape)
    valid = (target != ignore_index).unsqueeze(cd).to(x.dtype)
    eps = label_smoothing
    if weight is None:
        w_hit = hit.to(x.dtype)
        wt = valid
        smooth_coef, smooth_target = float(eps), eps / C
    else:
        wc = weight.reshape(cshape)
        w_hit = where(hit, wc, 0.0)
        wt = w_hit.sum(cd, keepdim=True) * valid
        smooth_coef, smooth_target = weight.sum() * (eps / C), wc * (eps / C)
    coef = wt * (1 - eps) + valid * smooth_coef if eps else wt
    dist = w_hit * (1 - eps) + smooth_target if eps else w_hit
    grad = p * coef - dist * valid
    if reduction == "none":
        return grad * g.unsqueeze(cd)
    if reduction == "mean":
        g = g / wt.sum()
    return grad * g


defgrad("cross_entropy", _cross_entropy_grad, None, None)
defdecomp("cross_entropy", lambda x, target, weight, **attrs: cross_entropy_decomposed(x, target, weight, **attrs))
defdecomp("cross_entropy_backward", lambda g, x, target, weight, **attrs:
          cross_entropy_backward_decomposed(g, x, target, weight, **attrs))


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _check_same_size("mse_loss", input, target)
    d = input - target
    loss = d * d
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _check_same_size("l1_loss", input, target)
    loss = (input - target).abs()
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (plain L1 for beta = 0)."""
    _check_same_size("smooth_l1_loss", input, target)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    d = (input - target).abs()
    loss = d if beta == 0 else where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    _check_same_size("huber_loss", input, target)
    d = (input - target).abs()
    loss = where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100 like PyTorch."""
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({tuple(target.shape)}) that is different to the input size "
                         f"({tuple(input.shape)}) is deprecated. Please ensure they have the same size.")
    d = input._array
    if d.size and (bool((d < 0).any()) or bool((d > 1).any())):
        raise RuntimeError("all elements of input should be between 0 and 1")
    loss = -(target * log(input).clamp_min(-100.0) + (1 - target) * log(1 - input).clamp_min(-100.0))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """sigmoid + binary cross entropy in the stable form (1-t) x + w_p (log1p(exp(-|x|)) + max(-x, 0))."""
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({tuple(target.shape)}) must be the same as input size ({tuple(input.shape)})")
    softplus_neg = log1p(exp(-input.abs())) + _relu(-input)  # log(1 + exp(-x))
    if pos_weight is not None:
        loss = (1 - target) * input + ((pos_weight - 1) * target + 1) * softplus_neg
    else:
        loss = (1 - target) * input + softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """target * (log target - input) pointwise (input holds log-probabilities)."""
    reduction = _reduction(size_average, reduce, reduction)
    if log_target:
        loss = exp(target) * (target - input)
    else:  # xlogy(t, t) - t * input, with 0 log 0 = 0
        loss = where(target > 0, target * log(where(target > 0, target, 1.0)), 0.0) - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition.",
                      UserWarning, stacklevel=2)
    return _reduce(loss, reduction)


from .functional_conv import *  # noqa: F401,F403,E402
from .functional_conv import __all__ as _conv_all  # noqa: E402
from .functional_resample import *  # noqa: F401,F403,E402
from .functional_resample import __all__ as _resample_all  # noqa: E402
from .functional_resample import GRID_SAMPLE_INTERPOLATION_MODES, GRID_SAMPLE_PADDING_MODES  # noqa: F401,E402
from .functional_sparse import embedding_bag  # noqa: F401,E402

__all__ = __all__ + [n for n in _conv_all + _resample_all if n not in __all__]


def __getattr__(name):  # a missing name: PyTorch's and not implemented yet, or a typo?
    if name.startswith("__"):
        raise AttributeError(name)
    from .._missing import missing
    raise missing("eagerc.nn.functional", "torch.nn.functional", name)
