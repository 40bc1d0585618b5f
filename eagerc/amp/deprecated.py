"""PyTorch's deprecated per-device spellings, `torch.cpu.amp` and `torch.cuda.amp`: one pair of
classes per device, made here so that the two modules differ only in the device they name.

`torch.<device>.amp.autocast(...)` is `torch.amp.autocast("<device>", ...)` and
`torch.<device>.amp.GradScaler(...)` is `torch.amp.GradScaler("<device>", ...)`; both warn as
PyTorch's do (FutureWarning).
"""
import warnings

from .autocast_mode import autocast as _autocast
from .grad_scaler import GradScaler as _GradScaler


def spellings(device, default_dtype=None):
    """(autocast, GradScaler) for `torch.<device>.amp`; autocast's dtype defaults to
    `default_dtype` (None: the device's autocast default)."""
    module = f"eagerc.{device}.amp"

    class autocast(_autocast):
        def __init__(self, enabled=True, dtype=default_dtype, cache_enabled=True):
            warnings.warn(f"`torch.{device}.amp.autocast(args...)` is deprecated. Please use "
                          f"`torch.amp.autocast('{device}', args...)` instead.", FutureWarning, stacklevel=2)
            super().__init__(device, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    class GradScaler(_GradScaler):
        def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                     enabled=True):
            warnings.warn(f"`torch.{device}.amp.GradScaler(args...)` is deprecated. Please use "
                          f"`torch.amp.GradScaler('{device}', args...)` instead.", FutureWarning, stacklevel=2)
            super().__init__(device, init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

    autocast.__module__ = GradScaler.__module__ = module
    autocast.__qualname__, GradScaler.__qualname__ = "autocast", "GradScaler"
    return autocast, GradScaler
