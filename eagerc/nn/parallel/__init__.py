"""eagerc.nn.parallel: data-parallel training over eagerc.distributed (docs/distributed.md).

    distributed.py  DistributedDataParallel: the Module wrapper users see
    reducer.py      gradient buckets all-reduced while backward still runs
"""
from .distributed import DistributedDataParallel  # noqa: F401

__all__ = ["DistributedDataParallel"]
