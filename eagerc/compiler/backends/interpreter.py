"""The interpreter backend: run the graph node by node with the runtime's kernels."""
import numpy as np

from ...runtime.executor import last_uses
from ...runtime.ops import OPS


class InterpreterBackend:
    name = "interpreter"

    def compile(self, graph):
        return InterpretedProgram(graph)


class InterpretedProgram:
    def __init__(self, graph):
        self.graph = graph
        self.free = last_uses(graph)
        self.steps = [(OPS[n.op].cpu, n.out.name, [x.name if hasattr(x, "name") else None for x in n.inputs],
                       [None if hasattr(x, "name") else x for x in n.inputs], n.attrs) for n in graph.nodes]
        self.source = str(graph)

    def __call__(self, env, overrides=None):
        env = dict(env)
        for i, (kernel, out, names, consts, attrs) in enumerate(self.steps):
            args = [env[nm] if nm is not None else c for nm, c in zip(names, consts)]
            if overrides and out in overrides:
                attrs = {**attrs, **overrides[out]}
            r = kernel(*args, **attrs)
            env[out] = r if type(r) is np.ndarray else np.asarray(r)
            for name in self.free.get(i, ()):
                del env[name]
        g = self.graph
        return [env[v.name] for v in g.outputs], [(t, env[v.name]) for t, v in g.mutations]
