"""Each optimizer's update rule, written once, and the two ways it runs.

A rule is a plain function `rule(ops, o, p, g)` over one parameter: `o` gives the param
group's options, `ops` the arithmetic, the optimizer state and scratch space. It runs

- eagerly on raw arrays (`ArrayOps`): in-place ufuncs with `out=` into scratch buffers
  shared by all parameters of one shape, options as Python floats -- as fast as
  hand-written numpy, and allocating nothing; a rule with a foreach C kernel (adam, sgd
  with momentum: runtime/kernels/foreach.py) offers each parameter to `ops.fused`, which
  runs the whole group in one C call with the same operations and bits;
- while a compiled training step is traced, on Tensors (`TensorOps`): recorded in-place
  Tensor ops, so the graph updates parameters and state through mutation outputs, and
  the numeric options are graph inputs read at every call (`Tracer.hyper`; a scheduler
  costs no retrace); backend "c" then fuses the recorded ops into one kernel. A rule whose
  loop is `ops.each_alike` runs its Python for the first parameter of each kind only; the
  others replay what it recorded (TensorOps.each_alike).

Both run the same operations in the same order (options combined in float64 -- Python
floats eagerly, 0-d float64 inputs when traced -- then rounded once to the parameter's
dtype), so compiled and eager steps agree to the last bit by construction.

A rule takes one param group: it reads the options once, then updates every parameter
that has a gradient (`ops.each`). Conventions: `ops.X(a, b, out=T)` returns a value
(eagerly written into scratch buffer `T`, when traced a new tensor); `ops.iX(a, b)`
updates `a` in place and returns it. A choice that depends on the step count (RAdam's
rectification, ASGD's averaging) is `ops.select(cond, if_true, if_false)` over two
functions that write only scratch buffers: eagerly one of them runs, traced both run and
`where` picks, so the compiled graph needs no guard on the step. Scalar state (NAdam's
mu_product, ASGD's eta and mu: float32 0-d tensors, as PyTorch keeps them) is read with
`ops.value` and written with `ops.assign`. The step count is advanced with `ops.step(p, derive)`,
which returns `derive(t)`: every scalar the rule computes from the new count t (bias
corrections...) comes from that one function, and the rule computes nothing before its loop
but options, so a traced step whose parameters all have the same count records the count
and those scalars once per group, not once per parameter (TensorOps.step; eagerly `derive`
runs once per run of equal counts).

With `differentiable=True` a rule runs on `AutogradOps`: the traced arithmetic, not
recorded by a tracer but by autograd, so the update itself has a gradient.
"""
import math
import operator

import numpy as np

_power = np.power

from ..dispatch import active_tracer, wrap
from ..ops.elementwise import where
from ..ops.inplace import bump_version, commit
from .._tensor import Tensor
from ..runtime.device import xp_of
from ..runtime.kernels import eager as c_rows, foreach

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)

__all__ = ["ArrayOps", "TensorOps", "AutogradOps", "EagerOptions", "sgd", "adam", "rmsprop", "adagrad",
           "adadelta", "adamax", "nadam", "radam", "asgd", "rprop"]


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
        # the foreach kernel's variant and scalars (runtime/kernels/foreach.py); traced, options
        # are tensors: only `is None` tests on them
        flags = frozenset(f for f, on in (("wd", wd is not None), ("maximize", maximize),
                                          ("dampening", keep is not None), ("nesterov", nesterov)) if on)
        scalars = (0.0 if wd is None else wd, momentum, 1.0 if keep is None else keep, lr,
                   0.0 if lr_momentum is None else lr_momentum)
    for p, g in ops.each(params):
        if momentum is not None:
            b = ops.state(p, "momentum_buffer")
            if b is not None and ops.fused("sgd", flags, (p, g, b), scalars):
                continue
        g = _effective_grad(ops, p, g, wd, maximize)
        if momentum is not None:
            if b is None:  # an eager first step (a traced one finds the buffer made zero)
                b = ops.new_state(p, "momentum_buffer", g)
            else:
                ops.imul(b, momentum)
                ops.iadd(b, ops.mul(g, keep, out=1) if keep is not None else g)
                ops.first_step(p, b, g)  # a traced first step: b = g in this call
            if nesterov:  # p -= lr * g; p -= lr * momentum * b
                ops.isub(p, ops.mul(g, lr, out=1))
                ops.isub(p, ops.mul(b, lr_momentum, out=1))
                continue
            g = b
        ops.isub(p, ops.mul(g, lr, out=1))


def _decoupled_decay(o, lr):
    """(decoupled?, the factor p is scaled by first or None): AdamW-style weight decay."""
    decoupled = o.flag("decoupled_weight_decay")
    return decoupled, (1 - lr * o["weight_decay"] if decoupled and o.nonzero("weight_decay") else None)


def _moments(ops, p, g, beta1, keep1, beta2, keep2):
    """Adam's running moments, in place: m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g."""
    m, v = ops.state(p, "exp_avg"), ops.state(p, "exp_avg_sq")
    ops.imul(m, beta1)
    ops.iadd(m, ops.mul(g, keep1, out=1))
    ops.imul(v, beta2)
    ops.iadd(v, ops.imul(ops.mul(g, g, out=1), keep2))
    return m, v


def adam(ops, o, params):
    """m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g  (v = max(v_max, v) with
    amsgrad);  p = p - lr / (1 - b1**t) * m / (sqrt(v) / sqrt(1 - b2**t) + eps), with the
    L2 penalty in g (Adam) or p = p * (1 - lr * wd) first (AdamW, decoupled_weight_decay)."""
    lr, beta1, beta2, eps = o["lr"], o.item("betas", 0), o.item("betas", 1), o["eps"]
    decoupled, decay = _decoupled_decay(o, lr)
    wd, maximize = _grad_terms(o, weight_decay=not decoupled)
    keep1, keep2, amsgrad = 1 - beta1, 1 - beta2, o.flag("amsgrad")
    flags = frozenset(f for f, on in (("decay", decay is not None), ("wd", wd is not None),
                                      ("maximize", maximize), ("amsgrad", amsgrad)) if on)

    def scalars(step):
        bias1 = 1 - ops.scalar_pow(beta1, step)
        bias2_sqrt = ops.scalar_sqrt(1 - ops.scalar_pow(beta2, step))
        # lr/bias1 * m / (sqrt(v)/bias2_sqrt + eps), with bias2_sqrt moved to the numerator
        return eps * bias2_sqrt, lr * bias2_sqrt / bias1

    for p, g in ops.each_alike(params):
        c1, c2 = ops.step(p, scalars)
        if ops.fused("adam", flags, (p, g, ops.state(p, "exp_avg"), ops.state(p, "exp_avg_sq"))
                     + ((ops.state(p, "max_exp_avg_sq"),) if amsgrad else ()),
                     (1.0 if decay is None else decay, 0.0 if wd is None else wd, beta1, keep1, beta2, keep2, c1, c2)):
            continue
        if decay is not None:
            ops.imul(p, decay)
        g = _effective_grad(ops, p, g, wd, maximize)
        m, v = _moments(ops, p, g, beta1, keep1, beta2, keep2)
        if amsgrad:
            v = ops.imaximum(ops.state(p, "max_exp_avg_sq"), v)
        t = ops.iadd(ops.sqrt(v, out=1), c1)
        t = ops.imul(ops.div(m, t, out=1), c2)
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
    for p, g in ops.each_alike(params):
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
    for p, g in ops.each_alike(params):
        clr = ops.step(p, lambda step: lr / (1 + (step - 1) * lr_decay))
        g = _effective_grad(ops, p, g, wd, maximize)
        s = ops.state(p, "sum")
        ops.iadd(s, ops.mul(g, g, out=1))
        t = ops.div(g, ops.iadd(ops.sqrt(s, out=1), eps), out=1)
        ops.isub(p, ops.imul(t, clr))


def adadelta(ops, o, params):
    """s = rho * s + (1 - rho) * g * g;  delta = sqrt(u + eps) / sqrt(s + eps) * g;
    u = rho * u + (1 - rho) * delta * delta;  p = p - lr * delta."""
    lr, rho, eps = o["lr"], o["rho"], o["eps"]
    keep = 1 - rho
    wd, maximize = _grad_terms(o)
    for p, g in ops.each_alike(params):
        ops.step(p)
        g = _effective_grad(ops, p, g, wd, maximize)
        s, u = ops.state(p, "square_avg"), ops.state(p, "acc_delta")
        ops.imul(s, rho)
        ops.iadd(s, ops.imul(ops.mul(g, g, out=1), keep))
        std = ops.sqrt(ops.add(s, eps, out=1), out=1)
        delta = ops.sqrt(ops.add(u, eps, out=2), out=2)
        delta = ops.imul(ops.div(delta, std, out=2), g)
        ops.imul(u, rho)
        ops.iadd(u, ops.imul(ops.mul(delta, delta, out=1), keep))
        ops.isub(p, ops.imul(delta, lr))


def adamax(ops, o, params):
    """m = b1 * m + (1 - b1) * g;  u = max(b2 * u, |g| + eps);  p = p - lr / (1 - b1**t) * m / u."""
    lr, beta1, beta2, eps = o["lr"], o.item("betas", 0), o.item("betas", 1), o["eps"]
    keep1 = 1 - beta1
    wd, maximize = _grad_terms(o)
    for p, g in ops.each_alike(params):
        clr = ops.step(p, lambda step: lr / (1 - ops.scalar_pow(beta1, step)))
        g = _effective_grad(ops, p, g, wd, maximize)
        m, u = ops.state(p, "exp_avg"), ops.state(p, "exp_inf")
        ops.imul(m, beta1)
        ops.iadd(m, ops.mul(g, keep1, out=1))
        ops.imul(u, beta2)
        ops.imaximum(u, ops.iadd(ops.abs(g, out=1), eps))
        ops.isub(p, ops.imul(ops.div(m, u, out=1), clr))


def nadam(ops, o, params):
    """mu_t = b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay));  mu_product *= mu_t (a float32
    scalar, as PyTorch keeps it);  m, v as Adam's;  d = sqrt(v / (1 - b2**t)) + eps;
    p = p - lr * (1 - mu_t) / (1 - mu_product) * g / d
          - lr * mu_{t+1} / (1 - mu_product * mu_{t+1}) * m / d,
    with the L2 penalty in g, or p = p * (1 - lr * wd) first (decoupled_weight_decay)."""
    lr, beta1, beta2, eps = o["lr"], o.item("betas", 0), o.item("betas", 1), o["eps"]
    momentum_decay = o["momentum_decay"]
    decoupled, decay = _decoupled_decay(o, lr)
    wd, maximize = _grad_terms(o, weight_decay=not decoupled)
    keep1, keep2 = 1 - beta1, 1 - beta2

    def scalars(step):   # (1 - b2**t, mu_t, mu_{t+1}, lr * (1 - mu_t), lr * mu_{t+1})
        mu = beta1 * (1.0 - 0.5 * ops.scalar_pow(0.96, step * momentum_decay))
        mu_next = beta1 * (1.0 - 0.5 * ops.scalar_pow(0.96, (step + 1) * momentum_decay))
        return 1 - ops.scalar_pow(beta2, step), mu, mu_next, lr * (1.0 - mu), lr * mu_next

    for p, g in ops.each_alike(params):
        bias2, mu, mu_next, lr_mu, lr_mu_next = ops.step(p, scalars)
        if decay is not None:
            ops.imul(p, decay)
        g = _effective_grad(ops, p, g, wd, maximize)
        mu_product = ops.value(ops.imul(ops.state(p, "mu_product"), mu))
        m, v = _moments(ops, p, g, beta1, keep1, beta2, keep2)
        d = ops.iadd(ops.sqrt(ops.div(v, bias2, out=1), out=1), eps)
        ops.isub(p, ops.imul(ops.div(g, d, out=0), lr_mu / (1.0 - mu_product)))
        ops.isub(p, ops.imul(ops.div(m, d, out=0), lr_mu_next / (1.0 - mu_product * mu_next)))


def radam(ops, o, params):
    """m, v as Adam's;  rho_inf = 2 / (1 - b2) - 1;  rho_t = rho_inf - 2 t b2**t / (1 - b2**t);
    rho_t > 5: p = p - lr * m / (1 - b1**t) * r * sqrt(1 - b2**t) / (sqrt(v) + eps) with
    r = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t));
    else p = p - lr * m / (1 - b1**t).  L2 penalty in g, or decoupled_weight_decay."""
    lr, beta1, beta2, eps = o["lr"], o.item("betas", 0), o.item("betas", 1), o["eps"]
    decoupled, decay = _decoupled_decay(o, lr)
    wd, maximize = _grad_terms(o, weight_decay=not decoupled)
    keep1, keep2 = 1 - beta1, 1 - beta2
    rho_inf = 2 / keep2 - 1

    def scalars(step):   # (lr / (1 - b1**t), rho_t > 5, sqrt(1 - b2**t) * r or 0 while rho_t <= 5)
        beta2_t = ops.scalar_pow(beta2, step)
        bias1, bias2 = 1 - ops.scalar_pow(beta1, step), 1 - beta2_t
        rho_t = rho_inf - 2 * step * beta2_t / bias2
        rectify = rho_t > 5.0

        def scale():  # abs(): traced, this also runs (and is discarded) while rho_t <= 5
            r = ops.scalar_sqrt(abs((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)))
            return ops.scalar_sqrt(bias2) * r
        return lr / bias1, rectify, ops.select(rectify, scale, lambda: 0.0)

    for p, g in ops.each_alike(params):
        lr_bias1, rectify, scale = ops.step(p, scalars)
        if decay is not None:
            ops.imul(p, decay)
        g = _effective_grad(ops, p, g, wd, maximize)
        m, v = _moments(ops, p, g, beta1, keep1, beta2, keep2)
        update = ops.mul(m, lr_bias1, out=0)

        def rectified():
            t = ops.iadd(ops.sqrt(v, out=1), eps)
            return ops.imul(ops.div(update, t, out=1), scale)

        ops.isub(p, ops.select(rectify, rectified, lambda: update))


def asgd(ops, o, params):
    """p = p * (1 - lambd * eta) - eta * g;  ax = p if mu == 1 else ax + mu * (p - ax);
    then eta = lr / (1 + lambd * lr * t) ** alpha and mu = 1 / max(1, t - t0) (eta and mu:
    float32 scalars, as PyTorch keeps them)."""
    lr, lambd, alpha, t0 = o["lr"], o["lambd"], o["alpha"], o["t0"]
    wd, maximize = _grad_terms(o)

    def scalars(step):   # the next step's eta and mu
        return lr / ops.scalar_pow(1 + lambd * lr * step, alpha), 1 / ops.scalar_max(step - t0, 1.0)

    for p, g in ops.each_alike(params):
        next_eta, next_mu = ops.step(p, scalars)
        g = _effective_grad(ops, p, g, wd, maximize)
        eta_s, mu_s, ax = ops.state(p, "eta"), ops.state(p, "mu"), ops.state(p, "ax")
        eta = ops.value(eta_s)
        ops.imul(p, 1 - lambd * eta)
        ops.isub(p, ops.mul(g, eta, out=1))
        mu = ops.value(mu_s)
        ops.copy(ax, ops.select(mu != 1, lambda: ops.add(ax, ops.imul(ops.sub(p, ax, out=1), mu), out=1),
                                lambda: p))
        ops.assign(eta_s, next_eta)
        ops.assign(mu_s, next_mu)


def rprop(ops, o, params):
    """s = sign(g * prev);  step_size = clamp(step_size * (etaplus if s > 0, etaminus if
    s < 0, else 1), *step_sizes);  g = 0 where s < 0;  p = p - sign(g) * step_size;  prev = g."""
    etaminus, etaplus = o.item("etas", 0), o.item("etas", 1)
    size_min, size_max = o.item("step_sizes", 0), o.item("step_sizes", 1)
    maximize = o.flag("maximize")
    for p, g in ops.each_alike(params):
        ops.step(p)
        if maximize:
            g = ops.neg(g, out=0)
        prev, size = ops.state(p, "prev"), ops.state(p, "step_size")
        s = ops.sign(ops.mul(g, prev, out=1), out=1)
        up, down, same = ops.gt(s, 0), ops.lt(s, 0), ops.eq(s, 0)
        f = ops.masked_fill(ops.masked_fill(ops.masked_fill(s, up, etaplus, out=1), down, etaminus, out=1),
                            same, 1.0, out=1)
        ops.iclamp(ops.imul(size, f), size_min, size_max)
        g = ops.masked_fill(g, down, 0.0, out=2)
        ops.isub(p, ops.imul(ops.sign(g, out=1), size))
        ops.copy(prev, g)


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
    """A rule's arithmetic on raw arrays (numpy or cupy): in place, into scratch buffers
    (two, or the optimizer's `_scratch_buffers`) shared by the parameters of one shape. `each(params)` binds it to each parameter in
    turn (its array, gradient, state) and bumps the parameter's version after its update."""
    __slots__ = ("opt", "group", "xp", "scratch", "state_of", "powers", "pending", "derived")

    def __init__(self, opt):
        self.opt = opt
        self.group = None   # the param group being updated (set by Optimizer.step)
        self.xp = np
        self.scratch = None
        self.state_of = None
        self.powers = {}    # scalar_pow's results in this step (the parameters share their step)
        self.pending = {}   # foreach kernel -> ([arrays per parameter], [scalars per parameter])
        self.derived = None  # (derive, step, derive(step)) last computed by `step`

    def each(self, params):
        opt = self.opt
        state, scratch, init, bump = opt.state, opt._scratch, opt._init_state, opt._bump
        nbuf = opt._scratch_buffers
        for p in params:
            g = p._grad
            if g is None:
                continue
            d = p._array
            self.xp = np if type(d) is np.ndarray else xp_of(d)
            self.scratch = scratch(d, nbuf)
            s = self.state_of = state[p]
            if not s:
                init(p, self.group)
            yield d, g._array
            bump_version(p, bump)
        for k, (arrays, scalars) in self.pending.items():
            k(arrays, scalars)
        self.pending.clear()

    each_alike = each

    def fused(self, rule, flags, arrays, scalars):
        """Leave this parameter's update to the group's one foreach C call (runtime/kernels/
        foreach.py: the rule's arithmetic, the same bits), run when `each` ends; False (the rule
        runs its numpy ops) for arrays it does not take: not numpy float32/float64 arrays of one
        dtype and C order, or the C kernels off / without a compiler."""
        d = arrays[0]
        dt = d.dtype
        if type(d) is not np.ndarray or not (dt is _F32 or dt is _F64) or not c_rows.enabled():
            return False
        for a in arrays:
            if type(a) is not np.ndarray or a.dtype is not dt or not a.flags.c_contiguous:
                return False
        k = foreach.update_kernel(rule, c_rows.NAMES[dt], flags)
        if k is None:
            return False
        batch = self.pending.get(k)
        if batch is None:
            batch = self.pending[k] = ([], [])
        batch[0].append(arrays)
        batch[1].append(scalars)
        return True

    # state
    def state(self, p, key):
        t = self.state_of.get(key)
        return None if t is None else t._array

    def new_state(self, p, key, value):
        t = self.state_of[key] = wrap(value.copy())
        return t._array

    @staticmethod
    def first_step(p, a, value):
        """Nothing: eagerly a first step makes its state with `new_state` (it is missing)."""

    def step(self, p, derive=None):
        """state["step"] += 1; its new value as a Python float, or derive(value): the rule's
        scalars that depend on the step (bias corrections...), computed once for a run of
        parameters with the same step."""
        value = advance_step(self.state_of)
        if derive is None:
            return value
        d = self.derived
        if d is None or d[0] is not derive or d[1] != value:
            d = self.derived = (derive, value, derive(value))
        return d[2]

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

    def add(self, a, b, out):
        return self.xp.add(a, b, out=self.scratch[out])

    def abs(self, a, out):
        return self.xp.absolute(a, out=self.scratch[out])

    def sign(self, a, out):
        return self.xp.sign(a, out=self.scratch[out])

    def imaximum(self, a, b):
        return self.xp.maximum(a, b, out=a)

    def iclamp(self, a, lo, hi):
        return self.xp.clip(a, lo, hi, out=a)

    def copy(self, dst, src):
        if src is not dst:
            self.xp.copyto(dst, src)
        return dst

    # masks (boolean arrays) and choices
    def gt(self, a, b):
        return self.xp.greater(a, b)

    def lt(self, a, b):
        return self.xp.less(a, b)

    def eq(self, a, b):
        return self.xp.equal(a, b)

    def masked_fill(self, a, mask, value, out):
        """a with `value` where mask (a copied into scratch buffer `out` unless it is it)."""
        t = self.copy(self.scratch[out], a)
        self.xp.copyto(t, value, where=mask)
        return t

    @staticmethod
    def select(cond, if_true, if_false):
        """if_true() if cond else if_false(): cond is a Python bool here (a function of the
        step count); the functions write scratch buffers only."""
        return if_true() if cond else if_false()

    # scalars: options and 0-d state are Python floats here
    @staticmethod
    def value(a):
        """A 0-d state array's value as a Python float."""
        return float(a)

    @staticmethod
    def assign(a, value):
        """Write a Python float into a 0-d state array (rounded to its dtype)."""
        a[()] = value
        return a

    @staticmethod
    def scalar_sqrt(x):
        return math.sqrt(x)

    def scalar_pow(self, x, y):
        """x ** y by numpy's power, as a compiled step computes it (Python's float pow differs
        from numpy's in the last bit for a few percent of arguments); one numpy call per
        step for all parameters with the same (x, y), since it costs a microsecond."""
        key = (x, y)
        r = self.powers.get(key)
        if r is None:
            r = self.powers[key] = float(_power(x, y))
        return r

    @staticmethod
    def scalar_max(x, lo):
        return x if x > lo else lo


# ---------------------------------------------------------------- traced: Tensor ops

_ARRAY = operator.attrgetter("_array")


def steps_equal(steps):
    """Whether the step counters (0-d tensors) all hold the same value: a traced step then
    updates them as one (TensorOps.step), and guards.py checks this again at every call."""
    return len(set(map(float, map(_ARRAY, steps)))) == 1


class _SharedStep:
    """The step count of a param group whose updated parameters all have the same step: a
    traced step increments it once and derives its scalars once (TensorOps.step)."""
    __slots__ = ("first", "steps", "new", "value")

    def __init__(self, first, steps):
        self.first = first    # the first updated parameter
        self.steps = steps    # every updated parameter's step tensor, in order
        self.new = None       # the incremented step, once computed
        self.value = None     # what the rule's `derive` made of it

    @classmethod
    def of(cls, state, params):
        """The group's shared step, or None: fewer than two parameters with a gradient, a step
        that is not a 0-d tensor of its own, or steps of different values (per-parameter form)."""
        steps, first = [], None
        for p in params:
            if p._grad is None:
                continue
            t = state[p].get("step") if p in state else None
            if not isinstance(t, Tensor) or t._array.ndim:
                return None
            first = p if first is None else first
            steps.append(t)
        if len(steps) < 2 or len({id(t._array) for t in steps}) < len(steps) or not steps_equal(steps):
            return None
        return cls(first, tuple(steps))


class TensorOps:
    """The same arithmetic as recorded Tensor ops, for a compiled training step (the tracer
    sees every update; state tensors are guarded to stay the ones traced). `first`: ids of
    the parameters at their first step, whose first-step state was made zero for the rule
    (Optimizer._traced_step).

    When the updated parameters of a group all have the same step count (the normal case),
    the group's step and the scalars derived from it (bias corrections...) are recorded once,
    not once per parameter: `step` increments the first parameter's step, derives the
    scalars, and writes the new count into every parameter's own step tensor (one mutation
    each); guards.py checks at every call that the counts are still equal (else retrace, in
    the per-parameter form). Group scalars (options, derived scalars) are cast to a
    parameter's dtype once per dtype (`_operand`). Both are recorded outside any taped
    segment, so replays (each_alike) share them instead of recording them again."""
    __slots__ = ("tracer", "opt", "first", "shared", "scalars", "casts", "mark")

    def __init__(self, tracer, opt, first=frozenset()):
        self.tracer = tracer
        self.opt = opt
        self.first = first
        self.shared = None   # the current group's _SharedStep, or None: per-parameter steps
        self.scalars = {}    # id -> group scalar made outside the loop over parameters (kept alive: ids stay unique)
        self.casts = {}      # (id(scalar), dtype) -> (scalar, its cast to dtype)
        self.mark = None     # len(tracer.keep) when the group's rule began (begin_group)

    def begin_group(self):
        """A rule is about to run on the next param group (Optimizer._traced_step)."""
        self.mark = len(self.tracer.keep)

    def _begin_loop(self, params):
        """The rule's loop over the group's parameters begins: the group's shared step, and the
        0-d tensors the rule made before its loop (from options only, by the rules' convention:
        1 - beta1...) as group scalars."""
        self.shared = _SharedStep.of(self.opt.state, params)
        if self.mark is not None:
            for t in self.tracer.keep[self.mark:]:
                if not t._array.ndim:
                    self.scalars[id(t)] = t
            self.mark = None

    def each(self, params):
        self._begin_loop(params)
        for p in params:
            if p._grad is not None:
                yield p, p._grad

    def each_alike(self, params):
        """`each`, for a rule whose loop body reads nothing but its parameter's tensors and the
        group's options: the first parameter of each kind (`_alike`: shapes, dtypes, state keys...)
        runs the body, taped (Tracer.start_segment), and every later one of that kind replays the
        tape on its own tensors (Tracer.replay) -- the same nodes and kernels, without the rule's
        Python (a 32-layer GPT's Adam step: 388 parameters, ~10k recorded ops). REPLAY = False
        runs the body for every parameter (for tests and bisecting)."""
        tracer = self.tracer
        if not REPLAY or tracer.symbolic is not None or self.first:  # (first_step writes are not taped)
            yield from self.each(params)
            return
        state = self.opt.state
        self._begin_loop(params)
        segments = {}   # kind -> taped segment (None: not replayable)
        for p in params:
            g = p._grad
            if g is None:
                continue
            s = state[p]
            roles = [p, g, *s.values()]
            kind = _alike(tracer, tuple(s), roles)
            live = active_tracer() is tracer
            if live and kind is not None and segments.get(kind) is not None:
                tracer.replay(segments[kind], roles)
                continue
            tape = live and kind is not None and kind not in segments
            if tape:
                tracer.start_segment()
            try:
                yield p, g
            finally:
                if tape:
                    segments[kind] = tracer.end_segment(roles)

    @staticmethod
    def fused(rule, flags, arrays, scalars):
        """Traced (or under autograd) the rule's own Tensor ops run: the compiler fuses them."""
        return False

    def state(self, p, key):
        return self.tracer.optimizer_state(self.opt, p, key)

    def new_state(self, p, key, value):  # pragma: no cover - a traced step always has its state
        raise AssertionError(f"{type(self.opt).__name__}: state {key!r} missing while traced")

    def first_step(self, p, a, value):
        """At p's first step, a state tensor `a` takes its first-step value (SGD's buffer = g)
        in this call only, not in the graph: the graph holds the general rule, which is what
        every compiled call runs (a compiled call never is a first step: its guards hold the
        state this step made), and the ops after this one compute this call's values from
        a's array, so the traced call gives the eager first step's bits (g itself: -0.0 stays
        -0.0, which `momentum * 0 + g` would not give). Nothing at a later step."""
        if id(p) in self.first:
            a._array[...] = value._array   # (unrecorded on purpose)

    def step(self, p, derive=None):
        """state["step"] += 1 and its new value as a 0-d float64 tensor, or derive(value):
        per parameter, or once for the group (see the class)."""
        shared = self.shared
        if shared is None:
            step = self.state(p, "step")
            step.add_(1)
            value = step.double()
            return value if derive is None else derive(value)
        if shared.new is None:
            shared.new, shared.value = self._untaped(self._derive, shared, derive)
            self.tracer.shared_steps(self.opt, shared.steps)
        commit(self.state(p, "step"), shared.new, "copy_")
        return shared.value

    def _derive(self, shared, derive):
        new = self.state(shared.first, "step") + 1
        value = new.double()
        if derive is not None:
            value = derive(value)
        for t in value if isinstance(value, tuple) else (value,):
            if isinstance(t, Tensor):
                self.scalars[id(t)] = t
        return new, value

    def _untaped(self, fn, *args):
        """fn(*args) recorded outside a taped segment: replays share its results (Tracer.replay)."""
        tracer = self.tracer
        tape, tracer.tape = tracer.tape, None
        try:
            return fn(*args)
        finally:
            tracer.tape = tape

    def _operand(self, a, b):
        """b, as the second operand of an op on a. A 0-d b of another dtype is cast to a's as
        the op would (Python floats eagerly are rounded likewise; a 0-d a and b would compute
        in float64 otherwise: NAdam's float32 mu_product); a group scalar (an option, a scalar
        derived from a shared step or made before the rule's loop) is cast once per dtype, outside
        any taped segment."""
        if not isinstance(b, Tensor) or b._array.ndim or b.dtype == a.dtype:
            return b
        key = (id(b), a.dtype)
        c = self.casts.get(key)
        if c is not None:
            return c[1]
        tracer = self.tracer
        if id(b) not in self.scalars and tracer.names.get(id(b)) not in tracer.hyper_inputs:
            return b.to(a.dtype) if a.ndim == 0 else b
        c = self.casts[key] = (b, self._untaped(b.to, a.dtype))
        return c[1]

    def mul(self, a, b, out=None):
        return a * self._operand(a, b)

    def div(self, a, b, out=None):
        return a / self._operand(a, b)

    def sub(self, a, b, out=None):
        return a - self._operand(a, b)

    def sqrt(self, a, out=None):
        return a.sqrt()

    def neg(self, a, out=None):
        return -a

    def imul(self, a, b):
        return a.mul_(self._operand(a, b))

    def iadd(self, a, b):
        return a.add_(self._operand(a, b))

    def isub(self, a, b):
        return a.sub_(self._operand(a, b))

    def add(self, a, b, out=None):
        return a + self._operand(a, b)

    def abs(self, a, out=None):
        return a.abs()

    def sign(self, a, out=None):
        return a.sign()

    def imaximum(self, a, b):
        return a.copy_(a.maximum(b))

    def iclamp(self, a, lo, hi):
        return a.copy_(a.clamp(lo, hi))

    def copy(self, dst, src):
        return dst if src is dst else dst.copy_(src)

    def gt(self, a, b):
        return a > b

    def lt(self, a, b):
        return a < b

    def eq(self, a, b):
        return a == b

    def masked_fill(self, a, mask, value, out=None):
        return a.masked_fill(mask, value)

    @staticmethod
    def select(cond, if_true, if_false):
        """Both run; `where` picks by the 0-d boolean cond (no guard on the step count)."""
        if not isinstance(cond, Tensor):
            return if_true() if cond else if_false()
        return where(cond, if_true(), if_false())

    @staticmethod
    def value(a):
        """A 0-d state tensor's value as a 0-d float64 tensor (as Python floats are eagerly)."""
        return a.double()

    @staticmethod
    def assign(a, value):
        return a.copy_(value) if isinstance(value, Tensor) else a.fill_(value)

    @staticmethod
    def scalar_sqrt(x):
        return x.sqrt() if isinstance(x, Tensor) else math.sqrt(x)

    @staticmethod
    def scalar_pow(x, y):
        if isinstance(x, Tensor) or isinstance(y, Tensor):
            return x ** y
        return float(_power(x, y))

    @staticmethod
    def scalar_max(x, lo):
        return x.clamp(min=lo) if isinstance(x, Tensor) else max(x, lo)


REPLAY = True   # TensorOps.each_alike replays alike parameters' updates


def _alike(tracer, keys, roles):
    """What decides the ops a rule records for one parameter, beyond the group's options: its
    state keys and, for the parameter, its gradient and its state tensors, the Tensor class,
    shape, dtype, layout, grad flags and which of them share an array. None (never replayed)
    for a state value that is not a numpy-backed tensor or a tensor the tracer knows as a view."""
    kind = [keys]
    arrays = {}
    views = tracer.views
    for t in roles:
        if not isinstance(t, Tensor) or id(t) in views:
            return None
        a = t._array
        if type(a) is not np.ndarray:
            return None
        flags = a.flags
        kind.append((type(t), a.shape, a.dtype, flags.c_contiguous, flags.writeable, t._requires_grad,
                     t.grad_fn is None, arrays.setdefault(id(a), len(arrays))))
    return tuple(kind)


class AutogradOps(TensorOps):
    """The traced arithmetic run eagerly with grad mode on (`differentiable=True`): autograd
    records the update. State is the optimizer's own tensors, created at a first step.

    Autograd forbids changing a tensor in place after an op saved it for backward, so: the
    parameter and its state (`kept`, updated in place step after step) are cloned before an
    op reads them, in-place ops on temporaries become new tensors (the rules always use
    what an `iX` returns), and scalar state is read as a Python float (as PyTorch reads it)."""
    __slots__ = ("group", "kept")

    def __init__(self, opt):
        super().__init__(None, opt)
        self.group = None  # the param group being updated (set by Optimizer.step)
        self.kept = set()

    def each(self, params):
        opt = self.opt
        for p in params:
            if p._grad is None:
                continue
            state = opt.state[p]
            if not state:
                opt._init_state(p, self.group)
            self.kept = {id(p)} | {id(t) for t in state.values() if isinstance(t, Tensor)}
            yield p, p._grad

    each_alike = each

    def state(self, p, key):
        return self.opt.state[p].get(key)

    def new_state(self, p, key, value):
        t = self.opt.state[p][key] = value.clone()
        self.kept.add(id(t))
        return t

    first_step = staticmethod(ArrayOps.first_step)   # (a first step runs new_state, as eagerly)

    def step(self, p, derive=None):
        value = advance_step(self.opt.state[p])
        return value if derive is None else derive(value)

    def _read(self, a):
        """a, or a copy of it if it is a tensor updated in place later."""
        return a.clone() if isinstance(a, Tensor) and id(a) in self.kept else a

    def mul(self, a, b, out=None):
        return self._read(a) * self._read(b)

    def div(self, a, b, out=None):
        return self._read(a) / self._read(b)

    def sub(self, a, b, out=None):
        return self._read(a) - self._read(b)

    def add(self, a, b, out=None):
        return self._read(a) + self._read(b)

    def sqrt(self, a, out=None):
        return self._read(a).sqrt()

    def neg(self, a, out=None):
        return -self._read(a)

    def abs(self, a, out=None):
        return self._read(a).abs()

    def masked_fill(self, a, mask, value, out=None):
        return self._read(a).masked_fill(mask, value)

    def imul(self, a, b):
        return a.mul_(self._read(b)) if id(a) in self.kept else a * self._read(b)

    def iadd(self, a, b):
        return a.add_(self._read(b)) if id(a) in self.kept else a + self._read(b)

    def isub(self, a, b):
        return a.sub_(self._read(b)) if id(a) in self.kept else a - self._read(b)

    def imaximum(self, a, b):
        m = self._read(a).maximum(self._read(b))
        return a.copy_(m) if id(a) in self.kept else m

    def iclamp(self, a, lo, hi):
        c = self._read(a).clamp(lo, hi)
        return a.copy_(c) if id(a) in self.kept else c

    def copy(self, dst, src):
        return dst.copy_(self._read(src))

    @staticmethod
    def value(a):
        return float(a)


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
