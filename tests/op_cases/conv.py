"""Op-table entries: convolution, pooling and nearest upsampling (eagerc.nn.functional).

The references below are written independently of eagerc's im2col kernels: plain
numpy with explicit Python loops over output (or input) positions, on tiny sizes.
Second-derivative cases run `autograd.grad(..., create_graph=True)` so that the
gradcheck differentiates the backward ops (conv_transpose2d, conv2d_weight,
max_pool2d_backward/select, the *_backward adjoints) too.
"""
import itertools
import math

import numpy as np

import eagerc
import eagerc.nn.functional as F
from optable import Case, distinct

# ---------------------------------------------------------------- references (explicit loops)


def _maybe_unbatched(ref):
    """A batched (N, C, ...) reference that also takes one unbatched (C, ...) sample."""
    def run(x, *args, **kw):
        if x.ndim == 4:
            return ref(x, *args, **kw)
        out = ref(x[None], *args, **kw)
        return tuple(o[0] for o in out) if isinstance(out, tuple) else out[0]
    return run


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _same_pads(k, d):
    total = d * (k - 1)
    return (total // 2, total - total // 2)


def ref_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """out[n, o, i, j] = sum_{c,u,v} xpad[n, g*cg + c, i*s + u*d, j*s + v*d] * w[o, c, u, v]."""
    s, d = _pair(stride), _pair(dilation)
    co, cg, kh, kw = w.shape
    if padding == "same":
        pads = (_same_pads(kh, d[0]), _same_pads(kw, d[1]))
    elif padding == "valid":
        pads = ((0, 0), (0, 0))
    else:
        p = _pair(padding)
        pads = ((p[0], p[0]), (p[1], p[1]))
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    n, _, H, W = xp.shape
    oh = (H - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (W - d[1] * (kw - 1) - 1) // s[1] + 1
    out = np.zeros((n, co, oh, ow))
    per = co // groups
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * s[0]:i * s[0] + d[0] * (kh - 1) + 1:d[0], j * s[1]:j * s[1] + d[1] * (kw - 1) + 1:d[1]]
            for o in range(co):
                g = o // per
                out[:, o, i, j] = (patch[:, g * cg:(g + 1) * cg] * w[o]).sum(axis=(1, 2, 3))
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def ref_conv2d_grads(x, w, gy, stride=1, padding=0, dilation=1, groups=1):
    """(dx, dw) of sum(gy * conv2d(x, w)), by looping over output positions."""
    s, d, p = _pair(stride), _pair(dilation), _pair(padding)
    co, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    per = co // groups
    for i in range(gy.shape[2]):
        for j in range(gy.shape[3]):
            rows = slice(i * s[0], i * s[0] + d[0] * (kh - 1) + 1, d[0])
            cols = slice(j * s[1], j * s[1] + d[1] * (kw - 1) + 1, d[1])
            for o in range(co):
                g = o // per
                ch = slice(g * cg, (g + 1) * cg)
                dxp[:, ch, rows, cols] += gy[:, o, i, j][:, None, None, None] * w[o]
                dw[o] += (gy[:, o, i, j][:, None, None, None] * xp[:, ch, rows, cols]).sum(axis=0)
    H, W = x.shape[2:]
    return dxp[:, :, p[0]:p[0] + H, p[1]:p[1] + W], dw


def ref_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Scatter definition: every input pixel adds x * w into the output window it maps to."""
    s, p, op, d = _pair(stride), _pair(padding), _pair(output_padding), _pair(dilation)
    n, ci, h, wd = x.shape
    _, cog, kh, kw = w.shape
    Hp = (h - 1) * s[0] + d[0] * (kh - 1) + 1 + op[0]
    Wp = (wd - 1) * s[1] + d[1] * (kw - 1) + 1 + op[1]
    out = np.zeros((n, cog * groups, Hp, Wp))
    cig = ci // groups
    for i in range(h):
        for j in range(wd):
            for c in range(ci):
                g = c // cig
                for u in range(kh):
                    for v in range(kw):
                        out[:, g * cog:(g + 1) * cog, i * s[0] + u * d[0], j * s[1] + v * d[1]] += \
                            x[:, c, i, j][:, None] * w[c, :, u, v]
    out = out[:, :, p[0]:Hp - p[0], p[1]:Wp - p[1]]
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return out


def _pool_out(size, k, s, p, d, ceil_mode):
    span = size + 2 * p - d * (k - 1) - 1
    o = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (o - 1) * s >= size + p:
        o -= 1
    return o


@_maybe_unbatched
def ref_max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """(values, flat indices): first maximum of each window; padding never wins."""
    k = _pair(kernel_size)
    s = _pair(stride if stride is not None else kernel_size)
    p, d = _pair(padding), _pair(dilation)
    n, c, H, W = x.shape
    oh, ow = _pool_out(H, k[0], s[0], p[0], d[0], ceil_mode), _pool_out(W, k[1], s[1], p[1], d[1], ceil_mode)
    out = np.zeros((n, c, oh, ow))
    idx = np.zeros((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            best = np.full((n, c), -np.inf)
            arg = np.full((n, c), -1)
            for u in range(k[0]):
                for v in range(k[1]):
                    r, q = i * s[0] - p[0] + u * d[0], j * s[1] - p[1] + v * d[1]
                    if 0 <= r < H and 0 <= q < W:
                        better = x[:, :, r, q] > best
                        best = np.where(better, x[:, :, r, q], best)
                        arg = np.where(better, r * W + q, arg)
            out[:, :, i, j], idx[:, :, i, j] = best, arg
    return out, idx


def ref_max_pool2d_backward(x, gy, *args):
    _, idx = ref_max_pool2d(x, *args)
    n, c = x.shape[:2]
    dx = np.zeros((n, c, x.shape[2] * x.shape[3]))
    for a in range(n):
        for b in range(c):
            for k, g in zip(idx[a, b].ravel(), gy[a, b].ravel()):
                dx[a, b, k] += g
    return dx.reshape(x.shape)


@_maybe_unbatched
def ref_avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None):
    k = _pair(kernel_size)
    s = _pair(stride if stride is not None else kernel_size)
    p = _pair(padding)
    n, c, H, W = x.shape
    oh, ow = _pool_out(H, k[0], s[0], p[0], 1, ceil_mode), _pool_out(W, k[1], s[1], p[1], 1, ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
            h1, w1 = min(h0 + k[0], H + p[0]), min(w0 + k[1], W + p[1])
            pool = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
            total = x[:, :, h0:h1, w0:w1].sum(axis=(2, 3))
            div = divisor_override or (pool if count_include_pad else (h1 - h0) * (w1 - w0))
            out[:, :, i, j] = total / div
    return out


@_maybe_unbatched
def ref_adaptive_avg_pool2d(x, output_size):
    oh, ow = _pair(output_size)
    H, W = x.shape[2:]
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, h1 = (i * H) // oh, math.ceil((i + 1) * H / oh)
            w0, w1 = (j * W) // ow, math.ceil((j + 1) * W / ow)
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return out


def ref_nearest(x, out_size, exact=False):
    """out[..., i, j] = x[..., floor(i * H / oh), floor(j * W / ow)] (clamped); exact: centres."""
    H, W = x.shape[2:]
    oh, ow = out_size
    out = np.zeros(x.shape[:2] + (oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            if exact:
                r, q = math.floor((i + 0.5) * H / oh), math.floor((j + 0.5) * W / ow)
            else:
                r, q = math.floor(i * H / oh), math.floor(j * W / ow)
            out[:, :, i, j] = x[:, :, min(r, H - 1), min(q, W - 1)]
    return out


def _1d(ref):
    """A 2-d reference applied to (N, C, L) as (N, C, 1, L)."""
    def run(x, *args, **kw):
        out = ref(x[..., None, :], *args, **kw)
        return tuple(o[..., 0, :] for o in out) if isinstance(out, tuple) else out[..., 0, :]
    return run


def _rg(t):
    """t itself when it requires grad (gradcheck), else a leaf that does (forward tests)."""
    return t if t.requires_grad else t.detach().requires_grad_()


def _grad(f, inputs, gy):
    """autograd.grad of f(*inputs) weighted by gy, with create_graph (so it differentiates again)."""
    inputs = tuple(_rg(t) for t in inputs)
    return eagerc.autograd.grad(f(*inputs), inputs, grad_outputs=gy, create_graph=True)


# ---------------------------------------------------------------- cases

CONV_SHAPES = [((2, 3, 5, 6), (4, 3, 3, 2), (4,)), ((1, 2, 4, 4), (3, 2, 1, 1), (3,)),
               ((2, 1, 3, 3), (2, 1, 3, 3), (2,))]

CASES = [
    Case("conv2d", F.conv2d, ref_conv2d, CONV_SHAPES, grad_variants=3),
    Case("conv2d_nobias", lambda x, w: F.conv2d(x, w), ref_conv2d, [s[:2] for s in CONV_SHAPES]),
    Case("conv2d_stride_padding", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
         lambda x, w, b: ref_conv2d(x, w, b, 2, 1),
         [((2, 3, 5, 6), (4, 3, 3, 3), (4,)), ((1, 1, 4, 4), (2, 1, 2, 2), (2,))]),
    Case("conv2d_asymmetric", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(0, 2), dilation=(1, 2)),
         lambda x, w, b: ref_conv2d(x, w, b, (2, 1), (0, 2), (1, 2)), [((2, 2, 6, 5), (3, 2, 3, 2), (3,))]),
    Case("conv2d_dilation", lambda x, w, b: F.conv2d(x, w, b, padding=2, dilation=2),
         lambda x, w, b: ref_conv2d(x, w, b, 1, 2, 2), [((2, 2, 5, 5), (3, 2, 3, 3), (3,))]),
    Case("conv2d_groups", lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2),
         lambda x, w, b: ref_conv2d(x, w, b, 1, 1, 1, 2), [((2, 4, 4, 5), (6, 2, 3, 3), (6,))]),
    Case("conv2d_depthwise", lambda x, w: F.conv2d(x, w, stride=2, groups=3),
         lambda x, w: ref_conv2d(x, w, None, 2, 0, 1, 3), [((2, 3, 5, 5), (3, 1, 2, 2))]),
    Case("conv2d_same_even_kernel", lambda x, w, b: F.conv2d(x, w, b, padding="same"),
         lambda x, w, b: ref_conv2d(x, w, b, padding="same"), [((2, 2, 5, 4), (3, 2, 2, 4), (3,))]),
    Case("conv2d_same_dilated", lambda x, w: F.conv2d(x, w, padding="same", dilation=(2, 1)),
         lambda x, w: ref_conv2d(x, w, None, 1, "same", (2, 1)), [((1, 2, 6, 5), (2, 2, 3, 3))]),
    Case("conv2d_valid", lambda x, w: F.conv2d(x, w, padding="valid"), ref_conv2d, [((1, 2, 4, 5), (2, 2, 2, 3))]),
    Case("conv2d_unbatched", F.conv2d, lambda x, w, b: ref_conv2d(x[None], w, b)[0], [((2, 4, 4), (3, 2, 3, 3), (3,))]),
    Case("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
         lambda x, w, b: _1d(ref_conv2d)(x, w[:, :, None, :], b, (1, 2), (0, 1)),
         [((2, 3, 7), (4, 3, 3), (4,)), ((1, 1, 4), (2, 1, 1), (2,))]),
    Case("conv1d_same_groups", lambda x, w: F.conv1d(x, w, padding="same", dilation=2, groups=2),
         lambda x, w: _1d(ref_conv2d)(x, w[:, :, None, :], None, 1, "same", (1, 2), 2), [((2, 4, 6), (4, 2, 3))]),
    Case("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
         lambda x, w, b: ref_conv_transpose2d(x, w, b, 2, 1, 1),
         [((2, 3, 4, 3), (3, 2, 3, 3), (2,)), ((1, 2, 2, 2), (2, 3, 2, 2), (3,))]),
    Case("conv_transpose2d_stride1", lambda x, w, b: F.conv_transpose2d(x, w, b),
         lambda x, w, b: ref_conv_transpose2d(x, w, b), [((2, 3, 4, 3), (3, 2, 3, 2), (2,))]),
    Case("conv_transpose2d_groups_dilation",
         lambda x, w: F.conv_transpose2d(x, w, stride=(1, 2), padding=(1, 0), groups=2, dilation=(2, 1)),
         lambda x, w: ref_conv_transpose2d(x, w, None, (1, 2), (1, 0), 0, 2, (2, 1)), [((2, 4, 3, 3), (4, 3, 2, 3))]),
    Case("conv_transpose2d_output_padding_dilation",  # output_padding >= stride (allowed when < dilation)
         lambda x, w: F.conv_transpose2d(x, w, stride=1, output_padding=1, dilation=2),
         lambda x, w: ref_conv_transpose2d(x, w, None, 1, 0, 1, 1, 2), [((1, 2, 3, 3), (2, 2, 2, 2))]),
    Case("conv_transpose1d", lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3, padding=1, output_padding=2),
         lambda x, w, b: _1d(ref_conv_transpose2d)(x, w[:, :, None, :], b, (1, 3), (0, 1), (0, 2)),
         [((2, 2, 4), (2, 3, 3), (3,))]),
    # second derivatives: the gradient itself, differentiated again by gradcheck
    Case("conv2d_double_backward",
         lambda x, w, gy: _grad(lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=2), (x, w), gy),
         lambda x, w, gy: ref_conv2d_grads(x, w, gy, 2, 1, 1, 2), [((2, 4, 5, 5), (4, 2, 3, 2), (2, 4, 3, 3))]),
    Case("conv2d_double_backward_dilated",
         lambda x, w, gy: _grad(lambda x, w: F.conv2d(x, w, padding=(0, 1), dilation=(1, 2)), (x, w), gy),
         lambda x, w, gy: ref_conv2d_grads(x, w, gy, 1, (0, 1), (1, 2)), [((2, 2, 4, 5), (3, 2, 2, 2), (2, 3, 3, 5))]),
    Case("conv_transpose2d_double_backward",
         lambda x, w, gy: _grad(lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1), (x, w), gy),
         # conv_transpose2d is conv2d's input-gradient: its own gradients are a conv2d and a weight gradient
         lambda x, w, gy: (ref_conv2d(gy, w, None, 2), ref_conv2d_grads(gy, w, x, 2)[1]),
         [((2, 3, 2, 3), (3, 2, 2, 2), (2, 2, 5, 7))]),
    # pooling
    Case("max_pool2d", lambda x: F.max_pool2d(x, 2), lambda x: ref_max_pool2d(x, 2)[0],
         [((2, 3, 4, 6),), ((1, 2, 5, 5),), ((2, 3, 4),)], make=(distinct,)),
    Case("max_pool2d_padding", lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
         lambda x: ref_max_pool2d(x, 3, 2, 1)[0], [((2, 2, 5, 6),)], make=(distinct,)),
    Case("max_pool2d_ceil_dilation", lambda x: F.max_pool2d(x, (2, 3), (2, 1), (1, 0), (1, 2), ceil_mode=True),
         lambda x: ref_max_pool2d(x, (2, 3), (2, 1), (1, 0), (1, 2), True)[0], [((2, 2, 6, 7),)], make=(distinct,)),
    Case("max_pool2d_overlap", lambda x: F.max_pool2d(x, 3, stride=1),
         lambda x: ref_max_pool2d(x, 3, 1)[0], [((1, 2, 5, 5),)], make=(distinct,)),
    Case("max_pool2d_indices", lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
         lambda x: ref_max_pool2d(x, 3, 2, 1), [((2, 2, 5, 6),)], make=(distinct,)),
    Case("max_pool2d_double_backward",
         lambda x, gy: _grad(lambda x: F.max_pool2d(x, 2, 1), (x,), gy)[0],
         lambda x, gy: ref_max_pool2d_backward(x, gy, 2, 1), [((2, 2, 4, 4), (2, 2, 3, 3))], make=(distinct, None)),
    Case("max_pool1d", lambda x: F.max_pool1d(x, 3, 2, padding=1),
         lambda x: _1d(ref_max_pool2d)(x, (1, 3), (1, 2), (0, 1))[0], [((2, 3, 8),), ((3, 5),)], make=(distinct,)),
    Case("max_pool1d_indices", lambda x: F.max_pool1d(x, 2, return_indices=True),
         lambda x: _1d(ref_max_pool2d)(x, (1, 2)), [((2, 3, 7),)], make=(distinct,)),
    Case("avg_pool2d", lambda x: F.avg_pool2d(x, 2), lambda x: ref_avg_pool2d(x, 2),
         [((2, 3, 4, 6),), ((1, 2, 5, 5),), ((3, 4, 4),)]),
    Case("avg_pool2d_padding", lambda x: F.avg_pool2d(x, 3, 2, 1), lambda x: ref_avg_pool2d(x, 3, 2, 1),
         [((2, 2, 5, 6),)]),
    Case("avg_pool2d_exclude_pad_ceil", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
         lambda x: ref_avg_pool2d(x, 3, 2, 1, True, False), [((2, 2, 6, 5),)]),
    Case("avg_pool2d_ceil_include_pad", lambda x: F.avg_pool2d(x, (2, 3), (2, 2), (1, 1), ceil_mode=True),
         lambda x: ref_avg_pool2d(x, (2, 3), (2, 2), (1, 1), True, True), [((1, 2, 6, 6),)]),
    Case("avg_pool2d_divisor", lambda x: F.avg_pool2d(x, 2, 1, divisor_override=3),
         lambda x: ref_avg_pool2d(x, 2, 1, divisor_override=3), [((1, 2, 3, 4),)]),
    Case("avg_pool2d_double_backward",
         lambda x, gy: _grad(lambda x: F.avg_pool2d(x, 3, 2, 1) * x.sum(), (x,), gy)[0],
         lambda x, gy: _avg_double_ref(x, gy), [((1, 2, 4, 5), (1, 2, 2, 3))]),
    Case("avg_pool1d", lambda x: F.avg_pool1d(x, 3, 2, 1), lambda x: _1d(ref_avg_pool2d)(x, (1, 3), (1, 2), (0, 1)),
         [((2, 3, 7),)]),
    Case("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
         lambda x: ref_adaptive_avg_pool2d(x, (3, 4)), [((2, 3, 5, 7),), ((1, 2, 3, 4),), ((1, 1, 2, 3),)]),
    Case("adaptive_avg_pool2d_global", lambda x: F.adaptive_avg_pool2d(x, 1),
         lambda x: x.mean(axis=(-2, -1), keepdims=True), [((2, 3, 4, 5),), ((3, 2, 3),)]),
    Case("adaptive_avg_pool2d_none", lambda x: F.adaptive_avg_pool2d(x, (None, 2)),
         lambda x: ref_adaptive_avg_pool2d(x, (x.shape[2], 2)), [((1, 2, 3, 5),)]),
    Case("adaptive_avg_pool2d_double_backward",
         lambda x, gy: _grad(lambda x: F.adaptive_avg_pool2d(x * x, (2, 3)), (x,), gy)[0],
         lambda x, gy: _adaptive_double_ref(x, gy), [((1, 2, 5, 4), (1, 2, 2, 3))]),
    Case("adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x, 3),
         lambda x: _1d(ref_adaptive_avg_pool2d)(x, (1, 3)), [((2, 3, 7),)]),
    Case("interpolate_scale2", lambda x: F.interpolate(x, scale_factor=2),
         lambda x: ref_nearest(x, (2 * x.shape[2], 2 * x.shape[3])), [((2, 3, 3, 4),)]),
    Case("interpolate_size", lambda x: F.interpolate(x, size=(5, 3)), lambda x: ref_nearest(x, (5, 3)),
         [((2, 2, 3, 6),), ((1, 1, 4, 4),)]),
    Case("interpolate_nearest_exact", lambda x: F.interpolate(x, size=(5, 2), mode="nearest-exact"),
         lambda x: ref_nearest(x, (5, 2), exact=True), [((1, 2, 3, 5),)]),
    Case("interpolate_1d", lambda x: F.interpolate(x, scale_factor=3),
         lambda x: _1d(ref_nearest)(x, (1, 3 * x.shape[2])), [((2, 3, 4),)]),
    Case("interpolate_double_backward",
         lambda x, gy: _grad(lambda x: F.interpolate(x * x, size=(5, 3)), (x,), gy)[0],
         lambda x, gy: _nearest_double_ref(x, gy, (5, 3)), [((1, 2, 3, 6), (1, 2, 5, 3))]),
]


def _scatter_adjoint(ref, x_shape, gy):
    """The adjoint of a linear reference map, column by column (tiny sizes only)."""
    n = int(np.prod(x_shape))
    jac = np.stack([ref(np.eye(n)[k].reshape(x_shape)).ravel() for k in range(n)], axis=1)
    return (jac.T @ gy.ravel()).reshape(x_shape)


def _avg_double_ref(x, gy):
    # d/dx of sum(gy * avg(x) * sum(x)) = avg^T(gy) * sum(x) + sum(gy * avg(x))
    adj = _scatter_adjoint(lambda a: ref_avg_pool2d(a, 3, 2, 1), x.shape, gy)
    return adj * x.sum() + (gy * ref_avg_pool2d(x, 3, 2, 1)).sum()


def _adaptive_double_ref(x, gy):
    return 2 * x * _scatter_adjoint(lambda a: ref_adaptive_avg_pool2d(a, (2, 3)), x.shape, gy)


def _nearest_double_ref(x, gy, size):
    return 2 * x * _scatter_adjoint(lambda a: ref_nearest(a, size), x.shape, gy)


# ---------------------------------------------------------------- 3-d convolutions (loops over output positions)

def _ntup(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def ref_conv3d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """out[n, o, *i] = sum over the window at i*stride (step dilation) of xpad[n, group of o] * w[o]."""
    s, d, k = _ntup(stride, 3), _ntup(dilation, 3), w.shape[2:]
    if padding == "same":
        pads = tuple(_same_pads(kk, dd) for kk, dd in zip(k, d))
    else:
        pads = tuple((p, p) for p in _ntup(0 if padding == "valid" else padding, 3))
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    co, cg = w.shape[:2]
    size = tuple((H - dd * (kk - 1) - 1) // ss + 1 for H, kk, ss, dd in zip(xp.shape[2:], k, s, d))
    out = np.zeros(x.shape[:1] + (co,) + size)
    per = co // groups
    for pos in np.ndindex(*size):
        patch = xp[(slice(None), slice(None)) + tuple(slice(p * ss, p * ss + dd * (kk - 1) + 1, dd)
                                                      for p, ss, dd, kk in zip(pos, s, d, k))]
        for o in range(co):
            g = o // per
            out[(slice(None), o) + pos] = (patch[:, g * cg:(g + 1) * cg] * w[o]).sum(axis=(1, 2, 3, 4))
    return out if b is None else out + b.reshape(1, -1, 1, 1, 1)


def ref_conv_transpose3d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Scatter definition: every input voxel adds x * w into the output window it maps to."""
    s, p, op, d = (_ntup(v, 3) for v in (stride, padding, output_padding, dilation))
    ci, cog, k = w.shape[0], w.shape[1], w.shape[2:]
    full = tuple((i - 1) * ss + dd * (kk - 1) + 1 + o for i, ss, dd, kk, o in zip(x.shape[2:], s, d, k, op))
    out = np.zeros(x.shape[:1] + (cog * groups,) + full)
    cig = ci // groups
    for pos in np.ndindex(*x.shape[2:]):
        window = tuple(slice(q * ss, q * ss + dd * (kk - 1) + 1, dd) for q, ss, dd, kk in zip(pos, s, d, k))
        for c in range(ci):
            g = c // cig
            out[(slice(None), slice(g * cog, (g + 1) * cog)) + window] += \
                x[(slice(None), c) + pos][:, None, None, None, None] * w[c]
    out = out[(slice(None), slice(None)) + tuple(slice(pp, f - pp) for pp, f in zip(p, full))]
    return out if b is None else out + b.reshape(1, -1, 1, 1, 1)


CASES += [
    Case("conv3d", F.conv3d, ref_conv3d,
         [((2, 3, 4, 5, 3), (4, 3, 2, 3, 2), (4,)), ((1, 2, 3, 3, 3), (2, 2, 1, 1, 1), (2,))]),
    Case("conv3d_stride_padding_dilation",
         lambda x, w, b: F.conv3d(x, w, b, stride=(2, 1, 2), padding=(1, 0, 2), dilation=(1, 2, 1)),
         lambda x, w, b: ref_conv3d(x, w, b, (2, 1, 2), (1, 0, 2), (1, 2, 1)),
         [((2, 2, 4, 5, 4), (3, 2, 2, 2, 3), (3,))]),
    Case("conv3d_groups_same", lambda x, w: F.conv3d(x, w, padding="same", groups=2),
         lambda x, w: ref_conv3d(x, w, None, 1, "same", 1, 2), [((1, 4, 3, 4, 4), (4, 2, 2, 3, 2))]),
    Case("conv3d_unbatched", F.conv3d, lambda x, w, b: ref_conv3d(x[None], w, b)[0],
         [((2, 3, 4, 3), (3, 2, 2, 2, 2), (3,))]),
    Case("conv_transpose3d", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2, padding=1, output_padding=1),
         lambda x, w, b: ref_conv_transpose3d(x, w, b, 2, 1, 1), [((2, 3, 2, 3, 2), (3, 2, 3, 2, 3), (2,))]),
    Case("conv_transpose3d_groups_dilation",
         lambda x, w: F.conv_transpose3d(x, w, stride=(1, 2, 1), padding=(1, 0, 0), groups=2, dilation=(2, 1, 1)),
         lambda x, w: ref_conv_transpose3d(x, w, None, (1, 2, 1), (1, 0, 0), 0, 2, (2, 1, 1)),
         [((1, 4, 3, 2, 3), (4, 1, 2, 2, 2))]),
    Case("conv3d_double_backward",
         lambda x, w, gy: _grad(lambda x, w: F.conv3d(x, w, stride=2, padding=1), (x, w), gy),
         lambda x, w, gy: (_scatter_adjoint(lambda a: ref_conv3d(a, w, None, 2, 1), x.shape, gy),
                           _scatter_adjoint(lambda a: ref_conv3d(x, a, None, 2, 1), w.shape, gy)),
         [((1, 2, 3, 3, 4), (2, 2, 2, 2, 2), (1, 2, 2, 2, 3))]),
]


# ---------------------------------------------------------------- 3-d and adaptive max pooling (loops over windows)

def _window(o, k, s, p, d, size):
    """Input positions of output o's window along one axis that fall inside the input."""
    return [o * s - p + j * d for j in range(k) if 0 <= o * s - p + j * d < size]


def ref_max_pool3d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """(values, flat indices into D*H*W): the first maximum in (d, h, w) order; padding never wins."""
    k, p, d = _ntup(kernel_size, 3), _ntup(padding, 3), _ntup(dilation, 3)
    s = _ntup(stride if stride is not None else kernel_size, 3)
    size = x.shape[2:]
    out_size = tuple(_pool_out(*a, ceil_mode) for a in zip(size, k, s, p, d))
    flat = x.reshape(x.shape[:2] + (-1,))
    out, idx = np.zeros(x.shape[:2] + out_size), np.zeros(x.shape[:2] + out_size, np.int64)
    for pos in np.ndindex(*out_size):
        cells = [np.ravel_multi_index(c, size) for c in itertools.product(*(
            _window(o, *a) for o, a in zip(pos, zip(k, s, p, d, size))))]
        vals = flat[:, :, cells]
        best = vals.argmax(axis=-1)          # the first maximum
        out[(slice(None), slice(None)) + pos] = np.take_along_axis(vals, best[..., None], -1)[..., 0]
        idx[(slice(None), slice(None)) + pos] = np.asarray(cells)[best]
    return out, idx


def ref_avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None):
    k, p = _ntup(kernel_size, 3), _ntup(padding, 3)
    s = _ntup(stride if stride is not None else kernel_size, 3)
    size = x.shape[2:]
    out_size = tuple(_pool_out(n, kk, ss, pp, 1, ceil_mode) for n, kk, ss, pp in zip(size, k, s, p))
    out = np.zeros(x.shape[:2] + out_size)
    for pos in np.ndindex(*out_size):
        ranges = [_window(o, kk, ss, pp, 1, n) for o, kk, ss, pp, n in zip(pos, k, s, p, size)]
        total = x[(slice(None), slice(None)) + np.ix_(*ranges)].sum(axis=(2, 3, 4))
        if divisor_override:
            div = divisor_override
        elif count_include_pad:   # the window clipped to the padded input
            div = math.prod(min(o * ss - pp + kk, n + pp) - (o * ss - pp)
                            for o, kk, ss, pp, n in zip(pos, k, s, p, size))
        else:
            div = math.prod(len(r) for r in ranges)
        out[(slice(None), slice(None)) + pos] = total / div
    return out


def _adaptive_cells(pos, out_size, size):
    return [range((o * n) // m, -(-((o + 1) * n) // m)) for o, m, n in zip(pos, out_size, size)]


def ref_adaptive_pool(x, out_size, kind):
    """Adaptive 'avg' (values) or 'max' ((values, flat indices)) over windows
    [floor(i*n/o), ceil((i+1)*n/o)) along each axis."""
    size = x.shape[2:]
    out_size = tuple(n if o is None else o for o, n in zip(out_size, size))
    flat = x.reshape(x.shape[:2] + (-1,))
    out, idx = np.zeros(x.shape[:2] + out_size), np.zeros(x.shape[:2] + out_size, np.int64)
    for pos in np.ndindex(*out_size):
        cells = [np.ravel_multi_index(c, size) for c in itertools.product(*_adaptive_cells(pos, out_size, size))]
        vals = flat[:, :, cells]
        at = (slice(None), slice(None)) + pos
        if kind == "avg":
            out[at] = vals.mean(axis=-1)
        else:
            best = vals.argmax(axis=-1)
            out[at], idx[at] = np.take_along_axis(vals, best[..., None], -1)[..., 0], np.asarray(cells)[best]
    return out if kind == "avg" else (out, idx)


def _batched(ref, nd):
    """A batched reference that also takes one unbatched sample."""
    def run(x, *args, **kw):
        if x.ndim == nd + 2:
            return ref(x, *args, **kw)
        out = ref(x[None], *args, **kw)
        return tuple(o[0] for o in out) if isinstance(out, tuple) else out[0]
    return run


# ---------------------------------------------------------------- interpolation (per output position)

def _src(i, out, size, scale, align_corners, cubic):
    if align_corners:
        return i * (size - 1) / (out - 1) if out > 1 else 0.0
    v = (i + 0.5) * (1.0 / scale if scale else size / out) - 0.5
    return v if cubic else max(v, 0.0)


def _cubic(t, A=-0.75):
    """Keys' cubic convolution weights of taps -1, 0, 1, 2 at fraction t."""
    def w(x):
        x = abs(x)
        return ((A + 2) * x - (A + 3)) * x * x + 1 if x <= 1 else ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    return [w(t + 1), w(t), w(1 - t), w(2 - t)]


def _axis_taps(i, out, size, scale, align_corners, cubic):
    v = _src(i, out, size, scale, align_corners, cubic)
    if cubic:
        f = math.floor(v)
        return [(min(max(f - 1 + k, 0), size - 1), w) for k, w in enumerate(_cubic(v - f))]
    f = min(int(v), size - 1)
    return [(f, 1 - (v - f)), (min(f + 1, size - 1), v - f)]


def ref_interpolate(x, size, align_corners=False, cubic=False, scales=None):
    """Linear / bilinear / trilinear (or bicubic) interpolation, one output position at a time."""
    scales = scales or (None,) * len(size)
    out = np.zeros(x.shape[:2] + tuple(size))
    for pos in np.ndindex(*size):
        taps = [_axis_taps(i, o, n, sc, align_corners, cubic) for i, o, n, sc in zip(pos, size, x.shape[2:], scales)]
        for combo in itertools.product(*taps):
            out[(slice(None), slice(None)) + pos] += math.prod(w for _, w in combo) * \
                x[(slice(None), slice(None)) + tuple(i for i, _ in combo)]
    return out


def ref_nearest3d(x, size, exact=False):
    out = np.zeros(x.shape[:2] + tuple(size))
    for pos in np.ndindex(*size):
        src = tuple(min(math.floor((i + 0.5 * exact) * n / o), n - 1) for i, o, n in zip(pos, size, x.shape[2:]))
        out[(slice(None), slice(None)) + pos] = x[(slice(None), slice(None)) + src]
    return out


# ---------------------------------------------------------------- grid_sample and affine_grid (per output point)

def _reflect_scalar(v, twice_low, twice_high):
    if twice_low == twice_high:
        return 0.0
    lo, span = twice_low / 2, (twice_high - twice_low) / 2
    v = abs(v - lo)
    extra, flips = math.fmod(v, span), math.floor(v / span)
    return extra + lo if flips % 2 == 0 else span - extra + lo


def _pad_scalar(v, size, padding_mode, align_corners):
    if padding_mode == "reflection":
        v = _reflect_scalar(v, 0, 2 * (size - 1)) if align_corners else _reflect_scalar(v, -1, 2 * size - 1)
    if padding_mode != "zeros":
        v = min(max(v, 0), size - 1)
    return v


def ref_grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """PyTorch's grid sampler, one output point at a time (coordinates in (x, y[, z]) order)."""
    nd = x.ndim - 2
    sizes = x.shape[:1:-1]
    out = np.zeros(x.shape[:2] + grid.shape[1:-1])

    def read(n, cell):
        if all(0 <= c < s for c, s in zip(cell, sizes)):
            return x[(n, slice(None)) + tuple(reversed(cell))]
        return 0.0
    for n in range(x.shape[0]):
        for pos in np.ndindex(*grid.shape[1:-1]):
            u = [(g + 1) / 2 * (s - 1) if align_corners else ((g + 1) * s - 1) / 2
                 for g, s in zip(grid[(n,) + pos], sizes)]
            acc = 0.0
            if mode == "bicubic":
                f = [math.floor(v) for v in u]
                wx, wy = _cubic(u[0] - f[0]), _cubic(u[1] - f[1])
                for i in range(4):
                    for j in range(4):
                        cell = (int(_pad_scalar(f[0] - 1 + j, sizes[0], padding_mode, align_corners)),
                                int(_pad_scalar(f[1] - 1 + i, sizes[1], padding_mode, align_corners)))
                        acc = acc + wx[j] * wy[i] * read(n, cell)
            else:
                u = [_pad_scalar(v, s, padding_mode, align_corners) for v, s in zip(u, sizes)]
                if mode == "nearest":
                    acc = read(n, tuple(int(round(v)) for v in u))   # round half to even, as nearbyint
                else:
                    f = [math.floor(v) for v in u]
                    for corner in itertools.product((0, 1), repeat=nd):
                        w = math.prod(v - fk if c else fk + 1 - v for v, fk, c in zip(u, f, corner))
                        acc = acc + w * read(n, tuple(fk + c for fk, c in zip(f, corner)))
            out[(n, slice(None)) + pos] = acc
    return out


def ref_affine_grid(theta, size, align_corners=False):
    spatial = size[2:]

    def coord(i, n):
        if n == 1:
            return 0.0
        return -1 + 2 * i / (n - 1) if align_corners else (2 * i + 1) / n - 1
    out = np.zeros((size[0],) + tuple(spatial) + (len(spatial),))
    for pos in np.ndindex(*spatial):
        base = np.array([coord(i, n) for i, n in zip(pos[::-1], spatial[::-1])] + [1.0])
        out[(slice(None),) + pos] = theta @ base
    return out


def grid_values(rng, shape):  # grid points inside and somewhat outside [-1, 1] (padding modes)
    return rng.uniform(-1.25, 1.25, shape)


def theta_values(rng, shape):
    return rng.standard_normal(shape) * 0.5


# ---------------------------------------------------------------- unfold, fold, shuffles

def ref_unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (_pair(v) for v in (kernel_size, dilation, padding, stride))
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, c, H, W = xp.shape
    oh, ow = (H - dh * (kh - 1) - 1) // sh + 1, (W - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, c * kh * kw, oh * ow))
    for bi in range(oh):
        for bj in range(ow):
            for ch in range(c):
                for ki in range(kh):
                    for kj in range(kw):
                        out[:, (ch * kh + ki) * kw + kj, bi * ow + bj] = xp[:, ch, bi * sh + ki * dh, bj * sw + kj * dw]
    return out


def ref_fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """The adjoint of ref_unfold: every column's entries added back at their pixels."""
    shape = (x.shape[0], x.shape[1] // math.prod(_pair(kernel_size))) + _pair(output_size)
    return _scatter_adjoint(lambda a: ref_unfold(a, kernel_size, dilation, padding, stride), shape, x)


def ref_pixel_shuffle(x, r):
    n, c, h, w = x.shape
    out = np.zeros((n, c // (r * r), h * r, w * r))
    for ch in range(c):   # channel ch = (block, i, j) fills sub-pixel (i, j) of every r x r patch
        out[:, ch // (r * r), (ch % (r * r)) // r::r, ch % r::r] = x[:, ch]
    return out


def ref_pixel_unshuffle(x, r):
    n, c, h, w = x.shape
    out = np.zeros((n, c * r * r, h // r, w // r))
    for ch in range(c):
        for i in range(r):
            for j in range(r):
                out[:, (ch * r + i) * r + j] = x[:, ch, i::r, j::r]
    return out


def ref_channel_shuffle(x, g):
    c = x.shape[1]
    return x[:, [(k % g) * (c // g) + k // g for k in range(c)]]


def _fixed(shape, make=grid_values, seed=7):
    """A constant input (not differentiated): nearest-mode grids, whose gradient is zero."""
    return make(np.random.default_rng(seed), shape)


CASES += [
    # 3-d pooling (separable onto the 2-d ops) and adaptive max pooling (the N-d indices op + gather)
    Case("max_pool3d", lambda x: F.max_pool3d(x, 2), lambda x: _batched(ref_max_pool3d, 3)(x, 2)[0],
         [((2, 2, 4, 4, 5),), ((2, 3, 4, 4),)], make=(distinct,)),
    Case("max_pool3d_padding_ceil_dilation",
         lambda x: F.max_pool3d(x, (2, 3, 2), (2, 1, 2), (1, 1, 0), (1, 1, 2), ceil_mode=True),
         lambda x: ref_max_pool3d(x, (2, 3, 2), (2, 1, 2), (1, 1, 0), (1, 1, 2), True)[0], [((1, 2, 5, 4, 6),)],
         make=(distinct,)),
    Case("max_pool3d_indices", lambda x: F.max_pool3d(x, 3, 2, 1, return_indices=True),
         lambda x: ref_max_pool3d(x, 3, 2, 1), [((1, 2, 4, 5, 5),)], make=(distinct,)),
    Case("avg_pool3d", lambda x: F.avg_pool3d(x, 2), lambda x: _batched(ref_avg_pool3d, 3)(x, 2),
         [((2, 2, 4, 4, 5),), ((2, 3, 4, 4),)]),
    Case("avg_pool3d_padding_ceil", lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
         lambda x: ref_avg_pool3d(x, 3, 2, 1, True, False), [((1, 2, 4, 6, 5),)]),
    Case("avg_pool3d_include_pad_divisor", lambda x: F.avg_pool3d(x, (2, 3, 2), 1, (1, 1, 0), divisor_override=5),
         lambda x: ref_avg_pool3d(x, (2, 3, 2), 1, (1, 1, 0), divisor_override=5), [((1, 2, 3, 4, 3),)]),
    Case("avg_pool3d_ceil_include_pad", lambda x: F.avg_pool3d(x, 2, 2, 1, ceil_mode=True),
         lambda x: ref_avg_pool3d(x, 2, 2, 1, True), [((1, 1, 4, 5, 3),)]),
    Case("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (2, 3, None)),
         lambda x: _batched(ref_adaptive_pool, 3)(x, (2, 3, None), "avg"), [((2, 2, 5, 4, 3),), ((2, 3, 7, 2),)]),
    Case("adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True),
         lambda x: _batched(ref_adaptive_pool, 1)(x, (3,), "max"), [((2, 3, 7),), ((2, 5),)], make=(distinct,)),
    Case("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 4)),
         lambda x: _batched(ref_adaptive_pool, 2)(x, (3, 4), "max")[0], [((2, 2, 5, 7),), ((2, 7, 3),)],
         make=(distinct,)),
    Case("adaptive_max_pool2d_indices", lambda x: F.adaptive_max_pool2d(x, (None, 2), return_indices=True),
         lambda x: ref_adaptive_pool(x, (None, 2), "max"), [((1, 2, 3, 5),)], make=(distinct,)),
    Case("adaptive_max_pool3d", lambda x: F.adaptive_max_pool3d(x, (2, 1, 3), return_indices=True),
         lambda x: ref_adaptive_pool(x, (2, 1, 3), "max"), [((1, 2, 3, 4, 5),)], make=(distinct,)),
    # interpolation: separable index_select + weights (linear modes), nearest on the 2-d op, area = adaptive avg
    Case("interpolate_linear", lambda x: F.interpolate(x, scale_factor=2.5, mode="linear"),
         lambda x: ref_interpolate(x, (int(x.shape[2] * 2.5),), scales=(2.5,)), [((2, 3, 4),)]),
    Case("interpolate_linear_align_corners", lambda x: F.interpolate(x, size=3, mode="linear", align_corners=True),
         lambda x: ref_interpolate(x, (3,), align_corners=True), [((2, 2, 7),), ((1, 1, 1),)]),
    Case("interpolate_bilinear", lambda x: F.interpolate(x, size=(5, 3), mode="bilinear"),
         lambda x: ref_interpolate(x, (5, 3)), [((2, 2, 3, 6),), ((1, 1, 5, 3),)]),
    Case("interpolate_bilinear_align_corners_scale",
         lambda x: F.interpolate(x, scale_factor=(1.5, 0.5), mode="bilinear", align_corners=True),
         lambda x: ref_interpolate(x, (6, 3), align_corners=True), [((1, 2, 4, 6),)]),
    Case("interpolate_bilinear_recompute_scale",
         lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
         lambda x: ref_interpolate(x, (5, 8)), [((1, 2, 3, 5),)]),
    Case("interpolate_bicubic", lambda x: F.interpolate(x, scale_factor=1.7, mode="bicubic"),
         lambda x: ref_interpolate(x, (5, 8), cubic=True, scales=(1.7, 1.7)), [((1, 2, 3, 5),)]),
    Case("interpolate_bicubic_align_corners",
         lambda x: F.interpolate(x, size=(3, 7), mode="bicubic", align_corners=True),
         lambda x: ref_interpolate(x, (3, 7), align_corners=True, cubic=True), [((2, 1, 5, 4),)]),
    Case("interpolate_trilinear", lambda x: F.interpolate(x, size=(3, 4, 2), mode="trilinear"),
         lambda x: ref_interpolate(x, (3, 4, 2)), [((1, 2, 2, 3, 4),)]),
    Case("interpolate_trilinear_align_corners",
         lambda x: F.interpolate(x, scale_factor=(2, 1, 0.5), mode="trilinear", align_corners=True),
         lambda x: ref_interpolate(x, (4, 3, 2), align_corners=True), [((1, 2, 2, 3, 4),)]),
    Case("interpolate_area", lambda x: F.interpolate(x, size=(2, 3), mode="area"),
         lambda x: ref_adaptive_pool(x, (2, 3), "avg"), [((2, 2, 5, 7),)]),
    Case("interpolate_area_3d", lambda x: F.interpolate(x, scale_factor=0.5, mode="area"),
         lambda x: ref_adaptive_pool(x, (2, 1, 2), "avg"), [((1, 2, 4, 3, 5),)]),
    Case("interpolate_nearest_3d", lambda x: F.interpolate(x, size=(3, 5, 2)),
         lambda x: ref_nearest3d(x, (3, 5, 2)), [((1, 2, 2, 3, 4),)]),
    Case("interpolate_nearest_exact_3d", lambda x: F.interpolate(x, size=(5, 2, 3), mode="nearest-exact"),
         lambda x: ref_nearest3d(x, (5, 2, 3), exact=True), [((1, 2, 2, 3, 4),)]),
    Case("interpolate_bicubic_double_backward",
         lambda x, gy: _grad(lambda x: F.interpolate(x * x, size=(4, 5), mode="bicubic"), (x,), gy)[0],
         lambda x, gy: 2 * x * _scatter_adjoint(lambda a: ref_interpolate(a, (4, 5), cubic=True), x.shape, gy),
         [((1, 2, 3, 3), (1, 2, 4, 5))]),
    # grid_sample: differentiable in the input and (bilinear, bicubic) in the grid
    Case("grid_sample_bilinear", lambda x, g: F.grid_sample(x, g, align_corners=False),
         lambda x, g: ref_grid_sample(x, g), [((2, 2, 4, 5), (2, 3, 2, 2))], make=(None, grid_values)),
    Case("grid_sample_bilinear_border_align",
         lambda x, g: F.grid_sample(x, g, padding_mode="border", align_corners=True),
         lambda x, g: ref_grid_sample(x, g, "bilinear", "border", True), [((1, 2, 3, 4), (1, 2, 3, 2))],
         make=(None, grid_values)),
    Case("grid_sample_bilinear_reflection",
         lambda x, g: F.grid_sample(x, g, padding_mode="reflection", align_corners=False),
         lambda x, g: ref_grid_sample(x, g, "bilinear", "reflection"), [((1, 2, 3, 4), (1, 3, 2, 2))],
         make=(None, grid_values)),
    Case("grid_sample_bicubic", lambda x, g: F.grid_sample(x, g, mode="bicubic", align_corners=False),
         lambda x, g: ref_grid_sample(x, g, "bicubic"), [((1, 2, 4, 5), (1, 2, 3, 2))], make=(None, grid_values),
         atol16=0.1),   # bfloat16 coordinates and cubic weights (eps 2**-7) move each tap
    Case("grid_sample_bicubic_reflection_align",
         lambda x, g: F.grid_sample(x, g, mode="bicubic", padding_mode="reflection", align_corners=True),
         lambda x, g: ref_grid_sample(x, g, "bicubic", "reflection", True), [((1, 1, 4, 4), (1, 2, 2, 2))],
         make=(None, grid_values), atol16=0.1),
    Case("grid_sample_nearest", lambda x: F.grid_sample(x, eagerc.tensor(_fixed((2, 3, 2, 2)), dtype=x.dtype),
                                                        mode="nearest", padding_mode="border", align_corners=False),
         lambda x: ref_grid_sample(x, _fixed((2, 3, 2, 2)), "nearest", "border"), [((2, 2, 4, 5),)]),
    Case("grid_sample_trilinear", lambda x, g: F.grid_sample(x, g, align_corners=True),
         lambda x, g: ref_grid_sample(x, g, "bilinear", "zeros", True), [((1, 2, 3, 4, 3), (1, 2, 2, 2, 3))],
         make=(None, grid_values)),
    Case("grid_sample_nearest_3d",
         lambda x: F.grid_sample(x, eagerc.tensor(_fixed((1, 2, 2, 2, 3)), dtype=x.dtype), mode="nearest",
                                 padding_mode="reflection", align_corners=False),
         lambda x: ref_grid_sample(x, _fixed((1, 2, 2, 2, 3)), "nearest", "reflection"), [((1, 2, 3, 4, 3),)],
         bfloat16=False),   # the grid rounded to bfloat16 moves nearest samples: no shared reference
    Case("affine_grid", lambda t: F.affine_grid(t, (2, 3, 4, 5), align_corners=False),
         lambda t: ref_affine_grid(t, (2, 3, 4, 5)), [((2, 2, 3),)], make=(theta_values,)),
    Case("affine_grid_3d_align", lambda t: F.affine_grid(t, (1, 2, 3, 2, 4), align_corners=True),
         lambda t: ref_affine_grid(t, (1, 2, 3, 2, 4), True), [((1, 3, 4),)], make=(theta_values,)),
    # im2col / col2im and the shuffles (compositions)
    Case("unfold", lambda x: F.unfold(x, 2), lambda x: ref_unfold(x, 2), [((2, 3, 4, 5),)]),
    Case("unfold_padding_dilation_stride", lambda x: F.unfold(x, (2, 3), (1, 2), 1, (2, 1)),
         lambda x: ref_unfold(x, (2, 3), (1, 2), 1, (2, 1)), [((1, 2, 5, 6),)]),
    Case("unfold_unbatched", lambda x: F.unfold(x, 2, stride=2), lambda x: ref_unfold(x[None], 2, stride=2)[0],
         [((3, 4, 4),)]),
    Case("fold", lambda x: F.fold(x, (4, 5), 2), lambda x: ref_fold(x, (4, 5), 2), [((2, 12, 12),)]),
    Case("fold_padding_dilation_stride", lambda x: F.fold(x, (5, 6), (2, 3), (1, 2), 1, (2, 1)),
         lambda x: ref_fold(x, (5, 6), (2, 3), (1, 2), 1, (2, 1)), [((1, 12, 12),)]),
    Case("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), lambda x: ref_pixel_shuffle(x, 2), [((2, 8, 3, 2),)]),
    Case("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 3),
         lambda x: ref_pixel_unshuffle(x, 3), [((2, 2, 6, 3),)]),
    Case("channel_shuffle", lambda x: F.channel_shuffle(x, 3), lambda x: ref_channel_shuffle(x, 3),
         [((2, 6, 2, 3),), ((1, 3, 4),)]),
]
