"""Adadelta: per-coordinate step sizes from running averages of squared gradients and updates."""
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer

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

    _rule = staticmethod(rules.adadelta)

    def _init_state(self, p, group):
        self._new_state(p, "square_avg", "acc_delta")

    def _traced_state(self, group):
        return ("step", "square_avg", "acc_delta")
