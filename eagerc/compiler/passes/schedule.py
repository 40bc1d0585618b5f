"""Scheduling for low peak memory: a topological order that frees large values early.

Greedy list scheduling. Among the nodes whose inputs are all computed, run the one
with the best memory balance: bytes it frees (inputs it is the last reader of; views
keep their base alive, see util.alias_roots) minus the bytes it allocates. Ties keep
the original order, so a graph with nothing to gain keeps its order. The result is
kept only if its peak (util.schedule_peak) is lower than the original order's.

Order is free to change: the graph is functional, random ops are pure functions of
their (seed, offset) attributes, and mutations are applied after the run.
"""
import heapq

from ...runtime.ir import Value
from .util import alias_roots, drop_analysis, own_bytes

__all__ = ["schedule"]


def schedule(graph):
    """Runs on node indices: a value's memory is named by the index of the node that made it (its
    alias root's); graph inputs, outputs and mutation values are pinned (never freed, they count
    for nothing in a node's gain) and left out of the lists, which gives the same gains, order
    and peaks as the definitions in util (last_reads, schedule_peak) at a fraction of the cost."""
    nodes = graph.nodes
    if len(nodes) < 3:
        return graph
    in_roots, readers, users, deps, size, freed = _index(graph)
    remaining = [len(rs) for rs in readers]
    done = [False] * len(nodes)
    ready = [False] * len(nodes)
    version = [0] * len(nodes)
    heap = []
    push = heapq.heappush

    def gain(i):
        """Bytes freed by running node i (inputs it reads last) minus bytes it allocates."""
        freed = 0
        for r in in_roots[i]:
            if remaining[r] == 1:
                freed += size[r]
        return freed - size[i]

    for i in range(len(nodes)):
        if deps[i] == 0:
            ready[i] = True
            version[i] += 1
            push(heap, (-gain(i), i, version[i]))
    order = []
    pop = heapq.heappop
    while heap:
        _, i, ver = pop(heap)
        if done[i] or ver != version[i]:
            continue
        done[i] = True
        order.append(i)
        for r in in_roots[i]:
            remaining[r] -= 1
            if remaining[r] == 1:   # its last reader now frees it: that reader's gain grew
                for u in readers[r]:
                    if not done[u]:
                        if ready[u]:
                            version[u] += 1
                            push(heap, (-gain(u), u, version[u]))
                        break
        for u in users[i]:
            deps[u] -= 1
            if deps[u] == 0:
                ready[u] = True
                version[u] += 1
                push(heap, (-gain(u), u, version[u]))
    if len(order) != len(nodes):   # not a DAG in order: leave it to the verifier to explain
        return graph
    if _peak(order, in_roots, size, freed) >= _peak(range(len(nodes)), in_roots, size, freed):
        return graph
    return drop_analysis(graph.copy(nodes=[nodes[i] for i in order]))


def _index(graph):
    """The lists `schedule` works on, indexed by node: (in_roots, readers, users, deps, size, freed) --
    its distinct unpinned input roots (as node indices), the nodes reading each root (or a view
    of it) in order, the nodes reading its value, its number of distinct producers, the bytes it
    allocates (0 for a view) and the bytes its value frees when dead (0 if pinned)."""
    nodes = graph.nodes
    root = alias_roots(graph)
    pinned = {v.name for _, v in graph.inputs}    # as util.last_reads pins them
    pinned.update(root[v.name] for v in graph.outputs)
    pinned.update(root[v.name] for _, v in graph.mutations)
    size = list(own_bytes(graph).values())
    freed = [0 if n.out.name in pinned else b for n, b in zip(nodes, size)]
    info = {v.name: (None, None) for _, v in graph.inputs}   # value -> (its node, its unpinned root's node)
    later = None
    for i, n in enumerate(nodes):
        name = n.out.name
        r = root[name]
        if r in pinned:
            info[name] = (i, None)
        elif r == name:
            info[name] = (i, i)
        elif r in info:
            info[name] = (i, info[r][0])
        else:            # a root defined further down: a graph out of order (the verifier says so)
            if later is None:
                later = {m.out.name: j for j, m in enumerate(nodes)}
            info[name] = (i, later[r])
    in_roots = []
    readers = [[] for _ in nodes]
    deps = []
    users = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        ps = []          # distinct producers and roots: one or two, so lists, not sets
        rs = []
        for x in n.inputs:
            if isinstance(x, Value):
                p, r = info[x.name]
                if p is not None and p not in ps:
                    ps.append(p)
                if r is not None and r not in rs:
                    rs.append(r)
        in_roots.append(rs)
        for r in rs:
            readers[r].append(i)
        deps.append(len(ps))
        for p in ps:
            users[p].append(i)
    return in_roots, readers, users, deps, size, freed


def _peak(order, in_roots, size, freed):
    """util.schedule_peak of the nodes in `order` (indices), on the lists `schedule` built: each
    unpinned root frees `freed` bytes after the last node that reads it (or makes it, if none does)."""
    last = [0] * len(size)
    for pos, i in enumerate(order):
        last[i] = pos
        for r in in_roots[i]:
            last[r] = pos
    frees = [0] * len(size)            # position -> bytes freed after it
    for r, pos in enumerate(last):
        frees[pos] += freed[r]
    live = peak = 0
    for pos, i in enumerate(order):
        live += size[i]
        if live > peak:
            peak = live
        live -= frees[pos]
    return peak
