"""RMSprop, optionally centered and with momentum."""
from ..dispatch import wrap
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer, array_module
from .rules import new_step

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

    def _rule(self, ops, o, params):
        rules.rmsprop(ops, o, params)

    def _init_state(self, p, group):
        d = p._array
        xp = array_module(d)
        state = self.state[p]
        state["step"] = new_step()
        state["square_avg"] = wrap(xp.zeros_like(d))
        if group["momentum"] > 0:
            state["momentum_buffer"] = wrap(xp.zeros_like(d))
        if group["centered"]:
            state["grad_avg"] = wrap(xp.zeros_like(d))

    def _traced_state(self, group):
        return ("step", "square_avg") + (("momentum_buffer",) if group["momentum"] > 0 else ()) + \
            (("grad_avg",) if group["centered"] else ())
