"""Backends turn an optimised Graph into a program: program(env, overrides) -> (outputs, mutations).

env maps input names to arrays; overrides maps a node's output name to attributes that
change per call (the offsets of random ops).
"""
from .interpreter import InterpreterBackend

_BACKENDS = {"interpreter": InterpreterBackend}


def register_backend(name, cls):
    _BACKENDS[name] = cls


_LAZY = {"numpy": "numpy_backend", "c": "c_backend", "cuda": "cuda_backend"}  # modules that register themselves on import


def pipeline(backend):
    """The passes `optimize` runs, once, before `backend.compile`: the backend's own `pipeline`,
    else passes.PIPELINE (the interpreter reads no annotations: any pipeline does)."""
    p = getattr(backend, "pipeline", None)
    if p is None:
        from ..passes import PIPELINE
        p = PIPELINE
    return p


def default_backend(arrays=(), stacklevel=2):
    """The name of the fastest backend that works for a call on `arrays` (eagerc.compile's
    default, decided at trace time): "cuda" for cupy arrays; else "c" when the C compiler
    builds kernels (kernel_cache.works: probed once per process); else "numpy", after the
    C kernels' one-line notice (once per process)."""
    if any(type(a).__module__.startswith("cupy") for a in arrays):
        return "cuda"
    from ...runtime import kernel_cache
    if kernel_cache.works():
        return "c"
    if not _noticed:
        _noticed.append(True)
        kernel_cache.notice("compile", kernel_cache.why_not(), "the numpy backend", stacklevel=stacklevel + 1)
    return "numpy"


_noticed = []


def get_backend(name):
    if name not in _BACKENDS and name in _LAZY:
        import importlib
        importlib.import_module(f"{__name__}.{_LAZY[name]}")
    cls = _BACKENDS.get(name)
    if cls is None:
        raise ValueError(f"eagerc.compile: unknown backend {name!r}; available: "
                         f"{', '.join(sorted(set(_BACKENDS) | set(_LAZY)))}")
    return cls()
