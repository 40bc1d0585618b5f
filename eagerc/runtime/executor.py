"""The graph executor: every graph that runs node by node runs here.

The interpreter backend, exported programs (runtime/program.py), `run_graph` in tests and
the per-op timings of `eagerc viz --profile` all bind a `Plan` once -- each node's kernel,
where its inputs come from, which values die after it -- and call it per run. Only the
runtime layer is needed, so a deployed program runs without the frontend or the compiler.

A loaded program's plan also takes kernels bound once for its shapes (runtime/bind.py:
attributes applied, results in buffers reused by every call): `Plan(graph, bound=...)`. Such
a plan runs one call at a time; a call that finds it busy (another thread, or an observer
calling the program again) runs on an unbound twin, allocating as any plan does.

Observers (the profiler, viz timings) see each node through `observe(node, kernel, args,
attrs) -> result`: called instead of `kernel(*args, **attrs)`, it runs the kernel itself,
so it can time the call, record the arguments' shapes, or call the kernel an instrument
stands in for. A run takes its observer as an argument, or else the process-wide one
installed with `set_observer` (the profiler's). With neither, the node loop is the plain
one: no observer costs nothing but one test per node.
"""
import threading
from operator import itemgetter

import numpy as np

from .ir import Value
from .ops import OPS

__all__ = ["Plan", "run_graph", "last_uses", "set_observer", "ProgramRunError"]

_observer = None   # the process-wide observer (set_observer); None: runs are not observed


class ProgramRunError(ValueError):
    """A kernel failed, or produced a value other than the one the graph declares (checked plans)."""


def set_observer(observe):
    """Observe every run that names no observer of its own (None: stop); returns the previous one."""
    global _observer
    previous, _observer = _observer, observe
    return previous


def last_uses(graph):
    """node index -> names of values whose last reader is that node."""
    last = {}
    for i, n in enumerate(graph.nodes):
        for v in n.input_values():
            last[v.name] = i
    keep = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    out = {}
    for name, i in last.items():
        if name not in keep:
            out.setdefault(i, []).append(name)
    return out


class Plan:
    """A graph bound to the kernels of array module `xp`: call it per run.

    `plan(env, overrides=None, observe=None) -> (outputs, [(target, array)] mutations)`.
    env maps input names to arrays and is consumed: the run writes each node's value into it
    and deletes values after their last use (pass a copy to keep yours). overrides maps a
    node's output name to attributes that change per call (the backends' contract).

    check=True (exported files): every result must have the shape and dtype the graph
    declares, and a failing kernel is reported as ProgramRunError naming the node; `where`
    (the file) starts those messages.

    bound: {value name: kernel} (runtime/bind.py): kernels that take the node's arguments with
    its attributes already applied, replacing the op's kernel for those nodes.
    """
    __slots__ = ("graph", "steps", "outputs", "mutations", "asarray", "check", "where", "xp", "lock", "twin")

    def __init__(self, graph, xp=np, check=False, where=None, bound=None):
        self.graph, self.check, self.where, self.xp = graph, check, where, xp
        self.asarray = np.asarray if xp is np else None   # numpy kernels may return scalars
        self.lock = threading.Lock() if bound else None    # bound kernels own buffers: one call at a time
        self.twin = None
        free = last_uses(graph)
        kernels = {}
        self.steps = []
        no_attrs = {}
        for i, n in enumerate(graph.nodes):
            kernel, attrs = bound.get(n.out.name) if bound else None, no_attrs
            if kernel is None:
                kernel, attrs = kernels.get(n.op), n.attrs
                if kernel is None:
                    kernel = kernels[n.op] = OPS[n.op].kernel(xp)
            shape, dtype = (tuple(n.out.shape), np.dtype(n.out.dtype)) if check else (None, None)
            self.steps.append((n, kernel, _args_of(n.inputs), attrs, n.out.name, tuple(free.get(i, ())),
                               shape, dtype))
        self.outputs = [v.name for v in graph.outputs]
        self.mutations = [(t, v.name) for t, v in graph.mutations]

    def __call__(self, env, overrides=None, observe=None):
        lock = self.lock
        if lock is None:
            return self._run(env, overrides, observe)
        if not lock.acquire(blocking=False):   # its buffers are in use: the unbound twin runs this call
            if self.twin is None:
                self.twin = Plan(self.graph, self.xp, self.check, self.where)
            return self.twin(env, overrides, observe)
        try:
            return self._run(env, overrides, observe)
        finally:
            lock.release()

    def _run(self, env, overrides, observe):
        if observe is None:
            observe = _observer
        asarray, ndarray = self.asarray, np.ndarray
        try:
            for node, kernel, args_of, attrs, out, free, shape, dtype in self.steps:
                args = args_of(env)
                if overrides and out in overrides:
                    attrs = {**attrs, **overrides[out]}
                r = kernel(*args, **attrs) if observe is None else observe(node, kernel, args, attrs)
                if asarray is not None and type(r) is not ndarray:
                    r = asarray(r)
                if shape is not None and (r.shape != shape or r.dtype != dtype):
                    raise ProgramRunError(f"{self.where}: {node_str(node)} produced {r.dtype}{list(r.shape)} "
                                          f"but the graph declares {node.out.dtype}{list(node.out.shape)}")
                env[out] = r
                for name in free:
                    del env[name]
        except ProgramRunError:
            raise
        except Exception as e:
            if not self.check:
                raise
            raise ProgramRunError(f"{self.where}: {node_str(node)} failed: {type(e).__name__}: "
                                  f"{str(e)[:500]}") from None
        return [env[n] for n in self.outputs], [(t, env[n]) for t, n in self.mutations]


def _args_of(inputs):
    """env -> the arguments of a node with these inputs (Values read from env, constants as they
    are): one C call (operator.itemgetter) for the usual node of several Values."""
    refs = [x.name for x in inputs if isinstance(x, Value)]
    if len(refs) == len(inputs) and len(refs) > 1:
        return itemgetter(*refs)
    if len(refs) == len(inputs) == 1:
        ref = refs[0]
        return lambda env: (env[ref],)
    pairs = [(x.name, None) if isinstance(x, Value) else (None, x) for x in inputs]
    return lambda env: [env[r] if r is not None else c for r, c in pairs]


def node_str(n):
    """`op -> value at file.py:12`: a node as messages name it."""
    where = f" at {n.loc}" if n.loc else ""
    return f"{n.op} -> {n.out.name}{where}"


def run_graph(graph, env, xp=np):
    """Evaluate `graph` once given `env` (input name -> array; left as it is). Returns
    (outputs, mutations) as arrays."""
    return Plan(graph, xp)(dict(env))
