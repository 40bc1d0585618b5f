"""Optimizer updates on one foreach C call per param group (eagerc/runtime/kernels/foreach.py).

The C update against the numpy rule it replaces (optim/rules.py, run with the kernels off):
bit for bit, every variant the kernel covers (Adam, AdamW, amsgrad, L2 weight decay, maximize;
SGD momentum with dampening / Nesterov), float32 and float64, over several steps; and against
an independent numpy formula of Adam. Parameters the kernel does not take (a non-contiguous
gradient) take the numpy rule, and mixing both in one group gives the same bits.
"""
import numpy as np
import pytest

import eagerc
from eagerc.runtime import kernel_cache
from eagerc.runtime.kernels import eager as c_rows, foreach

pytestmark = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")

SHAPES = [(7, 5), (33,), (4, 4, 3), ()]


def _train(make, dtype, kernels, steps=4, transposed_grad=False):
    """Parameters and optimizer state after `steps` updates with fixed random gradients."""
    old = c_rows.set_enabled(kernels)
    try:
        rng = np.random.default_rng(1)
        ps = [eagerc.from_numpy(rng.standard_normal(s).astype(dtype)).requires_grad_() for s in SHAPES]
        opt = make(ps)
        for _ in range(steps):
            for p in ps:
                g = rng.standard_normal(p.shape).astype(dtype)
                if transposed_grad and g.ndim == 2:
                    g = np.asfortranarray(g)    # not C-contiguous: the numpy rule for this one
                p.grad = eagerc.from_numpy(g)
            opt.step()
        return [p.detach().numpy().copy() for p in ps] + [
            v.numpy().copy() for s in opt.state.values() for k, v in sorted(s.items())]
    finally:
        c_rows.set_enabled(old)


OPTIMIZERS = {
    "adam": lambda ps: eagerc.optim.Adam(ps, lr=1e-2),
    "adam_l2_amsgrad": lambda ps: eagerc.optim.Adam(ps, lr=1e-2, weight_decay=0.1, amsgrad=True),
    "adam_maximize": lambda ps: eagerc.optim.Adam(ps, lr=1e-2, maximize=True),
    "adam_l2_maximize": lambda ps: eagerc.optim.Adam(ps, lr=1e-2, weight_decay=0.1, maximize=True),
    "adamw": lambda ps: eagerc.optim.AdamW(ps, lr=1e-2, weight_decay=0.05),
    "sgd_momentum": lambda ps: eagerc.optim.SGD(ps, lr=1e-2, momentum=0.9),
    "sgd_nesterov_l2": lambda ps: eagerc.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=0.01),
    "sgd_dampening_maximize": lambda ps: eagerc.optim.SGD(ps, lr=1e-2, momentum=0.9, dampening=0.3, maximize=True),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_foreach_update_is_the_numpy_rule_bit_for_bit(name, dtype):
    foreach._kernels.clear()
    got = _train(OPTIMIZERS[name], dtype, kernels=True)
    assert foreach._kernels and all(k is not None for k in foreach._kernels.values()), "the C kernel did not run"
    want = _train(OPTIMIZERS[name], dtype, kernels=False)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_a_parameter_the_kernel_does_not_take_runs_the_rule():
    got = _train(OPTIMIZERS["adam"], "float32", kernels=True, transposed_grad=True)
    want = _train(OPTIMIZERS["adam"], "float32", kernels=False, transposed_grad=True)
    for a, b in zip(got, want):
        assert np.array_equal(a, b)


def test_adam_against_a_numpy_formula():
    """Adam written out in float64 from the paper's formulas (bias-corrected moments)."""
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal((5, 6))
    grads = [rng.standard_normal((5, 6)) for _ in range(3)]
    p = eagerc.from_numpy(p0.copy()).requires_grad_()
    opt = eagerc.optim.Adam([p], lr=0.1, betas=(0.8, 0.9), eps=1e-6)
    m = v = 0
    want = p0.copy()
    for t, g in enumerate(grads, 1):
        p.grad = eagerc.from_numpy(g)
        opt.step()
        m = 0.8 * m + 0.2 * g
        v = 0.9 * v + 0.1 * g * g
        want = want - 0.1 * (m / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.9 ** t)) + 1e-6)
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-12, atol=1e-14)


def test_source_is_deterministic_and_per_variant():
    a = foreach.source("adam", "float32", frozenset({"decay"}))
    assert a == foreach.source("adam", "float32", frozenset({"decay"}))
    assert a[0] != foreach.source("adam", "float32", frozenset())[0]
    assert "sqrtf" in a[1] and "p[i] = pi - t;" in a[1]
