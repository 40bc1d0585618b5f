"""Convolution, pooling, im2col/col2im and resampling primitives (NCHW / NCDHW layout).

Every kernel works on strided views of the (padded) input plus, for convolutions,
one batched BLAS matmul -- never a Python loop over pixels or over the batch. The
only Python loops run over kernel positions (e.g. 9 or 27) or replication counts.

Convolutions (im2col), one kernel for any number of spatial dims, declared per rank
(conv2d / conv3d, conv_transpose2d / 3d, conv2d_weight / conv3d_weight):
- the windows of the padded input are a strided view (no copy); reshaping it to
  channel-major columns (groups, cin/groups*prod(k), n*P) is the one im2col copy, and
  `weight @ cols` is one GEMM for the whole batch (one large BLAS call instead of n
  small ones: faster, and far less sensitive to BLAS thread start-up);
- stride 1 uses *row-wrapped* windows: each kernel offset reads one contiguous run of
  P = 1 + sum((out_i - 1) * inner_i) elements of a padded channel volume (2-d:
  (oh-1)*W + ow), so the copy moves long runs instead of ow-long rows (about 4x
  faster). The run also covers junk columns (and, in 3-d, junk rows); the output is a
  strided view that skips them (no copy: a copy costs more than the next op's strided
  read), and gradients are zero there, so they cancel;
- conv_transpose is the adjoint: `weight^T @ x` gives columns that col2im adds back
  into the padded output, one strided add per kernel position;
- the weight gradient is `cols @ gy^T`, the batch sum being part of the GEMM's inner
  dimension.
The three are each other's derivatives (see eagerc/ops/conv.py), so
gradients of any order stay on these kernels. im2col / col2im (F.unfold / F.fold) are
the same gather and scatter on their own.

Pooling: the window at kernel position (i, j) over all outputs is one strided slice
of the padded input; max pooling folds `maximum` over the kh*kw slices, average
pooling adds them. Max pooling's backward recomputes, from one contiguous copy of the
windows, a mask of each window's first maximum (kernel positions in row-major order,
so ties go to the first position, as in PyTorch) and routes the gradient there (in C for float
CPU arrays: runtime/kernels/rows.py's max_pool2d_backward, the same bits). 3-d
pooling is separable onto these 2-d ops (eagerc/nn/functional_conv.py). Adaptive max
pooling of any rank is one op giving each window's first argmax (the values are a
gather).

Resampling: nearest upsampling is a gather along H and W; linear and cubic
interpolation are one interpolate_axis op per axis (a dense interpolation matrix on
short axes, 2-4 gathered rows on long ones) with its run-summing adjoint.

Attributes are JSON-plain. `padding` of the conv ops is per side,
((before, after), ...) per spatial dim -- asymmetric for padding='same' with even
kernels; negative values crop. Pool ops take symmetric (ph, pw).

Decomposition note (for the compiler): the conv ops are pad + strided window gather +
matmul (+ col2im adds); a backend should keep the matmul on BLAS (numpy / cuBLAS) and
may fuse only the gather, bias and the following elementwise ops. max/avg pooling
decompose into kh*kw strided slices folded with maximum / add and a divide; the
adaptive average pool and its backward are two small matmuls with averaging matrices;
nearest upsampling is a gather along H and W.
"""
import itertools
import math

import numpy as np

from ...runtime.dtypes import FLOATING_KINDS
from ...runtime import dtypes
from . import Flops, declare
from .meta import Spec, fail, fmt_shape
from .linalg import array_matmul
from .reduction import array_sum
from ..kernels import eager as c_rows, rows as c_row_kernels

__all__ = ["adaptive_matrix", "adaptive_windows", "conv_output_size", "cubic_coefficients", "interpolation_taps",
           "nearest_source_index", "pool_output_size"]


# ---------------------------------------------------------------- shared helpers

def conv_output_size(size, k, s, p0, p1, d):
    """Output length of a convolution along one axis (padding p0 before, p1 after)."""
    return (size + p0 + p1 - d * (k - 1) - 1) // s + 1


def pool_output_size(size, k, s, p, d, ceil_mode):
    """Output length of a pooling window along one axis (PyTorch's rule for ceil_mode:
    the last window must start inside the input or its left padding)."""
    span = size + 2 * p - d * (k - 1) - 1
    if not ceil_mode:
        return span // s + 1
    out = -(-span // s) + 1
    if (out - 1) * s >= size + p:
        out -= 1
    return out


def _as_strided(xp):
    return xp.lib.stride_tricks.as_strided


def _spatial(x, sizes):
    """Index (:, :, sizes...) of an (n, c, *spatial) array."""
    return (slice(None), slice(None)) + tuple(sizes)


def _assign(xp, dst, src):
    """dst[...] = src for same-shaped views; 4-d float ones of short rows through the copy4d C kernel
    (runtime/kernels/rows.py: numpy's strided copy pays a loop call per row, e.g. 0.27 ms for
    the 28,672 rows of 14 of a 64x32x14x14 gradient's row-wrapped runs)."""
    e = dst.itemsize
    if (xp is np and dst.ndim == 4 and dst.shape == src.shape and dst.dtype == src.dtype
            and dst.dtype in c_rows.NAMES and dst.size >= c_rows.MIN_ELEMENTS["copy4d"]
            and not any(t % e for t in dst.strides + src.strides) and c_rows.enabled() and c_rows.available()):
        k = c_row_kernels.kernel("copy4d", c_rows.NAMES[dst.dtype])
        if k is not None:
            k(src.ctypes.data, dst.ctypes.data, *dst.shape, *(t // e for t in src.strides),
              *(t // e for t in dst.strides))
            return
    dst[...] = src


def _pad(xp, x, pads, value=0):
    """x (n, c, *spatial) padded by pads = ((before, after), ...) per spatial dim; negatives crop."""
    if all(a == 0 and b == 0 for a, b in pads):
        return x
    if any(a < 0 or b < 0 for a, b in pads):
        x = x[_spatial(x, (slice(max(-a, 0), s - max(-b, 0)) for (a, b), s in zip(pads, x.shape[2:])))]
        pads = tuple((max(a, 0), max(b, 0)) for a, b in pads)
    shape = x.shape[:2] + tuple(s + a + b for s, (a, b) in zip(x.shape[2:], pads))
    out = xp.zeros(shape, x.dtype) if value == 0 else xp.full(shape, value, x.dtype)
    _assign(xp, out[_spatial(out, (slice(a, a + s) for (a, _), s in zip(pads, x.shape[2:])))], x)
    return out


def _unpad(xp, x, pads, size):
    """The inverse of `_pad` for a gradient computed in padded coordinates: crop the
    padding; rows that `_pad` cropped away (negative padding) get zero gradient."""
    size = tuple(size)
    if all(a == 0 and b == 0 for a, b in pads) and x.shape[2:] == size:
        return x
    if all(a >= 0 and b >= 0 for a, b in pads):
        return x[_spatial(x, (slice(a, a + s) for (a, _), s in zip(pads, size)))]
    full = xp.zeros(x.shape[:2] + size, x.dtype)
    inner = x[_spatial(x, (slice(max(a, 0), s - max(b, 0)) for (a, b), s in zip(pads, x.shape[2:])))]
    full[_spatial(full, (slice(max(-a, 0), max(-a, 0) + s) for (a, _), s in zip(pads, inner.shape[2:])))] = inner
    return full


# Row-wrapped windows compute junk columns (W - ow per output row, and in 3-d junk rows per
# output plane); past this fraction of the run the strided (n, c, *k, *out) copy is cheaper
# than the extra GEMM work.
RUNS_MAX_JUNK = 0.5


def _row_wrapped(stride, size, out):
    """Whether the stride-1 windows over a padded (*size) volume are read as row-wrapped runs."""
    return all(s == 1 for s in stride) and all(o > 0 for o in out) and \
        math.prod(out[1:]) >= (1 - RUNS_MAX_JUNK) * math.prod(size[1:])


def _run_length(out, size):
    """P: the flat distance from the first to the last output position of one window offset,
    plus one, in a padded volume of `size` (2-d: (oh-1)*W + ow)."""
    return 1 + sum((o - 1) * math.prod(size[i + 1:]) for i, o in enumerate(out))


def _windows(xp, x, k, stride, dilation, out):
    """The im2col view (no copy) of a padded x (n, c, *spatial).

    Returns (view, flat): with stride 1, view is (n, c, *k, P) over row-wrapped runs of
    P = _run_length(out) elements (flat=True); otherwise (n, c, *k, *out).
    """
    n, c = x.shape[:2]
    size, st = x.shape[2:], x.strides
    strided = _as_strided(xp)
    dil = tuple(d * s for d, s in zip(dilation, st[2:]))
    contiguous = all(st[i] == st[i + 1] * x.shape[i + 1] for i in range(2, x.ndim - 1))
    if _row_wrapped(stride, size, out) and contiguous:
        return strided(x, (n, c) + tuple(k) + (_run_length(out, size),), st[:2] + dil + (st[-1],)), True
    return _window_view(xp, x, k, stride, dilation, out), False


def _window_view(xp, x, k, stride, dilation, out):
    """Every window of x (n, c, *spatial) as an (n, c, *k, *out) strided view (no copy)."""
    st = x.strides
    return _as_strided(xp)(x, x.shape[:2] + tuple(k) + tuple(out),
                           st[:2] + tuple(d * e for d, e in zip(dilation, st[2:]))
                           + tuple(s * e for s, e in zip(stride, st[2:])))


def _from_runs(xp, y, out, size):
    """Row-wrapped (..., P) -> (..., *out) view that skips the junk columns (and rows)."""
    e = y.strides[-1]
    inner = tuple(math.prod(size[i + 1:]) * e for i in range(len(size)))
    return _as_strided(xp)(y, y.shape[:-1] + tuple(out), y.strides[:-1] + inner)


def _to_runs(xp, g, size):
    """(..., *out) -> row-wrapped (..., P) with zeros in the junk columns."""
    out = g.shape[-len(size):]
    runs = xp.zeros(g.shape[:-len(size)] + (_run_length(out, size),), g.dtype)
    _assign(xp, _from_runs(xp, runs, out, size), g)
    return runs


def _add_bias(y, b):
    """Add bias b (a (C,) array or a Python scalar) in place to a channel-major (C, ...) buffer."""
    if hasattr(b, "shape"):
        y += b.reshape((-1,) + (1,) * (y.ndim - 1))
    elif b:
        y += b


def _check_bias(b, co, dtype):
    if hasattr(b, "shape") and (tuple(b.shape) != (co,) or b.dtype != dtype):
        raise ValueError("bias shape or dtype")


def _channel_major_cols(view, nd, groups, n, P):
    """(n, c, *k, P or *out) windows (nd kernel dims) -> the im2col copy (groups, c/groups * prod(k), n * P)."""
    order = (1,) + tuple(range(2, 2 + nd)) + (0,) + tuple(range(2 + nd, view.ndim))
    return view.transpose(order).reshape(groups, -1, n * P)


# ---------------------------------------------------------------- conv kernels (any number of spatial dims)

def _conv(xp):
    def conv(x, w, b, stride, padding, dilation, groups):
        n, c = x.shape[:2]
        co, cg = w.shape[:2]
        k = w.shape[2:]
        if x.ndim != w.ndim or c != cg * groups or co % groups or x.dtype != w.dtype or x.dtype == bool:
            raise ValueError("conv: input/weight mismatch")
        _check_bias(b, co, x.dtype)
        x = _pad(xp, x, padding)
        out = tuple(conv_output_size(s, kk, st, 0, 0, d) for s, kk, st, d in zip(x.shape[2:], k, stride, dilation))
        if any(o <= 0 for o in out):
            raise ValueError("conv: output size")
        view, flat = _windows(xp, x, k, stride, dilation, out)
        P = view.shape[-1] if flat else math.prod(out)
        # im2col copy, channel-major (G, K, n*P): one GEMM for the whole batch
        cols = _channel_major_cols(view, len(k), groups, n, P)
        y = array_matmul(w.reshape(groups, co // groups, cols.shape[1]), cols).reshape(co, n, P)
        _add_bias(y, b)
        # the result is a (n, co, *out) view of the channel-major buffer: no copy (the
        # next elementwise op reads it strided, which costs less than a copy here)
        if flat:
            return _from_runs(xp, y, out, x.shape[2:]).swapaxes(0, 1)
        return y.reshape((co, n) + out).swapaxes(0, 1)
    return conv


def _col2im_kernel(xp, cols, runs):
    """rows.py's col2im_runs for C-contiguous float numpy cols (c, *k, n, P) and runs (c, n, L), or
    None (numpy's strided adds). Why: numpy streams the whole buffer once per kernel position; the
    C loop adds a channel's K runs while its planes are in cache."""
    if xp is np and c_rows.use("col2im_runs", cols) and cols.dtype == runs.dtype and runs.flags.c_contiguous:
        return c_row_kernels.kernel("col2im_runs", c_rows.NAMES[cols.dtype])
    return None


def _col2im_add(xp, cols, out, k, stride, dilation, size, flat):
    """Adjoint of the im2col gather: add cols (c, *k, n, P or prod(size)) into the zeroed
    channel-major padded buffer out (c, n, *padded), one strided add per kernel position."""
    c, n = out.shape[:2]
    padded = out.shape[2:]
    positions = list(itertools.product(*(range(kk) for kk in k)))
    if flat:
        P = cols.shape[-1]
        runs = out.reshape(c, n, math.prod(padded))
        inner = [math.prod(padded[i + 1:]) for i in range(len(padded))]
        offsets = [sum(p * d * e for p, d, e in zip(pos, dilation, inner)) for pos in positions]
        kern = _col2im_kernel(xp, cols, runs)
        if kern is not None:
            kern(cols.ctypes.data, runs.ctypes.data, np.array(offsets, np.int64).ctypes.data, c, len(offsets), n, P,
                 runs.shape[-1])
            return out
        for pos, o in zip(positions, offsets):
            runs[:, :, o:o + P] += cols[(slice(None),) + pos]
        return out
    cols = cols.reshape((c,) + tuple(k) + (n,) + tuple(size))
    for pos in positions:
        out[_spatial(out, (slice(p * d, p * d + s * (o - 1) + 1, s)
                           for p, d, s, o in zip(pos, dilation, stride, size)))] += cols[(slice(None),) + pos]
    return out


def _conv_transpose_size(size, k, stride, dilation, output_padding):
    """The padded (before cropping `padding`) output size of a transposed convolution."""
    return tuple((i - 1) * s + d * (kk - 1) + 1 + op for i, kk, s, d, op in zip(size, k, stride, dilation,
                                                                               output_padding))


def _conv_transpose(xp):
    def conv_transpose(x, w, b, stride, padding, output_padding, dilation, groups):
        n, c = x.shape[:2]
        ci, cog = w.shape[:2]
        k = w.shape[2:]
        if x.ndim != w.ndim or c != ci or ci % groups or x.dtype != w.dtype or x.dtype == bool:
            raise ValueError("conv_transpose: input/weight mismatch")
        co = cog * groups
        _check_bias(b, co, x.dtype)
        if any(op < 0 or op >= max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
            raise ValueError("conv_transpose: output_padding")
        full = _conv_transpose_size(x.shape[2:], k, stride, dilation, output_padding)
        size = tuple(f - sum(p) for f, p in zip(full, padding))
        if any(s <= 0 for s in size):
            raise ValueError("conv_transpose: output size")
        flat = _row_wrapped(stride, full, x.shape[2:])
        xT = x.swapaxes(0, 1)                                                  # channel-major (ci, n, *in)
        g = _to_runs(xp, xT, full) if flat else xT.reshape(ci, n, math.prod(x.shape[2:]))
        P = g.shape[-1]
        wT = w.reshape(groups, ci // groups, cog * math.prod(k)).swapaxes(1, 2)   # (G, K, ci/G)
        cols = array_matmul(wT, g.reshape(groups, ci // groups, n * P))           # one GEMM: (G, K, n*P)
        buf = _col2im_add(xp, cols.reshape((co,) + k + (n, P)), xp.zeros((co, n) + full, x.dtype),
                      k, stride, dilation, x.shape[2:], flat)
        _add_bias(buf, b)
        return _unpad(xp, buf.swapaxes(0, 1), padding, size)                  # a view when padding >= 0
    return conv_transpose


_BLOCK = 4096  # inner-dimension block of the weight-gradient GEMM (see conv_weight)


def _conv_weight(xp):
    def conv_weight(x, gy, kernel_size, stride, padding, dilation, groups):
        """d(loss)/d(weight) of conv(x, weight) given gy = d(loss)/d(output)."""
        n, c = x.shape[:2]
        co = gy.shape[1]
        k = tuple(kernel_size)
        if x.ndim != gy.ndim or c % groups or co % groups or gy.shape[0] != n or x.dtype != gy.dtype or \
                x.dtype == bool:
            raise ValueError("conv_weight: input/grad mismatch")
        x = _pad(xp, x, padding)
        out = gy.shape[2:]
        if any(o > conv_output_size(s, kk, st, 0, 0, d) for o, s, kk, st, d in zip(out, x.shape[2:], k, stride,
                                                                                    dilation)):
            raise ValueError("conv_weight: grad size")
        cg = c // groups
        view, flat = _windows(xp, x, k, stride, dilation, out)
        P = view.shape[-1] if flat else math.prod(out)
        # channel-major columns (G, K, n*P): the batch sum becomes part of one GEMM
        # (many small per-sample GEMMs plus a sum are ~2x slower here)
        cols = _channel_major_cols(view, len(k), groups, n, P)
        gy_cm = gy.swapaxes(0, 1)                                              # channel-major (co, n, *out)
        g = _to_runs(xp, gy_cm, x.shape[2:]) if flat else gy_cm.reshape(co, n, P)
        gT = g.reshape(groups, co // groups, n * P).swapaxes(-1, -2)            # (G, n*P, co/G)
        # dw^T = cols @ g^T (BLAS runs this orientation ~30% faster than g @ cols^T). A GEMM
        # with a huge inner dimension but a tiny result (e.g. 9 x 16 for a first layer)
        # falls off a cliff in OpenBLAS (3x slower past ~8k), so sum it over blocks of the
        # inner dimension instead.
        if n * P > 2 * _BLOCK and cg * math.prod(k) * (co // groups) <= 4096:
            dwT = sum(array_matmul(cols[..., a:a + _BLOCK], gT[..., a:a + _BLOCK, :])
                      for a in range(0, n * P, _BLOCK))
        else:
            dwT = array_matmul(cols, gT)                                          # (G, K, co/G)
        return dwT.swapaxes(-1, -2).reshape((co, cg) + k)
    return conv_weight


# ---------------------------------------------------------------- conv rules

_LAYOUT = {2: "NCHW", 3: "NCDHW"}


def _pair_of_pairs(p):
    return tuple(tuple(int(v) for v in side) for side in p)


def _same_numeric(op, specs, names):
    """Inputs of one dtype, floating or integer (PyTorch convolves integers too), not bool."""
    d = specs[0].dtype
    for s, nm in zip(specs, names):
        if s.dtype is dtypes.bool:
            fail(op, specs, f"expected a numeric {nm}, got bool (cast with .float() first)", TypeError)
        if s.dtype is not d:
            fail(op, specs, f"expected {names[0]} and {nm} to have the same dtype, but got "
                 f"{d.name} and {s.dtype.name}")
    return d


def _check_rank(op, specs, names, nd):
    for s, nm in zip(specs, names):
        if len(s.shape) != nd + 2:
            fail(op, specs, f"expected a {nd + 2}-d {nm} (batched {_LAYOUT[nd]}), got a {len(s.shape)}-d {nm} "
                 f"of shape {fmt_shape(s.shape)}")


def _check_bias_spec(op, specs, b, co, d):
    if isinstance(b, Spec):
        if tuple(b.shape) != (co,):
            fail(op, specs, f"expected bias of shape ({co}) (one per output channel), got {fmt_shape(b.shape)}")
        if b.dtype is not d:
            fail(op, specs, f"expected bias of dtype {d.name}, got {b.dtype.name}")


def _check_conv_attrs(op, specs, stride, dilation, groups):
    if any(s < 1 for s in stride):
        fail(op, specs, f"stride must be positive, got {tuple(stride)}")
    if any(d < 1 for d in dilation):
        fail(op, specs, f"dilation must be positive, got {tuple(dilation)}")
    if groups < 1:
        fail(op, specs, f"groups must be positive, got {groups}")


def _sizes(v):
    return " x ".join(str(a) for a in v)


def _conv_rule(op, nd):
    def rule(x, w, b, stride, padding, dilation, groups):
        specs = (x, w, b)
        _check_rank(op, specs[:2], ("input", "weight"), nd)
        d = _same_numeric(op, specs[:2], ("input", "weight"))
        _check_conv_attrs(op, specs, stride, dilation, groups)
        co, cg = w.shape[:2]
        k = w.shape[2:]
        if co % groups:
            fail(op, specs, f"expected weight's out_channels ({co}) to be divisible by groups ({groups})")
        if x.shape[1] != cg * groups:
            fail(op, specs, f"given groups={groups}, weight of size {fmt_shape(w.shape)}, expected input "
                 f"{fmt_shape(x.shape)} to have {cg * groups} channels, but got {x.shape[1]} channels instead")
        _check_bias_spec(op, specs, b, co, d)
        pads = _pair_of_pairs(padding)
        padded = tuple(s + p0 + p1 for s, (p0, p1) in zip(x.shape[2:], pads))
        out = tuple(conv_output_size(s, kk, st, p0, p1, dl)
                    for s, kk, st, (p0, p1), dl in zip(x.shape[2:], k, stride, pads, dilation))
        if any(o <= 0 for o in out):
            fail(op, specs, f"calculated padded input size per channel: ({_sizes(padded)}); kernel size "
                 f"(with dilation {tuple(dilation)}): ({_sizes(dl * (kk - 1) + 1 for kk, dl in zip(k, dilation))}); "
                 "the kernel can't be greater than the (padded) input")
        return Spec((x.shape[0], co) + out, d)
    return rule


def _conv_transpose_rule(op, nd):
    def rule(x, w, b, stride, padding, output_padding, dilation, groups):
        specs = (x, w, b)
        _check_rank(op, specs[:2], ("input", "weight"), nd)
        d = _same_numeric(op, specs[:2], ("input", "weight"))
        _check_conv_attrs(op, specs, stride, dilation, groups)
        ci, cog = w.shape[:2]
        if x.shape[1] != ci:
            fail(op, specs, f"given transposed weight of size {fmt_shape(w.shape)} "
                 f"(in_channels, out_channels/groups, {', '.join('k' + a for a in _LAYOUT[nd][2:])}), expected "
                 f"input {fmt_shape(x.shape)} to have {ci} channels, but got {x.shape[1]} channels instead")
        if ci % groups:
            fail(op, specs, f"expected in_channels ({ci}) to be divisible by groups ({groups})")
        for op_, s, dl in zip(output_padding, stride, dilation):
            if op_ < 0 or op_ >= max(s, dl):
                fail(op, specs, f"output padding must be smaller than either stride or dilation, got "
                     f"output_padding={tuple(output_padding)}, stride={tuple(stride)}, dilation={tuple(dilation)}")
        co = cog * groups
        _check_bias_spec(op, specs, b, co, d)
        full = _conv_transpose_size(x.shape[2:], w.shape[2:], stride, dilation, output_padding)
        out = tuple(f - p0 - p1 for f, (p0, p1) in zip(full, _pair_of_pairs(padding)))
        if any(s <= 0 for s in out):
            fail(op, specs, f"calculated output size ({_sizes(out)}) is too small")
        return Spec((x.shape[0], co) + out, d)
    return rule


def _conv_weight_rule(op, nd):
    def rule(x, gy, kernel_size, stride, padding, dilation, groups):
        specs = (x, gy)
        _check_rank(op, specs, ("input", "grad_output"), nd)
        d = _same_numeric(op, specs, ("input", "grad_output"))
        _check_conv_attrs(op, specs, stride, dilation, groups)
        n, c = x.shape[:2]
        co = gy.shape[1]
        if c % groups or co % groups:
            fail(op, specs, f"expected input channels ({c}) and grad_output channels ({co}) to be "
                 f"divisible by groups ({groups})")
        if gy.shape[0] != n:
            fail(op, specs, "expected input and grad_output to have the same batch size")
        out = tuple(conv_output_size(s, kk, st, p0, p1, dl) for s, kk, st, (p0, p1), dl
                    in zip(x.shape[2:], kernel_size, stride, _pair_of_pairs(padding), dilation))
        if any(g > o for g, o in zip(gy.shape[2:], out)):
            fail(op, specs, f"grad_output's spatial size {fmt_shape(gy.shape[2:])} exceeds the "
                 f"convolution's output size ({'x'.join(str(o) for o in out)})")
        return Spec((co, c // groups) + tuple(kernel_size), d)
    return rule


# ---------------------------------------------------------------- conv scratch
# Bytes of the temporary buffers each kernel above allocates beyond its inputs and output
# (padded input, im2col columns, channel-major result), from shapes alone: the file loader
# refuses a program whose kernels would allocate more than its limit (max_value_bytes).

def _padded_elems(shape, pads):
    if all(a == 0 and b == 0 for a, b in pads):
        return 0
    return shape[0] * shape[1] * math.prod(max(s + a + b, 0) for s, (a, b) in zip(shape[2:], pads))


def _runs(out, size):
    """Columns per image of the im2col buffer: row-wrapped runs or prod(out), whichever is larger."""
    return max(_run_length(out, size), math.prod(out), 0)


def _conv_scratch(x, w, b, stride, padding, dilation, groups):
    n, c = x.shape[:2]
    co, k = w.shape[0], w.shape[2:]
    pads = _pair_of_pairs(padding)
    padded = tuple(s + sum(p) for s, p in zip(x.shape[2:], pads))
    out = tuple(conv_output_size(s, kk, st, 0, 0, d) for s, kk, st, d in zip(padded, k, stride, dilation))
    P = _runs(out, padded)
    return x.dtype.itemsize * (_padded_elems(x.shape, pads) + c * math.prod(k) * n * P + co * n * P)


def _conv_transpose_scratch(x, w, b, stride, padding, output_padding, dilation, groups):
    n, ci = x.shape[:2]
    co, k = w.shape[1] * groups, w.shape[2:]
    full = _conv_transpose_size(x.shape[2:], k, stride, dilation, output_padding)
    P = _runs(x.shape[2:], full)
    return x.dtype.itemsize * (ci * n * P + co * math.prod(k) * n * P + co * n * math.prod(full))


def _conv_weight_scratch(x, gy, kernel_size, stride, padding, dilation, groups):
    n, c = x.shape[:2]
    co, k = gy.shape[1], tuple(kernel_size)
    pads = _pair_of_pairs(padding)
    P = _runs(gy.shape[2:], tuple(s + sum(p) for s, p in zip(x.shape[2:], pads)))
    return x.dtype.itemsize * (_padded_elems(x.shape, pads) + c * math.prod(k) * n * P + co * n * P
                               + 2 * co * (c // max(groups, 1)) * math.prod(k))


# 2 x multiply-accumulates: each output element of a convolution sums over one window of every
# input channel of its group (w is (C_out, C_in/groups, *k)); each input element of a transposed
# convolution is spread over a window of every output channel (w is (C_in, C_out/groups, *k))
_CONV_FLOPS = Flops("matmul-like", lambda out, ins, attrs: 2 * math.prod(out) * math.prod(ins[1][1:]))
_CONV_T_FLOPS = Flops("matmul-like", lambda out, ins, attrs: 2 * math.prod(ins[0]) * math.prod(ins[1][1:]))
# One kernel per role serves 2-d and 3-d; each rank is its own op, named as PyTorch names it.
for _nd in (2, 3):
    # cross-correlation; b is a (C_out,) bias or a scalar constant (0 for none)
    declare(f"conv{_nd}d", ("x", "w", "b"), _conv, _conv_rule(f"conv{_nd}d", _nd),
            attrs=("stride", "padding", "dilation", "groups"), scratch=_conv_scratch, kind="conv",
            flops=_CONV_FLOPS)
    # the adjoint of conv w.r.t. its input (a 'deconvolution'); w is (C_in, C_out/groups, *k)
    declare(f"conv_transpose{_nd}d", ("x", "w", "b"), _conv_transpose,
            _conv_transpose_rule(f"conv_transpose{_nd}d", _nd),
            attrs=("stride", "padding", "output_padding", "dilation", "groups"), scratch=_conv_transpose_scratch,
            kind="conv", flops=_CONV_T_FLOPS)
    # the weight gradient of conv: sum over the batch of gy times the input windows
    declare(f"conv{_nd}d_weight", ("x", "gy"), _conv_weight, _conv_weight_rule(f"conv{_nd}d_weight", _nd),
            attrs=("kernel_size", "stride", "padding", "dilation", "groups"), scratch=_conv_weight_scratch,
            kind="conv")


# ---------------------------------------------------------------- pooling kernels

def _lowest(dtype):
    return -np.inf if dtype.kind in FLOATING_KINDS else np.iinfo(dtype).min


def _pool_geometry(size, kernel_size, stride, padding, dilation, ceil_mode):
    H, W = size
    oh = pool_output_size(H, kernel_size[0], stride[0], padding[0], dilation[0], ceil_mode)
    ow = pool_output_size(W, kernel_size[1], stride[1], padding[1], dilation[1], ceil_mode)
    # pad so that every window fits: ceil_mode windows may hang over the padded edge
    need_h = (oh - 1) * stride[0] + dilation[0] * (kernel_size[0] - 1) + 1
    need_w = (ow - 1) * stride[1] + dilation[1] * (kernel_size[1] - 1) + 1
    pads = ((padding[0], max(need_h - H - padding[0], 0)), (padding[1], max(need_w - W - padding[1], 0)))
    return oh, ow, pads


def _slices(x, kernel_size, stride, dilation, oh, ow):
    """The strided slice of padded x seen by kernel position (i, j) of every window."""
    sh, sw = stride
    dh, dw = dilation
    for i in range(kernel_size[0]):
        for j in range(kernel_size[1]):
            yield x[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]


def _check_pool_input(x, floating=False, kernel_size=None, padding=None):
    """Cheap checks in the kernel; on failure the shape rule explains (see dispatch.explain_failure)."""
    if x.ndim != 4 or x.dtype == bool or (floating and x.dtype.kind not in FLOATING_KINDS):
        raise ValueError("pool: unsupported input")
    if kernel_size is not None and any(p < 0 or p > k // 2 for p, k in zip(padding, kernel_size)):
        raise ValueError("pool: padding")


def _pool_c_kernel(xp, op, x):
    """The hand-written C kernel of `op` (runtime/kernels/rows.py) for a float numpy x of any
    strides, or None (numpy runs: other dtypes, cupy, small inputs, kernels off, no compiler).
    Why: numpy's max-pooling backward is a (K, n, c, oh, ow) window copy, a max, masks for ties
    and a masked scatter, its forward kh*kw strided passes; the C loops read each window once.
    (A forward in C pays only for 2x2 / stride 2 windows, in vector code: other forwards stay
    numpy's, whose vectorised strided passes beat a window-at-a-time C loop.)"""
    if (xp is not np or x.dtype not in c_rows.NAMES or x.size < c_rows.MIN_ELEMENTS[op]
            or any(t % x.itemsize for t in x.strides) or not (c_rows.enabled() and c_rows.available())):
        return None
    return c_row_kernels.kernel(op, c_rows.NAMES[x.dtype])


def _max_pool2d(xp):
    def max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode):
        _check_pool_input(x, False, kernel_size, padding)
        oh, ow, pads = _pool_geometry(x.shape[2:], kernel_size, stride, padding, dilation, ceil_mode)
        if oh <= 0 or ow <= 0:
            raise ValueError("max_pool2d: output size")
        if (tuple(kernel_size) == (2, 2) and tuple(stride) == (2, 2) and tuple(padding) == (0, 0)
                and tuple(dilation) == (1, 1) and ow >= 4 and (oh, ow) == (x.shape[2] // 2, x.shape[3] // 2)
                and x.strides[3] == x.itemsize):
            k = _pool_c_kernel(xp, "max_pool2d_2x2", x)
            if k is not None:
                y = np.empty(x.shape[:2] + (oh, ow), x.dtype)
                k(x.ctypes.data, y.ctypes.data, *x.shape[:2], *(t // x.itemsize for t in x.strides[:3]), oh, ow)
                return y
        xpad = _pad(xp, x, pads, _lowest(x.dtype))
        it = _slices(xpad, kernel_size, stride, dilation, oh, ow)
        out = next(it).copy()
        for s in it:
            xp.maximum(out, s, out=out)
        return out
    return max_pool2d


def _window_stack(xp, xpad, kernel_size, stride, dilation, oh, ow):
    """Every window of padded x as a (kh, kw, n, c, oh, ow) strided view (no copy):
    element [i, j] is the slice kernel position (i, j) reads."""
    s0, s1, s2, s3 = xpad.strides
    (sh, sw), (dh, dw) = stride, dilation
    return _as_strided(xp)(xpad, tuple(kernel_size) + xpad.shape[:2] + (oh, ow),
                           (dh * s2, dw * s3, s0, s1, sh * s2, sw * s3))


def _first_max_mask(xp, x, kernel_size, stride, padding, dilation, ceil_mode):
    """(K, n, c, oh, ow) bool, True exactly at each window's first maximum (kernel
    positions in row-major order, as PyTorch; a NaN counts as the maximum).

    One contiguous copy of the windows, then whole-array ops: max over K, equality,
    and a running 'already taken' mask over the K positions for ties."""
    oh, ow, pads = _pool_geometry(x.shape[2:], kernel_size, stride, padding, dilation, ceil_mode)
    xpad = _pad(xp, x, pads, _lowest(x.dtype))
    K = kernel_size[0] * kernel_size[1]
    win = _window_stack(xp, xpad, kernel_size, stride, dilation, oh, ow).reshape((K,) + xpad.shape[:2] + (oh, ow))
    best = win.max(axis=0)
    first = win == best
    if x.dtype.kind in FLOATING_KINDS and bool(xp.isnan(best).any()):
        first |= xp.isnan(win)
    taken = first[0].copy()
    for k in range(1, K):
        first[k] &= ~taken
        taken |= first[k]
    return first, oh, ow, pads, xpad.shape


def _max_pool2d_backward(xp):
    def max_pool2d_backward(gy, x, kernel_size, stride, padding, dilation, ceil_mode):
        """Route each output gradient to its window's (first) argmax in x."""
        _check_pool_input(x)
        k = _pool_c_kernel(xp, "max_pool2d_backward", x)
        if k is not None and gy.dtype == x.dtype and not any(t % gy.itemsize for t in gy.strides):
            oh, ow, _ = _pool_geometry(x.shape[2:], kernel_size, stride, padding, dilation, ceil_mode)
            if gy.shape != x.shape[:2] + (oh, ow):
                raise ValueError("max_pool2d_backward: grad shape")
            dx = np.zeros(x.shape, x.dtype)
            k(gy.ctypes.data, x.ctypes.data, dx.ctypes.data, *x.shape, *(t // x.itemsize for t in x.strides),
              *(t // gy.itemsize for t in gy.strides), oh, ow, *kernel_size, *stride, *padding, *dilation)
            return dx
        first, oh, ow, pads, padded = _first_max_mask(xp, x, kernel_size, stride, padding, dilation, ceil_mode)
        if gy.shape != first.shape[1:]:
            raise ValueError("max_pool2d_backward: grad shape")
        tiled = all(s == k and d == 1 for k, s, d in zip(kernel_size, stride, dilation)) and \
            padded[2:] == (oh * stride[0], ow * stride[1])
        dx = (xp.empty if tiled else xp.zeros)(padded, gy.dtype)  # tiled: every element is written below
        windows = _window_stack(xp, dx, kernel_size, stride, dilation, oh, ow)
        if all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel_size, stride, dilation)):
            # windows are disjoint: every input position is written at most once
            # (a select, not mask * gy: an inf or NaN gradient reaches its argmax only, as in PyTorch)
            windows[...] = xp.where(first.reshape(windows.shape), gy, gy.dtype.type(0))
        else:  # overlapping windows: add per kernel position (the same position may win twice)
            kw = kernel_size[1]
            for i in range(kernel_size[0]):
                for j in range(kw):
                    windows[i, j] += xp.where(first[i * kw + j], gy, gy.dtype.type(0))
        return _unpad(xp, dx, pads, x.shape[2:])
    return max_pool2d_backward


def _max_pool2d_select(xp):
    def max_pool2d_select(v, x, kernel_size, stride, padding, dilation, ceil_mode):
        """v (shaped like x) read at each window's argmax of x: the adjoint of max_pool2d_backward."""
        _check_pool_input(x)
        if v.shape != x.shape:
            raise ValueError("max_pool2d_select: shape")
        first, oh, ow, pads, padded = _first_max_mask(xp, x, kernel_size, stride, padding, dilation, ceil_mode)
        vwin = _window_stack(xp, _pad(xp, v, pads), kernel_size, stride, dilation, oh, ow)
        return xp.where(first, vwin.reshape(first.shape), v.dtype.type(0)).sum(axis=0)
    return max_pool2d_select


def _max_pool2d_indices(xp):
    def max_pool2d_indices(x, kernel_size, stride, padding, dilation, ceil_mode):
        """PyTorch's return_indices: the flat index (into H*W of the unpadded input) of each max."""
        _check_pool_input(x)
        first, oh, ow, pads, _ = _first_max_mask(xp, x, kernel_size, stride, padding, dilation, ceil_mode)
        K = first.shape[0]
        pos = (first * xp.arange(K, dtype=np.int64).reshape((K,) + (1,) * (first.ndim - 1))).sum(axis=0)
        kw = kernel_size[1]
        ih = xp.arange(oh, dtype=np.int64).reshape(-1, 1) * stride[0] - padding[0] + (pos // kw) * dilation[0]
        iw = xp.arange(ow, dtype=np.int64) * stride[1] - padding[1] + (pos % kw) * dilation[1]
        return ih * x.shape[3] + iw
    return max_pool2d_indices


def _avg_divisor(xp, size, dtype, kernel_size, stride, padding, oh, ow, count_include_pad, divisor_override):
    """What each window's sum is divided by: a number, or an (oh, ow) array at the edges."""
    if divisor_override:
        return divisor_override
    counts = []
    for size, k, s, p, o in zip(size, kernel_size, stride, padding, (oh, ow)):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, size + p)
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, size)
        counts.append(end - start)
    div = np.outer(counts[0], counts[1])
    if (div == div.flat[0]).all():
        return int(div.flat[0])
    return xp.asarray(div.astype(dtype))


def _avg_pool2d(xp):
    def avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
        _check_pool_input(x, True, kernel_size, padding)
        if divisor_override is not None and divisor_override == 0:
            raise ZeroDivisionError("avg_pool2d: divisor_override")
        oh, ow, pads = _pool_geometry(x.shape[2:], kernel_size, stride, padding, (1, 1), ceil_mode)
        if oh <= 0 or ow <= 0:
            raise ValueError("avg_pool2d: output size")
        xpad = _pad(xp, x, pads)
        it = _slices(xpad, kernel_size, stride, (1, 1), oh, ow)
        out = next(it).copy()
        for s in it:
            out += s
        out /= _avg_divisor(xp, x.shape[2:], x.dtype, kernel_size, stride, padding, oh, ow, count_include_pad,
                            divisor_override)
        return out
    return avg_pool2d


def _avg_pool2d_backward(xp):
    def avg_pool2d_backward(gy, input_size, kernel_size, stride, padding, ceil_mode, count_include_pad,
                            divisor_override):
        H, W = input_size
        oh, ow, pads = _pool_geometry((H, W), kernel_size, stride, padding, (1, 1), ceil_mode)
        if gy.shape[2:] != (oh, ow):
            raise ValueError("avg_pool2d_backward: grad shape")
        g = gy / _avg_divisor(xp, (H, W), gy.dtype, kernel_size, stride, padding, oh, ow, count_include_pad,
                              divisor_override)
        g = g.astype(gy.dtype, copy=False)
        dx = xp.zeros(gy.shape[:2] + (H + sum(pads[0]), W + sum(pads[1])), gy.dtype)
        for s in _slices(dx, kernel_size, stride, (1, 1), oh, ow):
            s += g
        return _unpad(xp, dx, pads, (H, W))
    return avg_pool2d_backward


def adaptive_windows(size, out):
    """Start and end (exclusive) of each adaptive pooling window along one axis:
    [floor(i*size/out), ceil((i+1)*size/out)), as PyTorch."""
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


def adaptive_matrix(xp, size, out, dtype):
    """(out, size) averaging matrix of adaptive pooling: row i averages window i."""
    start, end = adaptive_windows(size, out)
    j = np.arange(size)
    m = ((j >= start[:, None]) & (j < end[:, None])) / (end - start)[:, None]
    return xp.asarray(m.astype(dtype))


def _adaptive_avg_pool2d(xp):
    def adaptive_avg_pool2d(x, output_size):
        _check_pool_input(x, floating=True)
        oh, ow = output_size
        if oh < 1 or ow < 1 or 0 in x.shape[2:]:
            raise ValueError("adaptive_avg_pool2d: sizes")
        mh = adaptive_matrix(xp, x.shape[2], oh, x.dtype)
        mw = adaptive_matrix(xp, x.shape[3], ow, x.dtype)
        return array_matmul(mh, array_matmul(x, mw.T))
    return adaptive_avg_pool2d


def _adaptive_avg_pool2d_backward(xp):
    def adaptive_avg_pool2d_backward(gy, input_size):
        oh, ow = gy.shape[2:]
        mh = adaptive_matrix(xp, input_size[0], oh, gy.dtype)
        mw = adaptive_matrix(xp, input_size[1], ow, gy.dtype)
        return array_matmul(mh.T, array_matmul(gy, mw))
    return adaptive_avg_pool2d_backward


def nearest_source_index(out, size, scale, exact=False):
    """PyTorch's nearest-neighbour source index along one axis, in float32 as upstream
    (including its exact shortcuts for same size and 2x); `scale` is the user's
    scale_factor (the kernel uses 1/scale_factor) or None (then size/out)."""
    i = np.arange(out)
    if not exact and out == size:
        return i
    if not exact and out == 2 * size:
        return i >> 1
    s = np.float32(1.0 / scale) if scale else np.float32(size) / np.float32(out)
    if exact:
        src = np.floor(((i + 0.5) * np.float64(s)).astype(np.float32))
    else:
        src = np.floor(i.astype(np.float32) * s)
    return np.minimum(src.astype(np.int64), size - 1)


def _upsample_nearest2d(xp):
    def upsample_nearest2d(x, output_size, scales, exact):
        _check_pool_input(x)
        (oh, ow), (sh, sw) = output_size, scales
        if oh < 1 or ow < 1 or 0 in x.shape[2:]:
            raise ValueError("upsample_nearest2d: sizes")
        ih = nearest_source_index(oh, x.shape[2], sh, exact)
        iw = nearest_source_index(ow, x.shape[3], sw, exact)
        return x.take(xp.asarray(ih), axis=2).take(xp.asarray(iw), axis=3)
    return upsample_nearest2d


def _sum_groups(xp, g, index, size, axis):
    """Adjoint of `take(index, axis)`: sum the slices of g that read each source row.
    `index` is non-decreasing, so each source row's readers are a contiguous run; loop
    over the run lengths (at most ceil(out/size)), not over rows."""
    counts = np.bincount(index, minlength=size)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    shape = list(g.shape)
    shape[axis] = size
    out = xp.zeros(shape, g.dtype)
    for r in range(int(counts.max()) if counts.size else 0):
        rows = np.nonzero(counts > r)[0]
        src = xp.asarray(first[rows] + r)
        dst = (slice(None),) * axis + (xp.asarray(rows),)
        out[dst] += g.take(src, axis=axis)
    return out


def _upsample_nearest2d_backward(xp):
    def upsample_nearest2d_backward(gy, input_size, output_size, scales, exact):
        (H, W), (oh, ow), (sh, sw) = input_size, output_size, scales
        if gy.shape[2:] != (oh, ow):
            raise ValueError("upsample_nearest2d_backward: grad shape")
        ih = nearest_source_index(oh, H, sh, exact)
        iw = nearest_source_index(ow, W, sw, exact)
        n, c = gy.shape[:2]
        if oh % H == 0 and ow % W == 0 and (ih == np.arange(oh) // (oh // H)).all() and \
                (iw == np.arange(ow) // (ow // W)).all():  # integer factors: a reshape-sum
            return array_sum(gy.reshape(n, c, H, oh // H, W, ow // W), (3, 5))
        return _sum_groups(xp, _sum_groups(xp, gy, ih, H, 2), iw, W, 3)
    return upsample_nearest2d_backward


# ---------------------------------------------------------------- pooling rules

def _pool_input(op, x, floating=True):
    if len(x.shape) != 4:
        fail(op, (x,), f"expected a 4-d input (N, C, H, W), got {len(x.shape)}-d {fmt_shape(x.shape)}")
    if floating and not x.dtype.is_floating_point:
        fail(op, (x,), f"expected a floating-point input, got {x.dtype.name} (cast with .float() first)",
             TypeError)
    if x.dtype is dtypes.bool:
        fail(op, (x,), "expected a numeric input, got bool", TypeError)


def _check_window(op, x, kernel_size, stride, padding, dilation, ceil_mode):
    if any(k < 1 for k in kernel_size):
        fail(op, (x,), f"kernel_size must be positive, got {tuple(kernel_size)}")
    if any(s < 1 for s in stride):
        fail(op, (x,), f"stride must be positive, got {tuple(stride)}")
    if any(d < 1 for d in dilation):
        fail(op, (x,), f"dilation must be positive, got {tuple(dilation)}")
    if any(p < 0 or p > k // 2 for p, k in zip(padding, kernel_size)):
        fail(op, (x,), f"pad should be at most half of kernel size, but got padding={tuple(padding)} "
             f"and kernel_size={tuple(kernel_size)}")
    oh = pool_output_size(x.shape[2], kernel_size[0], stride[0], padding[0], dilation[0], ceil_mode)
    ow = pool_output_size(x.shape[3], kernel_size[1], stride[1], padding[1], dilation[1], ceil_mode)
    if oh <= 0 or ow <= 0:
        fail(op, (x,), f"given input size {fmt_shape(x.shape[1:])}, calculated output size "
             f"({x.shape[1]}x{oh}x{ow}) is too small")
    return oh, ow


def _max_pool2d_rule(x, kernel_size, stride, padding, dilation, ceil_mode):
    _pool_input("max_pool2d", x, floating=False)
    oh, ow = _check_window("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    return Spec(tuple(x.shape[:2]) + (oh, ow), x.dtype)


def _max_pool2d_backward_rule(gy, x, kernel_size, stride, padding, dilation, ceil_mode):
    out = _max_pool2d_rule(x, kernel_size, stride, padding, dilation, ceil_mode)
    if tuple(gy.shape) != out.shape or gy.dtype is not x.dtype:
        fail("max_pool2d_backward", (gy, x), f"expected grad_output of shape {fmt_shape(out.shape)} "
             f"and dtype {x.dtype.name}")
    return Spec(tuple(x.shape), x.dtype)


def _max_pool2d_select_rule(v, x, kernel_size, stride, padding, dilation, ceil_mode):
    out = _max_pool2d_rule(x, kernel_size, stride, padding, dilation, ceil_mode)
    if tuple(v.shape) != tuple(x.shape) or v.dtype is not x.dtype:
        fail("max_pool2d_select", (v, x), "expected values of the input's shape and dtype")
    return out


def _max_pool2d_indices_rule(x, kernel_size, stride, padding, dilation, ceil_mode):
    out = _max_pool2d_rule(x, kernel_size, stride, padding, dilation, ceil_mode)
    return Spec(out.shape, dtypes.int64)


def _avg_pool2d_rule(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    _pool_input("avg_pool2d", x)
    oh, ow = _check_window("avg_pool2d", x, kernel_size, stride, padding, (1, 1), ceil_mode)
    if divisor_override is not None and divisor_override == 0:
        fail("avg_pool2d", (x,), "divisor must be not zero")
    return Spec(tuple(x.shape[:2]) + (oh, ow), x.dtype)


def _avg_pool2d_backward_rule(gy, input_size, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override):
    x = Spec(tuple(gy.shape[:2]) + tuple(input_size), gy.dtype)
    out = _avg_pool2d_rule(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if tuple(gy.shape) != out.shape:
        fail("avg_pool2d_backward", (gy,), f"expected grad_output of shape {fmt_shape(out.shape)} for input "
             f"size {tuple(input_size)}")
    return x


def _adaptive_rule(x, output_size):
    _pool_input("adaptive_avg_pool2d", x)
    if len(output_size) != 2 or any(o < 1 for o in output_size):
        fail("adaptive_avg_pool2d", (x,), f"expected output_size of two positive ints, got {output_size}")
    if any(n == 0 for n in x.shape[2:]):
        fail("adaptive_avg_pool2d", (x,), "expected non-empty spatial dimensions")
    return Spec(tuple(x.shape[:2]) + tuple(output_size), x.dtype)


def _adaptive_backward_rule(gy, input_size):
    _pool_input("adaptive_avg_pool2d_backward", gy)
    return Spec(tuple(gy.shape[:2]) + tuple(input_size), gy.dtype)


def _upsample_rule(x, output_size, scales, exact):
    _pool_input("upsample_nearest2d", x, floating=False)
    if len(output_size) != 2 or any(o < 1 for o in output_size):
        fail("upsample_nearest2d", (x,), f"expected output size of two positive ints, got {output_size}")
    if any(n == 0 for n in x.shape[2:]):
        fail("upsample_nearest2d", (x,), "expected non-empty spatial dimensions")
    return Spec(tuple(x.shape[:2]) + tuple(output_size), x.dtype)


def _upsample_backward_rule(gy, input_size, output_size, scales, exact):
    _pool_input("upsample_nearest2d_backward", gy)
    if tuple(gy.shape[2:]) != tuple(output_size):
        fail("upsample_nearest2d_backward", (gy,), f"expected grad_output of spatial size {tuple(output_size)}")
    return Spec(tuple(gy.shape[:2]) + tuple(input_size), gy.dtype)


# ---------------------------------------------------------------- pooling scratch (see conv scratch)

def _pool_padded(x, kernel_size, stride, padding, dilation, ceil_mode):
    """(elements of the padded input, elements of the output) of a pooling kernel."""
    oh, ow, pads = _pool_geometry(x.shape[2:], kernel_size, stride, padding, dilation, ceil_mode)
    n, c = x.shape[:2]
    return _padded_elems(x.shape, pads), n * c * oh * ow


def _max_pool2d_scratch(x, kernel_size, stride, padding, dilation, ceil_mode):
    padded, out = _pool_padded(x, kernel_size, stride, padding, dilation, ceil_mode)
    return x.dtype.itemsize * padded


def _window_mask_scratch(x, kernel_size, stride, padding, dilation, ceil_mode):
    """_first_max_mask and its users: the padded input (and a padded copy of the values or
    the gradient), the (K, out) masks, and a (K, out) product or index table."""
    padded, out = _pool_padded(x, kernel_size, stride, padding, dilation, ceil_mode)
    K = kernel_size[0] * kernel_size[1]
    return 2 * x.dtype.itemsize * padded + K * out * (2 * x.dtype.itemsize + 10)


def _max_pool2d_backward_scratch(gy, x, kernel_size, stride, padding, dilation, ceil_mode):
    return _window_mask_scratch(x, kernel_size, stride, padding, dilation, ceil_mode)


_max_pool2d_select_scratch = _max_pool2d_backward_scratch   # (v, x, ...): the same buffers


def _avg_pool2d_scratch(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    padded, out = _pool_padded(x, kernel_size, stride, padding, (1, 1), ceil_mode)
    return x.dtype.itemsize * padded + 8 * out


def _avg_pool2d_backward_scratch(gy, input_size, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                 divisor_override):
    x = Spec(tuple(gy.shape[:2]) + tuple(input_size), gy.dtype)
    padded, out = _pool_padded(x, kernel_size, stride, padding, (1, 1), ceil_mode)
    return gy.dtype.itemsize * (padded + out) + 8 * out


def _adaptive_scratch(x, output_size):
    """The two averaging matrices (built in float64, a few temporaries each) and x @ mw.T."""
    n, c, H, W = x.shape
    oh, ow = output_size
    return 32 * (oh * H + ow * W) + x.dtype.itemsize * n * c * H * ow


def _adaptive_backward_scratch(gy, input_size):
    n, c, oh, ow = gy.shape
    H, W = input_size
    return 32 * (oh * H + ow * W) + gy.dtype.itemsize * n * c * oh * W


def _upsample_scratch(x, output_size, scales, exact):
    """The gather along H (before the one along W) and the index tables (int64, a few each)."""
    n, c, H, W = x.shape
    (oh, ow) = output_size
    return x.dtype.itemsize * n * c * oh * W + 32 * (oh + ow)


def _upsample_backward_scratch(gy, input_size, output_size, scales, exact):
    """The sum along H, then along W, and the index and run-length tables."""
    n, c = gy.shape[:2]
    (H, W), (oh, ow) = input_size, output_size
    return 2 * gy.dtype.itemsize * n * c * H * ow + 48 * (oh + ow + H + W)


_WINDOW = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
_AVG = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")


def _window_flops(out, ins, attrs):
    """Each output element reads one window."""
    k = attrs.get("kernel_size", 1)
    return math.prod(out) * math.prod(k if isinstance(k, (list, tuple)) else (k, k))


_POOL = Flops("pooling", _window_flops)
_ADAPTIVE = Flops("pooling", lambda out, ins, attrs: math.prod(ins[0]))   # each input element read once
declare("max_pool2d", ("x",), _max_pool2d, _max_pool2d_rule, attrs=_WINDOW, scratch=_max_pool2d_scratch,
        kind="window", flops=_POOL)
# the gradient of max_pool2d: gy routed to each window's first argmax in x
declare("max_pool2d_backward", ("gy", "x"), _max_pool2d_backward, _max_pool2d_backward_rule, attrs=_WINDOW,
        scratch=_max_pool2d_backward_scratch, kind="window")
# v read at each window's first argmax of x (the adjoint of max_pool2d_backward)
declare("max_pool2d_select", ("v", "x"), _max_pool2d_select, _max_pool2d_select_rule, attrs=_WINDOW,
        scratch=_max_pool2d_select_scratch, kind="window")
# flat H*W index of each window's first max (return_indices)
declare("max_pool2d_indices", ("x",), _max_pool2d_indices, _max_pool2d_indices_rule, attrs=_WINDOW,
        scratch=_window_mask_scratch, kind="window", differentiable=False)
declare("avg_pool2d", ("x",), _avg_pool2d, _avg_pool2d_rule, attrs=_AVG, scratch=_avg_pool2d_scratch,
        kind="window", flops=_POOL)
declare("avg_pool2d_backward", ("gy",), _avg_pool2d_backward, _avg_pool2d_backward_rule,
        attrs=("input_size",) + _AVG, scratch=_avg_pool2d_backward_scratch, kind="window")
declare("adaptive_avg_pool2d", ("x",), _adaptive_avg_pool2d, _adaptive_rule, attrs=("output_size",),
        scratch=_adaptive_scratch, kind="window", flops=_ADAPTIVE)
declare("adaptive_avg_pool2d_backward", ("gy",), _adaptive_avg_pool2d_backward, _adaptive_backward_rule,
        attrs=("input_size",), scratch=_adaptive_backward_scratch, kind="window")
declare("upsample_nearest2d", ("x",), _upsample_nearest2d, _upsample_rule,
        attrs=("output_size", "scales", "exact"), scratch=_upsample_scratch, kind="window")
declare("upsample_nearest2d_backward", ("gy",), _upsample_nearest2d_backward, _upsample_backward_rule,
        attrs=("input_size", "output_size", "scales", "exact"), scratch=_upsample_backward_scratch, kind="window")


# ---------------------------------------------------------------- adaptive max pooling (any number of spatial dims)

def _adaptive_max_pool_indices(xp):
    def adaptive_max_pool_indices(x, output_size):
        """Flat index (into the spatial dims) of each adaptive window's first maximum.

        Windows along an axis differ in length by at most one: each axis is gathered as
        (out, L) with L the longest window, short windows repeating their last element
        (a repeat never wins over the first occurrence), then one argmax over the
        L1*L2*... positions of each window."""
        nd = len(output_size)
        if x.ndim != nd + 2 or x.dtype == bool or 0 in x.shape[2:] or min(output_size) < 1:
            raise ValueError("adaptive_max_pool_indices: input")
        win, starts = x, []
        for axis, (size, out) in enumerate(zip(x.shape[2:], output_size)):
            start, end = adaptive_windows(size, out)
            L = int((end - start).max())
            idx = np.minimum(start[:, None] + np.arange(L), end[:, None] - 1)
            win = win.take(xp.asarray(idx.ravel()), axis=2 + 2 * axis)
            win = win.reshape(win.shape[:2 + 2 * axis] + (out, L) + win.shape[3 + 2 * axis:])
            starts.append((start, L))
        order = tuple(range(2)) + tuple(range(2, 2 + 2 * nd, 2)) + tuple(range(3, 3 + 2 * nd, 2))
        pos = win.transpose(order).reshape(x.shape[:2] + tuple(output_size) + (-1,)).argmax(axis=-1)
        flat = xp.zeros(pos.shape, np.int64)
        for axis, ((start, L), size) in enumerate(zip(starts, x.shape[2:])):
            inner = math.prod(x.shape[3 + axis:])
            lengths = math.prod(L_ for _, L_ in starts[axis + 1:])
            offset = (pos // lengths) % L
            coord = xp.asarray(start).reshape((-1,) + (1,) * (nd - 1 - axis)) + offset
            flat += coord * inner
        return flat
    return adaptive_max_pool_indices


def _adaptive_max_rule(x, output_size):
    nd = len(output_size)
    if len(x.shape) != nd + 2:
        fail("adaptive_max_pool_indices", (x,), f"expected a {nd + 2}-d input (N, C, {nd} spatial dims) for "
             f"output_size {tuple(output_size)}, got {len(x.shape)}-d {fmt_shape(x.shape)}")
    if x.dtype is dtypes.bool:
        fail("adaptive_max_pool_indices", (x,), "expected a numeric input, got bool", TypeError)
    if any(o < 1 for o in output_size) or any(n == 0 for n in x.shape[2:]):
        fail("adaptive_max_pool_indices", (x,), f"expected non-empty spatial dimensions and a positive "
             f"output_size, got {tuple(output_size)}")
    return Spec(tuple(x.shape[:2]) + tuple(output_size), dtypes.int64)


def _adaptive_max_scratch(x, output_size):
    """The gathered windows (two copies: gather and transpose) and the int64 positions."""
    lengths = [int((e - s).max()) for s, e in (adaptive_windows(n, o) for n, o in zip(x.shape[2:], output_size))]
    windows = x.shape[0] * x.shape[1] * math.prod(o * L for o, L in zip(output_size, lengths))
    return 2 * x.dtype.itemsize * windows + 24 * x.shape[0] * x.shape[1] * math.prod(output_size)


# the argmax of adaptive max pooling; the values are a gather at these indices (eagerc/nn/functional_conv.py)
declare("adaptive_max_pool_indices", ("x",), _adaptive_max_pool_indices, _adaptive_max_rule,
        attrs=("output_size",), scratch=_adaptive_max_scratch, kind="window", flops=_ADAPTIVE, differentiable=False)


# ---------------------------------------------------------------- linear / cubic interpolation along one axis
# interpolate's linear, bilinear, trilinear and bicubic modes are separable: one interpolate_axis per
# resized axis. Each output row is a weighted sum of 2 (linear) or 4 (cubic) input rows; the source rows
# of each tap are non-decreasing, so the adjoint sums runs of rows (_sum_groups), never scatters.

def _source_coords(out, size, scale, align_corners, cubic):
    """PyTorch's source coordinate of each output index (area_pixel_compute_source_index):
    corners aligned, or pixel centres with the user's scale_factor (1/scale) or size/out."""
    i = np.arange(out, dtype=np.float64)
    if align_corners:
        return i * ((size - 1) / (out - 1)) if out > 1 else np.zeros(out)
    src = (i + 0.5) * (1.0 / scale if scale else size / out) - 0.5
    return src if cubic else np.maximum(src, 0.0)


def cubic_coefficients(t):
    """Keys' cubic convolution coefficients (A = -0.75, as PyTorch) of taps -1, 0, 1, 2 at
    fraction t; plain arithmetic, so t may be an array or a Tensor (grid_sample)."""
    A = -0.75

    def near(x):   # |x| <= 1
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def far(x):    # 1 < |x| < 2
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    return far(t + 1), near(t), near(1 - t), far(2 - t)


def interpolation_taps(out, size, scale, align_corners, cubic):
    """[(source index, weight)] per tap along one axis (indices clamped to the input), or
    None when the axis is unchanged (every output reads its own index with weight 1)."""
    src = _source_coords(out, size, scale, align_corners, cubic)
    if out == size and np.array_equal(src, np.arange(out)):
        return None
    i0 = np.floor(src).astype(np.int64)
    if cubic:
        return [(np.clip(i0 - 1 + k, 0, size - 1), w) for k, w in enumerate(cubic_coefficients(src - i0))]
    i0 = np.minimum(i0, size - 1)
    t = src - i0
    return [(i0, 1 - t), (i0 + (i0 < size - 1), t)]


# Short axes (out * in up to this) multiply by the dense (out, in) interpolation matrix instead: one
# BLAS call beats 2-4 strided gathers and their run-summing adjoint until the matrix is mostly zeros.
DENSE_MAX = 128 * 256


def _tap_matrix(xp, taps, out, size, dtype):
    """The (out, size) matrix of the taps: row i holds output i's weights (clamped taps add up)."""
    m = np.zeros((out, size))
    for idx, w in taps:
        np.add.at(m, (np.arange(out), idx), w)
    return xp.asarray(m.astype(dtype))


def _along(xp, m, x, dim):
    """m (out, size) applied along dimension dim of x: one matmul over contiguous rows."""
    if dim == x.ndim - 1:
        return array_matmul(x, m.T)
    lead, rest = x.shape[:dim], x.shape[dim + 1:]
    y = array_matmul(m, x.reshape((math.prod(lead), x.shape[dim], math.prod(rest))))
    return y.reshape(lead + (m.shape[0],) + rest)


def _weights(xp, w, dim, ndim, dtype):
    return xp.asarray(w.astype(dtype).reshape((-1,) + (1,) * (ndim - dim - 1)))


def _interpolate_axis(xp):
    def interpolate_axis(x, dim, output_size, scale, align_corners, cubic):
        if x.dtype.kind not in FLOATING_KINDS or not 0 <= dim < x.ndim or x.shape[dim] == 0 or output_size < 1:
            raise ValueError("interpolate_axis: input")
        taps = interpolation_taps(output_size, x.shape[dim], scale, align_corners, cubic)
        if taps is None:
            return x.copy()
        if output_size * x.shape[dim] <= DENSE_MAX:
            return _along(xp, _tap_matrix(xp, taps, output_size, x.shape[dim], x.dtype), x, dim)
        y = None
        for idx, w in taps:
            term = x.take(xp.asarray(idx), axis=dim)
            term *= _weights(xp, w, dim, x.ndim, x.dtype)
            y = term if y is None else xp.add(y, term, out=y)
        return y
    return interpolate_axis


def _interpolate_axis_backward(xp):
    def interpolate_axis_backward(gy, dim, input_size, scale, align_corners, cubic):
        """The adjoint: each tap's weighted gradient summed back onto the rows it read."""
        taps = interpolation_taps(gy.shape[dim], input_size, scale, align_corners, cubic)
        if taps is None:
            return gy.copy()
        if gy.shape[dim] * input_size <= DENSE_MAX:
            return _along(xp, _tap_matrix(xp, taps, gy.shape[dim], input_size, gy.dtype).T, gy, dim)
        dx = None
        for idx, w in taps:
            part = _sum_groups(xp, gy * _weights(xp, w, dim, gy.ndim, gy.dtype), idx, input_size, dim)
            dx = part if dx is None else xp.add(dx, part, out=dx)
        return dx
    return interpolate_axis_backward


def _interpolate_axis_rule(x, dim, output_size, scale, align_corners, cubic):
    op = "interpolate_axis"
    if not x.dtype.is_floating_point:
        fail(op, (x,), f"expected a floating-point input, got {x.dtype.name} (cast with .float() first)", TypeError)
    if not 0 <= dim < len(x.shape) or x.shape[dim] == 0 or output_size < 1:
        fail(op, (x,), f"expected a non-empty dimension {dim} and a positive output size, got {output_size}")
    return Spec(tuple(x.shape[:dim]) + (output_size,) + tuple(x.shape[dim + 1:]), x.dtype)


def _interpolate_axis_backward_rule(gy, dim, input_size, scale, align_corners, cubic):
    if not 0 <= dim < len(gy.shape) or input_size < 1 or not gy.dtype.is_floating_point:
        fail("interpolate_axis_backward", (gy,), f"expected a floating-point grad_output with dimension {dim} and "
             f"a positive input size, got {input_size}")
    return Spec(tuple(gy.shape[:dim]) + (input_size,) + tuple(gy.shape[dim + 1:]), gy.dtype)


def _interpolate_axis_scratch(x, dim, output_size, scale, align_corners, cubic):
    """One gathered tap beside the running sum (or a contiguous copy for the matmul), and the
    index and weight tables (or the dense matrix)."""
    size = x.shape[dim]
    return x.dtype.itemsize * (math.prod(x.shape) + math.prod(x.shape[:dim]) * output_size * math.prod(
        x.shape[dim + 1:])) + 64 * output_size + 16 * output_size * size * (output_size * size <= DENSE_MAX)


def _interpolate_axis_backward_scratch(gy, dim, input_size, scale, align_corners, cubic):
    """The weighted gradient, each tap's summed part and _sum_groups' gathers and tables (or
    the dense matrix and a contiguous copy)."""
    rest = math.prod(gy.shape[:dim]) * math.prod(gy.shape[dim + 1:])
    out = gy.shape[dim]
    return gy.dtype.itemsize * rest * (2 * out + 2 * input_size) + 64 * (out + input_size) + \
        16 * out * input_size * (out * input_size <= DENSE_MAX)


_INTERPOLATE_ATTRS = ("dim", "output_size", "scale", "align_corners", "cubic")
_TAP_FLOPS = Flops("pooling", lambda out, ins, attrs: 2 * (4 if attrs.get("cubic") else 2) * math.prod(out))
# linear (2 taps) or cubic (4 taps) interpolation of x along dim to output_size
declare("interpolate_axis", ("x",), _interpolate_axis, _interpolate_axis_rule, attrs=_INTERPOLATE_ATTRS,
        scratch=_interpolate_axis_scratch, kind="window", flops=_TAP_FLOPS)
declare("interpolate_axis_backward", ("gy",), _interpolate_axis_backward, _interpolate_axis_backward_rule,
        attrs=("dim", "input_size", "scale", "align_corners", "cubic"), scratch=_interpolate_axis_backward_scratch,
        kind="window")


# ---------------------------------------------------------------- im2col / col2im (F.unfold / F.fold)
# The convolutions' own gather and scatter, exposed: im2col is the window view copied to
# (n, c*kH*kW, L); col2im adds the columns back (_col2im_add) and crops the padding. Each is the
# other's derivative.

def _blocks(size, kernel_size, dilation, padding, stride):
    return tuple(conv_output_size(n, k, s, p, p, d) for n, k, s, p, d in zip(size, kernel_size, stride, padding,
                                                                              dilation))


def _im2col(xp):
    def im2col(x, kernel_size, dilation, padding, stride):
        out = _blocks(x.shape[2:], kernel_size, dilation, padding, stride)
        if x.ndim != 4 or min(out) <= 0:
            raise ValueError("im2col: sizes")
        x = _pad(xp, x, tuple((p, p) for p in padding))
        view = _window_view(xp, x, kernel_size, stride, dilation, out)
        return view.reshape(x.shape[0], -1, math.prod(out))
    return im2col


def _col2im(xp):
    def col2im(cols, output_size, kernel_size, dilation, padding, stride):
        n, ck, L = cols.shape
        K = math.prod(kernel_size)
        out = _blocks(output_size, kernel_size, dilation, padding, stride)
        if ck % K or math.prod(out) != L:
            raise ValueError("col2im: sizes")
        c = ck // K
        padded = tuple(s + 2 * p for s, p in zip(output_size, padding))
        cm = cols.reshape((n, c) + tuple(kernel_size) + (L,)).transpose(1, 2, 3, 0, 4)   # (c, kH, kW, n, L)
        buf = _col2im_add(xp, cm, xp.zeros((c, n) + padded, cols.dtype), kernel_size, stride, dilation, out, False)
        return _unpad(xp, buf.swapaxes(0, 1), tuple((p, p) for p in padding), output_size)
    return col2im


def _im2col_rule(x, kernel_size, dilation, padding, stride):
    if len(x.shape) != 4 or x.dtype is dtypes.bool:
        fail("im2col", (x,), f"expected a numeric 4-d input (N, C, H, W), got {fmt_shape(x.shape)} {x.dtype.name}")
    out = _blocks(x.shape[2:], kernel_size, dilation, padding, stride)
    if min(out) <= 0:
        fail("im2col", (x,), f"calculated shape of the array of sliding blocks as {out}, but its components must "
             "be at least one")
    return Spec((x.shape[0], x.shape[1] * math.prod(kernel_size), math.prod(out)), x.dtype)


def _col2im_rule(cols, output_size, kernel_size, dilation, padding, stride):
    if len(cols.shape) != 3 or cols.dtype is dtypes.bool:
        fail("col2im", (cols,), f"expected a numeric 3-d input (N, C*kH*kW, L), got {fmt_shape(cols.shape)}")
    K = math.prod(kernel_size)
    out = _blocks(output_size, kernel_size, dilation, padding, stride)
    if cols.shape[1] % K or min(out) <= 0 or math.prod(out) != cols.shape[2]:
        fail("col2im", (cols,), f"expected (N, C*{K}, {math.prod(out)}) columns for output_size "
             f"{tuple(output_size)}, got {fmt_shape(cols.shape)}")
    return Spec((cols.shape[0], cols.shape[1] // K) + tuple(output_size), cols.dtype)


def _im2col_scratch(x, kernel_size, dilation, padding, stride):
    return x.dtype.itemsize * _padded_elems(x.shape, tuple((p, p) for p in padding))


def _col2im_scratch(cols, output_size, kernel_size, dilation, padding, stride):
    """The channel-major copy of the columns and the zeroed padded image."""
    padded = math.prod(s + 2 * p for s, p in zip(output_size, padding))
    return cols.dtype.itemsize * (math.prod(cols.shape) + cols.shape[0] * cols.shape[1] // math.prod(kernel_size)
                                  * padded)


_FOLD = ("kernel_size", "dilation", "padding", "stride")
declare("im2col", ("x",), _im2col, _im2col_rule, attrs=_FOLD, scratch=_im2col_scratch, kind="window")
declare("col2im", ("cols",), _col2im, _col2im_rule, attrs=("output_size",) + _FOLD, scratch=_col2im_scratch,
        kind="window")
