"""Devices and the array module (`xp`) behind each.

"cpu" is numpy; "cuda" / "cuda:N" is cupy on GPU N. cupy is imported lazily so a
CPU-only install never needs it, and every error says exactly what is missing.
"""
import numpy as np

__all__ = ["Device", "device", "cupy_or_none", "cuda_available", "xp_for", "device_of_array"]


class Device:
    """A device name; compares equal to its string form ("cpu", "cuda:0")."""
    __slots__ = ("type", "index")

    def __init__(self, type, index=None):
        self.type = type
        self.index = index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        if not isinstance(other, Device):
            return NotImplemented
        return self.type == other.type and (self.index or 0) == (other.index or 0)

    def __hash__(self):
        return hash((self.type, self.index or 0))


CPU = Device("cpu")
_cache = {"cpu": CPU}


def device(spec, index=None):
    """Parse "cpu", "cuda", "cuda:1", a Device, or an int (a CUDA ordinal)."""
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, int):
        return Device("cuda", spec)
    if index is not None:
        spec = f"{spec}:{index}"
    d = _cache.get(spec)
    if d is not None:
        return d
    kind, _, idx = str(spec).partition(":")
    if kind not in ("cpu", "cuda") or (idx and not idx.isdigit()) or (kind == "cpu" and idx):
        raise RuntimeError(f"Expected one of cpu, cuda, cuda:N device type at start of device string: {spec}")
    d = Device(kind, int(idx) if idx else (0 if kind == "cuda" else None))
    _cache[spec] = d
    return d


_cupy = None
_cupy_error = None


def cupy_or_none():
    """The cupy module, or None when it is not installed or no GPU is usable."""
    global _cupy, _cupy_error
    if _cupy is None and _cupy_error is None:
        try:
            import cupy
            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("no CUDA device found")
            _cupy = cupy
        except Exception as e:  # ImportError, CUDA driver errors
            _cupy_error = f"{type(e).__name__}: {e}"
    return _cupy


def cuda_available():
    return cupy_or_none() is not None


def require_cupy(what="CUDA"):
    cp = cupy_or_none()
    if cp is None:
        raise RuntimeError(
            f"{what} needs cupy and an NVIDIA GPU, but they are not usable here ({_cupy_error}). "
            "Install the GPU extra with `pip install -e \".[cuda]\"` on a machine with a GPU, "
            "or keep the tensor on 'cpu'.")
    return cp


def xp_for(dev):
    """The array module for a Device."""
    if dev.type == "cpu":
        return np
    return require_cupy(f"device '{dev}'")


def device_of_array(arr):
    if type(arr) is np.ndarray or isinstance(arr, (np.ndarray, np.generic)):
        return CPU
    return device("cuda", int(arr.device.id))


def xp_of(arr):
    """numpy for numpy arrays, else cupy (the array module that owns `arr`)."""
    if isinstance(arr, (np.ndarray, np.generic)):
        return np
    return require_cupy()
