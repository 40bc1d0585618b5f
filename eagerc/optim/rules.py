"""Each optimizer's update rule, written once, and the two ways it runs.

A rule is a plain function `rule(ops, o, p, g)` over one parameter: `o` gives the param
group's options, `ops` the arithmetic, the optimizer state and scratch space. It runs

- eagerly on raw arrays (`ArrayOps`): in-place ufuncs with `out=` into scratch buffers
  shared by all parameters of one shape, options as Python floats -- as fast as
  hand-written numpy, and allocating nothing;
- while a compiled training step is traced, on Tensors (`TensorOps`): recorded in-place
  Tensor ops, so the graph updates parameters and state through mutation outputs, and
  the numeric options are graph inputs read at every call (`Tracer.hyper`; a scheduler
  costs no retrace); backend "c" then fuses the recorded ops into one kernel.

Both run the same operations in the same order (options combined in float64 -- Python
floats eagerly, 0-d float64 inputs when traced -- then rounded once to the parameter's
dtype), so compiled and eager steps agree to the last bit by construction.

A rule takes one param group: it reads the options once, then updates every parameter
that has a gradient (`ops.each`). Conventions: `ops.X(a, b, out=T)` returns a value
(eagerly written into scratch buffer `T`, when traced a new tensor); `ops.iX(a, b)`
updates `a` in place and returns it.
"""
import math

import numpy as np

from ..dispatch import wrap
from ..ops.inplace import bump_version
from .._tensor import Tensor
from ..runtime.device import xp_of

__all__ = ["ArrayOps", "TensorOps", "EagerOptions", "sgd", "adam", "rmsprop", "adagrad"]


# ---------------------------------------------------------------- the rules
# Each takes one param group: its options once, then every parameter with a gradient.

def _grad_terms(o, weight_decay=True):
    """(weight decay or None, maximize): how the rule's gradient differs from p.grad."""
    return (o["weight_decay"] if weight_decay and o.nonzero("weight_decay") else None), o.flag("maximize")


def _effective_grad(ops, p, g, wd, maximize):
    """-g if maximize, plus wd * p (PyTorch's L2 penalty)."""
    if wd is not None:
        t = ops.mul(p, wd, out=0)
        return ops.isub(t, g) if maximize else ops.iadd(t, g)
    if maximize:
        return ops.neg(g, out=0)
    return g


def sgd(ops, o, params):
    """g = g + wd * p;  b = g (first step) or momentum * b + (1 - dampening) * g;
    g = g + momentum * b if nesterov else b;  p = p - lr * g."""
    wd, maximize = _grad_terms(o)
    lr = o["lr"]
    momentum = o["momentum"] if o.nonzero("momentum") else None
    if momentum is not None:
        keep = 1 - o["dampening"] if o.nonzero("dampening") else None
        nesterov = o.flag("nesterov")
        lr_momentum = lr * momentum if nesterov else None
    for p, g in ops.each(params):
        g = _effective_grad(ops, p, g, wd, maximize)
        if momentum is not None:
            b = ops.state(p, "momentum_buffer")
            if b is None:  # the first step (eager only: a traced step always has the buffer)
                b = ops.new_state(p, "momentum_buffer", g)
            else:
                ops.imul(b, momentum)
                ops.iadd(b, ops.mul(g, keep, out=1) if keep is not None else g)
            if nesterov:  # p -= lr * g; p -= lr * momentum * b
                ops.isub(p, ops.mul(g, lr, out=1))
                ops.isub(p, ops.mul(b, lr_momentum, out=1))
                continue
            g = b
        ops.isub(p, ops.mul(g, lr, out=1))


def adam(ops, o, params, decoupled=False):
    """m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g  (v = max(v_max, v) with
    amsgrad);  p = p - lr / (1 - b1**t) * m / (sqrt(v) / sqrt(1 - b2**t) + eps), with the
    L2 penalty in g (Adam) or p = p * (1 - lr * wd) first (AdamW, decoupled)."""
    lr, beta1, beta2, eps = o["lr"], o.item("betas", 0), o.item("betas", 1), o["eps"]
    wd, maximize = _grad_terms(o, weight_decay=not decoupled)
    decay = 1 - lr * o["weight_decay"] if decoupled and o.nonzero("weight_decay") else None
    keep1, keep2, amsgrad = 1 - beta1, 1 - beta2, o.flag("amsgrad")
    for p, g in ops.each(params):
        step = ops.step(p)
        if decay is not None:
            ops.imul(p, decay)
        g = _effective_grad(ops, p, g, wd, maximize)
        m, v = ops.state(p, "exp_avg"), ops.state(p, "exp_avg_sq")
        ops.imul(m, beta1)
        ops.iadd(m, ops.mul(g, keep1, out=1))
        ops.imul(v, beta2)
        ops.iadd(v, ops.imul(ops.mul(g, g, out=1), keep2))
        if amsgrad:
            v = ops.imaximum(ops.state(p, "max_exp_avg_sq"), v)
        bias1 = 1 - beta1 ** step
        bias2_sqrt = ops.scalar_sqrt(1 - beta2 ** step)
        # lr/bias1 * m / (sqrt(v)/bias2_sqrt + eps), with bias2_sqrt moved to the numerator
        t = ops.iadd(ops.sqrt(v, out=1), eps * bias2_sqrt)
        t = ops.imul(ops.div(m, t, out=1), lr * bias2_sqrt / bias1)
        ops.isub(p, t)


def rmsprop(ops, o, params):
    """s = alpha * s + (1 - alpha) * g * g;  centered: a = alpha * a + (1 - alpha) * g and
    r = sqrt(s - a * a) + eps, else r = sqrt(s) + eps;  momentum: b = momentum * b + g / r,
    p = p - lr * b;  else p = p - lr * g / r."""
    alpha, eps, lr = o["alpha"], o["eps"], o["lr"]
    keep = 1 - alpha
    wd, maximize = _grad_terms(o)
    centered = o.flag("centered")
    momentum = o["momentum"] if o.nonzero("momentum") else None
    for p, g in ops.each(params):
        ops.step(p)
        g = _effective_grad(ops, p, g, wd, maximize)
        s = ops.state(p, "square_avg")
        ops.imul(s, alpha)
        ops.iadd(s, ops.imul(ops.mul(g, g, out=1), keep))
        if centered:
            a = ops.state(p, "grad_avg")
            ops.imul(a, alpha)
            ops.iadd(a, ops.mul(g, keep, out=1))
            r = ops.sqrt(ops.sub(s, ops.mul(a, a, out=1), out=1), out=1)
        else:
            r = ops.sqrt(s, out=1)
        r = ops.div(g, ops.iadd(r, eps), out=1)  # g / r
        if momentum is not None:
            b = ops.state(p, "momentum_buffer")
            ops.imul(b, momentum)
            ops.iadd(b, r)
            r = ops.mul(b, lr, out=1)
        else:
            r = ops.imul(r, lr)
        ops.isub(p, r)


def adagrad(ops, o, params):
    """clr = lr / (1 + (t - 1) * lr_decay);  s = s + g * g;  p = p - clr * g / (sqrt(s) + eps)."""
    lr, lr_decay, eps = o["lr"], o["lr_decay"], o["eps"]
    wd, maximize = _grad_terms(o)
    for p, g in ops.each(params):
        step = ops.step(p)
        g = _effective_grad(ops, p, g, wd, maximize)
        clr = lr / (1 + (step - 1) * lr_decay)
        s = ops.state(p, "sum")
        ops.iadd(s, ops.mul(g, g, out=1))
        t = ops.div(g, ops.iadd(ops.sqrt(s, out=1), eps), out=1)
        ops.isub(p, ops.imul(t, clr))


# ---------------------------------------------------------------- eagerly: raw arrays

def new_step():
    """A fresh `step` counter: a CPU float32 0-d tensor, as PyTorch keeps it."""
    return wrap(np.zeros((), np.float32))


def advance_step(state):
    """Increment state['step'] in place and return its new value as a Python float."""
    step = state["step"]
    if not isinstance(step, Tensor):  # a state dict that stored a plain number
        step = state["step"] = wrap(np.asarray(float(step), np.float32))
    value = float(step._array) + 1.0
    step._array[()] = value
    return value


class EagerOptions:
    """A param group's options as Python values."""
    __slots__ = ("group",)

    def __init__(self, group):
        self.group = group

    def __getitem__(self, key):
        return self.group[key]

    def item(self, key, element):
        return self.group[key][element]

    def nonzero(self, key):
        return bool(self.group[key])

    def flag(self, key):
        return self.group[key]


class ArrayOps:
    """A rule's arithmetic on raw arrays (numpy or cupy): in place, into two scratch buffers
    shared by the parameters of one shape. `each(params)` binds it to each parameter in
    turn (its array, gradient, state) and bumps the parameter's version after its update."""
    __slots__ = ("opt", "group", "xp", "scratch", "state_of")

    def __init__(self, opt):
        self.opt = opt
        self.group = None   # the param group being updated (set by Optimizer.step)
        self.xp = np
        self.scratch = None
        self.state_of = None

    def each(self, params):
        opt = self.opt
        state, scratch, init, bump = opt.state, opt._scratch, opt._init_state, opt._bump
        for p in params:
            g = p._grad
            if g is None:
                continue
            d = p._array
            self.xp = np if type(d) is np.ndarray else xp_of(d)
            self.scratch = scratch(d, 2)
            s = self.state_of = state[p]
            if not s:
                init(p, self.group)
            yield d, g._array
            bump_version(p, bump)

    # state
    def state(self, p, key):
        t = self.state_of.get(key)
        return None if t is None else t._array

    def new_state(self, p, key, value):
        t = self.state_of[key] = wrap(value.copy())
        return t._array

    def step(self, p):
        """state["step"] += 1; its new value as a Python float."""
        return advance_step(self.state_of)

    # arithmetic: out= names a scratch buffer (0 or 1)
    def mul(self, a, b, out):
        return self.xp.multiply(a, b, out=self.scratch[out])

    def div(self, a, b, out):
        return self.xp.divide(a, b, out=self.scratch[out])

    def sub(self, a, b, out):
        return self.xp.subtract(a, b, out=self.scratch[out])

    def sqrt(self, a, out):
        return self.xp.sqrt(a, out=self.scratch[out])

    def neg(self, a, out):
        return self.xp.negative(a, out=self.scratch[out])

    def imul(self, a, b):
        a *= b
        return a

    def iadd(self, a, b):
        a += b
        return a

    def isub(self, a, b):
        a -= b
        return a

    def imaximum(self, a, b):
        return self.xp.maximum(a, b, out=a)

    @staticmethod
    def scalar_sqrt(x):
        return math.sqrt(x)


# ---------------------------------------------------------------- traced: Tensor ops

class TensorOps:
    """The same arithmetic as recorded Tensor ops, for a compiled training step (the tracer
    sees every update; state tensors are guarded to stay the ones traced)."""
    __slots__ = ("tracer", "opt")

    def __init__(self, tracer, opt):
        self.tracer = tracer
        self.opt = opt

    @staticmethod
    def each(params):
        for p in params:
            if p._grad is not None:
                yield p, p._grad

    def state(self, p, key):
        return self.tracer.optimizer_state(self.opt, p, key)

    def new_state(self, p, key, value):  # pragma: no cover - a traced step always has its state
        raise AssertionError(f"{type(self.opt).__name__}: state {key!r} missing while traced")

    def step(self, p):
        step = self.state(p, "step")
        step.add_(1)
        return step.double()

    def mul(self, a, b, out=None):
        return a * b

    def div(self, a, b, out=None):
        return a / b

    def sub(self, a, b, out=None):
        return a - b

    def sqrt(self, a, out=None):
        return a.sqrt()

    def neg(self, a, out=None):
        return -a

    def imul(self, a, b):
        return a.mul_(b)

    def iadd(self, a, b):
        return a.add_(b)

    def isub(self, a, b):
        return a.sub_(b)

    def imaximum(self, a, b):
        return a.copy_(a.maximum(b))

    @staticmethod
    def scalar_sqrt(x):
        return x.sqrt()


class TracedOptions:
    """A param group's options while traced: numbers are 0-d float64 graph inputs read at
    every call, branches on them (is weight_decay zero?) and flags are guarded."""
    __slots__ = ("tracer", "opt", "index", "group")

    def __init__(self, tracer, opt, index):
        self.tracer = tracer
        self.opt = opt
        self.index = index
        self.group = opt.param_groups[index]

    def __getitem__(self, key):
        return self.tracer.hyper(self.opt, self.index, key)

    def item(self, key, element):
        return self.tracer.hyper(self.opt, self.index, key, element)

    def nonzero(self, key):
        return self.tracer.hyper_nonzero(self.opt, self.index, key)

    def flag(self, key):
        return self.group[key]
