"""Dynamic shapes through graph breaks: a batch-size sweep over a compiled function split at a
`bool()` or `.item()` (breaks.py) costs two traces per path (one at its real sizes, one on
synthetic sizes reading the real call's break values), whatever the sizes later. Every result
is checked against the same function run eagerly on copies (the independent reference): outputs,
parameters and optimizer state after each step; and a break value that depends on the size is
never taken for another size's."""
import copy
import warnings

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.compiler import entries
from test_amp import scaled_step
from test_compile_never_silent import backend  # noqa: F401  (the backend fixture)

SIZES = list(range(1, 13)) + [12, 3, 7, 1, 5]


def _quiet(c, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return c(*args)


def _equal(got, want, what):
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy(), err_msg=what)


def _close(got, want, what):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=what)


def _same(backend):
    """numpy and the interpreter keep eager's bits; c's fused kernels may round sums differently."""
    return _equal if backend in ("numpy", "interpreter") else _close


def _symbolic(cf):
    """The symbolic split entries of a compiled function."""
    out = []
    for e in cf.entries.values():
        while e is not None:
            if e.split is not None and e.dynamic is not None:
                out.append(e)
            e = e.dynamic.next if e.dynamic is not None else None
    return out


def _paths(entry):
    return sum(1 for s in entry.split.steps() if s.leaf is not None)


def gated(x):
    h = x.tanh() * 2 + 1
    if h.abs().mean().item() > 1.0:   # compared where it is taken: guarded on the outcome
        h = h * 3
    return (h - 0.5).square().sum(1)


@pytest.mark.parametrize("backend", ["numpy", "interpreter", "c"], indirect=True)
def test_a_forward_with_an_item_break_sweeps_sizes_on_one_path(backend):
    c = eagerc.compile(gated, backend=backend)
    rng = np.random.default_rng(0)
    for b in SIZES + [3] * entries.HOT_CALLS:
        x = eagerc.tensor(rng.standard_normal((b, 5)) + 2.0)   # always the "> 1.0" side
        _same(backend)(_quiet(c, x), gated(x), f"batch {b}")
    assert c.traces == 2
    (e,) = _symbolic(c)
    assert _paths(e) == 1
    if backend == "c":   # a size called often gets kernels of its own in every piece (entries.Dynamic)
        assert all((3,) in s.run[0].programs for s in e.split.steps())


def test_both_sides_of_a_break_at_every_size_cost_two_traces_each():
    c = eagerc.compile(gated, backend="numpy")
    rng = np.random.default_rng(1)
    for k, b in enumerate(list(range(2, 13)) * 2):   # (size 1 is a specialisation of its own)
        shift = 2.0 if k % 3 else -3.0   # either side of the comparison, at any size
        x = eagerc.tensor(rng.standard_normal((b, 5)) * 0.1 + shift)
        _equal(_quiet(c, x), gated(x), f"call {k}, batch {b}")
    (e,) = _symbolic(c)
    assert _paths(e) == 2
    assert c.traces <= 2 * 2


def bool_branch(x):
    h = x * 2
    if not eagerc.isfinite(h).all():   # bool(): GradScaler's inf check reads a truth value
        return h.nan_to_num(0.0, 0.0, 0.0)
    return h + 1


def test_a_bool_break_keeps_its_truth_value_guard_at_every_size():
    c = eagerc.compile(bool_branch, backend="numpy")
    rng = np.random.default_rng(2)
    for k, b in enumerate(list(range(2, 13)) + [3, 12, 7, 5]):
        a = rng.standard_normal((b, 3))
        if k % 4 == 3:
            a[0, 0] = np.inf
        x = eagerc.tensor(a)
        _equal(_quiet(c, x), bool_branch(x), f"call {k}, batch {b}")
    assert c.traces <= 4


def per_count(x):
    n = (x * 0 + 1).sum().item()   # the number of elements: a value that changes with the batch size
    return x / n


def test_a_break_value_that_depends_on_the_size_is_never_reused_for_another_size():
    c = eagerc.compile(per_count, backend="numpy")
    for b in [1, 2, 3, 2, 3, 4, 2, 4, 5, 6, 7]:
        x = eagerc.tensor(np.arange(1.0, 2 * b + 1).reshape(b, 2))
        _equal(_quiet(c, x), per_count(x), f"batch {b}")   # x / (2*b): never another size's 2*b


def many_or_few(x):
    if (x * 0 + 1).sum().item() > 8:   # the outcome flips with the batch size
        return x * 2
    return x - 1


def test_a_compared_value_that_depends_on_the_size_takes_the_right_side():
    c = eagerc.compile(many_or_few, backend="numpy")
    for b in [1, 2, 3, 6, 2, 5, 9, 3, 12, 4, 7, 10]:
        x = eagerc.tensor(np.ones((b, 2)))
        _equal(_quiet(c, x), many_or_few(x), f"batch {b}")
    (e,) = _symbolic(c)
    assert _paths(e) == 2


def after_break_size(x):
    s = x.sum()
    if s.item() > -1e9:
        if x.shape[0] > 4:   # a size comparison after the break: a guard of the symbolic key
            return x * 2
        return x * 3
    return x


def test_a_size_comparison_after_the_break_is_guarded():
    c = eagerc.compile(after_break_size, backend="numpy")
    for b in [5, 6, 8, 2, 3, 9, 3, 4, 7, 2, 12]:
        x = eagerc.tensor(np.ones((b, 2)))
        _equal(_quiet(c, x), after_break_size(x), f"batch {b}")
    assert any(line.endswith("as symbolic where s0 > 4") for line in c.log)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(self.a(x).tanh())


def _step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    if loss.item() > 1e6:   # logging-style check of the loss in the middle of the step
        raise RuntimeError("diverged")
    loss.backward()
    opt.step()
    return loss.detach()


@pytest.mark.parametrize("backend", ["numpy", "c"], indirect=True)
@pytest.mark.parametrize("make_opt", [lambda ps: eagerc.optim.Adam(ps, lr=1e-2),
                                      lambda ps: eagerc.optim.SGD(ps, lr=0.1)], ids=["Adam", "SGD"])
def test_a_training_step_with_loss_item_sweeps_sizes_in_two_traces(backend, make_opt):
    eagerc.manual_seed(0)
    eager = _Net().double()
    model = copy.deepcopy(eager)
    opt_e, opt_c = make_opt(eager.parameters()), make_opt(model.parameters())
    c = eagerc.compile(lambda x, y: _step(model, opt_c, x, y), backend=backend)
    rng = np.random.default_rng(3)
    for b in SIZES:
        x, y = eagerc.tensor(rng.standard_normal((b, 6))), eagerc.tensor(rng.integers(0, 4, b))
        _same(backend)(_quiet(c, x, y), _step(eager, opt_e, x, y), f"loss at batch {b}")
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            _same(backend)(q, p, f"{name} after batch {b}")
    assert c.traces == 2
    (e,) = _symbolic(c)
    assert _paths(e) == 1
    sd_e, sd_c = opt_e.state_dict()["state"], opt_c.state_dict()["state"]
    for k in sd_e:
        for name, v in sd_e[k].items():
            if isinstance(v, eagerc.Tensor):
                _close(sd_c[k][name], v, f"optimizer state {k}.{name}")


class _Gated(_Net):
    def forward(self, x):
        h = self.a(x).tanh()
        if h.mean().item() > -10.0:   # a break in a forward whose backward runs outside
            h = h * 2
        return self.b(h)


@pytest.mark.parametrize("backend", ["numpy", "c"], indirect=True)
def test_a_model_with_a_break_and_its_backward_outside_sweeps_sizes_in_two_traces(backend):
    eagerc.manual_seed(0)
    eager = _Gated().double()
    model = copy.deepcopy(eager)
    c = eagerc.compile(model, backend=backend)
    opt_e, opt_c = eagerc.optim.SGD(eager.parameters(), lr=0.1), eagerc.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(4)
    for b in SIZES:
        x, y = eagerc.tensor(rng.standard_normal((b, 6))), eagerc.tensor(rng.integers(0, 4, b))
        for fn, opt in ((eager, opt_e), (c, opt_c)):
            opt.zero_grad()
            loss = F.cross_entropy(_quiet(fn, x), y)
            loss.backward()
            opt.step()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            _close(q.grad, p.grad, f"{name}.grad at batch {b}")
            _close(q, p, f"{name} after batch {b}")
    assert c._compiled.traces == 2
    (e,) = _symbolic(c._compiled)
    assert all(s.leaf.joint is not None for s in e.split.steps() if s.leaf is not None)   # compiled backward


def test_a_training_step_with_a_grad_scaler_sweeps_sizes_in_two_traces():
    """GradScaler: scale(loss).backward(), step() (its inf check reads found_inf: a break), update()."""
    eagerc.manual_seed(0)
    eager = _Net()
    model = copy.deepcopy(eager)

    def make(m):
        return scaled_step(m, eagerc.optim.Adam(m.parameters(), lr=1e-2), init_scale=2.0 ** 10, growth_interval=3)
    (step_e, scaler_e), (step_c, scaler_c) = make(eager), make(model)
    c = eagerc.compile(step_c, backend="numpy")
    rng = np.random.default_rng(5)
    for b in SIZES:
        x = eagerc.tensor(rng.standard_normal((b, 6)).astype(np.float32))
        y = eagerc.tensor(rng.integers(0, 4, b))
        _equal(_quiet(c, x, y), step_e(x, y), f"loss at batch {b}")
        assert scaler_c.get_scale() == scaler_e.get_scale()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            _equal(q, p, f"{name} after batch {b}")
            _equal(q.grad, p.grad, f"{name}.grad (unscaled) after batch {b}")
    assert scaler_e.get_scale() > 2.0 ** 10   # (it grew: the compiled steps updated the scale)
    assert c.traces == 2


def test_dynamic_true_makes_a_split_function_symbolic_from_the_first_call():
    c = eagerc.compile(gated, backend="numpy", dynamic=True)
    rng = np.random.default_rng(6)
    for b in [3] + SIZES:
        x = eagerc.tensor(rng.standard_normal((b, 5)) + 2.0)
        _equal(_quiet(c, x), gated(x), f"batch {b}")
    assert c.traces == 2 + 1   # the first call and its synthetic trace; then size 1, specialised
    (e,) = _symbolic(c)
    assert _paths(e) == 1


def _step_returning_item(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()   # logging: the value leaves the function unread, any value holds


def test_a_training_step_returning_loss_item_sweeps_sizes_in_two_traces():
    eagerc.manual_seed(0)
    eager = _Net().double()
    model = copy.deepcopy(eager)
    opt_e, opt_c = eagerc.optim.Adam(eager.parameters(), lr=1e-2), eagerc.optim.Adam(model.parameters(), lr=1e-2)
    c = eagerc.compile(lambda x, y: _step_returning_item(model, opt_c, x, y), backend="numpy")
    rng = np.random.default_rng(7)
    for b in SIZES + [4] * 6:   # (a new loss every call: never a new path)
        x, y = eagerc.tensor(rng.standard_normal((b, 6))), eagerc.tensor(rng.integers(0, 4, b))
        got, want = _quiet(c, x, y), _step_returning_item(eager, opt_e, x, y)
        assert type(got) is float and got == want, (b, got, want)
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            _equal(q, p, f"{name} after batch {b}")
    assert c.traces == 2
    (e,) = _symbolic(c)
    assert _paths(e) == 1


def _item_then_more(x):
    v = x.sum().item()   # stored, then returned: Python could have used it, so it is exact
    return v


def test_an_item_stored_before_it_is_returned_stays_guarded_on_its_value():
    c = eagerc.compile(_item_then_more, backend="numpy")
    for v in [1.0, 2.0, 1.0]:
        x = eagerc.tensor(np.full((2, 2), v))
        assert _quiet(c, x) == _item_then_more(x) == 4 * v
    (e,) = [e for e in c.entries.values() if e.split is not None]
    assert all(b.exact for s in e.split.steps() for b, _ in s.children)


class _Signed(_Net):
    def forward(self, x):
        h = self.a(x).tanh()
        if x.mean().item() > 0:   # the side depends on the data, at any size
            h = h * 2
        return self.b(h)


def test_a_model_with_a_break_takes_both_sides_with_its_backward_outside():
    eagerc.manual_seed(0)
    eager = _Signed().double()
    model = copy.deepcopy(eager)
    c = eagerc.compile(model, backend="numpy")
    rng = np.random.default_rng(8)
    for k, b in enumerate(list(range(2, 12)) * 2):
        x = eagerc.tensor(rng.standard_normal((b, 6)) * 0.1 + (1.0 if k % 3 else -1.0))
        for fn, m in ((eager, eager), (c, model)):
            m.zero_grad()
            _quiet(fn, x).square().sum().backward()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            _equal(q.grad, p.grad, f"{name}.grad, call {k}, batch {b}")
    (e,) = _symbolic(c._compiled)
    assert _paths(e) == 2 and c._compiled.traces <= 4
