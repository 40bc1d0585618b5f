"""Adam and AdamW (decoupled weight decay), with the AMSGrad variant."""
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """PyTorch's Adam (rules.adam): the L2 penalty in the gradient, or decoupled weight decay
    (AdamW's) with decoupled_weight_decay=True. State per parameter: step (float32 0-d
    tensor), exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad). `foreach` and `fused` choose
    nothing; `capturable=True` is refused for CPU parameters, as in PyTorch."""

    _bump = "addcdiv_"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay, betas=betas)
        check_flags(foreach, fused, differentiable)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay))

    _rule = staticmethod(rules.adam)

    def _init_state(self, p, group):
        self._new_state(p, "exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if group["amsgrad"] else ()))

    def _traced_state(self, group):
        return ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay
    before the Adam update, and the gradient is left alone. Default weight_decay=1e-2."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         foreach=foreach, maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused, decoupled_weight_decay=True)
