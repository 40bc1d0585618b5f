"""DistributedSampler: each rank's share of a dataset, as PyTorch computes it.

Every rank draws the same permutation for an epoch (eagerc's counter-based generator
seeded with seed + epoch: call `set_epoch` each epoch) and takes every num_replicas-th
index from its rank on. With drop_last=False the list is first padded by repeating its
own start, so all ranks get the same count (some samples twice); with drop_last=True
the tail is dropped and the shards are disjoint. Only the permutation's numbers differ
from PyTorch's (its generator is another algorithm); the padding, dropping and striding
are PyTorch's, index for index.
"""
import math

from .sampler import Sampler
from ...runtime import random as rng

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            from ... import distributed as dist
            if not dist.is_initialized():
                raise RuntimeError("DistributedSampler: pass num_replicas and rank, or call "
                                   "eagerc.distributed.init_process_group first")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle, self.seed = shuffle, seed

    def permutation(self):
        """This epoch's order of the whole dataset, the same on every rank."""
        n = len(self.dataset)
        if not self.shuffle:
            return list(range(n))
        from ...ops.creation import randperm
        return randperm(n, generator=rng.Generator(seed=self.seed + self.epoch)).tolist()

    def __iter__(self):
        indices = self.permutation()
        if not self.drop_last:
            padding_size = self.total_size - len(indices)
            if padding_size <= len(indices):
                indices += indices[:padding_size]
            else:
                indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Use a new permutation (seed + epoch); call it before each epoch, on every rank."""
        self.epoch = epoch
