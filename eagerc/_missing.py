"""Helpful errors for names eagerc does not have: a PyTorch user should learn whether a name
is PyTorch's and not implemented yet, or not a PyTorch name at all (a typo).

PyTorch's public names come from the snapshot `_torch_api.json` (written by
tools/api_coverage.py from torch 2.13); nothing here imports torch.
"""
import json
import os

__all__ = ["missing", "module_getattr", "mark_missing_methods"]

_NAMES = None
DOC = "docs/pytorch_compat.md"


def _torch_names():
    global _NAMES
    if _NAMES is None:
        try:
            with open(os.path.join(os.path.dirname(__file__), "_torch_api.json")) as f:
                _NAMES = {ns: set(names) for ns, names in json.load(f)["names"].items()}
        except (OSError, ValueError, KeyError):
            _NAMES = {}
    return _NAMES


def missing(eagerc_ns, torch_ns, name):
    """The AttributeError for `eagerc_ns.name`, saying whether PyTorch's `torch_ns.name` exists."""
    if name in _torch_names().get(torch_ns, ()):
        msg = (f"{eagerc_ns} has no {name!r} -- PyTorch's {torch_ns}.{name} is not implemented in eagerc yet "
               f"(see {DOC} for what is supported)")
    else:
        msg = f"{eagerc_ns} has no attribute {name!r} (PyTorch's {torch_ns} has no {name!r} either)"
    return AttributeError(msg)


def module_getattr(eagerc_ns, torch_ns):
    """A module's `__getattr__` (PEP 562) for names it lacks: `missing`'s error, whether the name
    is PyTorch's and not implemented yet or a typo (dunder lookups get a plain AttributeError)."""
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise missing(eagerc_ns, torch_ns, name)
    return __getattr__


class _NotImplementedYet:
    """A public name of torch.Tensor that eagerc.Tensor lacks: reading it raises `missing`'s
    error. A class attribute per name rather than `Tensor.__getattr__`: a type with
    __getattr__ makes every attribute read of every tensor slower (a slot read went from 7 to
    22 ns: CPython stops specialising those loads), and apply reads several per op. A typo that
    is no PyTorch name gets Python's own AttributeError."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, owner=None):
        raise missing("eagerc.Tensor", "torch.Tensor", self.name)


def mark_missing_methods(cls):
    """Give `cls` (Tensor) one _NotImplementedYet per public torch.Tensor name it lacks; call it
    once every method is attached (a method attached later simply replaces its marker)."""
    for name in _torch_names().get("torch.Tensor", ()):
        if not name.startswith("_") and not hasattr(cls, name):
            setattr(cls, name, _NotImplementedYet(name))
