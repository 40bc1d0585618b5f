"""Op-table entries: convolution, pooling and nearest upsampling (eagerc.nn.functional).

The references below are written independently of eagerc's im2col kernels: plain
numpy with explicit Python loops over output (or input) positions, on tiny sizes.
Second-derivative cases run `autograd.grad(..., create_graph=True)` so that the
gradcheck differentiates the backward ops (conv_transpose2d, conv2d_weight,
max_pool2d_backward/select, the *_backward adjoints) too.
"""
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
    Case("conv3d", F.conv3d, ref_conv3d, [((2, 3, 4, 5, 3), (4, 3, 2, 3, 2), (4,)), ((1, 2, 3, 3, 3), (2, 2, 1, 1, 1), (2,))]),
    Case("conv3d_stride_padding_dilation",
         lambda x, w, b: F.conv3d(x, w, b, stride=(2, 1, 2), padding=(1, 0, 2), dilation=(1, 2, 1)),
         lambda x, w, b: ref_conv3d(x, w, b, (2, 1, 2), (1, 0, 2), (1, 2, 1)), [((2, 2, 4, 5, 4), (3, 2, 2, 2, 3), (3,))]),
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
