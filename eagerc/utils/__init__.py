"""eagerc.utils: data loading (eagerc.utils.data)."""
from . import data  # noqa: F401

__all__ = ["data"]
