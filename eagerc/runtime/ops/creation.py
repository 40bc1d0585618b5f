"""Creation primitives: tensors made from attributes alone (no tensor inputs).

They are ops so that a traced function that builds `zeros` or draws `randn`
records a node (with the generator's seed and offset as attributes) instead of a
baked-in constant.
"""
from ...runtime import dtypes, random
from . import declare
from .meta import Spec


def _np_dtype(dtype):
    return dtypes.as_dtype(dtype).np


def _full(xp):
    def full(shape, value, dtype):
        return xp.full(tuple(shape), value, dtype=_np_dtype(dtype))
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


def _randint(xp):
    def randint(shape, low, high, dtype, seed, offset):
        return random.integers(seed, offset, tuple(shape), low, high, _np_dtype(dtype), xp=xp)
    return randint


def _randperm(xp):
    def randperm(n, dtype, seed, offset):
        return random.permutation(seed, offset, n, xp=xp).astype(_np_dtype(dtype))
    return randperm


def _shape_rule(shape, dtype, **attrs):
    if any((not isinstance(s, int)) or s < 0 for s in shape):
        raise RuntimeError(f"creation: invalid shape {tuple(shape)}: sizes must be non-negative ints")
    return Spec(tuple(shape), dtypes.as_dtype(dtype))


def _arange_rule(start, end, step, dtype):
    import math
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    n = max(0, math.ceil((end - start) / step))
    return Spec((n,), dtypes.as_dtype(dtype))


declare("full", (), _full, _shape_rule, attrs=("shape", "value", "dtype"), differentiable=False)
declare("arange", (), _arange, _arange_rule, attrs=("start", "end", "step", "dtype"), differentiable=False)
declare("linspace", (), _linspace,
        lambda start, end, steps, dtype: Spec((steps,), dtypes.as_dtype(dtype)),
        attrs=("start", "end", "steps", "dtype"), differentiable=False)
declare("eye", (), _eye, lambda n, m, dtype: Spec((n, m), dtypes.as_dtype(dtype)),
        attrs=("n", "m", "dtype"), differentiable=False)
declare("uniform", (), _draw(random.uniform), _shape_rule,
        attrs=("shape", "dtype", "seed", "offset"), differentiable=False)
declare("normal", (), _draw(random.normal), _shape_rule,
        attrs=("shape", "dtype", "seed", "offset"), differentiable=False)
declare("randint", (), _randint, _shape_rule,
        attrs=("shape", "low", "high", "dtype", "seed", "offset"), differentiable=False)
declare("randperm", (), _randperm, lambda n, dtype, **a: Spec((n,), dtypes.as_dtype(dtype)),
        attrs=("n", "dtype", "seed", "offset"), differentiable=False)
