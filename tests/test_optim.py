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
             decoupled_weight_decay=False):
    b1, b2 = betas
    decoupled = decoupled_weight_decay
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
    return ref_adam(ps, gs, weight_decay=weight_decay, decoupled_weight_decay=True, **kw)


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


def _grad(g, p, weight_decay, maximize):
    g = -g if maximize else g
    return g + weight_decay * p if weight_decay else g


def _decayed(p, g, lr, weight_decay, decoupled, maximize):
    """(p, g) after weight decay: p * (1 - lr * wd) if decoupled, else the L2 term in g."""
    if decoupled:
        return p * (1 - lr * weight_decay), _grad(g, p, 0, maximize)
    return p, _grad(g, p, weight_decay, maximize)


def ref_adadelta(ps, gs, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, maximize=False):
    ps = [p.copy() for p in ps]
    sq = [np.zeros_like(p) for p in ps]
    acc = [np.zeros_like(p) for p in ps]
    for step in gs:
        for i, g in enumerate(step):
            g = _grad(g, ps[i], weight_decay, maximize)
            sq[i] = rho * sq[i] + (1 - rho) * g * g
            delta = np.sqrt(acc[i] + eps) / np.sqrt(sq[i] + eps) * g
            acc[i] = rho * acc[i] + (1 - rho) * delta * delta
            ps[i] = ps[i] - lr * delta
    return ps


def ref_adamax(ps, gs, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, maximize=False):
    b1, b2 = betas
    ps = [p.copy() for p in ps]
    m = [np.zeros_like(p) for p in ps]
    u = [np.zeros_like(p) for p in ps]
    for t, step in enumerate(gs, 1):
        for i, g in enumerate(step):
            g = _grad(g, ps[i], weight_decay, maximize)
            m[i] = b1 * m[i] + (1 - b1) * g
            u[i] = np.maximum(b2 * u[i], np.abs(g) + eps)
            ps[i] = ps[i] - lr / (1 - b1 ** t) * m[i] / u[i]
    return ps


def ref_nadam(ps, gs, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
              decoupled_weight_decay=False, maximize=False):
    """PyTorch's NAdam; mu_product is a float32 scalar there (its state), so it is here."""
    b1, b2 = betas
    ps = [p.copy() for p in ps]
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    mp = [np.float32(1.0) for _ in ps]
    for t, step in enumerate(gs, 1):
        for i, g in enumerate(step):
            ps[i], g = _decayed(ps[i], g, lr, weight_decay, decoupled_weight_decay, maximize)
            mu = b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))
            mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * momentum_decay))
            mp[i] = np.float32(mp[i] * np.float32(mu))
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            denom = np.sqrt(v[i] / (1 - b2 ** t)) + eps
            prod = float(mp[i])
            ps[i] = (ps[i] - lr * (1 - mu) / (1 - prod) * g / denom
                     - lr * mu_next / (1 - prod * mu_next) * m[i] / denom)
    return ps


def ref_radam(ps, gs, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
              maximize=False):
    b1, b2 = betas
    ps = [p.copy() for p in ps]
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    rho_inf = 2 / (1 - b2) - 1
    for t, step in enumerate(gs, 1):
        for i, g in enumerate(step):
            ps[i], g = _decayed(ps[i], g, lr, weight_decay, decoupled_weight_decay, maximize)
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            mhat = m[i] / (1 - b1 ** t)
            rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
            if rho_t > 5:
                r = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                adaptive = math.sqrt(1 - b2 ** t) / (np.sqrt(v[i]) + eps)
                ps[i] = ps[i] - lr * mhat * r * adaptive
            else:
                ps[i] = ps[i] - lr * mhat
    return ps


def ref_asgd(ps, gs, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, maximize=False, averages=None):
    """PyTorch's ASGD; eta and mu are float32 scalars there (its state), so they are here."""
    ps = [p.copy() for p in ps]
    ax = [np.zeros_like(p) for p in ps]
    eta = [np.float32(lr) for _ in ps]
    mu = [np.float32(1.0) for _ in ps]
    for t, step in enumerate(gs, 1):
        for i, g in enumerate(step):
            g = _grad(g, ps[i], weight_decay, maximize)
            e = float(eta[i])
            ps[i] = ps[i] * (1 - lambd * e) - e * g
            ax[i] = ps[i].copy() if mu[i] == 1 else ax[i] + float(mu[i]) * (ps[i] - ax[i])
            eta[i] = np.float32(lr / (1 + lambd * lr * t) ** alpha)
            mu[i] = np.float32(1 / max(1, t - t0))
    if averages is not None:
        averages.extend(ax)
    return ps


def ref_rprop(ps, gs, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), maximize=False):
    ps = [p.copy() for p in ps]
    prev = [np.zeros_like(p) for p in ps]
    size = [np.full_like(p, lr) for p in ps]
    for step in gs:
        for i, g in enumerate(step):
            g = -g if maximize else g.copy()
            s = np.sign(g * prev[i])
            factor = np.where(s > 0, etas[1], np.where(s < 0, etas[0], 1.0))
            size[i] = np.clip(size[i] * factor, *step_sizes)
            g[s < 0] = 0
            ps[i] = ps[i] - np.sign(g) * size[i]
            prev[i] = g
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
    ("Adam", ref_adam, dict(lr=0.01, weight_decay=0.3, decoupled_weight_decay=True)),
    ("Adadelta", ref_adadelta, dict()),
    ("Adadelta", ref_adadelta, dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1, maximize=True)),
    ("Adamax", ref_adamax, dict()),
    ("Adamax", ref_adamax, dict(lr=0.05, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.1, maximize=True)),
    ("NAdam", ref_nadam, dict()),
    ("NAdam", ref_nadam, dict(lr=0.01, betas=(0.8, 0.99), momentum_decay=0.05, weight_decay=0.1)),
    ("NAdam", ref_nadam, dict(lr=0.01, weight_decay=0.2, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", ref_radam, dict()),  # rho_t <= 5 for the first 5 steps, rectified at the 6th
    ("RAdam", ref_radam, dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1, maximize=True)),
    ("RAdam", ref_radam, dict(lr=0.01, weight_decay=0.2, decoupled_weight_decay=True)),
    ("ASGD", ref_asgd, dict()),
    ("ASGD", ref_asgd, dict(lr=0.05, lambd=0.01, alpha=0.6, t0=2, weight_decay=0.1, maximize=True)),  # averaging
    ("Rprop", ref_rprop, dict()),
    ("Rprop", ref_rprop, dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True)),
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


@pytest.mark.parametrize("name,ref,kwargs", [
    ("RAdam", ref_radam, dict(lr=0.01, betas=(0.7, 0.9), eps=1e-3)),
    ("RAdam", ref_radam, dict(lr=0.01, weight_decay=0.05, decoupled_weight_decay=True)),
    ("ASGD", ref_asgd, dict(lr=0.05, lambd=0.01, alpha=0.6, t0=5, weight_decay=0.1)),
    ("NAdam", ref_nadam, dict(lr=0.01, momentum_decay=0.1)),
    ("Rprop", ref_rprop, dict(lr=0.1, step_sizes=(0.05, 0.3))),
], ids=["RAdam", "RAdam-decoupled", "ASGD", "NAdam", "Rprop"])
def test_long_runs_match_reference(name, ref, kwargs):
    """20 steps: past RAdam's switch to rectified steps (step 6), ASGD's start of averaging
    (t0), and Rprop's step-size clamps."""
    inits = _init()
    rng = np.random.default_rng(7)
    grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(20)]
    params, opt = _run(name, kwargs, inits, grads)
    averages = []
    expected = ref(inits, grads, **kwargs, **({"averages": averages} if name == "ASGD" else {}))
    for p, e in zip(params, expected):
        np.testing.assert_allclose(p.detach().numpy(), e, rtol=1e-10, atol=1e-12)
    for p, e in zip(params, averages):  # ASGD's running average of the parameters
        np.testing.assert_allclose(opt.state[p]["ax"].numpy(), e, rtol=1e-10, atol=1e-12)
        assert not np.allclose(e, p.detach().numpy())  # it averages, it does not copy


@pytest.mark.parametrize("name,ref,kwargs", [CASES[4], CASES[9], CASES[15], CASES[17],
                                             ("Adadelta", ref_adadelta, dict(weight_decay=0.1)),
                                             ("NAdam", ref_nadam, dict(lr=0.01)),
                                             ("RAdam", ref_radam, dict(lr=0.01)),
                                             ("ASGD", ref_asgd, dict(lr=0.05, t0=2)),
                                             ("Rprop", ref_rprop, dict(lr=0.05))],
                         ids=["SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "NAdam", "RAdam", "ASGD", "Rprop"])
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
                                         ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
                                         ("Adadelta", dict(lr=0.5, weight_decay=0.01)),
                                         ("Adamax", dict(lr=0.01)),
                                         ("NAdam", dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.1)),
                                         ("RAdam", dict(lr=0.01)),
                                         ("ASGD", dict(lr=0.05, t0=2)),
                                         ("Rprop", dict(lr=0.05))])
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


# ---------------------------------------------------------------- PyTorch's param-group keys

_FLAGS = dict(foreach=None, differentiable=False)
PYTORCH_GROUPS = {  # PyTorch 2.13's param_groups[0] for each optimizer's defaults (minus params)
    "SGD": dict(lr=0.001, momentum=0, dampening=0, weight_decay=0, nesterov=False, maximize=False, fused=None,
                **_FLAGS),
    "Adam": dict(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, amsgrad=False, maximize=False,
                 capturable=False, fused=None, decoupled_weight_decay=False, **_FLAGS),
    "AdamW": dict(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, amsgrad=False, maximize=False,
                  capturable=False, fused=None, decoupled_weight_decay=True, **_FLAGS),
    "RMSprop": dict(lr=0.01, momentum=0, alpha=0.99, eps=1e-08, centered=False, weight_decay=0, capturable=False,
                    maximize=False, **_FLAGS),
    "Adagrad": dict(lr=0.01, lr_decay=0, eps=1e-10, weight_decay=0, initial_accumulator_value=0, maximize=False,
                    fused=None, **_FLAGS),
    "Adadelta": dict(lr=1.0, rho=0.9, eps=1e-06, weight_decay=0, maximize=False, capturable=False, **_FLAGS),
    "Adamax": dict(lr=0.002, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, maximize=False, capturable=False,
                   **_FLAGS),
    "NAdam": dict(lr=0.002, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, momentum_decay=0.004,
                  decoupled_weight_decay=False, maximize=False, capturable=False, **_FLAGS),
    "RAdam": dict(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, maximize=False, capturable=False,
                  decoupled_weight_decay=False, **_FLAGS),
    "ASGD": dict(lr=0.01, lambd=0.0001, alpha=0.75, t0=1000000.0, weight_decay=0, maximize=False, capturable=False,
                 **_FLAGS),
    "Rprop": dict(lr=0.01, etas=(0.5, 1.2), step_sizes=(1e-06, 50), maximize=False, capturable=False, **_FLAGS),
    "LBFGS": dict(lr=1, max_iter=20, max_eval=25, tolerance_grad=1e-07, tolerance_change=1e-09, history_size=100,
                  line_search_fn=None),
}


@pytest.mark.parametrize("name", sorted(PYTORCH_GROUPS))
def test_param_groups_have_pytorchs_keys(name):
    opt = getattr(optim, name)([eagerc.zeros(2, requires_grad=True)])
    group = {k: v for k, v in opt.param_groups[0].items() if k != "params"}
    assert group == PYTORCH_GROUPS[name]
    packed = opt.state_dict()["param_groups"][0]
    assert {k: v for k, v in packed.items() if k != "params"} == PYTORCH_GROUPS[name]


def test_param_groups_match_the_installed_pytorch():
    torch = pytest.importorskip("torch")
    for name in PYTORCH_GROUPS:
        ours = getattr(optim, name)([eagerc.zeros(2, requires_grad=True)]).param_groups[0]
        theirs = getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)]).param_groups[0]
        assert {k: v for k, v in ours.items() if k != "params"} == \
            {k: v for k, v in theirs.items() if k != "params"}, name


def _one_step(name, **kw):
    p = eagerc.tensor([1.0, -2.0, 0.5], dtype=eagerc.float64, requires_grad=True)
    opt = getattr(optim, name)([p], **kw)
    for g in ([0.3, 0.1, -0.2], [-0.1, 0.4, 0.2]):
        p.grad = eagerc.tensor(g, dtype=eagerc.float64)
        opt.step()
    return p.detach().numpy()


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Adagrad"])
def test_fused_and_foreach_choose_nothing_and_refuse_what_pytorch_refuses(name):
    plain = _one_step(name)
    np.testing.assert_array_equal(_one_step(name, fused=True), plain)
    np.testing.assert_array_equal(_one_step(name, foreach=True), plain)
    np.testing.assert_array_equal(_one_step(name, fused=False, foreach=False), plain)
    p = [eagerc.zeros(2, requires_grad=True)]
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        getattr(optim, name)(p, fused=True, foreach=True)
    with pytest.raises(RuntimeError, match="`fused` does not support `differentiable`"):
        getattr(optim, name)(p, fused=True, differentiable=True)
    with pytest.raises(RuntimeError, match="foreach=True does not support differentiable=True"):
        getattr(optim, name)(p, foreach=True, differentiable=True)


@pytest.mark.parametrize("name", ["RMSprop", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop"])
def test_no_fused_keyword_where_pytorch_has_none(name):
    with pytest.raises(TypeError, match="fused"):
        getattr(optim, name)([eagerc.zeros(2, requires_grad=True)], fused=True)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "RMSprop", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop"])
def test_capturable_is_refused_for_cpu_parameters_like_pytorch(name):
    p = eagerc.zeros(2, requires_grad=True)
    opt = getattr(optim, name)([p], capturable=True)
    assert opt.param_groups[0]["capturable"] is True
    opt.step()  # no gradient yet: nothing to update, nothing to refuse
    p.grad = eagerc.ones(2)
    with pytest.raises(RuntimeError, match=f"{name}: capturable=True needs the parameters on a CUDA device"):
        opt.step()
    assert p.tolist() == [0.0, 0.0]


DIFFERENTIABLE = [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
                  ("Adam", dict(lr=0.1, amsgrad=True, weight_decay=0.1)), ("AdamW", dict(lr=0.1)),
                  ("RMSprop", dict(momentum=0.5, centered=True)), ("Adagrad", dict(lr_decay=0.1)),
                  ("Adadelta", dict()), ("Adamax", dict()), ("NAdam", dict(decoupled_weight_decay=True, weight_decay=0.1)),
                  ("RAdam", dict(betas=(0.9, 0.6))), ("ASGD", dict(t0=2)), ("Rprop", dict())]


@pytest.mark.parametrize("name,kwargs", DIFFERENTIABLE, ids=[c[0] for c in DIFFERENTIABLE])
def test_differentiable_steps_have_finite_difference_gradients(name, kwargs):
    """differentiable=True (PyTorch's meta-learning switch): seven steps are one autograd
    graph from the initial parameter and the gradients to the final parameter, checked
    against finite differences; the values are the plain steps' values."""
    p0 = eagerc.tensor([1.0, -2.0, 0.5], dtype=eagerc.float64, requires_grad=True)
    g1 = eagerc.tensor([0.3, 0.1, -0.2], dtype=eagerc.float64, requires_grad=True)
    g2 = eagerc.tensor([0.5, -0.4, 0.25], dtype=eagerc.float64, requires_grad=True)

    def steps(p0, g1, g2, differentiable=True):
        p = p0 * 1.0  # a non-leaf parameter: allowed with differentiable=True, as in PyTorch
        opt = getattr(optim, name)([p], differentiable=differentiable, **kwargs)
        for g in (g1, g2, g1, g2, g1, g2, g1):
            p.grad = g
            opt.step()
        return p

    assert eagerc.autograd.gradcheck(steps, (p0, g1, g2))
    with eagerc.no_grad():
        plain = steps(p0.detach(), g1.detach(), g2.detach(), differentiable=False)
    np.testing.assert_array_equal(steps(p0, g1, g2).detach().numpy(), plain.numpy())


def test_differentiable_sgd_gradient_by_hand():
    """p2 = p0 - lr * g1 - lr * (momentum * g1 + g2): d p2 / d g1 = -lr * (1 + momentum)."""
    p0 = eagerc.tensor([1.0, -2.0], dtype=eagerc.float64, requires_grad=True)
    g1 = eagerc.tensor([0.3, 0.1], dtype=eagerc.float64, requires_grad=True)
    g2 = eagerc.tensor([0.5, -0.4], dtype=eagerc.float64, requires_grad=True)
    p = p0 * 1.0
    opt = optim.SGD([p], lr=0.1, momentum=0.9, differentiable=True)
    for g in (g1, g2):
        p.grad = g
        opt.step()
    (p * eagerc.tensor([1.0, 2.0], dtype=eagerc.float64)).sum().backward()
    np.testing.assert_allclose(p0.grad.numpy(), [1.0, 2.0])
    np.testing.assert_allclose(g1.grad.numpy(), [-0.19, -0.38])
    np.testing.assert_allclose(g2.grad.numpy(), [-0.1, -0.2])
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([p0 * 1.0], lr=0.1)


# ---------------------------------------------------------------- compiled steps: the eager bits

COMPILED = [("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)), ("Adam", dict(lr=1e-2, amsgrad=True)),
            ("AdamW", dict(lr=1e-2)), ("RMSprop", dict(lr=1e-2, centered=True)), ("Adagrad", dict(lr=0.1)),
            ("Adadelta", dict(weight_decay=1e-2)), ("Adamax", dict(lr=1e-2)), ("NAdam", dict(lr=1e-2)),
            ("RAdam", dict(lr=1e-2, betas=(0.9, 0.9))), ("ASGD", dict(lr=0.05, t0=4)),
            ("Rprop", dict(step_sizes=(1e-4, 0.02)))]


def mse_step(model, opt, x, y):
    """One training step (mean squared error, backward, the optimizer's update): its loss."""
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


@pytest.mark.parametrize("name,kwargs", COMPILED, ids=[c[0] for c in COMPILED])
@pytest.mark.parametrize("backend", ["numpy", "interpreter"])
def test_compiled_steps_give_the_eager_bits(name, kwargs, backend):
    """Twelve whole training steps under eagerc.compile(fullgraph=True) -- no graph break --
    give bit-identical parameters and state, the first step included (it creates the state
    while traced, but for SGD's); RAdam's and ASGD's step-dependent branches
    switch inside the graph, and an lr changed between calls is read without a retrace.
    (Adam and AdamW differed in the last bit before bias corrections used numpy's power in
    both: Python's float pow and numpy's disagree for a few percent of arguments.)"""
    def build():
        eagerc.manual_seed(0)
        return eagerc.nn.Sequential(eagerc.nn.Linear(4, 8), eagerc.nn.Tanh(), eagerc.nn.Linear(8, 2)).double()

    models = [build(), build()]
    opts = [getattr(optim, name)(m.parameters(), **kwargs) for m in models]
    step = mse_step
    compiled = eagerc.compile(lambda x, y: step(models[1], opts[1], x, y), backend=backend, fullgraph=True)
    rng = np.random.default_rng(3)
    for i in range(12):
        x = eagerc.tensor(rng.standard_normal((5, 4)))
        y = eagerc.tensor(rng.standard_normal((5, 2)))
        if i == 7:
            for opt in opts:
                opt.param_groups[0]["lr"] *= 0.5
        # the first step creates the state: traced like the others (`_init_state` then the rule),
        # except SGD's, whose momentum buffer is a copy of the first gradient: an eager step
        # (compiled, the first call would run eagerly: a break fullgraph refuses)
        second = step(models[1], opts[1], x, y) if i == 0 and name == "SGD" else compiled(x, y)
        assert step(models[0], opts[0], x, y).item() == second.item()
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
        for k, v in opts[0].state[p].items():
            np.testing.assert_array_equal(opts[1].state[q][k].numpy(), v.numpy(), err_msg=k)
    assert compiled.traces == 1, compiled.log



def _alike_model(name, kwargs):
    """Three float32 Linear(4, 4) (alike), a float64 one and one without gradients, one optimizer;
    returns (loss function, optimizer)."""
    eagerc.manual_seed(0)
    layers = [eagerc.nn.Linear(4, 4) for _ in range(3)] + [eagerc.nn.Linear(4, 4).double()]
    frozen = eagerc.nn.Linear(4, 4)
    model = eagerc.nn.Sequential(*layers[:3], eagerc.nn.Tanh())
    opt = getattr(optim, name)([p for m in layers + [frozen] for p in m.parameters()], **kwargs)

    def step(x):
        loss = (model(x) ** 2).mean() + (layers[3](x.double()) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step, opt


@pytest.mark.parametrize("name,kwargs", [c for c in COMPILED if c[0] != "SGD"], ids=[c[0] for c in COMPILED[1:]])
def test_alike_parameters_replay_the_first_ones_update(name, kwargs, monkeypatch):
    """A traced rule runs its Python for the first parameter of each kind (shape, dtype, state)
    and replays that tape for the others (TensorOps.each_alike): the traced graph is the very
    one the rule makes for every parameter (nodes, names, attrs, locations, modules, inputs,
    mutations), and the parameters keep eager mode's bits. A float64 layer is a kind of its
    own; a parameter without a gradient is skipped."""
    from eagerc.compiler import tracer as tracer_mod
    from eagerc.optim import rules

    replays = []
    real = tracer_mod.Tracer.replay
    monkeypatch.setattr(tracer_mod.Tracer, "replay", lambda self, seg, roles: replays.append(1) or real(self, seg, roles))

    def run(compile_it, replay=True):
        monkeypatch.setattr(rules, "REPLAY", replay)
        step, opt = _alike_model(name, kwargs)
        if compile_it:
            step = eagerc.compile(step, backend="numpy", fullgraph=True)
        rng = np.random.default_rng(1)
        for _ in range(3):
            step(eagerc.tensor(rng.standard_normal((5, 4)).astype(np.float32)))
        params = [p.detach().numpy() for p in opt.param_groups[0]["params"]]
        return (step.traced_graphs[0] if compile_it else None), params

    g0, p0 = run(True, replay=False)
    assert not replays
    g1, p1 = run(True)
    assert len(replays) == 4   # the second and third float32 Linear's weight and bias
    assert g1.dumps() == g0.dumps()
    assert [(n.loc, n.module) for n in g1.nodes] == [(n.loc, n.module) for n in g0.nodes]
    _, pe = run(False)
    for a, b, c in zip(p1, p0, pe):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)

def _lbfgs_on_a_bowl():
    x = eagerc.tensor([1.5, -0.5], dtype=eagerc.float64, requires_grad=True)
    opt = optim.LBFGS([x], max_iter=5)

    def closure():
        opt.zero_grad()
        loss = ((x - 1) ** 2).sum()
        loss.backward()
        return loss
    return x, opt, closure


def test_lbfgs_step_in_a_compiled_function_is_a_graph_break():
    x, opt, closure = _lbfgs_on_a_bowl()
    with pytest.raises(Exception, match="LBFGS.step"):
        eagerc.compile(lambda: opt.step(closure), fullgraph=True)()
    x, opt, closure = _lbfgs_on_a_bowl()
    with pytest.warns(UserWarning, match="graph break .*LBFGS.step"):
        loss = eagerc.compile(lambda: opt.step(closure))()  # breaks, runs eagerly
    assert loss.item() == pytest.approx(0.25 + 2.25)
    np.testing.assert_allclose(x.detach().numpy(), [1.0, 1.0], atol=1e-7)


# ---------------------------------------------------------------- LBFGS

def _quadratic(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n), rng.standard_normal(n)


def ref_lbfgs(f_and_g, x, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
              history_size=100, steps=1):
    """Nocedal & Wright's L-BFGS (algorithm 7.4, two-loop recursion) with a fixed step, as
    PyTorch runs it without a line search: the first step is min(1, 1/|g|_1) * lr, the
    curvature pair is kept only if y.s > 1e-10, H0 = y.s / y.y."""
    max_eval = max_iter * 5 // 4 if max_eval is None else max_eval
    x = x.copy()
    dirs, stps, total_iter, d = [], [], 0, None
    for _ in range(steps):
        f, g = f_and_g(x)
        evals = 1
        if np.abs(g).max() <= tolerance_grad:
            continue
        for n_iter in range(1, max_iter + 1):
            total_iter += 1
            if total_iter == 1:
                d, h0 = -g, 1.0
            else:
                y, s = g - g_prev, d * t
                if y @ s > 1e-10:
                    if len(dirs) == history_size:
                        dirs.pop(0)
                        stps.pop(0)
                    dirs.append(y)
                    stps.append(s)
                    h0 = (y @ s) / (y @ y)
                q = -g
                alphas = []
                for y_i, s_i in reversed(list(zip(dirs, stps))):
                    a_i = (s_i @ q) / (y_i @ s_i)
                    alphas.append(a_i)
                    q = q - a_i * y_i
                r = q * h0
                for (y_i, s_i), a_i in zip(zip(dirs, stps), reversed(alphas)):
                    b_i = (y_i @ r) / (y_i @ s_i)
                    r = r + (a_i - b_i) * s_i
                d = r
            g_prev, f_prev = g, f
            t = min(1.0, 1.0 / np.abs(g).sum()) * lr if total_iter == 1 else lr
            if g @ d > -tolerance_change:
                break
            x = x + t * d
            if n_iter == max_iter:
                break
            f, g = f_and_g(x)
            evals += 1
            if evals >= max_eval or np.abs(g).max() <= tolerance_grad or np.abs(d * t).max() <= tolerance_change \
                    or abs(f - f_prev) < tolerance_change:
                break
    return x


def _lbfgs_run(f, x0, steps=1, **kw):
    x = eagerc.tensor(x0, requires_grad=True)
    opt = optim.LBFGS([x], **kw)
    calls = []

    def closure():
        opt.zero_grad()
        loss = f(x)
        loss.backward()
        calls.append(1)
        return loss

    losses = [opt.step(closure).item() for _ in range(steps)]
    return x.detach().numpy(), opt, losses, len(calls)


@pytest.mark.parametrize("kwargs", [dict(), dict(lr=0.5, max_iter=7, history_size=3), dict(max_iter=4, lr=0.2)])
def test_lbfgs_matches_the_two_loop_reference(kwargs):
    a, b = _quadratic()

    def f_and_g(x):
        return 0.5 * x @ a @ x - b @ x, a @ x - b

    A, B = eagerc.tensor(a), eagerc.tensor(b)
    x0 = np.linspace(-1, 1, 6)
    got, opt, _, _ = _lbfgs_run(lambda x: 0.5 * (x @ A @ x) - B @ x, x0, steps=3, **kwargs)
    np.testing.assert_allclose(got, ref_lbfgs(f_and_g, x0, steps=3, **kwargs), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_minimises_a_quadratic_exactly(line_search_fn):
    a, b = _quadratic(1)
    A, B = eagerc.tensor(a), eagerc.tensor(b)
    x, opt, losses, calls = _lbfgs_run(lambda x: 0.5 * (x @ A @ x) - B @ x, np.zeros(6), steps=3,
                                       line_search_fn=line_search_fn, max_iter=50, tolerance_grad=1e-12,
                                       tolerance_change=0)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-8, atol=1e-9)
    state = opt.state[opt.param_groups[0]["params"][0]]
    assert state["func_evals"] == calls and state["n_iter"] >= 1
    assert losses[0] == 0.0 and losses[1] < 0  # step returns the loss before its iterations


def test_lbfgs_strong_wolfe_on_rosenbrock():
    """With the line search, the 2-d Rosenbrock function reaches its minimum at (1, 1) from
    the classic start (-1.2, 1), losses never rising."""
    def rosen(x):
        return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2

    x, opt, losses, _ = _lbfgs_run(rosen, np.array([-1.2, 1.0]), steps=3, line_search_fn="strong_wolfe",
                                   max_iter=40, tolerance_grad=1e-12, tolerance_change=0)
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-10)
    assert all(b <= a for a, b in zip(losses, losses[1:]))


def test_lbfgs_stops_and_errors():
    x = eagerc.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.LBFGS([x])
    calls = []

    def flat():  # a zero gradient: optimal at once, one evaluation
        opt.zero_grad()
        loss = (x * 0).sum()
        loss.backward()
        calls.append(1)
        return loss

    opt.step(flat)
    assert calls == [1] and x.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="per-parameter options"):
        optim.LBFGS([{"params": [x]}, {"params": [eagerc.zeros(1, requires_grad=True)]}])
    with pytest.raises(ValueError, match="line_search_fn"):
        optim.LBFGS([x], line_search_fn="backtracking")
    with pytest.raises(RuntimeError, match="closure"):
        opt.step(None)


def test_lbfgs_state_dict_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    a, b = _quadratic(2)
    A, B = eagerc.tensor(a), eagerc.tensor(b)

    def make(x0):
        x = eagerc.tensor(x0, requires_grad=True)
        opt = optim.LBFGS([x], max_iter=3, history_size=4, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = 0.5 * (x @ A @ x) - B @ x
            loss.backward()
            return loss
        return x, opt, closure

    x, opt, closure = make(np.linspace(-2, 2, 6))
    opt.step(closure)
    save({"x": x.detach(), "optim": opt.state_dict()}, tmp_path / "lbfgs.safetensors")
    ck = load(tmp_path / "lbfgs.safetensors")
    x2, opt2, closure2 = make(ck["x"].numpy())
    opt2.load_state_dict(ck["optim"])
    st, st2 = opt.state[x], opt2.state[x2]
    assert st2["n_iter"] == st["n_iter"] > 1 and st2["func_evals"] == st["func_evals"]
    assert len(st2["old_dirs"]) == len(st["old_dirs"]) > 0
    np.testing.assert_array_equal(st2["prev_flat_grad"].numpy(), st["prev_flat_grad"].numpy())
    opt.step(closure)
    opt2.step(closure2)
    np.testing.assert_array_equal(x2.detach().numpy(), x.detach().numpy())


# ---------------------------------------------------------------- against the installed PyTorch

TORCH_CASES = [("Adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.1, maximize=True)),
               ("Adamax", dict(lr=0.01, weight_decay=0.1)), ("NAdam", dict(lr=0.01, weight_decay=0.1)),
               ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, momentum_decay=0.01)),
               ("RAdam", dict(lr=0.01)), ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
               ("ASGD", dict(lr=0.05, t0=5, lambd=0.01, alpha=0.6, weight_decay=0.1)),
               ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True)),
               ("Adam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True))]


@pytest.mark.parametrize("name,kwargs", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_trajectories_match_torch_optim(name, kwargs, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    inits = [rng.standard_normal(s) for s in SHAPES]
    grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(25)]
    ours = [eagerc.tensor(p, dtype=getattr(eagerc, dtype), requires_grad=True) for p in inits]
    theirs = [torch.tensor(p, dtype=getattr(torch, dtype), requires_grad=True) for p in inits]
    o1, o2 = getattr(optim, name)(ours, **kwargs), getattr(torch.optim, name)(theirs, **kwargs)
    for step in grads:
        for p, q, g in zip(ours, theirs, step):
            p.grad = eagerc.tensor(g, dtype=p.dtype)
            q.grad = torch.tensor(g, dtype=q.dtype)
        o1.step()
        o2.step()
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == "float64" else dict(rtol=2e-6, atol=2e-7)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **tol)
        for k, v in o2.state[q].items():
            np.testing.assert_allclose(o1.state[p][k].numpy(), v.numpy(), **tol, err_msg=k)
            assert o1.state[p][k].dtype == getattr(eagerc, str(v.dtype).split(".")[1]), k


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_matches_torch(line_search_fn):
    torch = pytest.importorskip("torch")
    x0 = np.array([-1.2, 1.0, 0.5, -0.3])
    runs = []
    for lib in (eagerc, torch):
        x = lib.tensor(x0, requires_grad=True)
        opt = lib.optim.LBFGS([x], lr=0.5, max_iter=7, history_size=3, line_search_fn=line_search_fn)

        def closure():
            opt.zero_grad()
            loss = ((1 - x[:-1]) ** 2).sum() + 100 * ((x[1:] - x[:-1] ** 2) ** 2).sum()
            loss.backward()
            return loss

        losses = [float(opt.step(closure).detach()) for _ in range(4)]
        runs.append((x.detach().numpy().copy(), losses, opt.state[x]["func_evals"], opt.state[x]["n_iter"]))
    (xa, la, fa, na), (xb, lb, fb, nb) = runs
    np.testing.assert_allclose(xa, xb, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(la, lb, rtol=1e-10)
    assert (fa, na) == (fb, nb)
