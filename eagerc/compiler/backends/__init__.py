"""Backends turn an optimised Graph into a program: program(env, overrides) -> (outputs, mutations).

env maps input names to arrays; overrides maps a node's output name to attributes that
change per call (the offsets of random ops).
"""
from .interpreter import InterpreterBackend

_BACKENDS = {"interpreter": InterpreterBackend}


def register_backend(name, cls):
    _BACKENDS[name] = cls


def get_backend(name):
    if name == "numpy" and "numpy" not in _BACKENDS:
        try:
            from . import numpy_backend  # noqa: F401  (registers itself)
        except ImportError:
            return InterpreterBackend()
    try:
        return _BACKENDS.get(name, InterpreterBackend if name == "numpy" else None)()
    except TypeError:
        raise ValueError(f"eagerc.compile: unknown backend {name!r}; available: "
                         f"{', '.join(sorted(set(_BACKENDS) | {'numpy'}))}") from None
