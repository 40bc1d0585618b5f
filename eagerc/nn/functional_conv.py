"""Convolution, pooling, unfold/fold: the conv part of eagerc.nn.functional.

PyTorch's names, signatures and defaults. The primitives live in
eagerc/runtime/ops/conv.py (im2col + BLAS kernels, shape rules); this file
normalises arguments (ints or tuples, 'same'/'valid' padding, unbatched inputs,
1-d ops as views onto the 2-d ones) and applies the ops; their derivatives (for every rank,
written with these same ops, so gradients of any order work) live with the ops in
eagerc/ops/conv.py.

Compositions: 3-d max/avg pooling run the 2-d ops over (H, W), then over D (separable);
adaptive_avg_pool3d adds one matmul over D; adaptive max pooling is a gather at the
adaptive_max_pool_indices op's argmax.
"""
import numpy as np

from .._tensor import Tensor
from ..dispatch import apply
from ..ops.creation import tensor
from ..runtime.ops import OPS
from ..runtime.ops.conv import adaptive_matrix, conv_output_size, pool_output_size  # (declares the ops too)

__all__ = [
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d",
    "max_pool3d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "unfold", "fold",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
    "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
]

_CONV = {nd: OPS[f"conv{nd}d"] for nd in (2, 3)}
_CONV_T = {nd: OPS[f"conv_transpose{nd}d"] for nd in (2, 3)}
_CONV2D = _CONV[2]
_MAX_POOL, _MAX_POOL_IDX = OPS["max_pool2d"], OPS["max_pool2d_indices"]
_AVG_POOL, _ADAPTIVE = OPS["avg_pool2d"], OPS["adaptive_avg_pool2d"]
_ADAPTIVE_MAX_IDX = OPS["adaptive_max_pool_indices"]
_IM2COL, _COL2IM = OPS["im2col"], OPS["col2im"]


# ---------------------------------------------------------------- argument normalisation

def _ntuple(name, v, n):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            v = tuple(v) * n
        if len(v) != n:
            raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {tuple(v)}")
        return tuple(int(a) for a in v)
    return (int(v),) * n


def _positive(op, name, v):
    if any(a < 1 for a in v):
        raise RuntimeError(f"{op}: {name} should be greater than zero, but got {name}={v}")
    return v


def _tensor(op, name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be a Tensor, not {type(t).__name__}")
    return t


def _check_dims(op, x, ndims):
    nd = x._array.ndim
    if nd not in ndims:
        kinds = " or ".join(f"{d}D ({'unbatched' if d == ndims[0] else 'batched'})" for d in ndims)
        raise RuntimeError(f"{op}: expected {kinds} input, but got input of size: {list(x._array.shape)}")
    return nd == ndims[0]


def _conv_padding(op, padding, kernel, stride, dilation, n):
    """User padding (int, tuple, 'valid', 'same') -> ((before, after), ...) per spatial dim."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding != "same":
            raise ValueError(f"{op}: invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
        if any(s != 1 for s in stride):
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions")
        pads = []
        for k, d in zip(kernel, dilation):
            total = d * (k - 1)
            pads.append((total // 2, total - total // 2))  # the odd pixel goes after, as PyTorch
        return tuple(pads)
    p = _ntuple("padding", padding, n)
    if any(v < 0 for v in p):
        raise RuntimeError(f"{op}: negative padding is not supported, got padding={p}")
    return tuple((v, v) for v in p)


def _bias(op, bias):
    if bias is None:
        return 0
    return _tensor(op, "bias", bias)


# ---------------------------------------------------------------- convolutions

_LAYOUT = {2: "(C_out, C_in/groups, kH, kW)", 3: "(C_out, C_in/groups, kD, kH, kW)"}


def _conv(op, nd, input, weight, bias, stride, padding, dilation, groups):
    """conv2d / conv3d: one argument normalisation for every rank of the conv op."""
    _tensor(op, "input", input)
    _tensor(op, "weight", weight)
    unbatched = _check_dims(op, input, (nd + 1, nd + 2))
    stride = _positive(op, "stride", _ntuple("stride", stride, nd))
    dilation = _positive(op, "dilation", _ntuple("dilation", dilation, nd))
    if weight._array.ndim != nd + 2:
        raise RuntimeError(f"{op}: expected a {nd + 2}-d weight {_LAYOUT[nd]}, got {list(weight._array.shape)}")
    pads = _conv_padding(op, padding, weight._array.shape[2:], stride, dilation, nd)
    if unbatched:
        input = input.unsqueeze(0)
    out = apply(_CONV[nd], (input, weight, _bias(op, bias)),
                {"stride": stride, "padding": pads, "dilation": dilation, "groups": int(groups)})
    return out.squeeze(0) if unbatched else out


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d cross-correlation of input (N, C_in, H, W) or (C_in, H, W) with weight
    (C_out, C_in/groups, kH, kW); padding: int, pair, 'valid' or 'same'."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d cross-correlation of input (N, C_in, D, H, W) or (C_in, D, H, W) with weight
    (C_out, C_in/groups, kD, kH, kW); padding: int, triple, 'valid' or 'same'."""
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d cross-correlation of input (N, C_in, L) or (C_in, L) with weight (C_out, C_in/groups, k):
    a view onto conv2d with a height-1 image."""
    _tensor("conv1d", "input", input)
    _tensor("conv1d", "weight", weight)
    unbatched = _check_dims("conv1d", input, (2, 3))
    if weight._array.ndim != 3:
        raise RuntimeError(f"conv1d: expected a 3-d weight (C_out, C_in/groups, k), got {list(weight._array.shape)}")
    stride = _ntuple("stride", stride, 1)[0]
    dilation = _ntuple("dilation", dilation, 1)[0]
    if isinstance(padding, str):
        pads = _conv_padding("conv1d", padding, weight._array.shape[2:], (stride,), (dilation,), 1)
    else:
        p = _ntuple("padding", padding, 1)[0]
        if p < 0:
            raise RuntimeError(f"conv1d: negative padding is not supported, got padding={p}")
        pads = ((p, p),)
    _positive("conv1d", "stride", (stride,))
    _positive("conv1d", "dilation", (dilation,))
    x = input.unsqueeze(-2)
    if unbatched:
        x = x.unsqueeze(0)
    out = apply(_CONV2D, (x, weight.unsqueeze(2), _bias("conv1d", bias)),
                {"stride": (1, stride), "padding": ((0, 0), pads[0]), "dilation": (1, dilation),
                 "groups": int(groups)})
    out = out.squeeze(2)
    return out.squeeze(0) if unbatched else out


def _conv_transpose(op, nd, input, weight, bias, stride, padding, output_padding, groups, dilation):
    """conv_transpose2d / conv_transpose3d: one argument normalisation for every rank."""
    _tensor(op, "input", input)
    _tensor(op, "weight", weight)
    unbatched = _check_dims(op, input, (nd + 1, nd + 2))
    stride = _positive(op, "stride", _ntuple("stride", stride, nd))
    dilation = _positive(op, "dilation", _ntuple("dilation", dilation, nd))
    if isinstance(padding, str):
        raise ValueError(f"{op}: padding must be an int or a tuple of ints (no 'same'/'valid')")
    pads = _conv_padding(op, padding, None, stride, dilation, nd)
    output_padding = _ntuple("output_padding", output_padding, nd)
    if unbatched:
        input = input.unsqueeze(0)
    out = apply(_CONV_T[nd], (input, weight, _bias(op, bias)),
                {"stride": stride, "padding": pads, "output_padding": output_padding,
                 "dilation": dilation, "groups": int(groups)})
    return out.squeeze(0) if unbatched else out


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transpose (adjoint, 'deconvolution') of conv2d: input (N, C_in, H, W), weight
    (C_in, C_out/groups, kH, kW); output H = (H-1)*stride - 2*padding + dilation*(kH-1) + output_padding + 1."""
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transpose of conv3d: input (N, C_in, D, H, W), weight (C_in, C_out/groups, kD, kH, kW)."""
    return _conv_transpose("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transpose of conv1d (a view onto conv_transpose2d); weight (C_in, C_out/groups, k)."""
    _tensor("conv_transpose1d", "input", input)
    _tensor("conv_transpose1d", "weight", weight)
    unbatched = _check_dims("conv_transpose1d", input, (2, 3))
    if weight._array.ndim != 3:
        raise RuntimeError(f"conv_transpose1d: expected a 3-d weight (C_in, C_out/groups, k), got "
                           f"{list(weight._array.shape)}")
    x = input.unsqueeze(-2)
    if unbatched:
        x = x.unsqueeze(0)
    out = conv_transpose2d(x, weight.unsqueeze(2), bias, (1, _ntuple("stride", stride, 1)[0]),
                           (0, _ntuple("padding", padding, 1)[0]),
                           (0, _ntuple("output_padding", output_padding, 1)[0]), groups,
                           (1, _ntuple("dilation", dilation, 1)[0]))
    out = out.squeeze(2)
    return out.squeeze(0) if unbatched else out


# ---------------------------------------------------------------- pooling

def _pool_args(op, kernel_size, stride, padding, dilation, n=2):
    kernel_size = _positive(op, "kernel_size", _ntuple("kernel_size", kernel_size, n))
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        stride = kernel_size
    stride = _positive(op, "stride", _ntuple("stride", stride, n))
    padding = _ntuple("padding", padding, n)
    dilation = _positive(op, "dilation", _ntuple("dilation", dilation, n))
    if any(p < 0 or p > k // 2 for p, k in zip(padding, kernel_size)):
        raise RuntimeError(f"{op}: pad should be at most half of kernel size, but got padding={padding} "
                           f"and kernel_size={kernel_size}")
    return kernel_size, stride, padding, dilation


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over kH x kW windows of (N, C, H, W) or (C, H, W); stride defaults to kernel_size.
    Padding counts as -inf. With return_indices, also the flat index (into H*W) of each max."""
    _tensor("max_pool2d", "input", input)
    unbatched = _check_dims("max_pool2d", input, (3, 4))
    k, s, p, d = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    if unbatched:
        input = input.unsqueeze(0)
    attrs = {"kernel_size": k, "stride": s, "padding": p, "dilation": d, "ceil_mode": bool(ceil_mode)}
    out = apply(_MAX_POOL, (input,), attrs)
    if unbatched:
        out = out.squeeze(0)
    if not return_indices:
        return out
    idx = apply(_MAX_POOL_IDX, (input,), attrs)
    return out, (idx.squeeze(0) if unbatched else idx)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over windows of (N, C, L) or (C, L): a view onto max_pool2d with height 1."""
    _tensor("max_pool1d", "input", input)
    _check_dims("max_pool1d", input, (2, 3))
    k, s, p, d = _pool_args("max_pool1d", kernel_size, stride, padding, dilation, 1)
    out = max_pool2d(input.unsqueeze(-2), (1, k[0]), (1, s[0]), (0, p[0]), (1, d[0]), ceil_mode, return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Mean over kH x kW windows; zero padding is counted in the mean if count_include_pad."""
    _tensor("avg_pool2d", "input", input)
    unbatched = _check_dims("avg_pool2d", input, (3, 4))
    k, s, p, _ = _pool_args("avg_pool2d", kernel_size, stride, padding, 1)
    if divisor_override is not None and int(divisor_override) == 0:
        raise RuntimeError("avg_pool2d: divisor must be not zero")
    if unbatched:
        input = input.unsqueeze(0)
    out = apply(_AVG_POOL, (input,), {"kernel_size": k, "stride": s, "padding": p, "ceil_mode": bool(ceil_mode),
                                      "count_include_pad": bool(count_include_pad),
                                      "divisor_override": None if divisor_override is None else int(divisor_override)})
    return out.squeeze(0) if unbatched else out


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Mean over windows of (N, C, L) or (C, L): a view onto avg_pool2d."""
    _tensor("avg_pool1d", "input", input)
    _check_dims("avg_pool1d", input, (2, 3))
    k, s, p, _ = _pool_args("avg_pool1d", kernel_size, stride, padding, 1, 1)
    return avg_pool2d(input.unsqueeze(-2), (1, k[0]), (1, s[0]), (0, p[0]), ceil_mode,
                      count_include_pad).squeeze(-2)


def _adaptive_size(output_size, in_size, n):
    sizes = _ntuple("output_size", tuple(in_size[i] if v is None else v for i, v in enumerate(output_size))
                    if isinstance(output_size, (tuple, list)) else output_size, n)
    return sizes


def adaptive_avg_pool2d(input, output_size):
    """Mean over adaptive windows [floor(i*H/oh), ceil((i+1)*H/oh)) giving output_size
    (int, pair, None entries keep the input size)."""
    _tensor("adaptive_avg_pool2d", "input", input)
    unbatched = _check_dims("adaptive_avg_pool2d", input, (3, 4))
    size = _adaptive_size(output_size, input._array.shape[-2:], 2)
    if unbatched:
        input = input.unsqueeze(0)
    out = apply(_ADAPTIVE, (input,), {"output_size": size})
    return out.squeeze(0) if unbatched else out


def adaptive_avg_pool1d(input, output_size):
    _tensor("adaptive_avg_pool1d", "input", input)
    _check_dims("adaptive_avg_pool1d", input, (2, 3))
    size = _adaptive_size(output_size, input._array.shape[-1:], 1)
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, size[0])).squeeze(-2)


# ---------------------------------------------------------------- 3-d pooling: separable, on the 2-d ops
# A box window's max (or sum) is the max (sum) over depth of the (H, W) windows' maxima (sums), and
# PyTorch's divisors are products of per-axis counts, so 3-d pooling runs the 2-d op over (H, W) of
# every depth plane, then over D (kernel (kD, 1)) -- fewer slices than kD*kH*kW, and ties still go to
# the first position in (d, h, w) order.

def _pool3d_input(op, input, k, s, p, d, ceil_mode):
    """Batched (N, C, D, H, W) input, whether it was unbatched, after PyTorch's size check."""
    unbatched = _check_dims(op, input, (4, 5))
    x = input.unsqueeze(0) if unbatched else input
    size = tuple(x._array.shape[2:])
    out = tuple(pool_output_size(*a, ceil_mode) for a in zip(size, k, s, p, d))
    if min(out) <= 0:
        raise RuntimeError(f"{op}: given input size {list(x._array.shape[1:])}, calculated output size "
                           f"{list(x._array.shape[1:2]) + list(out)} is too small")
    return x, unbatched


def _separable(op, x, hw_attrs, d_attrs):
    """op over (H, W) of each depth plane, then over D: (N, C, D, H, W) -> (N, C, oD, oH, oW),
    plus the intermediate (N, C, D, oH*oW) and the planes (for indices)."""
    n, c, D, H, W = x._array.shape
    planes = x.reshape(n, c * D, H, W)
    y = apply(op, (planes,), hw_attrs)
    oh, ow = y._array.shape[2:]
    y = y.reshape(n, c, D, oh * ow)
    out = apply(op, (y,), d_attrs)
    return out.reshape(n, c, out._array.shape[2], oh, ow), y, planes


def _split_attrs(k, s, p, d):
    """The (H, W) and the D part of 3-d window arguments, as 2-d op attributes."""
    return ({"kernel_size": k[1:], "stride": s[1:], "padding": p[1:], "dilation": d[1:]},
            {"kernel_size": (k[0], 1), "stride": (s[0], 1), "padding": (p[0], 0), "dilation": (d[0], 1)})


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over kD x kH x kW windows of (N, C, D, H, W) or (C, D, H, W); stride defaults to
    kernel_size, padding counts as -inf. With return_indices, also the flat index (into D*H*W)."""
    _tensor("max_pool3d", "input", input)
    k, s, p, d = _pool_args("max_pool3d", kernel_size, stride, padding, dilation, 3)
    x, unbatched = _pool3d_input("max_pool3d", input, k, s, p, d, ceil_mode)
    hw, dd = (dict(a, ceil_mode=bool(ceil_mode)) for a in _split_attrs(k, s, p, d))
    out, y, planes = _separable(_MAX_POOL, x, hw, dd)
    if return_indices:
        n, c, D, H, W = x._array.shape
        plane_idx = apply(_MAX_POOL_IDX, (planes,), hw).reshape(y._array.shape)   # into H*W, per depth
        depth = apply(_MAX_POOL_IDX, (y,), dd) // y._array.shape[3]               # the winning depth
        idx = (depth * (H * W) + plane_idx.gather(2, depth)).reshape(out._array.shape)
        return (out.squeeze(0), idx.squeeze(0)) if unbatched else (out, idx)
    return out.squeeze(0) if unbatched else out


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Mean over kD x kH x kW windows; zero padding is counted in the mean if count_include_pad."""
    _tensor("avg_pool3d", "input", input)
    k, s, p, d = _pool_args("avg_pool3d", kernel_size, stride, padding, 1, 3)
    if divisor_override is not None and int(divisor_override) == 0:
        raise RuntimeError("avg_pool3d: divisor must be not zero")
    x, unbatched = _pool3d_input("avg_pool3d", input, k, s, p, d, ceil_mode)
    # a divisor_override is applied once, to the window sums (a divisor of 1 in each stage)
    flags = {"ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad),
             "divisor_override": None if divisor_override is None else 1}
    hw, dd = ({n: v for n, v in dict(a, **flags).items() if n != "dilation"} for a in _split_attrs(k, s, p, d))
    out = _separable(_AVG_POOL, x, hw, dd)[0]
    if divisor_override is not None:
        out = out / int(divisor_override)
    return out.squeeze(0) if unbatched else out


def adaptive_avg_pool3d(input, output_size):
    """Mean over adaptive windows giving output_size (D, H, W): adaptive_avg_pool2d over (H, W),
    then one matmul with the (oD, D) averaging matrix."""
    _tensor("adaptive_avg_pool3d", "input", input)
    unbatched = _check_dims("adaptive_avg_pool3d", input, (4, 5))
    size = _adaptive_size(output_size, input._array.shape[-3:], 3)
    x = input.unsqueeze(0) if unbatched else input
    n, c, D, H, W = x._array.shape
    y = apply(_ADAPTIVE, (x.reshape(n, c * D, H, W),), {"output_size": size[1:]}).reshape(n, c, D, -1)
    if size[0] != D:
        y = tensor(adaptive_matrix(np, D, size[0], x._array.dtype), device=x.device).matmul(y)
    out = y.reshape((n, c) + size)
    return out.squeeze(0) if unbatched else out


# ---------------------------------------------------------------- adaptive max pooling (any rank)

def _adaptive_max(op, nd, input, output_size, return_indices):
    """The values are the input gathered at the adaptive_max_pool_indices op's argmax, so the
    gradient (a scatter-add) and every higher one come from gather's."""
    _tensor(op, "input", input)
    unbatched = _check_dims(op, input, (nd + 1, nd + 2))
    size = _adaptive_size(output_size, input._array.shape[-nd:], nd)
    x = input.unsqueeze(0) if unbatched else input
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected a floating-point input, got {x.dtype.name}")
    idx = apply(_ADAPTIVE_MAX_IDX, (x,), {"output_size": size})
    n, c = x._array.shape[:2]
    out = x.reshape(n, c, -1).gather(2, idx.reshape(n, c, -1)).reshape(idx._array.shape)
    if unbatched:
        out, idx = out.squeeze(0), idx.squeeze(0)
    return (out, idx) if return_indices else out


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max over adaptive windows of (N, C, L) or (C, L); with return_indices, also their flat indices."""
    return _adaptive_max("adaptive_max_pool1d", 1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max over adaptive windows [floor(i*H/oh), ceil((i+1)*H/oh)) x ... of (N, C, H, W) or (C, H, W)."""
    return _adaptive_max("adaptive_max_pool2d", 2, input, output_size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """Max over adaptive windows of (N, C, D, H, W) or (C, D, H, W)."""
    return _adaptive_max("adaptive_max_pool3d", 3, input, output_size, return_indices)


# ---------------------------------------------------------------- *_with_indices: always (values, indices)

def _with_indices(pool):
    def with_indices(input, *args, return_indices=True, **kw):
        return pool(input, *args, return_indices=True, **kw)
    with_indices.__name__ = f"{pool.__name__}_with_indices"
    with_indices.__doc__ = f"{pool.__name__}(..., return_indices=True): (values, flat indices)."
    return with_indices


max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d_with_indices = (
    _with_indices(f) for f in (max_pool1d, max_pool2d, max_pool3d))
adaptive_max_pool1d_with_indices, adaptive_max_pool2d_with_indices, adaptive_max_pool3d_with_indices = (
    _with_indices(f) for f in (adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d))


# ---------------------------------------------------------------- unfold / fold (im2col / col2im)

def _fold_args(op, kernel_size, dilation, padding, stride):
    k = _positive(op, "kernel_size", _ntuple("kernel_size", kernel_size, 2))
    d = _positive(op, "dilation", _ntuple("dilation", dilation, 2))
    s = _positive(op, "stride", _ntuple("stride", stride, 2))
    p = _ntuple("padding", padding, 2)
    if min(p) < 0:
        raise RuntimeError(f"{op}: padding should be non-negative, but got padding={p}")
    return k, d, p, s


def _blocks(op, size, k, d, p, s):
    """The grid of sliding blocks (oH, oW), or PyTorch's error."""
    out = tuple(conv_output_size(n, kk, ss, pp, pp, dd) for n, kk, ss, pp, dd in zip(size, k, s, p, d))
    if min(out) <= 0:
        raise RuntimeError(f"{op}: given input with spatial size {tuple(size)}, kernel_size={k}, dilation={d}, "
                           f"padding={p}, calculated shape of the array of sliding blocks as {out}, but its "
                           "components must be at least one.")
    return out


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: (N, C, H, W) -> (N, C*kH*kW, L), column l holding sliding block l (row-major
    over the oH x oW blocks), channel-major then kernel offset: the convolutions' window
    gather (the im2col op); its gradient is fold."""
    _tensor("unfold", "input", input)
    unbatched = _check_dims("unfold", input, (3, 4))
    k, d, p, s = _fold_args("unfold", kernel_size, dilation, padding, stride)
    x = input.unsqueeze(0) if unbatched else input
    _blocks("unfold", x._array.shape[2:], k, d, p, s)
    y = apply(_IM2COL, (x,), {"kernel_size": k, "dilation": d, "padding": p, "stride": s})
    return y.squeeze(0) if unbatched else y


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """col2im, the adjoint of unfold: (N, C*kH*kW, L) -> (N, C, H, W), overlapping blocks
    summed (the transposed convolutions' scatter: the col2im op)."""
    _tensor("fold", "input", input)
    unbatched = _check_dims("fold", input, (2, 3))
    k, d, p, s = _fold_args("fold", kernel_size, dilation, padding, stride)
    size = _ntuple("output_size", output_size, 2)
    x = input.unsqueeze(0) if unbatched else input
    n, ck, L = x._array.shape
    if ck % (k[0] * k[1]):
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
                           f"but got input.size(1)={ck} and kernel_size={k}")
    oh, ow = _blocks("fold", size, k, d, p, s)
    if oh * ow != L:
        raise RuntimeError(f"Given output_size={size}, kernel_size={k}, dilation={d}, padding={p}, stride={s}, "
                           f"expected size of input's dimension 2 to match the calculated number of sliding blocks "
                           f"{oh} * {ow} = {oh * ow}, but got input.size(2)={L}.")
    y = apply(_COL2IM, (x,), {"output_size": size, "kernel_size": k, "dilation": d, "padding": p, "stride": s})
    return y.squeeze(0) if unbatched else y
