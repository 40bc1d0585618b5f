"""Training under compile: compiled forward + backward, and whole compiled training steps,
against the same computation run eagerly (the independent reference)."""
import copy

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F


def _mlp(dtype=eagerc.float32, seed=0):
    eagerc.manual_seed(seed)
    m = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    return m.to(dtype)


def _data(dtype, n=8, seed=1):
    rng = np.random.default_rng(seed)
    return eagerc.tensor(rng.standard_normal((n, 6)), dtype=dtype), eagerc.tensor(rng.integers(0, 4, n))


@pytest.mark.parametrize("dtype,rtol", [(eagerc.float64, 1e-6), (eagerc.float32, 1e-4)])
def test_compiled_forward_backward_matches_eager(dtype, rtol):
    eager = _mlp(dtype)
    comp_model = copy.deepcopy(eager)
    compiled = eagerc.compile(comp_model)
    for call in range(3):  # first call traces, the others run the compiled programs
        x, y = _data(dtype, seed=call)
        x.requires_grad_(True)
        xc = x.detach().clone().requires_grad_(True)
        F.cross_entropy(eager(x), y).backward()
        loss = F.cross_entropy(compiled(xc), y)
        loss.backward()
        for (n, p), q in zip(eager.named_parameters(), comp_model.parameters()):
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=rtol, atol=rtol * 1e-2, err_msg=n)
        np.testing.assert_allclose(xc.grad.numpy(), x.grad.numpy(), rtol=rtol, atol=rtol * 1e-2)
        eager.zero_grad()
        comp_model.zero_grad()
    entries = compiled._compiled.entries.values()
    assert any(getattr(e, "joint", None) is not None for e in entries), "the backward was not compiled"
    assert compiled._compiled.traces == 1


def test_compiled_backward_with_create_graph_is_differentiable():
    """create_graph=True through a compiled call gives eager's gradient, with a history (the
    second-order values: tests/test_graph_breaks.py)."""
    m = _mlp(eagerc.float64)
    c = eagerc.compile(m)
    x, y = _data(eagerc.float64)
    c(x)  # trace
    got = eagerc.autograd.grad(c(x).sum(), list(m.parameters()), create_graph=True)
    want = eagerc.autograd.grad(m(x).sum(), list(m.parameters()), create_graph=True)
    assert c.traces == 1 and all(g.grad_fn is not None for g in got[:-1])  # (the last bias' gradient is constant)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("make_opt", [
    lambda ps: eagerc.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    lambda ps: eagerc.optim.Adam(ps, lr=1e-2),
    lambda ps: eagerc.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    lambda ps: eagerc.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True, weight_decay=1e-3),
    lambda ps: eagerc.optim.RMSprop(ps, lr=1e-2),
    lambda ps: eagerc.optim.Adagrad(ps, lr=0.1, lr_decay=0.01, weight_decay=1e-3),
    lambda ps: eagerc.optim.Adadelta(ps, lr=0.5, rho=0.8, weight_decay=1e-3),
    lambda ps: eagerc.optim.Adamax(ps, lr=1e-2, weight_decay=1e-3),
    lambda ps: eagerc.optim.NAdam(ps, lr=1e-2, weight_decay=1e-3),
    lambda ps: eagerc.optim.NAdam(ps, lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True),
    lambda ps: eagerc.optim.RAdam(ps, lr=1e-2, weight_decay=1e-3),  # rho_t crosses 5 at step 6
    lambda ps: eagerc.optim.RAdam(ps, lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True),
    lambda ps: eagerc.optim.ASGD(ps, lr=0.05, t0=8, lambd=1e-3, weight_decay=1e-3),  # averaging from step 9
    lambda ps: eagerc.optim.Rprop(ps, lr=1e-2, step_sizes=(1e-4, 0.05)),
    lambda ps: eagerc.optim.Rprop(ps, lr=1e-2, maximize=True),
], ids=["sgd_momentum", "adam", "adamw", "rmsprop_centered_momentum", "rmsprop", "adagrad", "adadelta", "adamax",
        "nadam", "nadam_decoupled", "radam", "radam_decoupled", "asgd_averaging", "rprop", "rprop_maximize"])
def test_twenty_compiled_training_steps_match_eager(make_opt):
    eager = _mlp(eagerc.float64)
    comp_model = copy.deepcopy(eager)
    opt_e, opt_c = make_opt(eager.parameters()), make_opt(comp_model.parameters())

    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    compiled_step = eagerc.compile(lambda x, y: step(comp_model, opt_c, x, y))
    for i in range(20):
        x, y = _data(eagerc.float64, seed=i)
        le = step(eager, opt_e, x, y)
        lc = compiled_step(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-9)
    for (n, p), q in zip(eager.named_parameters(), comp_model.parameters()):
        np.testing.assert_allclose(q.numpy(force=True), p.numpy(force=True), rtol=1e-9, atol=1e-12, err_msg=n)
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=n)
    cf = compiled_step
    graphs = [e for e in cf.entries.values() if e.graph is not None and not e.eager]
    assert graphs, "the training step was never compiled"
    # the first call traces, its step making the optimizer's state (SGD's momentum buffer too)
    assert cf.traces == 1, cf.log


def test_gradients_changed_in_place_after_backward_are_the_grad_a_compiled_step_leaves():
    """Scaling .grad in place after backward() (as GradScaler.unscale_ does): the compiled step's
    .grad is the changed gradient, as eager's (the parameters read it either way)."""
    eager = _mlp(eagerc.float64)
    comp_model = copy.deepcopy(eager)
    opt_e, opt_c = eagerc.optim.SGD(eager.parameters(), lr=0.1), eagerc.optim.SGD(comp_model.parameters(), lr=0.1)

    def step(model, opt, x, y):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        for p in model.parameters():
            p.grad.mul_(0.5)
        opt.step()
    compiled_step = eagerc.compile(lambda x, y: step(comp_model, opt_c, x, y), backend="numpy")
    for i in range(3):
        x, y = _data(eagerc.float64, seed=i)
        step(eager, opt_e, x, y)
        compiled_step(x, y)
        for (n, p), q in zip(eager.named_parameters(), comp_model.parameters()):
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-12, atol=1e-15, err_msg=n)
            np.testing.assert_allclose(q.numpy(force=True), p.numpy(force=True), rtol=1e-12, atol=1e-15, err_msg=n)
    assert compiled_step.traces == 1 and not any(e.eager for e in compiled_step.entries.values())


def test_dropout_in_compiled_training_uses_the_eager_random_stream():
    def build():
        eagerc.manual_seed(3)
        return nn.Sequential(nn.Linear(6, 32), nn.Dropout(0.5), nn.Linear(32, 4)).double()
    eager, comp_model = build(), build()
    compiled = eagerc.compile(comp_model)
    eagerc.manual_seed(11)
    outs_e = [eager(_data(eagerc.float64, seed=i)[0]).detach().numpy() for i in range(3)]
    eagerc.manual_seed(11)
    outs_c = [compiled(_data(eagerc.float64, seed=i)[0]).detach().numpy() for i in range(3)]
    for a, b in zip(outs_e, outs_c):
        np.testing.assert_array_equal(a, b)
