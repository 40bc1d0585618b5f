"""Backend "c": fused groups as generated C kernels, against eager mode and numpy.

Random fused programs (values), the op table's elementwise and reduction cases (each op
alone as a kernel), an MLP training step over 5 steps, the disk cache in a second
process, the fallback without a compiler, and deterministic generated source.
"""
import copy
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.compiler.backends.c_backend import CBackend
from eagerc.compiler.backends.fused import PIPELINE, plan_kernels
from eagerc.runtime.kernels.ir import Kernel, broadcast_strides
from eagerc.compiler.kernels.lower import LOWERABLE, REDUCIBLE
from eagerc.compiler.passes import optimize
from eagerc.compiler.tracer import trace
from eagerc.runtime import kernel_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(kernel_cache_dir):
    yield kernel_cache_dir


def _compile_traced(fn, arrays, singleton_min=0):
    ts = [eagerc.tensor(a) for a in arrays]
    graph, result, tracer = trace(fn, tuple(ts))
    if graph is None:
        pytest.skip(f"trace breaks: {tracer.broken}")
    env = {f"arg{i}": t._array for i, t in enumerate(ts)}
    env.update({name: t._array for name, t in tracer.externals.items()})
    program = CBackend(singleton_min=singleton_min).compile(optimize(graph, CBackend().pipeline))
    leaves = [t for t in (result if isinstance(result, (tuple, list)) else (result,))
              if isinstance(t, eagerc.Tensor)]
    return program, env, [np.asarray(t._array) for t in leaves]


def _close(got, want, rtol, atol, what=""):
    assert got.dtype == want.dtype, f"{what}: {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: {got.shape} != {want.shape}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


# ---------------------------------------------------------------- kernel IR

def test_broadcast_strides_and_loop_shape():
    assert broadcast_strides((4, 1), (3, 4, 5)) == (0, 1, 0)
    assert broadcast_strides((5,), (3, 4, 5)) == (0, 0, 1)
    k = Kernel("k", (3, 4, 5))
    k.load("a", "float32", (3, 4, 5))
    k.load("b", "float32", (5,))
    sizes, strides, split = k.loop_shape()
    assert sizes == (12, 5) and strides == [(5, 1), (0, 1)] and split == 2
    k2 = Kernel("k", (3, 1, 5))
    k2.load("a", "float32", (3, 1, 5))
    assert k2.loop_shape() == ((15,), [(1,)], 1)
    # a row kernel over the last two dims merges rows and the row separately
    k3 = Kernel("k", (2, 3, 4, 5), row_dims=2)
    k3.load("a", "float32", (2, 3, 4, 5))
    k3.load("w", "float32", (4, 5))
    assert k3.loop_shape() == ((6, 20), [(20, 1), (0, 1)], 1)
    assert k3.rows_cols() == (6, 20)


# ---------------------------------------------------------------- random fused programs

_UNARY = [lambda x: x.exp() * 0.25, lambda x: x.tanh(), lambda x: x.sigmoid(), lambda x: -x,
          lambda x: x.abs().sqrt(), lambda x: x.relu(), lambda x: x * x, lambda x: x.clamp(-0.5, 0.7),
          lambda x: (x.abs() + 1).log(), lambda x: x ** 3, lambda x: 1 / (x.abs() + 0.5),
          lambda x: eagerc.where(x > 0.1, x, x * 0.5)]
_BINARY = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
           lambda a, b: eagerc.maximum(a, b), lambda a, b: eagerc.minimum(a, b),
           lambda a, b: a / (b.abs() + 1)]


def _random_program(rng):
    n_ops = int(rng.integers(2, 7))
    script = [(int(rng.integers(0, 2)), int(rng.integers(0, len(_UNARY))), int(rng.integers(0, len(_BINARY))),
               int(rng.integers(0, 3))) for _ in range(n_ops)]
    reduce = int(rng.integers(0, 5))   # 0: none, 1 sum(-1), 2 mean(), 3 amax(-1, keepdim), 4 amin()

    def fn(x, y, z):
        vals = [x]
        others = [y, z, x]
        for binary, u, b, o in script:
            v = vals[-1]
            vals.append(_BINARY[b](v, others[o]) if binary else _UNARY[u](v))
        r = vals[-1]
        if reduce == 1:
            return r.sum(-1)
        if reduce == 2:
            return r.mean()
        if reduce == 3:
            return r.amax(-1, keepdim=True)
        if reduce == 4:
            return r.amin()
        return r
    return fn


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_fused_programs_match_eager(seed, dtype):
    rng = np.random.default_rng(seed)
    fn = _random_program(rng)
    shapes = [((6, 33), (33,), (6, 1)), ((2, 3, 17), (3, 1), ()), ((40000,), (1,), (40000,))][seed % 3]
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    program, env, want = _compile_traced(fn, arrays)
    assert program.kernels, "nothing was fused"
    outs, _ = program(env)
    tol = (2e-5, 1e-6) if dtype == "float32" else (1e-10, 1e-12)
    for o, w in zip(outs, want):
        _close(np.asarray(o), w, *tol, what=f"seed {seed}\n{program.c_source}")


def test_nan_propagates_like_numpy():
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    y = np.array([2.0, 2.0, np.nan], np.float32)
    program, env, want = _compile_traced(
        lambda a, b: (eagerc.maximum(a * 1, b), eagerc.minimum(a, b) + 0, (a + 0).amax(-1), (a * 1).amin()),
        [x, y])
    outs, _ = program(env)
    assert len(program.kernels) >= 2
    for o, w in zip(outs, want):
        _close(np.asarray(o), w, 0, 0)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_logaddexp_and_hypot_kernels_match_numpy_at_special_values(dtype):
    inf, nan = np.inf, np.nan
    a = np.array([inf, -inf, inf, -inf, nan, 1.0, 0.0, 3.0, -3.0, 1e30, -1e30, 700.0, 2.5, 1e-30], dtype)
    b = np.array([inf, -inf, -inf, 1.0, 2.0, nan, 0.0, 3.0, 4.0, 1e30, 1e30, 700.0, -80.0, 1e-30], dtype)
    program, env, want = _compile_traced(lambda x, y: (eagerc.logaddexp(x, y) * 2, eagerc.hypot(x, y) * 2), [a, b])
    assert {"logaddexp", "hypot"} <= {i.op for k in program.kernels for i in k.instrs}
    outs, _ = program(env)
    with np.errstate(invalid="ignore"):   # inf - inf inside numpy's logaddexp
        refs = (np.logaddexp(a, b) * 2, np.hypot(a, b) * 2)
    for o, ref in zip(outs, refs):
        assert o.dtype == ref.dtype
        np.testing.assert_allclose(o, ref, rtol=4 * np.finfo(dtype).eps, atol=0)   # inf, -inf and nan exactly


def test_reduction_over_leading_axes_is_one_kernel():
    # a bias gradient: elementwise work then a sum/mean over the leading dims, one kernel
    rng = np.random.default_rng(0)
    cases = [((8, 5), lambda a: (a.exp() * 2).sum(0), 1),
             ((4, 5, 6), lambda a: (a * a).mean((0, 1), keepdim=True), 2),
             ((300, 40), lambda a: (a - 1).sum(0, keepdim=False), 1)]
    for shape, fn, lead in cases:
        x = rng.standard_normal(shape)
        program, env, want = _compile_traced(fn, [x])
        (k,) = program.kernels
        assert k.reduction.axis == "lead" and k.reduction.lead == lead, str(k)
        _close(program(env)[0][0], want[0], 1e-12, 1e-12)
    x = rng.standard_normal((8, 5))
    program, env, _ = _compile_traced(lambda a: (a.exp() * 2).sum(0), [x])
    np.testing.assert_allclose(program(env)[0][0], (np.exp(x) * 2).sum(0), rtol=1e-12)


# ---------------------------------------------------------------- row kernels: multi-pass patterns

def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _np_cross_entropy(x, t):
    lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    return (lse - x[np.arange(len(t)), t]).mean()


_ROW_PATTERNS = {
    # name: (fn over tensors, numpy reference, input makers)
    "softmax": (lambda x: F.softmax(x, -1), _np_softmax, lambda r: [r.standard_normal((37, 129))]),
    "softmax_3d": (lambda x: F.softmax(x * 2 + 1, dim=-1), lambda x: _np_softmax(x * 2 + 1),
                   lambda r: [r.standard_normal((3, 5, 64))]),
    "log_softmax": (lambda x: F.log_softmax(x, -1), lambda x: np.log(_np_softmax(x)),
                    lambda r: [r.standard_normal((300, 257))]),
    "logsumexp": (lambda x: (x - x.amax(-1, keepdim=True)).exp().sum(-1).log() + x.amax(-1),
                  lambda x: np.log(np.exp(x).sum(-1)), lambda r: [r.standard_normal((64, 50))]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (96,), w, b), _np_layer_norm,
                   lambda r: [r.standard_normal((40, 96)) * 3 + 1, r.standard_normal(96), r.standard_normal(96)]),
    "rms_norm": (lambda x, w: x * ((x * x).mean(-1, keepdim=True) + 1e-6).rsqrt() * w,
                 lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w,
                 lambda r: [r.standard_normal((33, 70)), r.standard_normal(70)]),
    "gelu_layer_norm": (lambda x, w, b: F.layer_norm(F.gelu(x, approximate="tanh"), (64,), w, b),
                        lambda x, w, b: _np_layer_norm(0.5 * x * (1 + np.tanh(0.7978845608028654 *
                                                                              (x + 0.044715 * x ** 3))), w, b),
                        lambda r: [r.standard_normal((20, 64)), r.standard_normal(64), r.standard_normal(64)]),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(_ROW_PATTERNS))
def test_multi_pass_patterns_are_one_row_kernel(name, dtype):
    fn, ref, make = _ROW_PATTERNS[name]
    arrays = [a.astype(dtype) for a in make(np.random.default_rng(3))]
    compiled = eagerc.compile(fn, backend="c")
    compiled(*[eagerc.tensor(a) for a in arrays])      # the first call traces: eager's results
    got = compiled(*[eagerc.tensor(a) for a in arrays]).numpy()
    (entry,) = compiled.entries.values()
    rows = [k for k in entry.program.kernels if k.row_dims]
    assert len(rows) == 1 and len(entry.program.kernels) == 1, [str(k) for k in entry.program.kernels]
    tol = (1e-5, 1e-6) if dtype == "float32" else (1e-11, 1e-12)
    want = ref(*[a.astype(np.float64) for a in arrays])
    np.testing.assert_allclose(got, want, rtol=tol[0], atol=tol[1])
    assert got.dtype == np.dtype(dtype)


def test_cross_entropy_forward_and_backward_are_row_kernels():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((50, 13))
    t = rng.integers(0, 13, 50)

    def fn(a, tt):
        a = a.detach().requires_grad_()
        loss = F.cross_entropy(a, tt)
        (g,) = eagerc.autograd.grad(loss, a)
        return loss.detach(), g
    compiled = eagerc.compile(fn, backend="c")
    compiled(eagerc.tensor(x), eagerc.tensor(t))       # the first call traces: eager's results
    loss, g = compiled(eagerc.tensor(x), eagerc.tensor(t))
    np.testing.assert_allclose(loss.item(), _np_cross_entropy(x, t), rtol=1e-12)
    onehot = np.eye(13)[t]
    np.testing.assert_allclose(g.numpy(), (_np_softmax(x) - onehot) / 50, rtol=1e-10, atol=1e-14)
    kernels = [k for e in compiled.entries.values() for k in e.program.kernels]
    assert sum(1 for k in kernels if k.row_dims) >= 1


def test_row_kernel_propagates_nan_and_handles_inf_rows():
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, 0.0, 1.0], [2.0, 2.0, 2.0]])
    compiled = eagerc.compile(lambda a: F.softmax(a, -1), backend="c")
    with np.errstate(all="ignore"):
        compiled(eagerc.tensor(x))                     # the first call traces: eager's results
        got = compiled(eagerc.tensor(x)).numpy()
        want = _np_softmax(x)
    np.testing.assert_allclose(got, want, equal_nan=True, rtol=1e-12)


def test_row_passes_schedule():
    # layer_norm: mean (pass 0), variance (pass 1), normalise and store (pass 2)
    x = np.random.default_rng(0).standard_normal((4, 8))
    program, env, want = _compile_traced(
        lambda a: (a - a.mean(-1, keepdim=True)) * ((a - a.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True).rsqrt(),
        [x])
    (k,) = program.kernels
    passes, tail = k.row_passes()
    assert [len(p.reduces) for p in passes] == [1, 1, 0] and passes[-1].stores and not tail
    _close(program(env)[0][0], want[0], 1e-12, 1e-12)


def test_optimizer_updates_are_written_in_place_and_buffers_reused():
    eager = _mlp()
    comp = copy.deepcopy(eager)
    opt_e, opt_c = (eagerc.optim.Adam(m.parameters(), lr=1e-2) for m in (eager, comp))

    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    compiled = eagerc.compile(lambda x, y: step(comp, opt_c, x, y), backend="c")
    rng = np.random.default_rng(1)
    ids = [id(p._array) for p in comp.parameters()]
    for _ in range(4):
        x, y = eagerc.tensor(rng.standard_normal((16, 6))), eagerc.tensor(rng.integers(0, 4, 16))
        step(eager, opt_e, x, y)
        compiled(x, y)
    assert [id(p._array) for p in comp.parameters()] == ids        # same arrays, updated in place
    programs = [e.program for e in compiled.entries.values() if getattr(e, "kernels", None) or
                getattr(e.program, "kernels", None)]
    assert any(k.inplace for p in programs for k in p.kernels)
    assert any("alloc_buffers" in p.source for p in programs)
    # a kernel writing into a reused buffer passes the buffer's pointer, taken once per buffer
    # set (alloc_buffers), and the buffer's local names its value (no copy to another name)
    src = next(p.source for p in programs if "alloc_buffers" in p.source)
    assert "    buf0_p = ptr(buf0)" in src and "buf0_p" in src.split("def program")[1]
    for (n, p), q in zip(eager.named_parameters(), comp.parameters()):
        np.testing.assert_allclose(q.numpy(force=True), p.numpy(force=True), rtol=1e-9, atol=1e-12, err_msg=n)


# ---------------------------------------------------------------- the op table

def _optable_cases():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from optable import all_cases
    return [(c, v) for c in all_cases() for v in range(len(c.shapes))]


OPTABLE = _optable_cases()


@pytest.mark.parametrize("cv", OPTABLE, ids=lambda cv: f"{cv[0].name}-{cv[1]}")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_op_table_case_compiled_c(cv, dtype):
    case, v = cv
    if dtype == "float32" and not case.float32:
        pytest.skip("float32 disabled for this case")
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in case.arrays(v)]
    ts = [eagerc.tensor(a) for a in arrays]
    graph, result, tracer = trace(case.fn, tuple(ts))
    if graph is None:
        pytest.skip("trace breaks")
    if not any(n.op in LOWERABLE or n.op in REDUCIBLE for n in graph.nodes):
        pytest.skip("no elementwise or reduction op")
    g = optimize(graph)
    if not plan_kernels(g, singleton_min=0):
        pytest.skip("nothing lowers")
    program, env, want = _compile_traced(case.fn, arrays)
    outs, _ = program(env)
    tol = (1e-5, 1e-6) if dtype == "float32" else (1e-11, 1e-13)
    for k, (o, w) in enumerate(zip(outs, want)):
        _close(np.asarray(o), w, *tol, what=f"{case.name}-{v} output {k}\n{program.c_source}")


# ---------------------------------------------------------------- training

def _mlp(seed=0):
    eagerc.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4)).to(eagerc.float64)


@pytest.mark.parametrize("make_opt", [
    lambda ps: eagerc.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    lambda ps: eagerc.optim.Adam(ps, lr=1e-2),
], ids=["sgd_momentum", "adam"])
def test_mlp_training_step_matches_eager(make_opt):
    eager = _mlp()
    comp = copy.deepcopy(eager)
    opt_e, opt_c = make_opt(eager.parameters()), make_opt(comp.parameters())

    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = eagerc.compile(lambda x, y: step(comp, opt_c, x, y), backend="c")
    rng = np.random.default_rng(1)
    for i in range(5):
        x = eagerc.tensor(rng.standard_normal((16, 6)))
        y = eagerc.tensor(rng.integers(0, 4, 16))
        le, lc = step(eager, opt_e, x, y), compiled(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-10)
    for (n, p), q in zip(eager.named_parameters(), comp.parameters()):
        np.testing.assert_allclose(q.numpy(force=True), p.numpy(force=True), rtol=1e-9, atol=1e-12, err_msg=n)
    programs = [e.program for e in compiled.entries.values() if getattr(e, "program", None) is not None]
    assert any(getattr(p, "kernels", None) for p in programs), "no C kernel ran"


# ---------------------------------------------------------------- cache, fallback, determinism

_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path.insert(0, {root!r})
    import eagerc
    import eagerc.compiler.backends.c_backend
    from eagerc.runtime import kernel_cache
    f = eagerc.compile(lambda x: 0.5 * x * (1 + eagerc.tanh(0.79788 * (x + 0.044715 * x ** 3))), backend="c")
    x = eagerc.tensor(np.linspace(-3, 3, 1000, dtype=np.float32))
    with eagerc.no_grad():
        y = f(x)
    print(json.dumps(dict(kernel_cache.stats, value=float(y.numpy()[7]))))
""")


def test_second_process_compiles_nothing(tmp_path):
    env = dict(os.environ, EAGERC_CACHE_DIR=str(tmp_path), EAGERC_KERNEL_LOG=str(tmp_path / "log"))
    script = _SCRIPT.format(root=ROOT)
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert runs[0]["compiles"] == 1 and runs[0]["hits"] == 0
    assert runs[1]["compiles"] == 0 and runs[1]["hits"] == 1
    assert runs[0]["value"] == runs[1]["value"]
    assert (tmp_path / "log").read_text().count("compiled") == 1
    assert len(list(tmp_path.glob("*.so"))) == 1


def test_no_compiler_falls_back_to_numpy(monkeypatch):
    monkeypatch.setenv("EAGERC_CC", "/nonexistent/cc")
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    with pytest.warns(RuntimeWarning, match="no C compiler") as rec:
        program, env, want = _compile_traced(lambda a: (a.exp() + 1).sum(-1), [x])
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert not hasattr(program, "c_source") and "numpy_backend" in program.source
    _close(program(env)[0][0], want[0], 1e-6, 0)
    with pytest.warns(RuntimeWarning, match="no C compiler"):
        f = eagerc.compile(lambda a: a * 2 + 1, backend="c")
        with eagerc.no_grad():
            np.testing.assert_allclose(f(eagerc.tensor(x)).numpy(), x * 2 + 1)


def test_generated_source_is_deterministic():
    x = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)

    def fn(a, b):
        m = a.amax(-1, keepdim=True)
        e = (a - m).exp()
        return e / e.sum(-1, keepdim=True), (a * b + 1).tanh()
    p1, _, _ = _compile_traced(fn, [x, x[0]])
    p2, _, _ = _compile_traced(fn, [x, x[0]])
    assert p1.c_source == p2.c_source and p1.source == p2.source
    assert p1.library == p2.library
    assert "0x" not in p1.c_source


# ---------------------------------------------------------------- float16

_HALF_PROGRAMS = {
    "elementwise": lambda a, b: ((a * b + 1).tanh() * a - b / 2).exp(),
    "softmax": lambda a, b: F.softmax(a * b, -1),
    "layer_norm": lambda a, b: F.layer_norm(a, (a.shape[-1],), b, None),
    "row_sum": lambda a, b: (a * b).sum(-1),
    "lead_mean": lambda a, b: (a * b + 1).mean(0),
    "casts": lambda a, b: (a.to(eagerc.float32) * 2).to(a.dtype) + b,
    "compare_where": lambda a, b: eagerc.where(a > b, a.sigmoid(), b.square()),
    "logaddexp_hypot": lambda a, b: eagerc.logaddexp(a, b) + eagerc.hypot(a, b),
}


def _ulp(x, dtype):
    """The spacing of `dtype` (float16 or bfloat16: 10 or 7 mantissa bits) at |x|, in float64."""
    bits = np.finfo(dtype).nmant
    e = np.floor(np.log2(np.maximum(np.abs(x.astype(np.float64)), np.finfo(dtype).smallest_normal)))
    return np.exp2(e - bits)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(_HALF_PROGRAMS))
def test_half_kernels_round_like_numpy(name, dtype):
    # numpy's float16 ufuncs (and ml_dtypes' bfloat16 ones) compute in float32 and round every
    # result; the kernels hold these 16-bit floats as float and round after every op, so
    # results agree to the last bit except where float32 libm functions differ (allowed: 1 ulp)
    if dtype == "float16" and not kernel_cache.has_float16():
        pytest.skip("the C compiler has no _Float16")
    dt = eagerc.runtime.dtypes.as_dtype(dtype).np
    fn = _HALF_PROGRAMS[name]
    rng = np.random.default_rng(5)
    a = rng.standard_normal((48, 300)).astype(dt)
    b = rng.standard_normal(300).astype(dt)
    compiled = eagerc.compile(fn, backend="c")
    compiled(eagerc.tensor(a), eagerc.tensor(b))       # the first call traces: eager's results
    got = compiled(eagerc.tensor(a), eagerc.tensor(b)).numpy()
    want = fn(eagerc.tensor(a), eagerc.tensor(b)).numpy()
    (entry,) = compiled.entries.values()
    if dtype == "bfloat16" and name in ("softmax", "layer_norm"):   # opmath: stays one node, computed in float32
        assert name in [n.op for n in entry.program.graph.nodes]
    else:
        assert entry.program.kernels and any(x.dtype == dtype for k in entry.program.kernels for x in k.instrs)
    assert got.dtype == want.dtype == dt
    ulps = np.abs(got.astype(np.float64) - want.astype(np.float64)) / _ulp(want, dt)
    assert np.nanmax(ulps) <= 1, f"{name}: {np.nanmax(ulps)} ulps of {dtype}"
    # and an independent check against float64 math rounded to half (a few ulps: per-op rounding)
    ref = fn(eagerc.tensor(a.astype(np.float64)), eagerc.tensor(b.astype(np.float64))).numpy()
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-2 if dtype == "float16" else 5e-2,
                               atol=2e-2 if dtype == "float16" else 5e-2)


def test_many_kernels_compile_in_parallel_shared_objects(monkeypatch, tmp_path):
    # the missing kernels are compiled together, CHUNK per translation unit at most, one unit per
    # CPU at most, side by side; the program still computes what eager does
    import eagerc.compiler.backends.c_backend as cb
    monkeypatch.setattr(cb, "CHUNK", 2)
    monkeypatch.setattr(kernel_cache.os, "cpu_count", lambda: 3)
    monkeypatch.setenv("EAGERC_CACHE_DIR", str(tmp_path))
    x = np.random.default_rng(0).standard_normal((64, 300))

    def fn(a):
        outs = []
        for i in range(6):          # six independent row kernels, each its own constant
            b = a * (i + 1)
            outs.append(F.softmax(b, -1) if i % 2 else b - b.mean(-1, keepdim=True))
        return outs
    fn(eagerc.tensor(x))            # eager kernels (softmax rows of 300) built before counting
    kernel_cache.wait_prefetched()  # ... and their backward's, started beside them (eager.COMPANIONS)
    before = kernel_cache.stats["compiles"]
    program, env, want = _compile_traced(fn, [x])
    assert len(program.kernels) >= 6 and len(set(program.functions.values())) == len(program.kernels)
    assert kernel_cache.stats["compiles"] - before == 3 and len(program.library) == 3
    for o, w in zip(program(env)[0], want):
        _close(np.asarray(o), w, 1e-12, 1e-12)


def test_parallel_translation_units_are_balanced_by_source_length():
    # the compilers of a program's units run side by side and the slowest decides: the
    # functions go to the unit with the least text so far, longest first; each unit keeps the
    # functions' order (deterministic sources: the same program gives the same libraries)
    rng = np.random.default_rng(5)
    todo = [(f"f{i}", "x" * int(n), f"k{i}") for i, n in enumerate(rng.integers(10, 1000, 37))]
    todo[3] = ("f3", "x" * 9000, "k3")            # one function longer than half the rest
    parts = kernel_cache._balanced(todo, 2)
    assert sorted(t for p in parts for t in p) == sorted(todo)
    for p in parts:
        assert [todo.index(t) for t in p] == sorted(todo.index(t) for t in p)
    lengths = sorted(sum(len(t[1]) for t in p) for p in parts)
    longest_rest = max(len(t[1]) for t in todo if t[0] != "f3")
    assert lengths[1] == 9000 or lengths[1] - lengths[0] <= longest_rest   # greedy LPT's bound
    even = kernel_cache._balanced([(f"f{i}", "x" * 100, "k") for i in range(6)], 3)
    assert [len(p) for p in even] == [2, 2, 2] and kernel_cache._balanced(todo, 1) == [todo]


def test_identical_kernels_are_one_function_shared_across_graphs(monkeypatch, tmp_path):
    # kernels are named by what they compute, not by graph node: four identical blocks give one
    # function, compiled once; another graph holding the same computation compiles nothing
    monkeypatch.setenv("EAGERC_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(3)
    x, w, m = rng.standard_normal((32, 50)), rng.standard_normal(50), rng.standard_normal((50, 50)) / 7

    def four(a, b, c):
        for _ in range(4):
            a = F.softmax(a * b + 1, -1) @ c
        return a

    want = x
    for _ in range(4):
        want = _np_softmax(want * w + 1) @ m
    four(*map(eagerc.tensor, (x, w, m)))      # eager kernels built before counting
    kernel_cache.wait_prefetched()             # ... and their backward's, started beside them
    before = kernel_cache.stats["compiles"]
    program, env, _ = _compile_traced(four, [x, w, m])
    assert len(program.kernels) == 4 and len(set(program.functions.values())) == 1
    assert kernel_cache.stats["compiles"] - before == 1
    (name,) = set(program.functions.values())
    assert program.c_source.count(f"void {name}(") == 1 and "void k0(" not in program.c_source
    np.testing.assert_allclose(program(env)[0][0], want, rtol=1e-12, atol=1e-14)
    # the same block in another graph, on other values: the same function, found in the cache
    hits = kernel_cache.stats["hits"]
    other, env2, _ = _compile_traced(lambda a, b, c: F.softmax(a * b + 1, -1) @ c, [x + 1, w, m])
    assert set(other.functions.values()) == {name} and kernel_cache.stats["compiles"] - before == 1
    np.testing.assert_allclose(other(env2)[0][0], _np_softmax((x + 1) * w + 1) @ m, rtol=1e-12, atol=1e-14)
    assert kernel_cache.stats["hits"] == hits       # loaded in this process already: not even a disk lookup
    assert len(list(tmp_path.glob("*.fn"))) == 1     # one function: one index entry naming its object


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_arithmetic_chains_give_eagers_bits(dtype):
    # correctly rounded operations, no FMA contraction (-ffp-contract=off): the same bits
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((64, 700)).astype(dtype), rng.standard_normal(700).astype(dtype)

    def fn(x, y):
        z = (x * y + 1.5) / (y * y + 2) - x.sqrt().nan_to_num(0) * 0 + (x * 3 - y).abs().sqrt()
        return eagerc.where(z > 0, z * x + y, eagerc.maximum(z, x) - 0.25)
    with np.errstate(invalid="ignore"):
        program, env, want = _compile_traced(fn, [a, b])
        got = program(env)[0][0]
    assert program.kernels
    np.testing.assert_array_equal(got, want[0])


def test_few_long_rows_use_threads_and_split_rows_only_without_sums():
    # softmax / layer_norm sum along the row: threads share out the rows (a split row's sum
    # would depend on the thread count); a row max alone may split each row across threads
    x = np.random.default_rng(11).standard_normal((3, 60000))
    compiled = eagerc.compile(lambda a: (F.softmax(a, -1), F.layer_norm(a, (60000,))), backend="c")
    sm, ln = compiled(eagerc.tensor(x))
    (entry,) = compiled.entries.values()
    assert "#pragma omp parallel for num_threads(eagerc_team(180000, 3))" in entry.program.c_source
    assert "#pragma omp parallel for simd" not in entry.program.c_source
    np.testing.assert_allclose(sm.numpy(), _np_softmax(x), rtol=1e-12)
    np.testing.assert_allclose(ln.numpy(), _np_layer_norm(x, 1.0, 0.0), rtol=1e-9, atol=1e-12)
    compiled = eagerc.compile(lambda a: a - a.amax(-1, keepdim=True), backend="c")
    got = compiled(eagerc.tensor(x))
    (entry,) = compiled.entries.values()
    assert "#pragma omp parallel for simd num_threads(eagerc_team(180000, 60000)) reduction(max" in \
        entry.program.c_source
    np.testing.assert_array_equal(got.numpy(), x - x.max(-1, keepdims=True))


def test_failing_compiler_falls_back_to_numpy_with_the_error(monkeypatch, failing_cc):
    # a compiler that exists but rejects the flags (e.g. no OpenMP): one-line warning, numpy runs
    x = np.random.default_rng(0).standard_normal((4, 8))
    with pytest.warns(RuntimeWarning, match="the C compiler failed .*unsupported option") as rec:
        program, env, want = _compile_traced(lambda a: (a.exp() + 1).sum(-1), [x])
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert "numpy_backend" in program.source
    _close(program(env)[0][0], want[0], 1e-12, 0)


def test_line_nodes_name_every_node_a_fused_kernel_computes():
    """program.line_nodes maps a K_<name>(...) line to all nodes the kernel fuses, and every other
    node's line to that node."""
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    program, env, want = _compile_traced(lambda a: ((a.exp() + 1).sum(-1), a @ a.T), [x])
    lines = program.source.splitlines()
    fused = {k.name: k for k in program.kernels}
    assert fused
    seen = []
    for number, nodes in program.line_nodes.items():
        code = lines[number - 1].strip()
        if code.startswith("K_"):
            k = fused[code[2:code.index("(")]]
            assert set(nodes) == set(k.nodes)
        else:
            assert len(nodes) == 1 and code.startswith(f"{nodes[0]} = ")
        seen += nodes
    assert sorted(seen) == sorted(n.out.name for n in program.graph.nodes)


def test_inplace_update_read_by_a_later_kernel():
    # the driver takes each array's pointer once per call; an input updated in place by one
    # kernel and read, updated, by a kernel after a matmul shares that pointer
    x0 = np.random.default_rng(0).standard_normal(70000)
    m = eagerc.tensor(np.random.default_rng(1).standard_normal((700, 3)) * 1e-5)

    def fn(x, y):
        x.mul_(2.0).add_(y)
        s = (x.reshape(100, 700) @ m).sum()
        return (x * s + y).exp()
    compiled = eagerc.compile(fn, backend="c")
    xa, ya = eagerc.tensor(x0.copy()), eagerc.tensor(x0 * 0.5)
    for step in range(3):
        got, xs = compiled(xa, ya).numpy(), xa.numpy()
        x = x0.copy()
        for _ in range(step + 1):
            x = x * 2 + x0 * 0.5
        np.testing.assert_allclose(xs, x, rtol=1e-12)
        want = np.exp(x * (x.reshape(100, 700) @ m.numpy()).sum() + x0 * 0.5)
        assert np.isfinite(want).all()
        np.testing.assert_allclose(got, want, rtol=1e-9)
    (entry,) = compiled.entries.values()
    assert len(entry.program.kernels) == 2 and entry.program.kernels[0].inplace == {0: 0}


def test_a_deep_models_updates_join_in_kernels_of_few_arguments(tmp_path, monkeypatch):
    """Parameter updates of one shape join side by side (passes/fusion.py), at most
    JOIN_MEMBERS nodes a kernel: 240 parameters' Adam updates in one kernel took more
    arguments than a ctypes call can (1024) and the compile failed."""
    from eagerc.compiler.passes.fusion import JOIN_MEMBERS
    monkeypatch.setenv("EAGERC_CACHE_DIR", str(tmp_path))
    eagerc.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(3, 3) for _ in range(120)]).to(eagerc.float64)
    twin = copy.deepcopy(model)
    x = eagerc.randn(4, 3, dtype=eagerc.float64)

    def stepper(m):
        opt = eagerc.optim.Adam(m.parameters(), lr=1e-2)

        def step(x):
            opt.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            return loss.detach()
        return step
    compiled, eager = eagerc.compile(stepper(model), backend="c"), stepper(twin)
    for _ in range(3):
        compiled(x), eager(x)
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-10, atol=1e-12)
    groups = [g for e in compiled.entries.values() for g in (e.graph.fusion_groups or [])]
    assert groups and max(len(g) for g in groups) <= JOIN_MEMBERS
