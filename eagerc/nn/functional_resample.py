"""Resampling: interpolate (every PyTorch mode), grid_sample, affine_grid, pixel_shuffle,
pixel_unshuffle, channel_shuffle -- the resampling part of eagerc.nn.functional.

Everything but interpolation is a composition of existing ops, so it differentiates to
any order (with respect to the input, and for grid_sample the grid too), traces, and
compiles without rules of its own:

- linear / bilinear / trilinear / bicubic interpolation are separable: one
  interpolate_axis op per resized axis (runtime/ops/conv.py: a weighted sum of 2 or 4
  gathered rows, PyTorch's source coordinates and cubic coefficients A = -0.75) and its
  adjoint interpolate_axis_backward, each the other's derivative. Unchanged axes are skipped;
- 'nearest' / 'nearest-exact' use the upsample_nearest2d op (runtime/ops/conv.py); 1-d
  and 3-d inputs are views onto it (3-d: once over (H, W), once over D);
- 'area' is adaptive average pooling;
- grid_sample gathers the input's flattened spatial positions at the grid's corners
  (bilinear: 2**d corners, bicubic: 16 taps, nearest: one) with `gather`, weighted by
  Tensor ops of the grid; padding modes act on the coordinates as in PyTorch;
- affine_grid is a base grid of normalised coordinates times theta^T (one matmul);
- pixel_shuffle, pixel_unshuffle and channel_shuffle are reshape + permute.
"""
import math

import numpy as np

from ..runtime.dtypes import FLOATING_KINDS
from ..dispatch import apply
from ..ops.creation import tensor
from ..ops.elementwise import where
from ..runtime.ops import OPS
from ..runtime.ops.conv import cubic_coefficients, interpolation_taps
from .functional_conv import (_ntuple, _tensor, adaptive_avg_pool1d, adaptive_avg_pool2d,
                              adaptive_avg_pool3d)

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "grid_sample", "affine_grid",
           "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle"]

# PyTorch's tables of grid_sample's modes (their values are ATen's enum codes); module attributes
# (eagerc.nn.functional re-exports them by name), not functions, so not in __all__
GRID_SAMPLE_INTERPOLATION_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
GRID_SAMPLE_PADDING_MODES = {"zeros": 0, "border": 1, "reflection": 2}

_UPSAMPLE = OPS["upsample_nearest2d"]
_INTERPOLATE_AXIS = OPS["interpolate_axis"]

# the spatial rank each interpolating mode needs (PyTorch's error names the rank)
_MODE_RANK = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_MODES = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact")


# ---------------------------------------------------------------- interpolate

def _output_size(input, size, scale_factor, recompute_scale_factor, n):
    """(output size, the scale per axis the kernels use or None): PyTorch's rules."""
    in_size = tuple(input._array.shape[2:])
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined" if size is not None
                         else "either size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (tuple, list)) and len(size) != n:
            raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input "
                             f"with spatial dimensions of {list(in_size)} and output size of {tuple(size)}. Please "
                             "provide input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, "
                             "...,oK) format.")
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        return _ntuple("size", size, n), (None,) * n
    if isinstance(scale_factor, (tuple, list)) and len(scale_factor) != n:
        raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but got "
                         f"input with spatial dimensions of {list(in_size)} and scale_factor of shape "
                         f"{list(scale_factor)}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                         "scale_factor in (s1, s2, ...,sK) format.")
    factors = tuple(float(f) for f in scale_factor) if isinstance(scale_factor, (tuple, list)) \
        else (float(scale_factor),) * n
    out = tuple(math.floor(s * f) for s, f in zip(in_size, factors))
    return out, (None,) * n if recompute_scale_factor else factors


def _resample(input, out_size, scales, align_corners, cubic):
    """Separable linear/cubic interpolation: one interpolate_axis op per resized axis."""
    x = input
    for dim, (out, size, scale) in enumerate(zip(out_size, input._array.shape[2:], scales), start=2):
        if interpolation_taps(out, size, scale, align_corners, cubic) is not None:
            x = apply(_INTERPOLATE_AXIS, (x,), {"dim": dim, "output_size": out, "scale": scale,
                                               "align_corners": align_corners, "cubic": cubic})
    return x


def _nearest(input, out_size, scales, exact):
    """Nearest neighbour on the upsample_nearest2d op: 1-d as height 1, 3-d as (H, W) then D."""
    n = len(out_size)
    attrs = {"exact": exact}
    if n == 1:
        y = apply(_UPSAMPLE, (input.unsqueeze(2),), dict(attrs, output_size=(1,) + out_size, scales=(None,) + scales))
        return y.squeeze(2)
    if n == 2:
        return apply(_UPSAMPLE, (input,), dict(attrs, output_size=out_size, scales=scales))
    b, c, d, h, w = input._array.shape
    (od, oh, ow), (sd, sh, sw) = out_size, scales
    y = apply(_UPSAMPLE, (input.reshape(b, c * d, h, w),), dict(attrs, output_size=(oh, ow), scales=(sh, sw)))
    y = apply(_UPSAMPLE, (y.reshape(b, c, d, oh * ow),), dict(attrs, output_size=(od, oh * ow), scales=(sd, None)))
    return y.reshape(b, c, od, oh, ow)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize (N, C, L), (N, C, H, W) or (N, C, D, H, W) to `size` or by `scale_factor`
    (output size floor(in * scale_factor)) with PyTorch's modes: nearest, nearest-exact,
    linear, bilinear, bicubic, trilinear (align_corners) and area."""
    _tensor("interpolate", "input", input)
    nd = input._array.ndim
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    if antialias:
        if mode in ("bilinear", "bicubic") and nd == 4:
            raise NotImplementedError("interpolate: antialias=True is not implemented in eagerc (PyTorch's "
                                      "anti-aliased downsampling); use antialias=False")
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a "
                         "4-D tensor as input")
    if mode not in _MODES or nd not in (3, 4, 5):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {nd}D) for the "
                                  f"modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact "
                                  f"(got {mode})")
    rank = _MODE_RANK.get(mode)
    if rank is not None and rank != nd - 2:
        raise NotImplementedError(f"Got {nd}D input, but {mode} mode needs {rank + 2}D input")
    n = nd - 2
    out_size, scales = _output_size(input, size, scale_factor, recompute_scale_factor, n)
    if any(o < 1 for o in out_size):
        raise RuntimeError(f"interpolate: input size {list(input._array.shape[2:])} and scale/size give an "
                           f"empty output size {list(out_size)}")
    if mode == "area":
        return (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d)[n - 1](input, out_size)
    if mode in ("nearest", "nearest-exact"):
        return _nearest(input, out_size, scales, mode == "nearest-exact")
    if input._array.dtype.kind not in FLOATING_KINDS:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not implemented for {input.dtype.name} "
                                  "(convert with .float() first)")
    return _resample(input, out_size, scales, bool(align_corners), mode == "bicubic")


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of interpolate."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated alias of interpolate(..., mode='nearest')."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated alias of interpolate(..., mode='bilinear', align_corners=True)."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---------------------------------------------------------------- affine_grid, grid_sample

def _base_coords(n, align_corners):
    """Normalised coordinates of n pixels along one axis: -1..1 at corners or pixel centres."""
    c = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(n)
    return c if align_corners else c * (n - 1) / n


def affine_grid(theta, size, align_corners=None):
    """The sampling grid (N, H, W, 2) (or (N, D, H, W, 3)) of the affine maps theta (N, 2, 3)
    (or (N, 3, 4)) over an output of `size` (N, C, H, W) (or (N, C, D, H, W)), in
    grid_sample's normalised coordinates: base grid [x, y, (z,) 1] @ theta^T."""
    _tensor("affine_grid", "theta", theta)
    align_corners = bool(align_corners)
    size = tuple(int(s) for s in size)
    if theta._array.dtype.kind not in FLOATING_KINDS:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    shape = tuple(theta._array.shape)
    if len(size) == 4:
        if len(shape) != 3 or shape[1:] != (2, 3):
            raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {size}. Got "
                             f"{list(shape)}.")
    elif len(size) == 5:
        if len(shape) != 3 or shape[1:] != (3, 4):
            raise ValueError(f"Expected a batch of 3D affine matrices of shape Nx3x4 for size {size}. Got "
                             f"{list(shape)}.")
    else:
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {size}.")
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    if shape[0] != size[0]:
        raise ValueError(f"affine_grid: theta has batch {shape[0]} but size has batch {size[0]}")
    spatial = size[2:]
    mesh = np.meshgrid(*(_base_coords(s, align_corners) for s in spatial), indexing="ij")   # (D,) H, W
    base = np.stack(list(mesh[::-1]) + [np.ones(spatial)], axis=-1)        # x (the last axis) first, then y, (z), 1
    base = tensor(base.reshape(1, -1, len(spatial) + 1), dtype=theta.dtype, device=theta.device)
    grid = base.matmul(theta.transpose(1, 2))
    return grid.reshape((size[0],) + spatial + (len(spatial),))


def _unnormalize(coord, size, align_corners):
    """[-1, 1] -> pixel coordinates (corners at -1/1, or the edges of the outer pixels)."""
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, twice_low, twice_high):
    """PyTorch's reflect_coordinates: fold coord into [low, high] by mirroring at the bounds."""
    if twice_low == twice_high:
        return coord * 0
    lo, span = twice_low / 2, (twice_high - twice_low) / 2
    c = (coord - lo).abs()
    extra = c.remainder(span)
    flips = (c / span).detach().floor()
    return where(flips.remainder(2) == 0, extra + lo, span - extra + lo)


def _clip(coord, size):
    """clamp to [0, size - 1] with the grid sampler's gradient: 1 strictly inside, 0 on and
    beyond the bounds (an identity grid with align_corners=True lies exactly on them)."""
    return where((coord > 0) & (coord < size - 1), coord, coord.detach().clamp(0, size - 1))


def _pad_coord(coord, size, padding_mode, align_corners):
    """Apply the padding mode to (unnormalised) coordinates, as grid_sampler_compute_source_index."""
    if padding_mode == "border":
        return _clip(coord, size)
    if padding_mode == "reflection":
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
        return _clip(coord, size)
    return coord


def _gather(flat, idx, mask):
    """flat (N, C, S) read at integer positions idx (N, P) -> (N, C, P), zero where not mask."""
    N, C = flat._array.shape[:2]
    v = flat.gather(2, idx.unsqueeze(1).expand(N, C, idx._array.shape[1]))
    return v if mask is None else v * mask.unsqueeze(1).to(flat.dtype)


def _index(taps, sizes, zeros):
    """Flat index of integer tap coordinates (x first) and, for zeros padding, the in-bounds mask."""
    idx, mask, stride = None, None, 1
    for t, s in zip(taps, sizes):
        inside = (t >= 0) & (t <= s - 1)
        term = t.clamp(0, s - 1).long() * stride
        idx = term if idx is None else idx + term
        mask = inside if mask is None else mask & inside
        stride *= s
    return idx, (mask if zeros else None)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample input (N, C, H, W) at grid (N, Ho, Wo, 2) of normalised (x, y) in [-1, 1]
    (5-d: (N, C, D, H, W) at (N, Do, Ho, Wo, 3)), with mode bilinear / nearest / bicubic and
    padding_mode zeros / border / reflection. Differentiable in input and grid."""
    _tensor("grid_sample", "input", input)
    _tensor("grid_sample", "grid", grid)
    if mode not in GRID_SAMPLE_INTERPOLATION_MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', "
                         f"but got: '{mode}'")
    if padding_mode not in GRID_SAMPLE_PADDING_MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    align_corners = bool(align_corners)
    xs, gs = tuple(input._array.shape), tuple(grid._array.shape)
    nd = len(xs) - 2
    if nd not in (2, 3) or len(gs) != len(xs):
        raise RuntimeError(f"grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, but "
                           f"got input with sizes {list(xs)} and grid with sizes {list(gs)}")
    if gs[-1] != nd:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {nd} in last dimension, but got grid with "
                           f"sizes {list(gs)}")
    if gs[0] != xs[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                           f"sizes {list(xs)} and grid with sizes {list(gs)}")
    if mode == "bicubic" and nd != 2:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if input._array.dtype != grid._array.dtype or input._array.dtype.kind not in FLOATING_KINDS:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have the same floating dtype, but got "
                           f"{input.dtype} and {grid.dtype}")
    N, C = xs[:2]
    sizes = tuple(reversed(xs[2:]))                       # (W, H[, D]): the grid's coordinate order
    flat = input.reshape(N, C, -1)
    g = grid.reshape(N, -1, nd)
    coords = [_unnormalize(g[..., k], s, align_corners) for k, s in enumerate(sizes)]
    zeros = padding_mode == "zeros"
    if mode == "bicubic":
        out = _bicubic(flat, coords, sizes, padding_mode, align_corners)
    else:
        coords = [_pad_coord(c, s, padding_mode, align_corners) for c, s in zip(coords, sizes)]
        if mode == "nearest":
            idx, mask = _index([c.detach().round() for c in coords], sizes, zeros)
            out = _gather(flat, idx, mask)
            if grid.requires_grad:   # piecewise constant in the grid: a zero gradient, as PyTorch's
                out = out * (sum(c * 0 for c in coords) + 1).unsqueeze(1)
        else:
            lows = [c.detach().floor() for c in coords]
            out = None
            for corner in np.ndindex(*(2,) * nd):          # 2**nd corners, each weighted by its opposite area
                taps = [lo + k for lo, k in zip(lows, corner)]
                w = None
                for c, t, k in zip(coords, taps, corner):
                    f = (c - (t - 1)) if k else (t + 1 - c)
                    w = f if w is None else w * f
                idx, mask = _index(taps, sizes, zeros)
                term = _gather(flat, idx, mask) * w.unsqueeze(1)
                out = term if out is None else out + term
    return out.reshape((N, C) + gs[1:-1])


def _bicubic(flat, coords, sizes, padding_mode, align_corners):
    """16 taps around floor(x, y), each read with the padding mode applied to its index
    (PyTorch's get_value_bounded), weighted by the cubic coefficients of the fractions."""
    x, y = coords
    x0, y0 = x.detach().floor(), y.detach().floor()
    wx, wy = cubic_coefficients(x - x0), cubic_coefficients(y - y0)
    zeros = padding_mode == "zeros"
    out = None
    for i in range(4):
        ty = y0 + (i - 1)
        for j in range(4):
            tx = x0 + (j - 1)
            if not zeros:
                tx, ty_ = (_pad_coord(t, s, padding_mode, align_corners).detach()
                           for t, s in ((tx, sizes[0]), (ty, sizes[1])))
            else:
                ty_ = ty
            idx, mask = _index([tx, ty_], sizes, zeros)
            term = _gather(flat, idx, mask) * (wx[j] * wy[i]).unsqueeze(1)
            out = term if out is None else out + term
    return out


# ---------------------------------------------------------------- pixel and channel shuffles

def _shuffle_dims(op, input, n):
    _tensor(op, "input", input)
    nd = input._array.ndim
    if nd < n:
        raise RuntimeError(f"{op} expects input to have at least {n} dimensions, but got input with {nd} "
                           "dimension(s)")
    return tuple(input._array.shape)


def pixel_shuffle(input, upscale_factor):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): each channel block of r*r becomes an r x r patch."""
    shape = _shuffle_dims("pixel_shuffle", input, 3)
    r = int(upscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *b, c, h, w = shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
                           f"of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    k = len(b)
    y = input.reshape(*b, c // (r * r), r, r, h, w)
    y = y.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return y.reshape(*b, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W): the inverse of pixel_shuffle."""
    shape = _shuffle_dims("pixel_unshuffle", input, 3)
    r = int(downscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *b, c, h, w = shape
    for name, n, i in (("height", h, -2), ("width", w, -1)):
        if n % r:
            raise RuntimeError(f"pixel_unshuffle expects {name} to be divisible by downscale_factor, but "
                               f"input.size({i})={n} is not divisible by {r}")
    k = len(b)
    y = input.reshape(*b, c, h // r, r, w // r, r)
    y = y.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return y.reshape(*b, c * r * r, h // r, w // r)


def channel_shuffle(input, groups):
    """(N, C, *) with C = g * k: channel order (g, k) -> (k, g), as in ShuffleNet."""
    shape = _shuffle_dims("channel_shuffle", input, 3)
    g = int(groups)
    if g <= 0:
        raise ValueError(f"Number of groups to divide channels in must be positive. Value of groups:{g}")
    n, c = shape[:2]
    if c % g:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {g} groups.")
    return input.reshape(n, g, c // g, *shape[2:]).transpose(1, 2).reshape(shape)



native_channel_shuffle = channel_shuffle
