"""Engine tests for eagerc's define-by-run autograd.

Every expected value comes from somewhere other than eagerc's own derivative
formulas: a closed form written with numpy, finite differences, or a hand
computation in the comment next to it.
"""
import gc
import inspect
import os
import re
import sys
import time
import warnings
import weakref

import numpy as np
import pytest

import eagerc
from eagerc import autograd

F64 = eagerc.float64


def t64(a, requires_grad=True):
    return eagerc.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def rng_arr(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.fixture(autouse=True)
def _reset_global_modes():
    """A failing test must not leave grad mode off or anomaly mode on for the others."""
    yield
    eagerc.set_grad_enabled(True)
    eagerc.dispatch.set_anomaly_enabled(False)


def lineno_of_next_line():
    """The line number just after the caller's current line."""
    return inspect.currentframe().f_back.f_lineno + 1


# ============================================================== accumulation

def test_two_backward_calls_accumulate_into_grad():
    x = t64([1.0, -2.0, 3.0])
    y = (x * x * x).sum()          # dy/dx = 3x^2
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), 3 * x._array ** 2)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * x._array ** 2)


def test_fresh_graphs_accumulate_and_grad_can_be_reset():
    x = t64([0.5, 1.5])
    (x * 3).sum().backward()
    (x.exp()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 + np.exp(x._array))
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_accumulating_into_an_existing_grad_adds_in_place_like_pytorch():
    # PyTorch's AccumulateGrad adds into .grad in place without create_graph: a reference to
    # .grad sees the sum, and its version counter moves (torch: g is x.grad, g._version == 1)
    x = t64([1.0, 2.0, 3.0])
    (x * 2).sum().backward()
    g = x.grad
    (x * x).sum().backward()                    # + 2x
    assert x.grad is g
    np.testing.assert_allclose(g.numpy(), [4.0, 6.0, 8.0])
    w = t64([1.0, 1.0])
    (w * 3).sum().backward()                    # w.grad = [3, 3]
    z = t64([5.0, 7.0])
    y = (z * w.grad).sum()                      # saves w.grad for z's gradient
    (w * 1).sum().backward()                    # w.grad += 1, in place
    np.testing.assert_allclose(w.grad.numpy(), [4.0, 4.0])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_a_grad_that_cannot_take_an_in_place_add_is_replaced():
    x = t64([1.0, 2.0, 3.0])
    base = t64([1.0], requires_grad=False)
    x.grad = base.expand(3)                     # read-only (an expanded view): not written into
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0, 3.0])
    np.testing.assert_allclose(base.numpy(), [1.0])
    (x * x).sum().backward(create_graph=True)   # .grad = 3 + 2x, with history
    with_history = x.grad
    assert with_history.grad_fn is not None
    (x * 4).sum().backward()                    # a gradient with history is never changed in place
    np.testing.assert_allclose(with_history.detach().numpy(), [5.0, 7.0, 9.0])
    np.testing.assert_allclose(x.grad.detach().numpy(), [9.0, 11.0, 13.0])


def _count_clones(monkeypatch):
    """Count the engine's copies of gradients: every copy it makes is the clone op."""
    op = eagerc.runtime.ops.OPS["clone"]
    calls = []
    kernel = op.cpu
    monkeypatch.setattr(op, "cpu", lambda x: calls.append(x.shape) or kernel(x))
    return calls


def test_first_gradient_is_kept_without_a_copy_when_nobody_else_holds_it(monkeypatch):
    # PyTorch's AccumulateGrad steals a fresh gradient (use_count 1) instead of copying it
    clones = _count_clones(monkeypatch)
    a, b = t64([1.0, 2.0, 3.0]), t64([4.0, 5.0, 6.0])
    (a * b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [4.0, 5.0, 6.0])
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 2.0, 3.0])
    assert clones == []
    y = a + b                        # add passes one gradient on to both inputs
    (y * 2).sum().backward()         # a.grad, b.grad += 2: in place, nothing copied
    assert clones == []
    a.grad = b.grad = None
    (y * 2).sum().backward()         # the second leaf must not share the first one's array
    assert len(clones) == 1 and a.grad._array is not b.grad._array
    a.grad.add_(1)
    np.testing.assert_allclose(b.grad.numpy(), [2.0, 2.0, 2.0])


def test_first_gradient_never_aliases_a_tensor_a_hook_or_function_kept():
    # torch: a hook that keeps its argument makes AccumulateGrad copy (use_count > 1), so the next
    # backward's in-place add into .grad leaves the kept tensor alone (values checked with torch 2.13)
    x = t64([1.0, 1.0, 1.0])
    kept = []
    x.register_hook(lambda g: kept.append(g))
    (x * 2).sum().backward()
    (x * 2).sum().backward()
    np.testing.assert_allclose(kept[0].numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0, 4.0])

    x = t64([1.0, 1.0, 1.0])
    kept = []
    y = x + 0.0                      # add's gradient reaches x as the very tensor y's hook saw
    y.register_hook(lambda g: kept.append(g))
    (y * 2).sum().backward(retain_graph=True)
    (y * 2).sum().backward()
    np.testing.assert_allclose(kept[0].numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0, 4.0])

    replacement = t64([7.0, 7.0, 7.0], requires_grad=False)
    x = t64([1.0, 1.0, 1.0])
    x.register_hook(lambda g: replacement)   # a hook's return value is the user's too
    (x * 2).sum().backward()
    (x * 2).sum().backward()
    np.testing.assert_allclose(replacement.numpy(), [7.0, 7.0, 7.0])
    np.testing.assert_allclose(x.grad.numpy(), [14.0, 14.0, 14.0])

    stash = []

    class Keep(autograd.Function):
        @staticmethod
        def forward(ctx, v):
            return v * 3

        @staticmethod
        def backward(ctx, g):
            out = g * 3
            stash.append(out)                # user code may keep what it returns
            return out
    x = t64([1.0, 2.0])
    Keep.apply(x).sum().backward()
    Keep.apply(x).sum().backward()
    np.testing.assert_allclose(stash[0].numpy(), [3.0, 3.0])
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])


def test_users_root_gradient_is_never_kept_as_dot_grad():
    x = t64([1.0, 2.0])
    v = t64([0.5, -1.0], requires_grad=False)
    (x + 0.0).backward(v)            # add passes v on unchanged
    x.grad.mul_(10)
    np.testing.assert_allclose(v.numpy(), [0.5, -1.0])
    np.testing.assert_allclose(x.grad.numpy(), [5.0, -10.0])


def test_leaf_hooks_are_counted_while_they_live():
    from eagerc.autograd import engine
    before = engine.LEAF_HOOKS[0]
    x = t64([1.0, 2.0])
    h = x.register_hook(lambda g: g * 10)
    assert engine.LEAF_HOOKS[0] == before + 1
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [30.0, 30.0])
    h.remove()
    assert engine.LEAF_HOOKS[0] == before
    x.register_hook(lambda g: g)
    x.register_hook(lambda g: g)
    assert engine.LEAF_HOOKS[0] == before + 2
    del x
    gc.collect()
    assert engine.LEAF_HOOKS[0] == before       # a dead tensor's hooks stop counting


def test_ones_like_and_full_like_keep_the_dtype_and_shape():
    for dtype, fill in ((eagerc.float64, 1), (eagerc.float32, 2.5), (eagerc.int32, 7), (eagerc.bool, 1)):
        x = eagerc.zeros(2, 3, dtype=dtype)
        y = eagerc.full_like(x, fill)
        assert y.dtype == dtype and tuple(y.shape) == (2, 3)
        np.testing.assert_array_equal(y.numpy(), np.full((2, 3), fill, dtype=dtype.np))
    y = eagerc.ones_like(eagerc.zeros((), dtype=eagerc.float16), requires_grad=True)
    assert y.requires_grad and y.dtype == eagerc.float16 and y.detach().numpy() == np.float16(1)
    # 0-d floats (a loss's root gradient) take a shorter path: same values, dtypes and rounding
    for dtype, fill in ((eagerc.float16, 1e5), (eagerc.float32, 0.1), (eagerc.float64, -0.0), (eagerc.int64, 3)):
        y = eagerc.full((), fill, dtype=dtype)
        with np.errstate(over="ignore"):
            ref = np.full((), fill, dtype=dtype.np)
        assert type(y.numpy()) is np.ndarray and y.numpy().dtype == ref.dtype and y.shape == ()
        assert y.numpy().tobytes() == ref.tobytes()     # float16 1e5 -> inf, -0.0 keeps its sign


def test_gradients_from_several_paths_are_summed():
    xv = np.array([0.3, -0.7, 1.1])
    x = t64(xv)
    a = x * 2
    # L = sum(a*a + exp(a) + x*sin(x)),  a = 2x
    # dL/dx = 8x + 2 exp(2x) + sin(x) + x cos(x)
    loss = (a * a + a.exp() + x * x.sin()).sum()
    loss.backward()
    expected = 8 * xv + 2 * np.exp(2 * xv) + np.sin(xv) + xv * np.cos(xv)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_same_tensor_twice_in_one_op_and_diamond():
    x = t64([2.0, -3.0])
    (x * x).sum().backward()                 # 2x
    np.testing.assert_allclose(x.grad.numpy(), [4.0, -6.0])
    x.grad = None
    b = x * 3
    c, d = b * 2, b.exp()                  # L = sum(6x + exp(3x)) -> 6 + 3 exp(3x)
    (c + d).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 + 3 * np.exp(3 * x._array))


def test_broadcast_gradient_is_summed_back_to_input_shape():
    xv, bv = rng_arr(4, 3), rng_arr(3, seed=1)
    x, b = t64(xv), t64(bv)
    ((x * b) ** 2).sum().backward()        # d/db sum((x b)^2) = sum_rows 2 x^2 b
    np.testing.assert_allclose(b.grad.numpy(), (2 * xv ** 2 * bv).sum(0), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), 2 * xv * bv ** 2, rtol=1e-12)
    assert b.grad.shape == (3,)


def test_gradient_argument_and_grad_dtype_follow_the_leaf():
    x = eagerc.tensor([1.0, 2.0], requires_grad=True)       # float32 leaf
    y = x.double() * t64([3.0, 5.0], requires_grad=False)
    y.backward(eagerc.tensor([10.0, 100.0], dtype=F64))
    assert x.grad.dtype == eagerc.float32
    np.testing.assert_allclose(x.grad.numpy(), [30.0, 500.0])


def test_backward_inputs_limits_accumulation():
    xv, wv = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    x, w = t64(xv), t64(wv)
    (x * w).sum().backward(inputs=[x])
    np.testing.assert_allclose(x.grad.numpy(), wv)
    assert w.grad is None
    y = x * 2
    (y * w).sum().backward(inputs=y)              # a non-leaf input gets .grad too
    np.testing.assert_allclose(y.grad.numpy(), wv)
    np.testing.assert_allclose(x.grad.numpy(), wv)   # unchanged
    autograd.backward([(w * w).sum()], inputs=[w])
    np.testing.assert_allclose(w.grad.numpy(), 2 * wv)


def test_nonscalar_backward_needs_a_gradient_of_the_right_shape():
    x = t64([1.0, 2.0])
    y = x * 2
    with pytest.raises(RuntimeError, match="scalar outputs"):
        y.backward()
    with pytest.raises(RuntimeError, match="shape"):
        y.backward(t64([1.0, 2.0, 3.0], requires_grad=False))


# ============================================================== retain_graph / freed graph

def test_second_backward_through_freed_graph_raises_clear_error():
    x = t64([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward()
    first = x.grad.numpy().copy()
    with pytest.raises(RuntimeError, match="backward through the graph a second time") as e:
        y.backward()
    assert "retain_graph=True" in str(e.value)
    np.testing.assert_allclose(x.grad.numpy(), first)   # the failed call changed nothing


def test_retain_graph_allows_many_backwards():
    x = t64([0.2, 0.4])
    y = x.sigmoid().sum()
    for k in range(1, 4):
        y.backward(retain_graph=True)
        s = 1 / (1 + np.exp(-x._array))
        np.testing.assert_allclose(x.grad.numpy(), k * s * (1 - s), rtol=1e-12)


def test_freed_graph_error_from_autograd_grad_too():
    x = t64([1.0])
    y = (x * x).sum()
    autograd.grad(y, x)
    with pytest.raises(RuntimeError, match="second time"):
        autograd.grad(y, x)


def test_saved_tensors_are_released_after_backward_unless_retained():
    x = t64([1.0, 2.0])
    a = x * 2
    y = (a * a).sum()            # mul saves a
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is not None     # the graph still needs it
    y.backward(retain_graph=True)
    gc.collect()
    assert ref() is not None     # retained
    y.backward()
    gc.collect()
    assert ref() is None         # freed once backward used it


# ============================================================== hooks

def test_hook_on_leaf_modifies_its_gradient_and_handle_removes_it():
    x = t64([1.0, 2.0])
    h = x.register_hook(lambda g: g * 10)
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [30.0, 30.0])
    h.remove()
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_hook_on_non_leaf_changes_what_flows_upstream():
    x = t64([1.0, 2.0])
    y = x * 2
    seen = []

    def hook(g):
        seen.append(g.numpy().copy())
        return g * 0 + 1                    # replace dL/dy with ones

    y.register_hook(hook)
    (y * 5).sum().backward()
    np.testing.assert_allclose(seen[0], [5.0, 5.0])    # the true dL/dy
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])   # ones * dy/dx


def test_hooks_run_once_with_the_total_gradient():
    x = t64([1.0, 2.0])
    calls = []
    x.register_hook(lambda g: calls.append(g.numpy().copy()))
    y = x * 1
    ycalls = []
    y.register_hook(lambda g: ycalls.append(g.numpy().copy()))
    (x * 2 + x * 3 + y * 4 + y * 5).sum().backward()
    assert len(ycalls) == 1 and np.allclose(ycalls[0], 9.0)
    assert len(calls) == 1 and np.allclose(calls[0], 14.0)
    # a non-linear hook sees the sum, so replacing the gradient replaces all of it
    z = t64([1.0])
    z.register_hook(lambda g: g * 0 + 7)
    (z * 2 + z * 3).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [7.0])


def test_hooks_compose_in_registration_order_and_none_keeps_gradient():
    x = t64([1.0])
    order = []
    x.register_hook(lambda g: order.append("a"))              # returns None: unchanged
    x.register_hook(lambda g: (order.append("b"), g + 1)[1])
    x.register_hook(lambda g: (order.append("c"), g * 10)[1])
    (x * 2).sum().backward()
    assert order == ["a", "b", "c"]
    np.testing.assert_allclose(x.grad.numpy(), [30.0])        # (2 + 1) * 10


def test_removing_a_non_leaf_hook():
    x = t64([1.0])
    y = x * 2
    h = y.register_hook(lambda g: g * 100)
    h.remove()
    h.remove()   # idempotent
    (y * 1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0])


def test_leaf_hook_applies_to_autograd_grad():
    x = t64([1.0, 2.0])
    x.register_hook(lambda g: g * 100)
    (gx,) = autograd.grad((x * 2).sum(), x)
    np.testing.assert_allclose(gx.numpy(), [200.0, 200.0])
    assert x.grad is None


def test_register_hook_needs_requires_grad():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        eagerc.tensor([1.0]).register_hook(lambda g: g)


def test_grad_fn_names_are_camel_case_like_pytorch():
    class MyExp(autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.exp()

        @staticmethod
        def backward(ctx, g):
            return g

    x = t64([1.0])
    assert re.fullmatch(r"MyExpBackward0?", MyExp.apply(x).grad_fn.name())
    assert re.fullmatch(r"NanToNumBackward0?", eagerc.nan_to_num(x).grad_fn.name())


# ============================================================== retain_grad

def test_retain_grad_on_non_leaf():
    xv = np.array([0.5, -1.0])
    x = t64(xv)
    y = x * 3
    z = y.tanh()
    y.retain_grad()
    assert y.retains_grad and not z.retains_grad
    z.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), 1 - np.tanh(3 * xv) ** 2, rtol=1e-12)
    with pytest.warns(UserWarning, match="not a leaf Tensor is being accessed"):
        assert z.grad is None            # not retained: stays None, and reading it warns (PyTorch)
    np.testing.assert_allclose(x.grad.numpy(), 3 * (1 - np.tanh(3 * xv) ** 2), rtol=1e-12)


def test_retained_grad_accumulates_like_a_leaf():
    x = t64([1.0, 2.0])
    y = x * 2
    y.retain_grad()
    loss = (y * y).sum()                # dL/dy = 2y = 4x
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_allclose(y.grad.numpy(), 2 * 4 * x._array)


def test_retain_grad_sees_hook_output_and_leaf_is_noop():
    x = t64([1.0])
    x.retain_grad()                     # a leaf already keeps .grad
    y = x * 2
    y.register_hook(lambda g: g * 5)
    y.retain_grad()
    (y * 3).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [15.0])
    np.testing.assert_allclose(x.grad.numpy(), [30.0])


# ============================================================== autograd.grad

def test_grad_returns_gradients_without_touching_dot_grad():
    xv, wv = rng_arr(3), rng_arr(3, seed=1)
    x, w = t64(xv), t64(wv)
    gx, gw = autograd.grad((x * w).sum(), [x, w])
    np.testing.assert_allclose(gx.numpy(), wv)
    np.testing.assert_allclose(gw.numpy(), xv)
    assert x.grad is None and w.grad is None


def test_grad_outputs_weight_a_vector_output():
    xv = np.array([0.1, 0.2, 0.3])
    x = t64(xv)
    v = np.array([1.0, -2.0, 4.0])
    (g,) = autograd.grad(x.exp(), x, grad_outputs=t64(v, requires_grad=False))
    np.testing.assert_allclose(g.numpy(), v * np.exp(xv))      # vector-Jacobian product


def test_grad_with_several_outputs_sums_their_contributions():
    x = t64([2.0])
    (g,) = autograd.grad([x * 3, x * x], x, grad_outputs=[t64([1.0], False), t64([2.0], False)])
    np.testing.assert_allclose(g.numpy(), [3 + 2 * 2 * 2.0])


def test_grad_allow_unused():
    x, z = t64([1.0]), t64([5.0])
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = autograd.grad(y, [x, z], allow_unused=True)
    np.testing.assert_allclose(gx.numpy(), [2.0])
    assert gz is None


def test_grad_wrt_intermediate_tensor():
    x = t64([0.5])
    y = x * 4
    z = (y.sin()).sum()
    (gy,) = autograd.grad(z, y)
    np.testing.assert_allclose(gy.numpy(), np.cos(4 * 0.5))


def test_grad_leaves_the_graph_below_its_inputs_untouched():
    xv, wv = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    x, w = t64(xv), t64(wv)
    y = x * w
    z = (y * 2).sum()
    (gy,) = autograd.grad(z, y)          # runs z's backward only, not y's
    np.testing.assert_allclose(gy.numpy(), [2.0, 2.0])
    assert x.grad is None and w.grad is None
    (y * 3).sum().backward()             # y's graph (and what it saved) is still there
    np.testing.assert_allclose(x.grad.numpy(), 3 * wv)
    with pytest.raises(RuntimeError, match="second time"):
        autograd.grad(z, y)              # but z's own part was freed


def test_grad_inputs_must_require_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        x = t64([1.0])
        autograd.grad((x * 2).sum(), t64([1.0], requires_grad=False))


def test_grad_create_graph_gives_differentiable_gradients():
    xv = np.array([0.7, -1.3])
    x = t64(xv)
    (g,) = autograd.grad((x ** 3).sum(), x, create_graph=True)     # 3x^2
    assert g.requires_grad and g.grad_fn is not None
    np.testing.assert_allclose(g.numpy(force=True), 3 * xv ** 2)
    (gg,) = autograd.grad(g.sum(), x)                             # 6x
    np.testing.assert_allclose(gg.numpy(), 6 * xv)
    (g2,) = autograd.grad((x ** 3).sum(), x)
    assert not g2.requires_grad and g2.grad_fn is None            # without create_graph


def test_backward_create_graph_makes_dot_grad_differentiable():
    xv = np.array([0.3, 2.0])
    x = t64(xv)
    (x ** 4).sum().backward(create_graph=True)                   # 4x^3
    g = x.grad
    assert g.grad_fn is not None
    x.grad = None
    g.sum().backward()                                            # 12 x^2
    np.testing.assert_allclose(x.grad.numpy(), 12 * xv ** 2)


# ============================================================== custom Function

class CubeFn(autograd.Function):
    """y = a^3 * k for a tensor a and a Python number k."""
    calls = []

    @staticmethod
    def forward(ctx, a, k):
        CubeFn.calls.append(("forward", eagerc.is_grad_enabled()))
        ctx.save_for_backward(a)
        ctx.k = k
        return a * a * a * k

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        CubeFn.calls.append(("backward", ctx.needs_input_grad))
        return g * 3 * a * a * ctx.k, None


def test_custom_function_forward_backward_and_ctx():
    CubeFn.calls.clear()
    av = np.array([1.0, -2.0])
    a = t64(av)
    y = CubeFn.apply(a, 2.0)
    assert y.requires_grad and y.grad_fn is not None and not y.is_leaf
    np.testing.assert_allclose(y.detach().numpy(), 2 * av ** 3)
    y.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 6 * av ** 2)
    # forward ran with grad disabled; needs_input_grad has one entry per input
    assert CubeFn.calls == [("forward", False), ("backward", (True, False))]
    assert eagerc.is_grad_enabled()


def test_custom_function_saved_tensors_are_the_saved_objects():
    got = {}

    class Keep(autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            got["ab"] = (a, b)
            got["nig"] = ctx.needs_input_grad
            return g * b, g * a

    a, b = t64([2.0]), t64([5.0], requires_grad=False)
    Keep.apply(a, b).sum().backward()
    assert got["ab"][0] is a and got["ab"][1] is b
    assert got["nig"] == (True, False)
    np.testing.assert_allclose(a.grad.numpy(), [5.0])
    assert b.grad is None


def test_custom_function_gradcheck_and_gradgradcheck():
    a = t64(rng_arr(3))
    assert autograd.gradcheck(lambda t: CubeFn.apply(t, 1.5), (a,))
    assert autograd.gradgradcheck(lambda t: CubeFn.apply(t, 1.5), (a,))


def test_custom_function_without_grad_needed_builds_no_node():
    a = t64([1.0], requires_grad=False)
    assert CubeFn.apply(a, 1.0).grad_fn is None
    b = t64([1.0])
    with eagerc.no_grad():
        y = CubeFn.apply(b, 1.0)
    assert y.grad_fn is None and not y.requires_grad


def test_custom_function_second_backward_raises_freed_error():
    a = t64([1.0, 2.0])
    y = CubeFn.apply(a, 1.0).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()
    b = t64([3.0])
    z = CubeFn.apply(b, 1.0).sum()
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_allclose(b.grad.numpy(), [2 * 27.0])


def test_custom_function_with_several_differentiable_outputs():
    """Each output's gradient reaches the inputs (checked against finite differences), the
    saved tensors serve every output's backward, and a second backward still raises."""
    class SinCos(autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return (x * w).sin(), (x * w).cos(), x.sum()

        @staticmethod
        def backward(ctx, gs, gc, gsum):
            x, w = ctx.saved_tensors
            d = gs * (x * w).cos() - gc * (x * w).sin()
            return d * w + gsum, d * x

    xv, wv = np.array([0.3, 1.2, -0.7]), np.array([0.5, -2.0, 1.5])
    x, w = t64(xv), t64(wv)
    s, c, total = SinCos.apply(x, w)
    assert s.requires_grad and c.requires_grad and total.requires_grad and s.grad_fn is not c.grad_fn
    (2 * s + 3 * c + 5 * total).sum().backward()
    d = 2 * np.cos(xv * wv) - 3 * np.sin(xv * wv)
    np.testing.assert_allclose(x.grad.numpy(), d * wv + 15)  # 5 * total is broadcast over 3 elements
    np.testing.assert_allclose(w.grad.numpy(), d * xv)
    assert autograd.gradcheck(lambda a, b: SinCos.apply(a, b)[:2], (t64(xv), t64(wv)))
    s2, c2, _ = SinCos.apply(t64(xv), t64(wv))
    (s2 + c2).sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        (s2 + c2).sum().backward()


def test_custom_function_with_setup_context_and_unmaterialized_grads():
    seen = []

    class MulAdd(autograd.Function):
        @staticmethod
        def forward(x, y):
            return x * y, x + y

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)
            ctx.set_materialize_grads(False)

        @staticmethod
        def backward(ctx, gp, gq):
            seen.append((gp is None, gq is None))
            x, y = ctx.saved_tensors
            gx = (gp * y if gp is not None else 0) + (gq if gq is not None else 0)
            gy = (gp * x if gp is not None else 0) + (gq if gq is not None else 0)
            return gx, gy

    a, b = t64([2.0, 3.0]), t64([5.0, 7.0])
    p, q = MulAdd.apply(a, b)
    (p + 10 * q).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [5.0 + 10, 7.0 + 10])
    np.testing.assert_allclose(b.grad.numpy(), [2.0 + 10, 3.0 + 10])
    assert sorted(seen) == [(False, True), (True, False)]  # one call per output, the other None


def test_custom_function_non_differentiable_outputs():
    class SortWithIndices(autograd.Function):
        @staticmethod
        def forward(ctx, a):
            idx = np.argsort(a._array, kind="stable")
            ctx.save_for_backward(eagerc.from_numpy(idx))
            values = eagerc.tensor(a._array[idx])
            ranks = eagerc.tensor(idx.astype(np.float64))     # float but marked
            ctx.mark_non_differentiable(ranks)
            return values, eagerc.from_numpy(idx), ranks

        @staticmethod
        def backward(ctx, g_values, g_idx, g_ranks):
            (idx,) = ctx.saved_tensors
            # the non-differentiable outputs get zero gradients of their own shape
            assert np.all(g_idx.numpy() == 0) and g_idx.shape == (3,)
            assert np.all(g_ranks.numpy() == 0)
            out = np.zeros_like(g_values._array)
            out[idx.numpy()] = g_values._array
            return eagerc.from_numpy(out)

    av = np.array([3.0, 1.0, 2.0])
    a = t64(av)
    values, idx, ranks = SortWithIndices.apply(a)
    assert values.requires_grad
    assert not idx.requires_grad and idx.dtype == eagerc.int64
    assert not ranks.requires_grad and ranks.grad_fn is None
    (values * t64([1.0, 10.0, 100.0], False)).sum().backward()
    # sorted order is a[1], a[2], a[0]
    np.testing.assert_allclose(a.grad.numpy(), [100.0, 1.0, 10.0])


def test_custom_function_wrong_gradient_count_or_type():
    class TooFew(autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return (g,)

    class NotTensor(autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return 2.0

    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        TooFew.apply(t64([1.0]), t64([1.0])).sum().backward()
    with pytest.raises(TypeError, match="must return Tensors"):
        NotTensor.apply(t64([1.0])).sum().backward()


def test_custom_function_saved_tensor_modified_in_place_raises():
    class Square(autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * g * a

    x = t64([1.0, 2.0])
    a = x * 1
    y = Square.apply(a)
    a.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# ============================================================== second derivatives

def _hvp(f, xv, v):
    """Hessian-vector product of sum(f(x)) at xv along v, by double backward."""
    x = t64(xv)
    (g,) = autograd.grad(f(x).sum(), x, create_graph=True)
    (h,) = autograd.grad(g, x, grad_outputs=t64(v, False))
    return g.detach().numpy(), h.numpy()


@pytest.mark.parametrize("name,f,d1,d2", [
    ("tanh", lambda x: x.tanh(),
     lambda x: 1 - np.tanh(x) ** 2, lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
    ("sigmoid", lambda x: x.sigmoid(),
     lambda x: (s := 1 / (1 + np.exp(-x))) * (1 - s),
     lambda x: (s := 1 / (1 + np.exp(-x))) * (1 - s) * (1 - 2 * s)),
    ("exp", lambda x: x.exp(), np.exp, np.exp),
    ("sin", lambda x: x.sin(), np.cos, lambda x: -np.sin(x)),
    ("log", lambda x: (x * x + 1).log(),
     lambda x: 2 * x / (x * x + 1), lambda x: (2 - 2 * x * x) / (x * x + 1) ** 2),
])
def test_second_derivative_of_unary_ops_matches_closed_form(name, f, d1, d2):
    xv = np.array([-1.7, -0.3, 0.0, 0.4, 2.2])
    v = np.array([1.0, -2.0, 0.5, 3.0, -1.0])
    g, h = _hvp(f, xv, v)
    np.testing.assert_allclose(g, d1(xv), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, d2(xv) * v, rtol=1e-10, atol=1e-12)


def test_second_derivatives_of_mul_are_the_mixed_partials():
    xv, yv = rng_arr(4), rng_arr(4, seed=1)
    x, y = t64(xv), t64(yv)
    f = (x * x * y).sum()                       # df/dx = 2xy, df/dy = x^2
    gx, gy = autograd.grad(f, [x, y], create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), 2 * xv * yv)
    np.testing.assert_allclose(gy.detach().numpy(), xv ** 2)
    hxx, hxy = autograd.grad(gx.sum(), [x, y], retain_graph=True)
    np.testing.assert_allclose(hxx.numpy(), 2 * yv)          # d(sum 2xy)/dx
    np.testing.assert_allclose(hxy.numpy(), 2 * xv)          # d(sum 2xy)/dy
    (hyx,) = autograd.grad(gy.sum(), x)                       # d(sum x^2)/dx
    np.testing.assert_allclose(hyx.numpy(), 2 * xv)


def test_second_derivatives_of_matmul():
    if not hasattr(eagerc, "matmul"):
        pytest.skip("matmul not implemented yet")
    Av, Bv, Vv = rng_arr(3, 4), rng_arr(4, 2, seed=1), rng_arr(3, 4, seed=2)
    A, B = t64(Av), t64(Bv)
    L = ((A @ B) ** 2).sum()                    # dL/dA = 2 A B B^T
    (gA,) = autograd.grad(L, A, create_graph=True)
    np.testing.assert_allclose(gA.detach().numpy(), 2 * Av @ Bv @ Bv.T, rtol=1e-10)
    # s = <gA, V> = 2 tr(V^T A B B^T):  ds/dA = 2 V B B^T,  ds/dB = 2 (V^T A + A^T V) B
    hA, hB = autograd.grad(gA, [A, B], grad_outputs=t64(Vv, False))
    np.testing.assert_allclose(hA.numpy(), 2 * Vv @ Bv @ Bv.T, rtol=1e-10)
    np.testing.assert_allclose(hB.numpy(), 2 * (Vv.T @ Av + Av.T @ Vv) @ Bv, rtol=1e-10)
    assert autograd.gradgradcheck(lambda a, b: a @ b, (t64(Av), t64(Bv)))


def _softmax(x):
    fn = getattr(getattr(eagerc.nn, "functional", None), "softmax", None)
    if fn is not None:
        return fn(x, dim=-1)
    e = (x - x.amax(dim=-1, keepdim=True).detach()).exp()
    return e / e.sum(dim=-1, keepdim=True)


def test_second_derivative_of_softmax_matches_closed_form():
    xv, wv, vv = rng_arr(5), rng_arr(5, seed=1), rng_arr(5, seed=2)
    x = t64(xv)
    L = (_softmax(x) * t64(wv, False)).sum()
    (g,) = autograd.grad(L, x, create_graph=True)
    s = np.exp(xv - xv.max())
    s /= s.sum()
    g_ref = s * (wv - wv @ s)                   # dL/dx
    np.testing.assert_allclose(g.detach().numpy(), g_ref, rtol=1e-10)
    (h,) = autograd.grad(g, x, grad_outputs=t64(vv, False))
    # Hessian H = diag(g) - g s^T - s g^T (derived by hand from ds_i/dx_j = s_i(d_ij - s_j))
    H = np.diag(g_ref) - np.outer(g_ref, s) - np.outer(s, g_ref)
    np.testing.assert_allclose(h.numpy(), H @ vv, rtol=1e-9, atol=1e-12)
    assert autograd.gradgradcheck(_softmax, (t64(rng_arr(2, 3)),))


@pytest.mark.parametrize("f", [
    lambda x: x.tanh(), lambda x: x.sigmoid(), lambda x: x.exp() * x,
    lambda x: (x * x).sum(dim=-1), lambda x: x / (x * x + 1),
], ids=["tanh", "sigmoid", "exp_mul", "sum_sq", "div"])
def test_gradgradcheck_on_composites(f):
    assert autograd.gradgradcheck(f, (t64(rng_arr(2, 3)),))


def test_gradcheck_and_gradgradcheck_detect_wrong_derivatives():
    class WrongFirst(autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * a                  # should be 2 g a

    class WrongSecond(autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * g * a.detach()     # right value, but no dependence on a: d2 wrong

    x = t64(rng_arr(3))
    assert not autograd.gradcheck(WrongFirst.apply, (x,), raise_exception=False)
    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        autograd.gradcheck(WrongFirst.apply, (x,))
    assert autograd.gradcheck(WrongSecond.apply, (x,))
    assert not autograd.gradgradcheck(WrongSecond.apply, (x,), raise_exception=False)


# ============================================================== detect_anomaly

def test_detect_anomaly_names_forward_op_and_user_line_for_inf():
    with autograd.detect_anomaly():
        x = t64([0.0, 1.0])
        line = lineno_of_next_line()
        y = x.sqrt()                     # d sqrt/dx = 1/(2 sqrt x) = inf at 0
        with pytest.raises(RuntimeError) as e:
            with np.errstate(all="ignore"):
                y.sum().backward()
    msg = str(e.value)
    assert "nan or inf" in msg
    assert "sqrt" in msg.lower()
    assert f"{os.path.basename(__file__)}\", line {line}" in msg
    assert "y = x.sqrt()" in msg


def test_detect_anomaly_catches_nan_from_zero_times_inf():
    with autograd.detect_anomaly():
        x = t64([0.0, 4.0])
        y = x.sqrt()
        line = lineno_of_next_line()
        z = y * t64([0.0, 1.0], False)      # backward: sqrt gets g = 0 -> 0 / (2*0) = nan
        with pytest.raises(RuntimeError) as e:
            with np.errstate(all="ignore"):
                z.sum().backward()
    msg = str(e.value)
    assert "SqrtBackward" in msg
    assert f"line {line - 2}" in msg       # where sqrt, not mul, was created


def test_without_anomaly_mode_nan_passes_silently():
    x = t64([0.0])
    with np.errstate(all="ignore"):
        x.sqrt().sum().backward()
    assert np.isinf(x.grad.numpy()[0])
    assert not eagerc.dispatch.anomaly_enabled()


def test_detect_anomaly_restores_previous_mode():
    with autograd.detect_anomaly():
        assert eagerc.dispatch.anomaly_enabled()
    assert not eagerc.dispatch.anomaly_enabled()
    try:
        with autograd.set_detect_anomaly(True):
            assert eagerc.dispatch.anomaly_enabled()
        assert not eagerc.dispatch.anomaly_enabled()
        autograd.set_detect_anomaly(True)
        assert eagerc.dispatch.anomaly_enabled()
        autograd.set_detect_anomaly(False)
        assert not eagerc.dispatch.anomaly_enabled()
    finally:  # never leave anomaly mode on for the other tests (it records a stack per op)
        eagerc.dispatch.set_anomaly_enabled(False)


def test_detect_anomaly_names_custom_function_and_its_call_site():
    class Bad(autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    with autograd.detect_anomaly():
        x = t64([1.0])
        line = lineno_of_next_line()
        y = Bad.apply(x)
        with pytest.raises(RuntimeError) as e:
            y.sum().backward()
    assert "Bad" in str(e.value) and f"line {line}" in str(e.value)


# ============================================================== version counters

def test_modifying_a_saved_input_names_both_ops():
    x = t64([1.0, 2.0])
    a = x * 1
    b = a * a                    # mul saves a
    a.mul_(2)
    with pytest.raises(RuntimeError) as e:
        b.sum().backward()
    msg = str(e.value)
    assert "modified by an inplace operation" in msg
    assert "of mul " in msg and "by mul_" in msg
    assert "version 1" in msg and "expected version 0" in msg


def test_modifying_a_saved_output_names_both_ops():
    x = t64([1.0, 2.0])
    y = x.exp()                  # exp saves its output
    y.add_(1)
    with pytest.raises(RuntimeError) as e:
        y.sum().backward()
    msg = str(e.value)
    assert "exp" in msg and "add_" in msg


def test_modifying_through_a_view_or_detached_alias_is_caught():
    x = t64([1.0, 2.0, 3.0])
    a = x * 1
    b = (a * a).sum()
    with eagerc.no_grad():
        a.reshape(3, 1).add_(1)  # a view shares a's version counter
    with pytest.raises(RuntimeError, match="add_"):
        b.backward()
    a = x * 1
    b = (a * a).sum()
    a.detach().zero_()           # so does detach()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        b.backward()


def test_modifying_a_tensor_backward_does_not_need_is_fine():
    xv = np.array([1.0, 2.0])
    x = t64(xv)
    a = x * 1
    b = a.exp()                  # exp keeps its output, not a
    c = a + 1                    # add saves nothing
    a.mul_(100)
    (b + c).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(xv) + 1)


def test_modifying_a_leaf_under_no_grad_invalidates_graphs_that_saved_it():
    x = t64([1.0, 2.0])
    y = (x * x).sum()
    with eagerc.no_grad():
        x.mul_(2)
    with pytest.raises(RuntimeError, match="mul_"):
        y.backward()


def test_version_counter_counts_in_place_ops():
    x = eagerc.zeros(3)
    v0 = x._version
    x.add_(1)
    x.mul_(2)
    x.zero_()
    assert x._version == v0 + 3
    assert x.detach()._version == x._version


# ============================================================== in-place on leaves

def test_in_place_on_leaf_requiring_grad_raises_outside_no_grad():
    x = t64([1.0, 2.0])
    for op in (lambda: x.add_(1), lambda: x.mul_(2), lambda: x.zero_(), lambda: x.fill_(3.0),
               lambda: x.copy_(eagerc.ones(2)), lambda: x.normal_(), lambda: x.uniform_()):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            op()
    np.testing.assert_array_equal(x._array, [1.0, 2.0])
    assert x._version == 0


def test_in_place_on_leaf_works_inside_no_grad():
    x = t64([1.0, 2.0])
    with eagerc.no_grad():
        x.add_(1)
        x.mul_(t64([2.0, 3.0], False))
    np.testing.assert_array_equal(x._array, [4.0, 9.0])
    assert x.is_leaf and x.requires_grad and x.grad_fn is None
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [8.0, 18.0])


# ============================================================== deep graphs, leaks

def test_100k_op_chain_backward_has_no_recursion_error():
    limit = sys.getrecursionlimit()
    x = t64([1.5])
    y = x
    n = 100_001
    t0 = time.perf_counter()
    for _ in range(n):
        y = -y
    y.sum().backward()
    assert time.perf_counter() - t0 < 10
    np.testing.assert_allclose(x.grad.numpy(), [-1.0])      # (-1)^n, n odd
    assert sys.getrecursionlimit() == limit
    del y                                                    # freeing the chain must not recurse
    gc.collect()


def test_deep_chain_with_saved_tensors():
    x = t64([0.5])
    y = x
    for _ in range(10_000):
        y = y * t64([1.0001], False)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001 ** 10_000], rtol=1e-9)


def test_graph_is_freed_when_outputs_are_dropped():
    x = t64([1.0, 2.0])

    def make_loss():
        a = x * 2
        b = a.exp()
        c = b * a
        return c.sum()

    loss = make_loss()
    node_refs = [weakref.ref(loss.grad_fn)] + [weakref.ref(e) for e in loss.grad_fn.next if e is not None]
    assert all(r() is not None for r in node_refs)
    del loss
    gc.collect()
    assert all(r() is None for r in node_refs)

    loss = make_loss()
    loss.backward()
    ref = weakref.ref(loss.grad_fn)
    del loss
    gc.collect()
    assert ref() is None
    # the leaf holds no reference to the graph it fed
    assert x.grad_fn is None


def test_custom_function_graph_is_freed():
    x = t64([1.0])
    y = CubeFn.apply(x * 1, 1.0).sum()
    ref = weakref.ref(y.grad_fn)
    del y
    gc.collect()
    assert ref() is None


def test_create_graph_graph_is_freed():
    x = t64([1.0])
    (g,) = autograd.grad((x ** 3).sum(), x, create_graph=True)
    ref = weakref.ref(g.grad_fn)
    del g
    gc.collect()
    assert ref() is None


# ============================================================== grad modes

def test_no_grad_context_and_nesting_with_enable_grad():
    x = t64([1.0])
    with eagerc.no_grad():
        assert not eagerc.is_grad_enabled()
        y = x * 2
        with eagerc.enable_grad():
            assert eagerc.is_grad_enabled()
            z = x * 2
        assert not eagerc.is_grad_enabled()
    assert eagerc.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None


def test_grad_mode_restored_after_exception():
    with pytest.raises(ValueError):
        with eagerc.no_grad():
            raise ValueError
    assert eagerc.is_grad_enabled()


def test_grad_mode_decorators_with_and_without_parentheses():
    x = t64([1.0])

    @eagerc.no_grad()
    def f():
        return x * 2

    @eagerc.no_grad
    def f_bare():
        return x * 2

    @eagerc.enable_grad()
    def g():
        return x * 2

    @eagerc.inference_mode()
    def h():
        return x * 2

    assert not f().requires_grad and not f_bare().requires_grad and not h().requires_grad
    assert f_bare.__name__ == "f_bare"
    with eagerc.no_grad():
        assert g().requires_grad
        assert not eagerc.is_grad_enabled()
    assert eagerc.is_grad_enabled()


def test_set_grad_enabled_as_function_context_and_decorator():
    x = t64([1.0])
    eagerc.set_grad_enabled(False)
    try:
        assert not (x * 2).requires_grad
    finally:
        eagerc.set_grad_enabled(True)
    assert (x * 2).requires_grad
    with eagerc.set_grad_enabled(False):
        assert not (x * 2).requires_grad
        with eagerc.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not eagerc.is_grad_enabled()
    assert eagerc.is_grad_enabled()

    @eagerc.set_grad_enabled(False)
    def f():
        return eagerc.is_grad_enabled()

    assert eagerc.is_grad_enabled()      # decorating does not change the mode
    assert f() is False
    assert eagerc.is_grad_enabled()


def test_inference_mode():
    x = t64([1.0])
    with eagerc.inference_mode():
        assert not (x * 2).requires_grad
    with eagerc.inference_mode(False):
        assert (x * 2).requires_grad
    with eagerc.no_grad():
        with eagerc.inference_mode(False):
            assert eagerc.is_grad_enabled()
    assert eagerc.is_grad_enabled()


def test_backward_inside_no_grad_still_works():
    x = t64([2.0])
    y = (x * x).sum()
    with eagerc.no_grad():
        y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0])
    assert x.grad.grad_fn is None


# ============================================================== detach / requires_grad

def test_detach_shares_memory_and_cuts_the_graph():
    x = t64([1.0, 2.0])
    y = x * 3
    d = y.detach()
    assert d.is_leaf and not d.requires_grad and d.grad_fn is None
    assert np.shares_memory(d.numpy(), y._array)
    d._array[0] = 100.0
    assert y._array[0] == 100.0
    (d * x).sum().backward()                  # no gradient flows through d
    np.testing.assert_allclose(x.grad.numpy(), d.numpy())


def test_detach_in_place():
    x = t64([1.0])
    y = x * 2
    assert y.detach_() is y
    assert y.is_leaf and not y.requires_grad and y.grad_fn is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()


def test_requires_grad_flag_semantics():
    a = eagerc.tensor([1.0, 2.0])
    assert not a.requires_grad and a.is_leaf
    assert a.requires_grad_() is a and a.requires_grad
    a.requires_grad_(False)
    assert not a.requires_grad
    b = t64([1.0]) * 2
    with pytest.raises(RuntimeError, match="leaf"):
        b.requires_grad_(False)
    b.requires_grad_(True)                    # no-op on a non-leaf
    assert not b.is_leaf
    # ops on tensors that do not require grad build no graph
    c = eagerc.tensor([1.0]) * eagerc.tensor([2.0])
    assert c.grad_fn is None and not c.requires_grad


@pytest.mark.parametrize("dtype", [eagerc.int64, eagerc.int32, eagerc.uint8, eagerc.bool])
def test_integer_and_bool_tensors_cannot_require_grad(dtype):
    with pytest.raises(RuntimeError, match="floating point"):
        eagerc.tensor([1, 0], dtype=dtype, requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        eagerc.tensor([1, 0], dtype=dtype).requires_grad_()
    with pytest.raises(RuntimeError, match="floating point"):
        eagerc.zeros(2, dtype=dtype, requires_grad=True)


@pytest.mark.parametrize("dtype", [eagerc.int64, eagerc.int32, eagerc.uint8, eagerc.bool])
def test_integer_tensors_cannot_require_grad_through_the_attribute_or_constructor(dtype):
    """PyTorch's messages: "only ..." from the attribute, "Only ..." from the constructor."""
    t = eagerc.tensor([1, 0], dtype=dtype)
    with pytest.raises(RuntimeError, match="^only Tensors of floating point and complex dtype "
                                           "can require gradients"):
        t.requires_grad = True
    assert t.requires_grad is False
    t.requires_grad = False                   # turning it off is always fine on a leaf
    with pytest.raises(RuntimeError, match="^Only Tensors of floating point and complex dtype"):
        eagerc.Tensor([1, 0], dtype=dtype, requires_grad=True)
    with pytest.raises(RuntimeError, match="^Only Tensors of floating point and complex dtype"):
        t.requires_grad_(True)


def test_requires_grad_attribute_of_a_non_leaf_cannot_change():
    x = t64([1.0, 2.0])
    y = x * 2
    with pytest.raises(RuntimeError, match=r"^you can only change requires_grad flags of leaf "
                                           r"variables\. If you want .* var\.detach\(\)\.$"):
        y.requires_grad = False
    with pytest.raises(RuntimeError, match=r"^you can only change requires_grad flags of leaf variables\.$"):
        y.requires_grad = True                # PyTorch refuses any assignment on a non-leaf
    assert y.requires_grad and y.grad_fn is not None   # unchanged, still part of the graph
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
    x.requires_grad = False                   # a leaf may change its flag
    assert not x.requires_grad and not (x * 2).requires_grad
    x.requires_grad = True
    assert (x * 2).requires_grad


def test_reading_grad_of_a_non_leaf_warns_like_pytorch():
    x = t64([1.0, 2.0])
    y = x * 2
    with pytest.warns(UserWarning, match=r"^The \.grad attribute of a Tensor that is not a leaf "
                                         r"Tensor is being accessed\..*retain_grad\(\)") as w:
        assert y.grad is None
    assert w[0].filename == __file__          # points at the user's line
    z = x * 3
    z.retain_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # none of these warn
        assert x.grad is None and eagerc.tensor([1.0]).grad is None and z.grad is None
        (y + z).sum().backward()              # the engine and accumulation read no non-leaf .grad
        np.testing.assert_array_equal(z.grad.numpy(), [1.0, 1.0])
        np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])
        opt = eagerc.optim.SGD([x], lr=0.5)
        opt.step()
        opt.zero_grad()
        np.testing.assert_array_equal(x.detach().numpy(), [-1.5, -0.5])


def test_integer_results_do_not_require_grad():
    x = t64([1.5, -2.5])
    for y in (x.long(), x.int(), x > 0, x.argmax(), x.isnan()):
        assert not y.requires_grad and y.grad_fn is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x.long() * 2).sum().backward()


def test_leaf_grads_never_alias_each_other_or_the_user_gradient():
    a = eagerc.tensor([1.0, 2.0], requires_grad=True)
    b = eagerc.tensor([3.0, 4.0], requires_grad=True)
    g = eagerc.tensor([1.0, 1.0])
    (a + b).backward(g)  # add passes g through to both leaves
    a.grad._array[0] = 100.0
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(g.numpy(), [1.0, 1.0])
