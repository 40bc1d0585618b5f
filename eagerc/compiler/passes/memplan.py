"""Memory planning by liveness: which buffer each intermediate value is written into.

Lifetimes. A value lives from its node to the last node that reads it or any view of
it (util.alias_roots: a view keeps its base's buffer busy). Two values may share a
buffer when their lifetimes are disjoint; a value defined at the node that last reads
another still overlaps it (a node's output never shares memory with an input it is
reading) -- except in place:

In place: an elementwise node may write its result into an input that dies at this
node, when that input is a planned value (not a view, not a graph input), has the
output's shape and dtype, and no other input of the node is a view of it (numpy's
ufuncs handle an `out=` that *is* an input, not one that overlaps it shifted). The
two values then form one chain with one buffer.

Assignment: greedy by size (as TFLite's shared-object planner). Chains are taken
largest first; each goes into the smallest existing buffer of its dtype whose chains
are all disjoint from it in time, else into a new buffer. Since larger chains come
first, a buffer is never too small for a later chain and never grows. Per buffer the
busy intervals are kept sorted, so each test is a bisection; at most SEARCH buffers are
tried (the smallest ones) before a new one is made, which keeps the pass linear on
graphs with thousands of live values at once.

Not planned: graph inputs, outputs and mutation values and everything they view (the
user receives those arrays), views (they own no memory), symbolic shapes.

Result, all JSON-plain:
    meta["memory_plan"] = {value name: buffer id}
    meta["inplace"]     = [value names written into their dying input's buffer]
    meta["buffers"]     = [{"dtype": ..., "numel": ...}] indexed by buffer id
`peak_bytes(graph)` / `peak_bytes(graph, plan=True)` measure the peak without / with it;
`check_memory_plan(graph)` proves that no two values alive at once share a buffer.
"""
import math
from bisect import bisect_left

from .util import is_elementwise, last_reads, may_alias, numel, peak_bytes

__all__ = ["memplan", "peak_bytes", "check_memory_plan", "planned_bytes", "alias_ends", "returned", "SEARCH"]

SEARCH = 64   # buffers tried per value (smallest first) before a new one: keeps the pass linear


def memplan(graph, plannable=None):
    """Plan buffers for `graph`; `plannable(node) -> bool` (optional) names the nodes a backend
    can write into a given buffer (e.g. ufuncs with `out=`): the others keep fresh arrays."""
    root, last, pinned = last_reads(graph)
    chain_of = {}   # planned value -> index of its chain in `chains`
    chains = []     # [dtype, numel, start, end, [value names]]
    inplace = []
    for i, n in enumerate(graph.nodes):
        out = n.out
        size = numel(out.shape)
        if may_alias(n) or out.name in pinned or size is None or (plannable is not None and not plannable(n)):
            continue
        end = last.get(out.name, i)
        v = _inplace_input(n, i, chain_of, root, last) if is_elementwise(n) else None
        if v is not None:
            c = chains[chain_of[v]]
            c[3] = end
            c[4].append(out.name)
            chain_of[out.name] = chain_of[v]
            inplace.append(out.name)
        else:
            chain_of[out.name] = len(chains)
            chains.append([out.dtype, size, i, end, [out.name]])
    plan, buffers, busy = {}, [], []   # busy[b] = (sorted starts, ends)
    by_dtype = {}                      # dtype -> buffer ids, largest first (creation order)
    for dtype, size, start, end, names in sorted(chains, key=lambda c: (-c[1], c[2])):
        best = None
        ids = by_dtype.setdefault(dtype, [])
        for k in range(len(ids) - 1, max(len(ids) - 1 - SEARCH, -1), -1):   # smallest first
            if _free(busy[ids[k]], start, end):
                best = ids[k]
                break
        if best is None:
            ids.append(len(buffers))
            best = len(buffers)
            buffers.append({"dtype": dtype, "numel": size})
            busy.append(([], []))
        starts, ends = busy[best]
        k = bisect_left(starts, start)
        starts.insert(k, start)
        ends.insert(k, end)
        for name in names:
            plan[name] = best
    g = graph.copy()
    g.meta["memory_plan"] = {n.out.name: plan[n.out.name] for n in graph.nodes if n.out.name in plan}
    g.meta["inplace"] = inplace
    g.meta["buffers"] = buffers
    return g


def _free(busy, start, end):
    """Is [start, end] disjoint from every interval of a buffer (sorted, disjoint)?"""
    starts, ends = busy
    k = bisect_left(starts, start)
    if k > 0 and ends[k - 1] >= start:
        return False
    return k == len(starts) or starts[k] > end


def _inplace_input(n, i, planned, root, last):
    vals = n.input_values()
    for v in vals:
        if v.name in planned and root[v.name] == v.name and last[v.name] == i \
                and tuple(v.shape) == tuple(n.out.shape) and v.dtype == n.out.dtype \
                and all(u is v or root[u.name] != v.name for u in vals):
            return v.name
    return None


def check_memory_plan(graph):
    """Raise ValueError if two values share a buffer while both are alive (in-place hand-over at
    the reading node excepted), a buffer is too small or of the wrong dtype, or a value the
    user receives is planned."""
    plan = graph.meta.get("memory_plan", {})
    buffers = graph.meta.get("buffers", [])
    inplace = set(graph.meta.get("inplace", ()))
    root, last, pinned = last_reads(graph)
    index = {n.out.name: i for i, n in enumerate(graph.nodes)}
    owner = {}   # buffer id -> (value name, last index) currently holding it
    for i, n in enumerate(graph.nodes):
        b = plan.get(n.out.name)
        if b is None:
            continue
        if n.out.name in pinned or may_alias(n):
            raise ValueError(f"memory plan: {n.out.name} is an output, mutation or view and must not be planned")
        buf = buffers[b]
        if buf["dtype"] != n.out.dtype or buf["numel"] < numel(n.out.shape):
            raise ValueError(f"memory plan: buffer {b} ({buf}) cannot hold {n.out!r}")
        prev = owner.get(b)
        if prev is not None:
            name, end = prev
            handover = n.out.name in inplace and end == i and name in {v.name for v in n.input_values()}
            if end >= i and not handover:
                raise ValueError(f"memory plan: {n.out.name} (defined at node {i}) reuses buffer {b} "
                                 f"while {name} (defined at node {index[name]}, read until node {end}) is alive")
        owner[b] = (n.out.name, last.get(n.out.name, i))
    return graph


def planned_bytes(graph):
    """Total bytes of the planned buffers."""
    from ...runtime import dtypes
    return sum(b["numel"] * dtypes.as_dtype(b["dtype"]).itemsize for b in graph.meta.get("buffers", []))


def alias_ends(graph):
    """value name -> index of the last node that reads it or any value that may alias it;
    inf when it (or such a value) is returned or written back; its definition if unread."""
    end = {}
    for i, n in enumerate(graph.nodes):
        end[n.out.name] = i
        for v in n.input_values():
            end[v.name] = i
    for v in graph.outputs:
        end[v.name] = math.inf
    for _, v in graph.mutations:
        end[v.name] = math.inf
    for n in reversed(graph.nodes):
        if may_alias(n):
            e = end[n.out.name]
            for v in n.input_values():
                if e > end.get(v.name, -1):
                    end[v.name] = e
    return end


def returned(graph):
    """Names of the outputs and of every value an output may be a view of."""
    out = {v.name for v in graph.outputs}
    for n in reversed(graph.nodes):
        if n.out.name in out and may_alias(n):
            out.update(v.name for v in n.input_values())
    return out
