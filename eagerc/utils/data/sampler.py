"""Samplers: which dataset indices to visit, and in which order.

Random orders come from eagerc's counter-based generator (`eagerc.randperm` with
`generator=`), so a seeded Generator gives the same epochs on every run and
platform, and a loader with worker processes sees the same order as one without
(sampling always happens in the main process). Draws with replacement are lazy, a
chunk at a time, so a sampler of int(1e10) samples starts at once.
"""
import numpy as np

from ...runtime import random as rng

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler"]


class Sampler:
    """Base class: an iterable of indices (or of lists of indices, for batch samplers)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


def _generator_for(generator):
    """The generator to draw from: the given one, or (like PyTorch) a fresh one seeded
    from one word of the default generator, so each epoch differs."""
    if generator is not None:
        return generator
    return rng.Generator(seed=_draw_seed(rng.default_generator))


def _draw_seed(gen):
    """One non-negative int64 from `gen` (consumes one word of its stream)."""
    offset = gen.next_offset(1)
    return int(rng.integers(gen.initial_seed(), offset, (), 0, 2**63 - 1, np.int64))


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation per epoch (or `num_samples` draws with replacement)."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        from ...ops.creation import randperm
        n = len(self.data_source)
        gen = _generator_for(self.generator)
        if self.replacement:
            yield from _draws_with_replacement(gen, n, self.num_samples)
            return
        for _ in range(self.num_samples // n):
            yield from randperm(n, generator=gen).tolist()
        rest = self.num_samples % n
        if rest:
            yield from randperm(n, generator=gen).tolist()[:rest]

    def __len__(self):
        return self.num_samples


_CHUNK = 1 << 16  # indices drawn at a time with replacement (512 KiB of int64)


def _draws_with_replacement(gen, n, num_samples):
    """num_samples uniform indices in [0, n), drawn lazily CHUNK at a time, so
    num_samples=int(1e10) costs nothing up front. The numbers are those of
    `randint(0, n, (num_samples,), generator=gen)`: the stream's words are reserved at
    once (the generator moves on as after that draw) and the n-th index is a pure
    function of (seed, offset + n), whichever chunk it falls in."""
    if n <= 0:
        raise RuntimeError(f"RandomSampler: cannot draw {num_samples} samples with replacement from an empty "
                           "data_source")
    seed = gen.initial_seed()
    offset = gen.next_offset(rng.words_used("integers", num_samples))
    for start in range(0, num_samples, _CHUNK):
        count = min(_CHUNK, num_samples - start)
        yield from rng.integers(seed, offset + start, (count,), 0, n, np.int64).tolist()


class SubsetRandomSampler(Sampler):
    """The given indices, in a random order each epoch."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        from ...ops.creation import randperm
        for i in randperm(len(self.indices), generator=_generator_for(self.generator)).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """`num_samples` indices drawn with probability proportional to `weights`."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {w.shape}")
        if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
            raise ValueError("weights must be finite, non-negative and not all zero")
        if not replacement and num_samples > np.count_nonzero(w):
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        self.weights = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        gen = _generator_for(self.generator)
        n = self.num_samples if self.replacement else len(self.weights)
        u = rng.uniform(gen.initial_seed(), gen.next_offset(n), (n,), np.float64)
        if self.replacement:  # inverse CDF
            cdf = np.cumsum(self.weights)
            idx = np.searchsorted(cdf, u * cdf[-1], side="right")
            idx = np.minimum(idx, len(cdf) - 1)
        else:  # Efraimidis-Spirakis: the k largest u ** (1 / w)
            with np.errstate(divide="ignore"):
                keys = np.where(self.weights > 0, np.log1p(-u) / self.weights, -np.inf)
            idx = np.argsort(-keys, kind="stable")[:self.num_samples]
        yield from idx.tolist()

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Group another sampler's indices into lists of `batch_size` (the last one shorter
    unless drop_last)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
