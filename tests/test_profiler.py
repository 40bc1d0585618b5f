"""eagerc.profiler: per-op events in eager mode, per-kernel events in compiled programs, the
table, the Chrome trace, record_function ranges, and nothing left installed afterwards."""
import json
import time

import numpy as np
import pytest

import eagerc
from eagerc import dispatch, nn
from eagerc import profiler
from eagerc.runtime.ops import OPS, load_all

load_all()


def _mlp():
    eagerc.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def _counts(prof, category=None):
    return {a.key: a.count for a in prof.key_averages(category=category)}


# ---------------------------------------------------------------- eager ops

def test_counts_for_a_known_sequence_of_ops():
    x = eagerc.randn(8, 8)
    w = eagerc.randn(8, 8)
    with eagerc.no_grad(), profiler.profile() as prof:
        a = x + 1
        b = a * 2
        for _ in range(3):
            b = b.matmul(w)
        c = (b + a).relu().sum()
    assert _counts(prof) == {"add": 2, "mul": 1, "matmul": 3, "relu": 1, "sum": 1}
    assert all(e.category == "op" and e.duration >= 0 for e in prof.events())
    assert c.shape == ()


def test_backward_ops_are_recorded():
    x = eagerc.randn(4, 5, requires_grad=True)
    w = eagerc.randn(5, 3, requires_grad=True)
    with profiler.profile() as prof:
        (x @ w).tanh().sum().backward()
    counts = _counts(prof)
    assert counts["matmul"] >= 3  # forward + the two input gradients
    assert counts["tanh"] == 1
    assert x.grad is not None and w.grad is not None


def test_totals_are_consistent_with_wall_time():
    rng = np.random.default_rng(0)
    a = eagerc.tensor(rng.standard_normal((256, 256)).astype(np.float32))
    b = eagerc.tensor(rng.standard_normal((256, 256)).astype(np.float32))
    t0 = time.perf_counter_ns()
    with eagerc.no_grad(), profiler.profile() as prof:
        y = a
        for _ in range(40):
            y = (y @ b).tanh()
    wall = time.perf_counter_ns() - t0
    ops = [e for e in prof.events() if e.category == "op"]
    assert len(ops) == 80
    total = sum(e.duration for e in ops)
    assert 0 < prof.wall_time <= wall
    assert total <= prof.wall_time
    assert total >= 0.5 * prof.wall_time, (total, prof.wall_time)  # compute-heavy: mostly kernel time
    by_key = {k.key: k for k in prof.key_averages()}
    assert by_key["matmul"].count == 40
    assert by_key["matmul"].total == sum(e.duration for e in ops if e.name == "matmul")
    assert by_key["matmul"].mean == pytest.approx(by_key["matmul"].total / 40)
    assert prof.total_time == total  # no nesting here: self time == total time


def test_record_shapes():
    x = eagerc.randn(3, 4)
    with eagerc.no_grad(), profiler.profile(record_shapes=True) as prof:
        x.matmul(x.mT)
        x.sum(0)
    shapes = {e.name: e.shapes for e in prof.events()}
    assert shapes["matmul"] == ((3, 4), (4, 3))
    assert shapes["sum"] == ((3, 4),)
    avgs = prof.key_averages(group_by_input_shape=True)
    assert any(a.key == "matmul" and a.input_shapes == ((3, 4), (4, 3)) for a in avgs)
    assert "[[3, 4], [4, 3]]" in avgs.table()
    with eagerc.no_grad(), profiler.profile() as prof2:
        x.sum(0)
    assert prof2.events()[0].shapes is None


# ---------------------------------------------------------------- record_function

def test_record_function_ranges_nest():
    x = eagerc.randn(4, 4)
    with eagerc.no_grad(), profiler.profile() as prof:
        with profiler.record_function("outer"):
            y = x + 1
            with profiler.record_function("inner"):
                y = y * y
                y = y.exp()
            y = y - 1
        z = y.sum()

    @profiler.record_function("decorated")
    def f(t):
        return t + 2
    with profiler.profile() as prof2:
        f(x)
    evs = prof.events()
    outer = next(e for e in evs if e.name == "outer")
    inner = next(e for e in evs if e.name == "inner")
    assert outer.category == inner.category == "user"
    assert inner.parent is outer and outer.parent is None
    assert outer.start <= inner.start and inner.end <= outer.end
    assert sorted(e.name for e in inner.children) == ["exp", "mul"]
    assert sorted(e.name for e in outer.children) == ["add", "inner", "sub"]
    assert next(e for e in evs if e.name == "sum").parent is None
    assert inner.self_duration == inner.duration - sum(c.duration for c in inner.children) >= 0
    assert z.shape == ()
    (dec,) = [e for e in prof2.events() if e.category == "user"]
    assert dec.name == "decorated" and [c.name for c in dec.children] == ["add"]


def test_record_function_without_a_profile_does_nothing():
    with profiler.record_function("idle") as rf:
        eagerc.randn(2) + 1
    assert rf._prof is None
    with profiler.profile() as prof:
        pass
    assert prof.events() == []


# ---------------------------------------------------------------- table and trace

def test_table_sorted_by_total_with_columns():
    a = eagerc.randn(128, 128)
    with eagerc.no_grad(), profiler.profile() as prof:
        for _ in range(5):
            a @ a
        a + 1
        a.sum()
    text = prof.table(sort_by="total")
    header = text.splitlines()[1]
    for col in ("Name", "Count", "Total", "Total %", "Self", "Mean"):
        assert col in header
    rows = [ln.split()[0] for ln in text.splitlines()[3:-2]]
    totals = {k.key: k.total for k in prof.key_averages()}
    assert rows == sorted(totals, key=lambda k: -totals[k])
    assert "Wall time" in text.splitlines()[-1]
    limited = prof.table(sort_by="count", row_limit=1)
    assert [ln.split()[0] for ln in limited.splitlines()[3:-2]] == ["matmul"]
    assert "2 more rows" in limited
    assert prof.key_averages().table(sort_by="cpu_time_total")  # PyTorch's name
    with pytest.raises(ValueError, match="sort_by"):
        prof.table(sort_by="bogus")


def test_chrome_trace_is_valid_json(tmp_path):
    x = eagerc.randn(8, 8)
    with eagerc.no_grad(), profiler.profile(record_shapes=True) as prof:
        with profiler.record_function("step"):
            (x @ x).relu()
    path = prof.export_chrome_trace(str(tmp_path / "trace.json"))
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["name"] for e in complete} == {"step", "matmul", "relu"}
    for e in complete:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["cat"] in ("op", "user")
    step = next(e for e in complete if e["name"] == "step")
    for e in complete:  # the ops lie inside the user range (microseconds, rounded to ns)
        assert step["ts"] - 0.001 <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 0.002
    mm = next(e for e in complete if e["name"] == "matmul")
    assert mm["args"]["input_shapes"] == [[8, 8], [8, 8]]
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in events)


# ---------------------------------------------------------------- compiled code

@pytest.mark.parametrize("backend", ["numpy", "interpreter"])
def test_compiled_kernels_are_timed(backend):
    m = _mlp()
    c = eagerc.compile(m, backend=backend)
    x = eagerc.randn(16, 6)
    with eagerc.no_grad():
        want = c(x).numpy()  # traced and compiled before profiling
        with profiler.profile(record_shapes=True) as prof:
            got = c(x).numpy()
            got2 = c(x).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got2, want)
    evs = prof.events()
    calls = [e for e in evs if e.category == "compiled"]
    assert [e.name for e in calls] == ["compiled:Sequential"] * 2
    graph = c.graphs[0]
    for call in calls:
        kernels = [e for e in call.children]
        assert all(e.category == "kernel" for e in kernels)
        assert [e.args["node"] for e in kernels] == [n.out.name for n in graph.nodes]
        assert [e.name for e in kernels] == [n.op for n in graph.nodes]
        assert kernels[0].args["module"] == "0"
        assert sum(e.duration for e in kernels) <= call.duration
    assert not [e for e in evs if e.category == "op"]  # no eager op ran
    assert _counts(prof)["linear"] == 6


def test_compiled_training_forward_and_backward_are_timed():
    m = _mlp()
    c = eagerc.compile(m, backend="numpy")     # one event per node (backend c's fused kernels: test below)
    x = eagerc.randn(4, 6)
    for _ in range(2):  # trace, then run the compiled forward/backward programs
        m.zero_grad()
        c(x).sum().backward()
    want = [p.grad.numpy().copy() for p in m.parameters()]
    m.zero_grad()
    with profiler.profile() as prof:
        c(x).sum().backward()
    for p, w in zip(m.parameters(), want):
        np.testing.assert_array_equal(p.grad.numpy(), w)
    compiled = {e.name: e for e in prof.events() if e.category == "compiled"}
    assert set(compiled) == {"compiled:Sequential", "compiled_backward"}
    for e in compiled.values():
        assert e.children and all(k.category == "kernel" and "node" in k.args for k in e.children)
    assert "linear" in {k.name for k in compiled["compiled_backward"].children}


def test_program_compiled_while_profiling_keeps_no_instrument():
    m = _mlp()
    c = eagerc.compile(m)
    x = eagerc.randn(4, 6)
    with eagerc.no_grad():
        with profiler.profile() as prof:
            first = c(x).numpy()   # traces (eager ops) and compiles
            second = c(x).numpy()  # runs the program
        third = c(x).numpy()
    np.testing.assert_allclose(first, third, rtol=1e-6)
    np.testing.assert_array_equal(second, third)
    counts = _counts(prof)
    assert counts["compiled:Sequential"] == 1
    program = next(iter(c.entries.values())).program
    globs = program.__globals__
    assert globs["np"] is np
    for key, value in globs.items():
        if key.startswith("k_"):
            assert value is OPS[key[2:]].cpu
    # the profile ran the program's timed twin: its own function and globals, never called outside a profile
    assert program.timed is not program and program.timed.__globals__ is not globs
    assert program.timed.__code__.co_filename == program.filename


def test_loaded_program_ops_are_timed(tmp_path):
    from eagerc.compiler.export import export
    from eagerc.runtime import load
    m = _mlp()
    path = export(m, (eagerc.randn(2, 6),)).save(str(tmp_path / "m.eagerc"))
    prog = load(path)
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    with profiler.profile() as prof:
        prog(x)   # the executor's plan is bound now, during the profile
    assert _counts(prof) == {"linear": 3, "relu": 1, "tanh": 1}
    assert {e.category for e in prof.events()} == {"kernel"}   # each node once, by the executor's observer
    n = len(prof.events())
    prog(x)   # after the profile: nothing more is recorded into it
    assert len(prof.events()) == n
    with profiler.profile() as again:
        prog(x)
    assert _counts(again) == {"linear": 3, "relu": 1, "tanh": 1}


# ---------------------------------------------------------------- nothing left behind

def test_everything_is_restored_and_profiles_do_not_nest():
    from eagerc.compiler.backends.interpreter import InterpretedProgram
    from eagerc.compiler.compile import CompiledFunction
    from eagerc.compiler import training
    kernels = {name: op.cpu for name, op in OPS.items()}
    run, call = CompiledFunction.__dict__["_run"], InterpretedProgram.__dict__["__call__"]
    grads = training._OP.grads
    with profiler.profile() as prof:
        assert dispatch.active_profiler() is prof   # the hook dispatch and compiled calls read
        with pytest.raises(RuntimeError, match="already active"):
            profiler.profile().start()
    assert all(OPS[name].cpu is k for name, k in kernels.items()) and dispatch.active_profiler() is None
    assert CompiledFunction.__dict__["_run"] is run and InterpretedProgram.__dict__["__call__"] is call
    assert training._OP.grads is grads
    from eagerc.runtime import executor
    assert executor.set_observer(None) is None   # the executor's observer is gone too
    with pytest.raises(ZeroDivisionError):  # an exception inside the block restores too
        with profiler.profile():
            1 / 0
    assert all(OPS[name].cpu is k for name, k in kernels.items()) and dispatch.active_profiler() is None
    assert profiler._active is None
    with profiler.profile(enabled=False) as off:
        eagerc.randn(2) + 1
    assert off.events() == [] and all(OPS[name].cpu is k for name, k in kernels.items())


def test_a_profile_records_the_thread_that_started_it():
    """A running profile is a mode of its thread (dispatch.Modes), like grad mode: ops, compiled
    calls and record_function ranges of another thread are not recorded into it."""
    import threading
    c = eagerc.compile(lambda a: (a * 2).exp(), backend="interpreter")
    x = eagerc.randn(4)
    with eagerc.no_grad():
        c(x)

    def other():
        with eagerc.no_grad(), profiler.record_function("elsewhere"):
            x + 1
            c(x)
    with eagerc.no_grad(), profiler.profile() as prof:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        x - 1
        c(x)
    assert _counts(prof) == {"sub": 1, "compiled:<lambda>": 1, "mul": 1, "exp": 1}
    assert {e.tid for e in prof.events()} == {threading.get_ident()}


def test_failing_op_is_still_recorded_and_explained():
    a, b = eagerc.randn(2, 3), eagerc.randn(4, 5)
    with profiler.profile() as prof:
        with pytest.raises(RuntimeError, match="matmul"):
            a @ b
    assert _counts(prof) == {"matmul": 1}


def test_fused_c_kernels_are_timed_by_name():
    from eagerc.runtime import kernel_cache
    if kernel_cache.find_compiler() is None:
        pytest.skip("no C compiler")
    c = eagerc.compile(lambda a: eagerc.nn.functional.softmax(a * 2, -1) + 1, backend="c")
    x = eagerc.randn(32, 50)
    want = c(x).numpy()
    with profiler.profile() as prof:
        got = c(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    (call,) = [e for e in prof.events() if e.category == "compiled"]
    names = [e.name for e in call.children if e.category == "kernel"]
    fused = [n for n in names if n.startswith("fused:k")]
    assert len(fused) == 1 and "amax" in fused[0] and "exp" in fused[0] and "div" in fused[0], names
