"""Rprop: resilient backpropagation, steps that follow only the sign of the gradient."""
from ..dispatch import wrap
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer, array_module

__all__ = ["Rprop"]


class Rprop(Optimizer):
    """PyTorch's Rprop (rules.rprop). State per parameter: step, prev (the last gradient
    used, zero where its sign flipped), step_size (starts at lr)."""

    _scratch_buffers = 3
    _bump = "addcmul_"

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False,
                 foreach=None, maximize=False, differentiable=False):
        check_hparams(lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        check_flags(foreach, None, differentiable)
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, capturable=capturable))

    _rule = staticmethod(rules.rprop)

    def _init_state(self, p, group):
        self._new_state(p, "prev")["step_size"] = wrap(array_module(p._array).full_like(p._array, group["lr"]))

    def _traced_state(self, group):
        return ("step", "prev", "step_size")
