"""ASGD: averaged stochastic gradient descent (Polyak & Juditsky), as PyTorch implements it."""
import numpy as np

from ..dispatch import wrap
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer

__all__ = ["ASGD"]


class ASGD(Optimizer):
    """PyTorch's ASGD (rules.asgd). State per parameter: step, eta (starts at lr) and mu
    (starts at 1), float32 0-d tensors as PyTorch keeps them, and ax, the running average
    of the parameter."""

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
                 maximize=False, differentiable=False, capturable=False):
        check_hparams(lr=lr, weight_decay=weight_decay)
        check_flags(foreach, None, differentiable)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    _rule = staticmethod(rules.asgd)

    def _init_state(self, p, group):
        state = self._new_state(p, "ax")
        state["eta"] = wrap(np.asarray(float(group["lr"]), np.float32))
        state["mu"] = wrap(np.ones((), np.float32))

    def _traced_state(self, group):
        return ("step", "eta", "mu", "ax")
