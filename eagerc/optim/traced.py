"""Optimizer updates written with Tensor ops, used while a compiled training step is traced.

Eager steps update raw arrays in place (fast, invisible to a tracer). Under tracing the
same rules run as recorded in-place Tensor ops, so the compiled graph updates
parameters and optimizer state through explicit mutation outputs. The first step
creates the optimizer's state, so it runs eagerly and the next call is traced
(`tracer.retry`): the compiled graph then always reads the state it updates.

Numeric options (lr, betas, momentum, weight_decay, eps, dampening) are graph inputs
read from `param_groups` at every compiled call (`Tracer.hyper`), so a scheduler or a
hand edit between steps takes effect without retracing; where a rule skips a term for
a zero option, that zero-ness is guarded. Flags (nesterov, amsgrad, maximize) are
guarded Python values. The arithmetic follows the eager rules operation for operation
(options combined in float64 like their Python floats, then rounded once to the
parameter's dtype), so compiled and eager steps agree to the last bit.
"""
from .. import dispatch
from ..autograd.grad_mode import no_grad


def needs_state(opt, key, where=None):
    """True (after asking the tracer to retry later) if some parameter has no state yet
    (only the groups `where(group)` selects keep that state)."""
    for group in opt.param_groups:
        if where is not None and not where(group):
            continue
        for p in group["params"]:
            if p.grad is not None and key not in opt.state[p]:
                dispatch.active_tracer().retry(f"{type(opt).__name__}.step creates its state on the first step")
                return True
    return False


class _Options:
    """One param group's options as a traced rule reads them."""

    def __init__(self, opt, index):
        self.opt = opt
        self.index = index
        self.group = opt.param_groups[index]
        self.tracer = dispatch.active_tracer()

    def __getitem__(self, key):
        """A numeric option as a 0-d float64 graph input."""
        return self.tracer.hyper(self.opt, self.index, key)

    def item(self, key, element):
        return self.tracer.hyper(self.opt, self.index, key, element)

    def nonzero(self, key, element=None):
        """Is a numeric option nonzero (a guard: the graph takes that branch)."""
        return self.tracer.hyper_nonzero(self.opt, self.index, key, element)

    def flag(self, key):
        """A non-numeric option (guarded by value with the group's structure)."""
        return self.group[key]

    def state(self, p, key):
        """opt.state[p][key] (guarded to stay the same tensor)."""
        return self.tracer.optimizer_state(self.opt, p, key)


def _groups(opt):
    dispatch.active_tracer().stepped(opt)
    return [(_Options(opt, i), group) for i, group in enumerate(opt.param_groups)]


def _grad(p, o, wd_key, maximize):
    """-g if maximize, plus weight_decay * p (the eager effective_grad)."""
    g = p.grad
    if maximize:
        g = -g
    if wd_key is not None and o.nonzero(wd_key):
        g = g + p * o[wd_key]
    return g


@no_grad()
def sgd_step(opt):
    for o, group in _groups(opt):
        momentum = o.nonzero("momentum")
        nesterov, maximize = o.flag("nesterov"), o.flag("maximize")
        for p in group["params"]:
            if p.grad is None:
                continue
            g = _grad(p, o, "weight_decay", maximize)
            if momentum:
                b = o.state(p, "momentum_buffer")
                b.mul_(o["momentum"]).add_(g * (1 - o["dampening"]) if o.nonzero("dampening") else g)
                if nesterov:  # p -= lr * g; p -= lr * momentum * b, as the eager rule does
                    p.sub_(g * o["lr"])
                    p.sub_(b * (o["lr"] * o["momentum"]))
                    continue
                g = b
            p.sub_(g * o["lr"])


@no_grad()
def adam_step(opt, decoupled):
    for o, group in _groups(opt):
        amsgrad, maximize = o.flag("amsgrad"), o.flag("maximize")
        lr, beta1, beta2, eps = o["lr"], o.item("betas", 0), o.item("betas", 1), o["eps"]
        for p in group["params"]:
            if p.grad is None:
                continue
            step = o.state(p, "step")
            step.add_(1)
            if decoupled:
                if o.nonzero("weight_decay"):
                    p.mul_(1 - lr * o["weight_decay"])
                g = _grad(p, o, None, maximize)
            else:
                g = _grad(p, o, "weight_decay", maximize)
            m, v = o.state(p, "exp_avg"), o.state(p, "exp_avg_sq")
            m.mul_(beta1).add_(g * (1 - beta1))
            v.mul_(beta2).add_(g * g * (1 - beta2))
            if amsgrad:
                vmax = o.state(p, "max_exp_avg_sq")
                vmax.copy_(vmax.maximum(v))
                v = vmax
            # the eager rule's arithmetic, in the same order (bias terms in float64, like its
            # Python floats), so compiled and eager steps agree to the last bits
            t = step.double()
            bias1 = 1 - beta1 ** t
            bias2_sqrt = (1 - beta2 ** t).sqrt()
            denom = v.sqrt() + bias2_sqrt * eps
            p.sub_(m / denom * (bias2_sqrt * lr / bias1))
