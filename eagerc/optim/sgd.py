"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""
from . import rules
from ._functional import check_hparams
from .optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """PyTorch's SGD (rules.sgd). State per parameter: momentum_buffer (momentum != 0), the
    first step's gradient. `foreach` is accepted for compatibility and ignored (updates are
    already vectorised per parameter)."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None):
        check_hparams(lr=lr, weight_decay=weight_decay, momentum=momentum)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize))

    def _rule(self, ops, o, params):
        rules.sgd(ops, o, params)

    def _traced_state(self, group):
        return ("momentum_buffer",) if group["momentum"] else ()
