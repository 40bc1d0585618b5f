"""Differential tests of backend "c" on random programs shaped like its kernels: values and gradients.

Hypothesis draws programs that chain elementwise ops (unary, binary with broadcasting,
Python scalars) with the reductions the C kernels fuse: sum/mean/amax/amin over the last
dim or the last two dims, keepdim True or False, whose results feed later elementwise ops
(x - x.amax(-1, keepdim=True), softmax and log_softmax written out, x / x.abs().sum(..) ,
standardising with (var + eps).rsqrt(), rms scaling, reduced rows combined and unsqueezed
again), sums/means over leading dims (bias gradients) and over everything. Inputs: a main
tensor (1 row, 1 column, 2-d and 3-d, and more than 32768 elements so the kernels take
their parallel path) plus broadcast inputs of shape (C,), (R, 1), () and the full shape;
float32 and float64.

Each program runs as a training-style function: forward, a scalar loss
sum((out * W).sum()) against fixed random weights W, the gradients of every input it reads
-- through `autograd.grad` inside the function, `loss.backward()` inside it, or a compiled
forward whose backward runs outside (the joint forward/backward programs). It runs

- eagerly (the reference),
- compiled with backend "c" (twice, with new input values the second time: the cached
  program), which must agree with eager (float64 rtol 1e-9, float32 rtol 1e-4),
- as an independent numpy formula (forward values and loss), and for float64 the
  gradients are checked against central finite differences of that numpy loss along a
  random direction per input -- so eager and compiled cannot both be wrong the same way.

Every compiled program must have run C kernels (not the numpy fallback), and over all
examples row kernels, leading-dim reductions, full reductions and the parallel path must
all have been exercised. Hypothesis is derandomized (fixed seed, no example database).
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import eagerc
import eagerc.nn.functional as F
from eagerc.runtime.kernels.render import PARALLEL_MIN
from eagerc.runtime import kernel_cache

pytestmark = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")

EPS = 1e-5
_SQRT_2_PI = 0.7978845608028654


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(kernel_cache_dir):
    yield kernel_cache_dir


# ---------------------------------------------------------------- the op vocabulary
# name: (eagerc version, numpy version); every op is continuous (finite differences)

UNARY = {
    "tanh": (lambda x: x.tanh(), np.tanh),
    "sigmoid": (lambda x: x.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    "neg": (lambda x: -x, lambda x: -x),
    "relu": (lambda x: x.relu(), lambda x: np.maximum(x, 0)),
    "abs": (lambda x: x.abs(), np.abs),
    "sin": (lambda x: x.sin(), np.sin),
    "exp_tanh": (lambda x: x.tanh().exp(), lambda x: np.exp(np.tanh(x))),
    "log1p_abs": (lambda x: (x.abs() + 1).log(), lambda x: np.log(np.abs(x) + 1)),
    "hypot1": (lambda x: (x * x + 1).sqrt(), lambda x: np.sqrt(x * x + 1)),
    "rsqrt1": (lambda x: (x * x + 1).rsqrt(), lambda x: 1 / np.sqrt(x * x + 1)),
    "clamp": (lambda x: x.clamp(-0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7)),
    "leaky": (lambda x: eagerc.where(x > 0, x, x * 0.5), lambda x: np.where(x > 0, x, x * 0.5)),
    "x_tanh": (lambda x: x * x.tanh(), lambda x: x * np.tanh(x)),
    "gelu": (lambda x: F.gelu(x, approximate="tanh"),
             lambda x: 0.5 * x * (1 + np.tanh(_SQRT_2_PI * (x + 0.044715 * x ** 3)))),
}
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / (b.abs() + 1), lambda a, b: a / (np.abs(b) + 1)),
    "maximum": (eagerc.maximum, np.maximum),
    "minimum": (eagerc.minimum, np.minimum),
    "where_gt": (lambda a, b: eagerc.where(a > b, a, b), lambda a, b: np.where(a > b, a, b)),
}
SCALAR = {
    "mul_s": (lambda x, c: x * c, lambda x, c: x * c),
    "add_s": (lambda x, c: x + c, lambda x, c: x + c),
    "rsub_s": (lambda x, c: c - x, lambda x, c: c - x),
}
REDUCE = {   # plain reductions: (eagerc, numpy) of (x, dims, keepdim)
    "sum": (lambda x, d, k: x.sum(d, keepdim=k), lambda x, d, k: np.sum(x, axis=d, keepdims=k)),
    "mean": (lambda x, d, k: x.mean(d, keepdim=k), lambda x, d, k: np.mean(x, axis=d, keepdims=k)),
    "amax": (lambda x, d, k: x.amax(d, keepdim=k), lambda x, d, k: np.amax(x, axis=d, keepdims=k)),
    "amin": (lambda x, d, k: x.amin(d, keepdim=k), lambda x, d, k: np.amin(x, axis=d, keepdims=k)),
}


def _rsqrt_np(x):
    return 1 / np.sqrt(x)


def _log_softmax(x, d, lib):
    if lib == "np":
        m = x - np.amax(x, axis=d, keepdims=True)
        return m - np.log(np.sum(np.exp(m), axis=d, keepdims=True))
    m = x - x.amax(d, keepdim=True)
    return m - m.exp().sum(d, keepdim=True).log()


def _softmax(x, d, lib):
    if lib == "np":
        e = np.exp(x - np.amax(x, axis=d, keepdims=True))
        return e / np.sum(e, axis=d, keepdims=True)
    e = (x - x.amax(d, keepdim=True)).exp()
    return e / e.sum(d, keepdim=True)


def _standardize(x, d, lib):
    if lib == "np":
        xc = x - np.mean(x, axis=d, keepdims=True)
        return xc * _rsqrt_np(np.mean(xc * xc, axis=d, keepdims=True) + EPS)
    xc = x - x.mean(d, keepdim=True)
    return xc * ((xc * xc).mean(d, keepdim=True) + EPS).rsqrt()


ROW = {   # multi-pass row patterns over dims d (reductions reused by later elementwise ops)
    "sub_max": (lambda x, d: x - x.amax(d, keepdim=True), lambda x, d: x - np.amax(x, axis=d, keepdims=True)),
    "minmax": (lambda x, d: (x - x.amin(d, keepdim=True)) / (x.amax(d, keepdim=True) - x.amin(d, keepdim=True) + 1),
               lambda x, d: (x - np.amin(x, axis=d, keepdims=True)) /
               (np.amax(x, axis=d, keepdims=True) - np.amin(x, axis=d, keepdims=True) + 1)),
    "softmax": (lambda x, d: _softmax(x, d, "e"), lambda x, d: _softmax(x, d, "np")),
    "log_softmax": (lambda x, d: _log_softmax(x, d, "e"), lambda x, d: _log_softmax(x, d, "np")),
    "standardize": (lambda x, d: _standardize(x, d, "e"), lambda x, d: _standardize(x, d, "np")),
    "rms": (lambda x, d: x * ((x * x).mean(d, keepdim=True) + 1e-6).rsqrt(),
            lambda x, d: x * _rsqrt_np(np.mean(x * x, axis=d, keepdims=True) + 1e-6)),
    "div_abs_sum": (lambda x, d: x / (x.abs().sum(d, keepdim=True) + 1),
                    lambda x, d: x / (np.sum(np.abs(x), axis=d, keepdims=True) + 1)),
    # keepdim=False reductions reused: combined with each other, or unsqueezed back
    "row_stats": (lambda x, d: x.sum(d) * x.amax(d).tanh() + x.amin(d) - x.mean(d),
                  lambda x, d: np.sum(x, axis=d) * np.tanh(np.amax(x, axis=d)) + np.amin(x, axis=d)
                  - np.mean(x, axis=d)),
    "center_nokeep": (lambda x, d: x - x.mean(-1).unsqueeze(-1) * 0.5,
                      lambda x, d: x - np.mean(x, axis=-1)[..., None] * 0.5),
}
LEAD = {   # patterns over leading dims d (batch-norm like; bias gradients in the backward)
    "lead_center": (lambda x, d: x - x.mean(d, keepdim=True), lambda x, d: x - np.mean(x, axis=d, keepdims=True)),
    "lead_standardize": (lambda x, d: _standardize(x, d, "e"), lambda x, d: _standardize(x, d, "np")),
    "lead_scale": (lambda x, d: x * (x * x).sum(d).tanh(), lambda x, d: x * np.tanh(np.sum(x * x, axis=d))),
}


def _apply(op, vals, lib):
    """Value of one op over earlier values; lib 0 = eagerc, 1 = numpy."""
    kind, name, args = op
    if kind == "unary":
        return UNARY[name][lib](vals[args[0]])
    if kind == "binary":
        return BINARY[name][lib](vals[args[0]], vals[args[1]])
    if kind == "scalar":
        return SCALAR[name][lib](vals[args[0]], args[1])
    if kind == "reduce":   # over trailing dims, over leading dims, or over everything (dims None)
        x, d, k = vals[args[0]], args[1], args[2]
        if d is None:
            return getattr(x, name)() if lib == 0 else REDUCE[name][1](x, None, False)
        return REDUCE[name][lib](x, d, k)
    if kind == "row":
        return ROW[name][lib](vals[args[0]], args[1])
    if kind == "lead":
        return LEAD[name][lib](vals[args[0]], args[1])
    if kind == "unsqueeze":
        return vals[args[0]].unsqueeze(-1) if lib == 0 else vals[args[0]][..., None]
    raise AssertionError(kind)


def _run(prog, outs, xs, lib):
    vals = list(xs)
    for op in prog:
        vals.append(_apply(op, vals, lib))
    return [vals[i] for i in outs]


def _broadcastable(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------- drawing programs

BIG_SHAPES = [(513, 256), (2, 65600), (1, 131100), (131100, 1), (3, 171, 256)]   # > PARALLEL_MIN elements
assert all(math.prod(s) >= PARALLEL_MIN for s in BIG_SHAPES)
INPUT_KINDS = ("col", "row", "scalar", "full")


@st.composite
def shapes(draw):
    kind = draw(st.sampled_from(["2d", "2d", "1row", "1col", "3d", "big"]))
    if kind == "big":
        return draw(st.sampled_from(BIG_SHAPES))
    if kind == "1row":
        return (1, draw(st.integers(1, 70)))
    if kind == "1col":
        return (draw(st.integers(1, 40)), 1)
    if kind == "3d":
        return tuple(draw(st.integers(1, n)) for n in (3, 5, 24))
    return (draw(st.integers(1, 9)), draw(st.integers(1, 70)))


def _input_shape(kind, main):
    return {"col": main[-1:], "row": (main[-2], 1), "scalar": (), "full": main}[kind]


@st.composite
def programs(draw):
    """(program, output value indices, input shapes, indices of the inputs the outputs
    depend on): shapes are tracked by running each op's numpy version on a probe while
    drawing, so every drawn op is valid."""
    main = draw(shapes())
    extra = draw(st.lists(st.sampled_from(INPUT_KINDS), max_size=3))
    in_shapes = [main] + [_input_shape(k, main) for k in extra]
    rng = np.random.default_rng(0)
    probe = [rng.standard_normal(s) for s in in_shapes]
    deps = [{i} for i in range(len(in_shapes))]
    prog = []
    cur = 0                      # the chain's latest value (the main input to start with)
    with np.errstate(all="ignore"):
        for step in range(draw(st.integers(1, 8))):
            n = len(probe)
            i = draw(st.one_of(st.just(cur), st.integers(0, n - 1)))
            shp = probe[i].shape
            nd = len(shp)
            kinds = ["unary", "unary", "binary", "binary", "scalar"]
            if nd:
                kinds += ["row", "row", "row", "reduce", "reduce", "reduce"]
            if nd >= 2:
                kinds += ["lead"]
            if nd < len(main):   # a reduced value (keepdim=False) made broadcastable again
                kinds.append("unsqueeze")
            kind = draw(st.sampled_from(kinds))
            js = (i,)
            if kind == "unary":
                op = (kind, draw(st.sampled_from(sorted(UNARY))), (i,))
            elif kind == "binary":
                cands = [j for j in range(n) if _broadcastable(shp, probe[j].shape)
                         and np.prod(np.broadcast_shapes(shp, probe[j].shape)) <= np.prod(main)]
                inputs = [j for j in cands if j < len(in_shapes)]   # broadcast inputs: (C,), (R, 1), ()
                j = draw(st.one_of(st.sampled_from(inputs), st.sampled_from(cands)) if inputs
                         else st.sampled_from(cands))
                if draw(st.booleans()):
                    i, j = j, i
                op = (kind, draw(st.sampled_from(sorted(BINARY))), (i, j))
                js = (i, j)
            elif kind == "scalar":
                op = (kind, draw(st.sampled_from(sorted(SCALAR))), (i, draw(st.sampled_from([0.5, 2.0, -1.5, 3]))))
            elif kind == "row":
                dims = draw(st.sampled_from([(-1,), (-2, -1)] if nd >= 2 else [(-1,)]))
                op = (kind, draw(st.sampled_from(sorted(ROW))), (i, dims))
            elif kind == "lead":
                dims = draw(st.sampled_from([(0,)] + ([(0, 1)] if nd >= 3 else [])))
                op = (kind, draw(st.sampled_from(sorted(LEAD))), (i, dims))
            elif kind == "reduce":
                where = draw(st.sampled_from(["last", "last", "last2", "lead", "lead", "all"]))
                name = draw(st.sampled_from(sorted(REDUCE) if where != "lead" else ["sum", "mean"]))
                if where == "all":
                    dims = None
                elif where == "lead" and nd >= 2:
                    dims = draw(st.sampled_from([(0,)] + ([(0, 1)] if nd >= 3 else [])))
                elif where == "last2" and nd >= 2:
                    dims = (-2, -1)
                else:
                    dims = (-1,)
                op = (kind, name, (i, dims, draw(st.booleans())))
            else:
                op = (kind, None, (i,))
            probe.append(_apply(op, probe, 1))
            deps.append(set().union(*(deps[j] for j in js)))
            prog.append(op)
            cur = len(probe) - 1
    n = len(probe)
    outs = [n - 1]
    if n - 1 > len(in_shapes) and draw(st.booleans()):
        outs.append(draw(st.integers(len(in_shapes), n - 2)))
    return prog, outs, in_shapes, sorted(set().union(*(deps[o] for o in outs)))


# ---------------------------------------------------------------- running one program

def _make_fns(prog, outs, n_in, wrt, mode):
    """The function compiled and run eagerly. Arguments: the n_in inputs, then one weight per
    output. Returns (loss, outputs, gradients of the inputs in `wrt`)."""
    def forward(xs, ws):
        ys = _run(prog, outs, xs, 0)
        loss = (ys[0] * ws[0]).sum()
        for y, w in zip(ys[1:], ws[1:]):
            loss = loss + (y * w).sum()
        return loss, ys

    if mode == "grad":
        def fn(*args):
            xs = [a.detach().requires_grad_(i in wrt) for i, a in enumerate(args[:n_in])]
            loss, ys = forward(xs, args[n_in:])
            gs = eagerc.autograd.grad(loss, [xs[i] for i in wrt])
            return (loss.detach(), [y.detach() for y in ys]) + tuple(gs)
    elif mode == "backward":
        def fn(*args):
            xs = [a.detach().requires_grad_(i in wrt) for i, a in enumerate(args[:n_in])]
            loss, ys = forward(xs, args[n_in:])
            loss.backward()
            return (loss.detach(), [y.detach() for y in ys]) + tuple(xs[i].grad for i in wrt)
    else:   # "outside": the function is the forward only; backward runs on its outputs
        def fn(*args):
            return forward(args[:n_in], args[n_in:])
    return fn


def _call(fn, mode, xs, ws, wrt):
    """(loss, outputs, grads) as numpy arrays."""
    if mode != "outside":
        loss, ys, *gs = fn(*xs, *ws)
    else:
        xs = [x.detach().requires_grad_(i in wrt) for i, x in enumerate(xs)]
        loss, ys = fn(*xs, *ws)
        loss.backward()
        gs = [xs[i].grad for i in wrt]
        loss, ys = loss.detach(), [y.detach() for y in ys]
    return loss.numpy(), [y.numpy() for y in ys], [g.numpy() for g in gs]


def _close(got, want, rtol, atol, what, ref=None):
    """got == want within rtol and atol * (1 + max |want|). `ref` (float32 runs): the same
    values computed in float64; an element also passes when got is no further from it than
    twice want is (a float32 sum accumulated in double by a kernel may be the better one)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    tol = atol * (1 + float(np.max(np.abs(w), initial=0.0))) + rtol * np.abs(w)
    bad = ~((np.abs(g - w) <= tol) | (np.isnan(g) & np.isnan(w)))
    if ref is not None and bad.any():
        r = np.asarray(ref, np.float64)
        bad &= ~(np.abs(g - r) <= 2 * np.abs(w - r) + tol)
    if bad.any():
        k = np.unravel_index(np.argmax(np.where(bad, np.abs(g - w) - tol, -np.inf)), bad.shape)
        raise AssertionError(f"{what}\n{int(bad.sum())} of {bad.size} elements differ, e.g. at {k}: "
                             f"{g[k]!r} != {w[k]!r}" + ("" if ref is None else f" (float64: {r[k]!r})"))


def _kernels(compiled):
    ks = []
    for e in compiled.entries.values():
        for p in (e.program, getattr(e.joint, "fwd_program", None), getattr(e.joint, "bwd_program", None)):
            ks += list(getattr(p, "kernels", None) or ())
    return ks


def _np_loss(prog, outs, xs, ws):
    ys = _run(prog, outs, xs, 1)
    return sum(float(np.sum(y * w)) for y, w in zip(ys, ws)), ys


TOL = {"float64": (1e-9, 1e-10), "float32": (1e-4, 1e-5)}
SEEN = {"examples": 0, "with_kernels": 0, "main": 0, "row": 0, "row2": 0, "lead": 0, "all": 0, "parallel": 0,
        "fd": 0}


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.sampled_from(["float64", "float32"]), st.sampled_from(["grad", "backward", "outside"]),
       st.integers(0, 2 ** 31 - 1))
def _check_random_program(case, dtype, mode, seed):
    prog, outs, in_shapes, wrt = case
    rng = np.random.default_rng(seed)
    n_in = len(in_shapes)
    fn = _make_fns(prog, outs, n_in, wrt, mode)
    compiled = eagerc.compile(fn, backend="c", fullgraph=True)
    rtol, atol = TOL[dtype]
    what = f"{dtype} {mode} inputs {in_shapes} wrt {wrt} outputs {outs}\n{prog}"
    ws = None
    for call in range(2):   # the second call runs the cached program on new values
        arrays = [rng.standard_normal(s).astype(dtype) for s in in_shapes]
        xs = [eagerc.tensor(a) for a in arrays]
        if ws is None:
            ys_np = _run(prog, outs, arrays, 1)
            ws_np = [rng.standard_normal(np.shape(y)).astype(dtype) for y in ys_np]
            ws = [eagerc.tensor(w) for w in ws_np]
        e_loss, e_ys, e_gs = _call(fn, mode, xs, ws, wrt)
        c_loss, c_ys, c_gs = _call(compiled, mode, xs, ws, wrt)
        # float32: the same inputs and weights run eagerly in float64 settle rounding disputes
        r_loss, r_ys, r_gs = (None, [None] * len(outs), [None] * len(wrt)) if dtype == "float64" else \
            _call(fn, mode, [x.double() for x in xs], [w.double() for w in ws], wrt)
        tag = f"call {call}: {what}"
        # compiled against eager: the loss, every output, every gradient
        _close(c_loss, e_loss, rtol, atol, f"loss, {tag}", r_loss)
        for k, (c, e, r) in enumerate(zip(c_ys, e_ys, r_ys)):
            _close(c, e, rtol, atol, f"output {k}, {tag}", r)
        for i, c, e, r in zip(wrt, c_gs, e_gs, r_gs):
            _close(c, e, rtol, atol, f"grad of input {i}, {tag}", r)
        # eager against the numpy formula (independent of eagerc)
        with np.errstate(all="ignore"):
            n_loss, n_ys = _np_loss(prog, outs, arrays, ws_np)
        _close(e_loss, np.asarray(n_loss, dtype=dtype), rtol, atol, f"eager vs numpy, loss, {tag}", r_loss)
        for k, (e, n, r) in enumerate(zip(e_ys, n_ys, r_ys)):
            _close(e, np.asarray(n, dtype=dtype), rtol, atol, f"eager vs numpy, output {k}, {tag}", r)
        if dtype == "float64":
            _check_finite_differences(prog, outs, arrays, ws_np, wrt, e_gs, rng, tag)
    assert compiled.traces == 1, what
    assert all(not e.eager for e in compiled.entries.values()), what
    ks = _kernels(compiled)
    SEEN["examples"] += 1
    SEEN["with_kernels"] += bool(ks)
    SEEN["main"] += any(k.numel() >= np.prod(in_shapes[0]) for k in ks)   # over the main input's elements
    SEEN["row"] += any(k.row_dims for k in ks)
    SEEN["row2"] += any(k.row_dims >= 2 for k in ks)
    SEEN["lead"] += any(k.reduction is not None and k.reduction.axis == "lead" for k in ks)
    SEEN["all"] += any(k.reduction is not None and k.reduction.axis == "all" for k in ks)
    SEEN["parallel"] += any(k.numel() >= PARALLEL_MIN for k in ks)


def _check_finite_differences(prog, outs, arrays, ws, wrt, grads, rng, tag):
    """<grad, v> against central differences of the numpy loss along a random direction v,
    one input at a time, within 1e-5 of sum |grad * v| plus the quotient's rounding error.
    A step that crosses a kink (relu, abs, clamp, max...) in some element of a large input
    misses by about that element's share of the gradient, so smaller steps are tried too:
    a wrong gradient misses at every step, a kink is not crossed by the smaller steps."""
    labs = sum(float(np.sum(np.abs(y * w))) for y, w in zip(_run(prog, outs, arrays, 1), ws))
    for i, g in zip(wrt, grads):
        v = rng.standard_normal(arrays[i].shape)
        an = float(np.sum(g * v))
        scale = float(np.sum(np.abs(g * v)))
        misses = []
        for h in (1e-6, 1e-7, 1e-8):
            plus = [a + h * v if k == i else a for k, a in enumerate(arrays)]
            minus = [a - h * v if k == i else a for k, a in enumerate(arrays)]
            with np.errstate(all="ignore"):
                fd = (_np_loss(prog, outs, plus, ws)[0] - _np_loss(prog, outs, minus, ws)[0]) / (2 * h)
            if abs(fd - an) <= 1e-5 * scale + 1e-14 * (1 + labs) / h:
                break
            misses.append((h, fd))
        else:
            raise AssertionError(f"finite differences, input {i}: <grad, v> = {an} (scale {scale}), "
                                 f"(step, difference quotient) {misses}, {tag}")
        SEEN["fd"] += 1


def test_random_kernel_programs_values_and_gradients_match_eager_and_numpy():
    for key in SEEN:
        SEEN[key] = 0
    _check_random_program()
    n = SEEN["examples"]
    assert n >= 150, SEEN
    # the compiled programs really ran C kernels (not the numpy fallback), over the main
    # input's elements, and of every kind this test is about
    assert SEEN["with_kernels"] >= 0.9 * n and SEEN["main"] >= 0.75 * n, SEEN
    assert min(SEEN[k] for k in ("row", "row2", "lead", "all", "parallel")) >= 5, SEEN
    assert SEEN["fd"] >= n // 2, SEEN
