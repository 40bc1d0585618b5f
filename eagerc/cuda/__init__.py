"""eagerc.cuda: is a GPU usable here? (cupy and an NVIDIA device)."""
from ..runtime.device import cuda_available, cupy_or_none, require_cupy


def is_available():
    return cuda_available()


def device_count():
    cp = cupy_or_none()
    return 0 if cp is None else cp.cuda.runtime.getDeviceCount()


def current_device():
    return require_cupy().cuda.Device().id


def synchronize():
    cp = cupy_or_none()
    if cp is not None:
        cp.cuda.Stream.null.synchronize()


def manual_seed(seed):
    """CUDA draws come from the same counter-based stream as the CPU's."""
    from ..runtime.random import manual_seed as _seed
    return _seed(seed)


manual_seed_all = manual_seed


def __getattr__(name):  # eagerc.cuda.amp loads on first use (it imports the frontend)
    if name == "amp":
        import importlib
        return importlib.import_module("eagerc.cuda.amp")
    raise AttributeError(f"module 'eagerc.cuda' has no attribute {name!r}")
