"""Adadelta: per-coordinate step sizes from running averages of squared gradients and updates."""
from ..dispatch import wrap
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer, array_module
from .rules import new_step

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """PyTorch's Adadelta (rules.adadelta). State per parameter: step, square_avg, acc_delta."""

    _scratch_buffers = 3

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        check_flags(foreach, None, differentiable)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                                      capturable=capturable, foreach=foreach, differentiable=differentiable))

    def _rule(self, ops, o, params):
        rules.adadelta(ops, o, params)

    def _init_state(self, p, group):
        xp = array_module(p._array)
        state = self.state[p]
        state["step"] = new_step()
        state["square_avg"] = wrap(xp.zeros_like(p._array))
        state["acc_delta"] = wrap(xp.zeros_like(p._array))

    def _traced_state(self, group):
        return ("step", "square_avg", "acc_delta")
