"""Fusion grouping: which nodes one generated kernel should compute (no codegen here).

Walking the nodes in order, an elementwise node joins the groups of its elementwise
producers that compute over the same shape (its iteration domain); a reduction
(sum, mean, amax, ...) joins the group that produced its input and closes it: a group
is a chain of elementwise ops with at most one trailing reduction. Broadcast inputs
come from outside the group (they are loads, not members).

Legality is checked on the graph's DiGraph (vertices and edges exactly those of
`Graph.to_networkx()`): merging groups must not create a cycle between groups, i.e. no
path may leave the merged set and come back into it (through outside nodes or through
other groups, which act as single vertices). Only nodes placed before the one being
added can lie on such a path, so the search stops there. The pass reads successor
lists built from the graph directly (`successors`) rather than a networkx object:
importing networkx alone costs ~0.1 s, 40% of the whole compile-latency budget of an
MLP training step. The tests check every result on the networkx DiGraph itself (the
graph with each group contracted is acyclic).

Result: graph.meta["fusion_groups"] = [[node output name, ...], ...] for groups of two
or more nodes, members in graph order; nodes are not rewritten, only reordered so that
each group's members are adjacent (a topological order of the graph with every group
contracted, otherwise keeping the scheduled order): a backend can emit one kernel
where the group starts. The C and CUDA backends consume the groups.

Optimization fuel: EAGERC_FUSION_FUEL=N (or `fusion(graph, fuel=N)`) allows at most N
merges, so a fusion bug can be bisected to the one merge that causes it.
"""
import heapq
import os

from .util import REDUCTIONS, is_elementwise, successors

__all__ = ["fusion", "fuel_from_env"]


def fuel_from_env():
    v = os.environ.get("EAGERC_FUSION_FUEL")
    if v is None or v.strip() == "":
        return None
    try:
        return max(0, int(v))
    except ValueError:
        raise ValueError(f"EAGERC_FUSION_FUEL must be a non-negative integer, got {v!r}") from None


class _Group:
    __slots__ = ("members", "shape", "closed")

    def __init__(self, name, shape, closed):
        self.members = [name]
        self.shape = shape
        self.closed = closed


def fusion(graph, fuel=None):
    fuel = fuel_from_env() if fuel is None else fuel
    succ = successors(graph)
    index = {n.out.name: i for i, n in enumerate(graph.nodes)}
    group_of = {}   # node output name -> _Group

    def legal(group, other, limit):
        """May `other`'s members join `group`? (no path out of the union and back in)"""
        inside = set(group.members) | set(other.members)
        seen = set()
        stack = [s for m in inside for s in succ[m] if s not in inside]
        while stack:
            u = stack.pop()
            if u in seen or index.get(u, limit + 1) > limit:
                continue
            seen.add(u)
            g = group_of.get(u)
            for m in (g.members if g is not None else (u,)):
                for s in succ[m]:
                    if s in inside:
                        return False
                    if s not in seen:
                        stack.append(s)
        return True

    for i, n in enumerate(graph.nodes):
        reduction = n.op in REDUCTIONS
        if not (reduction or is_elementwise(n)):
            continue
        if reduction:
            x = n.inputs[0]
            group = _Group(n.out.name, tuple(x.shape), True)
            producers = [x]
        else:
            group = _Group(n.out.name, tuple(n.out.shape), False)
            producers = n.input_values()
        group_of[n.out.name] = group
        candidates = []
        for v in producers:
            g = group_of.get(v.name)
            if g is not None and g is not group and not g.closed and g.shape == group.shape \
                    and tuple(v.shape) == group.shape and g not in candidates:
                candidates.append(g)
        for g in candidates:
            if fuel is not None and fuel <= 0:
                break
            if not legal(group, g, i):
                continue
            if fuel is not None:
                fuel -= 1
            for m in g.members:
                group_of[m] = group
            group.members = g.members + group.members

    groups = []
    done = set()
    for n in graph.nodes:
        g = group_of.get(n.out.name)
        if g is None or id(g) in done or len(g.members) < 2:
            continue
        done.add(id(g))
        groups.append(sorted(g.members, key=index.__getitem__))
    out = graph.copy(nodes=_contiguous(graph, groups, succ, index)) if groups else graph.copy()
    out.meta["fusion_groups"] = groups
    return out


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
