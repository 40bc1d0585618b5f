"""torch.backends.opt_einsum: eagerc's einsum lets numpy choose the contraction order
(`numpy.einsum(..., optimize=True)`); `enabled` and `strategy` are kept to be read back."""
enabled = True
strategy = "auto"


def is_available():
    return True
