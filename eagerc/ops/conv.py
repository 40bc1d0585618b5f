"""Derivatives of the conv, pooling and resampling ops declared in runtime/ops/conv.py, written
with these same ops so that gradients of any order work (eagerc.nn.functional's conv, pooling and
resampling functions apply the ops). For every rank (2-d and 3-d):

    conv(x, w)              dx = conv_transpose(g, w)     dw = conv_weight(x, g)
    conv_transpose(x, w)    dx = conv(g, w)               dw = conv_weight(g, x)
    conv_weight(x, gy)      dx = conv_transpose(gy, g)    dgy = conv(x, g)
    max_pool2d(x)           dx = max_pool2d_backward(g, x)  (g routed to each window's first argmax)
    max_pool2d_backward     dgy = max_pool2d_select(g, x)   and back again
    avg_pool2d, adaptive_avg_pool2d, upsample_nearest2d, interpolate_axis, im2col / col2im:
    linear, each with its adjoint.
"""
from ..autograd.formulas import defgrad
from ..dispatch import apply
from ..runtime.ops import OPS
from ..runtime.ops import conv as _conv_kernels  # noqa: F401  (declares the ops; until load_all has "conv")

_CONV = {nd: OPS[f"conv{nd}d"] for nd in (2, 3)}
_CONV_T = {nd: OPS[f"conv_transpose{nd}d"] for nd in (2, 3)}
_CONV_W = {nd: OPS[f"conv{nd}d_weight"] for nd in (2, 3)}
_MAX_POOL_BWD, _MAX_POOL_SEL = OPS["max_pool2d_backward"], OPS["max_pool2d_select"]
_AVG_POOL, _AVG_POOL_BWD = OPS["avg_pool2d"], OPS["avg_pool2d_backward"]
_ADAPTIVE, _ADAPTIVE_BWD = OPS["adaptive_avg_pool2d"], OPS["adaptive_avg_pool2d_backward"]
_UPSAMPLE, _UPSAMPLE_BWD = OPS["upsample_nearest2d"], OPS["upsample_nearest2d_backward"]
_IM2COL, _COL2IM = OPS["im2col"], OPS["col2im"]
_INTERPOLATE_AXIS, _INTERPOLATE_AXIS_BWD = OPS["interpolate_axis"], OPS["interpolate_axis_backward"]


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


# ---------------------------------------------------------------- pooling derivatives

def _max_pool_formula(op):
    """g routed through `op` over the windows of x, with the same window attributes."""
    return lambda g, x, kernel_size, stride, padding, dilation, ceil_mode: apply(
        op, (g, x), {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation,
                     "ceil_mode": ceil_mode})


defgrad("max_pool2d", _max_pool_formula(_MAX_POOL_BWD))
defgrad("max_pool2d_backward", _max_pool_formula(_MAX_POOL_SEL), None)  # piecewise constant in x
defgrad("max_pool2d_select", _max_pool_formula(_MAX_POOL_BWD), None)
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
defgrad("im2col",
        lambda g, x_shape, kernel_size, dilation, padding, stride: apply(
            _COL2IM, (g,), {"output_size": tuple(x_shape[2:]), "kernel_size": kernel_size, "dilation": dilation,
                            "padding": padding, "stride": stride}))
defgrad("col2im",
        lambda g, kernel_size, dilation, padding, stride: apply(
            _IM2COL, (g,), {"kernel_size": kernel_size, "dilation": dilation, "padding": padding, "stride": stride}))
defgrad("interpolate_axis",
        lambda g, x_shape, dim, scale, align_corners, cubic: apply(
            _INTERPOLATE_AXIS_BWD, (g,), {"dim": dim, "input_size": x_shape[dim], "scale": scale,
                                          "align_corners": align_corners, "cubic": cubic}))
defgrad("interpolate_axis_backward",
        lambda g, gy_shape, dim, scale, align_corners, cubic: apply(
            _INTERPOLATE_AXIS, (g,), {"dim": dim, "output_size": gy_shape[dim], "scale": scale,
                                      "align_corners": align_corners, "cubic": cubic}))
