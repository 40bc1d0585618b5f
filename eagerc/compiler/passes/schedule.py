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
from .util import alias_roots, drop_analysis, last_reads, own_bytes, schedule_peak

__all__ = ["schedule"]


def schedule(graph):
    nodes = graph.nodes
    if len(nodes) < 3:
        return graph
    root = alias_roots(graph)          # computed once: the two peaks below compare orders of one graph
    _, _, pinned = last_reads(graph, root=root)
    producer = {n.out.name: i for i, n in enumerate(nodes)}
    root_size = own_bytes(graph)       # value name -> bytes its node allocates (0 for a view)
    size = [root_size[n.out.name] for n in nodes]
    in_roots = []                      # node -> its distinct input roots
    readers = {}                       # root -> nodes reading it (or a view of it)
    deps = []                          # node -> number of distinct producers not yet run
    users = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        names = [x.name for x in n.inputs if isinstance(x, Value)]
        rs = {root[v] for v in names}
        in_roots.append(rs)
        for r in rs:
            readers.setdefault(r, []).append(i)
        ps = {producer[v] for v in names if v in producer}
        deps.append(len(ps))
        for p in ps:
            users[p].append(i)
    remaining = {r: len(rs) for r, rs in readers.items()}
    done = [False] * len(nodes)
    ready = [False] * len(nodes)
    version = [0] * len(nodes)

    def gain(i):
        """Bytes freed by running node i (inputs it reads last) minus bytes it allocates."""
        freed = 0
        for r in in_roots[i]:
            if remaining[r] == 1 and r not in pinned:
                freed += root_size.get(r, 0)
        return freed - size[i]

    heap = []

    def push(i):
        version[i] += 1
        heapq.heappush(heap, (-gain(i), i, version[i]))

    for i in range(len(nodes)):
        if deps[i] == 0:
            ready[i] = True
            push(i)
    order = []
    while heap:
        _, i, ver = heapq.heappop(heap)
        if done[i] or ver != version[i]:
            continue
        done[i] = True
        order.append(nodes[i])
        for r in in_roots[i]:
            remaining[r] -= 1
            if remaining[r] == 1:   # its last reader now frees it: that reader's gain grew
                for u in readers[r]:
                    if not done[u]:
                        if ready[u]:
                            push(u)
                        break
        for u in users[i]:
            deps[u] -= 1
            if deps[u] == 0:
                ready[u] = True
                push(u)
    if len(order) != len(nodes):   # not a DAG in order: leave it to the verifier to explain
        return graph
    if schedule_peak(graph, order, root=root, size=root_size) >= schedule_peak(graph, root=root, size=root_size):
        return graph
    return drop_analysis(graph.copy(nodes=order))
