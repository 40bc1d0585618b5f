"""torch.backends.mkldnn: eagerc does not use oneDNN (its CPU kernels are numpy and BLAS)."""
enabled = True
deterministic = False


def is_available():
    return False
