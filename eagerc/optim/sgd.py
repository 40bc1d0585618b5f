"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""
from .. import dispatch
from ..dispatch import wrap
from . import traced
from ..ops.inplace import bump_version
from ._functional import check_hparams, effective_grad
from .optimizer import Optimizer, array_module

__all__ = ["SGD"]


class SGD(Optimizer):
    """PyTorch's SGD. With g the gradient (negated if maximize):

        g = g + weight_decay * p
        b = g (first step), else b = momentum * b + (1 - dampening) * g
        g = g + momentum * b if nesterov else b            (when momentum != 0)
        p = p - lr * g

    `foreach` is accepted for compatibility and ignored (updates are already
    vectorised per parameter)."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None):
        check_hparams(lr=lr, weight_decay=weight_decay, momentum=momentum)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize))

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        if dispatch.active_tracer() is not None and not (
                traced.needs_state(self, "momentum_buffer", where=lambda g: g["momentum"])):
            traced.sgd_step(self)
            return loss
        for group in self.param_groups:
            lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
            wd, nesterov, maximize = group["weight_decay"], group["nesterov"], group["maximize"]
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                d, g = p._array, grad._array
                xp = array_module(d)
                t, = self._scratch(d, 1)
                g = effective_grad(xp, d, g, wd, maximize, t)
                if momentum:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = wrap(g.copy())
                        b = buf._array
                    else:
                        b = buf._array
                        b *= momentum
                        if dampening:
                            xp.multiply(g, 1 - dampening, out=t)
                            b += t
                        else:
                            b += g
                    if nesterov:  # p -= lr * (g + momentum * b)
                        xp.multiply(g, lr, out=t)
                        d -= t
                        xp.multiply(b, lr * momentum, out=t)
                        d -= t
                        bump_version(p, "add_")
                        continue
                    g = b
                xp.multiply(g, lr, out=t)
                d -= t
                bump_version(p, "add_")
        return loss
