"""runtime/kernels/ir.py: a commutative op's operands are ordered, so `a * b` and `b * a` are
one kernel instruction (IEEE addition and multiplication are exactly commutative).

Why it matters: the tanh-GELU forward and its derivative, fused into one kernel of a compiled
training step, reach the same tanh argument as `c * (x + k x^3)` and `(x + k x^3) * c`; with
the operands ordered, the kernel evaluates tanh once per element, with the same bits.
"""
import math

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
from eagerc.runtime import kernel_cache
from eagerc.runtime.kernels.ir import Kernel


def test_swapped_operands_of_add_and_mul_are_one_instruction():
    k = Kernel("k0", (8,))
    a, b = k.load("a", "float32", (8,)), k.load("b", "float32", (8,))
    for op in ("add", "mul"):
        assert k.add(op, (a, b), "float32") == k.add(op, (b, a), "float32")
    # not commutative: both orders stay
    assert k.add("sub", (a, b), "float32") != k.add("sub", (b, a), "float32")
    assert k.add("div", (a, b), "float32") != k.add("div", (b, a), "float32")
    assert [i.op for i in k.instrs].count("mul") == 1


def _gelu_tanh_reference(x):
    """float64 numpy: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), and its derivative."""
    c = math.sqrt(2 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


@pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")
def test_compiled_gelu_step_evaluates_tanh_once_with_eager_bits(kernel_cache_dir):
    x0 = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)

    def fn(x):
        y = F.gelu(x, approximate="tanh")
        y.sum().backward()
        return y.detach()

    results = {}
    for name, f in (("eager", fn), ("c", eagerc.compile(fn, backend="c"))):
        x = eagerc.from_numpy(x0.copy()).requires_grad_()
        for _ in range(3):          # the third call runs the compiled program
            x.grad = None
            y = f(x)
        results[name] = (y.numpy(), x.grad.numpy())
        if name == "c":
            (entry,) = f.entries.values()
            calls = [line for line in entry.program.c_source.splitlines() if "= tanhf(" in line]
            assert len(calls) == 1, calls
    ref_y, ref_g = _gelu_tanh_reference(x0.astype(np.float64))
    np.testing.assert_allclose(results["c"][0], ref_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results["c"][1], ref_g, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(results["c"][0], results["eager"][0])
    np.testing.assert_array_equal(results["c"][1], results["eager"][1])
