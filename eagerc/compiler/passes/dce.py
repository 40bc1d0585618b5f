"""Dead-code elimination, effect-aware: a node is kept if an output or a mutation needs it.

Graphs have no hidden effects: in-place updates of external tensors are explicit
`mutations`, so outputs and mutation values are the roots and everything they read
(transitively) stays. Random ops are pure functions of their (seed, offset) attributes,
so an unused draw can go; keeping the generator in step with eager mode for every
draw the eager run made is the caller's job (compile.Entry.rng).
"""
from ...runtime.ir import Value
from .util import drop_analysis


def dce(graph):
    live = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    kept = []
    for n in reversed(graph.nodes):
        if n.out.name in live:
            kept.append(n)
            for x in n.inputs:
                if isinstance(x, Value):
                    live.add(x.name)
    if len(kept) == len(graph.nodes):
        return graph
    kept.reverse()
    return drop_analysis(graph.copy(nodes=kept))
