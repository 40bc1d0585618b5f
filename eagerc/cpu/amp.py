"""eagerc.cpu.amp: PyTorch's deprecated CPU spellings of autocast (bfloat16 by default) and
GradScaler; both warn as PyTorch's do (FutureWarning). Made by amp/deprecated.py."""
from ..amp.deprecated import spellings

__all__ = ["autocast", "GradScaler"]

autocast, GradScaler = spellings("cpu")
