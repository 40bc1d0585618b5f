"""Adagrad with learning-rate decay."""
from ..dispatch import wrap
from . import rules
from ._functional import check_flags, check_hparams
from .optimizer import Optimizer, array_module
from .rules import new_step

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """PyTorch's Adagrad (rules.adagrad). Like PyTorch, the state (step, sum =
    initial_accumulator_value) is created for every parameter in the constructor."""

    _bump = "addcdiv_"

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        check_hparams(lr=lr, eps=eps, weight_decay=weight_decay)
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        check_flags(foreach, fused, differentiable)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, fused=fused))

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self._init_state(p, group)

    def _init_state(self, p, group):
        state = self.state[p]
        if not state:
            init = group["initial_accumulator_value"]
            state["step"] = new_step()
            state["sum"] = wrap(array_module(p._array).full_like(p._array, init))

    _rule = staticmethod(rules.adagrad)

    def _traced_state(self, group):
        return ("step", "sum")
