"""Adam and AdamW (decoupled weight decay), with the AMSGrad variant."""
import math

from .. import dispatch
from ..dispatch import wrap
from . import traced
from ..ops.inplace import bump_version
from ._functional import check_hparams, effective_grad
from .optimizer import Optimizer, array_module, advance_step, new_step

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """PyTorch's Adam. With g the gradient (negated if maximize) and t the step:

        g = g + weight_decay * p                       (Adam: L2 penalty in the gradient)
        p = p * (1 - lr * weight_decay)                (AdamW instead: decoupled decay)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        v_max = max(v_max, v); use v_max for v          (amsgrad)
        p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    State per parameter: step (float32 0-d tensor), exp_avg, exp_avg_sq,
    max_exp_avg_sq (amsgrad). `foreach` is accepted and ignored."""

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 maximize=False, foreach=None):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay, betas=betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        decoupled = self._decoupled
        if dispatch.active_tracer() is not None and not traced.needs_state(self, "exp_avg"):
            traced.adam_step(self, decoupled)
            return loss
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            wd, amsgrad, maximize = group["weight_decay"], group["amsgrad"], group["maximize"]
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                d, g = p._array, grad._array
                xp = array_module(d)
                state = self.state[p]
                if not state:
                    state["step"] = new_step()
                    state["exp_avg"] = wrap(xp.zeros_like(d))
                    state["exp_avg_sq"] = wrap(xp.zeros_like(d))
                    if amsgrad:
                        state["max_exp_avg_sq"] = wrap(xp.zeros_like(d))
                step = advance_step(state)
                t1, t2 = self._scratch(d, 2)
                if decoupled:
                    if wd:
                        d *= 1 - lr * wd
                    g = effective_grad(xp, d, g, 0, maximize, t1)
                else:
                    g = effective_grad(xp, d, g, wd, maximize, t1)
                m, v = state["exp_avg"]._array, state["exp_avg_sq"]._array
                m *= beta1
                xp.multiply(g, 1 - beta1, out=t2)
                m += t2
                v *= beta2
                xp.multiply(g, g, out=t2)
                t2 *= 1 - beta2
                v += t2
                if amsgrad:
                    vmax = state["max_exp_avg_sq"]
                    xp.maximum(vmax._array, v, out=vmax._array)
                    v = vmax._array
                bias1 = 1 - beta1 ** step
                bias2_sqrt = math.sqrt(1 - beta2 ** step)
                # lr/bias1 * m / (sqrt(v)/bias2_sqrt + eps), with bias2_sqrt moved to the numerator
                xp.sqrt(v, out=t2)
                t2 += eps * bias2_sqrt
                xp.divide(m, t2, out=t2)
                t2 *= lr * bias2_sqrt / bias1
                d -= t2
                bump_version(p, "addcdiv_")
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay
    before the Adam update, and the gradient is left alone. Default weight_decay=1e-2."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         maximize=maximize, foreach=foreach)
