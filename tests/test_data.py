"""Datasets, samplers, collation and the DataLoader (single- and multi-process)."""
import collections
import gc
import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest

import eagerc
from eagerc.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset, RandomSampler,
                               SequentialSampler, Subset, SubsetRandomSampler, TensorDataset,
                               WeightedRandomSampler, default_collate, default_convert, get_worker_info,
                               random_split)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Point = collections.namedtuple("Point", ["x", "y"])


def _ds(n=10):
    return TensorDataset(eagerc.arange(n * 2, dtype=eagerc.float32).reshape(n, 2), eagerc.arange(n))


def _gen(seed):
    return eagerc.Generator().manual_seed(seed)


def _as_lists(batches):
    return [[t.tolist() for t in b] for b in batches]


# ---------------------------------------------------------------- datasets

def test_tensor_dataset_and_subset_and_concat():
    ds = _ds(5)
    x, y = ds[3]
    assert x.tolist() == [6.0, 7.0] and y.item() == 3 and len(ds) == 5
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(eagerc.zeros(3), eagerc.zeros(4))
    sub = Subset(ds, [4, 0])
    assert len(sub) == 2 and sub[0][1].item() == 4
    cat = ConcatDataset([ds, sub])
    assert len(cat) == 7 and cat[5][1].item() == 4 and cat[-1][1].item() == 0
    assert len(ds + sub) == 7


def test_random_split_lengths_fractions_and_generator():
    ds = list(range(10))
    a, b = random_split(ds, [7, 3], generator=_gen(0))
    assert sorted(list(a) + list(b)) == ds and len(a) == 7
    a2, b2 = random_split(ds, [7, 3], generator=_gen(0))
    assert list(a) == list(a2) and list(b) == list(b2)
    parts = random_split(ds, [0.5, 0.3, 0.2], generator=_gen(1))
    assert [len(p) for p in parts] == [5, 3, 2]
    parts = random_split(list(range(11)), [0.5, 0.5], generator=_gen(1))
    assert [len(p) for p in parts] == [6, 5]  # remainders handed out round-robin
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [3, 3])
    eagerc.manual_seed(5)
    p1 = [list(p) for p in random_split(ds, [5, 5])]
    eagerc.manual_seed(5)
    assert p1 == [list(p) for p in random_split(ds, [5, 5])]


# ---------------------------------------------------------------- samplers

def test_samplers():
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3]
    s = RandomSampler(range(20), generator=_gen(3))
    e1, e2 = list(s), list(s)
    assert sorted(e1) == list(range(20)) and e1 != e2  # a new order each epoch
    assert list(RandomSampler(range(20), generator=_gen(3))) == e1
    r = list(RandomSampler(range(5), replacement=True, num_samples=50, generator=_gen(0)))
    assert len(r) == 50 and set(r) <= set(range(5))
    r = list(RandomSampler(range(5), num_samples=12, generator=_gen(0)))
    assert len(r) == 12 and sorted(r[:5]) == list(range(5))
    assert sorted(SubsetRandomSampler([7, 8, 9], generator=_gen(0))) == [7, 8, 9]
    assert list(BatchSampler(range(7), 3, drop_last=False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(range(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(BatchSampler(range(7), 3, False)) == 3 and len(BatchSampler(range(7), 3, True)) == 2
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(range(3), 0, False)


@pytest.mark.parametrize("num_samples", [1, 50, 3 * 1000 + 7])
def test_random_sampler_with_replacement_draws_what_one_randint_draws(num_samples, monkeypatch):
    """Lazy chunks (made small here so several are crossed) give the numbers of one eager
    randint of num_samples from the same generator, and move the generator as far."""
    from eagerc.utils.data import sampler
    monkeypatch.setattr(sampler, "_CHUNK", 1000)
    gen, ref_gen = _gen(5), _gen(5)
    got = list(RandomSampler(range(37), replacement=True, num_samples=num_samples, generator=gen))
    assert got == eagerc.randint(0, 37, (num_samples,), generator=ref_gen).tolist()
    assert gen.get_state().tolist() == ref_gen.get_state().tolist()
    # two epochs differ and each is reproducible
    s = RandomSampler(range(37), replacement=True, num_samples=num_samples, generator=_gen(5))
    assert list(s) == got and (num_samples == 1 or list(s) != got)


def test_random_sampler_with_replacement_is_lazy():
    """num_samples=int(1e10) used to allocate 74.5 GiB up front (numpy's MemoryError): the
    first items now cost one chunk."""
    import itertools
    import tracemalloc
    s = RandomSampler(range(1000), replacement=True, num_samples=int(1e10), generator=_gen(2))
    assert len(s) == int(1e10)
    tracemalloc.start()
    try:
        first = list(itertools.islice(iter(s), 10))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak  # numpy reports its buffers to tracemalloc
    assert first == eagerc.randint(0, 1000, (10,), generator=_gen(2)).tolist()
    with pytest.raises(RuntimeError, match="empty data_source"):
        next(iter(RandomSampler([], replacement=True, num_samples=3)))


def test_weighted_random_sampler():
    w = [0.0, 1.0, 3.0]
    draws = list(WeightedRandomSampler(w, 4000, generator=_gen(0)))
    counts = np.bincount(draws, minlength=3)
    assert counts[0] == 0 and 0.7 < counts[2] / 4000 < 0.8
    no_rep = list(WeightedRandomSampler([1, 1, 1, 0], 3, replacement=False, generator=_gen(1)))
    assert sorted(no_rep) == [0, 1, 2]


# ---------------------------------------------------------------- collate

def test_default_collate_types():
    t = default_collate([eagerc.tensor([1.0, 2.0]), eagerc.tensor([3.0, 4.0])])
    assert t.shape == (2, 2) and t.dtype == eagerc.float32
    a = default_collate([np.array([1, 2], np.int32), np.array([3, 4], np.int32)])
    assert isinstance(a, eagerc.Tensor) and a.dtype == eagerc.int32 and a.tolist() == [[1, 2], [3, 4]]
    assert default_collate([np.float32(1.5), np.float32(2)]).dtype == eagerc.float32
    f = default_collate([1.5, 2.0])
    assert f.dtype == eagerc.float64 and f.tolist() == [1.5, 2.0]
    i = default_collate([1, 2, 3])
    assert i.dtype == eagerc.int64
    assert default_collate([True, False]).dtype == eagerc.bool
    assert default_collate(["a", "b"]) == ["a", "b"]
    d = default_collate([{"x": 1.0, "s": "a"}, {"x": 2.0, "s": "b"}])
    assert d["x"].tolist() == [1.0, 2.0] and d["s"] == ["a", "b"]
    od = default_collate([collections.OrderedDict(b=1, a=2)] * 2)
    assert type(od) is collections.OrderedDict and list(od) == ["b", "a"]
    p = default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert isinstance(p, Point) and p.x.tolist() == [1, 3] and p.y.dtype == eagerc.float64
    tup = default_collate([(1, eagerc.zeros(2)), (2, eagerc.ones(2))])
    assert isinstance(tup, list) and tup[0].tolist() == [1, 2] and tup[1].shape == (2, 2)
    nested = default_collate([[{"a": (1, 2)}], [{"a": (3, 4)}]])
    assert nested[0]["a"][0].tolist() == [1, 3]
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([eagerc.zeros(2), eagerc.zeros(3)])
    with pytest.raises(TypeError, match="default_collate: batch must contain"):
        default_collate([object(), object()])


def test_default_collate_keeps_autograd():
    a = eagerc.ones(2, requires_grad=True)
    s = default_collate([a, a * 2])
    s.sum().backward()
    assert a.grad.tolist() == [3.0, 3.0]


def test_default_convert():
    x = np.arange(3.0)
    t = default_convert(x)
    assert isinstance(t, eagerc.Tensor) and t.tolist() == [0.0, 1.0, 2.0]
    out = default_convert({"a": np.ones(2), "b": (np.int64(3), "s")})
    assert isinstance(out["a"], eagerc.Tensor) and out["b"][0].item() == 3 and out["b"][1] == "s"


# ---------------------------------------------------------------- DataLoader (main process)

def test_sequential_batches_and_len():
    dl = DataLoader(_ds(10), batch_size=4)
    batches = list(dl)
    assert len(dl) == 3 and len(batches) == 3
    assert batches[0][1].tolist() == [0, 1, 2, 3] and batches[-1][1].tolist() == [8, 9]
    assert batches[0][0].shape == (4, 2)
    dl = DataLoader(_ds(10), batch_size=4, drop_last=True)
    assert len(dl) == 2 and [b[1].tolist() for b in dl] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_shuffle_is_reproducible_with_a_seeded_generator():
    def epochs(seed, n=2):
        dl = DataLoader(_ds(23), batch_size=5, shuffle=True, generator=_gen(seed))
        return [[i for b in dl for i in b[1].tolist()] for _ in range(n)]
    e = epochs(7)
    assert sorted(e[0]) == list(range(23)) and sorted(e[1]) == list(range(23))
    assert e[0] != e[1] and e[0] != list(range(23))
    assert epochs(7) == e
    assert epochs(8) != e
    eagerc.manual_seed(3)
    a = [b[1].tolist() for b in DataLoader(_ds(23), batch_size=5, shuffle=True)]
    eagerc.manual_seed(3)
    assert a == [b[1].tolist() for b in DataLoader(_ds(23), batch_size=5, shuffle=True)]


class DictDataset(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return {"x": np.full(3, i, np.float32), "label": i % 2, "name": f"s{i}", "w": float(i) / 2}


def test_collate_in_loader_and_custom_collate_fn():
    b = next(iter(DataLoader(DictDataset(), batch_size=3)))
    assert b["x"].shape == (3, 3) and b["x"].dtype == eagerc.float32
    assert b["label"].tolist() == [0, 1, 0] and b["name"] == ["s0", "s1", "s2"]
    assert b["w"].dtype == eagerc.float64
    dl = DataLoader(DictDataset(), batch_size=4, collate_fn=lambda batch: [s["name"] for s in batch])
    assert list(dl) == [["s0", "s1", "s2", "s3"], ["s4", "s5"]]
    single = list(DataLoader(DictDataset(), batch_size=None))
    assert len(single) == 6 and isinstance(single[2]["x"], eagerc.Tensor) and single[3]["label"] == 1


def test_sampler_and_batch_sampler_arguments():
    ds = _ds(6)
    dl = DataLoader(ds, batch_size=2, sampler=[5, 4, 3, 2, 1, 0])
    assert [b[1].tolist() for b in dl] == [[5, 4], [3, 2], [1, 0]]
    dl = DataLoader(ds, batch_sampler=[[0, 5], [1], [2, 3, 4]])
    assert [b[1].tolist() for b in dl] == [[0, 5], [1], [2, 3, 4]] and len(dl) == 3
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(ds, sampler=[0], shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        DataLoader(ds, batch_sampler=[[0]], batch_size=2)
    with pytest.raises(ValueError, match="drop_last"):
        DataLoader(ds, batch_size=None, drop_last=True)
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoader(ds, persistent_workers=True)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)


class Stream(IterableDataset):
    """0..n-1, split between workers by get_worker_info()."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))

    def __len__(self):
        return self.n


def test_iterable_dataset():
    dl = DataLoader(Stream(10), batch_size=4)
    assert [b.tolist() for b in dl] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and len(dl) == 3
    assert [b.tolist() for b in DataLoader(Stream(10), batch_size=4, drop_last=True)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert list(DataLoader(Stream(3), batch_size=None)) == [0, 1, 2]  # Python ints stay ints
    with pytest.raises(ValueError, match="IterableDataset"):
        DataLoader(Stream(3), shuffle=True)


# ---------------------------------------------------------------- worker processes

class Squares(Dataset):
    """Sample i -> (i**2 as a float32 array, i, the worker id that fetched it, a random draw)."""

    def __len__(self):
        return 37

    def __getitem__(self, i):
        info = get_worker_info()
        return (np.array([i * i], np.float32), i, -1 if info is None else info.id, random.random())


class Failing(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise KeyError("bad sample 5")
        return i


def _init_worker(worker_id):
    random.seed(1000 + worker_id)


def test_workers_give_the_same_batches_as_the_main_process():
    def run(workers, **kw):
        dl = DataLoader(Squares(), batch_size=4, shuffle=True, generator=_gen(11), num_workers=workers, **kw)
        return [[b[0].tolist(), b[1].tolist()] for b in dl], dl

    ref, _ = run(0)
    got, dl = run(2)
    assert got == ref and len(dl) == 10
    got, _ = run(2, prefetch_factor=1, drop_last=True)
    assert got == ref[:-1]
    ds = _ds(13)  # TensorDataset batches are eagerc Tensors, pickled between processes
    tensors = [_as_lists(DataLoader(ds, batch_size=3, shuffle=True, generator=_gen(4), num_workers=w)) for w in (0, 2)]
    assert tensors[0] == tensors[1]


def test_spawned_workers():
    """Workers started by 'spawn' (nothing inherited: the dataset and collate_fn are pickled)."""
    dl = DataLoader(Squares(), batch_size=8, num_workers=2, multiprocessing_context="spawn")
    assert [b[1].tolist() for b in dl] == [b[1].tolist() for b in DataLoader(Squares(), batch_size=8)]


def test_worker_ids_init_fn_and_seeds():
    dl = DataLoader(Squares(), batch_size=5, num_workers=2, worker_init_fn=_init_worker)
    batches = list(dl)
    ids = [b[2].tolist() for b in batches]
    assert ids[0] == [0] * 5 and ids[1] == [1] * 5  # batches go round-robin
    rng0 = random.Random(1000)
    assert batches[0][3].tolist() == [rng0.random() for _ in range(5)]  # worker_init_fn ran in worker 0


def test_persistent_workers_over_epochs():
    dl = DataLoader(Squares(), batch_size=6, shuffle=True, generator=_gen(2), num_workers=2,
                    persistent_workers=True)
    ref = DataLoader(Squares(), batch_size=6, shuffle=True, generator=_gen(2))
    for _ in range(2):
        assert [b[1].tolist() for b in dl] == [b[1].tolist() for b in ref]
    it, ref_it = iter(dl), iter(ref)
    for _ in range(2):  # abandon an epoch midway; the next one is still right
        assert next(it)[1].tolist() == next(ref_it)[1].tolist()
    assert [b[1].tolist() for b in dl] == [b[1].tolist() for b in ref]
    dl._iterator._shutdown_workers()


def test_iterable_dataset_with_workers():
    batches = [b.tolist() for b in DataLoader(Stream(10), batch_size=2, num_workers=2)]
    assert sorted(i for b in batches for i in b) == list(range(10))
    assert batches[0] == [0, 2] and batches[1] == [1, 3]


def test_worker_errors_reach_the_main_process():
    with pytest.raises(KeyError, match="bad sample 5"):
        list(DataLoader(Failing(), batch_size=2, num_workers=2))
    with pytest.raises(KeyError, match="DataLoader worker process"):
        list(DataLoader(Failing(), batch_size=2, num_workers=1))


class Dying(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if get_worker_info() is not None:
            import os
            os._exit(3)  # the worker dies without a word
        return i


def test_a_dead_worker_is_reported():
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(DataLoader(Dying(), batch_size=2, num_workers=1))


# ---------------------------------------------------------------- shutting workers down

def _gone(pid):
    """The process has exited (a zombie waiting for a parent to reap it counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def _wait(cond, limit):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > limit:
            return None
        time.sleep(0.02)
    return time.monotonic() - t0


def _persistent_loader():
    dl = DataLoader(_ds(12), batch_size=4, num_workers=2, persistent_workers=True)
    for _ in range(2):
        assert [b[1].tolist() for b in dl] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    return dl, list(dl._iterator._workers)


# Wall-clock bound on stopping a loader's workers. A shutdown takes 0.3 s of grace plus, for a
# worker that missed it, terminate + join: about 2.3 s at worst for 2 workers, more on a loaded
# 2-core machine (2.27 s seen against a former 2.0 s bound). The regressions this guards against
# wait far longer: workers left running until a collection that then blocked for 5 s, or a
# worker's 10 s+ timeout.
_PROMPT_S = 4.0


def test_del_of_a_persistent_loader_stops_its_workers_at_once():
    # before: the loader and its iterator held each other, so `del loader` left the workers running
    # until the garbage collector came, and that collection then blocked for 5 s
    gc.disable()
    try:
        dl, workers = _persistent_loader()
        t0 = time.monotonic()
        del dl
        _wait(lambda: not any(w.is_alive() for w in workers), _PROMPT_S)
        took = time.monotonic() - t0
        assert took < _PROMPT_S, f"the workers took {took:.2f} s to stop after `del`"
        dl, workers = _persistent_loader()
        dl.cycle = dl                            # kept alive by a cycle: the collector stops them
        del dl
        t0 = time.monotonic()
        gc.collect()
        took = time.monotonic() - t0
        assert took < _PROMPT_S, f"gc.collect took {took:.2f} s to stop the workers"
        assert not any(w.is_alive() for w in workers)
    finally:
        gc.enable()


_ORPHAN = """
import sys, time
import eagerc
from eagerc.utils.data import DataLoader, TensorDataset
dl = DataLoader(TensorDataset(eagerc.arange(12.0)), batch_size=4, num_workers=2, persistent_workers=True)
assert sum(len(b[0]) for b in dl) == 12
print(*[w.pid for w in dl._iterator._workers], flush=True)
time.sleep(600)
"""


def test_workers_exit_at_once_when_the_main_process_dies():
    # before: an idle worker looked at its parent every 5 s
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(_gone(p) for p in pids)
    finally:
        parent.kill()
        parent.wait()
    assert _wait(lambda: all(_gone(p) for p in pids), 2.0) is not None, "workers outlived their parent"
