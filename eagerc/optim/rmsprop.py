"""RMSprop, optionally centered and with momentum."""
from ..dispatch import wrap
from ..ops.inplace import bump_version
from ._functional import check_hparams, effective_grad
from .optimizer import Optimizer, array_module, advance_step, new_step

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """PyTorch's RMSprop. With g the gradient (negated if maximize):

        g = g + weight_decay * p
        s = alpha * s + (1 - alpha) * g * g
        centered: a = alpha * a + (1 - alpha) * g;  r = sqrt(s - a * a) + eps
        else:     r = sqrt(s) + eps
        momentum: b = momentum * b + g / r;  p = p - lr * b
        else:     p = p - lr * g / r

    State: step, square_avg, momentum_buffer (momentum > 0), grad_avg (centered)."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False, *,
                 maximize=False, foreach=None):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay, momentum=momentum, alpha=alpha)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize))

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, alpha, eps, wd = group["lr"], group["alpha"], group["eps"], group["weight_decay"]
            momentum, centered, maximize = group["momentum"], group["centered"], group["maximize"]
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                d, g = p._array, grad._array
                xp = array_module(d)
                state = self.state[p]
                if not state:
                    state["step"] = new_step()
                    state["square_avg"] = wrap(xp.zeros_like(d))
                    if momentum > 0:
                        state["momentum_buffer"] = wrap(xp.zeros_like(d))
                    if centered:
                        state["grad_avg"] = wrap(xp.zeros_like(d))
                advance_step(state)
                t1, t2 = self._scratch(d, 2)
                g = effective_grad(xp, d, g, wd, maximize, t1)
                s = state["square_avg"]._array
                s *= alpha
                xp.multiply(g, g, out=t2)
                t2 *= 1 - alpha
                s += t2
                if centered:
                    a = state["grad_avg"]._array
                    a *= alpha
                    xp.multiply(g, 1 - alpha, out=t2)
                    a += t2
                    xp.multiply(a, a, out=t2)
                    xp.subtract(s, t2, out=t2)
                    xp.sqrt(t2, out=t2)
                else:
                    xp.sqrt(s, out=t2)
                t2 += eps
                xp.divide(g, t2, out=t2)  # g / r
                if momentum > 0:
                    buf = state["momentum_buffer"]
                    b = buf._array
                    b *= momentum
                    b += t2
                    xp.multiply(b, lr, out=t2)
                else:
                    t2 *= lr
                d -= t2
                bump_version(p, "add_")
        return loss
