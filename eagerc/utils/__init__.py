"""eagerc.utils: data loading (eagerc.utils.data); TensorBoard logging (eagerc.utils.tensorboard, imported
only when asked for, as in PyTorch: it needs the `tensorboard` extra)."""
from . import data  # noqa: F401

__all__ = ["data"]
