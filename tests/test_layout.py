"""passes/layout.py: a batch times a matrix as one GEMM, a cat of reshaped views copying once,
a value reshaped twice copied once, a bias gradient summed over the leading dims it was flattened from. Structure of the rewritten graphs, and their values
(interpreted, and compiled on backend c) against numpy."""
import numpy as np
import pytest

import eagerc
from eagerc.compiler.passes import CLEANUP, optimize
from eagerc.compiler.passes.layout import layout
from eagerc.compiler.tracer import trace
from eagerc.runtime import kernel_cache
from eagerc.runtime.executor import run_graph


def _traced(fn, *arrays):
    ts = tuple(eagerc.tensor(a) for a in arrays)
    graph, _, tracer = trace(fn, ts)
    env = {f"arg{i}": a for i, a in enumerate(arrays)}
    env.update({name: t._array for name, t in tracer.externals.items()})
    return optimize(graph, CLEANUP), env


def _run(graph, env):
    outs, _ = run_graph(graph, env)
    return [np.asarray(o) for o in outs]


def _ops(graph):
    return [n.op for n in graph.nodes]


def test_batch_times_matrix_becomes_one_product():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 5, 7)), rng.standard_normal((7, 4))
    graph, env = _traced(lambda x, y: (x @ y).relu(), a, b)
    out = layout(graph)
    (mm,) = [n for n in out.nodes if n.op == "matmul"]
    assert [tuple(v.shape) for v in mm.inputs] == [(15, 7), (7, 4)] and tuple(mm.out.shape) == (15, 4)
    np.testing.assert_allclose(_run(out, env)[0], np.maximum(a @ b, 0), rtol=1e-13)
    # a matrix times a matrix, or a batch times a batch, stays
    for x, y in ((rng.standard_normal((5, 7)), b), (a, rng.standard_normal((3, 7, 4)))):
        g, _ = _traced(lambda x, y: x @ y, x, y)
        assert _ops(layout(g)) == _ops(g)


def _heads(t):
    """(B, H, T, D) -> (B, T, H*D), as attention joins its heads."""
    B, H, T, D = t.shape
    return t.permute(0, 2, 1, 3).reshape(B, T, H * D)


def test_cat_of_reshaped_views_copies_once():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 4, 5)) for _ in range(3))
    graph, env = _traced(lambda q, k, v: eagerc.cat([_heads(q), _heads(k), _heads(v)], dim=2) * 2, q, k, v)
    out = layout(graph)
    (c,) = [n for n in out.nodes if n.op == "cat"]
    assert [n.op for n in graph.nodes if n.op in ("reshape", "cat")].count("reshape") == 3
    assert all(x.name in {n.out.name for n in out.nodes if n.op == "permute"} for x in c.inputs)
    assert tuple(c.out.shape) == (2, 4, 9, 5) and c.attrs == {"dim": 2}
    want = np.concatenate([t.transpose(0, 2, 1, 3).reshape(2, 4, 15) for t in (q, k, v)], axis=2) * 2
    np.testing.assert_array_equal(_run(out, env)[0], want)


def test_cat_with_different_inner_sizes_or_shared_reshapes_stays():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 2, 6))
    g, _ = _traced(lambda x, y: eagerc.cat([x.reshape(2, 12), y.reshape(2, 12)], dim=1), a, b)
    assert _ops(layout(g)) == _ops(g)              # inner sizes 4 and 6 differ
    g, _ = _traced(lambda x: eagerc.cat([x.reshape(2, 12), x.reshape(2, 12) * 2], dim=1), a)
    assert "cat" in _ops(layout(g)) and [n for n in layout(g).nodes if n.op == "cat"][0].inputs[0].shape == (2, 12)


def test_second_reshape_of_a_value_reshapes_the_first():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5))

    def fn(t):
        p = t.permute(0, 2, 1, 3)
        return (p.reshape(2, 4, 15) * 3).sum(), (p.reshape(8, 15) + 1).sum(0)
    graph, env = _traced(fn, x)
    out = layout(graph)
    firsts = [n for n in out.nodes if n.op == "reshape" and n.inputs[0].name.startswith("t")
              and any(m.op == "permute" and m.out is n.inputs[0] for m in out.nodes)]
    assert len(firsts) == 1                        # the other reshapes the first's result
    p = x.transpose(0, 2, 1, 3)
    got = _run(out, env)
    np.testing.assert_allclose(got[0], (p.reshape(2, 4, 15) * 3).sum(), rtol=1e-13)
    np.testing.assert_allclose(got[1], (p.reshape(8, 15) + 1).sum(0), rtol=1e-13)


def test_sum_of_flattened_rows_sums_the_leading_dims():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 5))
    graph, env = _traced(lambda t: ((t * 2).reshape(12, 5).sum(0), (t + 1).reshape(12, 5).sum(0, keepdim=True),
                                    (t - 1).reshape(3, 20).sum(0)), x)
    out = layout(graph)
    sums = [n for n in out.nodes if n.op == "sum"]
    # the first reads the product itself over dims (0, 1); keepdim, and a reshape that merges
    # trailing dims (3, 4, 5) -> (3, 20), stay sums of their reshapes
    assert sums[0].attrs["dim"] == (0, 1) and tuple(sums[0].inputs[0].shape) == (3, 4, 5)
    assert [tuple(n.inputs[0].shape) for n in sums[1:]] == [(12, 5), (3, 20)]
    got = _run(out, env)
    np.testing.assert_allclose(got[0], (2 * x).reshape(12, 5).sum(0), rtol=1e-13)
    np.testing.assert_allclose(got[1], (x + 1).reshape(12, 5).sum(0, keepdims=True), rtol=1e-13)
    np.testing.assert_allclose(got[2], (x - 1).reshape(3, 20).sum(0), rtol=1e-13)


@pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")
def test_bias_gradient_closes_the_kernel_of_its_gradient_with_the_same_bits(kernel_cache_dir):
    # gelu backward's product and the bias gradient of the linear before it: one kernel that
    # writes the product and sums it, giving the bits of the separate sum (rows in order)
    rng = np.random.default_rng(6)
    x, g = rng.standard_normal((4, 8, 16)).astype(np.float32), rng.standard_normal((4, 8, 16)).astype(np.float32)

    def fn(x, g):
        d = x * g
        return d, d.reshape(32, 16).sum(0)
    compiled = eagerc.compile(fn, backend="c")
    compiled(eagerc.tensor(x), eagerc.tensor(g))         # the first call traces (eager values)
    d, b = (t.numpy() for t in compiled(eagerc.tensor(x), eagerc.tensor(g)))
    (entry,) = compiled.entries.values()
    assert entry.program.c_source.count("void k_") == 1
    want = x * g
    np.testing.assert_array_equal(d, want)
    # the kernel's double accumulation, rows in order, rounded once
    acc = np.zeros(16)
    for row in want.reshape(32, 16).astype(np.float64):
        acc += row
    np.testing.assert_array_equal(b, acc.astype(np.float32))


@pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")
def test_attention_training_step_on_backend_c_matches_numpy(kernel_cache_dir):
    # qkv split -> heads -> causal attention -> joined heads -> logits over a tied matrix:
    # all three rewrites fire in the backward graph; values against numpy formulas
    rng = np.random.default_rng(4)
    B, T, C, H = 2, 6, 8, 2
    x = rng.standard_normal((B, T, C))
    w = rng.standard_normal((3 * C, C)) * 0.3
    e = rng.standard_normal((11, C))

    def step(x, w, e):
        w, e = w.detach().requires_grad_(), e.detach().requires_grad_()
        q, k, v = (x @ w.T).split(C, dim=2)
        q, k, v = (t.reshape(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = eagerc.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        logits = y.transpose(1, 2).reshape(B, T, C) @ e.T
        loss = (logits * logits).sum()
        return (loss.detach(),) + tuple(eagerc.autograd.grad(loss, (w, e)))
    compiled = eagerc.compile(step, backend="c")
    compiled(eagerc.tensor(x), eagerc.tensor(w), eagerc.tensor(e))   # the first call traces: eager's results
    got = [t.numpy() for t in compiled(eagerc.tensor(x), eagerc.tensor(w), eagerc.tensor(e))]
    graph = next(iter(compiled.entries.values())).graph
    assert not any(n.op == "matmul" and len(n.inputs[0].shape) == 3 and len(n.inputs[1].shape) == 2
                   for n in graph.nodes)

    qkv = x @ w.T
    q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, H, C // H).transpose(0, 2, 1, 3) for i in range(3))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(C // H)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = (p @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    logits = y @ e.T
    gl = 2 * logits
    ge = gl.reshape(-1, 11).T @ y.reshape(-1, C)
    gy = (gl @ e).reshape(B, T, H, C // H).transpose(0, 2, 1, 3)
    gp = gy @ v.transpose(0, 1, 3, 2)
    gv = p.transpose(0, 1, 3, 2) @ gy
    gs = p * (gp - (gp * p).sum(-1, keepdims=True)) / np.sqrt(C // H)
    gq, gk = gs @ k, gs.transpose(0, 1, 3, 2) @ q
    gqkv = np.concatenate([t.transpose(0, 2, 1, 3).reshape(B, T, C) for t in (gq, gk, gv)], axis=2)
    gw = gqkv.reshape(-1, 3 * C).T @ x.reshape(-1, C)
    for a, b in zip(got, ((logits * logits).sum(), gw, ge)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_cat_returns_c_order_so_the_reshape_after_it_is_a_view():
    """cat's kernel returns C order whatever its inputs' strides (as torch.cat does): numpy's
    concatenate kept the head-major order of permuted pieces, and the reshape this pass puts
    after the cat copied everything a second time."""
    from eagerc.runtime.ops import OPS
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 3, 4, 5)).transpose(0, 2, 1, 3) for _ in range(3))
    for dim in (2, -2, 0):
        out = OPS["cat"].cpu(q, k, v, dim=dim)
        assert out.flags.c_contiguous
        np.testing.assert_array_equal(out, np.concatenate([q, k, v], axis=dim))
    mixed = OPS["cat"].cpu(q.astype(np.int32), k.astype(np.float32), dim=1)   # numpy's promotion, kept
    want = np.concatenate([q.astype(np.int32), k.astype(np.float32)], axis=1)
    assert mixed.dtype == want.dtype and mixed.flags.c_contiguous
    np.testing.assert_array_equal(mixed, want)
    joined = OPS["cat"].cpu(q, k, v, dim=2)
    assert np.shares_memory(joined.reshape(2, 4, 45), joined)
    t = eagerc.cat([eagerc.tensor(q), eagerc.tensor(k)], dim=1)
    assert t.is_contiguous() and np.array_equal(t.numpy(), np.concatenate([q, k], axis=1))
