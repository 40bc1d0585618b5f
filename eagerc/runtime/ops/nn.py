"""Fused kernels for the hot neural-network composites.

Each op here is a *composite*: it could be written with primitives, and the frontend
keeps exactly that decomposition next to its fast path. The pairs are

| op (fast eager kernel here) | derivative (Tensor ops)          | decomposition (eagerc/nn/functional.py) |
|-----------------------------|----------------------------------|-----------------------------------------|
| `linear(x, weight, bias)`   | `linear` again + `sum`           | `linear_decomposed`: matmul + add        |
| `softmax(x; dim)`           | `out * (g - sum(g * out))`       | `softmax_decomposed`: amax, sub, exp, sum, div |
| `log_softmax(x; dim)`       | `g - exp(out) * sum(g)`          | `log_softmax_decomposed`                 |
| `layer_norm(x, w, b; ...)`  | the usual xhat formula           | `layer_norm_decomposed`: mean, var, rsqrt |
| `cross_entropy(x, t, w; ...)` | `softmax(x)` minus the target distribution | `cross_entropy_decomposed`: log_softmax + one-hot pick |
| `embedding(weight, idx)`    | `embedding_backward` (scatter-add) | `embedding_decomposed`: index_select    |
| `pad(x; pad, value)`        | `pad` with the negated widths (a crop) | -- (already a primitive)           |

Eager mode runs the kernel (one numpy pass instead of four to ten); the derivative
is written with Tensor ops, so higher-order gradients and traced backward graphs
work; the compiler can swap in the decomposition to fuse it with its neighbours
(tests/test_nn_functional.py checks each decomposition equals its fast path).

Kernels are xp-generic (numpy or cupy); class dimensions and normalised dimensions
are attributes, so the shape rules below work on shapes alone.
"""
from .. import dtypes
from . import declare
from .meta import Spec, fail, fmt_shape, normalize_dim


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


# ---------------------------------------------------------------- linear

def _linear(xp):
    def linear(x, weight, bias=None):
        if x.ndim > 2 and x.flags.c_contiguous:  # one big GEMM instead of a batch of small ones
            out = (x.reshape(-1, x.shape[-1]) @ weight.T).reshape(x.shape[:-1] + (weight.shape[0],))
        else:
            out = x @ weight.T
        if bias is not None:
            out += bias
        return out
    return linear


def _linear_rule(x, weight, bias=None):
    specs = (x, weight) + ((bias,) if bias is not None else ())
    if len(weight.shape) != 2:
        fail("linear", specs, f"weight must be 2-d (out_features, in_features), got {fmt_shape(weight.shape)}")
    if not x.shape or x.shape[-1] != weight.shape[1]:
        fail("linear", specs, f"mat1 and mat2 shapes cannot be multiplied: the input's last dimension must be "
             f"in_features={weight.shape[1]}")
    if bias is not None and tuple(bias.shape) not in ((weight.shape[0],), ()):
        fail("linear", specs, f"bias must have shape ({weight.shape[0]},)")
    if any(s.dtype is not x.dtype for s in specs) or not x.dtype.is_floating_point:
        fail("linear", specs, "expected floating-point input, weight and bias of one dtype", TypeError)
    return Spec(tuple(x.shape[:-1]) + (weight.shape[0],), x.dtype)


declare("linear", ("x", "weight", "bias"), _linear, _linear_rule,
        doc="x @ weight.T + bias over the last dimension of x")


# ---------------------------------------------------------------- softmax, log_softmax

def _softmax(xp):
    def softmax(x, dim):
        if x.ndim == 0:
            return xp.ones_like(x)
        if x.size == 0:
            return x.copy()
        e = x - x.max(axis=dim, keepdims=True)
        xp.exp(e, out=e)
        e /= e.sum(axis=dim, keepdims=True)
        return e
    return softmax


def _log_softmax(xp):
    def log_softmax(x, dim):
        if x.ndim == 0:
            return xp.zeros_like(x)
        if x.size == 0:
            return x.copy()
        z = x - x.max(axis=dim, keepdims=True)
        z -= xp.log(xp.exp(z).sum(axis=dim, keepdims=True))
        return z
    return log_softmax


def _softmax_rule(name):
    def rule(x, dim):
        if not x.dtype.is_floating_point:
            fail(name, (x,), f"{name} expects a floating-point input (pass dtype= to convert)", TypeError)
        normalize_dim(name, dim, len(x.shape))
        return Spec(tuple(x.shape), x.dtype)
    return rule


declare("softmax", ("x",), _softmax, _softmax_rule("softmax"), attrs=("dim",))
declare("log_softmax", ("x",), _log_softmax, _softmax_rule("log_softmax"), attrs=("dim",))


# ---------------------------------------------------------------- layer_norm

def _layer_norm(xp):
    def layer_norm(x, weight, bias, normalized_shape, eps):
        k = len(normalized_shape)
        lead = x.shape[:x.ndim - k]
        x2 = x.reshape(_numel(lead), -1) if x.size else x.reshape(_numel(lead), _numel(normalized_shape))
        mu = x2.mean(axis=1, keepdims=True)
        xc = x2 - mu
        var = (xc * xc).mean(axis=1, keepdims=True)
        var += eps
        xc *= 1.0 / xp.sqrt(var)
        y = xc.reshape(x.shape)
        if weight is not None:
            y *= weight
        if bias is not None:
            y += bias
        return y
    return layer_norm


def _layer_norm_rule(x, weight, bias, normalized_shape, eps):
    ns = tuple(normalized_shape)
    specs = tuple(s for s in (x, weight, bias) if s is not None)
    if not ns or tuple(x.shape[len(x.shape) - len(ns):]) != ns or len(x.shape) < len(ns):
        fail("layer_norm", specs, f"expected an input of shape [*, {', '.join(map(str, ns))}] "
             f"(normalized_shape={list(ns)})")
    for name, s in (("weight", weight), ("bias", bias)):
        if s is not None and tuple(s.shape) != ns:
            fail("layer_norm", specs, f"{name} must have shape {fmt_shape(ns)} (normalized_shape)")
    if any(s.dtype is not x.dtype for s in specs) or not x.dtype.is_floating_point:
        fail("layer_norm", specs, "expected floating-point input, weight and bias of one dtype", TypeError)
    return Spec(tuple(x.shape), x.dtype)


declare("layer_norm", ("x", "weight", "bias"), _layer_norm, _layer_norm_rule,
        attrs=("normalized_shape", "eps"))


# ---------------------------------------------------------------- cross_entropy (class indices)

def _cross_entropy(xp):
    def cross_entropy(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        if x.ndim == 1:  # unbatched: (C,) and a 0-d target
            out = cross_entropy(x[None], target.reshape(1), weight, ignore_index, reduction, label_smoothing)
            return out.reshape(()) if reduction == "none" else out
        C = x.shape[1]
        out_shape = (x.shape[0],) + x.shape[2:]
        if x.ndim > 2:  # classes last, then one (N*d1*..., C) problem
            x = xp.moveaxis(x, 1, -1)
        x = x.reshape(-1, C)
        t = target.reshape(-1)
        z = x - x.max(axis=1, keepdims=True)
        z -= xp.log(xp.exp(z).sum(axis=1, keepdims=True))  # log-probabilities
        valid = t != ignore_index
        t = xp.where(valid, t, 0)
        if t.size and (int(t.min()) < 0 or int(t.max()) >= C):
            bad = int(t.max()) if int(t.max()) >= C else int(t.min())
            raise IndexError(f"cross_entropy: target {bad} is out of bounds for {C} classes")
        picked = xp.take_along_axis(z, t[:, None], axis=1)[:, 0]
        wt = valid.astype(x.dtype) if weight is None else weight[t] * valid
        loss = -picked * wt
        if label_smoothing:
            smooth = -(z.sum(axis=1) if weight is None else z @ weight)
            loss = (1 - label_smoothing) * loss + (label_smoothing / C) * smooth * valid
        if reduction == "none":
            return loss.reshape(out_shape).astype(x.dtype, copy=False)
        total = loss.sum()
        if reduction == "mean":
            total = total / wt.sum()
        return xp.asarray(total, dtype=x.dtype)
    return cross_entropy


def _cross_entropy_rule(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    specs = tuple(s for s in (x, target, weight) if s is not None)
    if not x.dtype.is_floating_point:
        fail("cross_entropy", specs, "expected floating-point logits", TypeError)
    if target.dtype.is_floating_point or target.dtype is dtypes.bool:
        fail("cross_entropy", specs, "expected integer class indices as target (for class probabilities "
             "pass a float target of the input's shape to eagerc.nn.functional.cross_entropy)", TypeError)
    if not x.shape:
        fail("cross_entropy", specs, "expected an input of shape (C,), (N, C) or (N, C, d1, ...)")
    expected = () if len(x.shape) == 1 else (x.shape[0],) + tuple(x.shape[2:])
    if tuple(target.shape) != expected:
        fail("cross_entropy", specs, f"expected a target of shape {fmt_shape(expected)} for an input of "
             f"shape {fmt_shape(x.shape)}", ValueError)
    C = x.shape[1] if len(x.shape) > 1 else x.shape[0]
    if weight is not None and (tuple(weight.shape) != (C,) or weight.dtype is not x.dtype):
        fail("cross_entropy", specs, f"weight must be a ({C},) tensor of the input's dtype")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"cross_entropy: {reduction!r} is not a valid value for reduction")
    return Spec(expected if reduction == "none" else (), x.dtype)


declare("cross_entropy", ("x", "target", "weight"), _cross_entropy, _cross_entropy_rule,
        attrs=("ignore_index", "reduction", "label_smoothing"))


# ---------------------------------------------------------------- embedding

def _embedding(xp):
    def embedding(weight, indices, padding_idx=None):
        return xp.take(weight, indices, axis=0)
    return embedding


def _embedding_backward(xp):
    def embedding_backward(g, indices, num_weights, padding_idx=None):
        dim = g.shape[-1]
        out = xp.zeros((num_weights, dim), dtype=g.dtype)
        idx = indices.reshape(-1)
        g2 = g.reshape(-1, dim)
        if padding_idx is not None:
            keep = idx != padding_idx
            idx, g2 = idx[keep], g2[keep]
        xp.add.at(out, idx, g2)
        return out
    return embedding_backward


def _index_check(name, specs, indices):
    if indices.dtype.is_floating_point or indices.dtype is dtypes.bool:
        fail(name, specs, "expected integer indices (int64 or int32)", TypeError)


def _embedding_rule(weight, indices, padding_idx=None):
    _index_check("embedding", (weight, indices), indices)
    if len(weight.shape) != 2:
        fail("embedding", (weight, indices), "weight must be 2-d (num_embeddings, embedding_dim)")
    return Spec(tuple(indices.shape) + (weight.shape[1],), weight.dtype)


def _embedding_backward_rule(g, indices, num_weights, padding_idx=None):
    _index_check("embedding_backward", (g, indices), indices)
    if tuple(g.shape[:-1]) != tuple(indices.shape):
        fail("embedding_backward", (g, indices), "the gradient must have shape indices.shape + (dim,)")
    return Spec((num_weights, g.shape[-1]), g.dtype)


declare("embedding", ("weight", "indices"), _embedding, _embedding_rule, attrs=("padding_idx",))
declare("embedding_backward", ("g", "indices"), _embedding_backward, _embedding_backward_rule,
        attrs=("num_weights", "padding_idx"))


# ---------------------------------------------------------------- constant pad (negative widths crop)

def _pad_widths(ndim, pad):
    """F.pad's flat (last_lo, last_hi, prev_lo, prev_hi, ...) -> per-dimension (lo, hi)."""
    widths = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        widths[ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return widths


def _pad(xp):
    def pad(x, pad, value=0.0):
        widths = _pad_widths(x.ndim, pad)
        shape = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, widths))
        out = xp.full(shape, value, dtype=x.dtype)
        src = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for n, (lo, hi) in zip(x.shape, widths))
        dst = tuple(slice(max(lo, 0), m - max(hi, 0)) for m, (lo, hi) in zip(shape, widths))
        out[dst] = x[src]
        return out
    return pad


def _pad_rule(x, pad, value=0.0):
    if len(pad) % 2 or len(pad) // 2 > len(x.shape):
        fail("pad", (x,), f"padding {tuple(pad)} must have an even length of at most 2 * ndim = "
             f"{2 * len(x.shape)}", ValueError)
    shape = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, _pad_widths(len(x.shape), pad)))
    if any(s < 0 for s in shape):
        fail("pad", (x,), f"padding {tuple(pad)} gives a negative output size {shape}")
    return Spec(shape, x.dtype)


declare("pad", ("x",), _pad, _pad_rule, attrs=("pad", "value"))
