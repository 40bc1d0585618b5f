"""The runtime's graph executor (runtime/executor.py): one Plan per graph, bound once, run per
call, with an observer that sees every node; and the one size-expression module (runtime/sizes.py)."""
import numpy as np
import pytest

from eagerc.runtime import executor
from eagerc.runtime.executor import Plan, ProgramRunError, run_graph
from eagerc.runtime.ir import Graph, Node, Value
from eagerc.runtime.sizes import SizeExpr, evaluate, from_table


def _graph():
    x = Value("x", (3,), "float64")
    t0, t1, t2 = (Value(f"t{i}", (3,), "float64") for i in range(3))
    nodes = [Node("exp", [x], {}, t0), Node("mul", [t0, 2.0], {}, t1), Node("add", [t1, x], {}, t2)]
    return Graph([("arg", x)], nodes, [t2])


def test_plan_runs_frees_and_leaves_the_callers_env_to_run_graph():
    g = _graph()
    x = np.array([0.0, 1.0, 2.0])
    env = {"x": x}
    (out,), muts = Plan(g)(env)
    np.testing.assert_allclose(out, 2 * np.exp(x) + x)
    assert muts == [] and set(env) == {"t2"}   # consumed: every value but the output freed
    env = {"x": x}
    np.testing.assert_array_equal(run_graph(g, env)[0][0], out)
    assert env == {"x": x}


def test_observer_sees_every_node_in_order_and_runs_its_kernel():
    g, seen = _graph(), []

    def observe(node, kernel, args, attrs):
        seen.append((node.out.name, [np.shape(a) for a in args]))
        return kernel(*args, **attrs)
    plan = Plan(g)
    x = np.ones(3)
    assert np.array_equal(plan({"x": x}, observe=observe)[0][0], plan({"x": x})[0][0])
    assert seen == [("t0", [(3,)]), ("t1", [(3,), ()]), ("t2", [(3,), (3,)])]
    previous = executor.set_observer(observe)   # the process-wide observer (the profiler's)
    try:
        plan({"x": x})
    finally:
        assert executor.set_observer(previous) is observe
    assert len(seen) == 6


def test_checked_plan_names_the_node_that_fails_or_lies():
    g = _graph()
    g.nodes[1].out.shape = (4,)   # the graph declares a shape the kernel does not produce
    with pytest.raises(ProgramRunError, match=r"^f.eagerc: mul -> t1 produced float64\[3\] but the graph declares"):
        Plan(g, check=True, where="f.eagerc")({"x": np.ones(3)})
    with pytest.raises(ProgramRunError, match=r"exp -> t0 failed: KeyError"):
        Plan(_graph(), check=True, where="f.eagerc")({})
    with pytest.raises(KeyError):   # unchecked: the kernel's own error
        Plan(_graph())({})


@pytest.mark.parametrize("text, canonical, value", [
    ("s0", "s0", 5), ("s0*16", "16*s0", 80), ("s1*s0", "s0*s1", 35), ("s0-1", "s0-1", 4),
    ("3-s0", "-s0+3", -2), ("b*a*2-4+1", "2*a*b-3", 3), ("s0-s0", "0", 0), ("7", "7", 7)])
def test_one_representation_one_formatter_one_evaluator(text, canonical, value):
    binding = {"s0": 5, "s1": 7, "a": 1, "b": 3}
    e = SizeExpr.parse(text)
    assert str(e) == canonical and SizeExpr.parse(canonical) == e
    assert e(binding) == evaluate(text, binding) == value


def test_size_table_entries_and_arithmetic_are_the_same_expressions():
    assert from_table([["nodes", 3, "attrs", "shape", 0], -1, 2, ["n"]]) == \
        (("nodes", 3, "attrs", "shape", 0), SizeExpr.parse("2*n-1"))
    assert str(SizeExpr.affine(0, 1, ["b", "a"])) == "a*b"
    s0, s1 = SizeExpr.parse("s0"), SizeExpr.parse("s1")
    one, three = SizeExpr([(1, ())]), SizeExpr.parse("3")
    assert str((s0 + one) * (s0 - one)) == "s0*s0-1" and str(three - s0 * s1 * SizeExpr.parse("2")) == "-2*s0*s1+3"
    for bad in ("", "s0**2", "s0/2", "2 s0", "s0+", "x" * 201, 5):
        with pytest.raises(ValueError):
            SizeExpr.parse(bad)
