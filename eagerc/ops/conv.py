"""Derivatives of the conv and pooling ops declared in runtime/ops/conv.py, written with
these same ops so that gradients of any order work (eagerc.nn.functional's conv functions
apply the ops):

    conv2d(x, w)            dx = conv_transpose2d(g, w)     dw = conv2d_weight(x, g)
    conv_transpose2d(x, w)  dx = conv2d(g, w)               dw = conv2d_weight(g, x)
    conv2d_weight(x, gy)    dx = conv_transpose2d(gy, g)    dgy = conv2d(x, g)
    max_pool2d(x)           dx = max_pool2d_backward(g, x)  (g routed to each window's first argmax)
    max_pool2d_backward     dgy = max_pool2d_select(g, x)   and back again
    avg_pool2d, adaptive_avg_pool2d, upsample_nearest2d: linear, each with its *_backward adjoint.
"""
from ..autograd.formulas import defgrad
from ..dispatch import apply
from ..runtime.ops import OPS
from ..runtime.ops import conv as _conv_kernels  # noqa: F401  (declares the ops; until load_all has "conv")

_CONV2D, _CONV_T2D, _CONV2D_W = OPS["conv2d"], OPS["conv_transpose2d"], OPS["conv2d_weight"]
_MAX_POOL_BWD, _MAX_POOL_SEL = OPS["max_pool2d_backward"], OPS["max_pool2d_select"]
_AVG_POOL, _AVG_POOL_BWD = OPS["avg_pool2d"], OPS["avg_pool2d_backward"]
_ADAPTIVE, _ADAPTIVE_BWD = OPS["adaptive_avg_pool2d"], OPS["adaptive_avg_pool2d_backward"]
_UPSAMPLE, _UPSAMPLE_BWD = OPS["upsample_nearest2d"], OPS["upsample_nearest2d_backward"]


def _output_padding(x_shape, gy_shape, kernel_size, stride, padding, dilation):
    """The output_padding that makes conv_transpose2d of gy come back to x's size."""
    return tuple(int(n + p0 + p1 - ((o - 1) * s + d * (k - 1) + 1))
                 for n, o, k, s, d, (p0, p1) in zip(x_shape[2:], gy_shape[2:], kernel_size, stride, dilation,
                                                    padding))


def _conv_t_as_conv_padding(padding, output_padding, stride):
    """conv_transpose2d's padding seen from the conv2d it is the adjoint of: rows that
    output_padding >= stride adds are cropped (negative padding) so sizes match."""
    return tuple((p0, p1 - (op // s) * s) for (p0, p1), op, s in zip(padding, output_padding, stride))


def _conv2d_dx(g, w, x_shape, stride, padding, dilation, groups):
    op = _output_padding(x_shape, g._array.shape, w._array.shape[2:], stride, padding, dilation)
    return apply(_CONV_T2D, (g, w, 0), {"stride": stride, "padding": padding, "output_padding": op,
                                        "dilation": dilation, "groups": groups})


def _conv2d_dw(g, x, w_shape, stride, padding, dilation, groups):
    return apply(_CONV2D_W, (x, g), {"kernel_size": tuple(w_shape[2:]), "stride": stride, "padding": padding,
                                     "dilation": dilation, "groups": groups})


def _bias_grad(g):
    return g.sum(dim=(0, 2, 3))


def _conv_t_dx(g, w, stride, padding, output_padding, dilation, groups):
    pads = _conv_t_as_conv_padding(padding, output_padding, stride)
    return apply(_CONV2D, (g, w, 0), {"stride": stride, "padding": pads, "dilation": dilation, "groups": groups})


def _conv_t_dw(g, x, w_shape, stride, padding, output_padding, dilation, groups):
    pads = _conv_t_as_conv_padding(padding, output_padding, stride)
    return apply(_CONV2D_W, (g, x), {"kernel_size": tuple(w_shape[2:]), "stride": stride, "padding": pads,
                                     "dilation": dilation, "groups": groups})


def _conv_w_dx(g, gy, x_shape, kernel_size, stride, padding, dilation, groups):
    op = _output_padding(x_shape, gy._array.shape, kernel_size, stride, padding, dilation)
    return apply(_CONV_T2D, (gy, g, 0), {"stride": stride, "padding": padding, "output_padding": op,
                                         "dilation": dilation, "groups": groups})


def _conv_w_dgy(g, x, stride, padding, dilation, groups):
    return apply(_CONV2D, (x, g, 0), {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups})


defgrad("conv2d", _conv2d_dx, _conv2d_dw, _bias_grad)
defgrad("conv_transpose2d", _conv_t_dx, _conv_t_dw, _bias_grad)
defgrad("conv2d_weight", _conv_w_dx, _conv_w_dgy)


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
