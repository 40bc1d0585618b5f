"""Never silently wrong: a corpus of programs that change, between calls of a compiled
function, something the trace read from Python -- optimizer options, modules, globals,
closures, numpy arrays, sizes -- or that have Python side effects.

Every program runs twice from the same seed: once eagerly (the reference) and once with
its functions compiled (backends numpy, interpreter, c, and cuda with its kernels run by
tests/cuda_emulator.py). Every observation (outputs of every call, parameters, printed
lines, Python state) must agree: the compiled run may retrace or fall back to eager
mode with a warning, but it may never give another answer. Programs also check the
mechanism where it matters (a scheduler costs no retrace; a swapped module retraces and
says why).
"""
import copy
import io
import logging
import math
import random
import sys
import types
import warnings
from collections import OrderedDict
from contextlib import redirect_stdout
from types import SimpleNamespace

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.runtime import kernel_cache

from cuda_emulator import EmulatedRawModule

F64 = eagerc.float64
PROGRAMS = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


class World:
    """What a program sees: `compile` (identity in the eager world) and checks that only
    make sense on compiled functions."""

    def __init__(self, backend):
        self.backend = backend
        self.compiled = []

    @property
    def is_compiled(self):
        return self.backend is not None

    def compile(self, fn, **options):
        if self.backend is None:
            return fn
        c = eagerc.compile(fn, backend=self.backend, **options)
        self.compiled.append(c)
        return c

    def traces(self, c):
        """How many times compiled function c traced (None in the eager world)."""
        return c.traces if self.is_compiled else None

    def log(self, c):
        return "\n".join(c.log) if self.is_compiled else ""


def _data(n=8, d=6, seed=0, classes=4):
    rng = np.random.default_rng(seed)
    return (eagerc.tensor(rng.standard_normal((n, d)), dtype=F64),
            eagerc.tensor(rng.integers(0, classes, n)))


def _mlp(d=6, h=12, out=4, seed=0):
    eagerc.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, h), nn.Tanh(), nn.Linear(h, out)).to(F64)


def _params(m):
    return [p.detach().clone() for p in m.parameters()]


def _train(w, model, opt, steps, between=None, x_seed=0):
    """A compiled training step called `steps` times; `between(i)` runs after call i."""
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    c = w.compile(step)
    out = []
    for i in range(steps):
        x, y = _data(seed=x_seed + i)
        out.append(c(x, y))
        if between is not None:
            between(i)
    return c, out + _params(model)


# ---------------------------------------------------------------- optimizer options

@program
def lr_by_hand(w):
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=0.1)
    c, obs = _train(w, m, opt, 6, lambda i: opt.param_groups[0].__setitem__("lr", [0.0, 0.5, 0.01, 1.0, 0.2, 0.1][i]))
    if w.is_compiled:
        assert w.traces(c) == 1, w.log(c)  # SGD without momentum has no state: traced once, never again
    return obs


@program
def lr_step_scheduler(w):
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=0.2, momentum=0.9)
    sched = eagerc.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.3)
    c, obs = _train(w, m, opt, 7, lambda i: sched.step())
    if w.is_compiled:
        assert w.traces(c) == 1, w.log(c)  # the traced first step makes the momentum buffers
    return obs


@program
def adam_cosine_scheduler(w):
    m = _mlp()
    opt = eagerc.optim.Adam(m.parameters(), lr=0.05)
    sched = eagerc.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5)
    c, obs = _train(w, m, opt, 7, lambda i: sched.step())
    if w.is_compiled:
        assert w.traces(c) == 1, w.log(c)  # the first step makes Adam's state while traced
    return obs


@program
def adamw_weight_decay_changes(w):
    m = _mlp()
    opt = eagerc.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.1)
    return _train(w, m, opt, 6, lambda i: opt.param_groups[0].__setitem__("weight_decay", [0.5, 0.0, 0.2, 0.0, 1.0, 0][i]))[1]


@program
def adam_l2_weight_decay_from_zero(w):
    m = _mlp()
    opt = eagerc.optim.Adam(m.parameters(), lr=0.01)
    return _train(w, m, opt, 5, lambda i: opt.param_groups[0].__setitem__("weight_decay", 0.3 if i == 1 else 0.0))[1]


@program
def adam_betas_change(w):
    m = _mlp()
    opt = eagerc.optim.Adam(m.parameters(), lr=0.02)
    c, obs = _train(w, m, opt, 6, lambda i: opt.param_groups[0].__setitem__("betas", (0.8 - 0.1 * i, 0.99)))
    if w.is_compiled:
        assert w.traces(c) == 1, w.log(c)
    return obs


@program
def adam_eps_change(w):
    m = _mlp()
    opt = eagerc.optim.Adam(m.parameters(), lr=0.02, eps=1e-8)
    return _train(w, m, opt, 5, lambda i: opt.param_groups[0].__setitem__("eps", 10.0 ** -(i + 1)))[1]


@program
def sgd_momentum_changes(w):
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    return _train(w, m, opt, 6, lambda i: opt.param_groups[0].__setitem__("momentum", 0.5 + 0.05 * i))[1]


@program
def sgd_momentum_switched_on(w):
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=0.1)
    return _train(w, m, opt, 6, lambda i: opt.param_groups[0].__setitem__("momentum", 0.9 if i >= 2 else 0.0))[1]


@program
def sgd_dampening_and_nesterov_toggle(w):
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    def between(i):
        g = opt.param_groups[0]
        g["dampening"] = 0.5 if i == 1 else 0.0
        g["nesterov"] = i >= 3
    return _train(w, m, opt, 6, between)[1]


@program
def adam_maximize_toggle(w):
    m = _mlp()
    opt = eagerc.optim.Adam(m.parameters(), lr=0.01)
    return _train(w, m, opt, 5, lambda i: opt.param_groups[0].__setitem__("maximize", i == 2))[1]


@program
def one_cycle_lr_and_momentum(w):
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    sched = eagerc.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=10)
    c, obs = _train(w, m, opt, 8, lambda i: sched.step())
    if w.is_compiled:
        assert w.traces(c) == 1, w.log(c)  # lr and momentum are read at every call
    return obs


@program
def two_param_groups_one_changes(w):
    m = _mlp()
    opt = eagerc.optim.SGD([{"params": m[0].parameters(), "lr": 0.1},
                            {"params": m[2].parameters(), "lr": 0.01, "momentum": 0.5}], lr=0.05)
    return _train(w, m, opt, 6, lambda i: opt.param_groups[1].__setitem__("lr", 0.02 * (i + 1)))[1]


OPT_GLOBAL = None


@program
def optimizer_swapped(w):
    global OPT_GLOBAL
    m = _mlp()
    OPT_GLOBAL = eagerc.optim.SGD(m.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(m(x), y)
        OPT_GLOBAL.zero_grad()
        loss.backward()
        OPT_GLOBAL.step()
        return loss.detach()
    c = w.compile(step)
    out = []
    for i in range(6):
        if i == 3:
            OPT_GLOBAL = eagerc.optim.Adam(m.parameters(), lr=0.05)
        out.append(c(*_data(seed=i)))
    if w.is_compiled:
        assert "OPT_GLOBAL" in w.log(c), w.log(c)
    return out + _params(m)


@program
def param_group_added(w):
    eagerc.manual_seed(0)
    a, b = nn.Linear(6, 6).to(F64), nn.Linear(6, 4).to(F64)
    opt = eagerc.optim.SGD(a.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(b(a(x).tanh()), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    c = w.compile(step)
    out = []
    for i in range(5):
        if i == 2:
            opt.add_param_group({"params": b.parameters(), "lr": 0.3})
        out.append(c(*_data(seed=i)))
    return out + _params(a) + _params(b)


@program
def optimizer_load_state_dict(w):
    m = _mlp()
    opt = eagerc.optim.Adam(m.parameters(), lr=0.02)
    saved = {}

    def between(i):
        if i == 1:
            saved["sd"] = copy.deepcopy(opt.state_dict())
        if i == 3:
            opt.load_state_dict(saved["sd"])
    return _train(w, m, opt, 6, between)[1]


@program
def hand_written_sgd_through_data(w):
    m = _mlp()
    lr = [0.1]

    def step(x, y):
        loss = F.cross_entropy(m(x), y)
        m.zero_grad()
        loss.backward()
        for p in m.parameters():
            p.data.add_(p.grad, alpha=-lr[0])
        return loss.detach()
    c = w.compile(step)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            out.append(c(*_data(seed=i)))
            lr[0] *= 0.5
    return out + _params(m)


@program
def numpy_code_on_data(w):
    c = w.compile(lambda x: np.tanh(x.data) * 2 - x)
    return _x_calls(c, 3)


@program
def scheduler_inside_the_step(w):
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=0.2)
    sched = eagerc.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)

    def step(x, y):
        loss = F.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach()
    c = w.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = [c(*_data(seed=i)) for i in range(4)]
    return out + _params(m) + [opt.param_groups[0]["lr"]]


@program
def rmsprop_with_a_schedule(w):
    m = _mlp()
    opt = eagerc.optim.RMSprop(m.parameters(), lr=0.01, momentum=0.9, centered=True)
    sched = eagerc.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    c, obs = _train(w, m, opt, 6, lambda i: sched.step())
    if w.is_compiled:
        assert w.traces(c) == 1, w.log(c)  # no graph break, its state made while traced, like Adam's
    return obs


@program
def adagrad_lr_decay_changes(w):
    m = _mlp()
    opt = eagerc.optim.Adagrad(m.parameters(), lr=0.1)
    c, obs = _train(w, m, opt, 5, lambda i: opt.param_groups[0].__setitem__("lr_decay", 0.1 * i))
    if w.is_compiled:
        assert w.traces(c) <= 2, w.log(c)
    return obs


@program
def lr_as_int(w):
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=1)
    return _train(w, m, opt, 4, lambda i: opt.param_groups[0].__setitem__("lr", [0, 2, 1, 0][i]))[1]


# ---------------------------------------------------------------- modules

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.scale = 2.0
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x)) * self.scale


def _net():
    eagerc.manual_seed(0)
    return Net().to(F64)


def _calls(c, n=4, between=None, seed=0, grad=False):
    """n calls of c, `between(i)` after call i; each call made twice: when `between` changed what
    c reads, the first retraces (eager's results) and only the second runs the program."""
    out = []
    for i in range(n):
        x, _ = _data(seed=seed + i)
        with eagerc.set_grad_enabled(grad):
            out.append(c(x))
            out.append(c(x))
        if between is not None:
            between(i)
    return out


@program
def submodule_replaced(w):
    m = _net()
    c = w.compile(m)

    def between(i):
        if i == 1:
            eagerc.manual_seed(5)
            m.fc = nn.Linear(6, 4).to(F64)
    out = _calls(c, 4, between)
    if w.is_compiled:
        assert "submodule 'fc' replaced" in w.log(c), w.log(c)
    return out


@program
def sequential_item_replaced(w):
    m = _mlp()
    c = w.compile(m)

    def between(i):
        if i == 1:
            m[1] = nn.ReLU()
    return _calls(c, 4, between)


@program
def parameter_replaced(w):
    m = _net()
    c = w.compile(m)

    def between(i):
        if i == 0:
            m.fc.weight = nn.Parameter(eagerc.ones(4, 6, dtype=F64))
    return _calls(c, 3, between)


@program
def plain_attribute_changed(w):
    m = _net()
    c = w.compile(m)
    out = _calls(c, 4, lambda i: setattr(m, "scale", 3.0 + i))
    if w.is_compiled:
        assert "scale" in w.log(c), w.log(c)
    return out


@program
def dropout_p_changed(w):
    eagerc.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5)).to(F64).train()
    c = w.compile(m)
    eagerc.manual_seed(1)
    return _calls(c, 4, lambda i: setattr(m[1], "p", [0.1, 0.9, 0.0, 0.3][i]))


@program
def leaky_relu_slope_changed(w):
    eagerc.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.01)).to(F64)
    c = w.compile(m)
    return _calls(c, 4, lambda i: setattr(m[1], "negative_slope", 0.1 * (i + 1)))


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).tanh()
        return x


@program
def module_list_appended(w):
    eagerc.manual_seed(0)
    m = Stack().to(F64)
    c = w.compile(m)

    def between(i):
        eagerc.manual_seed(10 + i)
        m.layers.append(nn.Linear(6, 6).to(F64))
    return _calls(c, 4, between)


@program
def forward_hook_added_then_removed(w):
    m = _net()
    c = w.compile(m)
    handles = []

    def between(i):
        if i == 0:
            handles.append(m.fc.register_forward_hook(lambda mod, args, out: out * 10))
        if i == 2:
            handles[0].remove()
    return _calls(c, 4, between)


@program
def forward_pre_hook_added(w):
    m = _net()
    c = w.compile(m)

    def between(i):
        if i == 1:
            m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    return _calls(c, 4, between)


@program
def full_backward_hook_added_then_removed(w):
    """The hook dicts are module members: adding one moves the module state epoch, and the
    gradients it scales are the compiled backward's."""
    m = _net()
    c = w.compile(m)
    handles, out = [], []
    for i in range(4):
        x, _ = _data(seed=i)
        m.zero_grad()
        c(x).sum().backward()
        out.append([p.grad.clone() for p in m.parameters()])
        if i == 0:
            handles.append(m.act.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 3,)))
        if i == 2:
            handles[0].remove()
    return out


class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.register_buffer("shift", eagerc.zeros(4, dtype=F64))

    def forward(self, x):
        return self.fc(x) + self.shift


@program
def buffer_replaced(w):
    eagerc.manual_seed(0)
    m = WithBuffer().to(F64)
    c = w.compile(m)

    def between(i):
        m.register_buffer("shift", eagerc.full((4,), float(i + 1), dtype=F64))
    return _calls(c, 4, between)


class Optional(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.extra = nn.Linear(4, 4)

    def forward(self, x):
        x = self.fc(x)
        return x if self.extra is None else self.extra(x)


@program
def submodule_set_to_none(w):
    eagerc.manual_seed(0)
    m = Optional().to(F64)
    c = w.compile(m)

    def between(i):
        if i == 1:
            m.extra = None
    return _calls(c, 4, between)


@program
def model_cast_to_float32(w):
    m = _net()
    c = w.compile(m)
    out = []
    for i in range(3):
        x, _ = _data(seed=i)
        if i == 2:
            m.float()
            x = x.float()
        with eagerc.no_grad():
            out.append(c(x))
    return out


@program
def parameter_frozen(w):
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=0.1)
    return _train(w, m, opt, 5, lambda i: m[0].weight.requires_grad_(i < 2))[1]


class Configured(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.cfg = {"scale": 1.0, "bias": 0.0}
        self.powers = [1, 2]

    def forward(self, x):
        y = self.fc(x) * self.cfg["scale"] + self.cfg["bias"]
        return sum(y ** p for p in self.powers)


@program
def module_dict_attribute_changed_in_place(w):
    eagerc.manual_seed(0)
    m = Configured().to(F64)
    c = w.compile(m)

    def between(i):
        m.cfg["scale"] = 2.0 + i
        if i == 2:
            m.powers.append(3)
    return _calls(c, 5, between)


@program
def train_eval_toggle(w):
    eagerc.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Dropout(0.3)).to(F64)
    c = w.compile(m)
    eagerc.manual_seed(2)
    out = _calls(c, 6, lambda i: m.train(i % 2 == 1))
    return out + [m[1].running_mean, m[1].running_var]


# ---------------------------------------------------------------- globals and closures

SCALE = 2.0
ACT = F.tanh
W_GLOBAL = None
FLAG = True
CFG = {"k": 1.0}
CFG_LIST = [1.0, 2.0]
NS = SimpleNamespace(gain=1.0, offset=0.0)
MODEL_GLOBAL = None


def _helper_scale(x):
    return x * SCALE


def _helper_weight(x):
    return x * W_GLOBAL


def _x_calls(c, n=4, between=None, seed=0):
    """As _calls: each call twice, so the program traced after `between` runs too."""
    out = []
    for i in range(n):
        x = _data(seed=seed + i)[0]
        out.append(c(x))
        out.append(c(x))
        if between is not None:
            between(i)
    return out


@program
def global_scalar_in_helper(w):
    global SCALE
    SCALE = 2.0
    c = w.compile(lambda x: _helper_scale(x) + 1)

    def between(i):
        global SCALE
        SCALE = 3.0 + i
    return _x_calls(c, 4, between)


@program
def global_int_becomes_float(w):
    global SCALE
    SCALE = 2
    c = w.compile(lambda x: (x * 0).long() * SCALE)

    def between(i):
        global SCALE
        SCALE = 2.0 if i == 0 else 2
    return _x_calls(c, 3, between)


@program
def global_function_rebound(w):
    global ACT
    ACT = F.tanh
    c = w.compile(lambda x: ACT(x) * 2)

    def between(i):
        global ACT
        ACT = [F.relu, F.gelu, F.sigmoid][i % 3]
    return _x_calls(c, 4, between)


@program
def global_tensor_rebound(w):
    global W_GLOBAL
    W_GLOBAL = eagerc.ones(6, dtype=F64)
    c = w.compile(lambda x: x * W_GLOBAL)

    def between(i):
        global W_GLOBAL
        W_GLOBAL = eagerc.full((6,), float(i + 2), dtype=F64)
    return _x_calls(c, 4, between)


@program
def global_tensor_rebound_in_helper(w):
    global W_GLOBAL
    W_GLOBAL = eagerc.ones(6, dtype=F64)
    c = w.compile(lambda x: _helper_weight(x).sum(0))

    def between(i):
        global W_GLOBAL
        W_GLOBAL = eagerc.full((6,), float(i + 2), dtype=F64)
    return _x_calls(c, 3, between)


@program
def global_tensor_changed_in_place(w):
    global W_GLOBAL
    W_GLOBAL = eagerc.ones(6, dtype=F64)
    c = w.compile(lambda x: x * W_GLOBAL)
    return _x_calls(c, 4, lambda i: W_GLOBAL.mul_(2))


@program
def global_model_rebound(w):
    global MODEL_GLOBAL
    MODEL_GLOBAL = _net()
    c = w.compile(lambda x: MODEL_GLOBAL(x) + 1)

    def between(i):
        global MODEL_GLOBAL
        if i == 1:
            eagerc.manual_seed(9)
            MODEL_GLOBAL = Net().to(F64)
    with eagerc.no_grad():
        return _x_calls(c, 4, between)


@program
def global_flag_branch(w):
    global FLAG
    FLAG = True

    def f(x):
        return x.exp() if FLAG else x.cos()
    c = w.compile(f)

    def between(i):
        global FLAG
        FLAG = not FLAG
    return _x_calls(c, 5, between)


@program
def global_dict_changed_in_place(w):
    CFG["k"] = 1.0
    c = w.compile(lambda x: x * CFG["k"])
    return _x_calls(c, 4, lambda i: CFG.__setitem__("k", 2.0 + i))


@program
def global_list_changed_in_place(w):
    CFG_LIST[:] = [1.0, 2.0]
    c = w.compile(lambda x: x * CFG_LIST[0] + CFG_LIST[-1])

    def between(i):
        CFG_LIST[0] = 5.0 + i
        if i == 1:
            CFG_LIST.append(7.0)
    return _x_calls(c, 4, between)


@program
def namespace_config_changed(w):
    NS.gain, NS.offset = 1.0, 0.0
    c = w.compile(lambda x: x * NS.gain + NS.offset)

    def between(i):
        NS.gain = 2.0 + i
        if i == 2:
            NS.offset = 1.0
    return _x_calls(c, 4, between)


@program
def closure_scalar_rebound(w):
    k = 1.0

    def f(x):
        return x * k

    c = w.compile(f)
    out = []
    for i in range(4):
        x = _data(seed=i)[0]
        out += [c(x), c(x)]   # the first of a new value retraces (eager's results), the second runs it
        k = 2.0 + i  # noqa: F841 -- the closure cell changes
    return out


@program
def closure_tensor_rebound(w):
    t = eagerc.ones(6, dtype=F64)

    def f(x):
        return x + t

    c = w.compile(f)
    out = []
    for i in range(4):
        x = _data(seed=i)[0]
        out += [c(x), c(x)]   # the first of a new tensor retraces (eager's results), the second runs it
        t = eagerc.full((6,), float(i), dtype=F64)  # noqa: F841
    return out


def _outer_factory(scale):
    def inner(x):
        return x * scale
    return inner


HELPER = _outer_factory(2.0)


@program
def global_closure_helper_rebound(w):
    global HELPER
    HELPER = _outer_factory(2.0)
    c = w.compile(lambda x: HELPER(x) - 1)

    def between(i):
        global HELPER
        HELPER = _outer_factory(3.0 + i)
    return _x_calls(c, 4, between)


@program
def default_argument_changed(w):
    def f(x, scale=2.0):
        return x * scale
    c = w.compile(f)

    def between(i):
        f.__defaults__ = (float(i + 3),)
    return _x_calls(c, 3, between)


@program
def default_dtype_changed(w):
    c = w.compile(lambda x: x.sum() + eagerc.ones(3).sum())
    out = []
    try:
        for i in range(3):
            if i == 1:
                eagerc.set_default_dtype(eagerc.float64)
            out.append(c(_data(seed=i)[0].float()))
    finally:
        eagerc.set_default_dtype(eagerc.float32)
    return out


@program
def scalar_keyword_argument(w):
    c = w.compile(lambda x, scale=1.0: x * scale)
    # each scale twice: a new one retraces (eager's results), the second call runs its program
    return [c(_data(seed=i)[0], scale=s) for i, s in enumerate([1.0, 2.0, 2, True]) for _ in range(2)]


# ---------------------------------------------------------------- numpy arrays

ARR = np.ones(6)
BIG = np.ones((200, 64))


@program
def numpy_global_changed_in_place(w):
    ARR[:] = 1.0
    c = w.compile(lambda x: x * eagerc.tensor(ARR))
    return _x_calls(c, 4, lambda i: ARR.__setitem__(slice(None), float(i + 2)))


@program
def numpy_global_rebound(w):
    global ARR
    ARR = np.ones(6)
    c = w.compile(lambda x: x + eagerc.tensor(ARR))

    def between(i):
        global ARR
        ARR = np.full(6, float(i))
    return _x_calls(c, 4, between)


@program
def numpy_large_global_changed_in_place(w):
    BIG[:] = 1.0
    c = w.compile(lambda x: eagerc.tensor(BIG).sum() * x)
    return _x_calls(c, 3, lambda i: BIG.__setitem__((0, 0), float(i + 5)))


@program
def tensor_constructor_of_a_global_array(w):
    ARR[:] = 1.0
    c = w.compile(lambda x: x * eagerc.Tensor(ARR).double())
    return _x_calls(c, 3, lambda i: ARR.__setitem__(1, float(i - 3)))


@program
def array_operand_changed_in_place(w):
    ARR[:] = 1.0
    c = w.compile(lambda x: x - ARR)
    return _x_calls(c, 3, lambda i: ARR.__setitem__(2, float(i * 4)))


@program
def from_numpy_global_changed_in_place(w):
    ARR[:] = 1.0
    c = w.compile(lambda x: x * eagerc.from_numpy(ARR))
    return _x_calls(c, 3, lambda i: ARR.__setitem__(0, float(i + 7)))


@program
def numpy_random_inside(w):
    np.random.seed(0)
    c = w.compile(lambda x: x + eagerc.tensor(np.random.rand(6)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _x_calls(c, 3)


@program
def python_random_inside(w):
    random.seed(0)
    c = w.compile(lambda x: x * random.random())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _x_calls(c, 3)


@program
def tensor_of_a_traced_tensor(w):
    c = w.compile(lambda x: eagerc.tensor(x) * 2 + x)
    return _x_calls(c, 3)


# ---------------------------------------------------------------- Python side effects

HISTORY = []
COUNT = 0


def _quiet(fn):
    def run(*a):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*a)
    return run


@program
def prints_inside(w):
    def f(x):
        print("called with", tuple(x.shape))
        return x * 2
    c = w.compile(f)
    buf = io.StringIO()
    with redirect_stdout(buf):
        out = _quiet(_x_calls)(c, 3)
    return out + [buf.getvalue()]


@program
def logs_inside(w):
    logger = logging.getLogger("never_silent_test")
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    h = Keep()
    logger.addHandler(h)
    logger.setLevel(logging.INFO)

    def f(x):
        logger.info("step")
        return x + 1
    c = w.compile(f)
    try:
        out = _quiet(_x_calls)(c, 3)
    finally:
        logger.removeHandler(h)
    return out + [len(records)]


@program
def appends_to_global_list(w):
    HISTORY.clear()

    def f(x):
        HISTORY.append(x.shape[0])
        return x * 3
    c = w.compile(f)
    return _quiet(_x_calls)(c, 3) + [list(HISTORY)]


@program
def increments_global_counter(w):
    global COUNT
    COUNT = 0

    def f(x):
        global COUNT
        COUNT += 1
        return x * COUNT
    c = w.compile(f)
    return _quiet(_x_calls)(c, 4) + [COUNT]


@program
def increments_nonlocal_counter(w):
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x + n
    c = w.compile(f)
    out = _quiet(_x_calls)(c, 3)
    return out + [n]


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.calls = 0
        self.seen = []

    def forward(self, x):
        self.calls += 1
        self.seen.append(self.calls)
        return self.fc(x) * self.calls


@program
def module_counts_its_calls(w):
    eagerc.manual_seed(0)
    m = Counting().to(F64)
    c = w.compile(m)
    with eagerc.no_grad():
        out = _quiet(_x_calls)(c, 3)
    return out + [m.calls, list(m.seen)]


class KeepsLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.last = None

    def forward(self, x):
        h = self.fc(x)
        self.last = h.detach()
        return h.tanh()


@program
def module_stores_a_tensor(w):
    eagerc.manual_seed(0)
    m = KeepsLast().to(F64)
    c = w.compile(m)
    out = []
    with eagerc.no_grad():
        for i in range(3):
            out.append(_quiet(c)(_data(seed=i)[0]))
            out.append(m.last)
    return out


CACHE = {}


@program
def writes_global_dict(w):
    CACHE.clear()

    def f(x):
        CACHE[len(CACHE)] = 1
        return x * len(CACHE)
    c = w.compile(f)
    return _quiet(_x_calls)(c, 3) + [dict(CACHE)]


@program
def appends_to_argument_list(w):
    def f(x, acc):
        acc.append(1)
        return x * len(acc)
    c = w.compile(f)
    acc = []
    out = [_quiet(c)(_data(seed=i)[0], acc) for i in range(3)]
    return out + [len(acc)]


@program
def sets_module_mode_inside(w):
    eagerc.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5)).to(F64)

    def f(x):
        m.eval()
        return m(x)
    c = w.compile(f)
    m.train()
    out = []
    with eagerc.no_grad():
        for i in range(3):
            out.append(_quiet(c)(_data(seed=i)[0]))
            m.train()
    return out


# ---------------------------------------------------------------- sizes
# The first two calls differ only in a size, so a symbolic graph is built from a trace at a
# synthetic size (11 here) on the same side of each branch; later calls cross the branch.

SIZES = (3, 4, 5, 9, 35, 4, 40)


@program
def size_arithmetic_branch(w):
    def f(x):
        n = x.shape[0] - 1
        if n > 30:
            return x.sum(0)
        return x.mean(0)
    c = w.compile(f)
    return [c(_data(n=n)[0]) for n in SIZES]


@program
def intermediate_size_branch(w):
    def f(x):
        h = x * 2
        if h.shape[0] > 30:
            return h.amax(0)
        return h.amin(0)
    c = w.compile(f)
    return [c(_data(n=n)[0]) for n in SIZES]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        B, T, C = x.shape
        assert T <= 30, "sequence too long"
        return self.fc(x)


@program
def assert_on_submodule_size(w):
    eagerc.manual_seed(0)
    blk = Block().to(F64)
    c = w.compile(lambda x: blk(x * 1))
    out = []
    with eagerc.no_grad():
        for t in SIZES:
            x = eagerc.randn(2, t, 6, dtype=F64)
            try:
                out.append(c(x))
            except AssertionError as e:
                out.append(f"AssertionError: {e}")
    return out


@program
def floor_division_of_a_size(w):
    def f(x):
        half = x.shape[0] // 2
        return x[:half].sum(0) if half > 15 else x.sum(0) * 0
    c = w.compile(f)
    return [c(_data(n=n)[0]) for n in SIZES]


@program
def size_times_constant_compared(w):
    def f(x):
        if x.size(0) * 3 > 90:
            return x.exp().sum(0)
        return x.sum(0)
    c = w.compile(f)
    return [c(_data(n=n)[0]) for n in SIZES]


@program
def size_product_compared(w):
    def f(x):
        if x.shape[0] * x.shape[1] > 180:
            return x.exp().sum(0)
        return x.sum(0)
    c = w.compile(f)
    return [c(_data(n=n)[0]) for n in SIZES]


@program
def min_of_size_slices(w):
    c = w.compile(lambda x: x[:min(x.shape[0], 32)].sum(0))
    return [c(_data(n=n)[0]) for n in SIZES]


@program
def len_minus_one(w):
    def f(x):
        return x[1:].sum(0) if len(x) - 1 >= 30 else x[0]
    c = w.compile(f)
    return [c(_data(n=n)[0]) for n in SIZES]


@program
def numel_compared(w):
    def f(x):
        return x.sum() if x.numel() > 200 else x.amax()
    c = w.compile(f)
    return [c(_data(n=n)[0]) for n in SIZES]


@program
def sqrt_of_a_size(w):
    c = w.compile(lambda x: x / math.sqrt(x.shape[0]))
    return [c(_data(n=n)[0]) for n in SIZES]


@program
def loop_over_a_size(w):
    def f(x):
        acc = x[0]
        for i in range(1, x.shape[0]):
            acc = acc * 0.5 + x[i]
        return acc
    c = w.compile(f)
    return [c(_data(n=n)[0]) for n in (2, 3, 4, 6, 3)]


@program
def dynamic_true_batch_branch(w):
    def f(x):
        return x.cumsum(0) if x.shape[0] >= 30 else x.flip(0)
    c = w.compile(f, dynamic=True)
    return [c(_data(n=n)[0]) for n in SIZES]


@program
def reshape_with_size_arithmetic(w):
    def f(x):
        b = x.shape[0]
        y = x.reshape(b * 2, 3)
        return y[: b * 2 - 1].sum(0) if b + 1 > 30 else y.sum(0)
    c = w.compile(f)
    return [c(_data(n=n)[0]) for n in SIZES]


# ---------------------------------------------------------------- modes and randomness

@program
def grad_mode_toggle(w):
    m = _net()
    c = w.compile(m)
    out = []
    for i in range(4):
        x, _ = _data(seed=i)
        with eagerc.set_grad_enabled(i % 2 == 0):
            y = c(x)
        out.append(y.detach())
        out.append(y.requires_grad)
    return out


@program
def reseeded_dropout(w):
    eagerc.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5)).to(F64).train()
    c = w.compile(m)

    def between(i):
        eagerc.manual_seed(100 + i)
    with eagerc.no_grad():
        return _calls(c, 4, between)


@program
def sampling_with_multinomial(w):
    """char-GPT / nanoGPT / makemore samplers: softmax, top-k filtering, multinomial with the default
    generator and a seeded one, at two batch sizes (the second makes sizes symbolic)."""
    eagerc.manual_seed(0)
    head = nn.Linear(6, 11).to(F64)
    g = eagerc.Generator().manual_seed(2147483647)

    def sample(x, gen):
        logits = head(x)
        v, _ = eagerc.topk(logits, 4)
        logits = logits.masked_fill(logits < v[:, [-1]], -math.inf)
        probs = F.softmax(logits, dim=-1)
        return (eagerc.multinomial(probs, num_samples=1), eagerc.multinomial(probs, 3, replacement=True, generator=gen),
                probs.multinomial(2, generator=gen))
    c = w.compile(sample)
    out = []
    with eagerc.no_grad():
        for i, n in enumerate((5, 5, 7, 9, 7)):
            x = eagerc.tensor(np.random.default_rng(i).standard_normal((n, 6)), dtype=F64)
            out.append(c(x, g))
    if w.is_compiled:  # one trace, one retrace that makes the batch size symbolic: no graph break
        assert w.traces(c) == 2 and "graph break" not in w.log(c), w.log(c)
    return out + [tuple(int(v) for v in g.get_state()), tuple(int(v) for v in eagerc.default_generator.get_state())]


@program
def data_dependent_sizes_unique_bincount(w):
    def counts(x):
        values, inverse, n = eagerc.unique(x, return_inverse=True, return_counts=True)
        return values * 2, inverse, n, eagerc.bincount(x, minlength=3), x.sort().values + 1
    c = w.compile(counts)
    return [c(eagerc.tensor(np.random.default_rng(i).integers(0, 4 + i, 9))) for i in range(3)]


@program
def custom_function_inside(w):
    class Square(eagerc.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g
    c = w.compile(lambda x: Square.apply(x).sum())
    with eagerc.no_grad():
        return _x_calls(c, 3)


@program
def training_step_with_dropout_and_lr_schedule(w):
    eagerc.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 4)).to(F64)
    opt = eagerc.optim.AdamW(m.parameters(), lr=0.01)
    sched = eagerc.optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0 / (1 + e))
    eagerc.manual_seed(3)
    c, obs = _train(w, m, opt, 6, lambda i: sched.step())
    if w.is_compiled:
        assert w.traces(c) == 1, w.log(c)
    return obs


# ---------------------------------------------------------------- the mechanisms, one by one

def test_a_value_that_changes_every_call_ends_in_eager_mode_with_one_warning():
    global SCALE
    SCALE = 1.0
    c = eagerc.compile(lambda x: _helper_scale(x))
    x = eagerc.ones(3)
    with pytest.warns(UserWarning, match="keeps changing.*global.*SCALE: 8.0 -> 9.0"):
        for i in range(12):
            SCALE = float(i)
            np.testing.assert_array_equal(c(x).numpy(), np.full(3, float(i), np.float32))
    assert c.traces == 9  # the first trace and 8 retraces; then eager mode for this key
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        SCALE = 99.0
        np.testing.assert_array_equal(c(x).numpy(), np.full(3, 99.0, np.float32))


def test_retrace_reasons_name_the_object_and_its_values():
    global SCALE
    SCALE = 2.0
    c = eagerc.compile(lambda x: _helper_scale(x))
    c(eagerc.ones(2))
    SCALE = 3.0
    c(eagerc.ones(2))
    assert "global (test_compile_never_silent) SCALE: 2.0 -> 3.0" in c.log[-1], c.log


def test_code_says_why_there_is_no_program():
    c = eagerc.compile(lambda x: x * 2)
    assert "not compiled yet" in c.code() and "first call traces" in c.code()
    c(eagerc.ones(2))
    assert "def program(env" in c.code()

    def noisy(x):
        print("hello")
        return x + 1
    n = eagerc.compile(noisy)
    with redirect_stdout(io.StringIO()), pytest.warns(UserWarning, match="graph break"):
        n(eagerc.ones(2))
    assert "ran eagerly" in n.code() and "print" in n.code()


def test_explain_lists_the_python_guards_and_call_time_inputs():
    m = _mlp()
    opt = eagerc.optim.SGD(m.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    report = eagerc.compiler.explain(step, *_data())
    text = "\n".join(report.guards)
    assert "optimizer0.param_groups.0.lr is read at every call" in text
    assert "closure variable of" in text and "modules unchanged" in text and "default dtype" in text


def test_the_inspecting_block_of_the_docs_runs_as_written():
    import os
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "compile.md")).read()
    block = doc.split("## Inspecting", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    model = _mlp().eval()
    x = _data()[0]
    out = io.StringIO()
    with redirect_stdout(out), eagerc.no_grad():
        exec(block, {"eagerc": eagerc, "model": model, "x": x})
    assert "graph(" in out.getvalue() and "def program" in out.getvalue()


def test_two_threads_first_calling_one_compiled_function_get_eager_results():
    import threading
    m = _mlp().eval()
    c = eagerc.compile(m)
    xs = [_data(seed=i)[0] for i in range(2)]
    with eagerc.no_grad():
        want = [m(x).numpy() for x in xs]
    got, errors = {}, []
    start = threading.Barrier(2)

    def run(i):
        try:
            start.wait()
            with eagerc.no_grad():
                for _ in range(5):
                    got[i] = c(xs[i]).numpy()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(2):   # (the default backend, c, may round a product's bias add differently: 1 ulp)
        np.testing.assert_allclose(got[i], want[i], rtol=1e-13, atol=0)
    assert c._compiled.traces <= 2


# ---------------------------------------------------------------- the harness

BACKENDS = ["numpy", "interpreter", "c", "cuda"]


@pytest.fixture
def backend(request, monkeypatch, tmp_path_factory):
    name = request.param
    if name in ("c", "cuda"):
        if kernel_cache.find_compiler() is None:
            pytest.skip("no C compiler")
        monkeypatch.setenv("EAGERC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "never-silent-kernels"))
    if name == "cuda":  # backend cuda's driver with a stand-in cupy; its kernels run as C
        fake = types.SimpleNamespace(asarray=np.asarray, empty=np.empty, RawModule=EmulatedRawModule)
        monkeypatch.setitem(sys.modules, "cupy", fake)
        monkeypatch.setattr(eagerc.runtime.ops.OpDef, "kernel", lambda self, xp: self.cpu)
        EmulatedRawModule.launches = []
        EmulatedRawModule.max_grid = None
    return name


def _flatten(obs):
    out = []
    for o in obs:
        if isinstance(o, (list, tuple)) and not isinstance(o, str):
            out.extend(_flatten(o))
        else:
            out.append(o)
    return out


def _compare(name, eager, compiled):
    e, c = _flatten(eager), _flatten(compiled)
    assert len(e) == len(c), f"{name}: {len(e)} observations eagerly, {len(c)} compiled"
    for i, (a, b) in enumerate(zip(e, c)):
        where = f"{name}: observation {i}"
        if isinstance(a, eagerc.Tensor):
            assert isinstance(b, eagerc.Tensor), where
            assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape), \
                f"{where}: {a.dtype}{list(a.shape)} eagerly, {b.dtype}{list(b.shape)} compiled"
            x, y = a.numpy(force=True), b.numpy(force=True)
            if x.dtype.kind == "f":
                tol = 1e-10 if x.dtype == np.float64 else 1e-5
                np.testing.assert_allclose(y, x, rtol=tol, atol=tol, err_msg=where)
            else:
                np.testing.assert_array_equal(y, x, err_msg=where)
        elif isinstance(a, float):
            assert isinstance(b, float) and math.isclose(a, b, rel_tol=1e-12), f"{where}: {a} vs {b}"
        else:
            assert a == b, f"{where}: {a!r} eagerly, {b!r} compiled"


def test_the_corpus_has_at_least_sixty_programs():
    assert len(PROGRAMS) >= 60


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_compiled_run_matches_eager_run(name, backend):
    prog = PROGRAMS[name]
    eager = prog(World(None))
    world = World(backend)
    compiled = prog(world)
    _compare(name, eager, compiled)
