"""Every op-table case, traced and run by the numpy backend, against eager mode.

For each case and shape variant: trace `case.fn` on the case's inputs (eagerc.compiler.
tracer.trace), round-trip the graph through JSON (attributes must be JSON-plain), compile
it with the numpy backend and run it on the same inputs. Values must match eager mode's
within a tight tolerance, with equal dtypes and shapes. The backward variant traces
`autograd.grad` of the summed float outputs, so derivative ops run compiled too. A case
is skipped only when its trace breaks (a data-dependent value), with the reason.
"""
import numpy as np
import pytest

import eagerc
from eagerc.compiler.backends.numpy_backend import NumpyBackend
from eagerc.compiler.passes.util import may_alias as _may_alias
from eagerc.compiler.tracer import trace
from eagerc.runtime.executor import run_graph
from eagerc.runtime.ir import Graph
from eagerc.runtime.ops import OPS
from optable import all_cases

CASES = all_cases()
VARIANTS = [(c, v) for c in CASES for v in range(len(c.shapes))]
BACKEND = NumpyBackend()


def _ids(cv):
    c, v = cv
    return f"{c.name}-{v}"


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _leaves(x):
    return [t for t in _as_tuple(x) if isinstance(t, eagerc.Tensor)]


def _trace(fn, arrays, requires_grad=False):
    ts = [eagerc.tensor(a, requires_grad=requires_grad and a.dtype.kind == "f") for a in arrays]
    graph, result, tracer = trace(fn, tuple(ts))
    if graph is None:
        pytest.skip(f"trace breaks (data-dependent): {tracer.broken}")
    env = {f"arg{i}": t._array for i, t in enumerate(ts)}
    env.update({name: t._array for name, t in tracer.externals.items()})
    return graph, result, env


def _fresh(env):
    return {k: np.array(v, copy=True) for k, v in env.items()}


def _close(o, e, rtol, what):
    assert type(o) is np.ndarray, f"{what}: {type(o).__name__}, not an ndarray"
    assert o.dtype == e.dtype, f"{what}: dtype {o.dtype} != {e.dtype}"
    assert o.shape == e.shape, f"{what}: shape {o.shape} != {e.shape}"
    if e.dtype.kind in "fc":
        np.testing.assert_allclose(o, e, rtol=rtol, atol=0, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(o, e, err_msg=what)


def _check(graph, result, env, what, rtol):
    graph = Graph.loads(graph.dumps())          # JSON-plain attributes only
    program = BACKEND.compile(graph)
    env1 = _fresh(env)
    outs, muts = program(env1, None)
    expected = [t._array for t in _leaves(result)]
    assert len(outs) == len(expected), f"{what}: {len(outs)} outputs, eager made {len(expected)}"
    for k, (o, e) in enumerate(zip(outs, expected)):
        _close(o, np.asarray(e), rtol, f"{what} output {k}")
    targets = {t for t, _ in graph.mutations}
    for k, v in env.items():  # the program writes into no input but the ones it updates
        if k not in targets:
            np.testing.assert_array_equal(env1[k], v, err_msg=f"{what}: input {k} was modified")
    _, ref_muts = run_graph(graph, _fresh(env))
    for (t, m), (_, r) in zip(muts, ref_muts):
        _close(np.asarray(m), np.asarray(r), rtol, f"{what} mutation {t}")
    outs2, _ = program(_fresh(env), None)   # a second call: same values, the first call's arrays intact
    for k, (a, b, e) in enumerate(zip(outs, outs2, expected)):
        if a.size and not _may_share_input(a, env1):
            assert not np.shares_memory(a, b), f"{what} output {k}: two calls returned the same memory"
        np.testing.assert_array_equal(a, b, err_msg=f"{what} output {k}: second call differs")


def _may_share_input(a, env):
    return any(np.may_share_memory(a, v) for v in env.values())


@pytest.mark.parametrize("cv", VARIANTS, ids=_ids)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_forward_compiled(cv, dtype):
    case, v = cv
    if dtype == "float32" and not case.float32:
        pytest.skip(f"{case.name}: float32 disabled in its table entry")
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in case.arrays(v)]
    graph, result, env = _trace(case.fn, arrays)
    _check(graph, result, env, f"{case.name}-{v} {dtype}", 1e-12 if dtype == "float64" else 1e-6)


GRAD_VARIANTS = [(c, v) for c in CASES if c.grad for v in range(min(c.grad_variants, len(c.shapes)))]


@pytest.mark.parametrize("cv", GRAD_VARIANTS, ids=_ids)
def test_backward_compiled(cv):
    """The derivative ops, traced through autograd.grad, run compiled too."""
    case, v = cv
    arrays = case.arrays(v)
    if not any(a.dtype.kind == "f" for a in arrays):
        pytest.skip("no float inputs")

    def grads(*xs):
        outs = [o for o in _leaves(case.fn(*xs)) if o.requires_grad]
        wrt = [x for x in xs if x.requires_grad]
        if not outs:
            return tuple(eagerc.zeros_like(x) for x in wrt)
        total = outs[0].sum()
        for o in outs[1:]:
            total = total + o.sum()
        return tuple(g if g is not None else eagerc.zeros_like(x)
                     for g, x in zip(eagerc.autograd.grad(total, wrt, allow_unused=True), wrt))
    graph, result, env = _trace(grads, arrays, requires_grad=True)
    _check(graph, result, env, f"{case.name}-{v} backward", 1e-12)


@pytest.mark.parametrize("cv", VARIANTS, ids=_ids)
def test_kernel_outputs_are_fresh(cv):
    """What the backend assumes of kernels outside its aliasing list (declared views,
    contiguous, to_device, einsum): a writeable array that shares no memory with the
    node's inputs, so a later op may write into it in place."""
    case, v = cv
    graph, _, env = _trace(case.fn, case.arrays(v))
    values = dict(env)
    for n in graph.nodes:
        args = [values[x.name] if hasattr(x, "name") else x for x in n.inputs]
        out = OPS[n.op].cpu(*args, **n.attrs)
        out = out if type(out) is np.ndarray else np.asarray(out)
        values[n.out.name] = out
        if _may_alias(n):
            continue
        assert out.flags.writeable, f"{n.op}: kernel returned a read-only array"
        for x, a in zip(n.inputs, args):
            if isinstance(a, np.ndarray) and a.size and out.size:
                assert not np.shares_memory(out, a), f"{n.op}: output shares memory with input {x.name}"


def test_interpreter_agrees_on_a_sample():
    """The interpreter (reference executor) and the numpy backend agree exactly."""
    for case in CASES[::7]:
        ts = [eagerc.tensor(a) for a in case.arrays(0)]
        graph, _, tracer = trace(case.fn, tuple(ts))
        if graph is None:
            continue
        env = {f"arg{i}": t._array for i, t in enumerate(ts)}
        env.update({name: t._array for name, t in tracer.externals.items()})
        a, _ = BACKEND.compile(graph)(env)
        b, _ = run_graph(graph, env)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y, err_msg=case.name)
