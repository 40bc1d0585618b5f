"""Checks of optimizer options, shared by the optimizers' constructors."""


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
