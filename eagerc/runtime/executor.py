"""Run a graph on arrays with the declared kernels: the reference interpreter.

Needs only the runtime layer, so a deployed program runs without the frontend or the
compiler. Values are freed after their last use.
"""
import numpy as np

from .ops import OPS

__all__ = ["run_graph", "last_uses"]


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


def run_graph(graph, env, xp=np, free=None):
    """Evaluate `graph` given `env` (input name -> array). Returns (outputs, mutations) as arrays."""
    env = dict(env)
    free = last_uses(graph) if free is None else free
    for i, n in enumerate(graph.nodes):
        kernel = OPS[n.op].kernel(xp)
        args = [env[x.name] if hasattr(x, "name") else x for x in n.inputs]
        out = kernel(*args, **n.attrs)
        if xp is np and type(out) is not np.ndarray:
            out = np.asarray(out)
        env[n.out.name] = out
        for name in free.get(i, ()):
            del env[name]
    return [env[v.name] for v in graph.outputs], [(t, env[v.name]) for t, v in graph.mutations]
