"""eagerc.cuda.amp: PyTorch's deprecated CUDA spellings of autocast (float16 by default) and
GradScaler; both warn as PyTorch's do (FutureWarning), and without a GPU they disable
themselves with PyTorch's warning. Made by amp/deprecated.py."""
from ..amp.deprecated import spellings
from ..runtime import dtypes

__all__ = ["autocast", "GradScaler"]

autocast, GradScaler = spellings("cuda", dtypes.float16)
