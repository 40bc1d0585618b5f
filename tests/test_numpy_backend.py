"""The numpy backend: generated source over numpy, against the interpreter and eager mode.

Each check runs the same computation three ways -- eager, the reference interpreter
(backend="interpreter") and the generated program (backend="numpy") -- and compares
values, then looks at what was generated: readable, deterministic source registered
with linecache, planned buffers that never leak from one call into the next, and a
memory plan checked before it is followed.
"""
import copy
import threading
import traceback

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.compiler.backends import get_backend
from eagerc.compiler.backends.numpy_backend import NumpyBackend, _checked_table, build_program, plan_memory, render
from eagerc.compiler.tracer import trace
from eagerc.runtime import random as R
from eagerc.runtime.executor import run_graph
from eagerc.runtime.ir import Graph, MemoryPlan, Node, Value
from eagerc.runtime.ops import OPS


# ---------------------------------------------------------------- helpers

def _trace(fn, *args, modules=None):
    graph, result, tracer = trace(fn, args, modules=modules)
    assert graph is not None, tracer.broken
    env = {f"arg{i}": a._array for i, a in enumerate(args)}
    env.update({name: t._array for name, t in tracer.externals.items()})
    return graph, result, env


def _three_ways(fn, inputs, rtol=0.0):
    """Compile `fn` with both backends; every input after the first runs compiled.
    Returns the numpy-backend CompiledFunction."""
    comp = eagerc.compile(fn, backend="numpy")
    interp = eagerc.compile(fn, backend="interpreter")
    for args in inputs:
        want = fn(*args)
        got_c, got_i = comp(*args), interp(*args)
        for w, c, i in zip(_flat(want), _flat(got_c), _flat(got_i)):
            assert c.dtype == w.dtype and c.shape == w.shape
            np.testing.assert_allclose(c.numpy(), w.numpy(), rtol=rtol, atol=0)
            np.testing.assert_array_equal(c.numpy(), i.numpy())
    assert comp.traces == 1, comp.log
    assert all(e.calls == len(inputs) - 1 for e in comp.entries.values())
    return comp


def _flat(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _mlp(seed=0, dtype=eagerc.float32):
    eagerc.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                         nn.Linear(32, 4)).to(dtype)


def _rand(*shape, seed=0, dtype=np.float32):
    return eagerc.tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


# ---------------------------------------------------------------- registration

def test_registered_as_numpy():
    assert isinstance(get_backend("numpy"), NumpyBackend)
    assert eagerc.compile(lambda x: x + 1, backend="numpy").backend_name == "numpy"


# ---------------------------------------------------------------- compiled == interpreter == eager

def test_mlp_inference():
    model = _mlp()
    with eagerc.no_grad():
        comp = _three_ways(model, [(_rand(8, 16, seed=s),) for s in range(4)])
    src = comp.code()
    assert "k_linear = OPS['linear'].cpu" in src
    assert "np.maximum(" in src and "np.tanh(" in src
    assert "(0)" in src and "(2)" in src   # module paths in the line comments


def test_mlp_float64_and_batch_change():
    model = _mlp(dtype=eagerc.float64)
    with eagerc.no_grad():
        _three_ways(model, [(_rand(5, 16, seed=s, dtype=np.float64),) for s in range(3)])
        _three_ways(model, [(_rand(1, 16, seed=s, dtype=np.float64),) for s in range(3)])


def test_elementwise_chain_with_broadcasting():
    def f(a, b, c):
        x = a * 2.0 + b                 # (4,5) op (5,)
        y = (x - c).exp() / (1 + x * x)  # (4,5) op (4,1)
        z = eagerc.maximum(y, b).clamp(-1.0, 3.0).sqrt()
        w = eagerc.where(z > 0.5, z, -z) ** 2
        return w.neg().abs() + x.sigmoid(), (a < c) & (b >= 0)
    inputs = [(_rand(4, 5, seed=s), _rand(5, seed=s + 10), _rand(4, 1, seed=s + 20)) for s in range(3)]
    comp = _three_ways(f, inputs)
    src = comp.code()
    assert "out=" in src


def test_integer_and_bool_elementwise():
    def f(i, j, m):
        k = (i * 3 + j) // 2 - (i % 3)
        return k, k.float() / 2, ~m | (i > j), (k & 6) ^ j
    rng = np.random.default_rng(0)
    inputs = [(eagerc.tensor(rng.integers(-9, 9, (3, 4))), eagerc.tensor(rng.integers(1, 9, (4,))),
               eagerc.tensor(rng.random((3, 4)) < 0.5)) for _ in range(3)]
    _three_ways(f, inputs)


def test_reductions():
    def f(x):
        a = x.sum(1, keepdim=True)
        b = x.mean()                      # 0-d
        c = (x - a).amax(0)
        d = x.argmax(1)
        e = (x * x).sum() + b             # 0-d chain: numpy scalars become 0-d arrays
        return a, b, c, d, e, x.cumsum(0), (x > 0).any(1), x.prod(0)
    _three_ways(f, [(_rand(3, 6, seed=s),) for s in range(3)])


def test_zero_d_results_are_arrays():
    def f(x):
        s = x.sum()
        return s * 2 + 1, s.exp()
    graph, _, env = _trace(f, _rand(3))
    outs, _ = build_program(graph)(env)
    assert all(type(o) is np.ndarray and o.shape == () for o in outs)


def test_indexing():
    def f(x, idx):
        a = x[1:, ::2] * 2
        b = x[idx] + 1                   # advanced indexing
        c = x.gather(1, eagerc.zeros((4, 2), dtype=eagerc.int64))
        d = x[..., None].squeeze(-1).T.reshape(-1)
        return a, b, c, d, x[0, 1]
    rng = np.random.default_rng(0)
    inputs = [(_rand(4, 5, seed=s), eagerc.tensor(rng.integers(0, 4, (3,)))) for s in range(3)]
    _three_ways(f, inputs)


def test_softmax_layer_norm_and_losses():
    ln = nn.LayerNorm(6)
    target = eagerc.tensor(np.array([0, 2, 1, 5]))

    def f(x):
        h = ln(x)
        return F.softmax(h, -1), F.cross_entropy(h, target), F.gelu(h).sum(0)
    with eagerc.no_grad():
        _three_ways(f, [(_rand(4, 6, seed=s),) for s in range(3)])


def test_random_ops_match_eager_for_the_same_seed():
    def f(x):
        return x + eagerc.rand(3, 4), eagerc.randn(3, 4) * x, F.dropout(x, 0.5, training=True)
    comp = eagerc.compile(f)
    x = _rand(3, 4)
    eagerc.manual_seed(123)
    eager = [f(x) for _ in range(4)]
    eagerc.manual_seed(123)
    compiled = [comp(x) for _ in range(4)]       # the first call traces, the others are compiled
    assert comp.traces == 1
    for e, c in zip(eager, compiled):
        for a, b in zip(e, c):
            np.testing.assert_array_equal(b.numpy(), a.numpy())
    assert not np.array_equal(compiled[1][0].numpy(), compiled[2][0].numpy())  # fresh draws per call
    assert "per_call(overrides, 't" in comp.code()


def test_random_offsets_come_from_overrides():
    def f(x):
        return eagerc.randn(2, 3) + x
    graph, result, env = _trace(f, _rand(3))
    node = next(n for n in graph.nodes if n.op == "normal")
    program = build_program(graph)
    out, _ = program(env)   # no overrides: the offsets recorded when tracing
    np.testing.assert_array_equal(out[0], result._array)
    out, _ = program(env, {node.out.name: {"offset": 1000}})
    want = R.normal(node.attrs["seed"], 1000, (2, 3), np.float32) + env["arg0"]
    np.testing.assert_array_equal(out[0], want)


def test_overrides_set_seed_and_offset_and_never_change_fixed_attributes():
    def f(x):
        return eagerc.randn(2, 3) + x.exp()
    graph, result, env = _trace(f, _rand(3))
    node = next(n for n in graph.nodes if n.op == "normal")
    program = build_program(graph)
    out, _ = program(env, {node.out.name: {"seed": 5, "offset": 8}, "not_in_graph": {"offset": 1}})
    np.testing.assert_array_equal(out[0], R.normal(5, 8, (2, 3), np.float32) + np.exp(env["arg0"]))
    other = next(n for n in graph.nodes if n.op != "normal")
    program(env, {other.out.name: dict(other.attrs)})            # repeating the recorded values is fine
    with pytest.raises(ValueError, match="fixed"):
        program(env, {other.out.name: {"approximate": "tanh"}})   # a change it cannot honour: loud


def test_dynamic_graph_one_program_for_all_sizes():
    model = _mlp()

    def f(x):
        h = model(x)
        return h.reshape(-1, 2).softmax(-1), h.mean(0)
    comp = eagerc.compile(f, dynamic=True, backend="numpy")
    with eagerc.no_grad():
        for b in range(1, 20):
            x = _rand(b, 16, seed=b)
            for got, want in zip(comp(x), f(x)):
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
    assert comp.traces <= 2, comp.log
    assert "per_call(overrides" in comp.code() and "[s0,16]" in comp.code()


def test_mutations_batchnorm_training():
    eagerc.manual_seed(0)
    bn_e = nn.BatchNorm1d(5)
    bn_c = copy.deepcopy(bn_e)
    comp = eagerc.compile(bn_c)
    with eagerc.no_grad():
        for s in range(4):
            x = _rand(8, 5, seed=s)
            np.testing.assert_allclose(comp(x).numpy(), bn_e(x).numpy(), rtol=1e-6, atol=1e-7)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(bn_c, name).numpy(), getattr(bn_e, name).numpy(), rtol=1e-6)


def test_empty_graph_and_identity():
    def f(x, y):
        return y, x
    graph, _, env = _trace(f, _rand(2), _rand(3))
    outs, muts = build_program(graph)(env)
    assert outs[0] is env["arg1"] and outs[1] is env["arg0"] and muts == []


# ---------------------------------------------------------------- source

def _sample_graph():
    def f(x, w):
        h = (x @ w).relu() * 2 + 1
        return h.sum(1), (h - 3).exp()
    graph, _, env = _trace(f, _rand(4, 3), _rand(3, 5, seed=1))
    return graph, env


def test_source_is_deterministic():
    g1, _ = _sample_graph()
    g2, _ = _sample_graph()
    a, b = build_program(g1), build_program(g2)
    assert a.source == b.source
    assert build_program(Graph.loads(g1.dumps())).source == a.source
    assert a.filename != b.filename           # each program has its own fake file
    assert "0x" not in a.source               # no ids, no addresses


def test_source_reads_like_a_program():
    graph, _ = _sample_graph()
    src = build_program(graph).source
    lines = src.splitlines()
    assert lines[0] == "# Constructed by numpy_backend"
    assert "def program(env, overrides=None):" in src
    # the inputs, listed with their types, read from env in one unpacking
    assert "    (arg0," in src and "f32[4,3] argument" in src and "    ) = INPUTS(env)" in src
    for n in graph.nodes:   # one line per node, with the user's line in its comment
        line = next(ln for ln in lines if ln.lstrip().startswith(n.out.name + " = "))
        assert line.rstrip().split("# ")[-1].startswith("test_numpy_backend.py:")
    assert "del " in src


def test_code_shown_by_compiled_function():
    comp = eagerc.compile(lambda x: (x * 2).exp(), backend="numpy")
    x = _rand(3)
    comp(x)
    assert comp.code().startswith("# Constructed by numpy_backend")
    program = next(iter(comp.entries.values())).program
    assert program.source == comp.code()


def test_literals_and_odd_names():
    inf = float("inf")
    v = Value("layers.0.weight", (3,), "float64")
    x = Value("x", (3,), "float64")
    nodes = [Node("add", [x, v], {}, Value("t0", (3,), "float64")),
             Node("clamp", [Value("t0", (3,), "float64")], {"min": -inf, "max": 1e300},
                  Value("t1", (3,), "float64")),
             Node("mul", [Value("t1", (3,), "float64"), float("nan")], {}, Value("t2", (3,), "float64")),
             Node("add", [Value("t1", (3,), "float64"), 1], {}, Value("np", (3,), "float64"))]
    nodes[1].inputs[0] = nodes[0].out
    nodes[2].inputs[0] = nodes[1].out
    nodes[3].inputs[0] = nodes[1].out
    g = Graph([("arg", x), ("external", v)], nodes, [nodes[2].out, nodes[3].out])
    program = build_program(g)
    assert "float('nan')" in program.source and "-float('inf')" in program.source
    assert "v_np = " in program.source and "     layers_0_weight,  " in program.source
    assert program.__globals__["INPUTS"]({"x": 1, "layers.0.weight": 2}) == (1, 2)
    env = {"x": np.array([1.0, -2.0, 3.0]), "layers.0.weight": np.array([0.5, 0.5, -5.0])}
    a, b = program(env)[0], run_graph(g, env)[0]
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p, q)


def test_non_literal_attribute_is_bound_as_a_global():
    x = Value("x", (2, 3), "float64")
    out = Value("t0", (3, 2), "float64")
    g = Graph([("arg", x)], [Node("permute", [x], {"dims": np.array([1, 0])}, out)], [out])
    program = build_program(g)
    assert "dims=A_0" in program.source
    env = {"x": np.arange(6.0).reshape(2, 3)}
    np.testing.assert_array_equal(program(env)[0][0], env["x"].T)


def test_unused_value_is_freed_at_once():
    x = Value("x", (3,), "float64")
    dead, live = Value("t0", (3,), "float64"), Value("t1", (3,), "float64")
    g = Graph([("arg", x)], [Node("exp", [x], {}, dead), Node("neg", [x], {}, live)], [live])
    src = build_program(g).source
    assert "del t0" in src


# ---------------------------------------------------------------- tracebacks

def test_traceback_shows_the_generated_line():
    def f(x, i):
        return x[i] * 2
    comp = eagerc.compile(f)
    x = _rand(4, 3)
    comp(x, eagerc.tensor(np.array([0, 1])))
    comp(x, eagerc.tensor(np.array([2, 3])))
    with pytest.raises(IndexError) as info:
        comp(x, eagerc.tensor(np.array([0, 7])))   # same guards, out-of-range value: fails inside
    text = "".join(traceback.format_exception(info.value))
    program = next(iter(comp.entries.values())).program
    assert program.filename in text
    line = next(ln for ln in program.source.splitlines() if "k_index(" in ln).strip()
    assert line in text                           # linecache shows the generated line...
    assert "test_numpy_backend.py:" in line       # ...whose comment names the user's line


def test_linecache_entry_goes_with_the_program():
    import gc
    import linecache
    graph, _ = _sample_graph()
    program = build_program(graph)
    name = program.filename
    assert linecache.getline(name, 1).startswith("# Constructed by numpy_backend")
    del program
    gc.collect()
    assert name not in linecache.cache


# ---------------------------------------------------------------- buffers

def _buffered_graph():
    """x -> a = x*2 -> b = a+1 (kept alive by a view) -> outputs from a reduction and a
    fresh result: several intermediates that never escape."""
    def f(x, y):
        a = x * 2.0
        b = a + y
        c = (b * b).sum(0)
        d = (a - 1.0) * b                # a and b are still alive here
        return c, d.tanh()
    return _trace(f, _rand(6, 5), _rand(5, seed=1))


def _planned(graph):
    """The graph through the backend's own pipeline: memplan makes its buffers."""
    from eagerc.compiler.passes import optimize
    return optimize(graph, NumpyBackend.pipeline)


def test_buffers_never_leak_between_calls():
    graph, _, env = _buffered_graph()
    program = build_program(_planned(graph))
    assert program.buffers, program.source    # intermediates go to planned buffers
    ref1, _ = run_graph(graph, env)
    out1, _ = program(env)
    env2 = {k: v * 3 for k, v in env.items()}
    ref2, _ = run_graph(graph, env2)
    out2, _ = program(env2)
    for a, b, r1, r2 in zip(out1, out2, ref1, ref2):
        assert not np.shares_memory(a, b)
        np.testing.assert_array_equal(a, r1)   # the first call's outputs were not overwritten
        np.testing.assert_array_equal(b, r2)
    assert len(program.pool) == 1              # one buffer set, reused


def test_escaping_views_are_never_buffers():
    def f(x):
        a = x * 2.0                     # returned through a view: must be fresh every call
        b = a + 1.0                     # returned through a view of a view
        return a.reshape(-1), b.T[0], (b * 3).sum()
    graph, _, env = _trace(f, _rand(3, 4))
    program = build_program(graph)
    out1, _ = program(env)
    keep = [o.copy() for o in out1]
    program({"arg0": env["arg0"] + 100})
    for o, k in zip(out1, keep):
        np.testing.assert_array_equal(o, k)


def test_concurrent_calls_use_separate_buffers():
    graph, _, env = _buffered_graph()
    program = build_program(_planned(graph))
    assert program.buffers
    envs = [{k: v + t for k, v in env.items()} for t in range(4)]
    refs = [run_graph(graph, e)[0] for e in envs]
    errors = []

    def work(t):
        try:
            for _ in range(200):
                out, _ = program(envs[t])
                for o, r in zip(out, refs[t]):
                    np.testing.assert_array_equal(o, r)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


def test_in_place_only_into_dying_fresh_values():
    def f(x):
        a = x.exp()                     # fresh, dies at b: b may overwrite it
        b = a * 2.0
        return b, x * 3.0               # x is an input: never written
    graph, _, env = _trace(f, _rand(3, 4))
    program = build_program(graph)
    assert "np.multiply(t0, 2.0, out=t0)" in program.source
    before = env["arg0"].copy()
    program(env)
    np.testing.assert_array_equal(env["arg0"], before)


def test_works_with_and_without_a_memory_plan():
    from eagerc.compiler.passes import optimize
    graph, _, env = _buffered_graph()
    ref, _ = run_graph(graph, env)
    names = [n.out.name for n in graph.nodes]
    outs = {v.name for v in graph.outputs}
    inner = [n for n in names if n not in outs]
    plain = copy.copy(graph)
    plain.memory_plan = None
    foreign = optimize(Graph.loads(graph.dumps()))      # passes.PIPELINE's plan: made for every node
    for g in (plain, _planned(graph), foreign):
        program = build_program(g)
        for _ in range(2):
            out, _ = program(env)
            for o, r in zip(out, ref):
                np.testing.assert_array_equal(o, r)
    assert "in place only: the graph has none" in build_program(plain).source
    assert build_program(plain).buffers == [] and build_program(_planned(graph)).buffers
    big = [("float32", 30)] * 2
    direct = [n.out.name for n in graph.nodes if n.op in ("mul", "add", "sub")]
    alternating = graph.copy(memory_plan=MemoryPlan({n: 0 for n in direct}, {}, big))   # a and b both alive
    with pytest.raises(ValueError, match="memory plan: .* overwrites"):
        build_program(alternating)
    returned = graph.copy(memory_plan=MemoryPlan({graph.outputs[1].name: 0}, {}, big))
    with pytest.raises(ValueError, match="returned or written back"):
        build_program(returned)


def test_the_planners_own_plan_is_followed_unchecked_any_other_is_checked(monkeypatch):
    """check_memory_plan walks the whole graph: it is skipped for the plan the planner just made
    for this very graph, and runs for a plan from a file, built by hand or carried to other nodes."""
    from eagerc.compiler.backends import numpy_backend
    graph, _, env = _buffered_graph()
    ref, _ = run_graph(graph, env)
    planned = _planned(graph)
    loaded = Graph.loads(planned.dumps())
    assert planned.memory_plan.made_for(planned) and planned.memory_plan.made_for(planned.copy())
    assert loaded.memory_plan == planned.memory_plan and not loaded.memory_plan.made_for(loaded)
    moved = graph.copy(memory_plan=planned.memory_plan)          # same names, other node objects
    assert not planned.memory_plan.made_for(moved) and not planned.memory_plan.made_for(graph)
    checked = []
    real = numpy_backend.check_memory_plan
    monkeypatch.setattr(numpy_backend, "check_memory_plan", lambda g: checked.append(g) or real(g))
    for g, check in ((planned, False), (loaded, True)):
        program = build_program(g)
        assert (checked[-1:] == [g]) == check
        for o, r in zip(program(env)[0], ref):
            np.testing.assert_allclose(o, r, rtol=1e-6)
    hand = MemoryPlan(dict(planned.memory_plan.buffer), dict(planned.memory_plan.inplace),
                      planned.memory_plan.buffers)
    build_program(planned.copy(memory_plan=hand))
    assert checked[-1].memory_plan is hand


def test_plan_from_the_passes():
    passes = pytest.importorskip("eagerc.compiler.passes")
    graph, _, env = _buffered_graph()
    ref, _ = run_graph(graph, env)
    opt = passes.optimize(Graph.loads(graph.dumps()))
    program = build_program(opt)
    for _ in range(2):
        out, _ = program(env)
        for o, r in zip(out, ref):
            np.testing.assert_allclose(o, r, rtol=1e-6)


def test_plan_is_followed_when_safe():
    x = Value("x", (4,), "float64")
    t = [Value(f"t{k}", (4,), "float64") for k in range(4)]
    nodes = [Node("mul", [x, 2.0], {}, t[0]), Node("exp", [t[0]], {}, t[1]),
             Node("add", [t[1], x], {}, t[2]), Node("sum", [t[2]], {"dim": None, "keepdim": False},
                                                    Value("t3", (), "float64"))]
    plan = MemoryPlan({"t0": 0, "t1": 0, "t2": 0}, {"t1": "t0", "t2": "t1"}, [("float64", 4)])
    g = Graph([("arg", x)], nodes, [nodes[3].out], memory_plan=plan)
    assert plan_memory(g.copy(memory_plan=None)).memory_plan == plan   # what the pipeline makes
    program = build_program(g)
    assert len(program.buffers) == 1
    assert "np.multiply(x, 2.0, out=buf0)" in program.source
    assert "np.exp(t0, out=t0)" in program.source and "np.add(t1, x, out=t1)" in program.source
    env = {"x": np.arange(4.0)}
    np.testing.assert_array_equal(program(env)[0][0], run_graph(g, env)[0][0])


def test_symbolic_shapes_get_no_buffers():
    x = Value("x", ("s0", 3), "float64")
    a, b = Value("t0", ("s0", 3), "float64"), Value("t1", ("s0", 3), "float64")
    c = Value("t2", ("s0",), "float64")
    nodes = [Node("mul", [x, 2.0], {}, a), Node("add", [a, x], {}, b),
             Node("sum", [a], {"dim": 1, "keepdim": False}, c)]
    g = Graph([("arg", x)], nodes, [b, c])
    program = build_program(g)
    assert program.buffers == []
    for n in (1, 5):
        env = {"x": np.arange(3.0 * n).reshape(n, 3)}
        for p, q in zip(program(env)[0], run_graph(g, env)[0]):
            np.testing.assert_array_equal(p, q)


# ---------------------------------------------------------------- direct ufunc calls are exact

_DTYPES = ["float32", "float64", "int32", "int64", "uint8", "bool"]


def _operands(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):
        return rng.integers(1 if dtype == "uint8" else -4, 5, shape).astype(dtype)
    return (rng.standard_normal(shape) * 2).astype(dtype)


@pytest.mark.parametrize("op", sorted(_checked_table()))
def test_direct_calls_equal_the_kernel(op):
    """For every op the backend may render as a ufunc: over dtypes, scalar operands and
    out= targets (a buffer, in place), the program's values and dtype equal the kernel's."""
    opdef = OPS[op]
    nin = len(opdef.inputs)
    checked = 0
    for dt in _DTYPES:
        for scalar in (None, 2, 0.5, True):
            arrays = [_operands(dt, (3, 4), k) for k in range(nin)]
            ins = list(arrays)
            if scalar is not None and nin == 2:
                ins[1] = scalar
            elif scalar is not None:
                continue
            attrs = {"min": -1, "max": 2} if op == "clamp" else {}
            if op == "clamp" and dt.startswith("float"):
                attrs = {"min": -0.5, "max": 1.5}
            try:
                with np.errstate(all="ignore"):
                    want = opdef.cpu(*ins, **attrs)
            except Exception:
                continue
            want = np.asarray(want)
            x = Value("x", (3, 4), dt)
            vals = [Value(f"y{k}", (3, 4), dt) for k in range(nin)]
            node_ins = [vals[k] if not (k == 1 and scalar is not None) else scalar for k in range(nin)]
            pre = Value("p", (3, 4), dt)
            nodes = []
            if dt != "bool":   # a fresh, dying first operand: the node may write in place into it
                nodes.append(Node("neg", [x], {}, pre))
                nodes.append(Node("neg", [pre], {}, Value("q", (3, 4), dt)))
                node_ins[0] = nodes[-1].out
            out = Value("out", want.shape, want.dtype.name)
            nodes.append(Node(op, node_ins, attrs, out))
            final = Node("clone", [out], {}, Value("r", want.shape, want.dtype.name))  # out stays inside
            g = Graph([("arg", x)] + [("arg", v) for v in vals], nodes + [final], [final.out, out])
            for graph in (g, Graph(g.inputs, g.nodes, [final.out])):
                env = {"x": arrays[0], **{v.name: a for v, a in zip(vals, arrays)}}
                with np.errstate(all="ignore"):
                    got = build_program(graph)(env)[0][0]
                assert got.dtype == want.dtype, (op, dt, scalar)
                np.testing.assert_array_equal(got, want, err_msg=f"{op} {dt} {scalar}")
            checked += 1
    assert checked


def test_rewritten_kernel_is_called_not_inlined(monkeypatch):
    """If an op's kernel stops being the ufunc, the backend calls the kernel."""
    monkeypatch.setattr(OPS["add"], "cpu", lambda a, b: np.add(a, b) * 0 + 42)
    import eagerc.compiler.backends.numpy_backend as nb
    monkeypatch.setattr(nb, "_DIRECT", None)
    x = Value("x", (2,), "float64")
    g = Graph([("arg", x)], [Node("add", [x, 1.0], {}, Value("t0", (2,), "float64"))],
              [Value("t0", (2,), "float64")])
    g.outputs = [g.nodes[0].out]
    program = build_program(g)
    assert "k_add(" in program.source
    np.testing.assert_array_equal(program({"x": np.zeros(2)})[0][0], [42.0, 42.0])
    monkeypatch.setattr(nb, "_DIRECT", None)


def test_linear_weight_layout_follows_the_kernels_attribute_not_its_name(monkeypatch):
    """The weight of a many-rows linear is handed over C-ordered-transposed because the runtime's
    kernel says (its `few_rows` attribute) that it computes x @ weight.T there: renaming the kernel's
    closure changes nothing; a kernel that promises nothing gets its weight as it is."""
    x, w, y = Value("x", (128, 8), "float64"), Value("w", (16, 8), "float64"), Value("y", (128, 16), "float64")
    g = Graph([("arg", x), ("arg", w)], [Node("linear", [x, w, None], {}, y)], [y])
    rng = np.random.default_rng(0)
    env = {"x": rng.standard_normal((128, 8)), "w": rng.standard_normal((16, 8))}
    assert "k_linear(x, c_rhs(w), None)" in build_program(g).source
    monkeypatch.setattr(OPS["linear"].cpu, "__qualname__", "renamed.<locals>.linear")
    assert "k_linear(x, c_rhs(w), None)" in build_program(g).source
    monkeypatch.setattr(OPS["linear"], "cpu", lambda x, weight, bias=None: x @ weight.T)
    program = build_program(g)
    assert "k_linear(x, w, None)" in program.source
    np.testing.assert_allclose(program(env)[0][0], env["x"] @ env["w"].T, rtol=1e-12)


def test_render_returns_source_and_globals():
    graph, _ = _sample_graph()
    source, globs, _ = render(graph)
    assert source.startswith("# Constructed by numpy_backend") and "np" in globs


# ---------------------------------------------------------------- mutations written in place

def _update_graph(read_after=False, returned=False):
    """w <- w * 0.5 - g (an optimizer-like update), plus an output that reads `v`."""
    w, g, v = Value("w", (4, 3), "float64"), Value("g", (4, 3), "float64"), Value("v", (4, 3), "float64")
    a, m, r = Value("t0", (4, 3), "float64"), Value("t1", (4, 3), "float64"), Value("t2", (4, 3), "float64")
    nodes = [Node("mul", [w, 0.5], {}, a), Node("sub", [a, g], {}, m),
             Node("add", [w if read_after else v, 1.0], {}, r)]
    outs = [r, m] if returned else [r]
    return Graph([("external", w), ("arg", g), ("external", v)], nodes, outs, mutations=[("w", m)])


def _env(view=False):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3))
    v = w[...] if view else rng.standard_normal((4, 3))
    return {"w": w, "g": rng.standard_normal((4, 3)), "v": v}


def test_mutation_is_computed_in_its_target():
    g = _update_graph()
    program = build_program(g)
    assert "out=w)" in program.source and "updated in place" in program.source
    env = _env()
    ref_outs, ref_muts = run_graph(g, {k: a.copy() for k, a in env.items()})
    w = env["w"]
    outs, muts = program(env)
    assert muts[0][1] is w                               # the write-back has nothing to copy
    np.testing.assert_array_equal(w, ref_muts[0][1])
    np.testing.assert_array_equal(outs[0], ref_outs[0])


def test_mutation_target_viewed_by_another_input_is_not_written():
    g = _update_graph()
    program = build_program(g)
    env = _env(view=True)                                # v is a view of w: it must show the old w
    old = env["w"].copy()
    ref_outs, ref_muts = run_graph(g, {"w": old.copy(), "g": env["g"], "v": old.copy()})
    outs, muts = program(env)
    np.testing.assert_array_equal(env["w"], old)         # updated a copy; the write-back does the rest
    np.testing.assert_array_equal(outs[0], ref_outs[0])
    np.testing.assert_array_equal(muts[0][1], ref_muts[0][1])


def test_read_only_mutation_target_is_not_written():
    g = _update_graph()
    env = _env()
    env["w"].flags.writeable = False
    ref_outs, ref_muts = run_graph(g, env)
    outs, muts = build_program(g)(env)
    np.testing.assert_array_equal(muts[0][1], ref_muts[0][1])


@pytest.mark.parametrize("kw", [{"read_after": True}, {"returned": True}])
def test_mutation_not_in_place_when_old_value_is_read_or_new_value_returned(kw):
    g = _update_graph(**kw)
    program = build_program(g)
    assert "out=w)" not in program.source
    env = _env()
    ref_outs, ref_muts = run_graph(g, {k: a.copy() for k, a in env.items()})
    outs, muts = program(env)
    for o, r in zip(outs, ref_outs):
        np.testing.assert_array_equal(o, r)
    np.testing.assert_array_equal(muts[0][1], ref_muts[0][1])


def test_compiled_training_step_matches_eager():
    def make():
        eagerc.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = eagerc.optim.Adam(model.parameters(), lr=1e-2)

        def step(x, y):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach()
        return model, step
    me, se = make()
    mc, sc = make()
    sc = eagerc.compile(sc)
    rng = np.random.default_rng(0)
    for k in range(6):
        x = eagerc.tensor(rng.standard_normal((8, 16)).astype(np.float32))
        y = eagerc.tensor(rng.integers(0, 4, 8))
        np.testing.assert_allclose(sc(x, y).numpy(), se(x, y).numpy(), rtol=1e-6)
    for p, q in zip(me.parameters(), mc.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-5, atol=1e-7)
    if any(e.program is not None for e in sc.entries.values()):
        assert "updated in place" in sc.code()


def test_line_nodes_map_each_generated_line_to_its_node():
    """program.line_nodes: {line number: node names}, one line per node, each the line that
    computes it (what an observer such as the profiler reads instead of counting lines)."""
    graph, _, _ = _buffered_graph()
    program = build_program(graph)
    lines = program.source.splitlines()
    assert sorted(n for ns in program.line_nodes.values() for n in ns) == sorted(n.out.name for n in graph.nodes)
    names = {n.out.name: n for n in graph.nodes}
    for number, (node,) in program.line_nodes.items():
        code = lines[number - 1].strip()
        assert code.startswith(f"{node} = "), code
        assert ("np." in code) or (f"k_{names[node].op}(" in code), code


def test_driver_names_are_python_identifiers_made_from_value_names():
    """A value name becomes the identifier `re.sub(r"\\W", "_", name)` makes, prefixed where it
    would start with a digit, be a keyword, or take a generated global's name; unique."""
    from eagerc.compiler.backends.driver import _Names
    names = _Names()
    got = [names.add(n) for n in ("t12", "layers.0.weight", "0x", "lambda", "k_add", "layers_0_weight", "é.b")]
    assert got == ["t12", "layers_0_weight", "v_0x", "v_lambda", "v_k_add", "v_layers_0_weight", "é_b"]
    assert all(g.isidentifier() for g in got) and len(set(got)) == len(got)
