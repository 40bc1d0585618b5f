"""Optimizers vs hand-written numpy references (PyTorch's documented update rules),
state dicts, param groups, and the in-place contract of updates."""
import copy
import math

import numpy as np
import pytest

import eagerc
from eagerc import optim
from eagerc.serialization import load, save

SHAPES = [(3, 4), (5,), (2, 2, 2)]
STEPS = 6


def _init(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in SHAPES]


def _grads(seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(STEPS)]


# ---------------------------------------------------------------- references (float64 numpy)

def ref_sgd(ps, gs, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, maximize=False):
    ps = [p.copy() for p in ps]
    bufs = [None] * len(ps)
    for step in gs:
        for i, g in enumerate(step):
            g = -g if maximize else g
            if weight_decay:
                g = g + weight_decay * ps[i]
            if momentum:
                bufs[i] = g.copy() if bufs[i] is None else momentum * bufs[i] + (1 - dampening) * g
                g = g + momentum * bufs[i] if nesterov else bufs[i]
            ps[i] = ps[i] - lr * g
    return ps


def ref_adam(ps, gs, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, maximize=False,
             decoupled=False):
    b1, b2 = betas
    ps = [p.copy() for p in ps]
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    vmax = [np.zeros_like(p) for p in ps]
    for t, step in enumerate(gs, 1):
        for i, g in enumerate(step):
            g = -g if maximize else g
            if decoupled:
                ps[i] = ps[i] * (1 - lr * weight_decay)
            elif weight_decay:
                g = g + weight_decay * ps[i]
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            vv = v[i]
            if amsgrad:
                vmax[i] = np.maximum(vmax[i], v[i])
                vv = vmax[i]
            mhat = m[i] / (1 - b1 ** t)
            vhat = vv / (1 - b2 ** t)
            ps[i] = ps[i] - lr * mhat / (np.sqrt(vhat) + eps)
    return ps


def ref_adamw(ps, gs, weight_decay=1e-2, **kw):
    return ref_adam(ps, gs, weight_decay=weight_decay, decoupled=True, **kw)


def ref_rmsprop(ps, gs, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False, maximize=False):
    ps = [p.copy() for p in ps]
    sq = [np.zeros_like(p) for p in ps]
    ga = [np.zeros_like(p) for p in ps]
    buf = [np.zeros_like(p) for p in ps]
    for step in gs:
        for i, g in enumerate(step):
            g = -g if maximize else g
            if weight_decay:
                g = g + weight_decay * ps[i]
            sq[i] = alpha * sq[i] + (1 - alpha) * g * g
            avg = sq[i]
            if centered:
                ga[i] = alpha * ga[i] + (1 - alpha) * g
                avg = avg - ga[i] ** 2
            r = np.sqrt(avg) + eps
            if momentum > 0:
                buf[i] = momentum * buf[i] + g / r
                ps[i] = ps[i] - lr * buf[i]
            else:
                ps[i] = ps[i] - lr * g / r
    return ps


def ref_adagrad(ps, gs, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                maximize=False):
    ps = [p.copy() for p in ps]
    s = [np.full_like(p, initial_accumulator_value) for p in ps]
    for t, step in enumerate(gs, 1):
        for i, g in enumerate(step):
            g = -g if maximize else g
            if weight_decay:
                g = g + weight_decay * ps[i]
            clr = lr / (1 + (t - 1) * lr_decay)
            s[i] = s[i] + g * g
            ps[i] = ps[i] - clr * g / (np.sqrt(s[i]) + eps)
    return ps


CASES = [
    ("SGD", ref_sgd, dict(lr=0.1)),
    ("SGD", ref_sgd, dict(lr=0.1, weight_decay=0.05)),
    ("SGD", ref_sgd, dict(lr=0.1, momentum=0.9)),
    ("SGD", ref_sgd, dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.01)),
    ("SGD", ref_sgd, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("SGD", ref_sgd, dict(lr=0.05, momentum=0.5, maximize=True)),
    ("Adam", ref_adam, dict()),
    ("Adam", ref_adam, dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("Adam", ref_adam, dict(lr=0.01, amsgrad=True)),
    ("Adam", ref_adam, dict(lr=0.01, amsgrad=True, weight_decay=0.05, maximize=True)),
    ("AdamW", ref_adamw, dict(lr=0.01)),
    ("AdamW", ref_adamw, dict(lr=0.01, weight_decay=0.3, amsgrad=True)),
    ("RMSprop", ref_rmsprop, dict()),
    ("RMSprop", ref_rmsprop, dict(lr=0.01, centered=True)),
    ("RMSprop", ref_rmsprop, dict(lr=0.01, momentum=0.9)),
    ("RMSprop", ref_rmsprop, dict(lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.1, maximize=True)),
    ("Adagrad", ref_adagrad, dict()),
    ("Adagrad", ref_adagrad, dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.5)),
]


def _run(name, kwargs, inits, grads, dtype=eagerc.float64):
    params = [eagerc.tensor(p, dtype=dtype, requires_grad=True) for p in inits]
    opt = getattr(optim, name)(params, **kwargs)
    for step in grads:
        for p, g in zip(params, step):
            p.grad = eagerc.tensor(g, dtype=dtype)
        opt.step()
    return params, opt


@pytest.mark.parametrize("name,ref,kwargs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matches_reference(name, ref, kwargs):
    inits, grads = _init(), _grads()
    params, _ = _run(name, kwargs, inits, grads)
    expected = ref(inits, grads, **kwargs)
    for p, e in zip(params, expected):
        np.testing.assert_allclose(p.detach().numpy(), e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,ref,kwargs", [CASES[4], CASES[9], CASES[15], CASES[17]],
                         ids=["SGD", "Adam", "RMSprop", "Adagrad"])
def test_float32_params_stay_float32(name, ref, kwargs):
    inits, grads = _init(), _grads()
    params, opt = _run(name, kwargs, inits, grads, dtype=eagerc.float32)
    expected = ref(inits, grads, **kwargs)
    for p, e in zip(params, expected):
        assert p.dtype == eagerc.float32
        np.testing.assert_allclose(p.detach().numpy(), e, rtol=2e-5, atol=2e-6)
    for st in opt.state.values():
        for k, v in st.items():
            assert v.dtype == eagerc.float32, k


def test_param_groups_with_different_lrs():
    inits, grads = _init(), _grads()
    params = [eagerc.tensor(p, requires_grad=True, dtype=eagerc.float64) for p in inits]
    opt = optim.SGD([{"params": params[:2]}, {"params": params[2:], "lr": 0.5, "momentum": 0.0}],
                    lr=0.1, momentum=0.9)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[1]["lr"] == 0.5
    assert opt.param_groups[1]["momentum"] == 0.0 and opt.param_groups[0]["momentum"] == 0.9
    for step in grads:
        for p, g in zip(params, step):
            p.grad = eagerc.tensor(g)
        opt.step()
    e01 = ref_sgd(inits[:2], [s[:2] for s in grads], lr=0.1, momentum=0.9)
    e2 = ref_sgd(inits[2:], [s[2:] for s in grads], lr=0.5)
    for p, e in zip(params, e01 + e2):
        np.testing.assert_allclose(p.detach().numpy(), e, rtol=1e-12)


def test_add_param_group_and_errors():
    a = eagerc.zeros(2, requires_grad=True)
    b = eagerc.zeros(3, requires_grad=True)
    opt = optim.Adam([a], lr=0.1)
    opt.add_param_group({"params": b, "lr": 0.01})
    assert len(opt.param_groups[1]["params"]) == 1 and opt.param_groups[1]["params"][0] is b
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)  # defaults filled in
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors"):
        optim.SGD(a, lr=0.1)
    with pytest.raises(TypeError, match="ordered collections"):
        optim.SGD([{"params": {a}}], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([a * 2], lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.Adam([a], lr=-1)
    with pytest.raises(ValueError, match="beta parameter at index 1"):
        optim.Adam([a], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([a], lr=0.1, nesterov=True)


def test_accepts_generators_and_parameters():
    m = eagerc.nn.Linear(4, 3)
    opt = optim.SGD(m.parameters(), lr=0.1)  # a generator
    assert len(opt.param_groups[0]["params"]) == 2
    x = eagerc.randn(5, 4)
    w0 = m.weight.detach().numpy().copy()
    loss = (m(x) ** 2).mean()
    loss.backward()
    opt.step()
    np.testing.assert_allclose(m.weight.detach().numpy(), w0 - 0.1 * m.weight.grad.numpy(), rtol=1e-6)
    assert isinstance(m.weight, eagerc.nn.Parameter)


def test_training_a_module_lowers_the_loss():
    eagerc.manual_seed(0)
    model = eagerc.nn.Sequential(eagerc.nn.Linear(4, 16), eagerc.nn.ReLU(), eagerc.nn.Linear(16, 1))
    x = eagerc.randn(64, 4)
    y = (x * eagerc.tensor([1.0, -2.0, 0.5, 3.0])).sum(1, keepdim=True)
    opt = optim.AdamW(model.parameters(), lr=0.02)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0]


def test_updates_are_in_place_and_bump_the_version():
    p = eagerc.ones(4, requires_grad=True)
    view = p.detach()  # shares memory with p
    data = p._array
    opt = optim.SGD([p], lr=0.5)
    p.grad = eagerc.ones(4)
    v0 = p._version
    opt.step()
    assert p._array is data
    np.testing.assert_allclose(view.numpy(), 0.5)
    assert p._version == v0 + 1


def test_step_under_grad_mode_builds_no_graph_and_closure():
    p = eagerc.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    calls = []

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        calls.append(eagerc.is_grad_enabled())
        return loss

    with eagerc.no_grad():
        loss = opt.step(closure)
    assert calls == [True] and loss.item() == pytest.approx(5.0)
    assert p.grad_fn is None and p.is_leaf


def test_zero_grad():
    p = eagerc.ones(3, requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    (p * 2).sum().backward()
    g = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is g and np.all(g.numpy() == 0)
    opt.zero_grad()
    assert p.grad is None
    opt.step()  # params without grads are skipped


def test_skips_params_without_grad_and_state_layout():
    a = eagerc.ones(2, requires_grad=True)
    b = eagerc.ones(3, requires_grad=True)
    opt = optim.Adam([a, b], lr=0.1, amsgrad=True)
    a.grad = eagerc.ones(2)
    opt.step()
    opt.step()
    assert b not in opt.state or not opt.state[b]
    st = opt.state[a]
    assert sorted(st) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
    assert isinstance(st["step"], eagerc.Tensor) and st["step"].item() == 2.0 and st["step"].ndim == 0
    sd = opt.state_dict()
    assert list(sd["state"]) == [0]
    assert sd["param_groups"][0]["params"] == [0, 1]
    assert sd["param_groups"][0]["lr"] == 0.1 and sd["param_groups"][0]["amsgrad"] is True


def test_adagrad_state_exists_before_the_first_step():
    p = eagerc.ones(3, requires_grad=True)
    opt = optim.Adagrad([p], initial_accumulator_value=0.25)
    st = opt.state_dict()["state"][0]
    assert st["step"].item() == 0 and np.all(st["sum"].numpy() == 0.25)


def _clone_params(params):
    return [eagerc.tensor(p.detach().numpy().copy(), requires_grad=True) for p in params]


@pytest.mark.parametrize("name,kwargs", [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
                                         ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
                                         ("AdamW", dict(lr=0.01)),
                                         ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)),
                                         ("Adagrad", dict(lr=0.1, lr_decay=0.01))])
def test_resume_from_state_dict_continues_identically(name, kwargs, tmp_path):
    pytest.importorskip("safetensors")
    inits, grads = _init(), _grads()
    cls = getattr(optim, name)
    params = [eagerc.tensor(p, dtype=eagerc.float32, requires_grad=True) for p in inits]
    groups = [{"params": params[:1]}, {"params": params[1:], "lr": kwargs["lr"] / 2}]
    opt = cls(groups, **kwargs)

    def step(opt, params, g):
        for p, gi in zip(params, g):
            p.grad = eagerc.tensor(gi, dtype=eagerc.float32)
        opt.step()

    for g in grads[:3]:
        step(opt, params, g)
    save({"params": [p.detach() for p in params], "optim": opt.state_dict()}, tmp_path / "ck.safetensors")
    ck = load(tmp_path / "ck.safetensors")
    params2 = [eagerc.tensor(p.numpy(), requires_grad=True) for p in ck["params"]]
    opt2 = cls([{"params": params2[:1]}, {"params": params2[1:]}], lr=123.0)
    opt2.load_state_dict(ck["optim"])
    assert opt2.param_groups[1]["lr"] == kwargs["lr"] / 2
    assert opt2.param_groups[0]["params"][0] is params2[0]
    for g in grads[3:]:
        step(opt, params, g)
        step(opt2, params2, g)
    for p, q in zip(params, params2):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    # loading copies the state: stepping opt2 never touched the saved dict's tensors
    sd = opt.state_dict()
    for k, st in opt2.state_dict()["state"].items():
        for name_, v in st.items():
            np.testing.assert_array_equal(v.numpy(), sd["state"][k][name_].numpy())
            assert v is not sd["state"][k][name_]


def test_load_state_dict_in_memory_and_errors():
    a, b = eagerc.ones(2, requires_grad=True), eagerc.ones(3, requires_grad=True)
    opt = optim.SGD([a, b], lr=0.1, momentum=0.9)
    a.grad, b.grad = eagerc.ones(2), eagerc.ones(3)
    opt.step()
    sd = opt.state_dict()
    c, d = eagerc.ones(2, requires_grad=True), eagerc.ones(3, requires_grad=True)
    opt2 = optim.SGD([c, d], lr=0.1, momentum=0.9)
    opt2.load_state_dict(copy.deepcopy(sd))
    assert opt2.state[c]["momentum_buffer"] is not opt.state[a]["momentum_buffer"]
    np.testing.assert_array_equal(opt2.state[c]["momentum_buffer"].numpy(), 1.0)
    with pytest.raises(ValueError, match="number of parameter groups"):
        optim.SGD([{"params": [c]}, {"params": [d]}], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="doesn't match the size"):
        optim.SGD([c], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="shape"):
        optim.SGD([eagerc.ones(5, requires_grad=True), d], lr=0.1, momentum=0.9).load_state_dict(sd)


def test_state_follows_param_dtype_on_load():
    p = eagerc.ones(3, dtype=eagerc.float64, requires_grad=True)
    opt = optim.Adam([p])
    p.grad = eagerc.ones(3, dtype=eagerc.float64)
    opt.step()
    q = eagerc.ones(3, dtype=eagerc.float32, requires_grad=True)
    opt2 = optim.Adam([q])
    opt2.load_state_dict(opt.state_dict())
    assert opt2.state[q]["exp_avg"].dtype == eagerc.float32
    assert opt2.state[q]["step"].dtype == eagerc.float32


def test_repr():
    r = repr(optim.SGD([eagerc.ones(1, requires_grad=True)], lr=0.1))
    assert r.startswith("SGD (\nParameter Group 0\n") and "    lr: 0.1\n" in r and "params" not in r


def test_lr_change_in_group_takes_effect():
    p = eagerc.zeros(1, requires_grad=True)
    opt = optim.SGD([p], lr=1.0)
    opt.param_groups[0]["lr"] = 0.25
    p.grad = eagerc.ones(1)
    opt.step()
    assert p.item() == -0.25


def test_adam_bias_correction_first_step():
    """After one step every coordinate moves by ~lr * sign(g)."""
    p = eagerc.zeros(4, requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    p.grad = eagerc.tensor([3.0, -0.5, 1e-3, -7.0])
    opt.step()
    np.testing.assert_allclose(p.detach().numpy(), [-0.1, 0.1, -0.1, 0.1], rtol=1e-4)
    assert math.isclose(opt.state[p]["step"].item(), 1.0)


# ---------------------------------------------------------------- eagerc.nn.utils

def _with_grads(grads):
    ps = []
    for g in grads:
        p = eagerc.zeros(*np.shape(g), requires_grad=True)
        p.grad = eagerc.tensor(np.asarray(g, dtype=np.float32))
        ps.append(p)
    return ps


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.5, math.inf, "inf"])
def test_clip_grad_norm(norm_type):
    from eagerc.nn.utils import clip_grad_norm_
    rng = np.random.default_rng(0)
    gs = [rng.standard_normal((4, 3)), rng.standard_normal(5)]
    ps = _with_grads(gs) + [eagerc.zeros(2, requires_grad=True)]  # one param without a grad
    flat = np.concatenate([g.ravel() for g in gs])
    p = float(norm_type)
    ref = np.abs(flat).max() if p == math.inf else (np.abs(flat) ** p).sum() ** (1 / p)
    total = clip_grad_norm_(ps, max_norm=0.5, norm_type=norm_type)
    assert isinstance(total, eagerc.Tensor) and total.ndim == 0 and total.dtype == eagerc.float32
    assert total.item() == pytest.approx(ref, rel=1e-5)
    scale = 0.5 / (ref + 1e-6)
    for q, g in zip(ps, gs):
        np.testing.assert_allclose(q.grad.numpy(), g * scale, rtol=1e-5)
    assert ps[2].grad is None
    # below the limit nothing changes
    before = [q.grad.numpy().copy() for q in ps[:2]]
    clip_grad_norm_(ps, max_norm=100.0, norm_type=norm_type)
    for q, b in zip(ps, before):
        np.testing.assert_array_equal(q.grad.numpy(), b)


def test_clip_grad_norm_edge_cases():
    from eagerc.nn.utils import clip_grad_norm_
    p = _with_grads([[3.0, 4.0]])[0]
    total = clip_grad_norm_(p, 1.0)  # a single tensor is accepted
    assert total.item() == pytest.approx(5.0) and p.grad.numpy() == pytest.approx([0.6, 0.8], rel=1e-5)
    assert clip_grad_norm_([eagerc.zeros(2, requires_grad=True)], 1.0).item() == 0.0
    bad = _with_grads([[np.inf, 1.0]])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(bad, 1.0, error_if_nonfinite=True)
    assert not math.isfinite(clip_grad_norm_(bad, 1.0).item())


def test_clip_grad_value():
    from eagerc.nn.utils import clip_grad_value_
    ps = _with_grads([[-3.0, 0.5, 2.0], [[10.0, -0.1]]])
    v0 = ps[0].grad._version
    clip_grad_value_(ps, 1.0)
    assert ps[0].grad.tolist() == [-1.0, 0.5, 1.0] and ps[1].grad.numpy().tolist() == [[1.0, pytest.approx(-0.1)]]
    assert ps[0].grad._version == v0 + 1


def test_parameters_to_vector_and_back():
    from eagerc.nn.utils import parameters_to_vector, vector_to_parameters
    m = eagerc.nn.Linear(3, 2)
    vec = parameters_to_vector(m.parameters())
    assert vec.shape == (8,)
    np.testing.assert_array_equal(vec.detach().numpy()[:6], m.weight.detach().numpy().ravel())
    (vec * eagerc.arange(8.0)).sum().backward()  # differentiable
    np.testing.assert_array_equal(m.bias.grad.numpy(), [6.0, 7.0])
    w = m.weight
    ref = m.weight.detach()  # shares memory: the update is in place
    vector_to_parameters(eagerc.arange(8.0), m.parameters())
    assert m.weight is w and ref.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and m.bias.tolist() == [6.0, 7.0]
    with pytest.raises(ValueError, match="elements"):
        vector_to_parameters(eagerc.zeros(5), m.parameters())
    with pytest.raises(TypeError, match="expected eagerc.Tensor"):
        vector_to_parameters([0.0] * 8, m.parameters())
