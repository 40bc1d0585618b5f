"""eagerc.nn.functional: PyTorch's functional neural-network API.

Most functions are compositions of eagerc ops, so they differentiate (to any order)
and trace without rules of their own. The hot composites -- linear, softmax,
log_softmax, layer_norm, batch_norm (training), cross_entropy (class indices), gelu,
embedding and constant pad -- run one fused kernel declared in
`eagerc/runtime/ops/nn.py` (its docstring has the table); here is the PyTorch-named
function that applies it (argument checks, modes, defaults). Their derivatives and
decompositions into primitives live with the ops, in eagerc/ops/nn.py.
"""
import math
import warnings

from ..runtime.dtypes import FLOATING_KINDS
from ..ops.creation import arange, rand, tensor as _tensor
from ..ops.elementwise import (exp, log, log1p, expm1, minimum, relu as _relu, sigmoid as _sigmoid,
                               tanh as _tanh, where)
from ..ops.linalg import einsum
from ..ops.nn import channel_shape, check_targets, class_dim, class_shape, index_target_shape, reduce_loss
from .._missing import module_getattr as _module_getattr
from .._tensor import Tensor
from ..dispatch import apply
from ..runtime.ops import OPS
from ..amp.autocast_mode import autocast_op, will_autocast

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
]

_LINEAR, _SOFTMAX, _LOG_SOFTMAX = OPS["linear"], OPS["softmax"], OPS["log_softmax"]
_LAYER_NORM, _CROSS_ENTROPY, _PAD = OPS["layer_norm"], OPS["cross_entropy"], OPS["pad"]
_RMS_NORM = OPS["rms_norm"]
_EMBEDDING, _GELU = OPS["embedding"], OPS["gelu"]
_BATCH_NORM, _BATCH_NORM_STATS = OPS["batch_norm"], OPS["batch_norm_stats"]


def _float_input(name, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(x).__name__}")
    if x._array.dtype.kind not in FLOATING_KINDS:
        raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype.name} "
                        "(convert with .float() first)")


# =============================================================== linear

def linear(input, weight, bias=None):
    """y = input @ weight.T + bias (one fused op; `linear_decomposed` is matmul + add)."""
    d = input._array.dtype
    if (weight._array.dtype is not d or (bias is not None and bias._array.dtype is not d) or d.kind not in FLOATING_KINDS) \
            and not will_autocast("linear", input):  # autocast casts them to one dtype in apply
        raise RuntimeError(f"linear: expected input, weight and bias of one floating dtype, got "
                           f"{input.dtype.name}, {weight.dtype.name}"
                           f"{'' if bias is None else ', ' + bias.dtype.name}")
    return apply(_LINEAR, (input, weight, bias))


def bilinear(input1, input2, weight, bias=None):
    """y_k = x1 @ W_k @ x2 + b_k, weight of shape (out, in1, in2)."""
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
    if input._array.dtype.kind not in FLOATING_KINDS:
        _float_input("gelu", input)
    return apply(_GELU, (input,), {"approximate": approximate})


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


@autocast_op("softplus")
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
    if input._array.dtype.kind not in FLOATING_KINDS:
        _float_input("softmax", input)
    return apply(_SOFTMAX, (input,), {"dim": dim})


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    if dim is None:
        dim = _softmax_dim("log_softmax", input.ndim, _stacklevel)
    if input._array.dtype.kind not in FLOATING_KINDS:
        _float_input("log_softmax", input)
    return apply(_LOG_SOFTMAX, (input,), {"dim": dim})


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(-input, dim, _stacklevel + 1, dtype)


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


# =============================================================== normalisation

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the last len(normalized_shape) dims (one fused op)."""
    ns = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(int(s) for s in normalized_shape)
    if input._array.dtype.kind not in FLOATING_KINDS:
        _float_input("layer_norm", input)
    return apply(_LAYER_NORM, (input, weight, bias), {"normalized_shape": ns, "eps": float(eps)})


@autocast_op("group_norm")
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
        y = y * weight.reshape(channel_shape(input))
    if bias is not None:
        y = y + bias.reshape(channel_shape(input))
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
    if input._array.dtype.kind in FLOATING_KINDS and (weight is None or weight.dtype == input.dtype):
        return apply(_RMS_NORM, (input, weight), {"normalized_shape": ns, "eps": float(eps)})   # one fused op
    # a weight of another dtype (promoted) or an integer input (refused by the ops): the composition
    axes = tuple(range(input.ndim - len(ns), input.ndim))
    y = input * ((input * input).mean(axes, keepdim=True) + eps).rsqrt()
    return y if weight is None else y * weight


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    """Normalise each channel of an (N, C, *) input by batch statistics (training: one fused op,
    and the running buffers are updated in place) or by the running statistics (eval)."""
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of shape (N, C, *), got {tuple(input.shape)}")
    if input._array.dtype.kind not in FLOATING_KINDS:
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
    shape = channel_shape(input)
    scale = (running_var + eps).rsqrt()  # per-channel vectors first, then two passes over the input
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    return input * scale.reshape(shape) + shift.reshape(shape)


def _norm(x, p, dim, eps):
    if p == 2:  # clamp the squared norm: finite gradients even for an all-zero vector
        return (x * x).sum(dim, keepdim=True).clamp_min(eps * eps).sqrt()
    return x.norm(p, dim, keepdim=True).clamp_min(eps)


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """input / max(||input||_p, eps) along dim."""
    return input / _norm(input, p, dim, eps)


@autocast_op("cosine_similarity")
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
        out = out.index_select(dim, _tensor(idx, device=input.device))
    return out


# =============================================================== attention

def _causal_mask(L, S, device):
    return arange(L, device=device).unsqueeze(1) >= arange(S, device=device)  # True: may attend


@autocast_op("scaled_dot_product_attention")
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


def _check_same_size(name, input, target):
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(f"{name}: using a target size ({tuple(target.shape)}) that is different to the input size "
                      f"({tuple(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", UserWarning, stacklevel=3)


def _check_index_dtype(name, input, target):
    """Class indices are integers (PyTorch requires Long); a float target is refused, never rounded."""
    if target._array.dtype.kind not in "iu":
        raise RuntimeError(f"{name}: expected class indices of an integer dtype as target (PyTorch: scalar "
                           f"type Long), but found {target.dtype.name} of shape {list(target.shape)}"
                           + (f"; a float target holds class probabilities only when it has the input's "
                              f"shape {list(input.shape)}" if name == "cross_entropy" else ""))


def _nll_terms(input, target, weight, ignore_index):
    """Per-element -weight[t] * input[..., t, ...] and the weights weight[t] * (t != ignore_index)."""
    _check_index_dtype("nll_loss", input, target)
    cd, C = check_targets("nll_loss", input, target, ignore_index)
    hit = target.unsqueeze(cd) == arange(C, device=input.device).reshape(class_shape(input))
    wt = (target != ignore_index).to(input.dtype)
    if weight is not None:
        wt = where(hit, weight.reshape(class_shape(input)), 0.0).sum(cd) * wt
    return -where(hit, input, 0.0).sum(cd) * wt, wt


@autocast_op("nll_loss")
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """-weight[t] * input[n, t] for class-index targets t (input holds log-probabilities)."""
    reduction = _reduction(size_average, reduce, reduction)
    loss, wt = _nll_terms(input, target, weight, ignore_index)
    if reduction == "mean":
        return loss.sum() / wt.sum()
    return reduce_loss(loss, reduction)


@autocast_op("cross_entropy")
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
        if target._array.dtype.kind not in FLOATING_KINDS:
            raise RuntimeError(f"cross_entropy: Expected floating point type for target with class "
                               f"probabilities, got {target.dtype.name} (a target of the input's shape "
                               f"{list(input.shape)} holds class probabilities; class indices have shape "
                               f"{list(index_target_shape(input))})")
        if ignore_index >= 0:
            raise RuntimeError(f"cross_entropy: ignore_index is not supported for floating point target "
                               f"(class probabilities), got ignore_index={ignore_index}")
        return _cross_entropy_probs(input, target, weight, reduction, label_smoothing)
    _check_index_dtype("cross_entropy", input, target)
    if input._array.dtype.kind not in FLOATING_KINDS:
        _float_input("cross_entropy", input)
    if weight is not None and weight._array.dtype is not input._array.dtype:
        weight = weight.to(input.dtype)
    return apply(_CROSS_ENTROPY, (input, target, weight),
                 {"ignore_index": int(ignore_index), "reduction": reduction,
                  "label_smoothing": float(label_smoothing)})


def _cross_entropy_probs(input, target, weight, reduction, label_smoothing):
    cd = class_dim(input)
    C = input.shape[cd]
    logp = log_softmax(input, cd)
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / C
    terms = logp * target
    if weight is not None:
        terms = terms * weight.reshape(class_shape(input))
    loss = -terms.sum(cd)
    if reduction == "mean":
        return loss.sum() / max(input.numel() // C, 1) if C else loss.sum()
    return reduce_loss(loss, reduction)


@autocast_op("mse_loss")
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _check_same_size("mse_loss", input, target)
    d = input - target
    loss = d * d
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, _reduction(size_average, reduce, reduction))


@autocast_op("l1_loss")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _check_same_size("l1_loss", input, target)
    loss = (input - target).abs()
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, _reduction(size_average, reduce, reduction))


@autocast_op("smooth_l1_loss")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (plain L1 for beta = 0)."""
    _check_same_size("smooth_l1_loss", input, target)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    d = (input - target).abs()
    loss = d if beta == 0 else where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    return reduce_loss(loss, _reduction(size_average, reduce, reduction))


@autocast_op("huber_loss")
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    _check_same_size("huber_loss", input, target)
    d = (input - target).abs()
    loss = where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, reduction)


@autocast_op("binary_cross_entropy")
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
    return reduce_loss(loss, _reduction(size_average, reduce, reduction))


@autocast_op("binary_cross_entropy_with_logits")
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
    return reduce_loss(loss, _reduction(size_average, reduce, reduction))


@autocast_op("kl_div")
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
    return reduce_loss(loss, reduction)


from .functional_conv import *  # noqa: F401,F403,E402
from .functional_conv import __all__ as _conv_all  # noqa: E402
from .functional_resample import *  # noqa: F401,F403,E402
from .functional_resample import __all__ as _resample_all  # noqa: E402
from .functional_resample import GRID_SAMPLE_INTERPOLATION_MODES, GRID_SAMPLE_PADDING_MODES  # noqa: F401,E402
from .functional_sparse import embedding_bag  # noqa: F401,E402

__all__ = __all__ + [n for n in _conv_all + _resample_all if n not in __all__]


__getattr__ = _module_getattr("eagerc.nn.functional", "torch.nn.functional")  # PyTorch's, or a typo?
