"""Differential testing of @compile: hypothesis writes small random programs over the op set
(elementwise unary/binary with broadcasting, scalars, reductions with dims, reshape/permute/
transpose, slicing, matmul, where, softmax, concatenation, in-place updates of fresh tensors
and their views) as Python functions of 1-3 tensors; each runs eagerly and compiled (the
interpreter and the numpy backend), twice, with different input values -- the second call
runs the cached program. With a C compiler, backend "c" (fused C kernels) runs them too.

Hypothesis runs derandomized (a fixed seed, no example database), so CI is reproducible."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import eagerc
from eagerc.runtime import kernel_cache

# backend "c" joins when a C compiler is there (its kernels are cached per test module)
BACKENDS = ("interpreter", "numpy") + (("c",) if kernel_cache.find_compiler() is not None else ())


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(kernel_cache_dir):
    yield kernel_cache_dir

UNARY = {
    "neg": lambda x: -x,
    "exp_tanh": lambda x: x.tanh().exp(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: x.relu(),
    "abs": lambda x: x.abs(),
    "sin": lambda x: x.sin(),
    "sqrt_abs": lambda x: x.abs().sqrt(),
    "log1p_abs": lambda x: (x.abs() + 1).log(),
    "square": lambda x: x * x,
    "clamp": lambda x: x.clamp(-0.5, 0.7),
    "gelu": lambda x: eagerc.nn.functional.gelu(x),
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b.abs() + 1),
    "maximum": lambda a, b: eagerc.maximum(a, b),
    "where": lambda a, b: eagerc.where(a > b, a, b * 0.5),
}
SCALAR = {
    "add_s": lambda x, c: x + c,
    "mul_s": lambda x, c: x * c,
    "rsub_s": lambda x, c: c - x,
    "pow2": lambda x, c: x ** 2,
}
REDUCE = {
    "sum": lambda x, d, k: x.sum(d, keepdim=k),
    "mean": lambda x, d, k: x.mean(d, keepdim=k),
    "amax": lambda x, d, k: x.amax(d, keepdim=k),
    "softmax": lambda x, d, k: x.softmax(d),
    "log_softmax": lambda x, d, k: x.log_softmax(d),
    "cumsum": lambda x, d, k: x.cumsum(d),
}


def _apply(op, vals):
    kind, name, args = op
    if kind == "unary":
        return UNARY[name](vals[args[0]])
    if kind == "binary":
        return BINARY[name](vals[args[0]], vals[args[1]])
    if kind == "scalar":
        return SCALAR[name](vals[args[0]], args[1])
    if kind == "reduce":
        return REDUCE[name](vals[args[0]], args[1], args[2])
    if kind == "reshape":
        return vals[args[0]].reshape(*args[1])
    if kind == "permute":
        return vals[args[0]].permute(*args[1])
    if kind == "transpose":
        return vals[args[0]].transpose(args[1], args[2])
    if kind == "slice":
        x = vals[args[0]]
        return x[(slice(None),) * args[1] + (slice(args[2], args[3]),)]
    if kind == "matmul":
        return vals[args[0]] @ vals[args[1]].transpose(-1, -2)
    if kind == "cat":
        return eagerc.cat([vals[args[0]], vals[args[1]]], dim=args[2])
    if kind == "inplace":
        t = vals[args[0]].clone()
        t.mul_(args[1]).add_(1.0)
        return t
    if kind == "view_inplace":
        t = vals[args[0]].clone()
        t[0].add_(args[1])
        return t * 1
    raise AssertionError(kind)


def _run(prog, outs, *xs):
    vals = list(xs)
    for op in prog:
        vals.append(_apply(op, vals))
    picked = [vals[i] for i in outs]
    return picked[0] if len(picked) == 1 else tuple(picked)


def _broadcastable(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


@st.composite
def programs(draw):
    """(program, output indices, input shapes): shapes are tracked by running each op on
    zeros while drawing, so every drawn op is valid."""
    base = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    shapes = [tuple(base)]
    for _ in range(draw(st.integers(0, 2))):
        s = list(base)
        for d in range(len(s)):
            if draw(st.booleans()):
                s[d] = 1
        shapes.append(tuple(s[draw(st.integers(0, len(s) - 1)):]))  # a broadcastable suffix
    probe = [eagerc.zeros(*s, dtype=eagerc.float64) for s in shapes]
    prog = []
    for _ in range(draw(st.integers(1, 8))):
        n = len(probe)
        i = draw(st.integers(0, n - 1))
        shp = tuple(probe[i].shape)
        nd = len(shp)
        kinds = ["unary", "unary", "binary", "binary", "binary", "scalar", "inplace"]
        if nd:
            kinds += ["reduce", "reshape", "permute", "slice", "view_inplace", "cat"]
        if nd >= 2:
            kinds += ["transpose", "matmul"]
        kind = draw(st.sampled_from(kinds))
        if kind == "unary":
            op = (kind, draw(st.sampled_from(sorted(UNARY))), (i,))
        elif kind == "binary":
            js = [j for j in range(n) if _broadcastable(shp, tuple(probe[j].shape))]
            op = (kind, draw(st.sampled_from(sorted(BINARY))), (i, draw(st.sampled_from(js))))
        elif kind == "scalar":
            op = (kind, draw(st.sampled_from(sorted(SCALAR))), (i, draw(st.sampled_from([0.5, 2.0, -1.5, 3]))))
        elif kind == "reduce":
            op = (kind, draw(st.sampled_from(sorted(REDUCE))), (i, draw(st.integers(-nd, nd - 1)),
                                                               draw(st.booleans())))
        elif kind == "reshape":
            new = draw(st.sampled_from([(-1,), (shp[0], -1), (-1, 1)] + ([(1,) + shp] if nd < 4 else [])))
            op = (kind, None, (i, new))
        elif kind == "permute":
            op = (kind, None, (i, tuple(draw(st.permutations(range(nd))))))
        elif kind == "transpose":
            op = (kind, None, (i, draw(st.integers(0, nd - 1)), draw(st.integers(0, nd - 1))))
        elif kind == "slice":
            d = draw(st.integers(0, nd - 1))
            start = draw(st.integers(0, shp[d] - 1))
            op = (kind, None, (i, d, start, draw(st.integers(start + 1, shp[d]))))
        elif kind == "matmul":
            js = [j for j in range(n) if len(probe[j].shape) >= 2 and probe[j].shape[-1] == shp[-1]
                  and _broadcastable(shp[:-2], tuple(probe[j].shape[:-2]))]
            op = (kind, None, (i, draw(st.sampled_from(js))))
        elif kind == "cat":
            d = draw(st.integers(0, nd - 1))
            js = [j for j in range(n) if len(probe[j].shape) == nd and all(
                a == b for k, (a, b) in enumerate(zip(shp, probe[j].shape)) if k != d)]
            op = (kind, None, (i, draw(st.sampled_from(js)), d))
        elif kind == "inplace":
            op = (kind, None, (i, draw(st.sampled_from([0.5, -2.0]))))
        else:
            op = (kind, None, (i, draw(st.sampled_from([1.0, -3.0]))))
        probe.append(_apply(op, probe))
        prog.append(op)
    n = len(probe)
    outs = draw(st.lists(st.integers(len(shapes), n - 1), min_size=1, max_size=2, unique=True))
    return prog, outs, shapes


_C_KERNELS = []   # per example run with backend "c": how many C kernels its program has


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True, database=None)
@given(programs(), st.integers(0, 2 ** 31 - 1))
def _check_random_program(case, seed):
    prog, outs, shapes = case
    rng = np.random.default_rng(seed)

    def fn(*xs):
        return _run(prog, outs, *xs)

    compiled = {b: eagerc.compile(fn, backend=b, fullgraph=True) for b in BACKENDS}
    with eagerc.no_grad():
        for call in range(2):
            xs = [eagerc.tensor(rng.standard_normal(s)) for s in shapes]
            expected = fn(*xs)
            for backend, c in compiled.items():
                got = c(*xs)
                exp_t = expected if isinstance(expected, tuple) else (expected,)
                got_t = got if isinstance(got, tuple) else (got,)
                assert len(exp_t) == len(got_t)
                for e, g in zip(exp_t, got_t):
                    assert tuple(g.shape) == tuple(e.shape) and g.dtype == e.dtype, (backend, prog)
                    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-9, atol=1e-12,
                                               err_msg=f"{backend} call {call}: {prog}")
    for c in compiled.values():
        assert c.traces == 1
    if "c" in compiled:
        _C_KERNELS.append(sum(len(getattr(e.program, "kernels", None) or ())
                              for e in compiled["c"].entries.values()))


def test_random_programs_compiled_equal_eager():
    _C_KERNELS.clear()
    _check_random_program()
    if "c" in BACKENDS:   # backend "c" really ran C kernels (not only its numpy fallback)
        assert len(_C_KERNELS) >= 50
        assert sum(1 for k in _C_KERNELS if k) >= 0.2 * len(_C_KERNELS), _C_KERNELS
