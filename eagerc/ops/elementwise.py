"""Elementwise ops: functions, Tensor operators and methods, and their derivatives.

Type promotion happens here (PyTorch's rules, see runtime/dtypes.py): operands of
other dtypes are cast with the `cast` op first, so kernels see one dtype and traced
graphs show every conversion.
"""
import math
import warnings

import numpy as _np

from ..runtime.dtypes import FLOATING_KINDS
from ..dispatch import apply
from ..autograd.formulas import defgrad
from ..runtime import dtypes
from ..runtime.ops import OPS
from .._tensor import Tensor
from .inplace import inplace_method as _inplace

_LN2 = math.log(2.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# ---------------------------------------------------------------- promotion

def result_dtype(*xs):
    dims, zero, scalars = [], [], []
    for x in xs:
        if isinstance(x, Tensor):
            (dims if x._array.ndim else zero).append(dtypes.from_np(x._array.dtype))
        elif x is not None:
            scalars.append(x)
    return dtypes.result_type(dims, zero, scalars)


def cast(x, dtype):
    """x converted to `dtype` (a no-op when it already is)."""
    dtype = dtypes.as_dtype(dtype)
    if x._array.dtype == dtype.np:
        return x
    return apply(_CAST, (x,), {"dtype": dtype.name})


def _promote(args, floating=False):
    """Cast tensor operands to the common dtype (the default float if `floating`)."""
    d = result_dtype(*args)
    if floating and not d.is_floating_point:
        d = dtypes.get_default_dtype()
    return tuple(cast(a, d) if isinstance(a, Tensor) and a._array.dtype != d.np else
                 (float(a) if floating and isinstance(a, bool) else a) for a in args)


def _check_operand(name, x):
    if isinstance(x, _np.generic):  # np.float64 is a float, but must promote like a Python scalar
        return x.item()
    if isinstance(x, _np.ndarray):  # ndarray (op) Tensor works like PyTorch: the array is a tensor
        from .creation import as_tensor
        return as_tensor(x)
    if not isinstance(x, (Tensor, int, float, bool)):
        raise TypeError(f"{name}: expected a Tensor or a Python number, got {type(x).__name__}")
    return x


def _keeps_dtype(a, b):
    """True when PyTorch's promotion of a and b needs no cast: two tensors of one dtype, or a
    floating tensor and a Python int or float (which never changes a floating tensor's dtype).
    Those go straight to apply -- `x * 0.5`, `1 - y` cost the same as tensor-tensor ops."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            return a._array.dtype is b._array.dtype
        return (type(b) is float or type(b) is int) and a._array.dtype.kind in FLOATING_KINDS
    return (type(a) is float or type(a) is int) and isinstance(b, Tensor) and b._array.dtype.kind in FLOATING_KINDS


def binary(op, a, b):
    """Apply a same-dtype binary op with promotion; the fast path needs no cast (_keeps_dtype)."""
    if _keeps_dtype(a, b):
        return apply(op, (a, b))
    a = _check_operand(op.name, a)
    b = _check_operand(op.name, b)
    return apply(op, _promote((a, b)))


def _float_binary(op, a, b):
    if _keeps_dtype(a, b) and (a if isinstance(a, Tensor) else b)._array.dtype.kind in FLOATING_KINDS:
        return apply(op, (a, b))
    return apply(op, _promote((_check_operand(op.name, a), _check_operand(op.name, b)), floating=True))


def _compare(op, a, b):
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a._array.dtype is not b._array.dtype:
        a, b = _promote((a, b))
    return apply(op, (_check_operand(op.name, a), _check_operand(op.name, b)))


def _unary_float(op, x):
    if x._array.dtype.kind not in FLOATING_KINDS:
        x = cast(x, dtypes.get_default_dtype())
    return apply(op, (x,))


def _float_only(op, *args):
    """Ops PyTorch has no integer kernel for (logaddexp, hypot): floating-point tensors only."""
    args = tuple(_check_operand(op.name, a) for a in args)
    d = result_dtype(*args)
    if not d.is_floating_point:
        raise TypeError(f"{op.name}: expected floating-point tensors, got "
                        f"{', '.join(a.dtype.name if isinstance(a, Tensor) else type(a).__name__ for a in args)} "
                        f"(as in PyTorch, there is no integer {op.name}: convert with .float() first)")
    return apply(op, _promote(args))


_CAST = OPS["cast"]

# ---------------------------------------------------------------- functions


def add(input, other, *, alpha=1):
    if alpha != 1:
        other = other * alpha
    return binary(OPS["add"], input, other)


def sub(input, other, *, alpha=1):
    if alpha != 1:
        other = other * alpha
    return binary(OPS["sub"], input, other)


def div(input, other, *, rounding_mode=None):
    if rounding_mode is None:
        return _float_binary(OPS["div"], input, other)
    if rounding_mode == "floor":
        return binary(OPS["floor_divide"], input, other)
    if rounding_mode == "trunc":
        if result_dtype(input, other).is_floating_point:
            return trunc(div(input, other))  # noqa: F821
        # integers stay integers (no float round trip: exact for every int64, and a zero divisor
        # raises in floor_divide): the floor quotient, one up where it is negative and inexact
        q = floor_divide(input, other)  # noqa: F821
        return q + logical_and(ne(remainder(input, other), 0), lt(q, 0))  # noqa: F821
    raise ValueError(f"div: expected rounding_mode None, 'trunc' or 'floor', got {rounding_mode!r}")


def pow(input, exponent):
    return binary(OPS["pow"], input, exponent)


def where(condition, input=None, other=None):
    if input is None and other is None:
        from .indexing import nonzero
        return nonzero(condition, as_tuple=True)
    if not isinstance(condition, Tensor):
        from .creation import tensor
        condition = tensor(condition)
    if condition._array.dtype.kind != "b":  # PyTorch: bool, or uint8 with a deprecation warning; never a cast
        if condition._array.dtype != _np.uint8:
            raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                               f"{condition.dtype.name} (compare it first, e.g. `x > 0`, or cast with .bool())")
        warnings.warn("where received a uint8 condition tensor. This behavior is deprecated (as in PyTorch); "
                      "use a boolean condition instead", UserWarning, stacklevel=2)
        condition = cast(condition, dtypes.bool)
    a, b = _promote((_check_operand("where", input), _check_operand("where", other)))
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        # two Python scalars: PyTorch's result_type (a float gives the default dtype, not numpy's float64)
        from .creation import tensor
        a = tensor(a, dtype=result_dtype(a, b), device=condition.device)
    return apply(OPS["where"], (condition, a, b))


def clamp(input, min=None, max=None):
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = input
        if min is not None:
            out = maximum(out, min)  # noqa: F821
        if max is not None:
            out = minimum(out, max)  # noqa: F821
        return out
    if min is None and max is None:
        raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
    x = input
    if any(v is not None and not isinstance(v, int) for v in (min, max)) and x._array.dtype.kind not in FLOATING_KINDS:
        x = cast(x, dtypes.get_default_dtype())
    return apply(OPS["clamp"], (x,), {"min": min, "max": max})


clip = clamp


def lerp(input, end, weight):
    return apply(OPS["lerp"], _promote((input, end, weight), floating=True))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    return apply(OPS["nan_to_num"], (input,), {"nan": nan, "posinf": posinf, "neginf": neginf})


def clone(input, *, memory_format=None):
    return apply(OPS["clone"], (input,))


# How each promotion trait (runtime/ops/__init__.py) calls an op: unary, then binary.
_CALL = {1: {"float": _unary_float, "float_only": _float_only},
         2: {"float": _float_binary, "float_only": _float_only, "same": binary, "integral": binary,
             "bool": _compare}}


def _function(op):
    """The PyTorch-named function of a declared elementwise op without attributes, from its traits."""
    call = _CALL[len(op.inputs)].get(op.promotion)
    if len(op.inputs) == 1:
        if call is None:
            def f(input):
                return apply(op, (input,))
        else:
            def f(input):
                return call(op, input)
    else:
        def f(input, other):
            return call(op, input, other)
    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = f"Elementwise {op.name}."
    return f


# every declared elementwise op of one or two inputs without attributes gets its function here,
# unless one is written above (add's alpha, div's rounding_mode, pow's exponent...)
_GENERATED = tuple(n for n, op in OPS.items() if op.kind == "elementwise" and op.promotion and not op.attrs
                   and len(op.inputs) in (1, 2) and n not in globals())
for _n in _GENERATED:
    globals()[_n] = _function(OPS[_n])
negative = neg  # noqa: F821
absolute = abs  # noqa: F821
fix = trunc  # noqa: F821
arctan2 = atan2  # noqa: F821


def addcmul(input, tensor1, tensor2, *, value=1):
    """input + value * tensor1 * tensor2 (the optimizers' moment updates)."""
    return add(input, mul(tensor1, tensor2), alpha=value)  # noqa: F821


def addcdiv(input, tensor1, tensor2, *, value=1):
    """input + value * tensor1 / tensor2; integer tensor1 / tensor2 raise, as in PyTorch."""
    if not result_dtype(tensor1, tensor2).is_floating_point:
        raise RuntimeError("addcdiv: integer division with addcdiv is no longer supported (as in PyTorch); "
                           "use (input + value * tensor1 / tensor2) for a true division")
    return add(input, div(tensor1, tensor2), alpha=value)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|input - other| <= atol + rtol * |other|, elementwise (equal infinities are close; nan
    only with equal_nan). Both tensors must have one dtype, as in PyTorch."""
    if not isinstance(other, Tensor) or input._array.dtype != other._array.dtype:
        raise RuntimeError(f"isclose: {input.dtype.name} did not match "
                           f"{other.dtype.name if isinstance(other, Tensor) else type(other).__name__} "
                           "(both tensors must have the same dtype)")
    if rtol < 0 or atol < 0:
        raise RuntimeError(f"isclose: rtol and atol must be greater than or equal to zero, got rtol={rtol}, "
                           f"atol={atol}")
    close = eq(input, other)  # noqa: F821
    floating = input._array.dtype.kind in FLOATING_KINDS
    if equal_nan and floating:
        close = logical_or(close, logical_and(isnan(input), isnan(other)))  # noqa: F821
    if rtol == 0 and atol == 0:
        return close
    a, b = (input, other) if floating else (cast(input, dtypes.get_default_dtype()),
                                            cast(other, dtypes.get_default_dtype()))
    error = abs(a - b)  # noqa: F821
    within = logical_and(isfinite(error), error <= abs(b * rtol) + atol)  # noqa: F821
    return logical_or(close, within)  # noqa: F821


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when every element is close (isclose); a Python bool."""
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def equal(input, other):
    """True when both tensors have the same shape and the same values (after promotion)."""
    if input._array.shape != other._array.shape:
        return False
    return bool(eq(input, other).all())  # noqa: F821


def round(input, *, decimals=0):
    if decimals == 0:
        return apply(OPS["round"], (input,))
    scale = 10.0 ** decimals
    return apply(OPS["round"], (input * scale,)) / scale


def _rounding_identity(name):
    f = globals()[name]

    def g(input):
        if input._array.dtype.kind in "iub":
            return input.clone()
        return f(input)
    g.__name__ = name
    return g


for _n in ("floor", "ceil", "trunc"):
    globals()[_n] = _rounding_identity(_n)


greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne  # noqa: F821
true_divide = divide = div
multiply = mul  # noqa: F821
subtract = sub
clamp_min = lambda input, min: clamp(input, min=min)  # noqa: E731
clamp_max = lambda input, max: clamp(input, max=max)  # noqa: E731

__all__ = list(_GENERATED) + [
    "add", "sub", "div", "true_divide", "divide", "multiply", "subtract", "pow", "negative", "absolute", "fix",
    "clamp", "clip", "clamp_min", "clamp_max", "where", "lerp", "round", "nan_to_num", "clone",
    "greater", "greater_equal", "less", "less_equal", "not_equal", "result_dtype", "arctan2",
    "addcmul", "addcdiv", "isclose", "allclose", "equal"]

# ---------------------------------------------------------------- derivatives

defgrad("add", lambda g: g, lambda g: g)
defgrad("sub", lambda g: g, lambda g: -g)
defgrad("mul", lambda g, b: g * b, lambda g, a: g * a)
defgrad("div", lambda g, b: g / b, lambda g, b, out: -g * out / b)
defgrad("pow", lambda g, a, b: g * b * a ** (b - 1),
        lambda g, a, out: g * out * (log(a) if isinstance(a, Tensor) else math.log(a)))  # noqa: F821
defgrad("remainder", lambda g: g, lambda g, a, b: -g * floor_divide(a, b))  # noqa: F821
defgrad("maximum", lambda g, a, b: g * ((a > b) + (a == b) * 0.5),
        lambda g, a, b: g * ((b > a) + (a == b) * 0.5))
defgrad("minimum", lambda g, a, b: g * ((a < b) + (a == b) * 0.5),
        lambda g, a, b: g * ((b < a) + (a == b) * 0.5))
defgrad("exp", lambda g, out: g * out)
defgrad("exp2", lambda g, out: g * out * _LN2)
defgrad("log", lambda g, x: g / x)
defgrad("log2", lambda g, x: g / (x * _LN2))
defgrad("log1p", lambda g, x: g / (x + 1))
defgrad("expm1", lambda g, out: g * (out + 1))
defgrad("sqrt", lambda g, out: g / (out * 2))
defgrad("rsqrt", lambda g, out: g * out * out * out * -0.5)
defgrad("sin", lambda g, x: g * cos(x))  # noqa: F821
defgrad("cos", lambda g, x: -g * sin(x))  # noqa: F821
defgrad("tan", lambda g, out: g * (out * out + 1))
defgrad("tanh", lambda g, out: g * (1 - out * out))
defgrad("sigmoid", lambda g, out: g * out * (1 - out))
defgrad("erf", lambda g, x: g * exp(-(x * x)) * _TWO_OVER_SQRT_PI)  # noqa: F821
defgrad("reciprocal", lambda g, out: -g * out * out)
defgrad("neg", lambda g: -g)
defgrad("abs", lambda g, x: g * sign(x))  # noqa: F821
defgrad("relu", lambda g, out: g * (out > 0))
defgrad("square", lambda g, x: g * x * 2)
defgrad("clone", lambda g: g)
defgrad("cast", lambda g: g)
defgrad("where", None, lambda g, cond: where(cond, g, 0.0), lambda g, cond: where(cond, 0.0, g))
defgrad("clamp", lambda g, x, min, max: g * _in_range(x, min, max))
defgrad("lerp", lambda g, w: g * (1 - w), lambda g, w: g * w, lambda g, a, b: g * (b - a))
defgrad("nan_to_num", lambda g, x: g * isfinite(x))  # noqa: F821
defgrad("logaddexp", lambda g, a, b: g / (exp(b - a) + 1), lambda g, a, b: g / (exp(a - b) + 1))  # noqa: F821
defgrad("hypot", lambda g, a, out: g * a / out, lambda g, b, out: g * b / out)
defgrad("atan2", lambda g, a, b: g * b / (a * a + b * b), lambda g, a, b: -g * a / (a * a + b * b))
defgrad("erfinv", lambda g, out: g * exp(out * out) * (1 / _TWO_OVER_SQRT_PI))  # noqa: F821


def _in_range(x, lo, hi):
    m = None
    if lo is not None:
        m = x >= lo
    if hi is not None:
        m = (x <= hi) if m is None else logical_and(m, x <= hi)  # noqa: F821
    return m


# ---------------------------------------------------------------- Tensor methods and operators

def _rev(fn):
    return lambda self, other: fn(other, self)


_ADD, _SUB, _MUL, _DIV = OPS["add"], OPS["sub"], OPS["mul"], OPS["div"]


def _fast(op, fallback):
    """Operator fast path: two tensors of one dtype go straight to apply."""
    def method(self, other):
        if isinstance(other, Tensor) and other._array.dtype is self._array.dtype:
            return apply(op, (self, other))
        return fallback(self, other)
    return method


Tensor.__add__ = _fast(_ADD, add)
Tensor.__radd__ = _rev(add)
Tensor.__sub__ = _fast(_SUB, sub)
Tensor.__rsub__ = _rev(sub)
Tensor.__mul__ = _fast(_MUL, mul)  # noqa: F821
Tensor.__rmul__ = _rev(mul)  # noqa: F821
Tensor.__truediv__ = div
Tensor.__rtruediv__ = _rev(div)
Tensor.__floordiv__ = floor_divide  # noqa: F821
Tensor.__rfloordiv__ = _rev(floor_divide)  # noqa: F821
Tensor.__mod__ = remainder  # noqa: F821
Tensor.__rmod__ = _rev(remainder)  # noqa: F821
Tensor.__pow__ = pow
Tensor.__rpow__ = _rev(pow)
Tensor.__neg__ = neg  # noqa: F821
Tensor.__pos__ = lambda self: self
Tensor.__abs__ = abs  # noqa: F821
Tensor.__invert__ = lambda self: logical_not(self) if self._array.dtype.kind == "b" else bitwise_not(self)  # noqa
Tensor.__and__ = lambda self, o: logical_and(self, o) if _is_bool(self, o) else bitwise_and(self, o)  # noqa
Tensor.__or__ = lambda self, o: logical_or(self, o) if _is_bool(self, o) else bitwise_or(self, o)  # noqa
Tensor.__xor__ = lambda self, o: logical_xor(self, o) if _is_bool(self, o) else bitwise_xor(self, o)  # noqa
Tensor.__rand__, Tensor.__ror__, Tensor.__rxor__ = Tensor.__and__, Tensor.__or__, Tensor.__xor__
Tensor.__eq__ = eq  # noqa: F821
Tensor.__ne__ = ne  # noqa: F821
Tensor.__lt__ = lt  # noqa: F821
Tensor.__le__ = le  # noqa: F821
Tensor.__gt__ = gt  # noqa: F821
Tensor.__ge__ = ge  # noqa: F821
Tensor.__hash__ = object.__hash__  # by identity, in C (tensors key optimizer state, tracer maps)


def _is_bool(a, b):
    bd = b._array.dtype.kind == "b" if isinstance(b, Tensor) else isinstance(b, bool)
    return a._array.dtype.kind == "b" and bd


_METHODS = {_n: globals()[_n] for _n in __all__ if _n != "result_dtype"}
_METHODS.update(where=lambda self, cond, other: where(cond, self, other),
                fmod=lambda self, other: self - div(self, other, rounding_mode="trunc") * other)

for _n, _f in _METHODS.items():
    setattr(Tensor, _n, _f)

for _n in ("add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "pow", "clamp",
           "clip", "clamp_min", "clamp_max", "lerp", "nan_to_num", "square", "round", "neg", "negative",
           "abs", "sign", "relu", "floor", "ceil", "trunc", "exp", "exp2", "log", "log2", "log1p",
           "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "erf", "reciprocal",
           "maximum", "minimum", "logical_not", "bitwise_not", "bitwise_and", "bitwise_or",
           "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge", "hypot", "atan2", "arctan2", "erfinv", "addcmul",
           "addcdiv"):
    setattr(Tensor, _n + "_", _inplace(_METHODS[_n], _n + "_"))

Tensor.__iadd__ = _inplace(add, "add_")
Tensor.__isub__ = _inplace(sub, "sub_")
Tensor.__imul__ = _inplace(mul, "mul_")  # noqa: F821
Tensor.__itruediv__ = _inplace(div, "div_")
Tensor.__ipow__ = _inplace(pow, "pow_")
Tensor.__imod__ = _inplace(remainder, "remainder_")  # noqa: F821
Tensor.__ifloordiv__ = _inplace(floor_divide, "floor_divide_")  # noqa: F821
Tensor.__iand__ = _inplace(Tensor.__and__, "bitwise_and_")
Tensor.__ior__ = _inplace(Tensor.__or__, "bitwise_or_")
Tensor.__ixor__ = _inplace(Tensor.__xor__, "bitwise_xor_")
