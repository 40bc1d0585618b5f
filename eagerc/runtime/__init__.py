"""The runtime layer: devices, dtypes, op declarations and kernels, RNG.

It imports numpy (and cupy lazily) and never the layers above, so a deployed
program can be loaded and run with `eagerc.runtime` alone.
"""
from . import dtypes, device, memory, random  # noqa: F401
from .ops import OPS, load_all as _load_all

_load_all()
memory.tune_allocator()  # big freed arrays reused, not re-faulted every step (memory.py)


def load(path, **kw):
    """Load an exported program file (see eagerc.runtime.program.load)."""
    from .program import load as _load
    return _load(path, **kw)


__all__ = ["dtypes", "device", "random", "OPS", "load"]
