"""eagerc.cuda.amp: PyTorch's deprecated CUDA spellings of autocast and GradScaler.

`torch.cuda.amp.autocast(...)` is `torch.amp.autocast("cuda", ...)` and
`torch.cuda.amp.GradScaler(...)` is `torch.amp.GradScaler("cuda", ...)`; both warn as PyTorch's
do (FutureWarning). Without a GPU they disable themselves with PyTorch's warning.
"""
import warnings

from ..amp import autocast as _autocast, GradScaler as _GradScaler
from ..runtime import dtypes

__all__ = ["autocast", "GradScaler"]


class autocast(_autocast):
    def __init__(self, enabled=True, dtype=dtypes.float16, cache_enabled=True):
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)
