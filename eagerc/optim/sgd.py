"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """PyTorch's SGD (rules.sgd). State per parameter: momentum_buffer (momentum != 0), the
    first step's gradient. `foreach` and `fused` are kept in the param groups and choose
    nothing (eagerc has one implementation); `differentiable=True` makes the step part of
    the autograd graph. With momentum, a compiled training step's first step is traced: its
    buffer is made zero, the graph holds the general rule (what the later calls run) and the
    traced call sets the buffer to the gradient itself (Optimizer._traced_step: the general
    rule on a zero buffer gives (1 - dampening) * g, and 0 * momentum + g is not g for
    g = -0.0)."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        check_hparams(lr=lr, weight_decay=weight_decay, momentum=momentum)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        check_flags(foreach, fused, differentiable)
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                                      foreach=foreach, differentiable=differentiable, fused=fused))

    _rule = staticmethod(rules.sgd)

    def _traced_state(self, group):
        return ("momentum_buffer",) if group["momentum"] else ()

    _first_step_state = _traced_state
