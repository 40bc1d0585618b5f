"""Backend "cuda" end to end on the CPU: its driver with a stand-in cupy (numpy arrays) and
its generated CUDA kernels executed by tests/cuda_emulator.py (OpenMP threads as a block).

This checks the values the CUDA renderer's kernels compute -- thread indexing, grid-stride
loops, per-row block reductions, sums over leading dims, float16 conversions, Philox draws
-- against eager numpy, which NVRTC compilation alone cannot. What it cannot check: real
hardware (warp scheduling, memory model corner cases, cupy itself); tools/gpu_check.sh
does that on a GPU.
"""
import sys
import types

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
from eagerc.compiler.passes import optimize
from eagerc.compiler.tracer import trace
from eagerc.runtime import kernel_cache

from cuda_emulator import EmulatedRawModule

pytestmark = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True)
def _stand_in_cupy(monkeypatch, tmp_path_factory):
    fake = types.SimpleNamespace(asarray=np.asarray, empty=np.empty, RawModule=EmulatedRawModule)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    # the stand-in cupy is numpy, so unfused ops' kernel(cp) is their numpy kernel
    monkeypatch.setattr(eagerc.runtime.ops.OpDef, "kernel", lambda self, xp: self.cpu)
    monkeypatch.setenv("EAGERC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "emulated-kernels"))
    EmulatedRawModule.launches = []
    EmulatedRawModule.max_grid = None
    yield


def _run_cuda(fn, arrays, max_grid=None):
    from eagerc.compiler.backends.cuda_backend import CudaBackend
    ts = [eagerc.tensor(a) for a in arrays]
    graph, result, tracer = trace(fn, tuple(ts))
    assert graph is not None, tracer.broken
    program = CudaBackend(singleton_min=0).compile(optimize(graph, CudaBackend.pipeline))
    env = {f"arg{i}": t._array for i, t in enumerate(ts)}
    env.update({name: t._array for name, t in tracer.externals.items()})
    EmulatedRawModule.max_grid = max_grid
    outs, _ = program(env)
    want = [np.asarray(t._array) for t in (result if isinstance(result, (tuple, list)) else (result,))]
    return program, [np.asarray(o) for o in outs], want


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


CASES = {
    "elementwise_broadcast": (lambda a, b: ((a * b + 1).tanh() - b).exp(), [(5, 300), (300,)]),
    "softmax": (lambda a: F.softmax(a, -1), [(7, 300)]),
    "log_softmax_3d": (lambda a: F.log_softmax(a * 2, -1), [(2, 3, 129)]),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (40,), w, b), [(9, 40), (40,), (40,)]),
    "two_dim_row": (lambda a: a - a.mean((-2, -1), keepdim=True) / (a.amax((-2, -1), keepdim=True) + 3),
                    [(3, 5, 7)]),
    "row_values_stored": (lambda a: (a.exp().sum(-1).log(), a.amin(-1)), [(6, 513)]),
    "short_rows": (lambda a: F.softmax(a, -1) * 2, [(5, 20)]),              # a warp per row, idle segments
    "short_rows_stored": (lambda a: ((a * 3).exp().sum(-1), (a + 1).amax(-1)), [(11, 3)]),
    "lead_sum": (lambda a: (a.exp() * 2).sum(0), [(37, 300)]),
    "lead_mean_keepdim": (lambda a: (a * a).mean((0, 1), keepdim=True), [(4, 5, 6)]),
    "all_reduce": (lambda a: (a.sin() + 1).sum(), [(70000,)]),
    "max_all_nan": (lambda a: (a * 1).amax(), [(1000,)]),
}


@pytest.mark.parametrize("max_grid", [None, 3], ids=["full_grid", "grid3"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_emulated_cuda_kernels_match_eager(name, dtype, max_grid):
    fn, shapes = CASES[name]
    rng = np.random.default_rng(len(name))
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if name == "max_all_nan":
        arrays[0][17] = np.nan
    program, got, want = _run_cuda(fn, arrays, max_grid)
    assert program.kernels and EmulatedRawModule.launches
    tol = (1e-5, 1e-6) if dtype == "float32" else (1e-11, 1e-12)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol[0], atol=tol[1], equal_nan=True)


def test_emulated_softmax_against_numpy_formula():
    x = np.random.default_rng(0).standard_normal((33, 1000))
    program, (got,), _ = _run_cuda(lambda a: F.softmax(a, -1), [x], max_grid=5)
    assert any(k.row_dims for k in program.kernels)
    np.testing.assert_allclose(got, _np_softmax(x), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_emulated_half_rounds_like_numpy(dtype):
    # float16 through PTX cvt (emulated by _Float16), bfloat16 through the kernels' own bit
    # conversions: both held as float and rounded after every op, as numpy / ml_dtypes do
    dt = eagerc.runtime.dtypes.as_dtype(dtype).np
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 300)).astype(dt), rng.standard_normal(300).astype(dt)
    for fn in (lambda x, y: ((x * y + 1).tanh() * x - y / 2).exp(), lambda x, y: F.softmax(x * y, -1),
               lambda x, y: (x * y).sum(-1), lambda x, y: (x * y + 1).mean(0)):
        program, (got,), (want,) = _run_cuda(fn, [a, b])
        assert got.dtype == dt and any(i.dtype == dtype for k in program.kernels for i in k.instrs)
        bits = np.finfo(dt).nmant
        ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(want.astype(np.float64)), np.finfo(dt).smallest_normal)))
                      - bits)
        assert np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)) / ulp) <= 1


def test_emulated_dropout_draws_the_eager_numbers():
    x = np.random.default_rng(2).standard_normal((64, 200)).astype(np.float32)

    def fn(a):
        return F.dropout(a * 2, p=0.3) + 1
    eagerc.manual_seed(7)
    program, (got,), (want,) = _run_cuda(fn, [x])
    assert "eagerc_philox_word" in program.cuda_source
    np.testing.assert_array_equal(got, want)     # the trace's own draw, bit for bit


def test_emulated_reduction_over_everything_uses_many_blocks_and_relaunches():
    # one partial per block, the last block combines them; the counter resets itself, so a
    # second launch of the same kernel is right too
    from eagerc.compiler.backends.cuda_backend import CudaBackend
    x = np.random.default_rng(3).standard_normal(40_000)
    ts = (eagerc.tensor(x),)
    graph, _, _ = trace(lambda a: ((a * 2).exp() - 1).sum(), ts)
    program = CudaBackend(singleton_min=0).compile(optimize(graph, CudaBackend.pipeline))
    for scale in (1.0, -0.5):
        EmulatedRawModule.launches = []
        (got,), _ = program({"arg0": x * scale})
        ((_, grid, used, _),) = EmulatedRawModule.launches
        assert grid == used > 1
        np.testing.assert_allclose(got, (np.exp(2 * x * scale) - 1).sum(), rtol=1e-12)
