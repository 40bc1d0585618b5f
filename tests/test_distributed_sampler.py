"""DistributedSampler: PyTorch's shares, checked against hand-computed index lists (and
against torch itself when installed, with torch's permutation fed in)."""
import pytest

import eagerc
from eagerc.utils.data import DataLoader, DistributedSampler, TensorDataset


def shares(n, replicas, **kw):
    return [list(DistributedSampler(range(n), replicas, r, **kw)) for r in range(replicas)]


def test_in_order_pads_by_repeating_the_start():
    assert shares(10, 3, shuffle=False) == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    assert shares(10, 4, shuffle=False) == [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]
    assert shares(2, 5, shuffle=False) == [[0], [1], [0], [1], [0]]  # padding longer than the data
    assert len(DistributedSampler(range(10), 3, 0, shuffle=False)) == 4


def test_drop_last_gives_disjoint_equal_shares():
    assert shares(10, 3, shuffle=False, drop_last=True) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert shares(10, 4, shuffle=False, drop_last=True) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert shares(9, 3, shuffle=False, drop_last=True) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


def test_shuffled_shares_are_one_permutation_split():
    got = shares(11, 3, seed=7)
    perm = DistributedSampler(range(11), 3, 0, seed=7).permutation()
    assert sorted(perm) == list(range(11))
    padded = perm + perm[:1]
    assert got == [padded[r::3] for r in range(3)]
    assert got == shares(11, 3, seed=7)  # every rank (and every run) draws the same order


def test_set_epoch_changes_the_order_and_seed_moves_it():
    s = DistributedSampler(range(50), 2, 0, seed=1)
    e0 = list(s)
    s.set_epoch(1)
    assert list(s) != e0
    s.set_epoch(0)
    assert list(s) == e0
    assert list(DistributedSampler(range(50), 2, 0, seed=2)) != e0
    other = DistributedSampler(range(50), 2, 1, seed=1)
    assert sorted(e0 + list(other)) == list(range(50))  # the two ranks' shares cover the data once


def test_errors_and_loader():
    with pytest.raises(ValueError, match="Invalid rank 3"):
        DistributedSampler(range(4), 3, 3)
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedSampler(range(4))
    data = TensorDataset(eagerc.arange(10))
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, 2, 1, shuffle=False))
    assert [b[0].tolist() for b in loader] == [[1, 3], [5, 7], [9]]


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True), (7, 4, False), (3, 5, False),
                                                    (12, 4, True), (13, 2, True)])
def test_same_as_pytorch(n, replicas, drop_last, monkeypatch):
    torch = pytest.importorskip("torch")
    from torch.utils.data.distributed import DistributedSampler as Torch
    for shuffle in (False, True):
        for r in range(replicas):
            theirs = Torch(range(n), replicas, r, shuffle=shuffle, seed=3, drop_last=drop_last)
            theirs.set_epoch(2)
            ours = DistributedSampler(range(n), replicas, r, shuffle=shuffle, seed=3, drop_last=drop_last)
            ours.set_epoch(2)
            if shuffle:  # the generators differ; feed torch's permutation to compare the rest
                g = torch.Generator()
                g.manual_seed(3 + 2)
                perm = torch.randperm(n, generator=g).tolist()
                monkeypatch.setattr(ours, "permutation", lambda perm=perm: list(perm))
            assert list(ours) == list(theirs) and len(ours) == len(theirs), (shuffle, r)
