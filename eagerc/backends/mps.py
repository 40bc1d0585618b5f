"""torch.backends.mps: Apple's Metal backend; eagerc has none."""


def is_available():
    return False


def is_built():
    return False
