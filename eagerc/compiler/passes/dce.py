"""Dead-code elimination, effect-aware: a node is kept if an output or a mutation needs it.

Random ops are pure functions of their (seed, offset) attributes, so an unused draw can go;
the compiled program still advances the generator for every draw eager mode made (see
compile.Entry.rng), so later numbers stay the same as eager mode's.
"""


def dce(graph):
    live = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    kept = []
    for n in reversed(graph.nodes):
        if n.out.name in live:
            kept.append(n)
            live.update(v.name for v in n.input_values())
    kept.reverse()
    return graph.copy(nodes=kept)
