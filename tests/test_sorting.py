"""Sorting and sampling beyond the op table: named tuples, PyTorch's errors, how multinomial
uses its generator, the samplers of real programs, data-dependent sizes under compile, and
(when PyTorch is installed) an optional comparison with it."""
import math

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
from eagerc.compiler import GraphBreak


def test_named_tuples_have_pytorch_names_and_fields():
    x = eagerc.tensor([[3.0, 1.0, 2.0], [1.0, 1.0, 0.0]])
    for name, r in [("sort", x.sort()), ("topk", x.topk(2)), ("kthvalue", x.kthvalue(1)),
                    ("median", x.median(1)), ("nanmedian", x.nanmedian(1)), ("mode", x.mode())]:
        assert type(r).__name__ == name and r._fields == ("values", "indices")
        values, indices = r
        assert values is r.values and indices.dtype == eagerc.int64


def test_sort_gradient_goes_to_the_selected_indices():
    x = eagerc.tensor([3.0, 1.0, 2.0, 5.0], requires_grad=True)
    (x.topk(2).values * eagerc.tensor([10.0, 1.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 0.0, 10.0])
    x.grad = None
    (x.median() + x.kthvalue(1).values).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 1.0, 0.0])


@pytest.mark.parametrize("call, exc, message", [
    (lambda: eagerc.multinomial(eagerc.tensor([0.5, -1.0]), 1), RuntimeError, "element < 0"),
    (lambda: eagerc.multinomial(eagerc.tensor([1.0, math.nan]), 1), RuntimeError, "`inf`, `nan`"),
    (lambda: eagerc.multinomial(eagerc.tensor([1.0, math.inf]), 1), RuntimeError, "`inf`, `nan`"),
    (lambda: eagerc.multinomial(eagerc.zeros(2, 3), 1), RuntimeError, r"sum of probabilities <= 0"),
    (lambda: eagerc.multinomial(eagerc.ones(3), 4), RuntimeError, "n_sample > prob_dist.size"),
    (lambda: eagerc.multinomial(eagerc.ones(3), 0), RuntimeError, "n_sample <= 0"),
    (lambda: eagerc.multinomial(eagerc.ones(2, 2, 2), 1), RuntimeError, "1 or 2 dim"),
    (lambda: eagerc.multinomial(eagerc.ones(3, dtype=eagerc.int64), 1), RuntimeError, "floating-point dtypes"),
    (lambda: eagerc.topk(eagerc.ones(3), 4), RuntimeError, "selected index k out of range"),
    (lambda: eagerc.kthvalue(eagerc.ones(3), 0), RuntimeError, "selected number k out of range"),
    (lambda: eagerc.mode(eagerc.ones(0)), IndexError, "non-zero size"),
    (lambda: eagerc.median(eagerc.ones(2, 0), 1), IndexError, "non-zero size"),
    (lambda: eagerc.quantile(eagerc.ones(3), 1.5), RuntimeError, r"q must be in the range \[0, 1\]"),
    (lambda: eagerc.quantile(eagerc.ones(3, dtype=eagerc.int64), 0.5), RuntimeError, "float or double"),
    (lambda: eagerc.quantile(eagerc.ones(3), 0.5, interpolation="cubic"), RuntimeError, "interpolation"),
    (lambda: eagerc.quantile(eagerc.ones(3), eagerc.tensor([0.5], dtype=eagerc.float64)), RuntimeError,
     "same dtype"),
    (lambda: eagerc.searchsorted(eagerc.tensor([1, 2]), eagerc.tensor([1]), side="left", right=True),
     RuntimeError, "can't be set to opposites"),
    (lambda: eagerc.bucketize(eagerc.tensor([1]), eagerc.ones(2, 2)), RuntimeError, "1 dimension"),
    (lambda: eagerc.bincount(eagerc.tensor([-1, 2])), RuntimeError, "non-negative integral"),
    (lambda: eagerc.bincount(eagerc.tensor([1.0])), NotImplementedError, "bincount_cpu"),
    (lambda: eagerc.histc(eagerc.tensor([1, 2]), bins=3), NotImplementedError, "histogram_cpu"),
    (lambda: eagerc.histc(eagerc.tensor([1.0]), bins=3, min=2, max=1), RuntimeError, "max must be larger"),
])
def test_pytorch_errors(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


def test_a_refused_multinomial_never_moves_the_generator():
    g = eagerc.Generator().manual_seed(3)
    with pytest.raises(RuntimeError):
        eagerc.multinomial(eagerc.ones(3), 4, generator=g)
    assert g.offset == 0
    eagerc.multinomial(eagerc.ones(4, 5), 3, generator=g)
    assert g.offset == 12   # one word per sample, with or without replacement


def test_multinomial_frequencies_follow_the_weights():
    p = eagerc.tensor([0.1, 0.0, 0.6, 0.3], dtype=eagerc.float64)
    draws = eagerc.multinomial(p * 7, 20000, replacement=True, generator=eagerc.Generator().manual_seed(0))
    freq = np.bincount(draws.numpy(), minlength=4) / 20000
    np.testing.assert_allclose(freq, p.numpy(), atol=0.015)
    assert freq[1] == 0
    rows = eagerc.multinomial(eagerc.rand(500, 6) + 0.01, 6).numpy()
    assert all(sorted(r) == list(range(6)) for r in rows)   # without replacement: a permutation


def test_samplers_of_real_programs():
    """char-GPT: multinomial(softmax(logits), num_samples=1); makemore: with a seeded Generator;
    the same generator seed gives the same samples."""
    logits = eagerc.randn(2, 65)
    idx = eagerc.multinomial(F.softmax(logits, dim=-1), num_samples=1)
    assert tuple(idx.shape) == (2, 1) and idx.dtype == eagerc.int64
    p = F.softmax(eagerc.randn(27), dim=0)

    def makemore(seed):
        g = eagerc.Generator().manual_seed(seed)
        return [eagerc.multinomial(p, num_samples=1, replacement=True, generator=g).item() for _ in range(20)]
    assert makemore(2147483647) == makemore(2147483647) != makemore(1)


def test_data_dependent_sizes_are_graph_breaks():
    for fn in (lambda x: eagerc.unique(x), lambda x: eagerc.bincount(x),
               lambda x: eagerc.unique_consecutive(x, return_counts=True)):
        with pytest.raises(GraphBreak, match="data-dependent size"):
            eagerc.compile(fn, fullgraph=True)(eagerc.tensor([1, 3, 3, 0]))
    c = eagerc.compile(lambda x: eagerc.unique(x) * 2)
    with pytest.warns(UserWarning, match=r"data-dependent size \(unique"):
        out = c(eagerc.tensor([3, 1, 3]))
    np.testing.assert_array_equal(out.numpy(), [2, 6])


# ---------------------------------------------------------------- optional: against PyTorch itself

def _pair(a):
    torch = pytest.importorskip("torch")
    return eagerc.tensor(a), torch.tensor(a)


def _same(ours, theirs):
    if isinstance(theirs, tuple):
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            _same(o, t)
        return
    np.testing.assert_allclose(np.asarray(ours.numpy(), np.float64), theirs.double().numpy(), rtol=1e-6,
                               equal_nan=True)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]


@pytest.mark.parametrize("call", [
    lambda m, x: tuple(m.sort(x, dim=1, descending=True, stable=True)),
    lambda m, x: tuple(m.sort(x, dim=0, stable=True)),
    lambda m, x: tuple(m.topk(x, 3, largest=False)),
    lambda m, x: m.kthvalue(x, 2, 0, True).values,   # tied indices: PyTorch's quickselect picks any
    lambda m, x: m.median(x),
    lambda m, x: tuple(m.median(x, 1)),
    lambda m, x: tuple(m.nanmedian(x, 0)),
    lambda m, x: tuple(m.mode(x, 1)),
    lambda m, x: m.msort(x),
    lambda m, x: m.quantile(x.nan_to_num(), 0.37, 1, interpolation="midpoint"),
    lambda m, x: m.nanquantile(x, 0.5, 0, keepdim=True),
    lambda m, x: m.histc(x.nan_to_num(), 7, -1, 2),
    lambda m, x: m.histc(x.nan_to_num(), 5),
    lambda m, x: tuple(m.unique(x.nan_to_num(), return_inverse=True, return_counts=True)),
    lambda m, x: m.searchsorted(m.arange(-2.0, 3.0, 0.5), x, side="right"),
    lambda m, x: m.bucketize(x, m.arange(-2.0, 3.0, 0.5)),
])
def test_against_pytorch(call):
    rng = np.random.default_rng(0)
    a = np.round(rng.standard_normal((6, 9)), 1).astype(np.float32)   # ties and NaN on purpose
    a[1, 3] = a[4, 0] = np.nan
    ours, theirs = _pair(a)
    import torch
    _same(call(eagerc, ours), call(torch, theirs))


def test_bincount_and_quantile_gradient_against_pytorch():
    torch = pytest.importorskip("torch")
    x = np.array([0, 4, 1, 1, 4, 4])
    w = np.linspace(0.5, 3.0, 6).astype(np.float32)
    _same(eagerc.bincount(eagerc.tensor(x), eagerc.tensor(w), minlength=7),
          torch.bincount(torch.tensor(x), torch.tensor(w), minlength=7))
    a = np.random.default_rng(1).standard_normal((3, 5))
    ours, theirs = eagerc.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    eagerc.quantile(ours, eagerc.tensor([0.2, 0.9], dtype=eagerc.float64), dim=1).sum().backward()
    torch.quantile(theirs, torch.tensor([0.2, 0.9], dtype=torch.float64), dim=1).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12)
