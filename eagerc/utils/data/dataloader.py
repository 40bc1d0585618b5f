"""DataLoader: batches from a dataset, in the main process or in worker processes.

    sampler (indices) -> batch_sampler (lists of indices) -> fetch samples -> collate_fn

With num_workers > 0 the main process still does all the sampling (so a seeded
shuffle gives the same batches for any number of workers); each batch's indices
go round-robin to the workers' index queues, at most prefetch_factor per worker
ahead, and the batches come back through one result queue and are put back in
order before they are yielded.

Every iterator draws one base seed from the loader's generator (or the default
one) before sampling, as PyTorch does; worker i seeds eagerc, `random` and numpy
with base_seed + i.
"""
import itertools
import multiprocessing
import queue
import time

from ...runtime import random as rng
from . import _worker
from ._collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler, _draw_seed

__all__ = ["DataLoader", "get_worker_info", "default_collate", "default_convert"]

get_worker_info = _worker.get_worker_info
_SHUTDOWN_GRACE = 0.3  # seconds the workers get to exit on their own before they are terminated


class _InfiniteConstantSampler(Sampler):
    """For iterable datasets: the loop runs until the dataset itself stops."""

    def __iter__(self):
        while True:
            yield None


class DataLoader:
    """Iterate over `dataset` in batches (PyTorch's DataLoader).

    batch_size=None turns off automatic batching (each sample is converted with
    default_convert). `generator` drives shuffling and the workers' seeds.
    pin_memory is accepted and ignored (there is no pinned host memory here)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing. Let "
                             "num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor is not None and prefetch_factor < 1:
            raise ValueError("prefetch_factor option should be positive")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self.generator = generator
        self._iterable = isinstance(dataset, IterableDataset)

        if self._iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                                 f"but got batch_sampler={batch_sampler}")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                             "drop_last")
        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self._iterator = None

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        return _MultiProcessIter(self)

    def __iter__(self):
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    def __len__(self):
        return _num_batches(self.dataset, self._iterable, self.batch_size, self.drop_last, self._index_sampler)


def _num_batches(dataset, iterable, batch_size, drop_last, index_sampler):
    if iterable:
        n = len(dataset)  # TypeError when the dataset has no length, as in PyTorch
        if batch_size is not None:
            n = n // batch_size if drop_last else -(-n // batch_size)
        return n
    return len(index_sampler)


class _BaseIter:
    # An iterator keeps what it needs, never the loader: a persistent loader owns its
    # iterator, and a cycle between them would leave shutting the workers down to the
    # garbage collector (`del loader` must stop them at once).
    def __init__(self, loader):
        self._dataset = loader.dataset
        self._iterable = loader._iterable
        self._auto_collation = loader._auto_collation
        self._collate_fn = loader.collate_fn
        self._drop_last = loader.drop_last
        self._batch_size = loader.batch_size
        self._reset(loader, first=True)

    def _reset(self, loader, first=False):
        self._index_sampler = loader._index_sampler
        self._sampler_iter = iter(self._index_sampler)
        self._base_seed = _draw_seed(loader.generator or rng.default_generator)
        self._num_yielded = 0

    def __iter__(self):
        return self

    def __len__(self):
        return _num_batches(self._dataset, self._iterable, self._batch_size, self._drop_last, self._index_sampler)

    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        return data


class _SingleProcessIter(_BaseIter):
    def _reset(self, loader, first=False):
        super()._reset(loader, first)
        self._fetcher = _worker.make_fetcher(self._iterable, self._dataset, self._auto_collation,
                                             self._collate_fn, self._drop_last, self._batch_size)

    def _next_data(self):
        index = next(self._sampler_iter)  # StopIteration ends the epoch
        return self._fetcher.fetch(index)


class _MultiProcessIter(_BaseIter):
    """Workers, their queues, and the bookkeeping that yields batches in order."""

    def __init__(self, loader):
        ctx = loader.multiprocessing_context
        if ctx is None:
            ctx = multiprocessing.get_context()
        elif isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx)
        self._num_workers = loader.num_workers
        self._prefetch = loader.prefetch_factor * loader.num_workers
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        self._epoch = -1
        self._shutdown = True
        self._result_queue = self._done = None
        self._index_queues, self._workers = [], []
        self._ctx = ctx
        super().__init__(loader)

    def _start_workers(self, loader):
        self._shutdown = False
        self._result_queue = self._ctx.Queue()
        self._done = self._ctx.Event()
        for i in range(self._num_workers):
            iq = self._ctx.Queue()
            iq.cancel_join_thread()
            w = self._ctx.Process(
                target=_worker.worker_loop,
                args=(self._iterable, self._dataset, iq, self._result_queue, self._done, self._auto_collation,
                      self._collate_fn, self._drop_last, self._batch_size, self._base_seed + i,
                      loader.worker_init_fn, i, self._num_workers),
                daemon=True)
            w.start()
            self._index_queues.append(iq)
            self._workers.append(w)

    def _reset(self, loader, first=False):
        super()._reset(loader, first)
        if self._shutdown:
            self._start_workers(loader)
        self._epoch += 1
        self._send_idx = 0  # next task index to send
        self._rcvd_idx = 0  # next task index to yield
        self._task_info = {}  # idx -> (worker,) while outstanding, (worker, data) when out of order
        self._active = [True] * self._num_workers
        self._worker_cycle = itertools.cycle(range(self._num_workers))
        self._outstanding = 0
        for _ in range(self._prefetch):
            self._try_put_index()

    def _try_put_index(self):
        if self._outstanding >= self._prefetch:
            return
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        for _ in range(self._num_workers):
            w = next(self._worker_cycle)
            if self._active[w]:
                break
        else:
            return  # every worker's iterable is exhausted
        self._index_queues[w].put((self._epoch, self._send_idx, index))
        self._task_info[self._send_idx] = (w,)
        self._outstanding += 1
        self._send_idx += 1

    def _get_result(self):
        """The next (idx, data) of the current epoch, watching that workers stay alive."""
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        while True:
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            try:
                epoch, idx, data = self._result_queue.get(timeout=wait)
            except queue.Empty:
                dead = [w.pid for w in self._workers if not w.is_alive()]
                if dead:
                    self._shutdown_workers()
                    raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(map(str, dead))}) exited "
                                       "unexpectedly") from None
                if deadline is not None and time.monotonic() >= deadline:
                    self._shutdown_workers()
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds") from None
                continue
            if epoch == self._epoch:
                return idx, data
            # a result of an abandoned epoch (persistent workers): drop it

    def _next_data(self):
        while True:
            while self._rcvd_idx < self._send_idx:  # skip tasks sent to workers that ran out
                info = self._task_info[self._rcvd_idx]
                if len(info) == 2 or self._active[info[0]]:
                    break
                del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
            else:
                if not self._persistent:
                    self._shutdown_workers()
                raise StopIteration
            info = self._task_info[self._rcvd_idx]
            if len(info) == 2:
                del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
                return self._process(info[1])
            idx, data = self._get_result()
            self._outstanding -= 1
            if isinstance(data, _worker.IterableStop):
                self._active[data.worker_id] = False
                self._try_put_index()
                continue
            if idx != self._rcvd_idx:
                self._task_info[idx] += (data,)
                continue
            del self._task_info[idx]
            self._rcvd_idx += 1
            return self._process(data)

    def _process(self, data):
        self._try_put_index()
        if isinstance(data, _worker.ExceptionWrapper):
            self._shutdown_workers()
            data.reraise()
        return data

    def _shutdown_workers(self):
        if self._shutdown:
            return
        self._shutdown = True
        self._done.set()
        for iq in self._index_queues:
            try:
                iq.put(None)
            except (OSError, ValueError):
                pass
        # an idle worker sees `done` within _STATUS_CHECK_INTERVAL; one still busy in a dataset's
        # __getitem__ is terminated after this grace (its batch would be dropped anyway)
        deadline = time.monotonic() + _SHUTDOWN_GRACE  # for all workers together
        for w in self._workers:
            w.join(timeout=max(0.0, deadline - time.monotonic()))
            if w.is_alive():
                w.terminate()
                w.join(timeout=1)
        for iq in self._index_queues:
            iq.close()
        self._index_queues, self._workers = [], []
        self._result_queue.cancel_join_thread()  # results still in flight are dropped
        self._result_queue.close()

    def __del__(self):
        try:
            self._shutdown_workers()
        except Exception:
            pass

