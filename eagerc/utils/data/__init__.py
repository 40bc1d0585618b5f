"""eagerc.utils.data: datasets, samplers and the DataLoader (PyTorch's API)."""
from .dataset import (Dataset, IterableDataset, TensorDataset, StackDataset, Subset, ConcatDataset,  # noqa: F401
                      ChainDataset, random_split)
from .sampler import (Sampler, SequentialSampler, RandomSampler, SubsetRandomSampler,  # noqa: F401
                      WeightedRandomSampler, BatchSampler)
from ._collate import default_collate, default_convert  # noqa: F401
from ._worker import get_worker_info, WorkerInfo  # noqa: F401
from .dataloader import DataLoader  # noqa: F401
from .distributed import DistributedSampler  # noqa: F401

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "StackDataset", "Subset", "ConcatDataset", "ChainDataset",
           "random_split", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler", "default_collate", "default_convert", "get_worker_info",
           "WorkerInfo", "DataLoader", "DistributedSampler"]


def __getattr__(name):  # a missing name: PyTorch's and not implemented yet, or a typo?
    if name.startswith("__"):
        raise AttributeError(name)
    from ..._missing import missing
    raise missing("eagerc.utils.data", "torch.utils.data", name)
