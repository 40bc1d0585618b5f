"""Adagrad with learning-rate decay."""
from ..dispatch import wrap
from ..ops.inplace import bump_version
from ._functional import check_hparams, effective_grad
from .optimizer import Optimizer, array_module, advance_step, new_step

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """PyTorch's Adagrad. With g the gradient (negated if maximize) and t the step:

        g = g + weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g
        p = p - clr * g / (sqrt(s) + eps)

    Like PyTorch, the state (step, sum = initial_accumulator_value) is created
    for every parameter in the constructor."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10, *,
                 maximize=False, foreach=None):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay)
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize))

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self._init_state(p, group)

    def _init_state(self, p, group):
        state = self.state[p]
        if not state:
            init = group["initial_accumulator_value"]
            state["step"] = new_step()
            state["sum"] = wrap(array_module(p._array).full_like(p._array, init))

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
            wd, maximize = group["weight_decay"], group["maximize"]
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                d, g = p._array, grad._array
                xp = array_module(d)
                state = self.state[p]
                if not state:
                    self._init_state(p, group)
                step = advance_step(state)
                t1, t2 = self._scratch(d, 2)
                g = effective_grad(xp, d, g, wd, maximize, t1)
                clr = lr / (1 + (step - 1) * lr_decay)
                s = state["sum"]._array
                xp.multiply(g, g, out=t2)
                s += t2
                xp.sqrt(s, out=t2)
                t2 += eps
                xp.divide(g, t2, out=t2)
                t2 *= clr
                d -= t2
                bump_version(p, "addcdiv_")
        return loss
