"""eagerc.accelerator: PyTorch's device-generic accelerator API (torch.accelerator).

The accelerator is CUDA through cupy when a GPU is usable, else there is none: scripts
that pick `torch.accelerator.current_accelerator()` or fall back to "cpu" run unchanged.
"""
from . import cuda as _cuda

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index",
           "current_device_idx", "set_device_index", "set_device_idx", "synchronize", "empty_cache"]


def is_available():
    return _cuda.is_available()


def current_accelerator(check_available=False):
    """device("cuda") when a GPU is usable; None otherwise (as PyTorch on a CPU-only build)."""
    if not _cuda.is_available():
        return None
    from .runtime.device import device
    return device("cuda")


def device_count():
    return _cuda.device_count() if _cuda.is_available() else 0


def current_device_index():
    return _cuda.current_device() if _cuda.is_available() else -1


current_device_idx = current_device_index


def set_device_index(device):
    """Make `device` (an index or a cuda device) the current one."""
    if not _cuda.is_available():
        raise RuntimeError("set_device_index: no accelerator is available (eagerc uses CUDA through cupy)")
    from .runtime.device import require_cupy
    index = device if isinstance(device, int) else (getattr(device, "index", None) or 0)
    require_cupy().cuda.Device(index).use()


set_device_idx = set_device_index


def synchronize(device=None):
    _cuda.synchronize()


def empty_cache():
    """Give cached GPU memory back (cupy's memory pool); nothing to do without a GPU."""
    if _cuda.is_available():
        from .runtime.device import require_cupy
        require_cupy().get_default_memory_pool().free_all_blocks()
