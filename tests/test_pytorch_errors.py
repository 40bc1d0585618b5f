"""Mistakes get the error a PyTorch user expects, naming the op and the argument -- never a
silent wrong answer: integer division by zero, bad creation arguments, a non-bool `where`."""
import numpy as np
import pytest

import eagerc
import eagerc.runtime
from eagerc.runtime.ops import OPS
from eagerc.runtime.ops.meta import Spec

INT = eagerc.tensor([7, -7, 3, 0])


# ---------------------------------------------------------------- integer // and % by zero

def _zero_division(fn):
    # PyTorch (CPU): RuntimeError: ZeroDivisionError; eagerc's is also a Python ZeroDivisionError
    with pytest.raises(RuntimeError, match=r"ZeroDivisionError: integer division by zero") as e:
        fn()
    assert isinstance(e.value, ZeroDivisionError)
    return str(e.value)


@pytest.mark.parametrize("dtype", [eagerc.int64, eagerc.int32, eagerc.int8, eagerc.uint8])
def test_integer_floor_divide_and_remainder_by_zero_raise(dtype):
    a = eagerc.tensor([7, 5, 3], dtype=dtype)
    z = eagerc.tensor([2, 0, 1], dtype=dtype)
    assert _zero_division(lambda: a // z).startswith("floor_divide:")
    assert _zero_division(lambda: a % z).startswith("remainder:")
    _zero_division(lambda: a // 0)                         # scalar divisors
    _zero_division(lambda: a % 0)
    _zero_division(lambda: 5 // z)                         # reflected
    _zero_division(lambda: 5 % z)
    _zero_division(lambda: eagerc.floor_divide(a, z))
    _zero_division(lambda: eagerc.remainder(a, 0))
    _zero_division(lambda: eagerc.div(a, z, rounding_mode="floor"))
    _zero_division(lambda: eagerc.div(a, z, rounding_mode="trunc"))
    _zero_division(lambda: a.fmod(0))
    b = a.clone()                                          # in place: refused, and b is untouched
    _zero_division(lambda: b.floor_divide_(z))
    _zero_division(lambda: b.__imod__(0))
    np.testing.assert_array_equal(b.numpy(), [7, 5, 3])


def test_integer_division_without_zero_and_float_division_by_zero_are_unchanged():
    d = eagerc.tensor([2, -2, 3, 5])
    a, b = INT.numpy(), d.numpy()
    np.testing.assert_array_equal((INT // d).numpy(), a // b)          # Python's floor semantics
    np.testing.assert_array_equal((INT % d).numpy(), a % b)
    # trunc rounds toward zero, exactly, in integers (no float round trip): C's / and fmod
    big = eagerc.tensor([2 ** 62 + 1, -(2 ** 62) - 1, 7, -7])
    q = eagerc.div(big, eagerc.tensor([3, 3, -2, 2]), rounding_mode="trunc")
    assert q.dtype == eagerc.int64
    assert q.tolist() == [(2 ** 62 + 1) // 3, -((2 ** 62 + 1) // 3), -3, -3]
    f = INT.fmod(d)
    assert f.dtype == eagerc.int64 and f.tolist() == [int(np.fmod(x, y)) for x, y in zip(a, b)]
    # floats are silent and give inf / nan, like PyTorch
    x = eagerc.tensor([1.0, -1.0, 0.0])
    assert (x // 0).tolist()[:2] == [float("inf"), float("-inf")] and np.isnan((x // 0).tolist()[2])
    assert np.isnan((x % 0).numpy()).all()
    assert (INT // 0.0).dtype == eagerc.float32                       # a float scalar promotes


def test_integer_division_by_zero_raises_compiled_and_in_the_runtime(tmp_path):
    fn = lambda x, y: x // y + x % y  # noqa: E731
    ok = eagerc.tensor([2, 3, 1, 4])
    want = (fn(INT, ok)).numpy()
    for backend in ("numpy", "interpreter"):
        c = eagerc.compile(fn, backend=backend)
        c(INT, ok)                                     # the first call traces: eager's results
        np.testing.assert_array_equal(c(INT, ok).numpy(), want)
        _zero_division(lambda: c(INT, eagerc.tensor([2, 0, 1, 4])))
    eagerc.export(fn, (INT, ok)).save(tmp_path / "div.eagerc")
    prog = eagerc.runtime.load(tmp_path / "div.eagerc")
    np.testing.assert_array_equal(np.asarray(prog(INT.numpy(), ok.numpy())), want)
    with pytest.raises(Exception, match="ZeroDivisionError"):
        prog(INT.numpy(), np.array([2, 0, 1, 4]))


# ---------------------------------------------------------------- creation arguments

@pytest.mark.parametrize("make, message", [
    (lambda: eagerc.randn(2, -1), r"randn: Trying to create tensor with negative dimension -1: \[2, -1\]"),
    (lambda: eagerc.rand((3, -2)), r"rand: Trying to create tensor with negative dimension -2: \[3, -2\]"),
    (lambda: eagerc.randint(0, 5, (2, -1)), r"randint: Trying to create tensor with negative dimension -1"),
    (lambda: eagerc.zeros(2, -1), r"zeros: Trying to create tensor with negative dimension -1: \[2, -1\]"),
    (lambda: eagerc.ones(-3), r"ones: Trying to create tensor with negative dimension -3: \[-3\]"),
    (lambda: eagerc.empty(-1, 2), r"empty: Trying to create tensor with negative dimension -1"),
    (lambda: eagerc.full((2, -1), 1.0), r"full: Trying to create tensor with negative dimension -1: \[2, -1\]"),
    (lambda: eagerc.arange(0, 10, 0), r"arange: step must be nonzero \(start=0, end=10, step=0\)"),
    (lambda: eagerc.arange(0.0, 1.0, 0.0), r"arange: step must be nonzero"),
    (lambda: eagerc.arange(10, 0, 1), r"arange: upper bound and larger bound inconsistent with step sign"),
    (lambda: eagerc.arange(0, float("inf")), r"arange: unsupported range: 0 -> inf"),
    (lambda: eagerc.linspace(0, 1, steps=-1), r"linspace: number of steps must be non-negative, got steps=-1"),
    (lambda: eagerc.eye(-1), r"eye: n must be greater or equal to 0, got n=-1"),
    (lambda: eagerc.eye(2, -3), r"eye: m must be greater or equal to 0, got m=-3"),
    (lambda: eagerc.randperm(-1), r"randperm: n must be non-negative, got n=-1"),
])
def test_bad_creation_arguments_name_the_op_and_the_argument(make, message):
    with pytest.raises(RuntimeError, match=message):
        make()


def test_non_integer_sizes_are_refused_not_truncated():
    # before: int(1.5) made a (2, 1) tensor
    with pytest.raises(TypeError, match=r"randn\(\): argument 'size' must be a tuple of ints, but found "
                                        r"element of type float at pos 1"):
        eagerc.randn(2, 1.5)
    with pytest.raises(TypeError, match=r"linspace\(\): argument 'steps' must be int, not float"):
        eagerc.linspace(0, 1, steps=2.5)
    assert eagerc.zeros(np.int64(2), eagerc.tensor(3)).shape == (2, 3)   # integers of any kind are fine
    assert eagerc.full(3, 1.0).shape == (3,) and eagerc.arange(0).shape == (0,)
    assert eagerc.linspace(0, 1, steps=0).shape == (0,) and eagerc.arange(5, 5).shape == (0,)


def test_a_refused_random_draw_leaves_the_generator_where_it_was():
    # before: randn(2, -1) advanced the counter by a negative amount and every later draw failed
    eagerc.manual_seed(3)
    want = eagerc.randn(4).numpy()
    eagerc.manual_seed(3)
    for bad in (lambda: eagerc.randn(2, -1), lambda: eagerc.rand(-1), lambda: eagerc.randperm(-2),
                lambda: eagerc.randint(0, 3, (-1,))):
        with pytest.raises(RuntimeError):
            bad()
    np.testing.assert_array_equal(eagerc.randn(4).numpy(), want)


def test_creation_shape_rules_use_the_same_checks():
    # the rules validate exported programs; they now say what the eager functions say
    with pytest.raises(RuntimeError, match=r"normal: Trying to create tensor with negative dimension -1"):
        OPS["normal"].meta(shape=(2, -1), dtype="float32", seed=0, offset=0)
    with pytest.raises(RuntimeError, match="arange: step must be nonzero"):
        OPS["arange"].meta(start=0, end=3, step=0, dtype="int64")
    with pytest.raises(RuntimeError, match="linspace: number of steps must be non-negative"):
        OPS["linspace"].meta(start=0, end=1, steps=-1, dtype="float32")
    assert OPS["arange"].meta(start=1, end=10, step=3, dtype="int64").shape == (3,)   # 1, 4, 7


# ---------------------------------------------------------------- where

def test_where_refuses_a_non_bool_condition():
    a, b = eagerc.tensor([1.0, 2.0]), eagerc.tensor([3.0, 4.0])
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor, but got a tensor "
                                           "with dtype float32"):
        eagerc.where(eagerc.tensor([1.0, 0.0]), a, b)       # before: cast to bool, silently
    with pytest.raises(RuntimeError, match="with dtype int64"):
        a.where(eagerc.tensor([1, 0]), b)
    with pytest.warns(UserWarning, match="uint8 condition tensor.*deprecated"):     # as PyTorch
        out = eagerc.where(eagerc.tensor([1, 0], dtype=eagerc.uint8), a, b)
    assert out.tolist() == [1.0, 4.0]
    assert eagerc.where(a > 1.5, a, b).tolist() == [3.0, 2.0]


# ---------------------------------------------------------------- float-only ops

@pytest.mark.parametrize("name", ["logaddexp", "hypot"])
def test_float_only_ops_refuse_integer_tensors_like_pytorch(name):
    # PyTorch: RuntimeError "logaddexp_cpu" not implemented for 'Long'; no silent cast to float
    fn = getattr(eagerc, name)
    for a, b in [(INT, INT), (INT, 2), (INT > 0, INT > 1)]:
        with pytest.raises(TypeError, match=rf"{name}: expected floating-point tensors, got .*no integer {name}"):
            fn(a, b)
    spec = Spec((4,), eagerc.int64)                             # the shape/dtype rule (verifier, loader) too
    with pytest.raises(TypeError, match=rf"{name}: got .* int64; expected floating-point inputs .*no integer {name}"):
        OPS[name].meta(spec, spec)
    # floats promote like PyTorch's: a float16 tensor with a float64 one gives float64, a 0-d one keeps float16
    h, d = eagerc.tensor([3.0], dtype=eagerc.float16), eagerc.tensor([4.0], dtype=eagerc.float64)
    assert fn(h, d).dtype == eagerc.float64 and fn(h, eagerc.tensor(4.0, dtype=eagerc.float64)).dtype == eagerc.float16
    assert fn(h, INT[:1]).dtype == eagerc.float16              # an integer operand beside a float tensor is fine
