"""The decompose pass on traced functions: every decomposable op (the fused forward ops and
the backward kernels a training step records) is traced with eagerc.compile, decomposed,
and the primitive graph is run (reference interpreter and numpy backend). Its results must
equal the fused ops' eager results (to rounding: the decompositions follow the kernels'
order of operations) and an independent numpy formula, in float64 and float32.

Structural checks: no op of the decomposed kind is left, cross_entropy (forward and
backward) picks the target class by a one-hot compare (no gather or index op), and the
per-row work reduces only over the last dim (what a fusing backend can put in one kernel).
"""
import math

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
import eagerc.ops.nn as nn_ops
from eagerc.compiler.backends import get_backend
from eagerc.compiler.passes import decompose
from eagerc.compiler.passes.decompose import DECOMPOSITIONS
from eagerc.runtime.executor import run_graph
from eagerc.runtime.ops import load_all
from eagerc.runtime.verify import verify

load_all()

DTYPES = {"float64": (eagerc.float64, np.float64, 1e-12), "float32": (eagerc.float32, np.float32, 1e-5)}
INDEXING = {"gather", "getitem", "index", "index_select", "index_put", "index_add", "scatter", "scatter_add",
            "take", "take_along_dim", "embedding", "nonzero", "slice"}
REDUCTIONS = {"sum", "mean", "amax", "amin", "prod"}
TESTED = {"linear", "softmax", "log_softmax", "layer_norm", "batch_norm", "cross_entropy", "gelu", "embedding",
          "softmax_backward", "log_softmax_backward", "gelu_backward", "layer_norm_backward",
          "layer_norm_weight_backward", "cross_entropy_backward", "lstm_cell", "lstm_cell_backward", "gru_cell",
          "gru_cell_backward", "lstm_layer", "lstm_layer_backward", "rms_norm", "rms_norm_backward",
          "rms_norm_weight_backward"}


# ---------------------------------------------------------------- helpers

def _rng(seed):
    return np.random.default_rng(seed)


def _t(a, dtype=None):
    return eagerc.tensor(np.asarray(a) if dtype is None else np.asarray(a, dtype))


def _flat(result):
    if isinstance(result, (tuple, list)):
        return [r for x in result for r in _flat(x)]
    return [result]


def _close(actual, expected, tol, what):
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, what
    if np.isnan(expected).all():
        assert np.isnan(actual).all(), what
        return
    scale = float(np.abs(expected).max()) if expected.size else 1.0
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=tol, atol=tol * scale, err_msg=what)


def _reduced_dims(node):
    ndim = len(node.inputs[0].shape)
    dim = node.attrs.get("dim")
    if dim is None or ndim == 0:
        return "all"
    dims = sorted({int(d) % ndim for d in (dim if isinstance(dim, (list, tuple)) else [dim])})
    return "all" if dims == list(range(ndim)) else ("last" if dims == [ndim - 1] else tuple(dims))


def _final(graph, name):
    """Is `name` a graph output, possibly through reshapes?"""
    outs = {v.name for v in graph.outputs}
    users = [n for n in graph.nodes if any(getattr(x, "name", None) == name for x in n.inputs)]
    return name in outs or (users and all(n.op == "reshape" and _final(graph, n.out.name) for n in users))


def check(fn, args, ops, refs, dtype, fusable=True, no_indexing=False, leading_sum_ok=False):
    """Trace fn(*args) with eagerc.compile, decompose, and compare the decomposed graph's outputs
    with fn run eagerly (the fused kernels) and with `refs` (numpy float64 arrays).

    fusable: every reduction the decomposition added is over the last dim or all elements, except
    (leading_sum_ok) a sum over leading dims whose result is final (a weight gradient)."""
    np_dtype, tol = DTYPES[dtype][1:]
    assert set(ops) <= TESTED
    eager = [t.numpy() for t in _flat(fn(*args))]
    compiled = eagerc.compile(fn, fullgraph=True)
    compiled(*args)
    (graph,) = compiled.traced_graphs
    for op in ops:
        assert op in {n.op for n in graph.nodes}, f"{op} not traced"
    assert not graph.externals(), "pass every tensor as an argument"
    out = verify(decompose(graph))
    kinds = {n.op for n in out.nodes}
    assert not kinds & set(ops), f"left fused: {kinds & set(ops)}"
    assert out.outputs[0].name == graph.outputs[0].name
    if no_indexing:
        assert not kinds & INDEXING, f"indexing ops in the decomposition: {kinds & INDEXING}"
    if fusable:
        original = {(n.out.name, n.op) for n in graph.nodes}   # the user's own reductions
        for n in out.nodes:
            if n.op in REDUCTIONS and (n.out.name, n.op) not in original:
                where = _reduced_dims(n)
                assert where in ("last", "all") or (leading_sum_ok and _final(out, n.out.name)), \
                    f"{n.op} over dims {where} in {n}"
    env = {f"arg{i}": a.numpy() for i, a in enumerate(args)}
    got_interp = run_graph(out, env)[0]
    got_numpy = get_backend("numpy").compile(out)(env)[0]
    assert len(got_interp) == len(eager) == len(refs)
    for i, (a, b, e, r) in enumerate(zip(got_interp, got_numpy, eager, refs)):
        assert a.dtype == e.dtype == np_dtype and b.dtype == e.dtype
        _close(a, e, tol, f"output {i}: decomposed (interpreter) vs fused eager")
        _close(b, e, tol, f"output {i}: decomposed (numpy backend) vs fused eager")
        _close(a, r, tol, f"output {i}: decomposed vs numpy reference")
        _close(e, r, tol, f"output {i}: fused eager vs numpy reference")
    return out


def _grad_of(fn_out, wrt, upstream):
    return eagerc.autograd.grad(fn_out, wrt, upstream)


def _req(x):
    return x.detach().requires_grad_(True)


# ---------------------------------------------------------------- numpy references (float64)

def _np_softmax(x, dim):
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


def _np_log_softmax(x, dim):
    m = x.max(dim, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(dim, keepdims=True))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _np_gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _np_gelu_grad(x, approximate):
    if approximate == "tanh":   # d/dx 0.5 x (1 + tanh u) = 0.5 (1 + tanh u) + 0.5 x sech^2(u) u'
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
        du = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x ** 2)
        return 0.5 * (1 + np.tanh(u)) + 0.5 * x * du / np.cosh(u) ** 2
    return 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _np_layer_norm_parts(x, k, eps):
    """x as (rows, F), xhat and 1/std per row (two-pass variance)."""
    rows = x.reshape(-1, int(np.prod(x.shape[x.ndim - k:])))
    mu = rows.mean(1, keepdims=True)
    var = ((rows - mu) ** 2).mean(1, keepdims=True)
    return rows, (rows - mu) / np.sqrt(var + eps), 1 / np.sqrt(var + eps)


def _np_layer_norm(x, k, w, b, eps):
    _, xhat, _ = _np_layer_norm_parts(x, k, eps)
    y = xhat.reshape(x.shape)
    return y * (1 if w is None else w) + (0 if b is None else b)


def _np_layer_norm_grads(g, x, k, w, eps):
    """(d/dx, d/dw) of sum(g * layer_norm(x) * w) from the per-row Jacobian
    d xhat_i / d x_j = rstd (delta_ij - 1/F - xhat_i xhat_j / F)."""
    rows, xhat, rstd = _np_layer_norm_parts(x, k, eps)
    n, f = rows.shape
    g2 = g.reshape(n, f)
    gy = g2 * (1 if w is None else w.reshape(1, f))
    jac = rstd[:, :, None] * (np.eye(f)[None] - 1 / f - xhat[:, :, None] * xhat[:, None, :] / f)
    gx = np.einsum("ni,nij->nj", gy, jac).reshape(x.shape)
    gw = (g2 * xhat).sum(0).reshape(x.shape[x.ndim - k:])
    return gx, gw


def _np_cross_entropy(x, t, w, ignore_index, reduction, eps):
    """Loss (row by row) and d loss / d x given the upstream gradient g, from the textbook formulas."""
    xl = np.moveaxis(x, 1, -1) if x.ndim > 2 else x
    C = xl.shape[-1]
    rows, tt = xl.reshape(-1, C), np.asarray(t).reshape(-1)
    w = np.ones(C) if w is None else w
    losses, grads, weights = [], [], []
    for r, c in zip(rows, tt):
        if c == ignore_index:
            losses.append(0.0), grads.append(np.zeros(C)), weights.append(0.0)
            continue
        logp = _np_log_softmax(r, 0)
        p = np.exp(logp)
        onehot = np.eye(C)[c]
        losses.append(-(1 - eps) * w[c] * logp[c] - eps / C * (w * logp).sum())
        # d/dr of -(1-eps) w_c logp_c - eps/C sum_k w_k logp_k
        grads.append((1 - eps) * w[c] * (p - onehot) + eps / C * (w.sum() * p - w))
        weights.append(w[c])
    losses, grads = np.array(losses).reshape(np.shape(t)), np.array(grads)
    total = np.sum(weights)

    def grad_of(g):
        if reduction == "none":
            scaled = grads * np.asarray(g, np.float64).reshape(-1, 1)
        elif reduction == "sum":
            scaled = grads * g
        else:
            scaled = grads * (g / total) if total else np.full_like(grads, np.nan)
        scaled = scaled.reshape(xl.shape)
        return np.moveaxis(scaled, -1, 1) if x.ndim > 2 else scaled
    if reduction == "none":
        loss = losses
    elif reduction == "sum":
        loss = losses.sum()
    else:
        loss = losses.sum() / total if total else np.nan
    return np.asarray(loss), grad_of


# ---------------------------------------------------------------- forward ops

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 7)])
def test_linear(dtype, shape):
    et, nt, _ = DTYPES[dtype]
    r = _rng(0)
    x, w, b = r.standard_normal(shape), r.standard_normal((4, 7)), r.standard_normal(4)
    check(lambda x, w, b: F.linear(x, w, b), (_t(x, nt), _t(w, nt), _t(b, nt)), ["linear"],
          [x.astype(nt).astype(float) @ w.astype(nt).astype(float).T + b.astype(nt)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((5, 7), -1), ((2, 3, 7), -1), ((2, 3, 7), 1)])
def test_softmax_and_log_softmax(dtype, shape, dim):
    nt = DTYPES[dtype][1]
    x = (_rng(1).standard_normal(shape) * 3).astype(nt)
    xd = x.astype(np.float64)
    last = dim in (-1, len(shape) - 1)
    check(lambda x: F.softmax(x, dim), (_t(x),), ["softmax"], [_np_softmax(xd, dim)], dtype, fusable=last)
    check(lambda x: F.log_softmax(x, dim), (_t(x),), ["log_softmax"], [_np_log_softmax(xd, dim)], dtype,
          fusable=last)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,ns,affine", [((5, 8), (8,), True), ((2, 3, 8), (8,), True),
                                             ((2, 3, 8), (8,), False), ((2, 3, 4), (3, 4), True)])
def test_layer_norm(dtype, shape, ns, affine):
    nt = DTYPES[dtype][1]
    r = _rng(2)
    x = (r.standard_normal(shape) * 2 + 1).astype(nt)
    w, b = r.standard_normal(ns).astype(nt), r.standard_normal(ns).astype(nt)
    if affine:
        fn, args = (lambda x, w, b: F.layer_norm(x, ns, w, b, eps=1e-5)), (_t(x), _t(w), _t(b))
        ref = _np_layer_norm(x.astype(float), len(ns), w.astype(float), b.astype(float), 1e-5)
    else:
        fn, args = (lambda x: F.layer_norm(x, ns, eps=1e-3)), (_t(x),)
        ref = _np_layer_norm(x.astype(float), len(ns), None, None, 1e-3)
    check(fn, args, ["layer_norm"], [ref], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5)])
def test_batch_norm(dtype, shape):
    nt = DTYPES[dtype][1]
    r = _rng(3)
    x, w, b = r.standard_normal(shape).astype(nt), r.standard_normal(3).astype(nt), r.standard_normal(3).astype(nt)
    axes = (0,) + tuple(range(2, len(shape)))
    cs = (1, 3) + (1,) * (len(shape) - 2)
    xd = x.astype(float)
    ref = (xd - xd.mean(axes, keepdims=True)) / np.sqrt(xd.var(axes, keepdims=True) + 1e-5) \
        * w.astype(float).reshape(cs) + b.astype(float).reshape(cs)
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (_t(x), _t(w), _t(b)),
          ["batch_norm"], [ref], dtype, fusable=False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 7)])
def test_gelu(dtype, approximate, shape):
    nt = DTYPES[dtype][1]
    x = (_rng(4).standard_normal(shape) * 3).astype(nt)
    check(lambda x: F.gelu(x, approximate), (_t(x),), ["gelu"], [_np_gelu(x.astype(float), approximate)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding(dtype, padding_idx):
    nt = DTYPES[dtype][1]
    r = _rng(5)
    w, idx = r.standard_normal((10, 4)).astype(nt), r.integers(0, 10, (3, 5))
    idx[0, 0] = 2
    check(lambda i, w: F.embedding(i, w, padding_idx=padding_idx), (_t(idx), _t(w)), ["embedding"],
          [w.astype(float)[idx]], dtype)


# ---------------------------------------------------------------- backward kernels

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((5, 7), -1), ((2, 3, 7), 2), ((2, 3, 7), 0)])
def test_softmax_backward_and_log_softmax_backward(dtype, shape, dim):
    nt = DTYPES[dtype][1]
    r = _rng(6)
    x, g = (r.standard_normal(shape) * 2).astype(nt), r.standard_normal(shape).astype(nt)
    xd, gd = x.astype(float), g.astype(float)
    p = _np_softmax(xd, dim)
    last = dim in (-1, len(shape) - 1)

    def soft(x, g):
        x = _req(x)
        return _grad_of(F.softmax(x, dim), [x], g)
    # softmax' as a Jacobian-vector product: gx_j = sum_i g_i p_i (delta_ij - p_j)
    check(soft, (_t(x), _t(g)), ["softmax_backward"], [p * (gd - (gd * p).sum(dim, keepdims=True))], dtype,
          fusable=last)

    def logsoft(x, g):
        x = _req(x)
        return _grad_of(F.log_softmax(x, dim), [x], g)
    check(logsoft, (_t(x), _t(g)), ["log_softmax_backward"], [gd - p * gd.sum(dim, keepdims=True)], dtype,
          fusable=last)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 7)])
def test_gelu_backward(dtype, approximate, shape):
    nt = DTYPES[dtype][1]
    r = _rng(7)
    x, g = (r.standard_normal(shape) * 3).astype(nt), r.standard_normal(shape).astype(nt)

    def fn(x, g):
        x = _req(x)
        return _grad_of(F.gelu(x, approximate), [x], g)
    check(fn, (_t(x), _t(g)), ["gelu_backward"], [g.astype(float) * _np_gelu_grad(x.astype(float), approximate)],
          dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,ns", [((5, 8), (8,)), ((2, 3, 8), (8,)), ((2, 3, 4), (3, 4)), ((8,), (8,))])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward(dtype, shape, ns, affine):
    nt = DTYPES[dtype][1]
    r = _rng(8)
    x = (r.standard_normal(shape) * 2 + 1).astype(nt)
    g = r.standard_normal(shape).astype(nt)
    w, b = (r.standard_normal(ns) + 1).astype(nt), r.standard_normal(ns).astype(nt)
    k, eps = len(ns), 1e-5
    if affine:
        def fn(x, w, b, g):
            x, w = _req(x), _req(w)
            return _grad_of(F.layer_norm(x, ns, w, b, eps), [x, w], g)
        gx, gw = _np_layer_norm_grads(g.astype(float), x.astype(float), k, w.astype(float), eps)
        check(fn, (_t(x), _t(w), _t(b), _t(g)), ["layer_norm_backward", "layer_norm_weight_backward"],
              [gx, gw], dtype, leading_sum_ok=True)
    else:
        def fn(x, g):
            x = _req(x)
            return _grad_of(F.layer_norm(x, ns, None, None, eps), [x], g)
        gx, _ = _np_layer_norm_grads(g.astype(float), x.astype(float), k, None, eps)
        check(fn, (_t(x), _t(g)), ["layer_norm_backward"], [gx], dtype)


def _np_rms_norm_grads(g, x, k, w, eps):
    """(y, d/dx, d/dw) of sum(g * rms_norm(x) * w) from the per-row Jacobian
    d xhat_i / d x_j = rstd (delta_ij - xhat_i xhat_j / F), xhat = x rstd, rstd = 1/sqrt(mean(x^2) + eps)."""
    rows = x.reshape(-1, int(np.prod(x.shape[x.ndim - k:])))
    n, f = rows.shape
    rstd = 1 / np.sqrt((rows * rows).mean(1, keepdims=True) + eps)
    xhat = rows * rstd
    g2 = g.reshape(n, f)
    gy = g2 * (1 if w is None else w.reshape(1, f))
    jac = rstd[:, :, None] * (np.eye(f)[None] - xhat[:, :, None] * xhat[:, None, :] / f)
    y = (xhat * (1 if w is None else w.reshape(1, f))).reshape(x.shape)
    return y, np.einsum("ni,nij->nj", gy, jac).reshape(x.shape), (g2 * xhat).sum(0).reshape(x.shape[x.ndim - k:])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,ns", [((5, 8), (8,)), ((2, 3, 8), (8,)), ((2, 3, 4), (3, 4))])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_and_backward(dtype, shape, ns, affine):
    nt = DTYPES[dtype][1]
    r = _rng(12)
    x = (r.standard_normal(shape) * 2 + 1).astype(nt)
    g = r.standard_normal(shape).astype(nt)
    w = (r.standard_normal(ns) + 1).astype(nt)
    k, eps = len(ns), 1e-5
    y, gx, gw = _np_rms_norm_grads(g.astype(float), x.astype(float), k, w.astype(float) if affine else None, eps)
    if affine:
        check(lambda x, w: F.rms_norm(x, ns, w, eps), (_t(x), _t(w)), ["rms_norm"], [y], dtype)

        def fn(x, w, g):
            x, w = _req(x), _req(w)
            return _grad_of(F.rms_norm(x, ns, w, eps), [x, w], g)
        check(fn, (_t(x), _t(w), _t(g)), ["rms_norm_backward", "rms_norm_weight_backward"], [gx, gw], dtype,
              leading_sum_ok=True)
    else:
        check(lambda x: F.rms_norm(x, ns, None, eps), (_t(x),), ["rms_norm"], [y], dtype)

        def fn(x, g):
            x = _req(x)
            return _grad_of(F.rms_norm(x, ns, None, eps), [x], g)
        check(fn, (_t(x), _t(g)), ["rms_norm_backward"], [gx], dtype)


# ---------------------------------------------------------------- cross_entropy (forward and backward)

CE_CASES = [
    # (input shape, targets, ignore_index, weighted, label_smoothing, reduction)
    ((6, 5), [0, 4, 2, 2, 1, 3], -100, False, 0.0, "mean"),
    ((6, 5), [0, 4, -100, 2, 1, -100], -100, False, 0.0, "mean"),
    ((6, 5), [0, 4, 2, 2, 1, 3], 2, False, 0.1, "mean"),
    ((6, 5), [0, 4, 2, 2, 1, 3], 2, True, 0.0, "mean"),
    ((6, 5), [0, 4, 2, 2, 1, -100], -100, True, 0.25, "mean"),
    ((6, 5), [0, 4, 2, 2, 1, 3], 2, True, 0.1, "sum"),
    ((6, 5), [0, 4, 2, 2, 1, 3], 2, False, 0.0, "sum"),
    ((6, 5), [0, 4, 2, 2, 1, 3], 2, True, 0.1, "none"),
    ((6, 5), [0, 4, 2, 2, 1, 3], -100, False, 0.3, "none"),
    ((2, 5, 3), [[0, 4, 2], [-100, 1, 3]], -100, False, 0.2, "mean"),
    ((2, 5, 3), [[0, 4, 2], [2, 1, 3]], 2, True, 0.1, "none"),
    ((2, 5, 3), [[0, 4, 2], [2, 1, 3]], 2, True, 0.0, "sum"),
    ((5,), 3, -100, True, 0.1, "mean"),
    ((5,), 3, 3, False, 0.0, "none"),
    ((3, 4), [1, 1, 1], 1, False, 0.0, "mean"),          # every target ignored: nan, like the kernel
]


def _ce_ids():
    return [f"{'x'.join(map(str, c[0]))}-ii{c[2]}-{'w' if c[3] else 'nw'}-ls{c[4]}-{c[5]}" for c in CE_CASES]


def _ce_args(case, dtype, seed=9):
    shape, t, ii, weighted, ls, red = case
    nt = DTYPES[dtype][1]
    r = _rng(seed)
    x = (r.standard_normal(shape) * 2).astype(nt)
    C = shape[1] if len(shape) > 1 else shape[0]
    w = (r.random(C) + 0.5).astype(nt) if weighted else None
    t = np.asarray(t, np.int64)
    return x, t, w, dict(ignore_index=ii, reduction=red, label_smoothing=ls)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CE_CASES, ids=_ce_ids())
def test_cross_entropy(dtype, case):
    x, t, w, kw = _ce_args(case, dtype)
    loss, _ = _np_cross_entropy(x.astype(float), t, None if w is None else w.astype(float),
                                kw["ignore_index"], kw["reduction"], kw["label_smoothing"])
    if w is None:
        fn, args = (lambda x, t: F.cross_entropy(x, t, **kw)), (_t(x), _t(t))
    else:
        fn, args = (lambda x, t, w: F.cross_entropy(x, t, w, **kw)), (_t(x), _t(t), _t(w))
    with np.errstate(all="ignore"):
        check(fn, args, ["cross_entropy"], [loss], dtype, no_indexing=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CE_CASES, ids=_ce_ids())
def test_cross_entropy_backward(dtype, case):
    x, t, w, kw = _ce_args(case, dtype)
    nt = DTYPES[dtype][1]
    loss, grad_of = _np_cross_entropy(x.astype(float), t, None if w is None else w.astype(float),
                                      kw["ignore_index"], kw["reduction"], kw["label_smoothing"])
    g = (_rng(10).standard_normal(np.shape(loss)) + 2).astype(nt)   # upstream gradient of the loss

    def fn(x, t, g, *w):
        x = _req(x)
        return _grad_of(F.cross_entropy(x, t, *w, **kw), [x], g)
    args = (_t(x), _t(t), _t(g)) + (() if w is None else (_t(w),))
    with np.errstate(all="ignore"):
        check(fn, args, ["cross_entropy_backward"], [grad_of(g.astype(float))], dtype, no_indexing=True)


def test_cross_entropy_class_pick_is_a_one_hot_compare():
    x, t, w, kw = _ce_args(CE_CASES[4], "float64")

    def fn(x, t, w):
        x = _req(x)
        loss = F.cross_entropy(x, t, w, **kw)
        return loss, _grad_of(loss, [x], None)
    compiled = eagerc.compile(fn, fullgraph=True)
    compiled(_t(x), _t(t), _t(w))
    out = decompose(compiled.traced_graphs[0])
    ops = [n.op for n in out.nodes]
    assert "arange" in ops and "eq" in ops and "where" in ops
    assert not set(ops) & INDEXING and not {"cross_entropy", "cross_entropy_backward"} & set(ops)
    # every eq compares the (unsqueezed) targets with arange(C) along the last dim
    for n in out.nodes:
        if n.op == "eq":
            assert tuple(n.out.shape) == x.shape


def test_class_dim_moved_last_for_nd_inputs():
    """(N, C, d) logits: the class dim is moved last, so every per-row reduction is a last-dim one."""
    x, t, w, kw = _ce_args(CE_CASES[10], "float64")

    def fn(x, t, w):
        x = _req(x)
        loss = F.cross_entropy(x, t, w, **kw)
        return loss, _grad_of(loss, [x], eagerc.ones_like(loss))
    compiled = eagerc.compile(fn, fullgraph=True)
    compiled(_t(x), _t(t), _t(w))
    out = decompose(compiled.traced_graphs[0])
    reds = [n for n in out.nodes if n.op in REDUCTIONS]
    assert reds and all(_reduced_dims(n) in ("last", "all") for n in reds)


# ---------------------------------------------------------------- the table and the pass

# ---------------------------------------------------------------- recurrent cells

def _np_sig(x):
    return 1 / (1 + np.exp(-x))


def _np_lstm(xg, hg, c, g):
    """[h', c'] and (d gates, d c) given g = [d h', d c'] (PyTorch's gates i, f, g, o)."""
    i, f, gg, o = np.split(xg + hg, 4, -1)
    i, f, gg, o = _np_sig(i), _np_sig(f), np.tanh(gg), _np_sig(o)
    c1 = f * c + i * gg
    tc = np.tanh(c1)
    dc = g[1] + g[0] * o * (1 - tc ** 2)
    dgates = np.concatenate([dc * gg * i * (1 - i), dc * c * f * (1 - f), dc * i * (1 - gg ** 2),
                             g[0] * tc * o * (1 - o)], -1)
    return np.stack([o * tc, c1]), (dgates, dgates, dc * f)


def _np_gru(xg, hg, h, g):
    """h' and (d xg, d hg, d h) given g = d h' (gates r, z, n; b_hn inside r * (...))."""
    (xr, xz, xn), (hr, hz, hn) = np.split(xg, 3, -1), np.split(hg, 3, -1)
    r, z = _np_sig(xr + hr), _np_sig(xz + hz)
    n = np.tanh(xn + r * hn)
    dn = g * (1 - z) * (1 - n ** 2)
    dr, dz = dn * hn * r * (1 - r), g * (h - n) * z * (1 - z)
    return (1 - z) * n + z * h, (np.concatenate([dr, dz, dn], -1), np.concatenate([dr, dz, dn * r], -1), g * z)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("batch", [(3,), ()])
def test_recurrent_cells_and_their_backward(dtype, kind, batch):
    from eagerc.dispatch import apply
    from eagerc.runtime.ops import OPS
    nt = DTYPES[dtype][1]
    r = _rng(11)
    H = 5
    G = 4 if kind == "lstm" else 3
    xg, hg = (r.standard_normal(batch + (G * H,)).astype(nt) for _ in range(2))
    state = r.standard_normal(batch + (H,)).astype(nt)
    g = r.standard_normal(((2,) if kind == "lstm" else ()) + batch + (H,)).astype(nt)
    out, grads = (_np_lstm if kind == "lstm" else _np_gru)(*(a.astype(float) for a in (xg, hg, state, g)))
    op = OPS[f"{kind}_cell"]
    check(lambda *a: apply(op, a), (_t(xg), _t(hg), _t(state)), [op.name], [out], dtype)

    def backward(xg, hg, state, g):
        ins = [_req(a) for a in (xg, hg, state)]
        return _grad_of(apply(op, tuple(ins)), ins, g)
    check(backward, (_t(xg), _t(hg), _t(state), _t(g)), [op.name + "_backward"], list(grads), dtype)


def _np_lstm_layer(xg, h0, c0, w, g):
    """lstm_layer's (6, T, B, H) [h, c, i, f, g, o per step] and (d xg, d h0, d c0, d w) given g = d out."""
    h, c, steps = h0, c0, []
    for x in xg:
        i, f, gg, o = np.split(x + h @ w.T, 4, -1)
        i, f, gg, o = _np_sig(i), _np_sig(f), np.tanh(gg), _np_sig(o)
        c = f * c + i * gg
        h = o * np.tanh(c)
        steps.append((h, c, i, f, gg, o))
    out = np.stack([np.stack(k) for k in zip(*steps)])
    dxg, dw, dh, dc = np.empty_like(xg), np.zeros_like(w), np.zeros_like(h0), np.zeros_like(c0)
    for t in range(len(xg) - 1, -1, -1):
        h, c, i, f, gg, o = out[:, t]
        hp, cp = (h0, c0) if t == 0 else out[:2, t - 1]
        tc = np.tanh(c)
        dh = dh + g[0, t]
        dc = dc + g[1, t] + dh * o * (1 - tc ** 2)
        dxg[t] = np.concatenate([(dc * gg + g[2, t]) * i * (1 - i), (dc * cp + g[3, t]) * f * (1 - f),
                                 (dc * i + g[4, t]) * (1 - gg ** 2), (dh * tc + g[5, t]) * o * (1 - o)], -1)
        dw += dxg[t].T @ hp
        dh, dc = dxg[t] @ w, dc * f
    return out, (dxg, dh, dc, dw)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lstm_layer_and_its_backward(dtype):
    """The whole-sequence op: its decomposition (a per-step loop) and that of its backward kernel,
    which the derivative completes with one product for d W_hh."""
    from eagerc.dispatch import apply
    from eagerc.runtime.ops import OPS
    nt = DTYPES[dtype][1]
    r = _rng(12)
    T, B, H = 4, 3, 5
    xg = r.standard_normal((T, B, 4 * H)).astype(nt)
    h0, c0 = (r.standard_normal((B, H)).astype(nt) for _ in range(2))
    w = (0.5 * r.standard_normal((4 * H, H))).astype(nt)
    g = r.standard_normal((6, T, B, H)).astype(nt)
    out, grads = _np_lstm_layer(*(a.astype(float) for a in (xg, h0, c0, w, g)))
    op = OPS["lstm_layer"]
    check(lambda *a: apply(op, a), (_t(xg), _t(h0), _t(c0), _t(w)), [op.name], [out], dtype)

    def backward(*args):
        ins = [_req(a) for a in args[:4]]
        return _grad_of(apply(op, tuple(ins)), ins, args[4])
    check(backward, (_t(xg), _t(h0), _t(c0), _t(w), _t(g)), [op.name + "_backward"], list(grads), dtype,
          leading_sum_ok=True)


def test_decomposed_functions_run_eagerly_and_match_the_kernels():
    """The *_decomposed backward functions called directly (not traced) equal the fused kernels."""
    from eagerc.dispatch import apply
    from eagerc.runtime.ops import OPS
    r = _rng(11)
    x, g, w = _t(r.standard_normal((2, 3, 8))), _t(r.standard_normal((2, 3, 8))), _t(r.standard_normal(8))
    attrs = {"normalized_shape": (8,), "eps": 1e-5}
    pairs = [
        (apply(OPS["layer_norm_backward"], (g, x, w), attrs),
         nn_ops.layer_norm_backward_decomposed(g, x, w, (8,), 1e-5)),
        (apply(OPS["layer_norm_weight_backward"], (g, x), attrs),
         nn_ops.layer_norm_weight_backward_decomposed(g, x, 8)),
        (apply(OPS["rms_norm_backward"], (g, x, w), attrs), nn_ops.rms_norm_backward_decomposed(g, x, w, (8,), 1e-5)),
        (apply(OPS["rms_norm_weight_backward"], (g, x), attrs),
         nn_ops.rms_norm_weight_backward_decomposed(g, x, 8, 1e-5)),
        (apply(OPS["gelu_backward"], (g, x), {"approximate": "tanh"}), nn_ops.gelu_backward_decomposed(g, x, "tanh")),
        (apply(OPS["softmax_backward"], (g, x), {"dim": 1}), nn_ops.softmax_backward_decomposed(g, x, 1)),
        (apply(OPS["log_softmax_backward"], (g, x), {"dim": 0}), nn_ops.log_softmax_backward_decomposed(g, x, 0)),
    ]
    for fused, dec in pairs:
        _close(dec.numpy(), fused.numpy(), 1e-12, "eager")
    logits, t = _t(r.standard_normal((4, 6))), _t(np.array([0, 5, 3, 3]))
    with pytest.raises(IndexError):   # the eager call keeps the kernel's target check
        nn_ops.cross_entropy_backward_decomposed(_t(1.0), logits, _t(np.array([0, 6, 3, 3])))
    ce = {"ignore_index": 3, "reduction": "mean", "label_smoothing": 0.1}
    fused = apply(OPS["cross_entropy_backward"], (_t(1.0), logits, t, None), ce)
    _close(nn_ops.cross_entropy_backward_decomposed(_t(1.0), logits, t, None, **ce).numpy(), fused.numpy(), 1e-12, "ce")


def test_template_tracing_is_quiet():
    """Templates trace on zero placeholders (a mean over zero weights divides 0 by 0): no warning."""
    import warnings
    import sys
    mod = sys.modules["eagerc.compiler.passes.decompose"]
    x, t, w, kw = _ce_args(CE_CASES[3], "float32")

    def fn(x, t, w):
        x = _req(x)
        return _grad_of(F.cross_entropy(x, t, w, **kw), [x], None)
    compiled = eagerc.compile(fn, fullgraph=True)
    compiled(_t(x), _t(t), _t(w))
    graph = compiled.traced_graphs[0]
    saved = dict(mod._TEMPLATES)
    mod._TEMPLATES.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = decompose(graph)
    finally:
        mod._TEMPLATES.clear()
        mod._TEMPLATES.update(saved)
    assert "cross_entropy_backward" not in {n.op for n in out.nodes}


def test_every_decomposition_is_tested():
    """A new entry in decompose's table needs a case in this file (and a name in TESTED)."""
    from eagerc.runtime.ir import Graph
    decompose(Graph([], [], [], {"tuple": []}))   # fills the table
    assert set(DECOMPOSITIONS) == TESTED
