"""compiler/kernels/selects.py: elementwise work moved inside selects with a uniform branch.

The rewritten kernel IR, and compiled (backend c) against numpy formulas on the masked
softmax it exists for -- including rows masked entirely (NaN, as eager) and masks that are not
-inf -- and a plain elementwise kernel (the uniform branch a constant).
"""
import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
from eagerc.compiler.kernels.selects import push_into_selects
from eagerc.runtime import kernel_cache
from eagerc.runtime.kernels.ir import Buffer, Kernel, Reduction

pytestmark = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(kernel_cache_dir):
    yield kernel_cache_dir


def _masked_softmax_kernel():
    """exp(where(mask, x, -inf) - rowmax(...)) / rowsum(...), as lower_group builds it."""
    k = Kernel("k0", (4, 8), row_dims=1)
    m = k.load("mask", "bool", (4, 8))
    x = k.load("x", "float32", (4, 8))
    w = k.add("where", (m, x, k.add("const", (float("-inf"),), "float32")), "float32")
    mx = k.add("row_max", (w,), "float32")
    e = k.add("exp", (k.add("sub", (w, mx), "float32"),), "float32")
    out = k.add("div", (e, k.add("row_sum", (e,), "float32")), "float32")
    k.store(out, "y", "float32", (4, 8))
    return k


def test_exp_moves_inside_the_select_and_dead_instructions_go():
    k = push_into_selects(_masked_softmax_kernel())
    exps = [i for i in k.instrs if i.op == "exp"]
    # one exp of the scores (element-level), one of -inf - rowmax (once per row); the select's
    # uniform branch is never fed to the vector loop
    assert len(exps) == 2
    level = k.row_level()
    by_level = sorted(level[k.instrs.index(i)] for i in exps)
    assert by_level == [False, True]
    elem_exp = next(i for i in exps if not level[k.instrs.index(i)])
    arg = k.instrs[elem_exp.args[0]]
    assert arg.op == "sub" and k.instrs[arg.args[0]].op == "load"   # exp(x - max): no select inside
    # every instruction is read by a later one or stored (the original exp(where - max) is gone)
    read = {a for i in k.instrs if i.op not in ("load", "const") for a in i.args} | {i for i, _ in k.stores}
    assert read == set(range(len(k.instrs)))
    assert k.instrs[k.stores[0][0]].op == "where"


def test_kernels_without_a_uniform_branch_are_unchanged():
    k = Kernel("k0", (16,))
    a, b = k.load("a", "float32", (16,)), k.load("b", "float32", (16,))
    c = k.add("gt", (a, b), "bool")
    out = k.add("exp", (k.add("where", (c, a, b), "float32"),), "float32")
    k.store(out, "y", "float32", (16,))
    before = list(k.instrs)
    assert push_into_selects(k).instrs == before


def test_final_reduction_source_follows_the_rewrite():
    k = Kernel("k0", (16,))
    a = k.load("a", "float32", (16,))
    c = k.add("gt", (a, k.add("const", (0.0,), "float32")), "bool")
    w = k.add("where", (c, a, k.add("const", (float("-inf"),), "float32")), "float32")
    e = k.add("exp", (w,), "float32")
    k.outputs.append(Buffer("s", "float32", ()))
    k.reduction = Reduction("sum", e, "all", 0, "float32")
    push_into_selects(k)
    src = k.instrs[k.reduction.src]
    assert src.op == "where" and k.instrs[src.args[1]].op == "exp"


def _np_masked_softmax(x, mask, fill):
    with np.errstate(invalid="ignore"):
        z = np.where(mask, x, fill)
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("fill", [float("-inf"), -1e9, 0.5])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_masked_softmax_compiled_matches_numpy(fill, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 5, 40, 40)) * 4).astype(dtype)
    mask = np.tril(np.ones((40, 40), bool))
    mask[7] = False                                  # a row masked entirely: NaN with -inf, as eager

    def fn(a, m):
        return F.softmax(a.masked_fill(~m, fill), -1)
    compiled = eagerc.compile(fn, backend="c")
    xt, mt = eagerc.tensor(x), eagerc.tensor(mask)
    with np.errstate(invalid="ignore"):
        compiled(xt, mt)                               # the first call traces: eager's results
        got = compiled(xt, mt).numpy()
        eager = fn(xt, mt).numpy()
    want = _np_masked_softmax(x.astype(np.float64), mask, fill)
    tol = dict(rtol=2e-6, atol=1e-7) if dtype == "float32" else dict(rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got, want, equal_nan=True, **tol)
    np.testing.assert_allclose(got, eager, equal_nan=True, **tol)
    assert np.isnan(got[:, :, 7]).all() == (fill == float("-inf"))
    (entry,) = compiled.entries.values()
    (k,) = [k for k in entry.program.kernels if k.row_dims]
    level = k.row_level()
    assert any(i.op == "exp" and level[n] for n, i in enumerate(k.instrs))   # exp of the fill: once per row


def test_causal_attention_backward_unchanged_by_the_rewrite():
    # sdpa with is_causal through forward and backward, compiled vs a float64 numpy reference
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 16, 8)) for _ in range(3))

    def fn(q, k, v):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        gq, gk, gv = eagerc.autograd.grad((y * y).sum(), (q, k, v))
        return y.detach(), gq, gk, gv
    compiled = eagerc.compile(fn, backend="c")
    compiled(*(eagerc.tensor(a) for a in (q, k, v)))   # the first call traces: eager's results
    got = [t.numpy() for t in compiled(*(eagerc.tensor(a) for a in (q, k, v)))]

    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
    p = _np_masked_softmax(s, np.tril(np.ones((16, 16), bool)), -np.inf)
    y = p @ v
    gy = 2 * y
    gv = p.transpose(0, 1, 3, 2) @ gy
    gp = gy @ v.transpose(0, 1, 3, 2)
    gs = p * (gp - (gp * p).sum(-1, keepdims=True)) / np.sqrt(8)
    gq, gk = gs @ k, gs.transpose(0, 1, 3, 2) @ q
    for a, b in zip(got, (y, gq, gk, gv)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
