"""What the passes share: op classes, aliasing, liveness, sizes, and one rewrite loop.

Op classes are the declared ops' traits (runtime/ops/__init__.py), so a newly declared
op is classified without touching the passes:

- random:      an op with the "random" effect (uniform, normal, randint, randperm). Its
               output name is its identity: compile.Entry.rng overrides the offset of
               that node every call, so passes never rename, merge or fold random nodes.
- may-alias:   the output may share the input's memory (`aliases`: declared views, plus
               kernels that can hand back their input or a view of it: contiguous,
               to_device, einsum), and any op not in the registry.
- elementwise: `pointwise` -- one output element per (broadcast) input element, no
               cross-element reads: the elementwise ops, clone, gelu.
- reduction:   kind "reduction": sum, mean, prod, amax, amin, all, any.

Aliasing and escape. A graph is functional: every Value is written once, and external
tensors change only through `mutations`, applied after the run. Still, values returned
to the user (outputs) and written back (mutations) *escape*: replacing an escaping
fresh result with a value that already lives elsewhere (an input, or another output)
would make the user's tensors share memory where eager mode gave fresh ones. Passes
check `Escape.allows` before such a replacement.
"""
import json

from ...runtime import dtypes
from ...runtime.ir import Value
from ...runtime.memplan import alias_roots, may_alias, numel   # the planner's: one definition
from ...runtime.ops import OPS, load_all

__all__ = ["is_random", "may_alias", "ELEMENTWISE", "REDUCTIONS", "is_elementwise", "numel", "nbytes", "fresh_names",
           "alias_roots", "Escape", "rewrite", "attrs_key", "const_key",
           "last_reads", "own_bytes", "peak_bytes", "schedule_peak", "successors", "drop_analysis"]

load_all()
ELEMENTWISE = frozenset(n for n, op in OPS.items() if op.pointwise)
REDUCTIONS = frozenset(n for n, op in OPS.items() if op.kind == "reduction")


def is_random(node):
    r = _RANDOM.get(node.op)
    if r is None:
        op = OPS.get(node.op)
        if op is None:       # not declared (yet): treated as random, not remembered
            return True
        r = _RANDOM[node.op] = "random" in op.effects
    return r


_RANDOM = {}      # declared op name -> is_random (asked per node by cse, fold and fusion)


def is_elementwise(node):
    return node.op in ELEMENTWISE


def nbytes(value, symbolic=None):
    """Bytes of a Value; `symbolic` (default None) for shapes with symbolic sizes."""
    n = numel(value.shape)
    if n is None:
        return symbolic
    size = _ITEMSIZE.get(value.dtype)
    if size is None:
        size = _ITEMSIZE[value.dtype] = dtypes.as_dtype(value.dtype).itemsize
    return n * size


_ITEMSIZE = {}    # dtype name -> bytes per element (nbytes runs per node in several passes)


def fresh_names(graph):
    """fresh(base) -> a value name not yet in `graph` (nor handed out before): base_0, base_1, ..."""
    names = {v.name for _, v in graph.inputs} | {n.out.name for n in graph.nodes}

    def fresh(base):
        i = 0
        while f"{base}_{i}" in names:
            i += 1
        names.add(f"{base}_{i}")
        return f"{base}_{i}"
    return fresh


def attrs_key(attrs):
    """A hashable, type-exact key of JSON-plain attributes (1, 1.0 and True differ; so do 0.0
    and -0.0). Attributes that are scalars or flat sequences of them -- most nodes' (dims,
    shapes) -- key as a tuple (a float by its repr; a list and a tuple alike, as in JSON),
    without json's encoder (called per node by cse, decompose and lowering); anything else
    keys as its JSON text. Two attribute dicts get equal keys exactly when their JSON is equal."""
    if not attrs:
        return ""
    key = []
    for name in sorted(attrs):
        v = attrs[name]
        t = type(v)
        if t is float:
            v = repr(v)
        elif t is tuple or t is list:
            v = _seq_key(v)
            if v is None:
                return json.dumps(attrs, sort_keys=True)
            t = list
        elif t not in _EXACT:
            return json.dumps(attrs, sort_keys=True)
        key.append((name, t, v))
    return tuple(key)


def _seq_key(seq):
    """A flat sequence's part of attrs_key: the ints themselves when all are ints, else a
    (type, value) pair per element (the two forms never compare equal but for the empty
    sequence); None for a nested one."""
    if all(type(x) is int for x in seq):
        return tuple(seq)
    out = []
    for x in seq:
        t = type(x)
        if t is float:
            x = repr(x)
        elif t not in _EXACT:
            return None
        out.append((t, x))
    return tuple(out)


_EXACT = frozenset((int, str, bool, type(None)))      # equal values of these types are the same attribute


def const_key(x):
    """Key of a constant node input: Python scalars of different types differ (promotion)."""
    return (type(x).__name__, repr(x))


class Escape:
    """Which memory the user sees after a run: the alias roots of outputs and mutation values,
    and the graph inputs. Tracks replacements so a later rewrite sees the earlier ones."""

    def __init__(self, graph):
        self.root = alias_roots(graph)
        self.inputs = {v.name for _, v in graph.inputs}
        self.escaping = {self.root[v.name] for v in graph.outputs}
        self.escaping.update(self.root[v.name] for _, v in graph.mutations)

    def escapes(self, value):
        return self.root.get(value.name, value.name) in self.escaping

    def allows(self, old, new, view=False):
        """May users of `old` read `new` instead? `view=True` when eager's `old` already
        shared `new`'s memory (a view of it), so nothing new becomes aliased."""
        if view or not self.escapes(old):
            return True
        r = self.root.get(new.name, new.name)
        return r not in self.inputs and r not in self.escaping

    def replaced(self, old, new):
        if self.escapes(old):
            self.escaping.add(self.root.get(new.name, new.name))

    def defined(self, node):
        """Note a node created by a pass (its alias root)."""
        ins = node.input_values()
        self.root[node.out.name] = (self.root.get(ins[0].name, ins[0].name)
                                    if ins and may_alias(node) else node.out.name)


def rewrite(graph, visit):
    """The loop every rewriting pass runs: nodes in order, inputs renamed through earlier
    replacements, then `visit(node)` returns one of

        None / the node       keep it (with renamed inputs)
        a Value               drop the node; its users read that Value instead
        [Node, ...]           replace the node by these nodes (the last one usually
                              defines the node's own output Value)

    Graph outputs and mutations are renamed too. The input graph is not modified: nodes
    whose inputs change are copied. Returns (new graph, number of nodes changed).
    """
    sub = {}
    get = sub.get
    nodes = []
    changed = 0
    for n in graph.nodes:
        if sub:
            for x in n.inputs:   # the inputs renamed, copied only for a node that reads a replaced value
                if isinstance(x, Value):
                    y = get(x.name)
                    if y is not None and y is not x:
                        n = n.copy_with(inputs=[get(v.name, v) if isinstance(v, Value) else v for v in n.inputs])
                        break
        r = visit(n)
        if r is None or r is n:
            nodes.append(n)
        elif hasattr(r, "name"):   # a Value
            sub[n.out.name] = r
            changed += 1
        else:
            nodes.extend(r)
            changed += 1
    if not changed:
        return graph, 0
    out = graph.copy(nodes=nodes)
    out.outputs = [sub.get(v.name, v) for v in graph.outputs]
    out.mutations = [(t, sub.get(v.name, v)) for t, v in graph.mutations]
    drop_analysis(out)
    return out, changed


def drop_analysis(graph):
    """Forget the analyses that describe one node order / node set (a pass changed them)."""
    graph.fusion_groups = None
    graph.memory_plan = None
    return graph


def successors(graph):
    """vertex name -> names of the nodes that read it: the adjacency of `graph.to_networkx()`
    (vertices are graph inputs and node outputs; one edge per distinct reader)."""
    succ = {v.name: [] for _, v in graph.inputs}
    for n in graph.nodes:
        out = n.out.name
        succ[out] = []
        first = None              # the first value read: most nodes read one or two distinct values
        seen = None
        for v in n.inputs:
            if isinstance(v, Value):
                name = v.name
                if first is None:
                    first = name
                elif name == first or (seen is not None and name in seen):
                    continue
                elif seen is None:
                    seen = {name}
                else:
                    seen.add(name)
                succ[name].append(out)
    return succ


# ---------------------------------------------------------------- liveness

def last_reads(graph, order=None, root=None):
    """(root, last, pinned): alias root of every value, root -> index of the last node that reads
    any of its aliases (its definition index if none does), and the pinned roots (graph inputs,
    outputs, mutation values: their memory outlives the run or is not the graph's to free).
    `root`: the graph's alias_roots when the caller has them (they do not depend on the order)."""
    nodes = graph.nodes if order is None else order
    if root is None:
        root = alias_roots(graph)
    last = {}
    for i, n in enumerate(nodes):
        last.setdefault(root[n.out.name], i)
        for v in n.inputs:
            if isinstance(v, Value):
                last[root[v.name]] = i
    pinned = {v.name for _, v in graph.inputs}
    pinned.update(root[v.name] for v in graph.outputs)
    pinned.update(root[v.name] for _, v in graph.mutations)
    return root, last, pinned


def own_bytes(graph, symbolic=1):
    """value name -> bytes a node's output allocates: its size, 0 for a view (it shares memory).
    In node order. Sizes are looked up by (shape, dtype): a model's layers repeat a few types."""
    sizes, out = {}, {}
    get = OPS.get
    for n in graph.nodes:
        v = n.out
        op = get(n.op)
        if op is None or op.aliases is not None:      # may_alias(n), inlined
            out[v.name] = 0
            continue
        key = (v.shape, v.dtype)
        b = sizes.get(key)
        if b is None:
            b = sizes[key] = nbytes(v, symbolic)
        out[v.name] = b
    return out


def schedule_peak(graph, order=None, symbolic=1, root=None, size=None):
    """Peak bytes of intermediate values alive at once when `order` (default: graph.nodes) runs
    and each value is freed after its last read (views keep their base alive). Graph inputs are
    not counted; outputs and mutation values stay alive to the end. `root` (alias_roots) and
    `size` (own_bytes) when the caller has them: a scheduler compares orders of one graph."""
    nodes = graph.nodes if order is None else order
    root, last, pinned = last_reads(graph, nodes, root)
    if size is None:
        size = own_bytes(graph, symbolic)
    frees = {}
    for r, i in last.items():
        if r not in pinned:
            frees.setdefault(i, []).append(r)
    live = peak = 0
    for i, n in enumerate(nodes):
        live += size[n.out.name]
        if live > peak:
            peak = live
        for r in frees.get(i, ()):
            live -= size.get(r, 0)
    return peak


def peak_bytes(graph, plan=None, symbolic=1):
    """Peak bytes of the graph's intermediates, without or with a memory plan.

    Without a plan: `schedule_peak` (every value its own allocation, freed after last use).
    With a plan ({value name: buffer id}, default graph.memory_plan.buffer when plan=True):
    all planned buffers (each as large as its largest value) plus the peak of the values
    the plan leaves out (outputs, mutation values, symbolic shapes)."""
    if plan is True:
        plan = graph.memory_plan.buffer if graph.memory_plan is not None else {}
    if plan is None:
        return schedule_peak(graph, symbolic=symbolic)
    buffers = {}
    for n in graph.nodes:
        b = plan.get(n.out.name)
        if b is not None:
            buffers[b] = max(buffers.get(b, 0), nbytes(n.out, symbolic))
    root, last, pinned = last_reads(graph)
    frees = {}
    for r, i in last.items():
        if r not in pinned:
            frees.setdefault(i, []).append(r)
    size = {}
    live = peak = 0
    for i, n in enumerate(graph.nodes):
        if not may_alias(n) and n.out.name not in plan:
            b = nbytes(n.out, symbolic)
            size[n.out.name] = b
            live += b
        peak = max(peak, live)
        for r in frees.get(i, ()):
            live -= size.get(r, 0)
    return sum(buffers.values()) + peak
