"""Op-table entries: elementwise ops (unary, binary with broadcasting, comparisons, logic)."""
import math

import numpy as np

import eagerc
from optable import Case, positive, unit, away_from_zero, distinct, integers, booleans

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover
    _erf = np.vectorize(math.erf)

UNARY_SHAPES = [((3, 4),), ((),), ((2, 0),), ((2, 3, 2),)]
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 1), (4,)), ((), (2, 3)), ((2, 1, 3), (4, 1)), ((0, 3), (3,))]


def unary(name, ref, make=None, **kw):
    return Case(name, getattr(eagerc, name), ref, UNARY_SHAPES, make=(make,), **kw)


def binary(name, fn, ref, make=(None, None), **kw):
    return Case(name, fn, ref, BINARY_SHAPES, make=make, **kw)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _erfinv(x):
    """erf's inverse by bisection on math.erf: slow, simple and independent of the kernel."""
    lo, hi = np.full(np.shape(x), -6.0), np.full(np.shape(x), 6.0)
    for _ in range(200):
        mid = (lo + hi) / 2
        below = _erf(mid) < x
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def _near(rng, shape):  # b close to the first input's values: isclose sees both outcomes
    return rng.standard_normal(shape)


CASES = [
    unary("exp", np.exp),
    unary("exp2", np.exp2),
    unary("log", np.log, positive),
    unary("log2", np.log2, positive),
    unary("log1p", np.log1p, positive),
    unary("expm1", np.expm1),
    unary("sqrt", np.sqrt, positive),
    unary("rsqrt", lambda x: 1 / np.sqrt(x), positive),
    unary("sin", np.sin),
    unary("cos", np.cos),
    unary("tan", np.tan, unit),
    unary("tanh", np.tanh),
    unary("sigmoid", _sigmoid),
    unary("erf", lambda x: _erf(x)),
    unary("reciprocal", np.reciprocal, positive),
    unary("neg", np.negative),
    unary("abs", np.abs, away_from_zero),
    unary("sign", np.sign, grad=False),
    unary("relu", lambda x: np.maximum(x, 0), away_from_zero),
    unary("square", np.square),
    unary("floor", np.floor, grad=False),
    unary("ceil", np.ceil, grad=False),
    unary("round", np.round, grad=False),
    unary("trunc", np.trunc, grad=False),
    Case("round_decimals", lambda x: eagerc.round(x, decimals=2), lambda x: np.round(x, 2), UNARY_SHAPES[:2],
         grad=False, atol32=1e-2),
    unary("isnan", np.isnan, grad=False),
    unary("isinf", np.isinf, grad=False),
    unary("isfinite", np.isfinite, grad=False),
    Case("isnan_special", eagerc.isnan, np.isnan, [((5,),)],
         make=(lambda rng, s: np.array([0.0, np.nan, np.inf, -np.inf, 1.0]),), grad=False),
    Case("nan_to_num", lambda x: eagerc.nan_to_num(x, nan=0.5, posinf=2.0, neginf=-2.0),
         lambda x: np.nan_to_num(x, nan=0.5, posinf=2.0, neginf=-2.0), [((5,),)],
         make=(lambda rng, s: np.array([0.3, np.nan, np.inf, -np.inf, 1.0]),), grad=False),
    Case("nan_to_num_grad", eagerc.nan_to_num, np.nan_to_num, [((3, 4),)]),
    unary("logical_not", np.logical_not, booleans, grad=False),
    Case("bitwise_not", eagerc.bitwise_not, np.invert, [((3, 4),)], make=(integers(),), grad=False),
    binary("add", lambda a, b: a + b, np.add),
    binary("add_alpha", lambda a, b: eagerc.add(a, b, alpha=2.5), lambda a, b: a + 2.5 * b),
    binary("sub", lambda a, b: a - b, np.subtract),
    binary("mul", lambda a, b: a * b, np.multiply),
    binary("div", lambda a, b: a / b, np.divide, make=(None, positive)),
    binary("floor_divide", lambda a, b: a // b, np.floor_divide, make=(None, positive), grad=False),
    binary("div_trunc", lambda a, b: eagerc.div(a, b, rounding_mode="trunc"), lambda a, b: np.trunc(a / b),
           make=(None, positive), grad=False),
    binary("remainder", lambda a, b: a % b, np.remainder, make=(None, positive)),
    binary("pow", lambda a, b: a ** b, np.power, make=(positive, None)),
    binary("maximum", eagerc.maximum, np.maximum, make=(distinct, away_from_zero)),
    binary("minimum", eagerc.minimum, np.minimum, make=(distinct, away_from_zero)),
    binary("eq", lambda a, b: a == b, np.equal, make=(integers(0, 3), integers(0, 3)), grad=False),
    binary("ne", lambda a, b: a != b, np.not_equal, make=(integers(0, 3), integers(0, 3)), grad=False),
    binary("lt", lambda a, b: a < b, np.less, grad=False),
    binary("le", lambda a, b: a <= b, np.less_equal, grad=False),
    binary("gt", lambda a, b: a > b, np.greater, grad=False),
    binary("ge", lambda a, b: a >= b, np.greater_equal, grad=False),
    binary("logical_and", eagerc.logical_and, np.logical_and, make=(booleans, booleans), grad=False),
    binary("logical_or", eagerc.logical_or, np.logical_or, make=(booleans, booleans), grad=False),
    binary("logical_xor", eagerc.logical_xor, np.logical_xor, make=(booleans, booleans), grad=False),
    binary("bitwise_and", lambda a, b: a & b, np.bitwise_and, make=(integers(), integers()), grad=False),
    binary("bitwise_or", lambda a, b: a | b, np.bitwise_or, make=(integers(), integers()), grad=False),
    binary("bitwise_xor", lambda a, b: a ^ b, np.bitwise_xor, make=(integers(), integers()), grad=False),
    binary("bool_and", lambda a, b: a & b, np.logical_and, make=(booleans, booleans), grad=False),
    binary("logaddexp", eagerc.logaddexp, np.logaddexp),
    binary("hypot", lambda a, b: a.hypot(b), np.hypot, make=(away_from_zero, away_from_zero)),
    binary("atan2", eagerc.atan2, np.arctan2, make=(away_from_zero, away_from_zero)),
    Case("arctan2_promote", lambda a, b: a.arctan2(b), np.arctan2, [((3, 4), (4,))], make=(integers(), None),
         grad=False),
    unary("erfinv", _erfinv, unit),
    Case("addcmul", lambda x, a, b: eagerc.addcmul(x, a, b, value=0.5), lambda x, a, b: x + 0.5 * a * b,
         [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), ()), ((), (2, 3), (3,))]),
    Case("addcdiv", lambda x, a, b: x.addcdiv(a, b, value=-2), lambda x, a, b: x - 2 * a / b,
         [((3, 4), (3, 4), (3, 4)), ((4,), (3, 1), (4,))], make=(None, None, positive)),
    Case("addcmul_", lambda x, a, b: (x * 1).addcmul_(a, b), lambda x, a, b: x + a * b, [((3, 4), (4,), (3, 4))]),
    Case("addcdiv_", lambda x, a, b: (x * 1).addcdiv_(a, b, value=0.1), lambda x, a, b: x + 0.1 * a / b,
         [((3, 4), (3, 4), (1, 4))], make=(None, None, positive)),
    Case("isclose", lambda a, b: eagerc.isclose(a, a + b * 1e-3, rtol=1e-3, atol=1e-4),
         lambda a, b: np.abs(b * 1e-3) <= 1e-4 + 1e-3 * np.abs(a + b * 1e-3), [((3, 4), (3, 4)), ((5,), (5,))],
         make=(None, _near), grad=False, float32=False),
    Case("isclose_int", lambda a, b: a.isclose(b, rtol=0.3, atol=0), lambda a, b: np.isclose(a, b, rtol=0.3, atol=0),
         [((3, 4), (3, 4))], make=(integers(1, 6), integers(1, 6)), grad=False),
    # Python scalars on either side
    Case("add_scalar", lambda a: 2.5 + a - 1, lambda a: 2.5 + a - 1, UNARY_SHAPES),
    Case("rsub_scalar", lambda a: 3 - a, lambda a: 3 - a, UNARY_SHAPES),
    Case("rdiv_scalar", lambda a: 2 / a, lambda a: 2 / a, UNARY_SHAPES, make=(positive,)),
    Case("pow_scalar", lambda a: a ** 3, lambda a: a ** 3, UNARY_SHAPES),
    Case("rpow_scalar", lambda a: 2 ** a, lambda a: 2.0 ** a, UNARY_SHAPES),
    Case("where", lambda c, a, b: eagerc.where(c, a, b), np.where,
         [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), (4,)), ((), (2,), ())], make=(booleans, None, None)),
    Case("where_scalar", lambda c, a: eagerc.where(c, a, 0.0), lambda c, a: np.where(c, a, 0.0),
         [((3, 4), (3, 4))], make=(booleans, None)),
    Case("clamp", lambda x: eagerc.clamp(x, -0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), UNARY_SHAPES,
         make=(away_from_zero,)),
    Case("clamp_min", lambda x: x.clamp(min=0.2), lambda x: np.maximum(x, 0.2), UNARY_SHAPES[:2],
         make=(away_from_zero,)),
    Case("clamp_tensor", lambda x, lo: eagerc.clamp(x, min=lo), lambda x, lo: np.maximum(x, lo),
         [((3, 4), (4,))], make=(distinct, away_from_zero)),
    Case("lerp", eagerc.lerp, lambda a, b, w: a + w * (b - a), [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), ())]),
    Case("lerp_scalar", lambda a, b: eagerc.lerp(a, b, 0.3), lambda a, b: a + 0.3 * (b - a), [((3, 4), (4,))]),
    Case("cast_float64", lambda x: x.to(eagerc.float64) * 1, lambda x: x.astype(np.float64), UNARY_SHAPES,
         out_dtype="float64"),
    Case("cast_int", lambda x: x.long(), lambda x: x.astype(np.int64), [((3, 4),)], grad=False),
    Case("clone", lambda x: x.clone(), lambda x: x.copy(), UNARY_SHAPES),
    Case("to_device_cpu", lambda x: x.to("cpu"), lambda x: x, [((3,),)]),
    Case("to_device_op", lambda x: eagerc.dispatch.apply(eagerc.runtime.OPS["to_device"], (x,),
                                                          {"device": "cpu"}) * 2, lambda x: x * 2, [((3,),)]),
    # creation ops (no tensor inputs): values against numpy
    Case("zeros", lambda x: eagerc.zeros(2, 3) + x, lambda x: np.zeros((2, 3)) + x, [((3,),)], out16="float32"),
    Case("full", lambda x: eagerc.full((2, 3), 1.5) * x, lambda x: np.full((2, 3), 1.5) * x, [((3,),)], out16="float32"),
    Case("arange", lambda x: eagerc.arange(1, 7, 2) * x, lambda x: np.arange(1, 7, 2) * x, [((3,),)]),
    Case("linspace", lambda x: eagerc.linspace(0, 1, 5) + x, lambda x: np.linspace(0, 1, 5) + x, [((5,),)], out16="float32"),
    Case("eye", lambda x: eagerc.eye(3, 4) * x, lambda x: np.eye(3, 4) * x, [((4,),)], out16="float32"),
]

# random creation ops: the op plumbing (seed/offset attributes) against eagerc.runtime.random,
# whose formulas are checked against an independent Philox in tests/test_random.py


def _gen():
    return eagerc.Generator().manual_seed(7)


def _words_ref(kind, shape, dtype=np.float64, **kw):
    from eagerc.runtime import random as R
    return getattr(R, kind)(7, 0, shape, dtype=dtype, **kw) if kind in ("uniform", "normal") else None


CASES += [
    Case("rand", lambda x: eagerc.rand(3, 4, generator=_gen(), dtype=x.dtype) + x,
         lambda x: _words_ref("uniform", (3, 4), x.dtype) + x, [((4,),)]),
    Case("randn", lambda x: eagerc.randn(3, 4, generator=_gen(), dtype=x.dtype) * x,
         lambda x: _words_ref("normal", (3, 4), x.dtype) * x, [((4,),)], rtol=1e-12),
    Case("randint", lambda x: eagerc.randint(0, 10, (3, 4), generator=_gen()) + x,
         lambda x: __import__("eagerc").runtime.random.integers(7, 0, (3, 4), 0, 10, np.int64) + x,
         [((4,),)]),
    Case("randperm", lambda x: eagerc.randperm(6, generator=_gen()) * x,
         lambda x: __import__("eagerc").runtime.random.permutation(7, 0, 6) * x, [((6,),)]),
]
