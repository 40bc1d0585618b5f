"""Elementwise primitives: unary math, binary arithmetic, comparisons, logic, casts.

One line per op: its name, its `promotion` (which gives its dtype rule here and how the
frontend promotes its operands), the numpy ufunc it is (which then is its kernel) or a
kernel written below, and its other traits (see runtime/ops/__init__.py). The frontend
function, Tensor method, passes' op classes and the numpy backend's direct ufunc calls
all follow from that line.

Type promotion is settled by the frontend before an op runs (it inserts `cast`
nodes), so kernels see operands of one dtype (or a Python scalar) and the rules
here only check that and broadcast shapes.
"""
import math

import numpy as np

from ...runtime import dtypes
from . import declare
from .meta import Spec, broadcast_shapes, fail, promoted

# ---------------------------------------------------------------- rules


_EXPECTED = {"float": "expected floating-point inputs (integers are cast to the default float first)",
             "float_only": "expected floating-point inputs (as in PyTorch, there is no integer {op})",
             "integral": "expected integer or bool inputs"}


def _rule(op, promotion):
    """The shape/dtype rule of an elementwise op: the broadcast shape, the dtype its promotion gives."""
    def rule(*specs, **attrs):
        if promotion == "bool":
            return Spec(broadcast_shapes(op, specs), dtypes.bool)
        d = promoted(specs)
        if promotion != "same" and d.is_floating_point != (promotion != "integral"):
            fail(op, specs, _EXPECTED[promotion].format(op=op), TypeError)
        return Spec(broadcast_shapes(op, specs), d)
    return rule


# ---------------------------------------------------------------- kernels

def _sigmoid(xp):
    def sigmoid(x):
        # exp of a non-positive number only: no overflow warnings for large |x|
        e = xp.exp(-xp.abs(x))
        return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
    return sigmoid


def _same_dtype(f):
    """scipy's ufunc f, giving x's dtype: it computes bfloat16 (a type it does not know) in
    float32 or float64, rounded back here."""
    return lambda x: f(x).astype(x.dtype, copy=False)


def _erf(xp):
    if xp is np:
        try:
            from scipy.special import erf
            return _same_dtype(erf)
        except ImportError:
            vec = np.vectorize(math.erf, otypes=[np.float64])
            return lambda x: vec(x).astype(x.dtype, copy=False)
    from cupyx.scipy.special import erf
    return erf


def _erfinv(xp):
    """The inverse of erf on (-1, 1); +-inf at +-1, nan outside. scipy's when installed, else
    Giles' single-precision approximation refined by two Newton steps on math.erf."""
    if xp is not np:
        from cupyx.scipy.special import erfinv
        return erfinv
    try:
        from scipy.special import erfinv
        return _same_dtype(erfinv)
    except ImportError:
        pass
    erf = _erf(np)

    def erfinv(x):
        x64 = x.astype(np.float64)
        w = -np.log((1.0 - x64) * (1.0 + x64))
        small = w - 2.5
        big = np.sqrt(np.maximum(w, 5.0)) - 3.0
        p = np.where(w < 5.0, _horner(small, _GILES_SMALL), _horner(big, _GILES_BIG)) * x64
        for _ in range(2):  # Newton on erf(p) = x: erf'(p) = 2/sqrt(pi) exp(-p^2)
            p = p - (erf(p) - x64) / (_TWO_OVER_SQRT_PI * np.exp(-p * p))
        p = np.where(np.abs(x64) == 1, np.copysign(np.inf, x64), p)
        return p.astype(x.dtype, copy=False)
    return erfinv


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_GILES_SMALL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_GILES_BIG = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
              -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _horner(w, coefficients):
    p = np.full_like(w, coefficients[0])
    for c in coefficients[1:]:
        p = p * w + c
    return p


def _rsqrt(xp):
    def rsqrt(x):
        return xp.reciprocal(xp.sqrt(x))
    return rsqrt


def _relu(xp):
    def relu(x):
        return xp.maximum(x, 0).astype(x.dtype, copy=False)
    return relu


def _pow(xp):
    def power(a, b):
        out = xp.power(a, b)
        dt = a.dtype if hasattr(a, "dtype") else b.dtype
        return out.astype(dt, copy=False)
    return power


def _sign(xp):
    def sign(x):
        if x.dtype == xp.bool_:
            return x.copy()
        return xp.sign(x)
    return sign


def _clamp(xp):
    def clamp(x, min=None, max=None):
        if min is not None:
            x = xp.maximum(x, min)
        if max is not None:
            x = xp.minimum(x, max)
        return x
    return clamp


def _lerp(xp):
    return lambda a, b, w: a + w * (b - a)


def _cast(xp):
    def cast(x, dtype):
        return x.astype(dtypes.as_dtype(dtype).np)
    return cast


def _nan_to_num(xp):
    def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
        if x.dtype.kind == "V":   # bfloat16, which numpy's nan_to_num leaves alone: in float32
            big = float(np.finfo(x.dtype).max)
            return xp.nan_to_num(x.astype(np.float32), nan=nan, posinf=big if posinf is None else posinf,
                                 neginf=-big if neginf is None else neginf).astype(x.dtype)
        return xp.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)
    return nan_to_num


class IntegerDivisionByZero(RuntimeError, ZeroDivisionError):
    """An integer tensor divided by zero (`//`, `%`): PyTorch's `RuntimeError: ZeroDivisionError`,
    also catchable as Python's ZeroDivisionError. Integers hold no inf or nan to answer with."""


def _checked_int_division(xp, name, ufunc):
    """`ufunc` (floor_divide, remainder) that raises for an integer divisor of 0, as PyTorch
    does on CPU (its CUDA kernels return garbage; eagerc checks on every device). Only integer
    operands pay for the scan of the divisor; floats give inf/nan. The op's ufunc trait names the
    ufunc but is not exact, so the numpy backend calls this kernel rather than the bare ufunc."""
    def division(a, b):
        if hasattr(b, "dtype"):
            zero = b.dtype.kind in "biu" and xp.count_nonzero(b) != b.size
        else:
            zero = b == 0 and a.dtype.kind in "biu"
        if zero:
            raise IntegerDivisionByZero(f"{name}: ZeroDivisionError: integer division by zero (integer "
                                        "tensors hold no inf or nan; divide floating-point tensors for those)")
        return ufunc(a, b)
    division.__name__ = name
    return division


# ---------------------------------------------------------------- declarations

NONDIFF = dict(differentiable=False)


def _elementwise(name, inputs, promotion, impl=None, **traits):
    """An elementwise op whose dtype rule is its `promotion` (see runtime/ops/__init__.py)."""
    declare(name, inputs, impl, _rule(name, promotion), kind="elementwise", promotion=promotion,
            broadcasts=len(inputs) > 1, **traits)


def _unary(name, promotion, impl=None, **traits):
    _elementwise(name, ("x",), promotion, impl, **traits)


def _binary(name, promotion, impl=None, **traits):
    _elementwise(name, ("a", "b"), promotion, impl, **traits)


# float math: integer inputs are cast to the default float first
for _name in ("exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "reciprocal"):
    _unary(_name, "float", ufunc=_name)
_unary("rsqrt", "float", _rsqrt)
_unary("sigmoid", "float", _sigmoid)
_unary("erf", "float", _erf)
_unary("erfinv", "float", _erfinv)
# same dtype in and out
_unary("neg", "same", ufunc="negative")
_unary("abs", "same", ufunc="absolute")
_unary("square", "same", ufunc="square")
_unary("relu", "same", _relu)
_unary("sign", "same", _sign, ufunc="sign", **NONDIFF)       # a bool input is copied
for _name in ("floor", "ceil", "trunc"):
    _unary(_name, "same", ufunc=_name, **NONDIFF)
_unary("round", "same", lambda xp: xp.round, **NONDIFF)     # half to even, like numpy and PyTorch
# bool results
for _name in ("isnan", "isinf", "isfinite", "logical_not"):
    _unary(_name, "bool", ufunc=_name, **NONDIFF)
_unary("bitwise_not", "integral", ufunc="invert", **NONDIFF)

_binary("add", "same", ufunc="add", neutral=(0, "both"))
_binary("sub", "same", ufunc="subtract", neutral=(0, "right"))
_binary("mul", "same", ufunc="multiply", neutral=(1, "both"))
_binary("div", "float", ufunc="divide", neutral=(1, "right"))
_binary("pow", "same", _pow, ufunc="power", neutral=(1, "right"))    # the result has the tensor's dtype
_binary("maximum", "same", ufunc="maximum")
_binary("minimum", "same", ufunc="minimum")
_binary("floor_divide", "same", lambda xp: _checked_int_division(xp, "floor_divide", xp.floor_divide),
        ufunc="floor_divide", **NONDIFF)
# Python/PyTorch semantics: the result has the sign of the divisor
_binary("remainder", "same", lambda xp: _checked_int_division(xp, "remainder", xp.remainder), ufunc="remainder")
for _name, _uf in (("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"),
                   ("gt", "greater"), ("ge", "greater_equal"), ("logical_and", "logical_and"),
                   ("logical_or", "logical_or"), ("logical_xor", "logical_xor")):
    _binary(_name, "bool", ufunc=_uf, **NONDIFF)
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _binary(_name, "integral", ufunc=_name, **NONDIFF)
_binary("logaddexp", "float_only", ufunc="logaddexp")     # log(exp(a) + exp(b)), without overflow
_binary("hypot", "float_only", ufunc="hypot")             # sqrt(a*a + b*b), without overflow
_binary("atan2", "float", ufunc="arctan2")                 # the angle of the point (b, a); integers -> float


def _where_rule(cond, a, b):
    if not isinstance(cond, Spec) or cond.dtype is not dtypes.bool:
        fail("where", (cond, a, b), "expected a bool condition", TypeError)
    return Spec(broadcast_shapes("where", (cond, a, b)), promoted((a, b)))


def _where(xp):
    pick = xp.where

    def where(cond, a, b):
        out = pick(cond, a, b)
        if out.dtype.kind == "f":   # bfloat16 beside a Python float: numpy makes float32, PyTorch keeps
            for x in (a, b):        # bfloat16 (the frontend gave two arrays one dtype)
                if getattr(x, "dtype", None) is not None and x.dtype.kind == "V":
                    return out.astype(x.dtype)
        return out
    return where


declare("where", ("cond", "a", "b"), _where, _where_rule, kind="elementwise", broadcasts=True)


def _clamp_rule(x, min=None, max=None):
    if min is None and max is None:
        fail("clamp", (x,), "at least one of min and max must be given", ValueError)
    return Spec(x.shape, promoted((x,) + tuple(v for v in (min, max) if v is not None)))


declare("clamp", ("x",), _clamp, _clamp_rule, attrs=("min", "max"), kind="elementwise")
_elementwise("lerp", ("a", "b", "w"), "float", _lerp)


def _cast_rule(x, dtype):
    return Spec(x.shape, dtypes.as_dtype(dtype))


declare("cast", ("x",), _cast, _cast_rule, attrs=("dtype",), kind="elementwise")


def _nan_to_num_rule(x, **attrs):
    return Spec(x.shape, x.dtype)


declare("nan_to_num", ("x",), _nan_to_num, _nan_to_num_rule, attrs=("nan", "posinf", "neginf"), kind="elementwise")


def _clone(xp):
    return lambda x: x.copy()


# a copy of the elements (kind copy), also pointwise: fused and planned like elementwise ops
declare("clone", ("x",), _clone, lambda x: Spec(x.shape, x.dtype), kind="copy", pointwise=True)


def _to_device(xp):
    def to_device(x, device):
        from ..device import device as parse, xp_for
        dev = parse(device)
        if dev.type == "cpu":
            return x if isinstance(x, np.ndarray) else x.get()
        cp = xp_for(dev)
        with cp.cuda.Device(dev.index or 0):
            return cp.asarray(x)
    return to_device


declare("to_device", ("x",), _to_device, lambda x, device: Spec(x.shape, x.dtype), attrs=("device",),
        kind="copy", aliases="may")     # a tensor already on the device is returned as it is
