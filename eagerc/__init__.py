"""eagerc: a readable define-by-run autograd library with PyTorch's API.

This file stays light on purpose: `import eagerc.runtime` (all a deployed model
needs) runs it first, so the frontend (Tensor, nn, autograd, ...) is imported
lazily, on the first attribute access (PEP 562), from `eagerc._api`.
"""
import importlib

__version__ = "0.1.0"


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(f"module 'eagerc' has no attribute {name!r}")
    try:  # a submodule (eagerc.nn, eagerc.autograd, ...) loads on its own
        value = importlib.import_module(f"eagerc.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"eagerc.{name}":
            raise
        api = importlib.import_module("eagerc._api")
        try:
            value = getattr(api, name)
        except AttributeError:
            from ._missing import missing
            raise missing("eagerc", "torch", name) from None
    globals()[name] = value
    return value


def __dir__():
    api = importlib.import_module("eagerc._api")
    return sorted(set(globals()) | set(api.__all__))
