"""A loaded program's plan binds its kernels and buffers once (runtime/bind.py): outputs are
eager's (and bit for bit the unbound executor's), buffers are reused across calls but never
handed to the caller, busy plans fall back to an unbound twin, and attributes that reach
generated C are checked before anything is built."""
import json
import math
import os
import sys
import threading

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
from eagerc.compiler.export import export
from eagerc.runtime import bind as rb, executor, kernel_cache
from eagerc.runtime.executor import Plan
from eagerc.runtime.ir import Graph, Node, Value
from eagerc.runtime.program import ProgramRunError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples.char_gpt import GPT  # noqa: E402

VOCAB = 40


def _gpt():
    eagerc.manual_seed(0)
    m = GPT(vocab_size=VOCAB, block_size=32, n_layer=2, n_embd=64, n_head=4)
    return m.eval()


def _tokens(b, t, seed):
    return np.random.default_rng(seed).integers(0, VOCAB, (b, t))


def _eager(model, idx):
    with eagerc.no_grad():
        return model(eagerc.tensor(idx)).numpy()


@pytest.fixture(scope="module")
def gpt():
    """The char-GPT demo model (2 layers x 64) exported static (4 x 32 tokens) and with a dynamic batch."""
    m = _gpt()
    static = export(m, (eagerc.tensor(_tokens(4, 32, 0)),)).loaded()
    dynamic = export(m, (eagerc.tensor(_tokens(4, 32, 0)),), dynamic_shapes=({0: "batch"},)).loaded()
    return m, static, dynamic


def _unbound(prog, *inputs):
    """The same program run by the executor without bound kernels (the reference bits)."""
    plan = prog._plan(np, {n: a.shape[0] for n, a in zip(prog._dims, inputs)} or None)
    env = dict(prog.weights, **{name: a for (name, _, _, _), a in zip(prog._specs, inputs)})
    return Plan(plan.graph, np, check=True)(env)[0][0]


def test_gpt_binds_its_kernels_and_matches_eager_and_the_unbound_plan(gpt):
    model, prog, _ = gpt
    bound = rb.bind(prog.graph)
    ops = {n.op for n in prog.graph.nodes if n.out.name in bound}
    assert {"linear", "layer_norm", "softmax", "gelu", "add", "matmul", "where"} <= ops
    kept = [n.op for n in prog.graph.nodes if getattr(bound.get(n.out.name), "__name__", "") == "once"]
    assert kept == ["arange", "unsqueeze", "ge"]    # the causal mask, from constants alone
    for seed in (1, 2):
        idx = _tokens(4, 32, seed)
        got = prog(idx)
        np.testing.assert_allclose(got, _eager(model, idx), rtol=1e-5, atol=1e-5)
        assert np.array_equal(got, _unbound(prog, idx))   # same kernels, same BLAS calls: same bits


def test_dynamic_batch_program_binds_each_size(gpt):
    model, _, prog = gpt
    for b in (1, 3, 4, 7, 3):
        idx = _tokens(b, 32, b)
        got = prog(idx)
        assert got.shape == (b, 32, VOCAB)
        np.testing.assert_allclose(got, _eager(model, idx), rtol=1e-5, atol=1e-5)
        assert np.array_equal(got, _unbound(prog, idx))


def test_results_of_two_calls_are_both_intact_and_share_no_memory(gpt):
    model, prog, _ = gpt
    a, b = _tokens(4, 32, 5), _tokens(4, 32, 6)
    out_a = prog(a)
    want_a = out_a.copy()
    out_b = prog(b)
    assert np.array_equal(out_a, want_a)        # the second call wrote nothing into the first's result
    assert not np.shares_memory(out_a, out_b)
    np.testing.assert_allclose(out_b, _eager(model, b), rtol=1e-5, atol=1e-5)
    out_a[...] = 0                                # results are the caller's to write
    np.testing.assert_allclose(prog(b), out_b, rtol=0, atol=0)


def test_a_value_from_constants_is_kept_but_a_returned_one_is_fresh_every_call():
    def f(x):
        r = eagerc.arange(6.0)
        return x * (r * 2.0), r
    x = np.arange(6, dtype=np.float32)
    prog = export(f, (x,)).loaded()
    (y1, r1), (y2, r2) = prog(x), prog(x + 1)
    np.testing.assert_array_equal(y1, x * np.arange(6.0, dtype=np.float32) * 2)
    np.testing.assert_array_equal(y2, (x + 1) * np.arange(6.0, dtype=np.float32) * 2)
    np.testing.assert_array_equal(r1, np.arange(6.0, dtype=np.float32))
    assert r1.flags.writeable and not np.shares_memory(r1, r2)
    r1[...] = -1                                    # the caller's to change: the program keeps its own
    np.testing.assert_array_equal(prog(x)[0], y1)


def test_buffers_are_reused_across_calls_and_shared_by_disjoint_values(gpt):
    _, prog, _ = gpt
    idx = _tokens(4, 32, 1)
    seen = []

    def observe(node, kernel, args, attrs):
        r = kernel(*args, **attrs)
        seen.append((node.out.name, r.__array_interface__["data"][0]))
        return r
    prog(idx)
    for _ in range(2):
        executor.set_observer(observe)
        try:
            prog(idx)
        finally:
            executor.set_observer(None)
    first, second = seen[:len(seen) // 2], seen[len(seen) // 2:]
    g = prog.graph
    outs = rb.buffers(g, set(range(len(g.nodes))))     # every node a writer: the planner's own view
    in_buffers = {g.nodes[i].out.name for i in outs}
    bound = set(rb.bind(g))
    same = [n for (n, p), (_, q) in zip(first, second) if p == q and n in bound and n in in_buffers]
    assert len(same) >= 20                            # bound values land where they did last call
    addresses = {p for n, p in first if n in same}
    assert len(addresses) < len(same)                 # and values whose lifetimes are disjoint share
    assert g.outputs[0].name not in in_buffers


def test_buffer_lifetimes_follow_views():
    """t0 is read last through its view t1 (at the final add): a planner that forgot views would
    hand t0's buffer to t2, of the same dtype and size, while t1 is still to be read."""
    f32 = "float32"
    x, t0, t1, t2, t3, t4 = (Value("x", (4, 8), f32), Value("t0", (4, 8), f32), Value("t1", (32,), f32),
                             Value("t2", (4, 8), f32), Value("t3", (32,), f32), Value("t4", (32,), f32))
    nodes = [Node("exp", [x], {}, t0), Node("reshape", [t0], {"shape": [32]}, t1), Node("mul", [x, 2.0], {}, t2),
             Node("reshape", [t2], {"shape": [32]}, t4), Node("add", [t1, t4], {}, t3)]
    g = Graph([("arg", x)], nodes, [t3])
    outs = rb.buffers(g, {0, 2, 4})
    assert set(outs) == {0, 2} and not np.shares_memory(outs[0], outs[2])   # t3 is returned: no buffer
    bound = rb.bind(g)
    assert set(bound) == {"t0", "t2"}
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    plan = Plan(g, check=True, bound=bound)
    for _ in range(2):
        got = plan({"x": a})[0][0]
        np.testing.assert_array_equal(got, (np.exp(a) + a * np.float32(2)).reshape(32))


def test_shared_buffers_hold_no_two_values_alive_at_once(gpt):
    """bind plans with the compiler's planner (runtime/memplan.py), so buffers of one dtype are
    shared across sizes. Checked against the memory an unbound run really shares: two values in
    overlapping buffer memory must have disjoint lifetimes, a lifetime ending at the last node
    that reads the value or any array sharing its memory (a view) in that run. And the plan
    takes no more bytes than pooling by exact dtype and size (the planner bind had before)."""
    _, prog, _ = gpt
    g = prog.graph
    idx = _tokens(4, 32, 1)
    arrays = {}

    def keep(node, kernel, args, attrs):
        arrays[node.out.name] = r = np.asarray(kernel(*args, **attrs))
        return r
    plan = prog._plan(np, None)
    env = dict(prog.weights, **{name: a for (name, _, _, _), a in zip(prog._specs, [idx])})
    Plan(plan.graph, np, check=True)(env, observe=keep)
    index = {n.out.name: i for i, n in enumerate(g.nodes)}
    reads = {}
    for i, n in enumerate(g.nodes):
        for v in n.input_values():
            reads.setdefault(v.name, []).append(i)
    end = {}
    for a in index:
        sharing = [b for b in index if b == a or np.may_share_memory(arrays[a], arrays[b])]
        end[a] = max(j for b in sharing for j in reads.get(b, [index[b]]))
    outs = rb.buffers(g, set(range(len(g.nodes))))
    placed = [(g.nodes[i].out.name, a) for i, a in outs.items()]
    assert len(placed) > 30
    for k, (a, x) in enumerate(placed):
        for b, y in placed[k + 1:]:
            if np.may_share_memory(x, y):
                assert end[a] < index[b] or end[b] < index[a], (a, b)
    received = [arrays[v.name] for v in g.outputs]
    assert not any(np.may_share_memory(arrays[a], r) for a, _ in placed for r in received)
    # the exact-size pool: a buffer per (dtype, size) in node order, free after its value's end
    free, release, pooled = {}, {}, 0
    for i, n in enumerate(g.nodes):
        if i in outs:
            key = (outs[i].dtype, outs[i].size)
            if free.get(key):
                free[key].pop()
            else:
                pooled += outs[i].nbytes
            release.setdefault(end[n.out.name], []).append(key)
        for key in release.pop(i, ()):
            free.setdefault(key, []).append(key)
    planned = sum({id(a.base): a.base.size * a.itemsize for _, a in placed}.values())
    assert planned <= pooled


def test_a_strided_input_runs_the_ops_own_kernel():
    """layer_norm over a transposed input: the bound row kernel needs C-contiguous rows, so that
    call takes the op's kernel (same values as eager)."""
    eagerc.manual_seed(0)
    w, b = eagerc.randn(16), eagerc.randn(16)

    def f(x):
        return F.layer_norm(x.transpose(1, 2), (16,), w, b) * 2.0
    x = np.random.default_rng(0).standard_normal((4, 16, 64)).astype(np.float32)
    prog = export(f, (x,)).loaded()
    with eagerc.no_grad():
        want = f(eagerc.tensor(x)).numpy()
    np.testing.assert_allclose(prog(x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(prog(x + 1), f(eagerc.tensor(x + 1)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_a_busy_plan_runs_the_call_on_an_unbound_twin(gpt):
    """An observer that calls the program again (or a second thread) finds the buffers in use:
    that call allocates, and both results are right."""
    model, prog, _ = gpt
    a, b = _tokens(4, 32, 7), _tokens(4, 32, 8)
    inner = []

    def observe(node, kernel, args, attrs):
        if not inner:
            inner.append(None)
            inner[0] = prog(b)    # observed too: its nodes find `inner` set
        return kernel(*args, **attrs)
    executor.set_observer(observe)
    try:
        out_a = prog(a)
    finally:
        executor.set_observer(None)
    np.testing.assert_allclose(out_a, _eager(model, a), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inner[0], _eager(model, b), rtol=1e-5, atol=1e-5)
    want = {s: prog(_tokens(4, 32, s)) for s in range(4)}
    errors = []

    def worker(s):
        for _ in range(5):
            if not np.array_equal(prog(_tokens(4, 32, s)), want[s]):
                errors.append(s)
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("op, attrs", [
    ("layer_norm", {"normalized_shape": [64], "eps": "1e-5f); system(\"touch /tmp/pwned\"); (0"}),
    ("layer_norm", {"normalized_shape": [64], "eps": math.inf}),
    ("layer_norm", {"normalized_shape": [64], "eps": [1e-5]}),
    ("gelu", {"approximate": "none\");system(\"x\");//"}),
    ("softmax", {"dim": "-1) + system(\"x\""}),
])
def test_hostile_attributes_bind_nothing(op, attrs):
    """Attributes that would reach a row kernel's name or source are checked before a node binds:
    a string where a number belongs, a non-finite eps, an unknown gelu form."""
    x, w = Value("x", (128, 64), "float32"), Value("w", (64,), "float32")
    out = Value("y", (128, 64), "float32")
    inputs = {"layer_norm": [x, w, w], "gelu": [x], "softmax": [x]}[op]
    assert rb._rows(Node(op, inputs, attrs, out)) is None
    good = {"layer_norm": {"normalized_shape": [64], "eps": 1e-5}, "gelu": {"approximate": "tanh"},
            "softmax": {"dim": -1}}[op]
    assert rb._rows(Node(op, inputs, good, out)) is not None


def test_a_hostile_eps_in_a_file_never_reaches_a_compiler(monkeypatch):
    """A program whose layer_norm eps is C source: the loader's shape rule lets the string through
    (eps is no shape), and running it fails as a ProgramRunError naming the node -- with no
    source containing it ever handed to the C compiler."""
    from eagerc.runtime import program as rp
    eagerc.manual_seed(0)
    tensors, meta = export(eagerc.nn.LayerNorm(64), (eagerc.randn(128, 64),)).parts()
    g = json.loads(meta["graph"])
    evil = "1e-5f); system(\"touch /tmp/pwned\"); (0"
    (node,) = [nd for nd in g["nodes"] if nd["op"] == "layer_norm"]
    node["attrs"]["eps"] = evil
    meta["graph"] = json.dumps(g)
    sources = []
    real = kernel_cache.load
    monkeypatch.setattr(kernel_cache, "load", lambda src, *a, **k: (sources.append(src), real(src, *a, **k))[1])
    loaded = rp.from_parts(tensors, meta, where="evil.eagerc")
    assert rb.bind(loaded.graph) == {}
    with pytest.raises(ProgramRunError, match="^evil.eagerc: layer_norm -> "):
        loaded(np.zeros((128, 64), np.float32))
    assert not any("system" in s for s in sources)
