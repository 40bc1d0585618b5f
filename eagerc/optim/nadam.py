"""NAdam: Adam with Nesterov momentum (Dozat), with PyTorch's momentum-decay schedule."""
import numpy as np

from ..dispatch import wrap
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """PyTorch's NAdam (rules.nadam). State per parameter: step, mu_product (a float32 0-d
    tensor, as PyTorch keeps it), exp_avg, exp_avg_sq."""

    _bump = "addcdiv_"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay, betas=betas)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        check_flags(foreach, None, differentiable)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    _rule = staticmethod(rules.nadam)

    def _init_state(self, p, group):
        self._new_state(p, "exp_avg", "exp_avg_sq")["mu_product"] = wrap(np.ones((), np.float32))

    def _traced_state(self, group):
        return ("step", "mu_product", "exp_avg", "exp_avg_sq")
