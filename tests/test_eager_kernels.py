"""Eager composites on generated C kernels (eagerc/runtime/kernels/eager.py).

The C kernels against the numpy kernels they replace (and numpy formulas): values to a few
ulp of the row's largest value (row sums add in a different order, exp/log come from glibc's
vector library: the module docstring says why bits differ); where the C kernel does not apply
(small, strided, float16, another dim, switched off) results are numpy's bit for bit. Also:
one compile per row length whatever the row count, the disk cache in a second process, no
compiler import, and the fallback with its one-line notice without a C compiler.
"""
import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
from eagerc.runtime import kernel_cache
from eagerc.runtime.kernels import eager as c_rows
from eagerc.runtime.ops import OPS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")

# |C - numpy| <= ULPS * eps(dtype) * the row's scale: its largest |value|, or for a derivative
# (a difference of terms that may cancel) its largest |g * second input| if that is larger
# (measured: at most ~4 ulp)
ULPS = 8


def _numpy(op, *args, **attrs):
    old = c_rows.set_enabled(False)
    try:
        return OPS[op].cpu(*args, **attrs)
    finally:
        c_rows.set_enabled(old)


def _close_rows(got, want, dtype, terms=None):
    assert got.dtype == want.dtype == np.dtype(dtype) and got.shape == want.shape
    scale = np.abs(want).reshape(-1, want.shape[-1]).max(axis=1, keepdims=True)
    if terms is not None:
        scale = np.maximum(scale, np.abs(terms).reshape(scale.shape[0], -1).max(axis=1, keepdims=True))
    err = np.abs(got - want).reshape(-1, want.shape[-1])
    assert np.all(err <= ULPS * np.finfo(dtype).eps * scale), float((err / scale).max() / np.finfo(dtype).eps)


def _cases(rng, dtype, shape):
    x = rng.standard_normal(shape).astype(dtype) * 3
    g = rng.standard_normal(shape).astype(dtype)
    w, b = (rng.standard_normal(shape[-1]).astype(dtype) for _ in range(2))
    sm, lsm = _numpy("softmax", x, dim=-1), _numpy("log_softmax", x, dim=-1)
    ln = dict(normalized_shape=(shape[-1],), eps=1e-5)
    return [("softmax", (x,), dict(dim=-1)), ("log_softmax", (x,), dict(dim=-1)),
            ("softmax_backward", (g, sm), dict(dim=-1)), ("log_softmax_backward", (g, lsm), dict(dim=-1)),
            ("layer_norm", (x, w, b), ln), ("layer_norm", (x, None, b), ln), ("layer_norm", (x, None, None), ln),
            ("layer_norm_backward", (g, x, w), ln), ("layer_norm_backward", (g, x, None), ln),
            ("rms_norm", (x, w), ln), ("rms_norm", (x, None), ln),
            ("rms_norm_backward", (g, x, w), ln), ("rms_norm_backward", (g, x, None), ln),
            ("gelu", (x,), dict(approximate="none")), ("gelu_backward", (g, x), dict(approximate="none")),
            ("gelu", (x,), dict(approximate="tanh")), ("gelu_backward", (g, x), dict(approximate="tanh"))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(128, 96), (4, 33, 257)])
def test_c_kernels_match_numpy_kernels(dtype, shape):
    rng = np.random.default_rng(0)
    for op, args, attrs in _cases(rng, dtype, shape):
        got, want = OPS[op].cpu(*args, **attrs), _numpy(op, *args, **attrs)
        assert any(key[:3] == (op, dtype, shape[-1]) and k is not None for key, k in c_rows._kernels.items()), \
            f"{op}: the C kernel did not run"
        terms = args[0] * args[1] if op.endswith("backward") else None
        if op.startswith("gelu"):
            # numpy's order of operations, but tanh/erf/exp from glibc (vector or scalar) vs numpy's
            # own loops (erf: its Abramowitz-Stegun formula for float32, scipy's for float64)
            terms = np.abs(args[0]) * (1 + np.abs(args[1])) if op.endswith("backward") else args[0]
        _close_rows(got, want, dtype, terms)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_masked_rows_run_the_twin_kernel(dtype):
    """Rows starting or ending with -inf (causal / padding masks) take softmax's and log_softmax's
    masked twin (exp kept in its fast range) in float64, and in float32 the one kernel, whose
    inline exp has no slow path: numpy's values, masked lanes exactly 0 (-inf in log_softmax),
    NaN rows NaN, scores far below the row's max 0 instead of a subnormal."""
    twin = "_masked(" in c_rows.source(c_rows.kernel_ir("softmax", dtype, 64))
    assert twin == (dtype == "float64")
    rng = np.random.default_rng(5)
    L = 64
    x = rng.standard_normal((6, L, L)).astype(dtype) * 4
    x[:, np.triu_indices(L, 1)[0], np.triu_indices(L, 1)[1]] = -np.inf      # causal: ends with -inf
    x[0, :, :3] = -np.inf                                                    # left padding: starts with -inf
    x[0, :3, -1] = 1.0                                                       # ...and the first rows end finite
    x[1, 5, 0] = np.nan                                                      # a NaN row
    x[2, 10, :4] = (0.0, -95.0, -720.0, 3.0)        # far below the max: subnormal in numpy, 0 in the twin
    for op in ("softmax", "log_softmax"):
        got, want = OPS[op].cpu(x, dim=-1), _numpy(op, x, dim=-1)
        assert any(key[:3] == (op, dtype, L) and k is not None for key, k in c_rows._kernels.items())
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[1, 5]).all()
        masked = np.isneginf(x) & ~np.isnan(want)
        if op == "softmax":
            assert np.all(got[masked] == 0)
            far = 1 if dtype == "float32" else 2           # exp below its fast range (float64: the twin ran)
            assert got[2, 10, far] == 0 and want[2, 10, far] > 0
            np.testing.assert_allclose(got, want, rtol=0, atol=ULPS * np.finfo(dtype).eps)
        else:
            assert np.all(np.isneginf(got[masked]))
            fin = np.isfinite(want)
            np.testing.assert_allclose(got[fin], want[fin], rtol=ULPS * np.finfo(dtype).eps, atol=1e-5)
    # against the formula in float64 (a row of the causal block: its first k + 1 scores)
    p = OPS["softmax"].cpu(x, dim=-1)[3, 20]
    e = np.exp(x[3, 20, :21].astype(np.float64) - x[3, 20, :21].max())
    np.testing.assert_allclose(p[:21], e / e.sum(), rtol=1e-5)
    assert np.all(p[21:] == 0)


def test_c_kernels_against_formulas():
    """Independent references in float64 for float32 inputs: softmax, layer_norm and their derivatives."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 200)).astype(np.float32)
    g = rng.standard_normal((64, 200)).astype(np.float32)
    w = rng.standard_normal(200).astype(np.float32)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(OPS["softmax"].cpu(x, -1), p, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(OPS["log_softmax"].cpu(x, -1), np.log(p), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(OPS["softmax_backward"].cpu(g, p.astype(np.float32), -1),
                               p * (g64 - (g64 * p).sum(-1, keepdims=True)), rtol=1e-4, atol=1e-6)
    xc = x64 - x64.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5)
    xhat = xc * rstd
    np.testing.assert_allclose(OPS["layer_norm"].cpu(x, w, None, (200,), 1e-5), xhat * w, rtol=1e-4, atol=1e-5)
    gy = g64 * w
    want = (gy - gy.mean(-1, keepdims=True) - xhat * (gy * xhat).mean(-1, keepdims=True)) * rstd
    np.testing.assert_allclose(OPS["layer_norm_backward"].cpu(g, x, w, (200,), 1e-5), want, rtol=1e-4, atol=1e-5)


def test_rms_norm_c_kernels_against_formulas():
    """rms_norm and its input gradient (float32 C kernels) vs float64 formulas: y = x / rms(x) * w,
    and the gradient by finite differences of the float64 formula (a central difference per column)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 200)).astype(np.float32)
    g = rng.standard_normal((64, 200)).astype(np.float32)
    w = rng.standard_normal(200).astype(np.float32)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    f = lambda a: a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-5) * w   # noqa: E731
    np.testing.assert_allclose(OPS["rms_norm"].cpu(x, w, (200,), 1e-5), f(x64), rtol=1e-4, atol=1e-5)
    gx = OPS["rms_norm_backward"].cpu(g, x, w, (200,), 1e-5)
    num = np.empty_like(x64)
    for j in range(200):
        d = np.zeros_like(x64)
        d[:, j] = 1e-6
        num[:, j] = ((f(x64 + d) - f(x64 - d)) * g64).sum(-1) / 2e-6
    np.testing.assert_allclose(gx, num, rtol=1e-3, atol=1e-4)


def test_eager_autograd_runs_the_kernels():
    """F.softmax / F.layer_norm forward and backward through the C kernels, against numpy's kernels."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    w = rng.standard_normal(128).astype(np.float32)
    got = []
    for on in (True, False):
        old = c_rows.set_enabled(on)
        try:
            x, wt = eagerc.tensor(a, requires_grad=True), eagerc.tensor(w, requires_grad=True)
            y = F.layer_norm(F.softmax(x, -1) * 100, (128,), wt, None)
            (y * y).sum().backward()
            got.append((y.detach().numpy(), x.grad.numpy(), wt.grad.numpy()))
        finally:
            c_rows.set_enabled(old)
    for c, n in zip(*got):
        np.testing.assert_allclose(c, n, rtol=2e-4, atol=2e-4 * np.abs(n).max())


def test_where_the_c_kernel_does_not_apply_results_are_numpys_bits():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    cases = [("softmax", (x[:4, :16],), dict(dim=-1)),                        # too small
             ("softmax", (x,), dict(dim=0)),                                  # not the last dim
             ("softmax", (x[:, ::2],), dict(dim=-1)),                         # strided
             ("softmax", (x.astype(np.float16),), dict(dim=-1)),              # float16
             ("layer_norm", (x[:, ::2], None, None), dict(normalized_shape=(64,), eps=1e-5))]
    for op, args, attrs in cases:
        np.testing.assert_array_equal(OPS[op].cpu(*args, **attrs), _numpy(op, *args, **attrs))
    old = c_rows.set_enabled(False)
    try:
        assert not c_rows.use("softmax", x)
        np.testing.assert_array_equal(OPS["softmax"].cpu(x, -1), _numpy("softmax", x, dim=-1))
    finally:
        c_rows.set_enabled(old)
    assert c_rows.use("softmax", x) and not c_rows.use("softmax", x[:, ::2])


def test_one_kernel_per_row_length_rows_are_an_argument():
    rng = np.random.default_rng(4)
    before = len(c_rows._kernels)
    for rows in (32, 100, 1000):
        x = rng.standard_normal((rows, 72)).astype(np.float32)
        _close_rows(OPS["softmax"].cpu(x, -1), _numpy("softmax", x, dim=-1), "float32")
    assert len(c_rows._kernels) - before <= 1
    src = c_rows.source(c_rows.kernel_ir("softmax", "float32", 72))
    assert "int64_t rows" in src and src == c_rows.source(c_rows.kernel_ir("softmax", "float32", 72))


def _run(code, **env):
    full = dict(os.environ, PYTHONPATH=ROOT, **env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    return r


_EAGER = """
    import sys, warnings
    import numpy as np
    import eagerc, eagerc.nn.functional as F
    from eagerc.runtime import kernel_cache
    from eagerc.runtime.kernels import eager as c_rows
    a = np.random.default_rng(0).standard_normal((64, 136)).astype(np.float32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        x = eagerc.tensor(a, requires_grad=True)
        c = eagerc.tensor(np.random.default_rng(1).standard_normal((64, 136)).astype(np.float32))
        (F.layer_norm(F.softmax(x * 4, -1), (136,)) * c).sum().backward()
        F.softmax(x, -1)
    np.save("{out}", x.grad.numpy())
    assert not [m for m in sys.modules if m.startswith("eagerc.compiler")]
    print("compiles", kernel_cache.stats["compiles"], "notices", sum("eager kernels" in str(m.message) for m in w))
"""


def test_second_process_compiles_nothing_and_no_compiler_falls_back(tmp_path):
    cache = str(tmp_path / "cache")
    outs = [str(tmp_path / f"g{i}.npy") for i in range(4)]
    first = _run(_EAGER.format(out=outs[0]), EAGERC_CACHE_DIR=cache).stdout.split()
    second = _run(_EAGER.format(out=outs[1]), EAGERC_CACHE_DIR=cache).stdout.split()
    assert int(first[1]) >= 1 and first[3] == "0"
    assert second[1] == "0" and second[3] == "0"
    np.testing.assert_array_equal(np.load(outs[0]), np.load(outs[1]))
    # no compiler: one notice, numpy's kernels; switched off: no notice, numpy's kernels
    nocc = _run(_EAGER.format(out=outs[2]), EAGERC_CACHE_DIR=cache, EAGERC_CC="/nonexistent/cc").stdout.split()
    off = _run(_EAGER.format(out=outs[3]), EAGERC_CACHE_DIR=cache, EAGERC_EAGER_KERNELS="0").stdout.split()
    assert nocc[1] == "0" and nocc[3] == "1" and off[1] == "0" and off[3] == "0"
    np.testing.assert_array_equal(np.load(outs[2]), np.load(outs[3]))
    want = np.load(outs[2])
    np.testing.assert_allclose(np.load(outs[0]), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# ---------------------------------------------------------------- hand-written row kernels (rows.py)

def _both(op, *args, **attrs):
    from eagerc.runtime.kernels import rows
    rows._kernels.clear()
    got = OPS[op].cpu(*args, **attrs)
    assert any(v is not None for v in rows._kernels.values()), f"{op}: the C kernel did not run"
    return got, _numpy(op, *args, **attrs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_c_kernel(dtype, reduction, smoothing):
    """Forward and backward vs the numpy kernel (row sums in double: within ULPS of the result's
    scale) and vs numpy formulas (log-softmax and its gradient written out)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((300, 77)) * 3).astype(dtype)
    t = rng.integers(0, 77, 300)
    attrs = dict(reduction=reduction, label_smoothing=smoothing)
    loss, want = _both("cross_entropy", x, t, **attrs)
    eps = np.finfo(dtype).eps
    assert loss.dtype == want.dtype and loss.shape == want.shape
    assert np.all(np.abs(loss - want) <= ULPS * eps * np.abs(want).max())
    g = rng.standard_normal(loss.shape).astype(dtype)
    gx, gwant = _both("cross_entropy_backward", g, x, t, **attrs)
    assert gx.dtype == gwant.dtype and np.all(np.abs(gx - gwant) <= ULPS * eps * np.abs(gwant).max())
    # formulas in float64
    x64 = x.astype(np.float64)
    logp = x64 - x64.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    q = np.full(x.shape, smoothing / 77)
    q[np.arange(300), t] += 1 - smoothing
    rows_loss = -(q * logp).sum(1)
    scale = {"mean": g / 300, "sum": g, "none": g[:, None] if g.ndim else g}[reduction]
    ref = {"mean": rows_loss.mean(), "sum": rows_loss.sum(), "none": rows_loss}[reduction]
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(loss, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(gx, (np.exp(logp) - q) * scale, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["layer_norm_weight_backward", "rms_norm_weight_backward"])
def test_norm_weight_backward_c_kernel(op, dtype):
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((300, 77)) * 3 + 1).astype(dtype)
    g = rng.standard_normal((300, 77)).astype(dtype)
    gw, want = _both(op, g, x, normalized_shape=(77,), eps=1e-5)
    # column sums in double vs numpy's float pairwise sums: bounded by the sum of |terms|
    terms = np.abs(g.astype(np.float64) * x).sum(0) * 3
    assert gw.dtype == want.dtype and np.all(np.abs(gw - want) <= ULPS * np.finfo(dtype).eps * terms)
    x64 = x.astype(np.float64)
    if op.startswith("layer"):
        xhat = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    else:
        xhat = x64 / np.sqrt((x64 * x64).mean(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(gw, (g * xhat).sum(0), rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_backward_c_kernel_is_add_at_bit_for_bit(dtype, padding_idx):
    rng = np.random.default_rng(7)
    idx = rng.integers(0, 50, (12, 25))       # many repeats: the order of additions matters
    g = rng.standard_normal((12, 25, 16)).astype(dtype)
    got, want = _both("embedding_backward", g, idx, num_weights=50, padding_idx=padding_idx)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    ref = np.zeros((50, 16))
    for i, row in enumerate(idx.reshape(-1)):
        if row != padding_idx:
            ref[row] += g.reshape(-1, 16)[i]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_copy4d_c_kernel_copies_strided_views(dtype):
    """The conv ops' padding and row-wrapped runs copy through copy4d: numpy's assignment exactly,
    for contiguous, transposed, reversed and broadcast sources into strided destinations."""
    from eagerc.runtime.ops.conv import _assign
    rng = np.random.default_rng(3)
    base = rng.standard_normal((6, 5, 40, 64)).astype(dtype)
    swapped = np.ascontiguousarray(base.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    sources = [base[:, :, :30, :30], swapped[:, :, 3:33, 2:32], base[::-1, :, ::-1][:, :, 5:35, 1:31],
               np.broadcast_to(base[:1, :1, :30, :30], (6, 5, 30, 30)), base[:, :, 10:40, :60:2]]
    for src in sources:
        for dst_full, view in ((np.zeros((6, 5, 32, 33), dtype), lambda d: d[:, :, 1:31, 2:32]),
                               (np.zeros((5, 6, 31, 30), dtype), lambda d: d.transpose(1, 0, 2, 3)[:, :, 1:])):
            want = dst_full.copy()
            view(want)[...] = src
            _assign(np, view(dst_full), src)
            assert np.array_equal(dst_full, want)
    # through the conv kernels: the same bits as with the C kernels off (numpy's assignment)
    x = rng.standard_normal((8, 6, 24, 24)).astype(dtype).transpose(0, 1, 3, 2)
    w = rng.standard_normal((4, 6, 3, 3)).astype(dtype)
    gy = rng.standard_normal((8, 4, 24, 24)).astype(dtype)   # over copy4d's MIN_ELEMENTS
    pads = ((1, 1), (1, 1))
    for op, args, attrs in (("conv2d", (x, w, None), dict(stride=(1, 1), padding=pads, dilation=(1, 1), groups=1)),
                            ("conv2d_weight", (x, gy), dict(kernel_size=(3, 3), stride=(1, 1), padding=pads,
                                                            dilation=(1, 1), groups=1)),
                            ("conv_transpose2d", (gy, w, None), dict(stride=(1, 1), padding=pads, output_padding=(0, 0),
                                                                     dilation=(1, 1), groups=1))):
        got, want = _both(op, *args, **attrs)
        assert np.array_equal(got, want), op


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lstm_layer_c_step_kernels(dtype):
    """The layer's forward and backward with the per-step C gate math vs the numpy kernels (the
    same operations in the same order: measured bit for bit; allowed: ULPS of each value's scale,
    glibc's tanh vs numpy's), and the backward vs finite differences of the forward (float64)."""
    rng = np.random.default_rng(8)
    T, B, H = 5, 3, 8
    xg, h0, c0 = (rng.standard_normal(s).astype(dtype) for s in ((T, B, 4 * H), (B, H), (B, H)))
    w = (rng.standard_normal((4 * H, H)) * 0.3).astype(dtype)
    out, want = _both("lstm_layer", xg, h0, c0, w)
    eps = np.finfo(dtype).eps
    assert out.dtype == want.dtype and np.all(np.abs(out - want) <= ULPS * eps * np.maximum(np.abs(want), 1))
    g = rng.standard_normal(out.shape).astype(dtype)
    back, bwant = _both("lstm_layer_backward", g, h0, c0, w, want)
    assert np.all(np.abs(back - bwant) <= ULPS * eps * np.abs(bwant).max() * 4)
    if dtype == "float64":   # d <g, out> / d xg[1, 2, 5] and / d h0[0, 3] by central differences
        f = lambda a, b: float((g * OPS["lstm_layer"].cpu(a, b, c0, w)).sum())
        for where, arr, idx in ((back[1, 2, 5], xg, (1, 2, 5)), (back[T, 0, 3], h0, (0, 3))):
            hi, lo = arr.copy(), arr.copy()
            hi[idx] += 1e-6
            lo[idx] -= 1e-6
            num = (f(hi, h0) - f(lo, h0)) if arr is xg else (f(xg, hi) - f(xg, lo))
            assert abs(num / 2e-6 - where) <= 1e-6 * max(1.0, abs(where))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_c_kernel_draws_numpys_bits(dtype):
    """rand's C kernel (a Philox block per 4 elements, unaligned ends word by word) vs numpy's
    generator and conversion: the same words and formula, so the same bits, at any word offset."""
    from eagerc.runtime import random
    from eagerc.runtime.kernels import rows
    for offset in (0, 1, 2, 3, 6, 2**40 + 1):
        for n in (4096, 4099, 10001):
            rows._kernels.clear()
            got = OPS["uniform"].cpu(shape=(n,), dtype=dtype, seed=2**63 + 5, offset=offset)
            assert rows._kernels.get(("uniform", dtype)) is not None, "the C kernel did not run"
            want = _numpy("uniform", shape=(n,), dtype=dtype, seed=2**63 + 5, offset=offset)
            assert got.dtype == want.dtype and np.array_equal(got, want)
            # and the stream's definition: (w >> (64 - p)) * 2**-p of words offset .. offset + n
            p = np.finfo(dtype).nmant + 1
            w = random.philox_words(2**63 + 5, offset, n)
            np.testing.assert_array_equal(got, (w >> np.uint64(64 - p)).astype(np.float64) * 2.0**-p)


def test_dropout_keeps_its_mask_with_the_uniform_kernel():
    """F.dropout draws its mask through `uniform`: with and without the C kernel, the same output."""
    x = eagerc.from_numpy(np.random.default_rng(9).standard_normal((64, 128)).astype(np.float32))
    eagerc.manual_seed(3)
    a = F.dropout(x, 0.3).numpy()
    old = c_rows.set_enabled(False)
    try:
        eagerc.manual_seed(3)
        b = F.dropout(x, 0.3).numpy()
    finally:
        c_rows.set_enabled(old)
    assert np.array_equal(a, b) and 0.2 < (a == 0).mean() < 0.4


def test_a_forward_kernel_prefetches_its_backward(monkeypatch, tmp_path):
    # building softmax's kernel starts softmax_backward's compiler beside it (eager.COMPANIONS):
    # a first training step then waits for one wave of compilers, not one per op
    if not c_rows.available():
        pytest.skip("needs a C compiler")
    monkeypatch.setenv("EAGERC_CACHE_DIR", str(tmp_path))
    cols, rows = 83, 5                # a row length no other test builds
    fwd = c_rows.row_kernel("softmax", "float64", cols)
    src = c_rows.source(c_rows.kernel_ir("softmax_backward", "float64", cols))
    so = os.path.join(str(tmp_path), kernel_cache.key_of(src)[:32] + ".so")
    assert so in kernel_cache._pending or os.path.exists(so)      # on its way, or built already
    bwd = c_rows.row_kernel("softmax_backward", "float64", cols)  # waits for that compile
    # each compiled once, into this cache (other tests' prefetches write into their own)
    assert len(list(tmp_path.glob("*.so"))) == 2 and so not in kernel_cache._pending
    rng = np.random.default_rng(8)
    x, g = rng.standard_normal((rows, cols)), rng.standard_normal((rows, cols))
    out, gx = np.empty_like(x), np.empty_like(x)
    fwd(x, out, rows=rows)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-13, atol=1e-16)
    bwd(g, out, gx, rows=rows)
    np.testing.assert_allclose(gx, out * (g - (g * out).sum(-1, keepdims=True)), rtol=1e-12, atol=1e-15)


def test_tracing_for_backend_c_builds_no_eager_kernel_it_replaces(monkeypatch, tmp_path):
    # the tracer's eager run builds no eager kernel of an op backend "c" fuses itself (its
    # program never calls it); for backend "numpy", whose program runs the op as it is, it does
    if not c_rows.available():
        pytest.skip("needs a C compiler")
    monkeypatch.setenv("EAGERC_CACHE_DIR", str(tmp_path))
    cols = 97                                   # a row length no other test builds
    src = c_rows.source(c_rows.kernel_ir("softmax", "float64", cols))
    so = os.path.join(str(tmp_path), kernel_cache.key_of(src)[:32] + ".so")
    x = np.random.default_rng(9).standard_normal((40, cols))
    e = np.exp(x - x.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)

    f = eagerc.compile(lambda t: F.softmax(t, -1), backend="c")
    for _ in range(2):                          # traced (numpy's kernel), then compiled
        np.testing.assert_allclose(f(eagerc.tensor(x)).numpy(), want, rtol=1e-13, atol=1e-16)
    assert not os.path.exists(so) and so not in kernel_cache._pending
    probe = "int eagerc_only_built_probe(void) { return 7; }\n"
    with c_rows.only_built(["softmax", "layer_norm_weight_backward"]):
        assert c_rows.row_kernel("softmax", "float64", cols) is None
        assert not c_rows.building("norm_weight_backward") and c_rows.building("embedding_backward")
        assert c_rows.c_function("eagerc_only_built_probe", probe, build=False) is None
    assert not os.path.exists(so) and ("softmax", "float64", cols) not in c_rows._kernels
    assert c_rows.c_function("eagerc_only_built_probe", probe)() == 7

    g = eagerc.compile(lambda t: F.softmax(t, -1) * 2, backend="numpy")
    np.testing.assert_allclose(g(eagerc.tensor(x)).numpy(), 2 * want, rtol=1e-13, atol=1e-16)
    assert os.path.exists(so) and c_rows.row_kernel("softmax", "float64", cols) is not None


# ---------------------------------------------------------------- max pooling (rows.py: max_pool2d_2x2, max_pool2d_backward)

_POOL_WINDOWS = [  # kernel_size, stride, padding, dilation, ceil_mode: every variant max_pool2d takes
    ((2, 2), (2, 2), (0, 0), (1, 1), False), ((3, 3), (2, 2), (1, 1), (1, 1), False),
    ((3, 3), (1, 1), (1, 1), (1, 1), False), ((3, 2), (2, 3), (1, 0), (2, 1), True),
    ((2, 2), (3, 3), (1, 0), (1, 1), True), ((2, 3), (1, 2), (0, 1), (2, 2), False),
    ((4, 4), (2, 2), (2, 2), (1, 1), True)]


def _bits(a):
    """a's bytes as unsigned ints, every NaN made one pattern: equal bits, signed zeros included."""
    a = np.where(np.isnan(a), np.nan, a).astype(a.dtype)
    return a.view({4: np.uint32, 8: np.uint64}[a.itemsize])


def _pool_input(rng, dtype, shape=(3, 4, 13, 11)):
    """Small integers (many ties), a -inf plane and row, NaNs, signed zeros; transposed to
    channel-major strides as a convolution's output is."""
    x = rng.integers(-3, 3, shape).astype(dtype)
    x[0, 1] = -np.inf
    x[1, 2, 4] = -np.inf
    x[2, 0, rng.integers(0, shape[2], 6), rng.integers(0, shape[3], 6)] = np.nan
    x[2, 3] = rng.choice(np.array([0.0, -0.0], dtype), shape[2:])
    return np.ascontiguousarray(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("window", _POOL_WINDOWS)
def test_max_pool2d_c_kernels_are_the_numpy_kernels_bit_for_bit(dtype, window):
    """The 2x2 / stride 2 forward's values (NaN propagating; of equal signed zeros the one numpy's
    maximum keeps, the later). Gradients routed to the first maximum (ties, -inf windows, NaN as the maximum, windows in the
    padding or hanging over the edge with ceil_mode, overlapping windows adding in the numpy
    kernel's order), for strided x and gy, an inf gradient reaching its argmax only."""
    kernel_size, stride, padding, dilation, ceil_mode = window
    attrs = dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    rng = np.random.default_rng(5)
    for shape in ((3, 4, 13, 11), (3, 4, 10, 22)):           # rows of 5 and of 11 2x2 windows (vector code)
        x = _pool_input(rng, dtype, shape)
        if window == _POOL_WINDOWS[0]:                       # the forward's C kernel: 2x2 / stride 2 only
            got, want = _both("max_pool2d", x, **attrs)
            assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(_bits(got), _bits(want))
        gy = rng.standard_normal(OPS["max_pool2d"].cpu(x, **attrs).shape).astype(dtype)
        gy[0, 0, 0, 0] = np.inf                              # reaches its argmax only
        for g in (gy, gy[:, :, ::-1], gy[..., ::-1], np.ones_like(gy)):   # strided; equal gradients
            got, want = _both("max_pool2d_backward", g, x, **attrs)
            assert got.shape == x.shape and got.dtype == x.dtype and np.array_equal(_bits(got), _bits(want))


def test_max_pool2d_backward_routes_to_the_first_max_by_hand(monkeypatch):
    """The first maximum in row-major kernel order wins ties (PyTorch's rule); a NaN is the maximum;
    overlapping windows add."""
    monkeypatch.setitem(c_rows.MIN_ELEMENTS, "max_pool2d_backward", 0)
    x = np.zeros((1, 1, 2, 4), np.float32)
    x[0, 0] = [[1, 5, 5, 0], [5, 2, np.nan, 3]]
    gy = np.array([[[[10, 20]]]], np.float32)
    got, _ = _both("max_pool2d_backward", gy, x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0),
                   dilation=(1, 1), ceil_mode=False)
    assert got.tolist() == [[[[0, 10, 0, 0], [0, 0, 20, 0]]]]
    gy = np.array([[[[1, 2, 4]]]], np.float64)
    got, _ = _both("max_pool2d_backward", gy, np.array([[[[1, 5, 5, 0], [5, 2, 5, 3]]]], np.float64), kernel_size=(2, 2),
                   stride=(1, 1), padding=(0, 0), dilation=(1, 1), ceil_mode=False)
    assert got.tolist() == [[[[0, 3, 4, 0], [0, 0, 0, 0]]]]


def test_max_pool2d_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = rng.integers(-3, 3, (4, 3, 17, 16)).astype(np.float32)
    for kernel_size, stride, padding, dilation, ceil_mode in _POOL_WINDOWS:
        tx = torch.from_numpy(x).requires_grad_()
        ty = torch.nn.functional.max_pool2d(tx, kernel_size, stride, padding, dilation, ceil_mode)
        gy = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
        ty.backward(torch.from_numpy(gy))
        ex = eagerc.from_numpy(x).requires_grad_()
        ey = F.max_pool2d(ex, kernel_size, stride, padding, dilation, ceil_mode)
        ey.backward(eagerc.from_numpy(gy))
        np.testing.assert_array_equal(ey.detach().numpy(), ty.detach().numpy())
        np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_max_pool2d_without_a_compiler_runs_numpy_with_the_same_bits(tmp_path):
    """No C compiler (an empty cache): the numpy kernels run, after the one notice, and give the C
    kernels' bits (a 3x3 / stride 2 pooling, then a 2x2 one: both C kernels, forward and backward)."""
    code = """
        import warnings
        import numpy as np
        import eagerc, eagerc.nn.functional as F
        from eagerc.runtime.kernels import rows
        x = eagerc.tensor(np.random.default_rng(0).integers(-4, 4, (8, 6, 30, 30)).astype(np.float32),
                          requires_grad=True)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = F.max_pool2d(x, 3, 2, 1) * 2
            (y.sum() + F.max_pool2d(y, 2).sum()).backward()
        np.save("{out}", np.concatenate([F.max_pool2d(y, 2).detach().numpy().ravel(), x.grad.numpy().ravel()]))
        print("kernels", sum(k is not None for k in rows._kernels.values()),
              "notices", sum("eager kernels" in str(m.message) for m in w))
    """
    out = str(tmp_path / "nocc.npy")
    r = _run(code.format(out=out), EAGERC_CACHE_DIR=str(tmp_path / "cache"), EAGERC_CC="/nonexistent/cc")
    assert r.stdout.split() == ["kernels", "0", "notices", "1"]
    x = eagerc.tensor(np.random.default_rng(0).integers(-4, 4, (8, 6, 30, 30)).astype(np.float32),
                      requires_grad=True)
    y = F.max_pool2d(x, 3, 2, 1) * 2
    (y.sum() + F.max_pool2d(y, 2).sum()).backward()
    want = np.concatenate([F.max_pool2d(y, 2).detach().numpy().ravel(), x.grad.numpy().ravel()])
    assert np.array_equal(np.load(out), want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dilation", [(1, 1), (2, 1)])
def test_col2im_runs_c_kernel_is_numpys_strided_adds_bit_for_bit(dtype, dilation):
    """A transposed convolution (a convolution's input gradient) adds its columns back over row-wrapped
    runs in C: the numpy kernel's additions in its order, the same bits."""
    from eagerc.runtime.kernels import rows
    rng = np.random.default_rng(7)
    gy = rng.standard_normal((8, 6, 14, 13)).astype(dtype)
    w = rng.standard_normal((6, 5, 3, 3)).astype(dtype)
    attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), output_padding=(0, 0), dilation=dilation, groups=1)
    got, want = _both("conv_transpose2d", gy, w, None, **attrs)
    assert rows._kernels.get(("col2im_runs", dtype)) is not None
    assert got.shape == want.shape and np.array_equal(got, want)


def _shifted_exp_kernel(cols):
    """A row kernel computing exp(x - row_max(x)) -- the pattern render.py gives its inline exp."""
    from eagerc.runtime.kernels.ir import Kernel
    from eagerc.runtime.kernels.render import CRenderer
    k = Kernel(f"shifted_exp_{cols}", (1, cols), row_dims=1)
    x = k.load("x", "float32", (1, cols))
    s = k.add("sub", (x, k.add("row_max", (x,), "float32")), "float32")
    k.store(k.add("exp", (s,), "float32"), "out", "float32", (1, cols))
    src = CRenderer().source([k])
    assert CRenderer.NONPOS_EXP + "(" in src       # (the kernel under test is the inline one)
    fn = getattr(kernel_cache.load(src), k.name)
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p], None
    return lambda row, out: fn(kernel_cache.ptr(row), kernel_cache.ptr(out))


def test_inline_exp_of_a_row_less_its_max_is_within_one_ulp():
    """render.py's inline float32 exp (softmax's exp(x - max)): within 1 ulp of float64 exp
    wherever the result is a normal float, 0 where exp gives a subnormal (x < log(FLT_MIN)),
    NaN for NaN, 0 for -inf, 1 at the max itself -- over every argument from -104 to 0."""
    n = 1 << 16
    run = _shifted_exp_kernel(n)
    worst = 0.0
    for lo in np.arange(-104.0, 0.0, 8.0):
        row = np.linspace(lo, lo + 8.0, n - 1, dtype=np.float32)
        row = np.concatenate([row, np.float32([0.0])])         # the max: x - max = x
        out = np.empty_like(row)
        run(row, out)
        want = np.exp(row.astype(np.float64))
        normal = want >= np.finfo(np.float32).tiny
        ulp = np.spacing(want[normal].astype(np.float32)).astype(np.float64)
        worst = max(worst, float(np.max(np.abs(out[normal] - want[normal]) / ulp)))
        assert np.all(out[~normal] == 0) and np.all(np.abs(out[~normal] - want[~normal]) < np.finfo(np.float32).tiny)
    assert worst <= 1.0, worst
    special = np.float32([-np.inf, 0.0, -0.0, -1e30, -88.0, np.nan] + [-1.0] * (n - 6))
    out = np.empty_like(special)
    run(special, out)           # a NaN in the row makes its max NaN: every result NaN, as numpy's softmax
    assert np.all(np.isnan(out))
    special[5] = -2.0
    run(special, out)
    np.testing.assert_array_equal(out[:5], np.float32([0.0, 1.0, 1.0, 0.0, 0.0]))


@pytest.mark.parametrize("rows", [1, 2, 7])
def test_row_kernels_hinting_the_next_row_read_nothing_past_their_arrays(rows):
    """A multi-pass row kernel prefetches the row after the one it computes -- past the end of
    the array at the last row (a hint never faults): arrays ending at a page boundary followed
    by an unmapped page, every row's result against numpy's formula."""
    import mmap
    cols = 1024
    page = mmap.PAGESIZE
    nbytes = rows * cols * 4
    size = -(-nbytes // page) * page
    buf = mmap.mmap(-1, size + page)
    # the page after the arrays: no access at all (a real read there would fault)
    libc = ctypes.CDLL(None)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(ctypes.c_void_p(base + size), page, 0) == 0
    try:
        arena = np.frombuffer(buf, dtype=np.uint8, count=size)
        x = arena[size - nbytes:].view(np.float32).reshape(rows, cols)
        x[...] = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
        k = c_rows.row_kernel("softmax", "float32", cols)
        out = np.empty((rows, cols), np.float32)
        k(x, out, rows=rows)
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(-1, keepdims=True))
        np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-8)
        assert "__builtin_prefetch" in c_rows.source(c_rows.kernel_ir("softmax", "float32", cols))
    finally:
        libc.mprotect(ctypes.c_void_p(base + size), page, 3)
        del arena, x
        buf.close()
