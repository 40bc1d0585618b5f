"""Dynamic shapes for training: a batch-size sweep over a compiled forward that needs autograd
and over a whole compiled training step (forward, loss, backward, optimizer.step) costs one
static trace and one symbolic trace, with every value equal to the same steps run eagerly
(the independent reference): losses, gradients, parameters and optimizer state after each
step. Per backend; c and cuda (on the CPU emulator) run numpy's generic program for a size
until it was called entries.HOT_CALLS times, then a program of their own specialised from the
one symbolic graph."""
import copy

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.compiler import entries
from test_compile_never_silent import BACKENDS, backend  # noqa: F401  (the backend fixture)

FULL = list(range(1, 65))
HOT = [2] + [3] * entries.HOT_CALLS + [4, 64, 64, 64, 5, 3]   # size 3 and 64 get their own programs


def _sizes(backend):
    """The sweep; c and cuda: then sizes called often enough to get programs of their own."""
    return FULL if backend in ("numpy", "interpreter") else FULL + HOT


def _own_programs(cf, backend):
    """Bindings with a program of their own (c and cuda), for every symbolic entry."""
    if backend in ("numpy", "interpreter"):
        return None
    found = set()
    for e in cf.entries.values():
        if e.dynamic is not None:
            found |= set(e.dynamic.programs)
            if e.joint is not None:
                found |= set(e.joint.dynamic[1].programs)
    return found


def _mlp(seed=0):
    eagerc.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4)).double()


def _batch(b, rng, regression=False):
    x = eagerc.tensor(rng.standard_normal((b, 6)))
    y = eagerc.tensor(rng.standard_normal((b, 4))) if regression else eagerc.tensor(rng.integers(0, 4, b))
    return x, y


def _close(a, b, what):
    np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=what)


def _symbolic_lines(cf):
    return [line for line in cf.log if line.startswith("dynamic shapes:")]


# ("cuda" alone as an id would mark the test GPU-only: conftest.py; here it runs on the emulator)
@pytest.mark.parametrize("backend", BACKENDS, indirect=True, ids=[f"{b}_backend" for b in BACKENDS])
def test_forward_with_autograd_sweep_traces_twice(backend):
    """A compiled model whose outputs need a backward: forward and backward programs both
    become symbolic; gradients equal eager's at every size."""
    eager = _mlp()
    model = copy.deepcopy(eager)
    c = eagerc.compile(model, backend=backend)
    rng = np.random.default_rng(0)
    for b in _sizes(backend):
        x, y = _batch(b, rng)
        xe = x.clone().requires_grad_(True)
        xc = x.clone().requires_grad_(True)
        le = F.cross_entropy(eager(xe), y)
        out = c(xc)
        assert out.requires_grad and out.grad_fn is not None, b
        lc = F.cross_entropy(out, y)
        le.backward()
        lc.backward()
        _close(le, lc, f"loss at batch {b}")
        _close(xe.grad, xc.grad, f"input gradient at batch {b}")
        for (n, p), q in zip(eager.named_parameters(), model.parameters()):
            _close(p.grad, q.grad, f"{n}.grad at batch {b}")
        eager.zero_grad()
        model.zero_grad()
    cf = c._compiled
    assert cf.traces == 2, cf.log   # batch 1 (static: sizes 1 are specialised), then the symbolic one
    assert _symbolic_lines(cf) == ["dynamic shapes: Sequential now treats arg 0 dim 0 (s0) as symbolic"]
    sym = next(e for e in cf.entries.values() if e.dynamic is not None)
    assert sym.joint is not None and "f64[s0,6]" in str(sym.joint.forward) and "s0" in str(sym.joint.backward)
    assert _own_programs(cf, backend) in (None, {(3,), (64,)})


def _step(model, opt, loss_fn):
    def step(x, y):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _sgd_twins(eager, **compile_options):
    """(eager module, its compiled twin, eager step, compiled step): SGD lr=0.1, cross-entropy."""
    model = copy.deepcopy(eager)
    opt_e, opt_c = eagerc.optim.SGD(eager.parameters(), lr=0.1), eagerc.optim.SGD(model.parameters(), lr=0.1)
    return (eager, model, _step(eager, opt_e, F.cross_entropy),
            eagerc.compile(_step(model, opt_c, F.cross_entropy), **compile_options))


OPTIMIZERS = {
    "adam": lambda ps: eagerc.optim.Adam(ps, lr=1e-2),
    "sgd_momentum": lambda ps: eagerc.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
}


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("opt_name,loss_fn", [("adam", F.cross_entropy), ("sgd_momentum", F.mse_loss)],
                         ids=["adam_cross_entropy", "sgd_mse"])
def test_training_step_sweep_traces_twice(backend, opt_name, loss_fn):
    """forward + loss + backward + optimizer.step in one compiled function: the parameters,
    their .grad and the optimizer state are static-shaped, the batch is symbolic. mse_loss's
    derivative divides by the element count (4*s0): a size scalar of the symbolic graph."""
    eager = _mlp()
    model = copy.deepcopy(eager)
    opt_e, opt_c = OPTIMIZERS[opt_name](eager.parameters()), OPTIMIZERS[opt_name](model.parameters())
    step_e = _step(eager, opt_e, loss_fn)
    step_c = eagerc.compile(_step(model, opt_c, loss_fn), backend=backend)
    rng = np.random.default_rng(1)
    regression = loss_fn is F.mse_loss
    for b in _sizes(backend):
        x, y = _batch(b, rng, regression)
        _close(step_e(x, y), step_c(x, y), f"loss at batch {b}")
        for (n, p), q in zip(eager.named_parameters(), model.parameters()):
            _close(p, q, f"{n} after the step at batch {b}")
            _close(p.grad, q.grad, f"{n}.grad after the step at batch {b}")
    for p, q in zip(eager.parameters(), model.parameters()):
        se, sc = opt_e.state[p], opt_c.state[q]
        assert se.keys() == sc.keys()
        for k in se:
            _close(se[k], sc[k], f"optimizer state {k}")
    # the optimizer makes its state while the first call is traced (SGD's momentum buffers too):
    # no eager warm-up, one static trace (batch 1) and one symbolic trace
    assert not [line for line in step_c.log if line.startswith("eager call")], step_c.log
    assert step_c.traces == 2, step_c.log
    assert _symbolic_lines(step_c) == ["dynamic shapes: step now treats arg 0 dim 0 (s0), arg 1 dim 0 (s0) "
                                       "as symbolic"]
    sym = next(e for e in step_c.entries.values() if e.dynamic is not None)
    assert sym.graph.mutations and "f64[s0,6]" in str(sym.graph)
    assert _own_programs(step_c, backend) in (None, {(3,), (64,)})


def test_sweep_after_the_optimizer_warmed_up_traces_twice():
    """With the optimizer's state made (one eager step before), the sweep is exactly two traces."""
    model = _mlp()
    opt = eagerc.optim.Adam(model.parameters(), lr=1e-2)
    step = _step(model, opt, F.cross_entropy)
    rng = np.random.default_rng(2)
    step(*_batch(4, rng))
    eager = copy.deepcopy(model)
    opt_e = eagerc.optim.Adam(eager.parameters(), lr=1e-2)
    opt_e.load_state_dict(opt.state_dict())
    step_e = _step(eager, opt_e, F.cross_entropy)
    c = eagerc.compile(step)
    for b in FULL:
        x, y = _batch(b, rng)
        _close(step_e(x, y), c(x, y), f"loss at batch {b}")
    for p, q in zip(eager.parameters(), model.parameters()):
        _close(p, q, "parameter after the sweep")
    assert c.traces == 2, c.log


def test_dynamic_true_makes_a_training_step_symbolic_from_the_first_traced_call():
    eager = _mlp()
    model = copy.deepcopy(eager)
    opt_e, opt_c = eagerc.optim.Adam(eager.parameters(), lr=1e-2), eagerc.optim.Adam(model.parameters(), lr=1e-2)
    step_e, step_c = _step(eager, opt_e, F.cross_entropy), eagerc.compile(_step(model, opt_c, F.cross_entropy),
                                                                          dynamic=True)
    rng = np.random.default_rng(3)
    for b in [8, 8, 3, 17, 64, 2]:
        x, y = _batch(b, rng)
        _close(step_e(x, y), step_c(x, y), f"loss at batch {b}")
    for p, q in zip(eager.parameters(), model.parameters()):
        _close(p, q, "parameter after the steps")
    # the first call (Adam's state made while traced), the synthetic trace right after it
    assert step_c.traces == 2, step_c.log
    assert any("now treats" in line for line in step_c.log)


class RunningCount(nn.Module):
    """Counts the samples it has seen in a buffer: `seen += B` is a size used as a number in
    an in-place update -- the symbolic graph carries it as a size scalar."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 4).double()
        self.register_buffer("seen", eagerc.zeros((), dtype=eagerc.float64))

    def forward(self, x):
        self.seen.add_(x.shape[0])
        return self.lin(x)


def test_a_buffer_updated_with_the_batch_size_follows_every_size():
    eagerc.manual_seed(0)
    eager, model, step_e, step_c = _sgd_twins(RunningCount())
    rng = np.random.default_rng(4)
    total = 0
    for b in FULL[:20]:
        x, y = _batch(b, rng)
        _close(step_e(x, y), step_c(x, y), f"loss at batch {b}")
        total += b
        assert model.seen.item() == eager.seen.item() == total
    assert step_c.traces == 2, step_c.log   # SGD without momentum makes no state: no warm-up


class HalfBatch(nn.Module):
    """Pairs up samples with `B // 2` (floor division of a size is no size expression; the odd
    synthetic batch cannot even be paired), so this model stays static: a retrace per size,
    every one right."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(12, 4).double()

    def forward(self, x):
        return self.lin(x.reshape(x.shape[0] // 2, 12))


def test_a_batch_dependence_sizes_cannot_express_stays_static_and_right():
    eagerc.manual_seed(0)
    eager, model, step_e, step_c = _sgd_twins(HalfBatch())
    rng = np.random.default_rng(5)
    for b in [2, 4, 6, 8, 10]:
        x = eagerc.tensor(rng.standard_normal((2 * b, 6)))
        y = eagerc.tensor(rng.integers(0, 4, b))
        for call in ("trace", "program"):             # a new size traces (eager's step), then runs its program
            _close(step_e(x, y), step_c(x, y), f"loss at batch {b} ({call})")
            for p, q in zip(eager.parameters(), model.parameters()):
                _close(p, q, f"parameter after the step at batch {b} ({call})")
    assert any("stays static" in line for line in step_c.log), step_c.log
    assert step_c.traces == 6   # one per size, and the synthetic trace that failed


def test_a_size_branch_in_a_training_step_is_a_guard():
    """Python compares the batch size: the symbolic graph is guarded on it, and a call on the
    other side of the comparison gets its own graph -- never the wrong branch."""
    eagerc.manual_seed(0)
    eager = _mlp()
    model = copy.deepcopy(eager)

    def make(m, opt):
        def step(x, y):
            out = m(x)
            if x.shape[0] > 16:   # big batches: a smaller loss scale
                out = out * 0.5
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach()
        return step
    opt_e, opt_c = eagerc.optim.SGD(eager.parameters(), lr=0.1), eagerc.optim.SGD(model.parameters(), lr=0.1)
    step_e, step_c = make(eager, opt_e), eagerc.compile(make(model, opt_c))
    rng = np.random.default_rng(6)
    for b in [3, 4, 5, 20, 21, 6, 40, 2]:
        x, y = _batch(b, rng)
        _close(step_e(x, y), step_c(x, y), f"loss at batch {b}")
        for p, q in zip(eager.parameters(), model.parameters()):
            _close(p, q, f"parameter after the step at batch {b}")
    assert any("where not (s0 > 16)" in line for line in step_c.log), step_c.log
    assert step_c.traces <= 4, step_c.log
