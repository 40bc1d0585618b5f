"""Common-subexpression elimination by hash-consing nodes on (op, inputs, attrs).

Walking the nodes in order, each node's key is its op, its (already deduplicated)
input values and constants, and its attributes; a node whose key was seen before is
dropped and its users read the first one's value.

Effects. The graph is functional: a value never changes after its node runs, and an
in-place update of an input makes the tracer give the updated tensor a *new* value (the
write-back to the external tensor is a `mutation`, applied after the run). Two reads
of a tensor on either side of a mutation are therefore reads of different values, and
their keys differ: CSE cannot merge across a mutation. Random ops (an op with a `seed`
attribute) are never merged, whatever their attributes: the compiled program re-draws
each of them per call by its output name (compile.Entry.rng), so two draws that happen to
look alike are still two draws.

Escaping values. Merging two results that both reach the user (two outputs computed
the same way, `return x.exp(), x.exp()`) would hand back one array twice where eager
mode gave two; such merges are skipped unless the op is a view (eager's results
already shared memory then).
"""
from ...runtime.ir import Value
from .util import Escape, attrs_key, const_key, is_random, may_alias, rewrite


def cse(graph):
    seen = {}
    esc = Escape(graph)

    def visit(n):
        if is_random(n):
            return None
        ins = tuple([x.name if isinstance(x, Value) else const_key(x) for x in n.inputs])
        out = n.out
        key = (n.op, ins, attrs_key(n.attrs) if n.attrs else "", out.shape, out.dtype)
        first = seen.get(key)
        if first is None:
            seen[key] = n.out
            return None
        if not esc.allows(n.out, first, view=may_alias(n)):
            return None
        esc.replaced(n.out, first)
        return first

    return rewrite(graph, visit)[0]
