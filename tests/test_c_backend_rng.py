"""RNG in kernels: random ops (uniform, normal) fused into generated C kernels draw the
numbers eager mode draws (eagerc.runtime.random), call after call.

Backend "c" against eager with the same manual_seed: rand / randn (float32, float64; odd
sizes, > 65536 elements, broadcast loads, row kernels, reductions), F.dropout fused into one
kernel, repeated calls (each draws new numbers, the eager sequence), a compiled training
step with dropout. Uniforms (and so dropout masks) are bit-identical; float64 normals use
libm's log/cos against numpy's and may differ in the last bits (random.py's caveat), so
they are compared to a few ulp and float32 normals exactly. The CUDA source of the same
kernels is compiled with NVRTC (no GPU needed).
"""
import copy

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.compiler.backends.c_backend import CBackend
from eagerc.compiler.backends.fused import PIPELINE, plan_kernels
from eagerc.compiler.kernels.cuda_render import render_cuda
from eagerc.runtime.kernels.ir import RANDOM
from eagerc.runtime.kernels.render import render_c
from eagerc.compiler.passes import optimize
from eagerc.compiler.tracer import trace
from eagerc.runtime import kernel_cache, nvrtc

pytestmark = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(),
                                 reason="NVRTC not installed (pip install nvidia-cuda-nvrtc-cu12)")

DTYPES = [eagerc.float32, eagerc.float64]
SHAPES = [(1,), (7,), (13, 17), (3, 5, 7), (257, 263)]     # 257 * 263 = 67591 > 65536
KERNELS = []        # every program's kernels, for the NVRTC test


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(kernel_cache_dir):
    yield kernel_cache_dir


def _programs(compiled):
    """The programs a compiled function made (plain entries and joint forward/backward)."""
    out = []
    for e in compiled.entries.values():
        for p in (getattr(e, "program", None), getattr(getattr(e, "joint", None), "fwd_program", None),
                  getattr(getattr(e, "joint", None), "bwd_program", None)):
            if p is not None:
                out.append(p)
    return out


def _rng_kernels(compiled):
    ks = [k for p in _programs(compiled) for k in (getattr(p, "kernels", None) or [])]
    KERNELS.extend(ks)
    return [k for k in ks if k.uses_rng()]


def _runs(fn, args, seed=7, calls=3):
    """(eager results, compiled results, compiled fn): `calls` calls each, from manual_seed(seed)."""
    fc = eagerc.compile(fn, backend="c")
    eagerc.manual_seed(seed)
    want = [[t.numpy() for t in _tuple(fn(*args))] for _ in range(calls)]
    eagerc.manual_seed(seed)
    got = [[t.numpy() for t in _tuple(fc(*args))] for _ in range(calls)]
    return want, got, fc


def _tuple(r):
    return r if isinstance(r, (tuple, list)) else (r,)


def _same(got, want, exact=True):
    """Bit-identical; or (float64 normals: libm's log/cos vs numpy's) within a few ulp of
    the values drawn (|z| < 10) and almost always exact."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact or want.dtype != np.float64:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-14)
        assert np.mean(got == want) > 0.99


# ---------------------------------------------------------------- rand / randn

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("kind", ["rand", "randn"])
def test_rand_randn_in_a_kernel_match_eager(kind, shape, dtype):
    def fn(x):
        r = getattr(eagerc, kind)(*shape, dtype=dtype)
        return r, r + x, r >= 0.25
    x = eagerc.tensor(np.linspace(-1, 1, int(np.prod(shape))).reshape(shape), dtype=dtype)
    want, got, fc = _runs(fn, (x,))
    ks = _rng_kernels(fc)
    assert ks and {i.op for k in ks for i in k.instrs} & set(RANDOM), "the draw was not fused"
    for w, g in zip(want, got):
        for a, b in zip(g, w):
            _same(a, b, exact=kind == "rand")
    assert not np.array_equal(want[0][0], want[1][0]) or want[0][0].size == 1


def test_lone_rand_outside_kernels_matches_eager():
    want, got, _ = _runs(lambda: eagerc.rand(300, 301), ())
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g[0], w[0])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_random_in_broadcast_row_and_reduction_kernels(dtype):
    """Draws inside a loop over two merged-apart dims (a broadcast load), a row kernel
    (softmax of a noisy input) and reductions over everything and over the leading dims."""
    rng = np.random.default_rng(0)
    x = eagerc.tensor(rng.standard_normal((4, 5, 6)), dtype=dtype)
    b = eagerc.tensor(rng.standard_normal((5, 1)), dtype=dtype)

    def fn(x, b):
        u = eagerc.rand(4, 5, 6, dtype=dtype)
        y = x + b + u
        s = F.softmax(x + eagerc.rand(4, 5, 6, dtype=dtype), -1)
        return y, s, (x * eagerc.rand(4, 5, 6, dtype=dtype)).sum(), (x * eagerc.rand(4, 5, 6, dtype=dtype)).sum(0)
    want, got, fc = _runs(fn, (x, b))
    ks = _rng_kernels(fc)
    assert len(ks) >= 2 and any(k.row_dims for k in ks)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g[0], w[0])
        tol = 1e-6 if dtype == eagerc.float32 else 1e-14
        for a, e in zip(g[1:], w[1:]):      # exp and sums: rounding, not the numbers drawn
            np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


# ---------------------------------------------------------------- dropout

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(8, 33), (300, 257)], ids=str)
def test_dropout_is_one_kernel_and_matches_eager(shape, dtype):
    x = eagerc.tensor(np.random.default_rng(1).standard_normal(shape) + 3.0, dtype=dtype)

    def fn(x):
        return F.dropout(x.relu() * 2, p=0.3)
    want, got, fc = _runs(fn, (x,), calls=4)
    ks = _rng_kernels(fc)
    assert len(ks) == 1 and any(i.op == "rand_uniform" for i in ks[0].instrs)
    programs = _programs(fc)
    assert all(len(p.kernels) == 1 for p in programs)     # relu, mul, rand, >=, mul, where: one kernel
    assert all("uniform" not in p.source.split("def program", 1)[1] for p in programs)
    masks = []
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g[0], w[0])
        masks.append(g[0] != 0)
        assert 0.6 < masks[-1].mean() < 0.8
    assert not np.array_equal(masks[0], masks[1])        # a new mask every call


def test_dropout_mask_is_the_eager_uniform_draw():
    """The kept elements are exactly those where eager's rand(shape) >= p."""
    x = eagerc.ones(64, 65, dtype=eagerc.float32)
    fc = eagerc.compile(lambda x: F.dropout(x, p=0.5), backend="c")
    eagerc.manual_seed(123)
    u = [eagerc.rand(64, 65, dtype=eagerc.float32).numpy() for _ in range(3)]
    eagerc.manual_seed(123)
    for want in u:
        got = fc(x).numpy()
        np.testing.assert_array_equal(got != 0, want >= 0.5)
        np.testing.assert_array_equal(got[got != 0], np.float32(2.0))


def test_kernel_params_follow_overrides_and_the_generator():
    """The driver passes each call's seed/offset (compile.py's overrides) to the kernel; a
    program run with explicit overrides draws at exactly that point of the stream."""
    g = trace(lambda x: F.dropout(x, p=0.5), (eagerc.ones(50, 51),))[0]
    program = CBackend(singleton_min=0).compile(optimize(g, CBackend().pipeline))
    (rnode,) = [n for n in g.nodes if n.op == "uniform"]
    assert "A_u64(" in program.source and program.kernels[0].params
    env = {"arg0": np.ones((50, 51), np.float32)}
    for seed, offset in ((5, 0), (5, 2551), (2**64 - 1, 10**12 + 3)):
        out = program(env, {rnode.out.name: {"seed": seed, "offset": offset}})[0][0]
        u = eagerc.runtime.random.uniform(seed, offset, (50, 51), np.float32)
        np.testing.assert_array_equal(out != 0, u >= 0.5)


def test_training_step_with_dropout_matches_eager():
    def build():
        eagerc.manual_seed(3)
        return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 32), nn.Tanh(),
                             nn.Dropout(0.2), nn.Linear(32, 4)).double()
    eager = build()
    comp = copy.deepcopy(eager)
    opt_e = eagerc.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_c = eagerc.optim.SGD(comp.parameters(), lr=0.1, momentum=0.9)

    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = eagerc.compile(lambda x, y: step(comp, opt_c, x, y), backend="c")
    rng = np.random.default_rng(2)
    data = [(eagerc.tensor(rng.standard_normal((16, 6))), eagerc.tensor(rng.integers(0, 4, 16)))
            for _ in range(3)]
    eagerc.manual_seed(99)
    losses_e = [step(eager, opt_e, x, y).item() for x, y in data]
    eagerc.manual_seed(99)
    losses_c = [compiled(x, y).item() for x, y in data]
    np.testing.assert_allclose(losses_c, losses_e, rtol=1e-12)
    for (n, p), q in zip(eager.named_parameters(), comp.parameters()):
        np.testing.assert_allclose(q.numpy(force=True), p.numpy(force=True), rtol=1e-12, atol=1e-15, err_msg=n)
    assert _rng_kernels(compiled), "dropout did not run in a kernel"


def test_source_without_rng_is_unchanged():
    ts = [eagerc.tensor(np.ones((4, 5), np.float32))]
    g = trace(lambda a: (a * 2).exp() + 1, tuple(ts))[0]
    ks = [k for _, _, k in plan_kernels(optimize(g, PIPELINE), 0)]
    assert ks and not any(k.uses_rng() for k in ks)
    src = render_c(ks)
    assert "eagerc_philox" not in src and "uint64_t p0" not in src
    assert "eagerc_philox" not in render_cuda(ks)


# ---------------------------------------------------------------- CUDA source (NVRTC, no GPU)

@needs_nvrtc
def test_rng_kernels_compile_as_cuda():
    if not any(k.uses_rng() for k in KERNELS):     # run alone: make some
        test_rand_randn_in_a_kernel_match_eager("randn", (3, 5, 7), eagerc.float32)
        test_random_in_broadcast_row_and_reduction_kernels(eagerc.float64)
        test_dropout_is_one_kernel_and_matches_eager((8, 33), eagerc.float32)
    seen, ks = set(), []
    for k in KERNELS:
        if not k.uses_rng():
            continue
        k = copy.copy(k)
        k.name = f"rng_{len(ks)}"
        src = render_cuda([k])
        body = src.split(f"/* {k.name}:", 1)[1].split("\n", 1)[1]
        if body not in seen:
            seen.add(body)
            ks.append(k)
    assert any(k.row_dims for k in ks) and any(any(i.op == "rand_normal" for i in k.instrs) for k in ks)
    source = render_cuda(ks)
    assert source.count("eagerc_philox_word(unsigned long long seed") == 1
    ptx = nvrtc.compile_ptx(source, name="rng_kernels.cu")
    for k in ks:
        assert f".entry {k.name}(" in ptx


def test_cuda_driver_passes_uint64_params(monkeypatch):
    """Backend "cuda"'s driver (a stand-in cupy: numpy arrays, recorded launches) passes a
    fused draw's per-call seed and offset as numpy.uint64 scalars after the arrays."""
    import sys
    import types
    launches = []

    class RawModule:
        def __init__(self, code, options=()):
            self.code = code

        def get_function(self, name):
            return lambda grid, block, args: launches.append(args)
    fake = types.SimpleNamespace(asarray=np.asarray, empty=np.empty, RawModule=RawModule)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(eagerc.runtime.ops.OpDef, "kernel", lambda self, xp: self.cpu)
    from eagerc.compiler.backends.cuda_backend import CudaBackend
    g = trace(lambda x: F.dropout(x, p=0.5), (eagerc.ones(50, 51),))[0]
    program = CudaBackend(singleton_min=0).compile(optimize(g, CudaBackend.pipeline))
    assert program.kernels[0].uses_rng() and "eagerc_philox_word" in program.cuda_source
    (rnode,) = [n for n in g.nodes if n.op == "uniform"]
    program({"arg0": np.ones((50, 51), np.float32)}, {rnode.out.name: {"seed": 2**64 - 5, "offset": 77}})
    args = launches[-1]
    assert [type(a) for a in args[-2:]] == [np.uint64, np.uint64]
    assert [int(a) for a in args[-2:]] == [2**64 - 5, 77]
