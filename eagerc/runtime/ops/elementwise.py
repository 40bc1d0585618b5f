"""Elementwise primitives: unary math, binary arithmetic, comparisons, logic, casts.

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


def _same(op):
    def rule(*specs, **attrs):
        return Spec(broadcast_shapes(op, specs), promoted(specs))
    return rule


def _floating(op):
    def rule(*specs, **attrs):
        d = promoted(specs)
        if not d.is_floating_point:
            fail(op, specs, "expected floating-point inputs (integers are cast to the default float first)",
                 TypeError)
        return Spec(broadcast_shapes(op, specs), d)
    return rule


def _to_bool(op):
    def rule(*specs, **attrs):
        return Spec(broadcast_shapes(op, specs), dtypes.bool)
    return rule


def _integral(op):
    def rule(*specs, **attrs):
        d = promoted(specs)
        if d.is_floating_point:
            fail(op, specs, "expected integer or bool inputs", TypeError)
        return Spec(broadcast_shapes(op, specs), d)
    return rule


# ---------------------------------------------------------------- kernels

def _ufunc(name):
    return lambda xp: getattr(xp, name)


def _sigmoid(xp):
    def sigmoid(x):
        # exp of a non-positive number only: no overflow warnings for large |x|
        e = xp.exp(-xp.abs(x))
        return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
    return sigmoid


def _erf(xp):
    if xp is np:
        try:
            from scipy.special import erf
            return erf
        except ImportError:
            vec = np.vectorize(math.erf, otypes=[np.float64])
            return lambda x: vec(x).astype(x.dtype, copy=False)
    from cupyx.scipy.special import erf
    return erf


def _rsqrt(xp):
    def rsqrt(x):
        return xp.reciprocal(xp.sqrt(x))
    return rsqrt


def _relu(xp):
    def relu(x):
        return xp.maximum(x, 0).astype(x.dtype, copy=False)
    return relu


def _round(xp):
    return lambda x: xp.round(x)


def _div(xp):
    return xp.true_divide


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


def _logical(name):
    def impl(xp):
        f = getattr(xp, name)
        return lambda *xs: f(*xs)
    return impl


def _where(xp):
    return lambda cond, a, b: xp.where(cond, a, b)


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
        return xp.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)
    return nan_to_num


class IntegerDivisionByZero(RuntimeError, ZeroDivisionError):
    """An integer tensor divided by zero (`//`, `%`): PyTorch's `RuntimeError: ZeroDivisionError`,
    also catchable as Python's ZeroDivisionError. Integers hold no inf or nan to answer with."""


def _checked_int_division(xp, name, ufunc):
    """`ufunc` (floor_divide, remainder) that raises for an integer divisor of 0, as PyTorch
    does on CPU (its CUDA kernels return garbage; eagerc checks on every device). Only integer
    operands pay for the scan of the divisor; floats give inf/nan. The factory is not named
    after the op, so the numpy backend calls this kernel rather than the bare ufunc."""
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


def _checked_floor_divide(xp):
    return _checked_int_division(xp, "floor_divide", xp.floor_divide)


def _checked_remainder(xp):
    # Python/PyTorch semantics: the result has the sign of the divisor
    return _checked_int_division(xp, "remainder", xp.remainder)


# ---------------------------------------------------------------- declarations

FLOAT_UNARY = {
    "exp": _ufunc("exp"), "exp2": _ufunc("exp2"), "log": _ufunc("log"), "log2": _ufunc("log2"),
    "log1p": _ufunc("log1p"), "expm1": _ufunc("expm1"), "sqrt": _ufunc("sqrt"), "rsqrt": _rsqrt,
    "sin": _ufunc("sin"), "cos": _ufunc("cos"), "tan": _ufunc("tan"), "tanh": _ufunc("tanh"),
    "sigmoid": _sigmoid, "erf": _erf, "reciprocal": _ufunc("reciprocal"),
}
SAME_UNARY = {
    "neg": _ufunc("negative"), "abs": _ufunc("abs"), "sign": _sign, "relu": _relu,
    "square": _ufunc("square"), "floor": _ufunc("floor"), "ceil": _ufunc("ceil"),
    "round": _round, "trunc": _ufunc("trunc"),
}
BOOL_UNARY = {
    "isnan": _ufunc("isnan"), "isinf": _ufunc("isinf"), "isfinite": _ufunc("isfinite"),
    "logical_not": _ufunc("logical_not"),
}
SAME_BINARY = {
    "add": _ufunc("add"), "sub": _ufunc("subtract"), "mul": _ufunc("multiply"),
    "maximum": _ufunc("maximum"), "minimum": _ufunc("minimum"), "pow": _pow,
    "floor_divide": _checked_floor_divide, "remainder": _checked_remainder,
}
COMPARE = {
    "eq": _ufunc("equal"), "ne": _ufunc("not_equal"), "lt": _ufunc("less"),
    "le": _ufunc("less_equal"), "gt": _ufunc("greater"), "ge": _ufunc("greater_equal"),
    "logical_and": _logical("logical_and"), "logical_or": _logical("logical_or"),
    "logical_xor": _logical("logical_xor"),
}
BITWISE = {
    "bitwise_and": _ufunc("bitwise_and"), "bitwise_or": _ufunc("bitwise_or"),
    "bitwise_xor": _ufunc("bitwise_xor"),
}

NONDIFF = {"sign", "floor", "ceil", "round", "trunc", "floor_divide"}

for _name, _impl in FLOAT_UNARY.items():
    declare(_name, ("x",), _impl, _floating(_name))
for _name, _impl in SAME_UNARY.items():
    declare(_name, ("x",), _impl, _same(_name), differentiable=_name not in NONDIFF)
for _name, _impl in BOOL_UNARY.items():
    declare(_name, ("x",), _impl, _to_bool(_name), differentiable=False)
for _name, _impl in SAME_BINARY.items():
    declare(_name, ("a", "b"), _impl, _same(_name), broadcasts=True,
            differentiable=_name not in NONDIFF)
declare("div", ("a", "b"), _div, _floating("div"), broadcasts=True)
for _name, _impl in COMPARE.items():
    declare(_name, ("a", "b"), _impl, _to_bool(_name), broadcasts=True, differentiable=False)
for _name, _impl in BITWISE.items():
    declare(_name, ("a", "b"), _impl, _integral(_name), broadcasts=True, differentiable=False)
declare("bitwise_not", ("x",), _ufunc("invert"), _integral("bitwise_not"), differentiable=False)


def _where_rule(cond, a, b):
    if not isinstance(cond, Spec) or cond.dtype is not dtypes.bool:
        fail("where", (cond, a, b), "expected a bool condition", TypeError)
    return Spec(broadcast_shapes("where", (cond, a, b)), promoted((a, b)))


declare("where", ("cond", "a", "b"), _where, _where_rule, broadcasts=True)


def _clamp_rule(x, min=None, max=None):
    if min is None and max is None:
        fail("clamp", (x,), "at least one of min and max must be given", ValueError)
    return Spec(x.shape, promoted((x,) + tuple(v for v in (min, max) if v is not None)))


declare("clamp", ("x",), _clamp, _clamp_rule, attrs=("min", "max"))
declare("lerp", ("a", "b", "w"), _lerp, _floating("lerp"), broadcasts=True)


def _cast_rule(x, dtype):
    return Spec(x.shape, dtypes.as_dtype(dtype))


declare("cast", ("x",), _cast, _cast_rule, attrs=("dtype",))


def _nan_to_num_rule(x, **attrs):
    return Spec(x.shape, x.dtype)


declare("nan_to_num", ("x",), _nan_to_num, _nan_to_num_rule, attrs=("nan", "posinf", "neginf"))


def _clone(xp):
    return lambda x: x.copy()


declare("clone", ("x",), _clone, lambda x: Spec(x.shape, x.dtype))


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


declare("to_device", ("x",), _to_device, lambda x, device: Spec(x.shape, x.dtype), attrs=("device",))
