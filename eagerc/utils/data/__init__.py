"""eagerc.utils.data: datasets, samplers and the DataLoader (PyTorch's API)."""
from .dataset import (Dataset, IterableDataset, TensorDataset, StackDataset, Subset, ConcatDataset,  # noqa: F401
                      ChainDataset, random_split)
from .sampler import (Sampler, SequentialSampler, RandomSampler, SubsetRandomSampler,  # noqa: F401
                      WeightedRandomSampler, BatchSampler)
from ._collate import default_collate, default_convert  # noqa: F401
from ._worker import get_worker_info, WorkerInfo  # noqa: F401
from .dataloader import DataLoader  # noqa: F401
from .distributed import DistributedSampler  # noqa: F401
from ..._missing import module_getattr as _module_getattr

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "StackDataset", "Subset", "ConcatDataset", "ChainDataset",
           "random_split", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler", "default_collate", "default_convert", "get_worker_info",
           "WorkerInfo", "DataLoader", "DistributedSampler"]


__getattr__ = _module_getattr("eagerc.utils.data", "torch.utils.data")
