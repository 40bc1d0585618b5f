"""Creation primitives: tensors made from attributes alone (no tensor inputs).

They are ops so that a traced function that builds `zeros` or draws `randn`
records a node (with the generator's seed and offset as attributes) instead of a
baked-in constant.

The checks of their arguments live here once, with PyTorch's wording and the op's name:
the shape rules (which validate loaded programs) and the frontend's eager functions (which
must refuse before drawing random numbers, so a bad call never moves the generator) call
the same functions.
"""
import math
import operator

import numpy as np

from ...runtime import dtypes, random
from ..kernels import eager as c_rows, rows as c_row_kernels
from . import declare
from .meta import Spec


def _np_dtype(dtype):
    return dtypes.as_dtype(dtype).np


def _full(xp):
    def full(shape, value, dtype):
        dt = _np_dtype(dtype)
        if not shape and dt.kind == "f":  # a 0-d float (backward's root gradient): one C call, where
            return xp.array(value, dt)    # xp.full is empty + copyto in Python (converts alike)
        if value == 0 and math.copysign(1.0, value) > 0:  # (not -0.0): zeroed pages from the OS, no fill pass
            return xp.zeros(tuple(shape), dtype=dt)
        return xp.full(tuple(shape), value, dtype=dt)
    return full


def _arange(xp):
    def arange(start, end, step, dtype):
        return xp.arange(start, end, step, dtype=_np_dtype(dtype))
    return arange


def _linspace(xp):
    def linspace(start, end, steps, dtype):
        return xp.linspace(start, end, steps).astype(_np_dtype(dtype))
    return linspace


def _eye(xp):
    def eye(n, m, dtype):
        return xp.eye(n, m, dtype=_np_dtype(dtype))
    return eye


def _draw(fn):
    def impl(xp):
        def draw(shape, dtype, seed, offset, **kw):
            return fn(seed, offset, tuple(shape), _np_dtype(dtype), xp=xp, **kw)
        return draw
    return impl


def _uniform(xp):
    """random.uniform; numpy float32/float64 draws from 4096 elements by the C kernel (rows.py: a
    Philox block per 4 elements, the same words and formula, so the same bits)."""
    draw = _draw(random.uniform)(xp)
    if xp is not np:
        return draw

    def uniform(shape, dtype, seed, offset):
        dt = _np_dtype(dtype)
        n = math.prod(shape)
        if n >= 4096 and (dt == np.float32 or dt == np.float64) and c_rows.enabled() and 0 <= offset < 2**64 - n:
            k = c_row_kernels.kernel("uniform", dt.name)
            if k is not None:
                out = np.empty(tuple(shape), dt)
                k(out.ctypes.data, n, int(seed) & random.MASK64, offset)
                return out
        return draw(shape, dtype, seed, offset)
    return uniform


def _randint(xp):
    def randint(shape, low, high, dtype, seed, offset):
        return random.integers(seed, offset, tuple(shape), low, high, _np_dtype(dtype), xp=xp)
    return randint


def _randperm(xp):
    def randperm(n, dtype, seed, offset):
        return random.permutation(seed, offset, n, xp=xp).astype(_np_dtype(dtype))
    return randperm


# ---------------------------------------------------------------- argument checks

def check_size(fn, size):
    """`size` as a tuple of Python ints, or PyTorch's error naming `fn` and the bad entry."""
    for s in size:  # the common case, plain non-negative ints, costs one loop
        if type(s) is not int or s < 0:
            break
    else:
        return tuple(size)
    out = []
    for i, s in enumerate(size):
        if isinstance(s, float) or not hasattr(s, "__index__"):
            raise TypeError(f"{fn}(): argument 'size' must be a tuple of ints, but found element of "
                            f"type {type(s).__name__} at pos {i}")
        out.append(operator.index(s))  # a plain int: no size-comparison guards are recorded
    for n in out:
        if n < 0:
            raise RuntimeError(f"{fn}: Trying to create tensor with negative dimension {n}: {out}")
    return tuple(out)


def check_count(fn, name, n, what=None):
    """An int count argument (linspace's steps, randperm's n, eye's n and m)."""
    if isinstance(n, float) or not hasattr(n, "__index__"):
        raise TypeError(f"{fn}(): argument '{name}' must be int, not {type(n).__name__}")
    n = operator.index(n)
    if n < 0:
        raise RuntimeError(f"{fn}: {what or name + ' must be non-negative'}, got {name}={n}")
    return n


def check_range(start, end, step):
    """arange's bounds, with PyTorch's messages: the number of elements it makes."""
    if type(start) is int and type(end) is int and type(step) is int:  # plain ints: exact, and quick
        if step and (end - start) * step >= 0:
            return max(0, -((start - end) // step))
        a, b, d = start, end, step
    else:
        a, b, d = float(start), float(end), float(step)  # floats: no guards on dynamic sizes
    if d == 0:
        raise RuntimeError(f"arange: step must be nonzero (start={start}, end={end}, step={step})")
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(d)):
        raise RuntimeError(f"arange: unsupported range: {start} -> {end} (step={step})")
    if (d > 0 and b < a) or (d < 0 and b > a):
        raise RuntimeError(f"arange: upper bound and larger bound inconsistent with step sign "
                           f"(start={start}, end={end}, step={step})")
    return max(0, math.ceil((b - a) / d))


def _shape_rule(fn):
    def rule(shape, dtype, **attrs):
        return Spec(check_size(fn, shape), dtypes.as_dtype(dtype))
    return rule


def _arange_rule(start, end, step, dtype):
    return Spec((check_range(start, end, step),), dtypes.as_dtype(dtype))


def _linspace_rule(start, end, steps, dtype):
    return Spec((check_count("linspace", "steps", steps, "number of steps must be non-negative"),),
                dtypes.as_dtype(dtype))


def _eye_rule(n, m, dtype):
    n = check_count("eye", "n", n, "n must be greater or equal to 0")
    return Spec((n, check_count("eye", "m", m, "m must be greater or equal to 0")), dtypes.as_dtype(dtype))


def _randperm_rule(n, dtype, **attrs):
    return Spec((check_count("randperm", "n", n),), dtypes.as_dtype(dtype))


_CREATION = dict(kind="creation", differentiable=False)
_RANDOM = dict(kind="creation", effects=("random",), differentiable=False)
declare("full", (), _full, _shape_rule("full"), attrs=("shape", "value", "dtype"), **_CREATION)
declare("arange", (), _arange, _arange_rule, attrs=("start", "end", "step", "dtype"), **_CREATION)
declare("linspace", (), _linspace, _linspace_rule, attrs=("start", "end", "steps", "dtype"), **_CREATION)
declare("eye", (), _eye, _eye_rule, attrs=("n", "m", "dtype"), **_CREATION)
declare("uniform", (), _uniform, _shape_rule("uniform"), attrs=("shape", "dtype", "seed", "offset"),
        **_RANDOM)
declare("normal", (), _draw(random.normal), _shape_rule("normal"), attrs=("shape", "dtype", "seed", "offset"),
        **_RANDOM)
declare("randint", (), _randint, _shape_rule("randint"), attrs=("shape", "low", "high", "dtype", "seed", "offset"),
        **_RANDOM)
declare("randperm", (), _randperm, _randperm_rule, attrs=("n", "dtype", "seed", "offset"), **_RANDOM)
