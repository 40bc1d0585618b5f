"""Derivatives and decompositions of the fused nn ops of runtime/ops/nn.py (its docstring has
the table); eagerc.nn.functional holds the PyTorch-named functions that apply them.

Each derivative (`defgrad` / `defgrad_node`) is a formula in Tensor ops, used under
create_graph=True, and a fused `<op>_backward` kernel for plain backward. Each decomposition
into primitives (`softmax_decomposed`, ..., the backward kernels' too), attached with
`defdecomp`, is tested against the fast path; the compiler's decompose pass traces it to fuse.
"""
import math

from .. import dispatch
from ..autograd.engine import _saved_input
from ..autograd.formulas import defdecomp, defgrad, defgrad_node
from ..dispatch import apply
from ..runtime.ops import OPS, no_part
from ..runtime.ops import nn as _nn_kernels  # (declares the fused ops)
from .creation import arange
from .elementwise import erf, exp, tanh as _tanh, where

_LINEAR, _SOFTMAX, _PAD, _EMBEDDING = OPS["linear"], OPS["softmax"], OPS["pad"], OPS["embedding"]
_SOFTMAX_BACKWARD, _LOG_SOFTMAX_BACKWARD = OPS["softmax_backward"], OPS["log_softmax_backward"]
_GELU_BACKWARD, _EMBEDDING_BACKWARD = OPS["gelu_backward"], OPS["embedding_backward"]
_LAYER_NORM_BACKWARD, _LAYER_NORM_WEIGHT_BACKWARD = OPS["layer_norm_backward"], OPS["layer_norm_weight_backward"]
_BATCH_NORM_BACKWARD, _BATCH_NORM_WEIGHT_BACKWARD = OPS["batch_norm_backward"], OPS["batch_norm_weight_backward"]
_CROSS_ENTROPY_BACKWARD = OPS["cross_entropy_backward"]
_RMS_NORM_BACKWARD, _RMS_NORM_WEIGHT_BACKWARD = OPS["rms_norm_backward"], OPS["rms_norm_weight_backward"]


def _first_order():
    """True while a plain backward runs (grad mode off): derivatives may use the fused
    `*_backward` kernels. Under create_graph=True they use their Tensor-op formulas."""
    return not dispatch.grad_enabled()


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
    product grad * xhat, then one sum over the leading (row) dims as the last step (over the
    dims themselves, no reshape between: the product and the sum fuse into one kernel)."""
    ns = _ns(normalized_shape)
    x = _ln_flat(input, ns)
    xhat, _ = _ln_normalized(x, eps)
    return _leading_sum(_ln_flat(grad, ns) * xhat, ns)


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


def _rms_normalized(x, eps):
    """(xhat, 1/rms) of x over its last dim, in the fused kernel's order of operations."""
    rstd = ((x * x).mean(-1, keepdim=True) + eps).rsqrt()
    return x * rstd, rstd


def _leading_sum(t, ns):
    """t (flattened to [*, features]) summed over its leading dims, shaped like normalized_shape
    (over the dims themselves, no reshape before the sum: the product that makes t and the sum
    fuse into one kernel)."""
    if t.ndim > 1:
        t = t.sum(tuple(range(t.ndim - 1)))
    return t if len(ns) == 1 else t.reshape(ns)


def rms_norm_decomposed(input, normalized_shape, weight=None, eps=1e-6):
    """The fused rms_norm op as primitives: x * rsqrt(mean(x^2) + eps) * weight over the flat last dim."""
    ns = _ns(normalized_shape)
    y, _ = _rms_normalized(_ln_flat(input, ns), eps)
    if weight is not None:
        y = y * _ln_flat(weight, ns)
    return y if len(ns) == 1 else y.reshape(tuple(input.shape))


def rms_norm_backward_decomposed(grad, input, weight, normalized_shape, eps=1e-6):
    """d loss / d input of rms_norm: (gy - xhat * mean(gy * xhat)) * rstd with gy = grad * weight."""
    ns = _ns(normalized_shape)
    xhat, rstd = _rms_normalized(_ln_flat(input, ns), eps)
    gy = _ln_flat(grad, ns)
    if weight is not None:
        gy = gy * _ln_flat(weight, ns)
    gx = (gy - xhat * (gy * xhat).mean(-1, keepdim=True)) * rstd
    return gx if len(ns) == 1 else gx.reshape(tuple(input.shape))


def rms_norm_weight_backward_decomposed(grad, input, normalized_shape, eps=1e-6):
    """d loss / d weight of rms_norm: grad * xhat summed over the rows."""
    ns = _ns(normalized_shape)
    xhat, _ = _rms_normalized(_ln_flat(input, ns), eps)
    return _leading_sum(_ln_flat(grad, ns) * xhat, ns)


def _rms_norm_grad(node, g):
    x, weight = _saved_input(node, 0), _saved_input(node, 1)
    x_edge, w_edge = node.next
    ns, eps = node.attrs["normalized_shape"], node.attrs["eps"]
    if _first_order():
        gx = apply(_RMS_NORM_BACKWARD, (g, x, weight), node.attrs) if x_edge is not None else None
        gw = apply(_RMS_NORM_WEIGHT_BACKWARD, (g, x), node.attrs) if w_edge is not None else None
        return gx, gw
    # create_graph: the same formulas as Tensor ops (differentiable again)
    gx = rms_norm_backward_decomposed(g, x, weight, ns, eps) if x_edge is not None else None
    gw = rms_norm_weight_backward_decomposed(g, x, ns, eps) if w_edge is not None else None
    return gx, gw


defgrad_node("rms_norm", _rms_norm_grad, saves_inputs=True)
defdecomp("rms_norm", lambda x, weight, normalized_shape, eps: rms_norm_decomposed(x, normalized_shape, weight, eps))
defdecomp("rms_norm_backward", lambda g, x, weight, normalized_shape, eps:
          rms_norm_backward_decomposed(g, x, weight, normalized_shape, eps))
defdecomp("rms_norm_weight_backward", lambda g, x, normalized_shape, eps:
          rms_norm_weight_backward_decomposed(g, x, normalized_shape, eps))
defdecomp("layer_norm", lambda x, weight, bias, normalized_shape, eps:
          layer_norm_decomposed(x, normalized_shape, weight, bias, eps))
defdecomp("layer_norm_backward", lambda g, x, weight, normalized_shape, eps:
          layer_norm_backward_decomposed(g, x, weight, normalized_shape, eps))
defdecomp("layer_norm_weight_backward", lambda g, x, normalized_shape, eps:
          layer_norm_weight_backward_decomposed(g, x, normalized_shape, eps))


def channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def batch_norm_decomposed(input, weight=None, bias=None, eps=1e-5):
    """The fused training-mode batch_norm op as primitives."""
    axes = (0,) + tuple(range(2, input.ndim))
    shape = channel_shape(input)
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
        gy = g * weight.reshape(channel_shape(x)) if weight is not None else g
        gx = (gy - gy.mean(axes, keepdim=True) - xhat * (gy * xhat).mean(axes, keepdim=True)) * rstd
    if w_edge is not None:
        gw = (g * xhat).sum(axes)
    return gx, gw, gb


defgrad_node("batch_norm", _batch_norm_grad, saves_inputs=True)
defdecomp("batch_norm", batch_norm_decomposed)
no_part("decomposition", "reduces over every axis but the channel's: a kernel of its own, not a row kernel",
        ["batch_norm_backward", "batch_norm_weight_backward", "batch_norm_stats"])
defgrad("pad", lambda g, pad: apply(_PAD, (g,), {"pad": tuple(-p for p in pad), "value": 0.0}))


def reduce_loss(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def class_dim(input):
    return 1 if input.ndim > 1 else 0


def class_shape(input):
    """Shape that broadcasts a (C,) vector along the class dimension."""
    return (-1,) + (1,) * (input.ndim - 2) if input.ndim > 1 else (-1,)


def index_target_shape(input):
    """The shape of class-index targets for `input`: (N, d1, ...) for (N, C, d1, ...), () for (C,)."""
    return () if input.ndim == 1 else (input.shape[0],) + tuple(input.shape[2:])


def check_targets(name, input, target, ignore_index):
    cd = class_dim(input)
    C = input.shape[cd]
    expected = index_target_shape(input)
    if tuple(target.shape) != expected:
        raise ValueError(f"{name}: expected target of shape {expected} for input of shape {tuple(input.shape)}, "
                         f"got {tuple(target.shape)}")
    t = target._array
    if t.size:
        bad = ((t < 0) | (t >= C)) & (t != ignore_index)
        if bool(bad.any()):
            raise IndexError(f"{name}: target {int(t[bad].reshape(-1)[0])} is out of bounds for {C} classes")
    return cd, C


def _classes_last(input):
    """Logits with the class dim last: (C,) and (N, C) as they are, (N, C, d1, ...) moved to
    (N, d1, ..., C), whose leading dims are then the target's."""
    return input.movedim(1, -1) if input.ndim > 2 else input


def cross_entropy_decomposed(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """The fused cross_entropy op as primitives, in its order of operations: with z = x - max(x)
    and lse = log(sum(exp(z))) per row, the loss is (lse - z[t]) * w[t] * (t != ignore_index)
    (mixed with the smoothing term), z[t] picked by a one-hot compare against arange(C) --
    elementwise ops and reductions over the class dim, moved last for (N, C, d...) inputs."""
    check_targets("cross_entropy", input, target, ignore_index)
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
    return reduce_loss(loss, reduction)


def cross_entropy_backward_decomposed(grad, input, target, weight=None, ignore_index=-100, reduction="mean",
                                      label_smoothing=0.0):
    """The fused cross_entropy_backward kernel as primitives, in its order of operations:
    softmax(x) * coef - target distribution per row, scaled by the incoming gradient (divided by
    the total weight for 'mean'). Per row only elementwise ops, keepdim reductions over the class
    dim and a one-hot compare against arange(C); the mean's denominator is a sum over the targets."""
    check_targets("cross_entropy", input, target, ignore_index)
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
    cd = class_dim(x)
    C = x.shape[cd]
    cshape = class_shape(x)
    p = apply(_SOFTMAX, (x,), {"dim": cd})
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
