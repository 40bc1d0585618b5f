"""Graph breaks that split the graph (eagerc/compiler/breaks.py), and double backward through
compiled code: every compiled result checked against the same call run eagerly, gradients
also against finite differences. (How much speed a split keeps is benchmarks/graph_breaks.py.)"""
import copy
import os
import warnings

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
from eagerc.autograd import gradcheck, gradgradcheck
from eagerc.compiler import GraphBreak

HERE = os.path.basename(__file__)


def _close(a, b, rtol=1e-12):
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=rtol)


def _quiet(c, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return c(*args)


def _t(*values):
    return eagerc.tensor(np.array(values, dtype=np.float64))


def _line(text):
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "_line(" not in line)


def _split_entries(c):
    return [e for e in c.entries.values() if e.split is not None and not e.eager]


# ---------------------------------------------------------------- bool(): a data-dependent branch

def branchy(x):
    h = x * 2 + 1
    if h.sum() > 0:  # the break
        return (h * 3).exp()
    return h.square() - 5


@pytest.mark.parametrize("backend", ["numpy", "interpreter"])
def test_bool_branch_compiles_both_sides_and_warns_once_with_the_line(backend):
    c = eagerc.compile(branchy, backend=backend)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for v in [1.0, 2.0, -3.0, 1.5, -1.0, -2.5, 0.5]:
            x = _t(v, 0.5, 0.25)
            _close(c(x), branchy(x))
    msgs = [str(m.message) for m in w if "graph break" in str(m.message)]
    assert len(msgs) == 1 and f"{HERE}:{_line('# the break')}" in msgs[0] and "split" in msgs[0]
    assert c.traces == 2  # one per branch, then both run compiled
    (e,) = _split_entries(c)
    assert e.calls == 6  # every call but the first found it (the third missed and traced the other side)
    assert len(c.graphs) == 3  # the piece before the branch and one after it per side
    assert "exp" in c.code() and "mul" in c.code()
    assert "graph break (split): bool()" in c.log[1] and "new path after the graph break" in c.log[2]


def test_while_loop_on_a_tensor_takes_a_path_per_trip_count():
    def halve(x):
        while x.abs().max() > 1:
            x = x / 2
        return x + 1
    c = eagerc.compile(halve)
    for v in [3.0, 0.5, 3.5, 6.0, 0.25, 7.0]:  # trip counts 2, 0, 2, 3, 0, 3
        x = _t(v, -v / 2)
        _close(_quiet(c, x), halve(x))
    assert c.traces == 3


def test_a_break_on_an_argument_itself():
    def pick(flag, x):
        return x * 2 if flag else x - 1
    c = eagerc.compile(pick)
    for f in [True, False, True, False]:
        flag = eagerc.tensor(f)
        _close(_quiet(c, flag, _t(1.0, 2.0)), pick(flag, _t(1.0, 2.0)))
    assert c.traces == 2


# ---------------------------------------------------------------- item()

def scaled(x, w):
    h = (x @ w).tanh()
    if h.abs().mean().item() > 0.5:  # compared where it is taken: a guard on the comparison
        h = h * 0.5
    else:
        h = h * 2.0
    return h.sum(1)


def test_item_compared_at_once_guards_the_comparison_not_the_value():
    w = eagerc.randn(4, 4, dtype=eagerc.float64)
    c = eagerc.compile(scaled)
    rng = np.random.default_rng(0)
    for i in range(12):
        x = eagerc.tensor(rng.standard_normal((3, 4)) * (0.05 if i % 2 else 20.0))
        _close(_quiet(c, x, w), scaled(x, w))
    assert c.traces == 2  # a different value on the same side of 0.5 reuses the continuation
    assert sum(e.calls for e in _split_entries(c)) == 11  # (the second call missed: the other side)


def test_reversed_and_named_comparisons():
    limit = 2.0

    def f(x):
        s = x.sum()
        a = x * 3 if 1.0 < s.item() else x * 4
        return a + 1 if s.item() >= limit else a - 1
    c = eagerc.compile(f)
    for v in [0.1, 0.7, 3.0, 0.2, 0.9, 5.0, 0.3]:
        x = _t(v, v)
        _close(_quiet(c, x), f(x))
    assert c.traces == 3  # (s <= 1), (1 < s < 2), (s >= 2)


def test_item_used_as_a_number_is_specialised_on_its_value():
    def f(x):
        return x * x.max().item()  # the value itself enters the graph
    c = eagerc.compile(f)
    x1, x2 = _t(1.0, 2.0), _t(1.0, 3.0)
    for x in [x1, x1, x2, x2, x1]:
        _close(_quiet(c, x), f(x))
    assert c.traces == 2  # one per value: never the other value's constant


def test_item_that_keeps_changing_runs_eagerly_after_max_values():
    from eagerc.compiler.breaks import MAX_VALUES

    def f(x):
        return x + float(x.sum())
    c = eagerc.compile(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(MAX_VALUES + 3):
            x = _t(float(i), 1.0)
            _close(c(x), f(x))
    assert c.traces == MAX_VALUES
    assert any(f"{MAX_VALUES} values of one break" in str(m.message) for m in w)
    assert all(e.eager for e in c.entries.values())


def test_paths_past_max_paths_run_eagerly():
    from eagerc.compiler.breaks import MAX_PATHS

    def f(x):
        for i in range(4):  # 2**4 sign patterns: one path each
            x = x * 2 if x[i] > 0 else x - 1
        return x
    c = eagerc.compile(f)
    rng = np.random.default_rng(5)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for k in range(40):
            x = eagerc.tensor(rng.standard_normal(4) * 10)
            _close(c(x), f(x))
    assert c.traces == MAX_PATHS
    assert any(f"{MAX_PATHS} paths" in str(m.message) for m in w)


# ---------------------------------------------------------------- what a split call commits

def test_updates_before_a_break_are_written_once_even_when_a_call_retraces():
    def f(x, buf):
        buf.mul_(0.5).add_(x)  # an in-place update of an argument before the break
        if buf.sum() > 0:
            return buf * 2
        return buf - 1
    c = eagerc.compile(f)
    be, bc = _t(1.0, 1.0), _t(1.0, 1.0)
    for v in [1.0, -4.0, 2.0, -8.0, 3.0]:  # both branches; the second call misses and retraces
        x = _t(v, v)
        _close(_quiet(c, x, bc), f(x, be))
        _close(bc, be)
    assert c.traces == 2


def test_branches_that_read_different_parameters():
    class Switch(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

        def forward(self, x):
            return self.a(x) if x.mean() > 0 else self.b(x)
    eagerc.manual_seed(0)
    m = Switch().double()
    c = eagerc.compile(m)
    for s in [1.0, -1.0, 2.0, -2.0]:
        x = eagerc.ones(2, 3, dtype=eagerc.float64) * s
        with eagerc.no_grad():
            _close(_quiet(c, x), m(x))
    with eagerc.no_grad():
        m.b.weight.mul_(3.0)  # read by reference: seen by the compiled branch
        x = -eagerc.ones(2, 3, dtype=eagerc.float64)
        _close(c(x), m(x))
    assert c.traces == 2


SCALE_A, SCALE_B = 2.0, 3.0


def test_each_branch_keeps_the_guards_of_what_it_read():
    def f(x):
        if x.sum() > 0:
            return x * SCALE_A  # read on one side only
        return x * SCALE_B
    global SCALE_A, SCALE_B
    c = eagerc.compile(f)
    pos, neg = _t(1.0, 2.0), _t(-1.0, -2.0)
    try:
        for x in [pos, neg, pos, neg]:
            _close(_quiet(c, x), f(x))
        assert c.traces == 2
        SCALE_A = 5.0  # read by the first path's trace only: still guarded after the second joined
        _close(_quiet(c, pos), f(pos))
        SCALE_B = 7.0
        _close(_quiet(c, neg), f(neg))
        assert c.traces > 2
    finally:
        SCALE_A, SCALE_B = 2.0, 3.0


def test_random_ops_keep_a_break_eager():
    def f(x):
        h = eagerc.nn.functional.dropout(x, 0.5, training=True)
        if h.sum() > 0:
            return h * 2
        return h
    c = eagerc.compile(f)
    eagerc.manual_seed(3)
    with pytest.warns(UserWarning, match="random numbers"):
        c(eagerc.ones(8))
    eagerc.manual_seed(4)
    got = c(eagerc.ones(8))
    eagerc.manual_seed(4)
    _close(got, f(eagerc.ones(8)))
    assert all(e.eager for e in c.entries.values())


def test_fullgraph_still_refuses_a_break():
    with pytest.raises(GraphBreak, match="fullgraph=True"):
        eagerc.compile(branchy, fullgraph=True)(_t(1.0))


# ---------------------------------------------------------------- training through a break

class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = self.a(x).tanh()
        if h.mean().item() > 0:
            h = h * 2
        return self.b(h)


def test_training_with_a_break_in_the_forward_matches_eager():
    eagerc.manual_seed(0)
    eager = Gated().double()
    model = copy.deepcopy(eager)
    c = eagerc.compile(model)
    opts = [eagerc.optim.SGD(m.parameters(), lr=0.1) for m in (eager, model)]
    rng = np.random.default_rng(1)
    for i in range(8):
        x = eagerc.tensor(rng.standard_normal((5, 4)) * (1 if i % 2 else -1))
        for fn, opt in ((eager, opts[0]), (c, opts[1])):
            opt.zero_grad()
            fn(x).square().mean().backward() if fn is eager else _quiet(fn, x).square().mean().backward()
            opt.step()
        for p, q in zip(eager.parameters(), model.parameters()):
            _close(q, p)
    assert c._compiled.traces == 2
    (e,) = _split_entries(c._compiled)
    assert all(s.leaf.joint is not None for s in e.split.steps() if s.leaf is not None)  # compiled backward


def test_a_whole_training_step_with_a_break():
    eagerc.manual_seed(0)
    eager = Gated().double()
    model = copy.deepcopy(eager)
    opts = [eagerc.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, model)]

    def step(m, opt, x):
        opt.zero_grad()
        loss = m(x).square().mean()
        loss.backward()
        opt.step()
        return loss
    c = eagerc.compile(lambda x: step(model, opts[1], x))
    rng = np.random.default_rng(2)
    for i in range(8):
        x = eagerc.tensor(rng.standard_normal((5, 4)) * (1 if i % 3 else -1))
        _close(_quiet(c, x), step(eager, opts[0], x))
        for p, q in zip(eager.parameters(), model.parameters()):
            _close(q, p)
    assert _split_entries(c)


# ---------------------------------------------------------------- double backward

def _mlp():
    eagerc.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1)).double()


def _penalty_grads(fn, m, x):
    out = fn(x).sum()
    (g,) = eagerc.autograd.grad(out, [x], create_graph=True)
    penalty = g.square().sum()
    return eagerc.autograd.grad(penalty, list(m.parameters()) + [x], allow_unused=True)


@pytest.mark.parametrize("with_break", [False, True])
def test_gradient_penalty_through_a_compiled_function_matches_eager(with_break):
    m = _mlp()

    def fn(x):
        h = m(x)
        if with_break and h.sum() > 1e9:
            h = h * 0
        return h
    c = eagerc.compile(fn)
    x = eagerc.tensor(np.random.default_rng(0).standard_normal((4, 3)), requires_grad=True)
    _quiet(c, x)
    got, want = _penalty_grads(c, m, x), _penalty_grads(fn, m, x)
    assert c.traces == 1
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            _close(g, w)


def test_double_backward_against_finite_differences():
    m = _mlp()
    c = eagerc.compile(lambda x: m(x).tanh())
    x = eagerc.tensor(np.random.default_rng(1).standard_normal((2, 3)), requires_grad=True)
    _quiet(c, x)
    assert gradcheck(c, (x,))
    assert gradgradcheck(c, (x,))
    assert c.traces == 1


def test_double_backward_with_random_ops_says_so():
    m = _mlp()
    c = eagerc.compile(lambda x: eagerc.nn.functional.dropout(m(x), 0.5, training=True))
    x = eagerc.ones(2, 3, dtype=eagerc.float64, requires_grad=True)
    c(x)
    with pytest.raises(RuntimeError, match="random numbers"):
        eagerc.autograd.grad(c(x).sum(), [x], create_graph=True)
