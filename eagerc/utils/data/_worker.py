"""What runs inside a DataLoader worker process.

A worker reads tasks `(epoch, index, batch_indices)` from its own index queue,
fetches and collates the samples, and puts `(epoch, index, batch)` on the shared
result queue; batches travel pickled (a Tensor pickles as its numpy array). The epoch
tag lets persistent workers serve several epochs: an iterable dataset's iterator
restarts when a task of a new epoch arrives, and the main process drops results of
epochs it has abandoned.

A worker exits on `None` from its index queue, when the loader's `done` event is set
(which needs no queue feeder thread, so it also works while the garbage collector tears
the loader down), and when the main process dies: between tasks it waits at most
_STATUS_CHECK_INTERVAL and then asks the parent's sentinel (multiprocessing's own
handle, closed by the OS when the parent exits, on every platform and start method).
"""
import multiprocessing
import queue
import random
import sys
import traceback

import numpy as np

__all__ = ["WorkerInfo", "get_worker_info"]

_worker_info = None
_STATUS_CHECK_INTERVAL = 0.1  # seconds an idle worker waits before checking its parent and `done`


class WorkerInfo:
    """What `get_worker_info()` returns inside a worker: id, num_workers, seed, dataset."""

    def __init__(self, id, num_workers, seed, dataset):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __setattr__(self, key, value):
        if key in self.__dict__:
            raise RuntimeError(f"Cannot assign attributes to {type(self).__name__} objects")
        super().__setattr__(key, value)

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed})"


def get_worker_info():
    """In a DataLoader worker process: its WorkerInfo; in the main process: None."""
    return _worker_info


class IterableStop:
    """A worker's iterable dataset is exhausted for this epoch."""

    def __init__(self, worker_id):
        self.worker_id = worker_id


class ExceptionWrapper:
    """An exception raised in a worker, carried to the main process with its traceback."""

    def __init__(self, where):
        exc_type, exc, _ = sys.exc_info()
        self.exc_type = exc_type
        self.msg = "".join(traceback.format_exception(exc_type, exc, exc.__traceback__))
        self.where = where

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.msg}"
        if self.exc_type is KeyError:  # KeyError would repr() the message
            msg = KeyErrorMessage(msg)
        try:
            exc = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exc


class KeyErrorMessage(str):
    def __repr__(self):
        return self


def seed_worker(seed):
    """Seed eagerc's default generator, Python's `random` and numpy's legacy global RNG."""
    from ...runtime import random as rng
    rng.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


class MapFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset, self.auto_collation, self.collate_fn = dataset, auto_collation, collate_fn
        from ._collate import default_collate
        from .dataset import TensorDataset
        # rows of a TensorDataset batch by fancy indexing: same result as stacking the samples
        self.fast = auto_collation and collate_fn is default_collate and type(dataset) is TensorDataset

    def fetch(self, indices):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[indices])
        if self.fast:
            return _tensor_rows(self.dataset.tensors, indices)
        getitems = getattr(self.dataset, "__getitems__", None)
        data = getitems(indices) if getitems is not None else [self.dataset[i] for i in indices]
        return self.collate_fn(data)


def _tensor_rows(tensors, indices):
    from ...dispatch import wrap
    out = []
    for t in tensors:
        if t.requires_grad:
            out.append(t[list(indices)])
        else:
            d = t._array
            idx = np.asarray(indices, dtype=np.int64) if type(d) is np.ndarray else indices
            out.append(wrap(d[idx]))
    return out


class IterableFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last, batch_size):
        self.it = iter(dataset)
        self.auto_collation, self.collate_fn = auto_collation, collate_fn
        self.drop_last, self.batch_size = drop_last, batch_size
        self.ended = False

    def fetch(self, _):
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.it))
        batch = []
        for _ in range(self.batch_size):
            try:
                batch.append(next(self.it))
            except StopIteration:
                self.ended = True
                break
        if not batch or (self.drop_last and len(batch) < self.batch_size):
            raise StopIteration
        return self.collate_fn(batch)


def make_fetcher(iterable, dataset, auto_collation, collate_fn, drop_last, batch_size):
    if iterable:
        return IterableFetcher(dataset, auto_collation, collate_fn, drop_last, batch_size)
    return MapFetcher(dataset, auto_collation, collate_fn, drop_last)


def worker_loop(iterable, dataset, index_queue, result_queue, done, auto_collation, collate_fn, drop_last,
                batch_size, seed, init_fn, worker_id, num_workers):
    global _worker_info
    parent = multiprocessing.parent_process()
    seed_worker(seed)
    _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
    init_error = None
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception:
        init_error = ExceptionWrapper(f"in DataLoader worker process {worker_id} (worker_init_fn)")
    fetcher, epoch = None, None
    exhausted = False
    try:
        while True:
            try:
                task = index_queue.get(timeout=_STATUS_CHECK_INTERVAL)
            except queue.Empty:
                if done.is_set() or not parent.is_alive():  # shut down, or the main process died
                    break
                continue
            if task is None:
                break
            ep, idx, indices = task
            if ep != epoch:
                epoch, fetcher, exhausted = ep, None, False
            if exhausted:
                continue
            if init_error is not None:
                data, init_error = init_error, None
            else:
                try:
                    if fetcher is None:
                        fetcher = make_fetcher(iterable, dataset, auto_collation, collate_fn, drop_last, batch_size)
                    data = fetcher.fetch(indices)
                except StopIteration:
                    if not iterable:
                        data = ExceptionWrapper(f"in DataLoader worker process {worker_id}")
                    else:
                        data, exhausted = IterableStop(worker_id), True
                except Exception:
                    data = ExceptionWrapper(f"in DataLoader worker process {worker_id}")
            result_queue.put((ep, idx, data))
            del data
    except KeyboardInterrupt:
        pass
    result_queue.cancel_join_thread()
    result_queue.close()
