"""Helpful errors for names eagerc does not have: a PyTorch user should learn whether a name
is PyTorch's and not implemented yet, or not a PyTorch name at all (a typo).

PyTorch's public names come from the snapshot `_torch_api.json` (written by
tools/api_coverage.py from torch 2.13); nothing here imports torch.
"""
import json
import os

__all__ = ["missing"]

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
