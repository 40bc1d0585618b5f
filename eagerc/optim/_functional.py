"""Checks of optimizer options, shared by the optimizers' constructors."""


def check_hparams(lr=0.0, eps=0.0, weight_decay=0.0, momentum=0.0, betas=None, alpha=None):
    for what, value in (("learning rate", lr), ("epsilon value", eps), ("weight_decay value", weight_decay),
                        ("momentum value", momentum)):
        if not 0.0 <= value:
            raise ValueError(f"Invalid {what}: {value}")
    if betas is not None:
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
    if alpha is not None and not 0.0 <= alpha:
        raise ValueError(f"Invalid alpha value: {alpha}")


def check_flags(foreach=None, fused=None, differentiable=False):
    """PyTorch's implementation switches, kept in the param groups as PyTorch keeps them.

    eagerc has one implementation per optimizer (its rule, optim/rules.py), so `foreach`
    and `fused` choose nothing; the combinations PyTorch refuses are refused the same way."""
    if fused:
        if differentiable:
            raise RuntimeError("`fused` does not support `differentiable`")
        if foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
    if foreach and differentiable:
        raise RuntimeError("foreach=True does not support differentiable=True (PyTorch's _foreach ops "
                           "don't support autograd); leave foreach=None")
