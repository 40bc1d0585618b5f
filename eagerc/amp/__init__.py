"""eagerc.amp: automatic mixed precision (PyTorch's torch.amp).

    autocast       regions where listed ops run in bfloat16/float16 (autocast_mode.py; the
                   per-device op lists, as data, in lists.py)
    GradScaler     loss scaling for float16 training (grad_scaler.py)

See docs/training.md, "Mixed precision".
"""
from .autocast_mode import autocast, is_autocast_available  # noqa: F401
from .grad_scaler import GradScaler  # noqa: F401

__all__ = ["autocast", "GradScaler", "is_autocast_available"]

