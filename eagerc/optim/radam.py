"""RAdam: Adam with the variance of the adaptive learning rate rectified (Liu et al.)."""
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer

__all__ = ["RAdam"]


class RAdam(Optimizer):
    """PyTorch's RAdam (rules.radam). State per parameter: step, exp_avg, exp_avg_sq. The
    first steps (rho_t <= 5) are plain bias-corrected momentum steps; in a compiled step
    both branches are in the graph and the step count picks one (no retrace)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay, betas=betas)
        check_flags(foreach, None, differentiable)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      differentiable=differentiable))

    _rule = staticmethod(rules.radam)

    def _init_state(self, p, group):
        self._new_state(p, "exp_avg", "exp_avg_sq")

    def _traced_state(self, group):
        return ("step", "exp_avg", "exp_avg_sq")
