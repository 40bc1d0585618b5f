"""A traced optimizer step records a param group's step count, and the scalars derived from it
(bias corrections...), once when the group's updated parameters all have the same step
(optim/rules.py TensorOps.step), and guards.py checks at every call that they still do.

The reference is always eager mode: the same model and optimizer stepped without compile,
compared bit for bit (parameters, every state tensor, state_dict()'s steps)."""
import numpy as np
import pytest

import eagerc
from eagerc import optim
from eagerc.optim import rules
from test_optim import mse_step


def _model(dtype):
    eagerc.manual_seed(0)
    m = eagerc.nn.Sequential(eagerc.nn.Linear(4, 8), eagerc.nn.Tanh(), eagerc.nn.Linear(8, 8), eagerc.nn.Tanh(),
                             eagerc.nn.Linear(8, 2))
    return m.double() if dtype == "float64" else m


def _groups(model, split):
    params = list(model.parameters())
    if not split:
        return params
    return [{"params": params[:3]}, {"params": params[3:], "lr": 5e-3}]


def _pair(name, kwargs, dtype="float32", split=False, backend="numpy"):
    """(eager step, compiled step, eager model, compiled model, eager optimizer, compiled one)."""
    models = [_model(dtype), _model(dtype)]
    opts = [getattr(optim, name)(_groups(m, split), **kwargs) for m in models]
    compiled = eagerc.compile(lambda x, y: mse_step(models[1], opts[1], x, y), backend=backend, fullgraph=True)
    return (lambda x, y: mse_step(models[0], opts[0], x, y)), compiled, models, opts


def _data(i, dtype="float32"):
    rng = np.random.default_rng(i)
    return (eagerc.tensor(rng.standard_normal((5, 4)).astype(dtype)),
            eagerc.tensor(rng.standard_normal((5, 2)).astype(dtype)))


def _assert_same(models, opts, exact=True):
    """Parameters and state equal eager's (bit for bit unless not `exact`: backend c's float32
    kernels round differently from numpy's); the step counts always exactly."""
    same = np.testing.assert_array_equal if exact else (lambda a, b, err_msg="": np.testing.assert_allclose(
        a, b, rtol=1e-4, atol=1e-6, err_msg=err_msg))
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        same(q.detach().numpy(), p.detach().numpy())
        assert opts[0].state[p].keys() == opts[1].state[q].keys()
        for k, v in opts[0].state[p].items():
            same(opts[1].state[q][k].numpy(), v.numpy(), err_msg=k)
    a, b = opts[0].state_dict()["state"], opts[1].state_dict()["state"]
    assert a.keys() == b.keys()
    for i in a:
        assert float(b[i]["step"]) == float(a[i]["step"]), i


def _pows(compiled):
    """The optimizer's pow nodes (an option ** step) in the traced graph of the (only) compiled
    specialisation."""
    (entry,) = compiled.entries.values()
    return sum(n.op == "pow" and getattr(n.inputs[0], "name", "").startswith("optimizer")
               for n in entry.traced.nodes)


STEPPED = [("Adam", dict(lr=1e-2, amsgrad=True)), ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
           ("NAdam", dict(lr=1e-2)), ("RAdam", dict(lr=1e-2, betas=(0.9, 0.9))),
           ("RMSprop", dict(lr=1e-2, momentum=0.5)), ("Adamax", dict(lr=1e-2)),
           ("Adagrad", dict(lr=0.1, lr_decay=0.01)), ("Adadelta", dict()), ("ASGD", dict(lr=0.05, t0=3)),
           ("Rprop", dict())]


@pytest.mark.parametrize("name,kwargs", STEPPED, ids=[c[0] for c in STEPPED])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_shared_step_gives_the_eager_bits(name, kwargs, dtype):
    """Eight compiled steps (two param groups, alike parameters replayed) equal eager's to the
    last bit, with one trace: the step count is shared from the first call on."""
    eager, compiled, models, opts = _pair(name, kwargs, dtype, split=True)
    for i in range(8):
        x, y = _data(i, dtype)
        assert eager(x, y).item() == compiled(x, y).item(), i
    _assert_same(models, opts)
    assert compiled.traces == 1, compiled.log
    guards = " ".join(next(iter(compiled.entries.values())).guards.describe())
    assert guards.count("step counts of") == 2, guards   # one shared count per param group


@pytest.mark.parametrize("replay", [True, False])
def test_adam_records_its_step_scalars_once_per_group(replay, monkeypatch):
    """Adam's two pow nodes (beta1**t, beta2**t) appear once per param group, not per
    parameter, with and without replaying alike parameters' updates."""
    monkeypatch.setattr(rules, "REPLAY", replay)
    _, compiled, models, _ = _pair("Adam", dict(lr=1e-2), split=True)
    compiled(*_data(0))
    compiled(*_data(1))
    assert len(list(models[1].parameters())) == 6
    assert _pows(compiled) == 2 * 2
    (entry,) = compiled.entries.values()
    adds = [n.out.name for n in entry.traced.nodes if n.op == "add" and n.out.shape == ()]
    assert len(adds) == 2   # one increment per group ...
    written = [name for name, v in entry.traced.mutations if v.name in adds]
    assert len(written) == 6 == len(set(written))   # ... written into every parameter's own step


def test_unequal_steps_at_trace_time_record_each_parameter():
    """A parameter that missed eager steps (no gradient) has a smaller step: the trace then
    records every parameter's own count (2 pows each for Adam), and results stay eager's."""
    eager, compiled, models, opts = _pair("Adam", dict(lr=1e-2))
    for model, opt in zip(models, opts):      # two eager steps with the last layer frozen
        last = list(model.parameters())[-2:]
        for _ in range(2):
            x, y = _data(9)
            for p in last:
                p.requires_grad_(False)
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            for p in last:
                p.requires_grad_(True)
    steps = [float(opts[1].state[p]["step"]) for p in models[1].parameters() if p in opts[1].state]
    assert steps == [2.0] * 4
    for i in range(4):
        x, y = _data(i)
        assert eager(x, y).item() == compiled(x, y).item(), i
    _assert_same(models, opts)
    assert _pows(compiled) == 2 * 6
    assert compiled.traces == 1


def _make_unequal_by_hand(models, opts):
    for m, o in zip(models, opts):
        o.state[list(m.parameters())[1]]["step"].fill_(7.0)


def _make_unequal_by_loading(models, opts):
    """load_state_dict from another optimizer whose parameters have other step counts."""
    for m, o in zip(models, opts):
        other = _model("float32")
        donor = optim.Adam(other.parameters(), lr=1e-2)
        for i, p in enumerate(other.parameters()):
            if i % 2:
                continue
            p.grad = eagerc.ones_like(p)
        donor.step()
        donor.step()
        for p in other.parameters():
            p.grad = eagerc.ones_like(p)
        donor.step()
        o.load_state_dict(donor.state_dict())


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("make_unequal", [_make_unequal_by_hand, _make_unequal_by_loading])
def test_steps_made_unequal_between_calls_retrace(make_unequal, backend):
    """Steps that stop being equal between compiled calls (a step set by hand, in place: the
    very tensor the graph reads; or load_state_dict) fail the guard: the next call retraces
    in the per-parameter form, and every step stays eager's, bit for bit (the values too on
    the numpy backend; backend c's float32 kernels round differently, also without this)."""
    exact = backend == "numpy"
    if not exact:
        from eagerc.runtime.kernels import eager as c_rows
        if not c_rows.enabled():
            pytest.skip("no C compiler")
    eager, compiled, models, opts = _pair("Adam", dict(lr=1e-2), backend=backend)

    def same(x, y):
        a, b = eager(x, y).item(), compiled(x, y).item()
        assert a == b if exact else a == pytest.approx(b, rel=1e-5)
    for i in range(2):
        same(*_data(i))
    assert _pows(compiled) == 2
    make_unequal(models, opts)
    steps = {float(s["step"]) for s in opts[1].state.values()}
    assert len(steps) > 1, steps
    for i in range(2, 6):
        same(*_data(i))
    _assert_same(models, opts, exact)
    assert compiled.traces == 2, compiled.log
    assert "step counts" in compiled.log[-1] or "load_state_dict" in compiled.log[-1], compiled.log
    assert _pows(compiled) == 2 * 6


def test_steps_equal_again_after_eager_steps():
    """Eager steps between compiled calls (all parameters stepped) keep the counts equal: no
    retrace, and the compiled steps continue from the eager counts."""
    eager, compiled, models, opts = _pair("NAdam", dict(lr=1e-2))
    compiled(*_data(0)), eager(*_data(0))
    for i in range(1, 3):   # the "compiled" model's optimizer stepped eagerly too
        x, y = _data(i)
        mse_step(models[1], opts[1], x, y)
        eager(x, y)
    for i in range(3, 5):
        x, y = _data(i)
        assert eager(x, y).item() == compiled(x, y).item()
    _assert_same(models, opts)
    assert [float(s["step"]) for s in opts[1].state_dict()["state"].values()] == [5.0] * 6
    assert compiled.traces == 1, compiled.log


def test_steps_equal_is_exact():
    """The guard's test: equal values (not identity), NaN never equal."""
    t = [eagerc.tensor(3.0), eagerc.tensor(3.0)]
    assert rules.steps_equal(t)
    t[1].fill_(4.0)
    assert not rules.steps_equal(t)
    assert not rules.steps_equal([eagerc.tensor(float("nan")), eagerc.tensor(float("nan"))])


def test_an_external_overwritten_before_any_read_is_written_by_compiled_calls():
    """copy_ into a tensor the function never read (the shared step's write into each
    parameter's step is one) is a mutation output: compiled calls write it too."""
    buf = eagerc.zeros(3)

    def f(x):
        buf.copy_(x * 2)
        return x + 1

    c = eagerc.compile(f, backend="numpy")
    c(eagerc.ones(3))
    np.testing.assert_array_equal(buf.numpy(), [2.0, 2.0, 2.0])
    c(eagerc.full((3,), 5.0))
    np.testing.assert_array_equal(buf.numpy(), [10.0, 10.0, 10.0])
