"""Fusion grouping: which nodes one generated kernel should compute (no codegen here).

Walking the nodes in order, an elementwise node joins the groups of its elementwise
producers that compute over the same shape (its iteration domain). A reduction over the
trailing dimensions (softmax's max and sum, layer_norm's mean and variance) joins the
group of its input and keeps it open: later elementwise nodes over the full shape may
read its result when it kept its dims (broadcast along the row), and elementwise nodes
over the row shape itself (`rsqrt(var + eps)`, the per-row loss of cross-entropy) join as
per-row work. All such reductions of a
group reduce the same number k of trailing dimensions (the group's row). Any other
reduction (over leading dimensions, or over everything without keepdim) joins its
input's group and closes it. So a group is one multi-pass row computation -- softmax,
layer_norm, cross-entropy -- or an elementwise chain, with at most one closing reduction.
Last, groups side by side over one shape join where no path joins them: the 0-d work (an
optimizer's step counts and bias corrections, one chain per parameter) and the groups that
write external state (the parameters' updates): one kernel per shape updates every
parameter of that shape, instead of one kernel call each.
Broadcast inputs come from outside the group (they are loads, not members).

Legality is checked on the graph's DiGraph (vertices and edges exactly those of
`Graph.to_networkx()`): merging groups must not create a cycle between groups, i.e. no
path may leave the merged set and come back into it (through outside nodes or through
other groups, which act as single vertices): two vertices of that acyclic graph may merge
unless a path of two edges or more joins them. Only nodes placed before the one being
added can lie on such a path; the search runs from both ends at once (so its cost is the
smaller side's, not the rest of a deep training graph), after a bit-set check of the
paths in the graph itself. The pass reads successor
lists built from the graph directly (`successors`) rather than a networkx object:
importing networkx alone costs ~0.1 s, 40% of the whole compile-latency budget of an
MLP training step. The tests check every result on the networkx DiGraph itself (the
graph with each group contracted is acyclic).

Result: graph.fusion_groups = [[node output name, ...], ...] for groups of two
or more nodes, members in graph order; nodes are not rewritten, only reordered so that
each group's members are adjacent (a topological order of the graph with every group
contracted, otherwise keeping the scheduled order): a backend can emit one kernel
where the group starts. The C and CUDA backends consume the groups.

Random sources: with a `fusible` predicate that accepts them, random ops without tensor
inputs (uniform, normal: counter-based, so a kernel can draw element i by itself) start
groups like elementwise nodes with no producers; their consumers (dropout's `>= p` and
`where`) join them. Without `fusible` (the numpy pipeline) they stay out of every group.

Optimization fuel: EAGERC_FUSION_FUEL=N (or `fusion(graph, fuel=N)`) allows at most N
merges, so a fusion bug can be bisected to the one merge that causes it.
"""
import heapq
import os

from .util import REDUCTIONS, is_elementwise, is_random, successors

__all__ = ["fusion", "fuel_from_env"]


# the most nodes groups joined side by side may hold: each brings its inputs and outputs as the
# kernel's arguments (ctypes calls take at most 1024; a 32-layer model's updates are thousands)
JOIN_MEMBERS = 64

def fuel_from_env():
    v = os.environ.get("EAGERC_FUSION_FUEL")
    if v is None or v.strip() == "":
        return None
    try:
        return max(0, int(v))
    except ValueError:
        raise ValueError(f"EAGERC_FUSION_FUEL must be a non-negative integer, got {v!r}") from None


class _Group:
    __slots__ = ("members", "shape", "closed", "row_dims")

    def __init__(self, name, shape, closed, row_dims=None):
        self.members = [name]
        self.shape = shape
        self.closed = closed
        self.row_dims = row_dims      # trailing dims its keepdim reductions reduce, or None

    def row_shape(self):
        """The shape of a per-row value with keepdim (the one full-shape work can read)."""
        k = self.row_dims
        return None if not k else self.shape[:len(self.shape) - k] + (1,) * k

    def row_shapes(self):
        """Shapes of per-row values: with keepdim, or without (len(shape) - k dims)."""
        k = self.row_dims
        return () if not k else (self.row_shape(), self.shape[:len(self.shape) - k])


def _trailing(node, ndim):
    """k when reduction `node` reduces exactly the last k >= 1 dims (of ndim), else None."""
    dim = node.attrs.get("dim")
    if dim is None:
        return ndim or None
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    try:
        dims = sorted({int(d) % ndim for d in dims}) if ndim else []
    except (TypeError, ValueError):
        return None
    return len(dims) if dims and dims == list(range(ndim - len(dims), ndim)) else None


def _joins(group, g, v, node_shape):
    """May the node whose singleton group is `group` (output shape node_shape) join g, the
    group that made its input v? Returns the (shape, row_dims) of the union, or None."""
    if g.closed:
        return None
    vs = tuple(v.shape)
    if g.shape == node_shape and (vs == g.shape or vs == g.row_shape()):
        shape = g.shape                               # full-shape work, maybe reading a row value
    elif node_shape in g.row_shapes() and vs == node_shape:
        shape = g.shape                               # per-row work
    else:
        return None
    k = group.row_dims
    if len(group.members) > 1:
        if group.shape != shape or (k and g.row_dims and k != g.row_dims):
            return None
        k = k or g.row_dims
    elif k and g.row_dims and k != g.row_dims:
        return None
    return shape, (k or g.row_dims)


def fusion(graph, fuel=None, fusible=None):
    """fusible(node) -> bool (optional): a backend's say on which nodes it can put in a
    kernel; others are left out of every group."""
    fuel = fuel_from_env() if fuel is None else fuel
    succ = successors(graph)
    index = {n.out.name: i for i, n in enumerate(graph.nodes)}
    group_of = {}   # node output name -> _Group
    # reach[name]: bits (by node index) of the node and every node reachable from it in the
    # graph itself; a path there is a path in the graph with groups contracted too
    reach = {}
    pred = {}
    for n in reversed(graph.nodes):
        name = n.out.name
        r = 1 << index[name]
        for s in succ[name]:
            r |= reach[s]
        reach[name] = r
        pred[name] = [v.name for v in n.input_values() if v.name in index]

    def unit(u):
        return group_of.get(u) or u

    def members(x):
        return x.members if type(x) is _Group else (x,)

    def path(x, y, limit):
        """Is there a path of two edges or more from unit x to unit y (a group or a lone node;
        groups contracted)? Searched from both ends, one unit at a time from each, so it costs
        about the smaller search: a backward node joining a forward group is answered from its
        own side, not by walking the rest of the graph (which made compile time quadratic in
        the layer count). Nodes after `limit` are in no group yet: no path comes back from them."""
        xs, ys = members(x), members(y)
        ymask = 0
        for m in ys:
            ymask |= 1 << index[m]
        xout = {unit(s) for m in xs for s in succ[m] if index[s] <= limit} - {x, y}
        if any(reach[s] & ymask for m in xs for s in succ[m] if unit(s) in xout):
            return True           # a path in the graph itself
        yin = {unit(q) for m in ys for q in pred[m]} - {x, y}
        if not xout or not yin:
            return False
        if xout & yin:
            return True
        fwd, bwd, fseen, bseen = list(xout), list(yin), set(xout), set(yin)
        while fwd and bwd:
            for m in members(fwd.pop()):
                for s in succ[m]:
                    if index[s] > limit:
                        continue
                    w = unit(s)
                    if w in fseen or w is x or w is y:
                        continue
                    if w in bseen:
                        return True
                    fseen.add(w)
                    fwd.append(w)
            for m in members(bwd.pop()):
                for q in pred[m]:
                    w = unit(q)
                    if w in bseen or w is x or w is y:
                        continue
                    if w in fseen:
                        return True
                    bseen.add(w)
                    bwd.append(w)
        return False

    def legal(group, other, limit):
        """May `other`'s members join `group`? Two vertices of the acyclic graph with groups
        contracted may merge unless a longer path joins them (it would close a cycle)."""
        return not path(other, group, limit) and not path(group, other, limit)

    for i, n in enumerate(graph.nodes):
        reduction = n.op in REDUCTIONS
        source = fusible is not None and not n.input_values() and is_random(n)
        if not (reduction or source or is_elementwise(n)) or (fusible is not None and not fusible(n)):
            continue
        if reduction:
            x = n.inputs[0]
            k = _trailing(n, len(x.shape))
            if k is not None and k == len(x.shape) and not n.attrs.get("keepdim"):
                k = None          # a sum of everything: a closing reduction
            group = _Group(n.out.name, tuple(x.shape), k is None, k)
            producers = [x]
            node_shape = tuple(x.shape)
        else:
            group = _Group(n.out.name, tuple(n.out.shape), False)
            producers = n.input_values()
            node_shape = tuple(n.out.shape)
        group_of[n.out.name] = group
        seen = []
        for v in producers:
            g = group_of.get(v.name)
            if g is None or g is group or g in seen:
                continue
            seen.append(g)
            if fuel is not None and fuel <= 0:
                break
            union = _joins(group, g, v, node_shape)
            if union is None or not legal(group, g, i):
                continue
            if fuel is not None:
                fuel -= 1
            for m in g.members:
                group_of[m] = group
            group.members = g.members + group.members
            group.shape, group.row_dims = union

    # Work side by side: groups that no path joins, over one shape, become one kernel -- one
    # call instead of one per parameter. 0-d groups (an optimizer's per-parameter step counts
    # and bias corrections), and groups that update external state (the parameters' updates).
    updated = {v.name for _, v in graph.mutations}
    first = {}      # shape -> the group the others of that shape join
    for n in graph.nodes:
        g = group_of.get(n.out.name)
        if g is None or g.closed or g.row_dims or (g.shape != () and n.out.name not in updated):
            continue
        into = first.setdefault(g.shape, g)
        if into is g:
            continue
        if len(into.members) + len(g.members) > JOIN_MEMBERS:   # a kernel's arguments stay few
            first[g.shape] = g
            continue
        if fuel is not None and fuel <= 0:
            break
        if not legal(into, g, len(graph.nodes)):
            continue
        if fuel is not None:
            fuel -= 1
        for m in g.members:
            group_of[m] = into
        into.members = into.members + g.members

    groups = []
    done = set()
    for n in graph.nodes:
        g = group_of.get(n.out.name)
        if g is None or id(g) in done or len(g.members) < 2:
            continue
        done.add(id(g))
        groups.append(sorted(g.members, key=index.__getitem__))
    return graph.copy(nodes=_contiguous(graph, groups, succ, index) if groups else graph.nodes,
                      fusion_groups=groups)


def _contiguous(graph, groups, succ, index):
    """A topological order of the graph in which each group's members are adjacent: Kahn's
    algorithm on the graph with groups contracted (a DAG, by the legality check), taking
    ready units in their original order."""
    unit = {}                       # node name -> unit id (a group, or the node alone)
    members = []
    for grp in groups:
        for m in grp:
            unit[m] = len(members)
        members.append(grp)
    for n in graph.nodes:
        if n.out.name not in unit:
            unit[n.out.name] = len(members)
            members.append([n.out.name])
    indeg = [0] * len(members)
    edges = [set() for _ in members]
    for u, ms in enumerate(members):
        for m in ms:
            for s in succ[m]:
                t = unit[s]
                if t != u and t not in edges[u]:
                    edges[u].add(t)
                    indeg[t] += 1
    ready = [(index[ms[0]], u) for u, ms in enumerate(members) if indeg[u] == 0]
    heapq.heapify(ready)
    node_of = {n.out.name: n for n in graph.nodes}
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.extend(node_of[m] for m in members[u])
        for t in edges[u]:
            indeg[t] -= 1
            if indeg[t] == 0:
                heapq.heappush(ready, (index[members[t][0]], t))
    if len(order) != len(graph.nodes):
        raise AssertionError("fusion: the graph with groups contracted has a cycle")
    return order
