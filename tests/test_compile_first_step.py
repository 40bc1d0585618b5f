"""A compiled training step from a fresh optimizer: its first step makes the optimizer's state
while it is traced, as the eager first step does (`_init_state`, then the general rule:
Optimizer._traced_step), so the first call is already a traced call whose graph reads that
state by reference at every later call. The reference is the same model and optimizer run
eagerly: losses, parameters and optimizer state (its state_dict) after every step, the
first included. SGD with momentum is the exception (its first step copies the gradient into
the buffer): its first step still runs eagerly and the next call traces."""
import copy

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from test_compile_dynamic_training import _batch, _mlp, _step
from test_compile_never_silent import backend  # noqa: F401  (the backend fixture)

BACKENDS = ["numpy", "interpreter", "c"]

TRACED_FIRST = {
    "adam": lambda ps: eagerc.optim.Adam(ps, lr=1e-2),
    "adamw_amsgrad": lambda ps: eagerc.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, amsgrad=True),
    "rmsprop_centered_momentum": lambda ps: eagerc.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True,
                                                                 weight_decay=1e-3),
}


def _same(a, b, backend, what):
    """Bit-equal on numpy and the interpreter; backend c's fused float64 kernels (tanh, the
    softmax) round a few last bits differently from numpy, so there the tests' usual rtol."""
    a, b = a.detach().numpy(), b.detach().numpy()
    if backend == "c":
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12, err_msg=what)
    else:
        np.testing.assert_array_equal(b, a, err_msg=what)


def _same_state(opt_e, opt_c, backend, when):
    """The optimizers' state_dicts agree: options, parameter indices, state keys, dtypes, values."""
    se, sc = opt_e.state_dict(), opt_c.state_dict()
    assert sc["param_groups"] == se["param_groups"], when
    assert list(sc["state"]) == list(se["state"]), when
    for i, state in se["state"].items():
        assert list(sc["state"][i]) == list(state), when
        for k, v in state.items():
            w = sc["state"][i][k]
            assert (w.dtype, w.shape) == (v.dtype, v.shape), f"state[{i}][{k!r}] {when}"
            _same(v, w, backend, f"state[{i}][{k!r}] {when}")


def _twins(make_opt, **compile_options):
    eager = _mlp()
    model = copy.deepcopy(eager)
    opt_e, opt_c = make_opt(eager.parameters()), make_opt(model.parameters())
    return (eager, model, opt_e, opt_c, _step(eager, opt_e, F.cross_entropy),
            eagerc.compile(_step(model, opt_c, F.cross_entropy), **compile_options))


def _eager_calls(cf):
    return [line for line in cf.log if line.startswith("eager call")]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("name", list(TRACED_FIRST))
def test_first_call_is_traced_and_every_step_matches_eager(backend, name):
    """fullgraph=True: the first step is no graph break. After it the state made while traced
    is what the graph reads by reference (its inputs) and updates (its mutation outputs); an
    lr change is read live; load_state_dict replaces the state tensors (one retrace) and the
    steps go on matching."""
    eager, model, opt_e, opt_c, step_e, step_c = _twins(TRACED_FIRST[name], backend=backend, fullgraph=True)
    rng = np.random.default_rng(0)
    for i in range(6):
        x, y = _batch(4, rng)
        _same(step_e(x, y), step_c(x, y), backend, f"loss at step {i}")
        for (n, p), q in zip(eager.named_parameters(), model.parameters()):
            _same(p, q, backend, f"{n} after step {i}")
        _same_state(opt_e, opt_c, backend, f"after step {i}")
        if i == 0:
            assert step_c.traces == 1 and not _eager_calls(step_c), step_c.log
            entry, = step_c.entries.values()
            assert not entry.eager
            inputs = {id(t): n for n, t in entry.externals.items()}
            mutated = {target for target, _ in entry.graph.mutations}
            for q in model.parameters():
                for k, t in opt_c.state[q].items():
                    assert inputs.get(id(t)) in mutated, (k, inputs.get(id(t)), sorted(mutated))
        if i == 2:
            for opt in (opt_e, opt_c):
                opt.param_groups[0]["lr"] *= 0.5
        if i == 3:
            opt_c.load_state_dict(opt_e.state_dict())
    assert step_c.traces == 2, step_c.log   # the first call, and again after load_state_dict
    assert "load_state_dict" in step_c.log[-1]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("name", list(TRACED_FIRST))
def test_batch_sweep_from_a_fresh_optimizer_traces_twice(backend, name):
    """Batch sizes 1..12: one static trace (batch 1, the optimizer's first step inside it) and
    one symbolic trace, whatever the size after."""
    eager, model, opt_e, opt_c, step_e, step_c = _twins(TRACED_FIRST[name], backend=backend)
    rng = np.random.default_rng(1)
    for b in list(range(1, 13)) + [3, 3, 3, 3]:   # c: size 3 then gets a program of its own
        x, y = _batch(b, rng)
        _same(step_e(x, y), step_c(x, y), backend, f"loss at batch {b}")
        for (n, p), q in zip(eager.named_parameters(), model.parameters()):
            _same(p, q, backend, f"{n} after the step at batch {b}")
    _same_state(opt_e, opt_c, backend, "after the sweep")
    assert step_c.traces == 2 and not _eager_calls(step_c), step_c.log
    assert any(e.dynamic is not None for e in step_c.entries.values()), step_c.log


def test_a_parameter_first_updated_by_a_later_trace_gets_its_state_there():
    """A parameter without a gradient at the first call has no state (as eagerly); when a later
    call (another key: another trace) updates it, that trace makes its state, the others' kept."""
    eagerc.manual_seed(0)
    eager = nn.ModuleDict({"body": nn.Linear(6, 4), "extra": nn.Linear(4, 4)}).double()
    model = copy.deepcopy(eager)
    opt_e, opt_c = eagerc.optim.Adam(eager.parameters(), lr=1e-2), eagerc.optim.Adam(model.parameters(), lr=1e-2)

    def make(m, opt):
        def step(x, y, extra):
            h = m["body"](x)
            if extra:
                h = m["extra"](h)
            loss = F.cross_entropy(h, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach()
        return step
    step_e, step_c = make(eager, opt_e), eagerc.compile(make(model, opt_c), backend="numpy")
    rng = np.random.default_rng(2)
    for i, extra in enumerate([False, False, True, True, False, True]):
        x, y = _batch(5, rng)
        _same(step_e(x, y, extra), step_c(x, y, extra), "numpy", f"loss at step {i}")
        for (n, p), q in zip(eager.named_parameters(), model.parameters()):
            _same(p, q, "numpy", f"{n} after step {i}")
        _same_state(opt_e, opt_c, "numpy", f"after step {i}")
        if i == 1:
            assert not opt_c.state[model["extra"].weight]
    assert not _eager_calls(step_c), step_c.log


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_sgd_with_dampening_makes_its_first_step_eagerly(backend):
    """SGD's first step sets the momentum buffer to the (weight-decayed) gradient itself, not
    (1 - dampening) times it: that step runs eagerly (logged), the next call traces, and the
    sweep costs one trace more than Adam's. Every step matches eager."""
    def make(ps):
        return eagerc.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5, weight_decay=1e-3)
    eager, model, opt_e, opt_c, step_e, step_c = _twins(make, backend=backend)
    rng = np.random.default_rng(3)
    for i, b in enumerate(range(1, 9)):
        before = [q.detach().numpy().copy() for q in model.parameters()]
        x, y = _batch(b, rng)
        _same(step_e(x, y), step_c(x, y), backend, f"loss at batch {b}")
        for (n, p), q in zip(eager.named_parameters(), model.parameters()):
            _same(p, q, backend, f"{n} after the step at batch {b}")
        _same_state(opt_e, opt_c, backend, f"after the step at batch {b}")
        if i == 0:  # by hand: buffer = g + weight_decay * p, undamped
            for q, p0 in zip(model.parameters(), before):
                np.testing.assert_array_equal(opt_c.state[q]["momentum_buffer"].numpy(),
                                              q.grad.numpy() + 1e-3 * p0)
    eager_calls = _eager_calls(step_c)
    assert len(eager_calls) == 1 and "SGD.step creates its state" in eager_calls[0], step_c.log
    assert step_c.traces == 3, step_c.log   # the eager first step, batch 2 static, then symbolic
