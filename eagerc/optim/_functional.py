"""Shared pieces of the update rules: the effective gradient, on raw arrays."""


def effective_grad(xp, d, g, weight_decay, maximize, out):
    """The gradient the rule uses: -g if maximize, plus weight_decay * param (L2).

    Returns `g` itself when neither applies (read it, never write it), else `out`."""
    if weight_decay:
        xp.multiply(d, weight_decay, out=out)
        (xp.subtract if maximize else xp.add)(out, g, out=out)
        return out
    if maximize:
        xp.negative(g, out=out)
        return out
    return g


def check_hparams(lr=0.0, eps=0.0, weight_decay=0.0, momentum=0.0, betas=None, alpha=None):
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    if not 0.0 <= momentum:
        raise ValueError(f"Invalid momentum value: {momentum}")
    if betas is not None:
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
    if alpha is not None and not 0.0 <= alpha:
        raise ValueError(f"Invalid alpha value: {alpha}")
