"""Adamax: Adam with the infinity norm in place of the second moment."""
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer

__all__ = ["Adamax"]


class Adamax(Optimizer):
    """PyTorch's Adamax (rules.adamax). State per parameter: step, exp_avg, exp_inf."""

    _bump = "addcdiv_"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay, betas=betas)
        check_flags(foreach, None, differentiable)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    _rule = staticmethod(rules.adamax)

    def _init_state(self, p, group):
        self._new_state(p, "exp_avg", "exp_inf")

    def _traced_state(self, group):
        return ("step", "exp_avg", "exp_inf")
