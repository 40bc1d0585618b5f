"""Convolution, pooling and nearest upsampling: the conv part of eagerc.nn.functional.

PyTorch's names, signatures and defaults. The primitives live in
eagerc/runtime/ops/conv.py (im2col + BLAS kernels, shape rules); this file
normalises arguments (ints or pairs, 'same'/'valid' padding, unbatched inputs,
1-d ops as views onto the 2-d ones) and attaches the derivatives, written with
these same ops so that gradients of any order work:

    conv2d(x, w)            dx = conv_transpose2d(g, w)     dw = conv2d_weight(x, g)
    conv_transpose2d(x, w)  dx = conv2d(g, w)               dw = conv2d_weight(g, x)
    conv2d_weight(x, gy)    dx = conv_transpose2d(gy, g)    dgy = conv2d(x, g)
    max_pool2d(x)           dx = max_pool2d_backward(g, x)  (g routed to each window's first argmax)
    max_pool2d_backward     dgy = max_pool2d_select(g, x)   and back again
    avg_pool2d, adaptive_avg_pool2d, upsample_nearest2d: linear, each with its *_backward adjoint.
"""
import math

from .._tensor import Tensor
from ..autograd.formulas import defgrad
from ..dispatch import apply
from ..runtime.ops import OPS
from ..runtime.ops import conv as _conv_kernels  # noqa: F401  (declares the ops; until load_all has "conv")

__all__ = [
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "interpolate", "upsample_nearest",
]

_CONV = {nd: OPS[f"conv{nd}d"] for nd in (2, 3)}
_CONV_T = {nd: OPS[f"conv_transpose{nd}d"] for nd in (2, 3)}
_CONV_W = {nd: OPS[f"conv{nd}d_weight"] for nd in (2, 3)}
_CONV2D = _CONV[2]
_MAX_POOL = OPS["max_pool2d"]
_MAX_POOL_BWD = OPS["max_pool2d_backward"]
_MAX_POOL_SEL = OPS["max_pool2d_select"]
_MAX_POOL_IDX = OPS["max_pool2d_indices"]
_AVG_POOL = OPS["avg_pool2d"]
_AVG_POOL_BWD = OPS["avg_pool2d_backward"]
_ADAPTIVE = OPS["adaptive_avg_pool2d"]
_ADAPTIVE_BWD = OPS["adaptive_avg_pool2d_backward"]
_UPSAMPLE = OPS["upsample_nearest2d"]
_UPSAMPLE_BWD = OPS["upsample_nearest2d_backward"]


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


# ---------------------------------------------------------------- conv derivatives (every rank)

def _output_padding(x_shape, gy_shape, kernel_size, stride, padding, dilation):
    """The output_padding that makes conv_transpose of gy come back to x's size."""
    return tuple(int(n + p0 + p1 - ((o - 1) * s + d * (k - 1) + 1))
                 for n, o, k, s, d, (p0, p1) in zip(x_shape[2:], gy_shape[2:], kernel_size, stride, dilation,
                                                    padding))


def _conv_t_as_conv_padding(padding, output_padding, stride):
    """conv_transpose's padding seen from the conv it is the adjoint of: rows that
    output_padding >= stride adds are cropped (negative padding) so sizes match."""
    return tuple((p0, p1 - (op // s) * s) for (p0, p1), op, s in zip(padding, output_padding, stride))


def _conv_dx(g, w, x_shape, stride, padding, dilation, groups):
    op = _output_padding(x_shape, g._array.shape, w._array.shape[2:], stride, padding, dilation)
    return apply(_CONV_T[len(x_shape) - 2], (g, w, 0), {"stride": stride, "padding": padding,
                                                        "output_padding": op, "dilation": dilation,
                                                        "groups": groups})


def _conv_dw(g, x, w_shape, stride, padding, dilation, groups):
    return apply(_CONV_W[len(w_shape) - 2], (x, g), {"kernel_size": tuple(w_shape[2:]), "stride": stride,
                                                     "padding": padding, "dilation": dilation, "groups": groups})


def _bias_grad(g):
    return g.sum(dim=(0,) + tuple(range(2, g._array.ndim)))


def _conv_t_dx(g, w, stride, padding, output_padding, dilation, groups):
    pads = _conv_t_as_conv_padding(padding, output_padding, stride)
    return apply(_CONV[len(stride)], (g, w, 0), {"stride": stride, "padding": pads, "dilation": dilation,
                                                 "groups": groups})


def _conv_t_dw(g, x, w_shape, stride, padding, output_padding, dilation, groups):
    pads = _conv_t_as_conv_padding(padding, output_padding, stride)
    return apply(_CONV_W[len(stride)], (g, x), {"kernel_size": tuple(w_shape[2:]), "stride": stride,
                                                "padding": pads, "dilation": dilation, "groups": groups})


def _conv_w_dx(g, gy, x_shape, kernel_size, stride, padding, dilation, groups):
    op = _output_padding(x_shape, gy._array.shape, kernel_size, stride, padding, dilation)
    return apply(_CONV_T[len(stride)], (gy, g, 0), {"stride": stride, "padding": padding, "output_padding": op,
                                                    "dilation": dilation, "groups": groups})


def _conv_w_dgy(g, x, stride, padding, dilation, groups):
    return apply(_CONV[len(stride)], (x, g, 0), {"stride": stride, "padding": padding, "dilation": dilation,
                                                 "groups": groups})


for _nd in (2, 3):
    defgrad(f"conv{_nd}d", _conv_dx, _conv_dw, _bias_grad)
    defgrad(f"conv_transpose{_nd}d", _conv_t_dx, _conv_t_dw, _bias_grad)
    defgrad(f"conv{_nd}d_weight", _conv_w_dx, _conv_w_dgy)


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


# ---------------------------------------------------------------- nearest upsampling

_INTERPOLATING = ("linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact", "nearest")


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize (N, C, L) or (N, C, H, W) by nearest neighbour ('nearest' or 'nearest-exact'),
    to `size` or by `scale_factor` (output size floor(in * scale_factor))."""
    _tensor("interpolate", "input", input)
    if mode not in ("nearest", "nearest-exact"):
        if mode in _INTERPOLATING:
            raise NotImplementedError(f"interpolate: mode={mode!r} is not implemented in eagerc "
                                      "(only 'nearest' and 'nearest-exact')")
        raise ValueError(f"interpolate: unknown mode {mode!r}")
    if align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if antialias:
        raise ValueError("interpolate: anti-alias option is only supported for bilinear and bicubic modes")
    nd = input._array.ndim
    if nd not in (3, 4):
        raise NotImplementedError(f"interpolate: expected a 3-d (N, C, L) or 4-d (N, C, H, W) input for mode "
                                  f"{mode!r}, got input of size {list(input._array.shape)}")
    n = nd - 2
    in_size = tuple(input._array.shape[2:])
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined" if size is not None
                         else "either size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (tuple, list)) and len(size) != n:
            raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input "
                             f"with spatial dimensions of {list(in_size)} and output size of {list(size)}. Please "
                             "provide input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, "
                             "...,oK) format.")
        out_size = _ntuple("size", size, n)
        scales = (None,) * n
    else:
        if isinstance(scale_factor, (tuple, list)) and len(scale_factor) != n:
            raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but got "
                             f"input with spatial dimensions of {list(in_size)} and scale_factor of shape "
                             f"{list(scale_factor)}.")
        factors = tuple(float(f) for f in scale_factor) if isinstance(scale_factor, (tuple, list)) \
            else (float(scale_factor),) * n
        out_size = tuple(math.floor(s * f) for s, f in zip(in_size, factors))
        scales = (None,) * n if recompute_scale_factor else factors
    if any(o < 1 for o in out_size):
        raise RuntimeError(f"interpolate: input size {list(in_size)} and scale/size give an empty output "
                           f"size {list(out_size)}")
    x = input.unsqueeze(2) if n == 1 else input
    if n == 1:
        out_size, scales = (1,) + out_size, (None,) + scales
    out = apply(_UPSAMPLE, (x,), {"output_size": out_size, "scales": scales, "exact": mode == "nearest-exact"})
    return out.squeeze(2) if n == 1 else out


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated alias of interpolate(..., mode='nearest')."""
    return interpolate(input, size, scale_factor, mode="nearest")


# ---------------------------------------------------------------- pooling derivatives

defgrad("max_pool2d",
        lambda g, x, kernel_size, stride, padding, dilation, ceil_mode: apply(
            _MAX_POOL_BWD, (g, x), {"kernel_size": kernel_size, "stride": stride, "padding": padding,
                                    "dilation": dilation, "ceil_mode": ceil_mode}))
defgrad("max_pool2d_backward",
        lambda g, x, kernel_size, stride, padding, dilation, ceil_mode: apply(
            _MAX_POOL_SEL, (g, x), {"kernel_size": kernel_size, "stride": stride, "padding": padding,
                                    "dilation": dilation, "ceil_mode": ceil_mode}),
        None)  # piecewise constant in x
defgrad("max_pool2d_select",
        lambda g, x, kernel_size, stride, padding, dilation, ceil_mode: apply(
            _MAX_POOL_BWD, (g, x), {"kernel_size": kernel_size, "stride": stride, "padding": padding,
                                    "dilation": dilation, "ceil_mode": ceil_mode}),
        None)
defgrad("avg_pool2d",
        lambda g, x_shape, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override: apply(
            _AVG_POOL_BWD, (g,), {"input_size": tuple(x_shape[2:]), "kernel_size": kernel_size, "stride": stride,
                                  "padding": padding, "ceil_mode": ceil_mode,
                                  "count_include_pad": count_include_pad, "divisor_override": divisor_override}))
defgrad("avg_pool2d_backward",
        lambda g, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override: apply(
            _AVG_POOL, (g,), {"kernel_size": kernel_size, "stride": stride, "padding": padding,
                              "ceil_mode": ceil_mode, "count_include_pad": count_include_pad,
                              "divisor_override": divisor_override}))
defgrad("adaptive_avg_pool2d",
        lambda g, x_shape: apply(_ADAPTIVE_BWD, (g,), {"input_size": tuple(x_shape[2:])}))
defgrad("adaptive_avg_pool2d_backward",
        lambda g, gy_shape: apply(_ADAPTIVE, (g,), {"output_size": tuple(gy_shape[2:])}))
defgrad("upsample_nearest2d",
        lambda g, x_shape, output_size, scales, exact: apply(
            _UPSAMPLE_BWD, (g,), {"input_size": tuple(x_shape[2:]), "output_size": output_size, "scales": scales,
                                  "exact": exact}))
defgrad("upsample_nearest2d_backward",
        lambda g, output_size, scales, exact: apply(
            _UPSAMPLE, (g,), {"output_size": output_size, "scales": scales, "exact": exact}))
