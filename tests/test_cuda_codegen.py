"""CUDA codegen without a GPU: every kernel the C-backend tests generate, rendered as CUDA
and compiled with NVRTC (ctypes, no driver needed); plus GPU-marked differential tests
(backend "cuda" vs eager on cupy) that run only where cupy and a GPU exist.

Kernels are collected the way tests/test_c_backend.py makes them (the op table with each
op alone as a kernel, random fused programs, MLP training steps with SGD and Adam), renamed
apart and compiled in a few batched NVRTC programs. A batch that fails is recompiled kernel
by kernel so the report names each failing kernel with its IR and source.
"""
import copy
import os
import sys
import types

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.compiler.backends import register_backend
from eagerc.compiler.backends.fused import PIPELINE, plan_kernels
from eagerc.compiler.backends.numpy_backend import NumpyBackend
from eagerc.compiler.kernels.cuda_render import THREADS, CudaRenderer, launch_config, render_cuda
from eagerc.runtime.kernels.ir import Kernel, Reduction
from eagerc.compiler.passes import optimize
from eagerc.compiler.tracer import trace
from eagerc.runtime import nvrtc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(),
                                 reason="NVRTC not installed (pip install nvidia-cuda-nvrtc-cu12)")


def _optable():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from optable import all_cases
    return [(c, v) for c in all_cases() for v in range(len(c.shapes))]


def _kernels_of(fn, arrays, singleton_min=0):
    ts = [eagerc.tensor(a) for a in arrays]
    try:
        with np.errstate(all="ignore"):
            graph, _, _ = trace(fn, tuple(ts))
    except Exception:
        return []
    if graph is None:
        return []
    return [k for _, _, k in plan_kernels(optimize(graph, PIPELINE), singleton_min)]


def _renamed(kernels, prefix):
    out = []
    for i, k in enumerate(kernels):
        k = copy.copy(k)
        k.name = f"{prefix}_{i}"
        out.append(k)
    return out


def _optable_kernels(part, parts):
    kernels = []
    for j, (case, v) in enumerate(_optable()):
        if j % parts != part:
            continue
        for dtype in ("float64", "float32"):
            if dtype == "float32" and not case.float32:
                continue
            arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in case.arrays(v)]
            kernels += _kernels_of(case.fn, arrays)
    return kernels


def _random_kernels():
    from test_c_backend import _random_program
    kernels = []
    for seed in range(25):
        for dtype in ("float32", "float64"):
            rng = np.random.default_rng(seed)
            fn = _random_program(rng)
            shapes = [((6, 33), (33,), (6, 1)), ((2, 3, 17), (3, 1), ()), ((40000,), (1,), (40000,))][seed % 3]
            kernels += _kernels_of(fn, [rng.standard_normal(s).astype(dtype) for s in shapes])
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    kernels += _kernels_of(lambda a, b: (eagerc.maximum(a * 1, b), (a + 0).amax(-1), (a * 1).amin()), [x, x[0]])
    return kernels


class _Capture:
    """A backend that records the kernels backend "c" would make, and runs numpy."""
    name = "capture_cuda"
    supports_dynamic = False
    kernels = []
    pipeline = PIPELINE

    def compile(self, graph):
        _Capture.kernels += [k for _, _, k in plan_kernels(graph)]
        return NumpyBackend().compile(graph)


register_backend("capture_cuda", _Capture)


def _training_kernels():
    _Capture.kernels = []
    for make_opt in (lambda ps: eagerc.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
                     lambda ps: eagerc.optim.Adam(ps, lr=1e-2),
                     lambda ps: eagerc.optim.AdamW(ps, lr=1e-3)):
        for dtype in (eagerc.float64, eagerc.float32):
            eagerc.manual_seed(0)
            model = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(),
                                  nn.Linear(32, 4)).to(dtype)
            opt = make_opt(model.parameters())

            def step(x, y):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                return loss.detach()
            f = eagerc.compile(step, backend="capture_cuda")
            rng = np.random.default_rng(1)
            for _ in range(2):
                f(eagerc.tensor(rng.standard_normal((16, 6))).to(dtype), eagerc.tensor(rng.integers(0, 4, 16)))
    return list(_Capture.kernels)


def _unique(kernels):
    """Kernels whose CUDA differs (the same op on the same shapes is compiled once)."""
    seen, out = set(), []
    for k in kernels:
        key = CudaRenderer().kernel(Kernel("k", k.shape, k.inputs, k.outputs, k.instrs, k.stores,
                                           k.reduction, k.nodes, k.row_dims))
        key = key.split("\n", 1)[1]     # without the comment naming graph nodes
        if key not in seen:
            seen.add(key)
            out.append(k)
    return out


def _compile_all(kernels, prefix):
    assert kernels, "no kernels were generated"
    kernels = _renamed(_unique(kernels), prefix)
    source = render_cuda(kernels)
    try:
        ptx = nvrtc.compile_ptx(source, name=f"{prefix}.cu")
    except nvrtc.NvrtcError:
        bad = []
        for k in kernels:
            try:
                nvrtc.compile_ptx(render_cuda([k]), name=f"{k.name}.cu")
            except nvrtc.NvrtcError as e:
                bad.append(f"{k}\n{render_cuda([k])}\n{e.log}")
        pytest.fail(f"{len(bad)} of {len(kernels)} CUDA kernels do not compile:\n\n" + "\n\n".join(bad[:5]))
    for k in kernels:
        assert f".entry {k.name}(" in ptx, f"{k.name} missing from the PTX"
    return kernels


# ---------------------------------------------------------------- NVRTC over the test suite's kernels

PARTS = 4


@needs_nvrtc
@pytest.mark.parametrize("part", range(PARTS))
def test_op_table_kernels_compile_with_nvrtc(part):
    kernels = _compile_all(_optable_kernels(part, PARTS), f"op{part}")
    assert len(kernels) > 20


@needs_nvrtc
def test_random_fused_program_kernels_compile_with_nvrtc():
    kernels = _compile_all(_random_kernels(), "rand")
    assert any(k.row_dims for k in kernels)
    assert any(k.reduction is not None and k.reduction.axis == "all" for k in kernels)


@needs_nvrtc
def test_training_step_kernels_compile_with_nvrtc():
    kernels = _compile_all(_training_kernels(), "train")
    assert any(k.row_dims for k in kernels)                                   # cross-entropy
    assert any(k.reduction is not None and k.reduction.axis == "lead" for k in kernels)   # bias grads


@needs_nvrtc
def test_row_pattern_kernels_compile_with_nvrtc():
    from test_c_backend import _ROW_PATTERNS
    kernels = []
    for name, (fn, _, make) in sorted(_ROW_PATTERNS.items()):
        for dtype in ("float32", "float64"):
            kernels += _kernels_of(fn, [a.astype(dtype) for a in make(np.random.default_rng(0))])
    kernels = _compile_all(kernels, "rows")
    assert sum(1 for k in kernels if k.row_dims) >= len(_ROW_PATTERNS)


@needs_nvrtc
def test_compile_error_carries_the_nvrtc_log():
    with pytest.raises(nvrtc.NvrtcError, match="undefined") as e:
        nvrtc.compile_ptx('extern "C" __global__ void f() { undefined_thing; }')
    assert "undefined_thing" in e.value.log


@needs_nvrtc
def test_arch_is_configurable():
    ptx = nvrtc.compile_ptx(render_cuda(_random_kernels()[:2]), arch="compute_80")
    assert ".target sm_80" in ptx


def test_missing_nvrtc_is_reported(monkeypatch):
    monkeypatch.setattr(nvrtc, "_lib", None)
    monkeypatch.setattr(nvrtc, "_error", None)
    monkeypatch.setenv("EAGERC_NVRTC", "/nonexistent/libnvrtc.so")
    assert not nvrtc.available()
    with pytest.raises(nvrtc.NvrtcNotFound, match="nvidia-cuda-nvrtc-cu12"):
        nvrtc.compile_ptx("")
    monkeypatch.setattr(nvrtc, "_error", None)   # let later tests load the real one


# ---------------------------------------------------------------- renderer shape, no compiler needed

def _softmax_like():
    x = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)

    def fn(a, b):
        e = (a - a.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True), (a * b + 1).tanh().mean()
    return _kernels_of(fn, [x, x[0]])


def test_cuda_source_shape_and_determinism():
    ks = _softmax_like()
    src = render_cuda(ks)
    assert src == render_cuda(_softmax_like())
    assert "0x" not in src.split("#endif", 2)[-1]           # no ids or addresses after the prelude
    assert src.count('extern "C" __global__') == len(ks)
    assert "expf(" in src and "tanhf(" in src and "__restrict__" in src
    assert "int64_t" not in src and "#include" not in src    # NVRTC has no <stdint.h>
    assert "gridDim.x" in src and "__syncthreads()" in src
    configs = [launch_config(k) for k in ks]
    row = [c for k, c in zip(ks, configs) if k.row_dims]
    assert row and all(c == (2, THREADS) for c in row)       # rows of 8: a warp each, 8 rows per block
    assert any(k.reduction is not None and k.reduction.axis == "all" and c == (1, THREADS)
               for k, c in zip(ks, configs))


def test_launch_config_elementwise_and_literals():
    k = Kernel("k", (1 << 30,))
    k.load("a", "float32", (1 << 30,))
    k.store(0, "o", "float32", (1 << 30,))
    grid, block = launch_config(k)
    assert block == THREADS and 1 <= grid <= 65535 * 16
    assert launch_config(Kernel("e", (0,))) == (0, THREADS)
    r = CudaRenderer()
    assert r.literal(-2 ** 63, "int64") == "(-9223372036854775807LL - 1)"
    assert r.literal(5, "int64") == "5LL" and r.literal(1.5, "float32") == "1.5f"
    k2 = Kernel("k2", (3, 0), row_dims=1)
    k2.load("a", "float32", (3, 0))
    k2.store(k2.add("row_sum", (0,), "float32"), "s", "float32", (3,))
    assert launch_config(k2) == (1, THREADS)                  # empty rows still write 0 (3 warps, 1 block)


def test_backend_imports_without_cupy_and_says_so(monkeypatch):
    from eagerc.compiler.backends import get_backend
    import eagerc.compiler.backends.cuda_backend as cb
    monkeypatch.setitem(sys.modules, "cupy", None)
    backend = get_backend("cuda")
    ts = [eagerc.tensor(np.ones((4, 4), np.float32))]
    graph, _, _ = trace(lambda a: (a.exp() + 1).sum(-1), tuple(ts))
    with pytest.raises(RuntimeError, match="needs cupy"):
        backend.compile(optimize(graph, backend.pipeline))
    assert isinstance(backend, cb.CudaBackend)


def test_backend_driver_with_a_stand_in_cupy(monkeypatch):
    """The driver's plumbing with a fake cupy (numpy arrays, recorded launches)."""
    launches = []

    class RawModule:
        def __init__(self, code, options=()):
            self.code = code

        def get_function(self, name):
            def fn(grid, block, args):
                launches.append((name, grid, block, [a.shape for a in args]))
                for a in args[-1:]:
                    a[...] = 0
            return fn
    fake = types.SimpleNamespace(asarray=np.asarray, empty=np.empty, RawModule=RawModule)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    # the fake cupy is numpy, so OPS[...].kernel(cp) is numpy's: the driver runs end to end
    monkeypatch.setattr(eagerc.runtime.ops.OpDef, "kernel", lambda self, xp: self.cpu)
    from eagerc.compiler.backends.cuda_backend import CudaBackend
    x = np.ones((4, 8), np.float32)
    ts = [eagerc.tensor(x), eagerc.tensor(np.ones((8, 3), np.float32))]
    graph, _, tracer = trace(lambda a, w: ((a.exp() + 1).sum(-1), (a * 2) @ w), tuple(ts))
    program = CudaBackend(singleton_min=0).compile(optimize(graph, CudaBackend.pipeline))
    assert "OPS['matmul'].kernel(cp)" in program.source and ".cpu" not in program.source
    assert program.kernels and 'extern "C"' in program.cuda_source
    env = {f"arg{i}": t._array for i, t in enumerate(ts)}
    outs, _ = program(env)
    assert [o.shape for o in outs] == [(4,), (4, 3)]
    assert launches and all(block == (THREADS,) for _, _, block, _ in launches)


# ---------------------------------------------------------------- on a GPU (tools/gpu_check.sh)

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_backend_matches_eager_on_cupy(dtype):
    from test_c_backend import _random_program
    from eagerc.compiler.backends.cuda_backend import CudaBackend
    checked = 0
    cases = [(c, v) for c, v in _optable()][::7]
    for seed in range(12):
        rng = np.random.default_rng(seed)
        shapes = [((6, 33), (33,), (6, 1)), ((2, 3, 17), (3, 1), ()), ((40000,), (1,), (40000,))][seed % 3]
        cases.append((_random_program(rng), [rng.standard_normal(s).astype(dtype) for s in shapes]))
    for item in cases:
        if isinstance(item[0], types.FunctionType):
            fn, arrays = item
        else:
            case, v = item
            if dtype == "float32" and not case.float32:
                continue
            fn = case.fn
            arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in case.arrays(v)]
        ts = [eagerc.tensor(a).cuda() for a in arrays]
        try:
            graph, result, tracer = trace(fn, tuple(ts))
        except Exception:
            continue
        if graph is None:
            continue
        program = CudaBackend(singleton_min=0).compile(optimize(graph, CudaBackend.pipeline))
        if not program.kernels:
            continue
        env = {f"arg{i}": t._array for i, t in enumerate(ts)}
        env.update({name: t._array for name, t in tracer.externals.items()})
        outs, _ = program(env)
        leaves = [t for t in (result if isinstance(result, (tuple, list)) else (result,))
                  if isinstance(t, eagerc.Tensor)]
        tol = (2e-5, 1e-6) if dtype == "float32" else (1e-10, 1e-12)
        for o, w in zip(outs, leaves):
            got, want = np.asarray(o.get() if hasattr(o, "get") else o), w.numpy(force=True)
            assert got.dtype == want.dtype and got.shape == want.shape
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, *tol, equal_nan=True, err_msg=program.cuda_source)
            else:
                np.testing.assert_array_equal(got, want)
        checked += 1
    assert checked >= 10


@pytest.mark.cuda
def test_cuda_compiled_training_step_matches_eager():
    eagerc.manual_seed(0)
    eager = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 4)).to(eagerc.float64).cuda()
    comp = copy.deepcopy(eager)
    opt_e, opt_c = eagerc.optim.Adam(eager.parameters(), lr=1e-2), eagerc.optim.Adam(comp.parameters(), lr=1e-2)

    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    f = eagerc.compile(lambda x, y: step(comp, opt_c, x, y), backend="cuda")
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = eagerc.tensor(rng.standard_normal((16, 6))).cuda()
        y = eagerc.tensor(rng.integers(0, 4, 16)).cuda()
        np.testing.assert_allclose(f(x, y).item(), step(eager, opt_e, x, y).item(), rtol=1e-9)
    for p, q in zip(eager.parameters(), comp.parameters()):
        np.testing.assert_allclose(q.numpy(force=True), p.numpy(force=True), rtol=1e-8, atol=1e-11)


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_kernels_compile_with_nvrtc(dtype):
    from test_c_backend import _HALF_PROGRAMS
    dt = eagerc.runtime.dtypes.as_dtype(dtype).np
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((48, 300)).astype(dt), rng.standard_normal(300).astype(dt)
    kernels = []
    for name, fn in sorted(_HALF_PROGRAMS.items()):
        kernels += _kernels_of(fn, [a, b])
    assert any(x.dtype == dtype for k in kernels for x in k.instrs)
    kernels = _compile_all(kernels, dtype)
    src = render_cuda(kernels)
    convert = ("eagerc_f2h(", "eagerc_h2f(") if dtype == "float16" else ("eagerc_f2bf(", "eagerc_bf2f(")
    assert all(c in src for c in convert) and "_Float16" not in src and "uint16_t" not in src


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_cuda_row_patterns_and_float16_match_numpy(dtype):
    # the multi-pass row kernels (softmax, layer_norm, ...) and float16 programs, launched
    from test_c_backend import _HALF_PROGRAMS, _ROW_PATTERNS
    rng = np.random.default_rng(2)
    cases = [(fn, ref, make(rng)) for fn, ref, make in _ROW_PATTERNS.values()]
    if dtype == "float16":
        a, b = rng.standard_normal((48, 300)), rng.standard_normal(300)
        cases = [(fn, None, [a, b]) for fn in _HALF_PROGRAMS.values()]
    for fn, ref, arrays in cases:
        arrays = [x.astype(dtype) for x in arrays]
        compiled = eagerc.compile(fn, backend="cuda")
        got = compiled(*[eagerc.tensor(x).cuda() for x in arrays]).numpy(force=True)
        want = fn(*[eagerc.tensor(x) for x in arrays]).numpy()
        assert any(e.program.kernels for e in compiled.entries.values())
        if dtype == "float16":
            ulps = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want)).astype(np.float64)
            assert np.nanmax(ulps) <= 1
        else:
            tol = 1e-5 if dtype == "float32" else 1e-11
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
            np.testing.assert_allclose(got, ref(*[x.astype(np.float64) for x in arrays]), rtol=max(tol, 1e-5),
                                       atol=max(tol, 1e-6))
