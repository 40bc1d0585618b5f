"""eagerc.cpu: PyTorch's torch.cpu namespace (its `amp` spellings of autocast)."""
from . import amp  # noqa: F401  (eagerc.cpu.amp.autocast, as torch.cpu.amp)


def is_available():
    return True


def device_count():
    return 1


def synchronize(device=None):
    """CPU work is synchronous: nothing to wait for."""
