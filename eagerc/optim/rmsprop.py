"""RMSprop, optionally centered and with momentum."""
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """PyTorch's RMSprop (rules.rmsprop). State: step, square_avg, momentum_buffer
    (momentum > 0), grad_avg (centered)."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay, momentum=momentum, alpha=alpha)
        check_flags(foreach, None, differentiable)
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                                      weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    _rule = staticmethod(rules.rmsprop)

    def _init_state(self, p, group):
        self._new_state(p, *self._traced_state(group)[1:])

    def _traced_state(self, group):
        return ("step", "square_avg") + (("momentum_buffer",) if group["momentum"] > 0 else ()) + \
            (("grad_avg",) if group["centered"] else ())
