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
added can lie on such a path, so the walk grows the adjacency as it places each node (a
search never meets a later one), and each group keeps its frontier: the placed nodes
outside that read a member, the nodes outside that a member reads. Almost every check
(23,000 in a 32-layer GPT training step) is answered by the two groups' frontiers alone:
no third unit reads the one, or none feeds the other. The rest search from both ends at
once (so their cost is the smaller side's, not the rest of a deep training graph); only a
graph whose searches run long in total builds the bit sets of its own paths (see `path`).
The adjacency is built here rather than as a networkx object: importing networkx alone
costs ~0.1 s, 40% of the whole compile-latency budget of an MLP training step. The tests
check every result on the networkx DiGraph itself (the graph with each group contracted
is acyclic).

Result: graph.fusion_groups = [[node output name, ...], ...] for groups of two
or more nodes, members in graph order (groups joined side by side: one joined group after the
other, `_side_by_side`); nodes are not rewritten, only reordered so that each group's members
are adjacent, in the group's order (a topological order of the graph with every group
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

from .util import ELEMENTWISE, REDUCTIONS, is_random, successors

__all__ = ["fusion", "fuel_from_env"]


# the most nodes groups joined side by side may hold: each brings its inputs and outputs as the
# kernel's arguments (ctypes calls take at most 1024; a 32-layer model's updates are thousands)
JOIN_MEMBERS = 64
# legality searches may take this many steps per graph node, in all, before each further one
# first asks the graph's own reachability bit sets (O(nodes^2 / 64) to build: worth it only then)
SEARCH_STEPS_PER_NODE = 1

def fuel_from_env():
    v = os.environ.get("EAGERC_FUSION_FUEL")
    if v is None or v.strip() == "":
        return None
    try:
        return max(0, int(v))
    except ValueError:
        raise ValueError(f"EAGERC_FUSION_FUEL must be a non-negative integer, got {v!r}") from None


class _Group:
    __slots__ = ("members", "shape", "closed", "row_dims", "readers", "inputs")

    def __init__(self, name, shape, closed, row_dims, inputs):
        self.members = [name]
        self.shape = shape
        self.closed = closed
        self.row_dims = row_dims      # trailing dims its keepdim reductions reduce, or None
        # the group's edges to the rest of the graph, as node names (their units change as
        # groups merge): the placed nodes outside that read a member, the nodes outside that a
        # member reads. A legality check looks at these frontiers, not at every member's
        # edges. Lists, not sets (the pass makes one group per node: sets cost more to build
        # and hold); a name may repeat after a merge, which no reader of them minds.
        self.readers = []
        self.inputs = inputs

    def merge(self, other, group_of):
        """One group of both groups' nodes: the larger of the two takes the other's members
        (so a node changes group O(log n) times, not once per node joining a long chain) and
        is returned; the caller sets the union's shape. Member order is free (the result
        sorts each group by position)."""
        big, small = (self, other) if len(self.members) >= len(other.members) else (other, self)
        for m in small.members:
            group_of[m] = big
        big.members += small.members
        big.readers = [r for r in (*big.readers, *small.readers) if group_of.get(r) is not big]
        big.inputs = [q for q in (*big.inputs, *small.inputs) if group_of.get(q) is not big]
        return big

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
    index = {}      # node output name -> position
    group_of = {}   # node output name -> _Group (nodes that may fuse); others are units alone
    # Adjacency of the nodes placed so far, grown as the walk places each node: while node i
    # is added, it holds exactly the readers at positions <= i -- the only ones a path back
    # into a group can pass -- so no search filters by position. A node that may fuse keeps
    # its edges in its group (`readers`, `inputs`); the others here:
    succ = {}       # node output name -> the nodes (placed so far) that read it
    pred = {}       # node output name -> the nodes it reads
    reach = None    # bit sets of the whole graph's paths, made when the searches run long
    steps_left = len(graph.nodes) * SEARCH_STEPS_PER_NODE  # search steps before the bit sets

    def path(x, y):
        """Is there a path of two edges or more from group x to group y (groups contracted)?
        Almost always no edge leaves x for a third unit, or none enters y from one: the two
        groups' frontiers answer. Otherwise a search from both ends, one unit at a time from
        each, so it costs about the smaller search: a backward node joining a forward group is
        answered from its own side, not by walking the rest of a deep training graph. Once
        the searches together have taken as many steps as the graph has nodes, each further
        search first asks the whole graph's reachability bit sets (built then, once:
        O(nodes^2 / 64)) for a path in the graph itself -- a path there is a path with groups
        contracted too. So a graph pays for the bit sets only when its searches would cost
        more (a 32-layer GPT step's searches take ~3,000 steps in all, its bit sets ~40 ms)."""
        nonlocal steps_left
        if not x.readers or not y.inputs:        # a node just placed has no readers yet
            return False
        unit = group_of.get
        xout = {unit(r, r) for r in x.readers}
        xout.discard(x)
        xout.discard(y)
        if not xout:
            return False
        yin = {unit(q, q) for q in y.inputs}
        yin.discard(x)
        yin.discard(y)
        if not yin:
            return False
        if not xout.isdisjoint(yin):
            return True
        fwd, bwd, fseen, bseen = list(xout), list(yin), xout, yin
        asked = False
        while fwd and bwd:
            steps_left -= 1
            if steps_left < 0 and not asked:
                asked = True
                if graph_path(x, y):
                    return True
            if (grow(fwd, fseen, bseen, "readers", succ, x, y)
                    or grow(bwd, bseen, fseen, "inputs", pred, x, y)):
                return True
        return False

    def grow(todo, seen, other, side, edges, x, y):
        """One unit of one side's search (its `side` of a group, or `edges` of a lone node)
        walked: True when it meets the other side."""
        w = todo.pop()
        for s in (getattr(w, side) if type(w) is _Group else edges[w]):
            w = group_of.get(s, s)
            if w in seen or w is x or w is y:
                continue
            if w in other:
                return True
            seen.add(w)
            todo.append(w)
        return False

    def graph_path(x, y):
        """A path in the graph itself from an outside reader of x into y?"""
        nonlocal reach
        if reach is None:
            reach = _reach(graph)
        ymask = 0
        for m in y.members:
            ymask |= 1 << index[m]
        return any(reach[r] & ymask for r in x.readers if group_of.get(r, r) not in (x, y))

    def legal(group, other):
        """May `other`'s members join `group`? Two vertices of the acyclic graph with groups
        contracted may merge unless a longer path joins them (it would close a cycle)."""
        return not path(other, group) and not path(group, other)

    for i, n in enumerate(graph.nodes):
        name = n.out.name
        index[name] = i
        vals = n.input_values()
        op = n.op
        reduction = op in REDUCTIONS
        fuses = (reduction or op in ELEMENTWISE or (fusible is not None and not vals and is_random(n))) \
            and (fusible is None or fusible(n))
        reads = []          # the nodes it reads, each once
        for v in vals:
            p = v.name
            if p in reads:
                continue
            g = group_of.get(p)
            if g is not None:
                if not g.readers or g.readers[-1] is not name:
                    g.readers.append(name)
            else:
                readers = succ.get(p)
                if readers is None:         # a graph input: no path passes it
                    continue
                readers.append(name)
            reads.append(p)
        if not fuses:
            succ[name] = []
            pred[name] = reads
            continue
        if reduction:
            x = n.inputs[0]
            node_shape = tuple(x.shape)
            k = _trailing(n, len(node_shape))
            if k is not None and k == len(node_shape) and not n.attrs.get("keepdim"):
                k = None          # a sum of everything: a closing reduction
            group = _Group(name, node_shape, k is None, k, reads)
            producers = (x,)
        else:
            node_shape = tuple(n.out.shape)
            group = _Group(name, node_shape, False, None, reads)
            producers = vals
        group_of[name] = group
        seen = []
        for v in producers:
            g = group_of.get(v.name)
            if g is None or g is group or g in seen:
                continue
            seen.append(g)
            if fuel is not None and fuel <= 0:
                break
            union = _joins(group, g, v, node_shape)
            if union is None or not legal(group, g):
                continue
            if fuel is not None:
                fuel -= 1
            closed = group.closed       # g is open (`_joins`)
            group = group.merge(g, group_of)
            group.closed = closed
            group.shape, group.row_dims = union

    # Work side by side: groups that no path joins, over one shape, become one kernel -- one
    # call instead of one per parameter. 0-d groups (an optimizer's per-parameter step counts
    # and bias corrections), and groups that update external state (the parameters' updates).
    updated = {v.name for _, v in graph.mutations}
    first = {}      # shape -> the group the others of that shape join
    parts = {}      # id(joined group) -> the member lists of the groups it joined, in turn
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
        if not legal(into, g):
            continue
        if fuel is not None:
            fuel -= 1
        joined = parts.pop(id(into), None) or [list(into.members)]
        joined.append(list(g.members))
        first[g.shape] = into = into.merge(g, group_of)    # both open, no row: the same but members
        parts[id(into)] = joined

    groups = []
    done = set()
    for n in graph.nodes:
        g = group_of.get(n.out.name)
        if g is None or id(g) in done or len(g.members) < 2:
            continue
        done.add(id(g))
        joined = parts.get(id(g))
        groups.append(_side_by_side(graph, joined, index) if joined else sorted(g.members, key=index.__getitem__))
    return graph.copy(nodes=_contiguous(graph, groups, group_of, succ, index) if groups else graph.nodes,
                      fusion_groups=groups)


def _side_by_side(graph, joined, index):
    """The members of groups joined side by side, one group after the other (each in graph
    order): two parameters' updates then render as the same instructions whatever order the
    schedule interleaved them in, so kernels joining alike updates are one C function (a
    32-layer GPT step's Adam kernels over [64] were 6 distinct functions of the same ops).
    Graph order where that would put a member before one it reads (a join never has a path
    of two edges, but may have a direct edge)."""
    order = [m for part in sorted(joined, key=lambda p: index[p[0]]) for m in sorted(part, key=index.__getitem__)]
    placed = set()
    members = set(order)
    for m in order:
        for v in graph.nodes[index[m]].inputs:
            name = getattr(v, "name", None)
            if name in members and name not in placed:
                return sorted(order, key=index.__getitem__)
        placed.add(m)
    return order


def _reach(graph):
    """node output name -> bits (by position) of the node and every node reachable from it."""
    succ = successors(graph)
    reach = {}
    for i in range(len(graph.nodes) - 1, -1, -1):
        name = graph.nodes[i].out.name
        r = 1 << i
        for s in succ[name]:
            r |= reach[s]
        reach[name] = r
    return reach


def _contiguous(graph, groups, group_of, succ, index):
    """A topological order of the graph in which each group's members are adjacent, in the
    group's order: Kahn's
    algorithm on the graph with groups contracted (a DAG, by the legality check), taking
    ready units in their original order (units are numbered by their first member's place,
    so the heap holds plain numbers). A unit's readers: its _Group's, or `succ`'s."""
    group_id = {m: k for k, grp in enumerate(groups) for m in grp}
    unit_of_group = [None] * len(groups)
    nodes = []                      # unit id -> its nodes, in graph order (a group's: its own order)
    unit = {}                       # node name -> unit id
    for n in graph.nodes:
        name = n.out.name
        k = group_id.get(name)
        if k is None:
            unit[name] = len(nodes)
            nodes.append((n,))
            continue
        u = unit_of_group[k]
        if u is None:
            u = unit_of_group[k] = len(nodes)
            nodes.append(groups[k])
        unit[name] = u
    for u in unit_of_group:
        nodes[u] = [graph.nodes[index[m]] for m in nodes[u]]
    indeg = [0] * len(nodes)
    edges = []
    for u, ns in enumerate(nodes):
        name = ns[0].out.name
        g = group_of.get(name)
        ts = {unit[s] for s in (g.readers if g is not None else succ[name])}
        ts.discard(u)
        edges.append(ts)
        for t in ts:
            indeg[t] += 1
    ready = [u for u, d in enumerate(indeg) if d == 0]      # ascending: a heap already
    order = []
    while ready:
        u = heapq.heappop(ready)
        order.extend(nodes[u])
        for t in edges[u]:
            indeg[t] -= 1
            if indeg[t] == 0:
                heapq.heappush(ready, t)
    if len(order) != len(graph.nodes):
        raise AssertionError("fusion: the graph with groups contracted has a cycle")
    return order
