"""Lowering is shared between identical fusion groups (compiler/kernels/lower.py's memo):
a stack of 2 or 8 identical blocks gives the same distinct kernels, lowers each structure
once, and every shared Kernel equals the one a fresh lowering of its own group gives."""
import math

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
from eagerc.compiler.backends import c_backend
from eagerc.compiler.backends.fused import PIPELINE, plan_kernels
from eagerc.compiler.kernels import lower
from eagerc.compiler.passes import optimize
from eagerc.compiler.tracer import trace
from eagerc.runtime import kernel_cache

D = 32


def _blocks(n):
    def fn(x, *params):
        for w, b in zip(params[:n], params[n:]):
            h = F.layer_norm(x, (D,))
            x = x + F.gelu(F.softmax(h * b + 0.5, -1) @ w, approximate="tanh")
        return x
    return fn


def _arrays(n):
    rng = np.random.default_rng(5)
    return ([rng.standard_normal((16, D))] + [rng.standard_normal((D, D)) / 6 for _ in range(n)]
            + [rng.standard_normal(D) for _ in range(n)])


def _reference(x, *params):
    n = len(params) // 2
    for w, b in zip(params[:n], params[n:]):
        h = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        z = h * b + 0.5
        e = np.exp(z - z.max(-1, keepdims=True))
        y = (e / e.sum(-1, keepdims=True)) @ w
        x = x + 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
    return x


def _graph(n):
    arrays = _arrays(n)
    graph, _, _ = trace(_blocks(n), tuple(eagerc.tensor(a) for a in arrays))
    assert graph is not None
    return optimize(graph, PIPELINE), arrays


class _NoMemo(dict):
    """A memo that never remembers: every group lowered afresh."""
    def __setitem__(self, key, value):
        pass


def _plan(graph, monkeypatch, memo):
    monkeypatch.setattr(lower, "_memo", memo)
    before = dict(lower.stats)
    plan = plan_kernels(graph, 0)
    return [k for _, _, k in plan], {s: lower.stats[s] - before[s] for s in before}


def test_identical_layers_lower_once_and_share_kernels(monkeypatch):
    runs = {}
    for n in (2, 8):
        graph, _ = _graph(n)
        kernels, counts = _plan(graph, monkeypatch, {})
        fresh, fresh_counts = _plan(graph, monkeypatch, _NoMemo())
        # a shared Kernel is exactly what lowering its own group gives (its own value names too)
        assert kernels == fresh and fresh_counts["shared"] == 0 and fresh_counts["lowered"] == len(fresh)
        runs[n] = kernels, counts
    (k2, c2), (k8, c8) = runs[2], runs[8]
    # the first block starts from x and the last one ends the stack: each other block is one
    # kernel (residual + gelu of one block, layer_norm + softmax of the next), the same each time
    assert len(k8) - len(k2) == 6
    # the 6 extra blocks' kernels all come from the memo: no more lowering work than 2 blocks
    assert c8["lowered"] == c2["lowered"] < len(k8)
    assert c8["shared"] - c2["shared"] == 6
    # ... and the same distinct C functions
    f2 = {name for name, _ in c_backend.functions(k2)[1]}
    f8 = {name for name, _ in c_backend.functions(k8)[1]}
    assert f2 == f8 and len(f8) < len(k8)


@pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="needs a C compiler")
def test_shared_lowering_computes_the_blocks(monkeypatch, tmp_path):
    monkeypatch.setenv("EAGERC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(lower, "_memo", {})
    graph, arrays = _graph(8)
    program = c_backend.CBackend(singleton_min=0).compile(graph)
    assert len(program.kernels) > len(set(program.functions.values()))
    env = {f"arg{i}": a for i, a in enumerate(arrays)}
    got = program(env)[0][0]
    np.testing.assert_allclose(got, _reference(*arrays), rtol=1e-10, atol=1e-12)


def test_one_walk_gives_every_prefix_signature():
    # plan_kernels walks a group once (lower.walk_group) and tries its prefixes with it: each
    # prefix's signature must be exactly the one a walk of that prefix alone gives
    graph, _ = _graph(2)
    readers = {}
    for n in graph.nodes:
        for x in n.input_values():
            readers.setdefault(x.name, set()).add(n.out.name)
    index = {n.out.name: i for i, n in enumerate(graph.nodes)}
    groups = [[graph.nodes[index[m]] for m in g] for g in graph.fusion_groups if len(g) > 2]
    assert groups
    for nodes in groups:
        walk = lower.walk_group(nodes)
        for cut in range(1, len(nodes) + 1):
            part = nodes[:cut]
            members = {n.out.name for n in part}
            needed = {m for m in members if readers.get(m, set()) - members}
            assert lower.signature(part, needed, walk) == lower.signature(part, needed)


def test_a_refused_structure_is_refused_again_from_the_memo(monkeypatch):
    # a group that does not lower is remembered by its structure: the second one raises too,
    # without lowering (stats["refused"]), with the first one's reason
    monkeypatch.setattr(lower, "_memo", {})
    from eagerc.runtime.ir import Node, Value
    def group(suffix):
        x = Value("x" + suffix, (4, 8), "float32")
        s = Node("sum", [x], {"dim": 0, "keepdim": True}, Value("s" + suffix, (1, 8), "float32"))
        e = Node("exp", [s.out], {}, Value("e" + suffix, (1, 8), "float32"))
        return [s, e]
    with pytest.raises(lower.Unsupported) as first:
        lower.lower_group(group("a"), {"ea"})
    before = dict(lower.stats)
    with pytest.raises(lower.Unsupported) as second:
        lower.lower_group(group("b"), {"eb"})
    assert lower.stats["refused"] == before["refused"] + 1 and lower.stats["lowered"] == before["lowered"]
    assert str(second.value) == str(first.value)
