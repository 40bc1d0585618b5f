"""Type promotion against PyTorch's rules, written out by hand.

PyTorch (torch.result_type): operands fall into three priority classes --
dimensioned tensors > zero-dim tensors > Python scalars -- and three categories
bool < integer < floating. The result is the promotion of the highest-priority
class, unless a lower-priority class has a *higher category*, in which case that
class picks the dtype (Python floats -> the default float, Python ints -> int64,
0-d tensors -> their own dtype). Within a category, widths promote as in the
usual table (uint8 + int8 -> int16). Every row below is PyTorch's answer.
"""
import numpy as np
import pytest

import eagerc as E

B, U8, I8, I16, I32, I64 = E.bool, E.uint8, E.int8, E.int16, E.int32, E.int64
F16, F32, F64 = E.float16, E.float32, E.float64


def vec(dtype):
    return E.tensor([1, 1], dtype=dtype)


def zd(dtype):
    return E.tensor(1, dtype=dtype)


# (left operand, right operand, PyTorch's result dtype for a + b)
PROMOTION = [
    # tensor with Python scalar
    (lambda: vec(F32), 2.5, F32),
    (lambda: vec(F16), 2.5, F16),
    (lambda: vec(F64), 2.5, F64),
    (lambda: vec(I32), 2.5, F32),          # int tensor + float scalar -> default float
    (lambda: vec(I64), 2.5, F32),
    (lambda: vec(I32), 5, I32),            # same category: the tensor decides
    (lambda: vec(U8), 5, U8),
    (lambda: vec(I8), 5, I8),
    (lambda: vec(B), 5, I64),              # bool tensor + int scalar -> int64
    (lambda: vec(B), 2.5, F32),
    (lambda: vec(B), True, B),
    (lambda: vec(F32), True, F32),
    (lambda: vec(I16), True, I16),
    # two dimensioned tensors
    (lambda: vec(I32), lambda: vec(I64), I64),
    (lambda: vec(U8), lambda: vec(I8), I16),
    (lambda: vec(U8), lambda: vec(I16), I16),
    (lambda: vec(I8), lambda: vec(I16), I16),
    (lambda: vec(U8), lambda: vec(B), U8),
    (lambda: vec(B), lambda: vec(I32), I32),
    (lambda: vec(I64), lambda: vec(F16), F16),   # category wins outright, not width
    (lambda: vec(I32), lambda: vec(F16), F16),
    (lambda: vec(U8), lambda: vec(F32), F32),
    (lambda: vec(F16), lambda: vec(F32), F32),
    (lambda: vec(F32), lambda: vec(F64), F64),
    (lambda: vec(B), lambda: vec(F16), F16),
    # dimensioned tensor with a 0-d tensor
    (lambda: vec(F32), lambda: zd(F64), F32),    # same category: the dimensioned one decides
    (lambda: vec(F16), lambda: zd(F32), F16),
    (lambda: vec(I32), lambda: zd(I64), I32),
    (lambda: vec(U8), lambda: zd(I64), U8),
    (lambda: vec(I64), lambda: zd(F64), F64),    # 0-d of a higher category wins with its dtype
    (lambda: vec(I32), lambda: zd(F16), F16),
    (lambda: vec(B), lambda: zd(I32), I32),
    (lambda: vec(B), lambda: zd(U8), U8),
    # two 0-d tensors, and 0-d with scalars
    (lambda: zd(I32), lambda: zd(I64), I64),
    (lambda: zd(I64), lambda: zd(F64), F64),
    (lambda: zd(F16), 2.5, F16),
    (lambda: zd(I32), 2.5, F32),
    (lambda: zd(B), 3, I64),
]


def _materialise(x):
    return x() if callable(x) else x


@pytest.mark.parametrize("a,b,expected", PROMOTION)
def test_add_promotes_like_pytorch_both_orders(a, b, expected):
    a, b = _materialise(a), _materialise(b)
    assert (a + b).dtype == expected
    assert (b + a).dtype == expected
    if isinstance(a, E.Tensor) and isinstance(b, E.Tensor):
        assert E.result_type(a, b) == expected
        assert E.promote_types(a.dtype, b.dtype) == expected or a.ndim != b.ndim


@pytest.mark.parametrize("a,b,expected", PROMOTION)
def test_mixed_dtype_binary_ops_give_the_promoted_dtype(a, b, expected):
    a, b = _materialise(a), _materialise(b)
    ops = [lambda x, y: x * y, E.mul]
    if expected is not B:                     # PyTorch refuses subtraction of bools
        ops.append(lambda x, y: x - y)
    if isinstance(a, E.Tensor) and isinstance(b, E.Tensor):   # maximum/minimum take tensors
        ops += [E.maximum, E.minimum]
    for op in ops:
        r = op(a, b)
        assert r.dtype == expected, (op, r.dtype)


def test_values_are_computed_in_the_promoted_dtype():
    a = E.tensor([200, 100], dtype=E.uint8)
    b = E.tensor([-100, 50], dtype=E.int8)
    r = a + b                                         # int16: no uint8 wrap-around
    assert r.dtype == I16 and r.tolist() == [100, 150]
    with np.errstate(over="ignore"):
        c = E.tensor([2 ** 40], dtype=E.int64) + E.tensor([1.0], dtype=E.float16)
    assert c.dtype == F16 and np.isinf(c.numpy()[0])   # 2^40 overflows float16, like PyTorch
    d = E.tensor([1], dtype=E.int32) + 0.5
    assert d.tolist() == [1.5]


@pytest.mark.parametrize("a,b,expected", [
    (lambda: vec(I64), lambda: vec(I64), F32),        # int / int -> default float
    (lambda: vec(I32), 2, F32),
    (lambda: vec(B), lambda: vec(B), F32),
    (lambda: vec(U8), lambda: vec(I8), F32),
    (lambda: vec(I64), lambda: vec(F64), F64),
    (lambda: vec(F16), 3, F16),
    (lambda: vec(I64), lambda: zd(F64), F64),
])
def test_true_division_is_always_floating(a, b, expected):
    a, b = _materialise(a), _materialise(b)
    r = a / b
    assert r.dtype == expected
    assert E.tensor([1, 2]).div(E.tensor([2, 2])).tolist() == [0.5, 1.0]


def test_default_dtype_controls_float_results():
    prev = E.get_default_dtype()
    try:
        E.set_default_dtype(E.float64)
        assert E.tensor([1.0]).dtype == F64
        assert (vec(I64) / 2).dtype == F64
        assert (vec(I32) + 2.5).dtype == F64
        assert (vec(F32) + 2.5).dtype == F32                # tensor's category already float
        with pytest.raises(TypeError, match="floating"):
            E.set_default_dtype(E.int64)
    finally:
        E.set_default_dtype(prev)
    assert E.tensor([1.0]).dtype == F32


@pytest.mark.parametrize("op", [
    lambda a, b: a == b, lambda a, b: a != b, lambda a, b: a < b,
    lambda a, b: a <= b, lambda a, b: a > b, lambda a, b: a >= b,
    E.logical_and, E.logical_or, E.logical_xor,
])
def test_comparisons_and_logic_give_bool(op):
    cases = [(vec(I32), vec(F64)), (vec(U8), vec(I8)), (vec(F16), 1.5), (vec(B), vec(B)),
             (vec(I64), zd(F64)), (vec(F32), 3)]
    for a, b in cases:
        r = op(a, b)
        assert r.dtype == B and r.shape == (2,)


def test_comparison_compares_in_the_promoted_dtype():
    # 1 (int32) vs 1.5 (float64): compared as floats, so 1 < 1.5
    assert (E.tensor([1], dtype=E.int32) < E.tensor([1.5], dtype=E.float64)).tolist() == [True]
    assert (E.tensor([1, 2]) == 1.5).tolist() == [False, False]
    assert (E.tensor([200], dtype=E.uint8) > E.tensor([-1], dtype=E.int8)).tolist() == [True]


def test_unary_float_ops_promote_integers_to_default_float():
    for d in (I64, I32, U8, B):
        assert E.tensor([1, 0], dtype=d).exp().dtype == F32
        assert E.tensor([4, 1], dtype=d).sqrt().dtype == F32
    assert E.tensor([4, 9]).sqrt().tolist() == [2.0, 3.0]
    for d in (F16, F64):
        assert E.tensor([1.0], dtype=d).tanh().dtype == d
    for d in (I32, U8):
        assert E.tensor([1, 2], dtype=d).abs().dtype == d
        assert (-E.tensor([1, 2], dtype=I32)).dtype == I32


def test_integer_only_ops_keep_integer_dtypes():
    assert (E.tensor([7, -7]) // 2).tolist() == [3, -4]              # floor, like Python
    assert (E.tensor([7, -7]) // 2).dtype == I64
    assert (E.tensor([7, -7]) % 3).tolist() == [1, 2]                 # sign of the divisor
    assert (E.tensor([2], dtype=I32) ** 3).dtype == I32
    assert (E.tensor([2]) ** 0.5).dtype == F32
    assert (E.tensor([6], dtype=I32) & E.tensor([3], dtype=I64)).dtype == I64
    assert E.where(E.tensor([True, False]), vec(I32), vec(F64)).dtype == F64


@pytest.mark.parametrize("target,operand,result", [
    (F32, lambda: vec(F64), F32),
    (F32, 2.5, F32),
    (F16, lambda: vec(F32), F16),
    (I32, lambda: vec(I64), I32),
    (I64, lambda: vec(B), I64),
    (U8, 3, U8),
    (F64, lambda: vec(I64), F64),
])
def test_in_place_ops_keep_the_target_dtype(target, operand, result):
    t = vec(target)
    t.add_(_materialise(operand))
    assert t.dtype == result
    t.mul_(_materialise(operand))
    assert t.dtype == result


@pytest.mark.parametrize("target,operand", [
    (I64, 2.5), (I32, lambda: vec(F32)), (U8, lambda: zd(F64)), (B, 1), (B, lambda: vec(I32)),
    (I64, lambda: vec(F16)),
])
def test_in_place_refuses_results_of_a_higher_category(target, operand):
    t = vec(target)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        t.add_(_materialise(operand))
    assert t.dtype == target and t.tolist() == vec(target).tolist()


def test_dtype_objects():
    assert repr(F32) == "eagerc.float32" and F32.is_floating_point and not I64.is_floating_point
    assert E.float is F32 and E.double is F64 and E.half is F16 and E.long is I64 and E.int is I32
    assert F32.itemsize == 4 and F16.itemsize == 2 and I64.itemsize == 8
    assert E.tensor([1.0], dtype="float64").dtype == F64
    assert E.tensor([1.0], dtype=np.float16).dtype == F16
    assert E.tensor([1], dtype=float).dtype == F32 and E.tensor([1.0], dtype=int).dtype == I64
    with pytest.raises(TypeError):
        E.tensor([1.0], dtype="complex64")
    for d in (B, U8, I8, I16, I32, I64, F16, F32, F64):
        assert E.zeros(1, dtype=d).dtype is d
        assert E.tensor([1], dtype=d).numpy().dtype == d.np


def test_numpy_scalars_promote_like_python_scalars():
    t = E.tensor([1.0, 2.0])
    assert (t * np.float64(2.0)).dtype == F32
    assert (np.float64(2.0) * t).dtype == F32
    assert (t + np.int64(1)).dtype == F32
