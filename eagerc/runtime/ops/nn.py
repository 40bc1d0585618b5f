"""Fused kernels for the hot neural-network composites.

Each op here is a *composite*: it could be written with primitives, and the frontend
keeps exactly that decomposition next to its fast path. The pairs are

| op (fast eager kernel here)   | derivative (eagerc/ops/nn.py)                | decomposition (same file)      |
|-------------------------------|----------------------------------------------|--------------------------------|
| `linear(x, weight, bias)`     | `linear` again (g @ W, g.T @ x) + `sum`      | `linear_decomposed`            |
| `softmax(x; dim)`             | `out * (g - sum(g * out))`                   | `softmax_decomposed`           |
| `log_softmax(x; dim)`         | `g - exp(out) * sum(g)`                      | `log_softmax_decomposed`       |
| `layer_norm(x, w, b; ...)`    | the xhat formula                             | `layer_norm_decomposed`        |
| `rms_norm(x, w; ...)`         | the xhat formula without the mean            | `rms_norm_decomposed`          |
| `batch_norm(x, w, b; eps)`    | the xhat formula over (N, *) per channel     | `batch_norm_decomposed`        |
| `cross_entropy(x, t, w; ...)` | `softmax(x) * coef - target distribution`    | `cross_entropy_decomposed`     |
| `gelu(x; approximate)`        | `g * (Phi(x) + x phi(x))` (or the tanh form) | `gelu_decomposed`              |
| `embedding(weight, idx)`      | `embedding_backward` (a scatter-add)         | `embedding_decomposed`         |
| `pad(x; pad, value)`          | `pad` with negated widths (a crop)           | -- (a primitive itself)        |
| `lstm_cell(xg, hg, c)`        | `lstm_cell_backward` (ops/rnn.py)            | `lstm_cell_decomposed` (same)  |
| `gru_cell(xg, hg, h)`         | `gru_cell_backward` (ops/rnn.py)             | `gru_cell_decomposed` (same)   |

Each derivative exists twice, and both are tested against each other and against
finite differences: the formula written with Tensor ops (used under
`create_graph=True`, so second derivatives work), and for plain first-order
backward one fused kernel declared here, `<op>_backward` (softmax_backward,
log_softmax_backward, layer_norm_backward + layer_norm_weight_backward,
rms_norm_backward + rms_norm_weight_backward,
batch_norm_backward + batch_norm_weight_backward,
cross_entropy_backward, gelu_backward, embedding_backward, lstm_cell_backward,
gru_cell_backward), the way PyTorch has
`_softmax_backward_data` or `nll_loss_backward`. Backward kernels are ops like any
other: the tracer records them when it watches `loss.backward()`.

Eager mode runs the kernel (one numpy pass instead of four to ten); the compiler can
swap in the decomposition to fuse it with its neighbours (tests/test_nn_functional.py
checks each decomposition equals its fast path, values and gradients).

Kernels are xp-generic (numpy or cupy); class dimensions and normalised dimensions
are attributes, so the shape rules below work on shapes alone.
"""
import numpy as np

from ...runtime import dtypes
from ..kernels import eager as c_rows, rows as c_row_kernels
from . import NORMALISATION, Flops, declare
from .meta import Spec, fail, fmt_shape, normalize_dim
from .linalg import array_matmul
from .reduction import array_mean, array_sum


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


# ---------------------------------------------------------------- linear

FEW_ROWS = 64   # linear of a 2-d input of at most this many rows computes (weight @ x.T).T


def _linear(xp):
    def linear(x, weight, bias=None):
        if x.ndim > 2 and x.flags.c_contiguous:  # one big GEMM instead of a batch of small ones
            out = (x.reshape(-1, x.shape[-1]) @ weight.T).reshape(x.shape[:-1] + (weight.shape[0],))
        elif x.ndim == 2 and x.shape[0] <= FEW_ROWS and weight.flags.c_contiguous:
            # OpenBLAS is several times slower on x @ W.T than on W @ x.T for a few rows; the
            # result is the transpose of a C-contiguous product (same values, F-ordered)
            out = (weight @ x.T).T
        else:
            out = x @ weight.T
        if bias is not None:
            out += bias
        return out if out.dtype == x.dtype else out.astype(x.dtype)   # bfloat16: float32, rounded once
    # what the numpy backend relies on when it hands a 2-d x of more rows a weight whose transpose
    # is C-contiguous (backends/numpy_backend.py, _c_rhs): that product is x @ weight.T; and what
    # a program's plan relies on when it writes that product into a buffer (runtime/bind.py)
    linear.few_rows = FEW_ROWS
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


# x @ weight.T + bias over the last dimension of x; 2 x multiply-accumulates
declare("linear", ("x", "weight", "bias"), _linear, _linear_rule, kind="composite",
        flops=Flops("matmul-like", lambda out, ins, attrs: 2 * _numel(out) * (ins[1][-1] if ins[1] else 1)))


# ---------------------------------------------------------------- generated C row kernels

def _on_c_rows(op, numpy_kernel, rows_of):
    """The cpu kernel of a row composite: the generated C kernel (runtime/kernels/eager.py) when
    `rows_of(*args, **attrs)` gives (inputs, cols, variant) -- the C-contiguous arrays the kernel
    reads, in its load order, the first one shaped like the result -- and c_rows.use() says
    the array pays; else (small, strided, float16, a dim other than the last, no compiler,
    $EAGERC_EAGER_KERNELS=0) the numpy kernel."""
    def kernel(*args, **attrs):
        if c_rows.use(op, args[0]):
            plan = rows_of(*args, **attrs)
            if plan is not None:
                inputs, cols, variant = plan
                k = c_rows.row_kernel(op, c_rows.NAMES[args[0].dtype], cols, *variant)
                if k is not None:
                    out = np.empty(inputs[0].shape, inputs[0].dtype)
                    k(*inputs, out, rows=out.size // cols)
                    return out
        return numpy_kernel(*args, **attrs)
    kernel.c_rows = (op, rows_of)   # what a program's plan binds once (runtime/bind.py)
    return kernel


def _same_layout(arrays):
    """Are these C-contiguous arrays of the first one's dtype (what a row kernel reads)?"""
    d = arrays[0].dtype
    return all(a.dtype == d and a.flags.c_contiguous for a in arrays)


def _last_dim_rows(*arrays, dim):
    """(arrays, cols, ()) when the op works along the last dim of C-contiguous arrays."""
    x = arrays[0]
    if dim not in (-1, x.ndim - 1) or not _same_layout(arrays):
        return None
    return arrays, x.shape[-1], ()


def _c_rows_kernel(op, impl, rows_of):
    """impl for a declaration: the C row kernel in front of numpy's, cupy's kernel unchanged."""
    def for_xp(xp):
        return _on_c_rows(op, impl(xp), rows_of) if xp is np else impl(xp)
    return for_xp


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


def _softmax_backward(xp):
    def softmax_backward(g, out, dim):
        if not out.ndim:  # softmax of a 0-d tensor is the constant 1
            return xp.zeros_like(g)
        gx = g * out
        gx -= out * gx.sum(axis=dim, keepdims=True)
        return gx
    return softmax_backward


def _log_softmax_backward(xp):
    def log_softmax_backward(g, out, dim):
        if not out.ndim:
            return xp.zeros_like(g)
        return g - xp.exp(out) * g.sum(axis=dim, keepdims=True)
    return log_softmax_backward


def _softmax_backward_rule(g, out, dim):
    if tuple(g.shape) != tuple(out.shape) or g.dtype is not out.dtype:
        fail("softmax_backward", (g, out), "the gradient and the output must have one shape and dtype")
    return Spec(tuple(out.shape), out.dtype)


# computed in float32 for bfloat16, as PyTorch does (the opmath trait)
_COMPOSITE = dict(kind="composite", flops=NORMALISATION, opmath=True)   # max/mean, subtract, exp or square, sum, scale
_BACKWARD = dict(kind="composite", differentiable=False, opmath=True)
_ROWS = dict(softmax=lambda x, dim: _last_dim_rows(x, dim=dim), log_softmax=lambda x, dim: _last_dim_rows(x, dim=dim),
             softmax_backward=lambda g, out, dim: _last_dim_rows(g, out, dim=dim),
             log_softmax_backward=lambda g, out, dim: _last_dim_rows(g, out, dim=dim))
declare("softmax", ("x",), _c_rows_kernel("softmax", _softmax, _ROWS["softmax"]), _softmax_rule("softmax"),
        attrs=("dim",), **_COMPOSITE)
declare("log_softmax", ("x",), _c_rows_kernel("log_softmax", _log_softmax, _ROWS["log_softmax"]),
        _softmax_rule("log_softmax"), attrs=("dim",), **_COMPOSITE)
declare("softmax_backward", ("g", "out"), _c_rows_kernel("softmax_backward", _softmax_backward,
                                                         _ROWS["softmax_backward"]),
        _softmax_backward_rule, attrs=("dim",), **_BACKWARD)
declare("log_softmax_backward", ("g", "out"), _c_rows_kernel("log_softmax_backward", _log_softmax_backward,
                                                             _ROWS["log_softmax_backward"]),
        _softmax_backward_rule, attrs=("dim",), **_BACKWARD)


# ---------------------------------------------------------------- layer_norm

def _normalized(xp, x, normalized_shape, eps):
    """x as (rows, features), normalised per row, and 1/std per row."""
    x2 = x.reshape(-1, _numel(normalized_shape)) if x.size else x.reshape(0, _numel(normalized_shape))
    xc = x2 - array_mean(x2, 1, True)
    rstd = 1.0 / xp.sqrt(array_mean(xc * xc, 1, True) + eps)
    xc *= rstd
    return xc, rstd


def _layer_norm(xp):
    def layer_norm(x, weight, bias, normalized_shape, eps):
        y = _normalized(xp, x, normalized_shape, eps)[0].reshape(x.shape)
        if weight is not None:
            y *= weight
        if bias is not None:
            y += bias
        return y
    return layer_norm


def _layer_norm_rule(x, weight, bias, normalized_shape, eps, op="layer_norm"):
    ns = tuple(normalized_shape)
    specs = tuple(s for s in (x, weight, bias) if s is not None)
    if not ns or tuple(x.shape[len(x.shape) - len(ns):]) != ns or len(x.shape) < len(ns):
        fail(op, specs, f"expected an input of shape [*, {', '.join(map(str, ns))}] "
             f"(normalized_shape={list(ns)})")
    for name, s in (("weight", weight), ("bias", bias)):
        if s is not None and tuple(s.shape) != ns:
            fail(op, specs, f"{name} must have shape {fmt_shape(ns)} (normalized_shape)")
    if any(s.dtype is not x.dtype for s in specs) or not x.dtype.is_floating_point:
        fail(op, specs, "expected floating-point input, weight and bias of one dtype", TypeError)
    return Spec(tuple(x.shape), x.dtype)


def _norm_backward(normalized, center):
    """impl of layer_norm's (center: minus the mean of gy too) or rms_norm's input gradient:
    (gy [- mean(gy)] - xhat * mean(gy * xhat)) * rstd with gy = g * weight, per row."""
    def impl(xp):
        def norm_backward(g, x, weight, normalized_shape, eps):
            xhat, rstd = normalized(xp, x, normalized_shape, eps)
            gy = g.reshape(xhat.shape)
            if weight is not None:
                gy = gy * weight.reshape(1, -1)
            t = xhat * array_mean(gy * xhat, 1, True)
            if center:
                gx = gy - array_mean(gy, 1, True)
                gx -= t
            else:
                gx = gy - t
            gx *= rstd
            return gx.reshape(x.shape)
        return norm_backward
    return impl


def _norm_weight_backward_c(g, x, normalized_shape, eps, center):
    """layer_norm's (center) or rms_norm's weight gradient by one C pass per row (column sums in
    double: runtime/kernels/rows.py), or None where numpy runs."""
    if not (type(x) is np.ndarray and c_rows.use("norm_weight_backward", x) and _same_layout((x, g))):
        return None
    k = c_row_kernels.kernel("norm_weight_backward", c_rows.NAMES[x.dtype])
    if k is None:
        return None
    cols = _numel(normalized_shape)
    gw = np.empty(cols, x.dtype)
    k(g.ctypes.data, x.ctypes.data, gw.ctypes.data, x.size // cols, cols, int(center), float(eps))
    return gw.reshape(tuple(normalized_shape))


def _norm_weight_backward(normalized, center):
    """impl of layer_norm's (center) or rms_norm's weight gradient: g * xhat summed over the rows."""
    def impl(xp):
        def norm_weight_backward(g, x, normalized_shape, eps):
            gw = _norm_weight_backward_c(g, x, normalized_shape, eps, center)
            if gw is not None:
                return gw
            xhat, _ = normalized(xp, x, normalized_shape, eps)
            xhat *= g.reshape(xhat.shape)
            return array_sum(xhat, 0).reshape(tuple(normalized_shape))
        return norm_weight_backward
    return impl


def _layer_norm_backward_rule(g, x, weight, normalized_shape, eps):
    _layer_norm_rule(x, weight, None, normalized_shape, eps)
    if tuple(g.shape) != tuple(x.shape):
        fail("layer_norm_backward", (g, x), "the gradient must have the input's shape")
    return Spec(tuple(x.shape), x.dtype)


def _layer_norm_weight_backward_rule(g, x, normalized_shape, eps):
    _layer_norm_backward_rule(g, x, None, normalized_shape, eps)
    return Spec(tuple(normalized_shape), x.dtype)


def _layer_norm_rows(x, weight, bias, normalized_shape, eps):
    inputs = tuple(a for a in (x, weight, bias) if a is not None)
    if not _same_layout(inputs):
        return None
    return inputs, _numel(normalized_shape), (weight is not None, bias is not None, float(eps))


def _layer_norm_backward_rows(g, x, weight, normalized_shape, eps):
    inputs = tuple(a for a in (g, x, weight) if a is not None)
    if not _same_layout(inputs):
        return None
    return inputs, _numel(normalized_shape), (weight is not None, float(eps))


declare("layer_norm", ("x", "weight", "bias"), _c_rows_kernel("layer_norm", _layer_norm, _layer_norm_rows),
        _layer_norm_rule, attrs=("normalized_shape", "eps"), **_COMPOSITE)
declare("layer_norm_backward", ("g", "x", "weight"),
        _c_rows_kernel("layer_norm_backward", _norm_backward(_normalized, True), _layer_norm_backward_rows),
        _layer_norm_backward_rule, attrs=("normalized_shape", "eps"), **_BACKWARD)
declare("layer_norm_weight_backward", ("g", "x"), _norm_weight_backward(_normalized, True),
        _layer_norm_weight_backward_rule,
        attrs=("normalized_shape", "eps"), **_BACKWARD)


# ---------------------------------------------------------------- rms_norm

def _rms_normalized(xp, x, normalized_shape, eps):
    """x as (rows, features) times 1/sqrt(mean(x^2) + eps) per row, and that factor: the steps
    (and bits) of the Tensor-op composition F.rms_norm used before this op existed."""
    x2 = x.reshape(-1, _numel(normalized_shape)) if x.size else x.reshape(0, _numel(normalized_shape))
    ms = array_mean(x2 * x2, 1, True)
    ms += eps
    rstd = xp.reciprocal(xp.sqrt(ms, out=ms), out=ms)
    return x2 * rstd, rstd


def _rms_norm(xp):
    def rms_norm(x, weight, normalized_shape, eps):
        y = _rms_normalized(xp, x, normalized_shape, eps)[0]
        if weight is not None:
            y *= weight.reshape(-1)
        return y.reshape(x.shape)
    return rms_norm


def _rms_norm_rule(x, weight, normalized_shape, eps):
    return _layer_norm_rule(x, weight, None, normalized_shape, eps, op="rms_norm")


def _rms_norm_backward_rule(g, x, weight, normalized_shape, eps):
    _layer_norm_rule(x, weight, None, normalized_shape, eps, op="rms_norm_backward")
    if tuple(g.shape) != tuple(x.shape) or g.dtype is not x.dtype:
        fail("rms_norm_backward", (g, x), "the gradient must have the input's shape and dtype")
    return Spec(tuple(x.shape), x.dtype)


def _rms_norm_weight_backward_rule(g, x, normalized_shape, eps):
    _rms_norm_backward_rule(g, x, None, normalized_shape, eps)
    return Spec(tuple(normalized_shape), x.dtype)


def _rms_norm_rows(x, weight, normalized_shape, eps):
    inputs = tuple(a for a in (x, weight) if a is not None)
    if not _same_layout(inputs):
        return None
    return inputs, _numel(normalized_shape), (weight is not None, float(eps))


# x / sqrt(mean(x^2) + eps) * weight over the normalised (last) dims
declare("rms_norm", ("x", "weight"), _c_rows_kernel("rms_norm", _rms_norm, _rms_norm_rows), _rms_norm_rule,
        attrs=("normalized_shape", "eps"), **_COMPOSITE)
declare("rms_norm_backward", ("g", "x", "weight"),
        _c_rows_kernel("rms_norm_backward", _norm_backward(_rms_normalized, False), _layer_norm_backward_rows),
        _rms_norm_backward_rule, attrs=("normalized_shape", "eps"), **_BACKWARD)
declare("rms_norm_weight_backward", ("g", "x"), _norm_weight_backward(_rms_normalized, False),
        _rms_norm_weight_backward_rule,
        attrs=("normalized_shape", "eps"), **_BACKWARD)


# ---------------------------------------------------------------- batch_norm (training: batch statistics)

def _bn_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _bn_shape(x):
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _bn_normalized(xp, x, eps):
    axes = _bn_axes(x)
    xc = x - array_mean(x, axes, True)
    rstd = 1.0 / xp.sqrt(array_mean(xc * xc, axes, True) + eps)
    xc *= rstd
    return xc, rstd


def _batch_norm(xp):
    def batch_norm(x, weight, bias, eps):
        y, _ = _bn_normalized(xp, x, eps)
        if weight is not None:
            y *= weight.reshape(_bn_shape(x))
        if bias is not None:
            y += bias.reshape(_bn_shape(x))
        return y
    return batch_norm


def _batch_norm_backward(xp):
    def batch_norm_backward(g, x, weight, eps):
        axes = _bn_axes(x)
        xhat, rstd = _bn_normalized(xp, x, eps)
        gy = g * weight.reshape(_bn_shape(x)) if weight is not None else g
        gx = gy - array_mean(gy, axes, True)
        gx -= xhat * array_mean(gy * xhat, axes, True)
        gx *= rstd
        return gx
    return batch_norm_backward


def _batch_norm_weight_backward(xp):
    def batch_norm_weight_backward(g, x, eps):
        xhat, _ = _bn_normalized(xp, x, eps)
        xhat *= g
        return array_sum(xhat, _bn_axes(x))
    return batch_norm_weight_backward


def _batch_norm_stats(xp):
    def batch_norm_stats(x):
        axes = _bn_axes(x)
        mean = array_mean(x, axes)
        xc = x - mean.reshape(_bn_shape(x))
        return xp.stack([mean, array_mean(xc * xc, axes)])
    return batch_norm_stats


def _bn_check(name, x, *specs):
    specs = (x,) + tuple(s for s in specs if s is not None)
    if len(x.shape) < 2:
        fail(name, specs, "expected an input of shape (N, C, *)")
    for s in specs[1:]:
        if tuple(s.shape) == (x.shape[1],) or tuple(s.shape) == tuple(x.shape):
            continue
        fail(name, specs, f"per-channel tensors must have shape ({x.shape[1]},)")
    if any(s.dtype is not x.dtype for s in specs) or not x.dtype.is_floating_point:
        fail(name, specs, "expected floating-point tensors of one dtype", TypeError)


def _batch_norm_rule(x, weight, bias, eps):
    _bn_check("batch_norm", x, weight, bias)
    return Spec(tuple(x.shape), x.dtype)


def _batch_norm_backward_rule(g, x, weight, eps):
    _bn_check("batch_norm_backward", x, g, weight)
    return Spec(tuple(x.shape), x.dtype)


def _batch_norm_weight_backward_rule(g, x, eps):
    _bn_check("batch_norm_weight_backward", x, g)
    return Spec((x.shape[1],), x.dtype)


def _batch_norm_stats_rule(x):
    _bn_check("batch_norm_stats", x)
    return Spec((2, x.shape[1]), x.dtype)


# normalise each channel (dim 1) by the batch's mean and biased variance, then weight * x + bias
declare("batch_norm", ("x", "weight", "bias"), _batch_norm, _batch_norm_rule, attrs=("eps",), **_COMPOSITE)
declare("batch_norm_backward", ("g", "x", "weight"), _batch_norm_backward, _batch_norm_backward_rule,
        attrs=("eps",), **_BACKWARD)
declare("batch_norm_weight_backward", ("g", "x"), _batch_norm_weight_backward, _batch_norm_weight_backward_rule,
        attrs=("eps",), **_BACKWARD)
# per-channel [mean, biased variance] as a (2, C) array (for the running statistics)
declare("batch_norm_stats", ("x",), _batch_norm_stats, _batch_norm_stats_rule, **_BACKWARD)


# ---------------------------------------------------------------- gelu

_SQRT_HALF = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT_2PI = 0.3989422804014327


def _erf_for(xp, dtype):
    """erf for arrays of `dtype`: scipy's (correctly rounded to float64) for float64,
    and for float32/float16 on numpy the Abramowitz-Stegun 7.1.26 rational formula
    (|error| < 1.5e-7, below float32's resolution near 1; PyTorch's vectorised CPU
    erf uses the same formula) -- about 8x faster than scipy's float32 erf."""
    from .elementwise import _erf
    if xp.__name__ != "numpy" or dtype == "float64":
        return _erf(xp)

    def erf(x):
        a = xp.abs(x)
        t = a * 0.3275911
        t += 1.0
        xp.reciprocal(t, out=t)
        r = t * 1.061405429
        for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
            r += c
            r *= t
        a *= a
        xp.negative(a, out=a)
        xp.exp(a, out=a)
        r *= a
        xp.subtract(1.0, r, out=r)
        return xp.copysign(r, x, out=r)
    return erf


def _gelu(xp):
    def gelu(x, approximate="none"):
        shape = x.shape
        x = x.reshape(-1)  # 1-d, so in-place ufuncs work for 0-d inputs too
        if approximate == "tanh":
            inner = x * x
            inner *= 0.044715
            inner += 1.0
            inner *= x * _SQRT_2_OVER_PI
            y = xp.tanh(inner, out=inner)
        else:
            y = _erf_for(xp, x.dtype.name)(x * _SQRT_HALF)
        y += 1.0
        y *= x
        y *= 0.5
        return y.astype(x.dtype, copy=False).reshape(shape)
    return gelu


def _gelu_backward(xp):
    def gelu_backward(g, x, approximate="none"):
        shape = x.shape
        x, g = x.reshape(-1), g.reshape(-1)
        if approximate == "tanh":
            x2 = x * x
            t = xp.tanh(_SQRT_2_OVER_PI * x * (1 + 0.044715 * x2))
            d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x2)
        else:  # Phi(x) + x phi(x)
            d = _erf_for(xp, x.dtype.name)(x * _SQRT_HALF)
            d += 1.0
            d *= 0.5
            pdf = x * x
            pdf *= -0.5
            xp.exp(pdf, out=pdf)
            pdf *= x
            pdf *= _INV_SQRT_2PI
            d += pdf
        d *= g
        return d.astype(x.dtype, copy=False).reshape(shape)
    return gelu_backward


def _gelu_rule(x, approximate="none"):
    if not x.dtype.is_floating_point:
        fail("gelu", (x,), "expected a floating-point input", TypeError)
    if approximate not in ("none", "tanh"):
        fail("gelu", (x,), f"approximate must be 'none' or 'tanh', got {approximate!r}", ValueError)
    return Spec(tuple(x.shape), x.dtype)


def _gelu_backward_rule(g, x, approximate="none"):
    if tuple(g.shape) != tuple(x.shape):
        fail("gelu_backward", (g, x), "the gradient must have the input's shape")
    return _gelu_rule(x, approximate)


def _gelu_rows(*arrays, approximate="none"):
    """Elementwise: rows of the last dim (of at least 16 elements: shorter rows cost a call each)."""
    if arrays[0].shape[-1] < 16 or not _same_layout(arrays):
        return None
    return arrays, arrays[0].shape[-1], (approximate,)


declare("gelu", ("x",), _c_rows_kernel("gelu", _gelu, _gelu_rows), _gelu_rule, attrs=("approximate",),
        pointwise=True, **_COMPOSITE)
declare("gelu_backward", ("g", "x"), _c_rows_kernel("gelu_backward", _gelu_backward, _gelu_rows),
        _gelu_backward_rule, attrs=("approximate",), **_BACKWARD)


# ---------------------------------------------------------------- cross_entropy (class indices)

def _ce_layout(xp, x, target):
    """Logits as (rows, C), flat targets, and a function that puts a (rows, C) result back
    in x's layout (classes on dim 1, or dim 0 for an unbatched (C,) input)."""
    if target.shape != x.shape[:1] + x.shape[2:] and not (x.ndim == 1 and target.ndim == 0):
        raise ValueError("the target's shape must be the input's without the class dimension")
    if x.ndim == 1:
        return x[None], target.reshape(1), lambda r: r[0]
    if x.ndim == 2:
        return x, target, lambda r: r
    moved = xp.moveaxis(x, 1, -1)
    shape = moved.shape
    return (moved.reshape(-1, x.shape[1]), target.reshape(-1),
            lambda r: xp.ascontiguousarray(xp.moveaxis(r.reshape(shape), -1, 1)))


def _ce_targets(xp, t, C, ignore_index, dtype, weight):
    """(valid mask, targets with the ignored ones set to 0, per-row weight w[t] * valid).

    The mask is None in the common case -- every target in [0, C), none ignored, no
    class weights -- which the kernels take as "all rows count once"."""
    if t.dtype.kind == "i":
        outside = bool((t.view(t.dtype.str.replace("i", "u")) >= C).any()) if t.size else False  # <0 or >=C
    else:
        outside = bool((t >= C).any()) if t.size else False
    if not outside and weight is None and not 0 <= ignore_index < C:
        return None, t, None
    valid = t != ignore_index
    t = xp.where(valid, t, 0)
    if t.size and (int(t.min()) < 0 or int(t.max()) >= C):
        bad = int(t.max()) if int(t.max()) >= C else int(t.min())
        raise IndexError(f"cross_entropy: target {bad} is out of bounds for {C} classes")
    wt = valid.astype(dtype) if weight is None else weight[t] * valid
    return valid, t, wt


def _ce_c_rows(op, x2, t, wt):
    """The C row kernel of cross_entropy(_backward) (runtime/kernels/rows.py) and the int64 targets
    it reads, when it applies: numpy float32/float64 rows in C order, every row counted once (no
    class weights, nothing ignored: `wt` None), enough elements; else (None, None)."""
    if wt is not None or type(x2) is not np.ndarray or not c_rows.use("cross_entropy", x2):
        return None, None
    k = c_row_kernels.kernel(op, c_rows.NAMES[x2.dtype])
    return (k, t if t.dtype == np.int64 and t.flags.c_contiguous else t.astype(np.int64)) if k else (None, None)


def _cross_entropy(xp):
    def cross_entropy(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        x2, t, back = _ce_layout(xp, x, target)
        n, C = x2.shape
        valid, t, wt = _ce_targets(xp, t, C, ignore_index, x.dtype, weight)
        k, t64 = _ce_c_rows("cross_entropy", x2, t, wt)
        if k is not None:   # the per-row loss in one pass over each row
            loss = np.empty(n, x2.dtype)
            eps = float(label_smoothing)
            k(x2.ctypes.data, t64.ctypes.data, loss.ctypes.data, n, C, 1 - eps, eps / C)
        else:
            z = x2 - x2.max(axis=1, keepdims=True) if n else x2.copy()
            lse = xp.log(xp.exp(z).sum(axis=1))
            loss = lse - z[xp.arange(n), t]  # -log p[target]
        if k is None and wt is not None:
            loss *= wt
        if k is None and label_smoothing:  # -sum_c w_c log p_c
            smooth = lse * (C if weight is None else weight.sum()) - (z.sum(axis=1) if weight is None else z @ weight)
            if valid is not None:
                smooth *= valid
            loss = (1 - label_smoothing) * loss + (label_smoothing / C) * smooth
        if reduction == "none":
            return loss.reshape(target.shape).astype(x.dtype, copy=False)
        total = array_sum(loss)
        if reduction == "mean":
            denom = n if wt is None else wt.sum()
            total = total / denom if denom != 0 else xp.nan  # all targets ignored: nan, like PyTorch
        return xp.asarray(total, dtype=x.dtype)
    return cross_entropy


def _cross_entropy_backward(xp):
    def cross_entropy_backward(g, x, target, weight=None, ignore_index=-100, reduction="mean",
                               label_smoothing=0.0):
        """d loss / d x = scale * valid * (softmax(x) * coef - target distribution)."""
        x2, t, back = _ce_layout(xp, x, target)
        n, C = x2.shape
        valid, t, wt = _ce_targets(xp, t, C, ignore_index, x.dtype, weight)
        k, t64 = _ce_c_rows("cross_entropy_backward", x2, t, wt)
        if k is not None:   # softmax, minus the target distribution, times the scale: one pass per row
            scale = np.ascontiguousarray(g.reshape(-1) if reduction == "none" else g if reduction == "sum" else g / n,
                                         dtype=x2.dtype)
            p = np.empty(x2.shape, x2.dtype)
            eps = float(label_smoothing)
            k(x2.ctypes.data, t64.ctypes.data, scale.ctypes.data, p.ctypes.data, n, C, int(reduction == "none"),
              1 - eps, eps / C)
            return back(p)
        p = x2 - x2.max(axis=1, keepdims=True) if n else x2.copy()
        xp.exp(p, out=p)
        p /= p.sum(axis=1, keepdims=True)
        rows = xp.arange(n)
        eps = label_smoothing
        if wt is None:  # every row counts once
            if eps:
                p[rows, t] -= 1 - eps
                p -= eps / C
            else:
                p[rows, t] -= 1
        elif eps:
            validf = valid.astype(x.dtype)
            total_w = C if weight is None else weight.sum()
            p *= (wt * (1 - eps) + validf * (eps * total_w / C))[:, None]
            p[rows, t] -= wt * (1 - eps)
            p -= validf[:, None] * (eps / C if weight is None else weight * (eps / C))
        else:
            p *= wt[:, None]
            p[rows, t] -= wt
        if reduction == "none":
            p *= g.reshape(-1, 1)
        elif reduction == "sum":
            p *= g
        else:
            p *= g / (n if wt is None else wt.sum())
        return back(p)
    return cross_entropy_backward


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


def _cross_entropy_backward_rule(g, x, target, weight=None, **attrs):
    loss = _cross_entropy_rule(x, target, weight, **attrs)
    if tuple(g.shape) != tuple(loss.shape):
        fail("cross_entropy_backward", (g, x, target), f"the gradient must have the loss's shape "
             f"{fmt_shape(loss.shape)}")
    return Spec(tuple(x.shape), x.dtype)


declare("cross_entropy", ("x", "target", "weight"), _cross_entropy, _cross_entropy_rule,
        attrs=("ignore_index", "reduction", "label_smoothing"), **_COMPOSITE)
declare("cross_entropy_backward", ("g", "x", "target", "weight"), _cross_entropy_backward,
        _cross_entropy_backward_rule, attrs=("ignore_index", "reduction", "label_smoothing"), **_BACKWARD)


# ---------------------------------------------------------------- embedding

def _embedding(xp):
    def embedding(weight, indices, padding_idx=None):
        out = xp.take(weight, indices, axis=0)
        if xp is np and c_rows.use("embedding_backward", out):   # its backward's kernel compiles meanwhile
            c_rows.prefetch("embedding", c_rows.NAMES[out.dtype])
        return out
    return embedding


def _scatter_add_rows(out, idx, rows):
    """out[idx[i]] += rows[i] for every i in order -- np.add.at's sums, bit for bit -- in rounds:
    round r adds each index's r-th row (distinct indices: one fancy-indexed add). np.add.at
    walks one row at a time (~4 ns per element: 0.4 ms for a GPT step's 512 x 128 token
    gradients, 5x this); an index repeated many times makes many rounds, where np.add.at
    is kept (a round costs about as much as adding ~4096 elements), as for negative indices."""
    n = idx.size
    if n == 0:
        return
    order = np.argsort(idx, kind="stable")
    s = idx[order]
    first = np.empty(n, bool)
    first[0] = True
    np.not_equal(s[1:], s[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    rank = np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))   # occurrence number of each
    rounds = int(rank.max()) + 1
    if rounds * 4096 > n * max(rows.shape[1], 1) or s[0] < 0:   # (-1 and n-1: one row, two keys)
        np.add.at(out, idx, rows)
        return
    for r in range(rounds):
        sel = rank == r
        out[s[sel]] += rows[order[sel]]


def _embedding_backward(xp):
    def embedding_backward(g, indices, num_weights, padding_idx=None):
        dim = g.shape[-1]
        out = xp.zeros((num_weights, dim), dtype=g.dtype)
        idx = indices.reshape(-1)
        g2 = g.reshape(-1, dim)
        if (xp is np and c_rows.use("embedding_backward", g2 := np.ascontiguousarray(g2)) and idx.size
                and 0 <= idx.min() and idx.max() < num_weights):
            k = c_row_kernels.kernel("embedding_backward", c_rows.NAMES[g.dtype])
            if k is not None:   # np.add.at's loop (same order, same bits), without its per-index overhead
                idx = np.ascontiguousarray(idx, dtype=np.int64)
                k(g2.ctypes.data, idx.ctypes.data, out.ctypes.data, idx.size, dim,
                  -1 if padding_idx is None else padding_idx)
                return out
        if padding_idx is not None:
            keep = idx != padding_idx
            idx, g2 = idx[keep], g2[keep]
        if xp.__name__ == "numpy":
            _scatter_add_rows(out, idx, g2)
        else:  # cupy
            import cupyx
            cupyx.scatter_add(out, idx, g2)
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


declare("embedding", ("weight", "indices"), _embedding, _embedding_rule, attrs=("padding_idx",), kind="composite")
declare("embedding_backward", ("g", "indices"), _embedding_backward, _embedding_backward_rule,
        attrs=("num_weights", "padding_idx"), kind="composite")


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


declare("pad", ("x",), _pad, _pad_rule, attrs=("pad", "value"), kind="shape")


# ---------------------------------------------------------------- recurrent cells (LSTM, GRU)
#
# One time step's gate math, given the two projections a layer computes with `linear`:
# xg = x @ W_ih.T + b_ih (for every step of a sequence at once) and hg = h @ W_hh.T + b_hh.
# PyTorch's gate order: LSTM i, f, g, o; GRU r, z, n, with b_hn inside r * (...).
# Sigmoid is computed as 0.5 * tanh(0.5 x) + 0.5 (exact, and one ufunc pass instead of three).

def _sigmoid_(xp, a):
    """sigmoid(a) in place."""
    a *= 0.5
    xp.tanh(a, out=a)
    a *= 0.5
    a += 0.5
    return a


_GATE_AFFINE = {}


def _lstm_affine(xp, H, dtype):
    """(scale, shift, k) over the 4H gates: sigmoid(x) = 0.5 tanh(0.5 x) + 0.5 for i, f, o and tanh(x)
    for g, so all four activations are three passes over one array: tanh(a * scale) * scale + shift;
    and k (1 for g, else 0), so that all four derivatives from the activated a are (1 - a)(a + k)."""
    key = (xp.__name__, H, dtype)
    if key not in _GATE_AFFINE:
        scale = xp.full(4 * H, 0.5, dtype=dtype)
        scale[2 * H:3 * H] = 1.0
        _GATE_AFFINE[key] = scale, 1.0 - scale, 2.0 * scale - 1.0
    return _GATE_AFFINE[key]


def _lstm_activate_(xp, a, scale, shift):
    """The gates [i, f, g, o] in `a` activated in place (sigmoid, sigmoid, tanh, sigmoid), with
    `_lstm_affine`'s (scale, shift) shaped to broadcast against a's layout of the gates."""
    a *= scale
    xp.tanh(a, out=a)
    a *= scale
    a += shift
    return a


def _lstm_gates(xp, xg, hg):
    """The activated gates [i, f, g, o] as one C-ordered (..., 4H) array."""
    a = xp.empty(xg.shape, dtype=xg.dtype)
    xp.add(xg, hg, out=a)
    H = a.shape[-1] // 4
    return _lstm_activate_(xp, a, *_lstm_affine(xp, H, a.dtype)[:2]), H


def _lstm_cell(xp):
    def lstm_cell(xg, hg, c):
        """[h', c'] stacked on a new first dimension: c' = f c + i g, h' = o tanh(c')."""
        a, H = _lstm_gates(xp, xg, hg)
        out = xp.empty((2,) + c.shape, dtype=c.dtype)
        h1, c1 = out[0], out[1]
        xp.multiply(a[..., H:2 * H], c, out=c1)
        c1 += a[..., :H] * a[..., 2 * H:3 * H]
        xp.tanh(c1, out=h1)
        h1 *= a[..., 3 * H:]
        return out
    return lstm_cell


def _lstm_cell_backward(xp):
    def lstm_cell_backward(g, xg, hg, c):
        """[d gates (4H) | d c (H)] on the last dimension, from g = [d h', d c'] (recomputes the gates)."""
        a, H = _lstm_gates(xp, xg, hg)
        i, f, gg, o = a[..., :H], a[..., H:2 * H], a[..., 2 * H:3 * H], a[..., 3 * H:]
        tc = f * c
        tc += i * gg
        xp.tanh(tc, out=tc)
        out = xp.empty(a.shape[:-1] + (5 * H,), dtype=a.dtype)
        d = out[..., :4 * H]
        dc = out[..., 4 * H:]
        xp.multiply(g[0], tc, out=d[..., 3 * H:])              # d o = dh tanh(c')
        xp.multiply(tc, tc, out=tc)
        xp.subtract(1.0, tc, out=tc)
        tc *= o
        tc *= g[0]
        tc += g[1]                                             # d c' in total
        xp.multiply(tc, gg, out=d[..., :H])                    # d i
        xp.multiply(tc, c, out=d[..., H:2 * H])                # d f
        xp.multiply(tc, i, out=d[..., 2 * H:3 * H])            # d g
        xp.multiply(tc, f, out=dc)                             # d c
        deriv = 1.0 - a                                        # s (1 - s) for i, f, o; 1 - g^2 for g
        deriv[..., 2 * H:3 * H] = 1.0 - gg * gg
        deriv[..., :2 * H] *= a[..., :2 * H]
        deriv[..., 3 * H:] *= o
        d *= deriv
        return out
    return lstm_cell_backward


def _gru_cell(xp):
    def gru_cell(xg, hg, h):
        """h' = (1 - z) n + z h with n = tanh(x_n + r (h_n)); r, z = sigmoid(x + h) gates."""
        H = h.shape[-1]
        rz = _sigmoid_(xp, xg[..., :2 * H] + hg[..., :2 * H])
        n = rz[..., :H] * hg[..., 2 * H:]
        n += xg[..., 2 * H:]
        xp.tanh(n, out=n)
        out = h - n
        out *= rz[..., H:]
        out += n
        return out
    return gru_cell


def _gru_cell_backward(xp):
    def gru_cell_backward(g, xg, hg, h):
        """[d xg (3H) | d hg (3H) | d h (H)] on the last dimension (recomputes the gates)."""
        H = h.shape[-1]
        rz = _sigmoid_(xp, xg[..., :2 * H] + hg[..., :2 * H])
        r, z, hn = rz[..., :H], rz[..., H:], hg[..., 2 * H:]
        n = r * hn
        n += xg[..., 2 * H:]
        xp.tanh(n, out=n)
        out = xp.empty(h.shape[:-1] + (7 * H,), dtype=h.dtype)
        dx, dh = out[..., :3 * H], out[..., 3 * H:6 * H]
        xp.multiply(g, z, out=out[..., 6 * H:])                # d h, directly
        dn = 1.0 - z
        dn *= g
        n2 = n * n
        xp.subtract(1.0, n2, out=n2)
        dn *= n2                                               # d (x_n + r h_n)
        dx[..., 2 * H:] = dn
        xp.multiply(dn, r, out=dh[..., 2 * H:])                # d h_n
        xp.multiply(dn, hn, out=dx[..., :H])                   # d r
        xp.subtract(h, n, out=dx[..., H:2 * H])
        dx[..., H:2 * H] *= g                                  # d z
        deriv = 1.0 - rz
        deriv *= rz
        dx[..., :2 * H] *= deriv
        dh[..., :2 * H] = dx[..., :2 * H]
        return out
    return gru_cell_backward


def _lstm_c_step(op, *arrays):
    """The C kernel of one LSTM step's gate math (runtime/kernels/rows.py) when every array is a
    C-contiguous numpy float32/float64 array of one dtype and the kernels are on; else None."""
    a = arrays[0]
    if type(a) is not np.ndarray or not c_rows.use("lstm_step", a) or not _same_layout(arrays):
        return None
    return c_row_kernels.kernel(op, c_rows.NAMES[a.dtype])


def _lstm_layer(xp):
    def lstm_layer(xg, h0, c0, w_hh):
        """(6, T, B, H): every step's h, c and activated gates i, f, g, o -- the LSTM recurrence
        over the input projections xg (T, B, 4H: x W_ih^T plus both biases) from (h0, c0), with
        `lstm_cell`'s gate math. The gates are what the backward reads (cuDNN's "reserve space"),
        so it recomputes nothing. Per step: one product W_hh h^T into a preallocated buffer, whose
        (4H, B) rows are already gate-major (BLAS's faster few-rows orientation, as linear's; no
        transposing copy), and ten in-place passes over the step's blocks, written into the result."""
        T, B, H = xg.shape[0], h0.shape[0], h0.shape[1]
        out = xp.empty((6, T, B, H), dtype=xg.dtype)
        k = _lstm_c_step("lstm_step", xg, h0, c0, w_hh)
        if k is not None:   # per step: the product h W_hh^T as (B, 4H) rows, then one C pass of gate math
            w_t = np.ascontiguousarray(w_hh.T)
            hw = np.empty((B, 4 * H), dtype=xg.dtype)
            step = B * H * xg.itemsize          # the reserve's (B, H) blocks: addresses, not views
            o, x, hw_p = out.ctypes.data, xg.ctypes.data, hw.ctypes.data
            h, c_prev = h0, c0.ctypes.data      # C-contiguous (_lstm_c_step checked)
            for t in range(T):
                np.matmul(h, w_t, out=hw)
                h = out[0, t]
                c = o + (T + t) * step
                k(hw_p, x + 4 * t * step, c_prev, o + t * step, c, o + (2 * T + t) * step, B, H, T * B * H)
                c_prev = c
            return out
        scale, shift = (v.reshape(4, 1, H) for v in _lstm_affine(xp, H, xg.dtype)[:2])   # gate-major
        hw = xp.empty((4 * H, B), dtype=xg.dtype)
        hw4 = hw.reshape(4, H, B).transpose(0, 2, 1)              # (4, B, H): its [i, f, g, o] blocks
        xg4 = xg.reshape(T, B, 4, H).transpose(0, 2, 1, 3)
        ig = xp.empty((B, H), dtype=xg.dtype)
        h, c = h0, c0
        for t in range(T):
            gates = out[2:, t]              # (4, B, H): the step's activated gates, in the reserve
            xp.matmul(w_hh, h.T, out=hw)
            xp.add(hw4, xg4[t], out=gates)
            i, f, g, o = _lstm_activate_(xp, gates, scale, shift)
            h, c_prev, c = out[0, t], c, out[1, t]
            xp.multiply(f, c_prev, out=c)   # c = f c_prev + i g
            xp.multiply(i, g, out=ig)
            c += ig
            xp.tanh(c, out=h)               # h = o tanh(c)
            h *= o
        return out
    return lstm_layer


def _lstm_layer_backward(xp):
    def lstm_layer_backward(g, h0, c0, w_hh, out):
        """(T + 1, B, 4H) from g = d out: rows t < T d xg_t (the gates' gradients before activation,
        also those of h_{t-1} W_hh^T); row T [d h0 | d c0 | 0 | 0]. Back in time, one product
        (d gates W_hh) per step into a preallocated buffer, and the gate math on that step's (B, H)
        blocks of the saved gates, which stay in cache (whole-sequence passes would stream the
        reserve through memory ~10 times). The gate gradients are formed in a contiguous gate-major
        scratch, where each pass is one run over memory (a pass over the result's strided [i, f, g, o]
        blocks costs twice as much), and land in the result with the last multiply; all four
        activations' derivatives come from four passes over whole steps: (1 - a)(a + k) is a (1 - a)
        for the sigmoids (k = 0) and 1 - a^2 for tanh's g (k = 1)."""
        T, B, H = out.shape[1:]
        dt = out.dtype
        res = xp.empty((T + 1, B, 4 * H), dtype=dt)
        k = _lstm_c_step("lstm_step_backward", g, h0, c0, w_hh, out)
        if k is not None:   # per step: one C pass of gate math into res[t], then d h = res[t] W_hh
            dhw = np.empty((B, H), dtype=dt)
            dc = g[1, T - 1].copy()
            step = B * H * dt.itemsize          # (B, H) blocks of out and g: addresses, not views
            o, gp, r, dhw_p, dc_p = (a.ctypes.data for a in (out, g, res, dhw, dc))
            for t in range(T - 1, -1, -1):
                k(dhw_p, gp + t * step, gp + (T + t) * step, o + (3 * T + t + 1) * step if t < T - 1 else None,
                  o + (T + t) * step, o + t * step, o + (2 * T + t) * step, gp + (2 * T + t) * step,
                  c0.ctypes.data if t == 0 else o + (T + t - 1) * step, dc_p, r + 4 * t * step, B, H, T * B * H)
                np.matmul(res[t], w_hh, out=dhw)
            res[T, :, :H] = dhw
            dc *= out[3, 0]
            res[T, :, H:2 * H] = dc
            res[T, :, 2 * H:] = 0
            return res
        k = _lstm_affine(xp, H, dt)[2].reshape(4, 1, H)
        dh, dc, tc, tmp = (xp.empty((B, H), dtype=dt) for _ in range(4))
        d, s = xp.empty((4, B, H), dtype=dt), xp.empty((4, B, H), dtype=dt)
        di, df, dg, do = d
        dhT = xp.empty((H, B), dtype=dt)              # d gates W_hh, in linear's faster few-rows orientation
        xp.copyto(dh, g[0, T - 1])
        xp.copyto(dc, g[1, T - 1])
        for t in range(T - 1, -1, -1):
            if t < T - 1:
                xp.add(dhT.T, g[0, t], out=dh)        # d h: through step t + 1's gates, and its own
                dc *= out[3, t + 1]                   # d c: through c_{t+1} = f c + i g, and its own
                dc += g[1, t]
            gates = out[2:, t]
            i, f, gg, o = gates
            xp.tanh(out[1, t], out=tc)
            xp.multiply(dh, tc, out=do)               # d o = d h tanh(c)
            xp.multiply(out[0, t], tc, out=tmp)       # d c += d h o (1 - tanh(c)^2) = d h (o - h tanh(c))
            xp.subtract(o, tmp, out=tmp)
            tmp *= dh
            dc += tmp
            xp.multiply(dc, gg, out=di)               # d i = d c g
            xp.multiply(dc, c0 if t == 0 else out[1, t - 1], out=df)   # d f = d c c_prev
            xp.multiply(dc, i, out=dg)                # d g = d c i
            d += g[2:, t]                             # the gates' own gradients
            xp.subtract(1, gates, out=s)              # through the activations: (1 - a)(a + k)
            d *= s
            xp.add(gates, k, out=s)
            xp.multiply(d, s, out=res[t].reshape(B, 4, H).transpose(1, 0, 2))
            xp.matmul(w_hh.T, res[t].T, out=dhT)
        res[T, :, :H] = dhT.T
        dc *= out[3, 0]
        res[T, :, H:2 * H] = dc
        res[T, :, 2 * H:] = 0
        return res
    return lstm_layer_backward


def _lstm_layer_rule(xg, h0, c0, w_hh):
    specs = (xg, h0, c0, w_hh)
    if (len(xg.shape) != 3 or len(h0.shape) != 2 or tuple(c0.shape) != tuple(h0.shape)
            or tuple(w_hh.shape) != (4 * h0.shape[1], h0.shape[1])
            or tuple(xg.shape[1:]) != (h0.shape[0], 4 * h0.shape[1])):
        fail("lstm_layer", specs, "expected input projections [seq, batch, 4 * hidden], states [batch, hidden] "
             "and weight_hh [4 * hidden, hidden]")
    if any(s.dtype is not xg.dtype for s in specs) or not xg.dtype.is_floating_point:
        fail("lstm_layer", specs, "expected floating-point tensors of one dtype", TypeError)
    return Spec((6, xg.shape[0], h0.shape[0], h0.shape[1]), xg.dtype)


def _lstm_layer_backward_rule(g, h0, c0, w_hh, out):
    specs = (g, h0, c0, w_hh, out)
    T = out.shape[1] if len(out.shape) == 4 else 0
    spec = _lstm_layer_rule(Spec((T, h0.shape[0] if h0.shape else 0, w_hh.shape[0] if w_hh.shape else 0), out.dtype),
                            h0, c0, w_hh)
    if any(tuple(s.shape) != tuple(spec.shape) or s.dtype is not out.dtype for s in (g, out)):
        fail("lstm_layer_backward", specs, f"the gradient and the output must have lstm_layer's output shape "
             f"{fmt_shape(spec.shape)} and dtype")
    return Spec((T + 1, spec.shape[2], 4 * spec.shape[3]), out.dtype)


def _cell_rule(name, gates):
    def rule(xg, hg, state):
        specs = (xg, hg, state)
        H = state.shape[-1] if state.shape else 0
        if (not state.shape or tuple(xg.shape) != tuple(hg.shape) or tuple(xg.shape[:-1]) != tuple(state.shape[:-1])
                or xg.shape[-1] != gates * H):
            fail(name, specs, f"expected projections of shape [*, {gates} * hidden] and a state of shape "
                 "[*, hidden] with the same leading dimensions")
        if any(s.dtype is not xg.dtype for s in specs) or not xg.dtype.is_floating_point:
            fail(name, specs, "expected floating-point tensors of one dtype", TypeError)
        return Spec(((2,) + tuple(state.shape)) if name == "lstm_cell" else tuple(state.shape), xg.dtype)
    return rule


def _cell_backward_rule(name, gates, width):
    forward = _cell_rule(name, gates)

    def rule(g, xg, hg, state):
        out = forward(xg, hg, state)
        if tuple(g.shape) != tuple(out.shape) or g.dtype is not xg.dtype:
            fail(name + "_backward", (g, xg, hg, state), f"the gradient must have the output's shape "
                 f"{fmt_shape(out.shape)} and dtype")
        return Spec(tuple(state.shape[:-1]) + (width * state.shape[-1],), xg.dtype)
    return rule


_CELL_FLOPS = Flops("elementwise", lambda out, ins, attrs: 4 * _numel(ins[0]))   # add, activate, combine
declare("lstm_cell", ("xg", "hg", "c"), _lstm_cell, _cell_rule("lstm_cell", 4), kind="composite", flops=_CELL_FLOPS)
declare("lstm_cell_backward", ("g", "xg", "hg", "c"), _lstm_cell_backward, _cell_backward_rule("lstm_cell", 4, 5),
        **_BACKWARD)
declare("gru_cell", ("xg", "hg", "h"), _gru_cell, _cell_rule("gru_cell", 3), kind="composite", flops=_CELL_FLOPS)
declare("gru_cell_backward", ("g", "xg", "hg", "h"), _gru_cell_backward, _cell_backward_rule("gru_cell", 3, 7),
        **_BACKWARD)

# a product per step (2 B 4H H multiply-accumulates) and the gate math; backward: one product per step
declare("lstm_layer", ("xg", "h0", "c0", "w_hh"), _lstm_layer, _lstm_layer_rule, kind="composite", opmath=True,
        flops=Flops("matmul-like", lambda out, ins, attrs: (2 * ins[3][1] + 4) * _numel(ins[0])))
declare("lstm_layer_backward", ("g", "h0", "c0", "w_hh", "out"), _lstm_layer_backward, _lstm_layer_backward_rule,
        kind="composite", differentiable=False, opmath=True,
        flops=Flops("matmul-like", lambda out, ins, attrs: (2 * ins[3][1] + 12) * _numel(out)))
