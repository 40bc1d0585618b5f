"""A compiled training step from a fresh optimizer: its first step makes the optimizer's state
while it is traced, as the eager first step does (`_init_state`, then the general rule:
Optimizer._traced_step), so the first call is already a traced call whose graph reads that
state by reference at every later call. The reference is the same model and optimizer run
eagerly: losses, parameters and optimizer state (its state_dict) after every step, the
first included. SGD with momentum's first step copies the gradient into the buffer: traced, the
buffer is made zero, the graph records the general rule (what every later call runs) and the
traced call itself sets the buffer to the gradient, so it traces once too, with the first step's
buffer the gradient bit for bit (-0.0, inf and nan included)."""
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


@pytest.mark.parametrize("name", ["adam", "sgd_momentum"])
def test_a_parameter_first_updated_by_a_later_trace_gets_its_state_there(name):
    """A parameter without a gradient at the first call has no state (as eagerly); when a later
    call (another key: another trace) updates it, that trace makes its state, the others' kept
    (SGD: the late parameter's buffer is that step's gradient, the others' go on)."""
    make_opt = {"adam": lambda ps: eagerc.optim.Adam(ps, lr=1e-2),
                "sgd_momentum": lambda ps: eagerc.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5)}[name]
    eagerc.manual_seed(0)
    eager = nn.ModuleDict({"body": nn.Linear(6, 4), "extra": nn.Linear(4, 4)}).double()
    model = copy.deepcopy(eager)
    opt_e, opt_c = make_opt(eager.parameters()), make_opt(model.parameters())

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
        w = model["extra"].weight
        if i == 1:
            assert not opt_c.state[w]
        if i == 2 and name == "sgd_momentum":
            np.testing.assert_array_equal(opt_c.state[w]["momentum_buffer"].numpy(), w.grad.numpy())
    assert not _eager_calls(step_c), step_c.log


SGD_VARIANTS = {
    "momentum": dict(momentum=0.9),
    "dampening_weight_decay": dict(momentum=0.9, dampening=0.5, weight_decay=1e-3),
    "nesterov_weight_decay": dict(momentum=0.8, nesterov=True, weight_decay=1e-2),
    "maximize_dampening": dict(momentum=0.7, dampening=0.25, weight_decay=1e-3, maximize=True),
}


def _sgd_by_hand(p, g, buf, lr, momentum, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
    """PyTorch's SGD step in float64 numpy (torch/optim/sgd.py, _single_tensor_sgd): (p, buf)."""
    g = -g if maximize else g
    g = g + weight_decay * p
    buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
    g = g + momentum * buf if nesterov else buf
    return p - lr * g, buf


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("name", list(SGD_VARIANTS))
def test_sgd_momentum_first_call_is_traced_and_every_step_matches(backend, name):
    """A batch sweep from a fresh SGD: the first step (buffer = the decayed, maximize-negated
    gradient, undamped) is traced, the sweep costs two traces and no eager call; every step is
    eager's bit for bit (backend c: the file's tolerance) and PyTorch's formula in float64 numpy.
    The graph traced at the first step is the general rule: the same program as one traced
    after an eager first step."""
    options = SGD_VARIANTS[name]

    def make(ps):
        return eagerc.optim.SGD(ps, lr=0.1, **options)
    eager, model, opt_e, opt_c, step_e, step_c = _twins(make, backend=backend)
    rng = np.random.default_rng(3)
    bufs = [None] * len(list(model.parameters()))
    for b in range(1, 9):
        before = [q.detach().numpy().copy() for q in model.parameters()]
        x, y = _batch(b, rng)
        _same(step_e(x, y), step_c(x, y), backend, f"loss at batch {b}")
        for (n, p), q in zip(eager.named_parameters(), model.parameters()):
            _same(p, q, backend, f"{n} after the step at batch {b}")
        _same_state(opt_e, opt_c, backend, f"after the step at batch {b}")
        for k, (q, p0) in enumerate(zip(model.parameters(), before)):
            want_p, bufs[k] = _sgd_by_hand(p0, q.grad.numpy(), bufs[k], 0.1, **options)
            np.testing.assert_allclose(opt_c.state[q]["momentum_buffer"].numpy(), bufs[k], rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(q.detach().numpy(), want_p, rtol=1e-12, atol=1e-15)
        if b == 1:
            assert step_c.traces == 1 and not step_c.entries[next(iter(step_c.entries))].eager, step_c.log
    assert step_c.traces == 2 and not _eager_calls(step_c), step_c.log
    assert any(e.dynamic is not None for e in step_c.entries.values()), step_c.log
    warm = _mlp()
    opt_w = make(warm.parameters())
    step_w = _step(warm, opt_w, F.cross_entropy)
    x, y = _batch(1, np.random.default_rng(3))
    step_w(x, y)                     # an eager first step makes the buffers
    step_w = eagerc.compile(step_w, backend=backend)
    step_w(x, y)
    first_graph = next(e.traced for e in step_c.entries.values() if e.dynamic is None and not e.eager)
    # (the same lines; the .grad write-backs are listed in another order when .grad existed)
    assert sorted(str(step_w.traced_graphs[0]).splitlines()) == sorted(str(first_graph).splitlines())


def _bits(a):
    """An array's values with their signs and NaNs: what `==` alone does not compare."""
    a = np.asarray(a)
    return np.where(np.isnan(a), 0.0, a).tolist(), np.signbit(a).tolist(), np.isnan(a).tolist()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dampening", [0.0, 0.5])
def test_sgd_first_step_buffer_is_the_gradient_bit_for_bit(backend, dampening):
    """The traced first step's buffer is g itself, where the general rule on a zero buffer would
    give 0.0 for g = -0.0 (0 * momentum + g) and g / 2 with dampening 0.5: gradients -0.0, inf,
    -inf, nan, a subnormal and ordinary values, set by hand through a loss whose gradient is
    them. Later steps (the same graph, its first-step input false) match eager too."""
    c = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 5e-324, -3.0, 0.1])
    twins = []
    for compiled in (False, True):
        w = nn.Parameter(eagerc.from_numpy(np.linspace(-1, 1, c.size)))
        opt = eagerc.optim.SGD([w], lr=0.5, momentum=0.9, dampening=dampening)
        k = eagerc.from_numpy(c)

        def step(w=w, opt=opt, k=k):
            opt.zero_grad()
            loss = (w * k).sum()
            loss.backward()
            opt.step()
            return loss.detach()
        twins.append((w, opt, eagerc.compile(step, backend=backend) if compiled else step))
    (w_e, opt_e, step_e), (w_c, opt_c, step_c) = twins
    for i in range(3):
        step_e(), step_c()
        assert _bits(w_c.grad.numpy()) == _bits(c)
        if i == 0:
            assert _bits(opt_c.state[w_c]["momentum_buffer"].numpy()) == _bits(c)
        for what, a, b in (("momentum_buffer", opt_e.state[w_e]["momentum_buffer"], opt_c.state[w_c]["momentum_buffer"]),
                           ("w", w_e, w_c)):
            assert _bits(b.detach().numpy()) == _bits(a.detach().numpy()), f"{what} after step {i}"
    assert step_c.traces == 1 and not _eager_calls(step_c), step_c.log


@pytest.mark.parametrize("backend", ["numpy", "c"], indirect=True)
def test_two_sgd_steps_in_one_call_from_a_fresh_optimizer(backend):
    """One call stepping a fresh SGD twice: while traced, its first step sets the buffers to
    the gradient and its second follows the general rule; compiled calls run both generally."""
    def make(m, opt):
        def step(x, y):
            for _ in range(2):
                opt.zero_grad()
                F.cross_entropy(m(x), y).backward()
                opt.step()
        return step
    eager = _mlp()
    model = copy.deepcopy(eager)
    opt_e = eagerc.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9, dampening=0.3)
    opt_c = eagerc.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, dampening=0.3)
    step_e, step_c = make(eager, opt_e), eagerc.compile(make(model, opt_c), backend=backend)
    rng = np.random.default_rng(4)
    for i in range(3):
        x, y = _batch(5, rng)
        step_e(x, y), step_c(x, y)
        for (n, p), q in zip(eager.named_parameters(), model.parameters()):
            _same(p, q, backend, f"{n} after call {i}")
        _same_state(opt_e, opt_c, backend, f"after call {i}")
    assert step_c.traces == 1 and not _eager_calls(step_c), step_c.log


@pytest.mark.parametrize("name", list(SGD_VARIANTS))
def test_compiled_sgd_sweep_matches_torch(name):
    """The compiled sweep's parameters against torch.optim.SGD on the same gradients (float64)."""
    torch = pytest.importorskip("torch")
    options = SGD_VARIANTS[name]
    model = _mlp()
    opt = eagerc.optim.SGD(model.parameters(), lr=0.1, **options)
    step = eagerc.compile(_step(model, opt, F.cross_entropy), backend="numpy")
    theirs = [torch.tensor(p.detach().numpy().copy(), requires_grad=True) for p in model.parameters()]
    topt = torch.optim.SGD(theirs, lr=0.1, **options)
    rng = np.random.default_rng(5)
    for b in range(1, 7):
        x, y = _batch(b, rng)
        step(x, y)
        for t, q in zip(theirs, model.parameters()):
            t.grad = torch.from_numpy(q.grad.numpy().copy())
        topt.step()
        for t, q in zip(theirs, model.parameters()):
            np.testing.assert_allclose(q.detach().numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-15,
                                       err_msg=f"after batch {b}")
    assert step.traces == 2, step.log
