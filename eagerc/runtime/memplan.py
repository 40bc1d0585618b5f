"""Memory planning: where each value a program makes lives. The one planner, for the compiler's
backends (passes/memplan.py) and a loaded program's bound kernels (runtime/bind.py).

A backend says what it can do with a node through its predicate `writes(node)`:
    OUT     it writes the result wherever the plan says (a ufunc's `out=`);
    BUFFER  it writes the result into a buffer, never over an input (a fused kernel's output);
    FRESH   it always gets a new array (a kernel call);
    NONE    the value is no array at all (a Python float; a value inside a fused kernel).
Views (ops declared `aliases`, may_alias) own no memory. Backends that run several
nodes as one unit (a fused kernel reads all its inputs and writes all its outputs at once)
say so with `units` ({node index: unit index}): lifetimes are then counted in units; and
`takes` ({value: input}) names outputs the backend writes over an input itself (a C
kernel's optimizer update into its parameter). The plan (ir.MemoryPlan) then names, for
each OUT (BUFFER) value, one of these places (the second only for OUT), tried in this order:

1. The array of a mutation target (an optimizer step's `w <- w - lr * g`): the target T is
   a graph input written back once, not returned, and read for the last time by an
   elementwise OUT node of T's shape and dtype; that node's output dies likewise at the
   next such node, and so on until the chain reaches the mutation value. Every node of it
   writes into T's own array, and the write-back has nothing to copy.
2. In place into a dying input: an elementwise OUT node may write into an input that
   dies at this node (nothing reads it, or a view of it, later), that is memory this
   program made (a fresh array, a buffer; not a view, not a graph input), has the
   output's shape and dtype, and that no other input of the node views (a shifted
   overlap). Into a buffer only when the result stays inside the program.
3. A buffer, allocated once per program and reused by every call: only for values whose
   memory never escapes (not returned, not written back, not reachable from those
   through views), so no call hands out memory that the next one overwrites; not for
   symbolic shapes.
Anything else gets a fresh array.

Lifetimes (`alias_ends`): a value lives from its node to the last node that reads it or
any view of it; a value defined at the node that last reads another still overlaps it,
except for the in-place hand-over. Values that share memory in place form one chain.

Assignment: greedy by size (as TFLite's shared-object planner). Buffer chains are taken
largest first; each goes into the smallest existing buffer of its dtype whose chains are
all disjoint from it in time, else into a new buffer. Since larger chains come first, a
buffer is never too small for a later chain and never grows. Per buffer the busy intervals
are kept sorted, so each test is a bisection; at most SEARCH buffers are tried (the
smallest ones) before a new one is made, which keeps the pass linear on graphs with
thousands of live values at once.

`memory_plan(graph, writes, ...)` makes the plan (ir.MemoryPlan); `check_memory_plan(graph)`
proves graph.memory_plan safe (every backend may follow it blindly).
"""
import math
from bisect import bisect_left

from .ir import MemoryPlan, Value
from .ops import OPS

__all__ = ["memory_plan", "check_memory_plan", "alias_ends", "alias_roots", "may_alias", "numel", "returned",
           "SEARCH", "OUT", "BUFFER", "FRESH", "NONE"]

SEARCH = 64   # buffers tried per value (smallest first) before a new one: keeps the pass linear
OUT, BUFFER, FRESH, NONE = "out", "buffer", "fresh", "none"


class _Storage:
    """Memory a chain of values lives in: 'fresh', 'buffer' (a buffer candidate) or 'target'."""
    __slots__ = ("kind", "start", "end", "members", "dtype", "size")

    def __init__(self, kind, start, end, first, dtype=None, size=None):
        self.kind, self.start, self.end, self.members = kind, start, end, [first]
        self.dtype, self.size = dtype, size


def may_alias(node):
    """May the node's output share an input's memory (the op's `aliases` trait; any op not declared)?"""
    op = OPS.get(node.op)
    return op is None or op.aliases is not None


def numel(shape):
    """Number of elements, or None for a symbolic shape."""
    n = 1
    for s in shape:
        if not isinstance(s, int):
            return None
        n *= s
    return n


def alias_roots(graph):
    """value name -> name of the value whose memory it may share (itself for fresh values)."""
    root = {v.name: v.name for _, v in graph.inputs}
    get = OPS.get
    for n in graph.nodes:
        name = n.out.name
        op = get(n.op)
        if op is None or op.aliases is not None:      # may_alias(n), inlined: called per node per pass
            for x in n.inputs:
                if isinstance(x, Value):
                    name = root.get(x.name, x.name)
                    break
        root[n.out.name] = name
    return root


def alias_ends(graph):
    """value name -> index of the last node that reads it or any value that may alias it; inf
    when it (or such a value) is returned or written back; its definition if unread."""
    end = {}
    views = []       # the nodes that may_alias, in order (inlined: this runs per compile on every node)
    get = OPS.get
    for i, n in enumerate(graph.nodes):
        end[n.out.name] = i
        for v in n.inputs:
            if isinstance(v, Value):
                end[v.name] = i
        op = get(n.op)
        if op is None or op.aliases is not None:
            views.append(n)
    for v in graph.outputs:
        end[v.name] = math.inf
    for _, v in graph.mutations:
        end[v.name] = math.inf
    for n in reversed(views):
        e = end[n.out.name]
        for v in n.inputs:
            if isinstance(v, Value) and e > end.get(v.name, -1):
                end[v.name] = e
    return end


def memory_plan(graph, writes=None, buffers=True, units=None, takes=None, ends=None):
    """The MemoryPlan of `graph`. `writes(node)` is the backend's predicate (OUT, BUFFER, FRESH
    or NONE; default OUT for every node); buffers=False plans in place only (no buffers);
    `units` and `takes` as in the module docstring; `ends`: the graph's alias_ends when the
    caller computed them already (a backend's driver does)."""
    if ends is None:
        ends = alias_ends(graph)
    if units is not None:
        ends = _UnitEnds(ends, units)
    what = []       # node index -> its predicate's answer; None for a view
    get = OPS.get
    for n in graph.nodes:
        op = get(n.op)
        what.append(None if op is None or op.aliases is not None else OUT if writes is None else writes(n))
    root = alias_roots(graph) if OUT in what else None    # only rule 2 (OUT nodes) asks for roots
    storage = {}    # value name -> its _Storage (fresh values, chains and targets)
    inplace, targets = _target_chains(graph, what, ends, units)
    for v, t in (takes or {}).items():
        inplace[v] = t
        targets.append(t)
    for t in targets:
        storage[t] = _Storage("target", -1, math.inf, t)
    for k, n in enumerate(graph.nodes):
        w, out, i = what[k], n.out, k if units is None else units[k]
        if w is None or w == NONE:
            continue
        if out.name in inplace:                      # a target chain
            st = storage[inplace[out.name]]
        else:
            x = _dying_input(n, i, storage, ends, root) if w == OUT and OPS[n.op].pointwise else None
            if x is not None:
                inplace[out.name] = x
                st = storage[x]
                st.end = max(st.end, ends[out.name])
            else:
                kind = "buffer" if w in (OUT, BUFFER) and buffers and ends[out.name] != math.inf \
                    and numel(out.shape) is not None else "fresh"
                storage[out.name] = _Storage(kind, i, ends[out.name], out.name, out.dtype, numel(out.shape))
                continue
        st.members.append(out.name)
        storage[out.name] = st
    chains = {id(st): st for st in storage.values() if st.kind == "buffer"}.values()
    plan, sizes = _assign(chains)
    order = [n.out.name for n in graph.nodes]
    return MemoryPlan({v: plan[v] for v in order if v in plan}, {v: inplace[v] for v in order if v in inplace}, sizes,
                      made_for=graph)


class _UnitEnds(dict):
    """alias_ends counted in units ({value: units[end]}), each converted when first asked: the
    planner asks for the few values kernels write, not the graph's every value."""
    __slots__ = ("ends", "units")

    def __init__(self, ends, units):
        super().__init__()
        self.ends, self.units = ends, units

    def __missing__(self, v):
        e = self.ends[v]
        self[v] = e = e if e == math.inf else self.units[e]
        return e

    def get(self, v, default=None):
        return self[v] if v in self.ends else default


def _dying_input(n, i, storage, ends, root):
    """An input whose memory node `n` may overwrite (rule 2 of the module docstring), or None."""
    out, vals = n.out, n.input_values()
    escapes = ends[out.name] == math.inf
    for v in vals:
        st = storage.get(v.name)
        if st is None or st.kind == "target" or st.end != i or (st.kind == "buffer" and escapes) \
                or tuple(v.shape) != tuple(out.shape) or v.dtype != out.dtype:
            continue
        if all(u is v or root[u.name] != v.name for u in vals):
            return v.name
    return None


def _target_chains(graph, what, ends, units):
    """({value name: the input it overwrites}, [targets]): the mutation chains of rule 1."""
    reader = {}   # value name -> (node index, output) where it dies, read by an elementwise OUT node
    for j, n in enumerate(graph.nodes):
        if what[j] != OUT or not OPS[n.op].pointwise:
            continue
        for x in n.input_values():
            if ends.get(x.name) == (j if units is None else units[j]) and x.name not in reader \
                    and tuple(x.shape) == tuple(n.out.shape) and x.dtype == n.out.dtype:
                reader[x.name] = (j, n.out)
                break
    forced, targets = {}, []   # node index -> (its value, the input it overwrites)
    if not reader:
        return {}, targets
    counts = _counts(graph)   # a target written twice, or a value written to two targets: leave alone
    inputs = {v.name: v for _, v in graph.inputs}
    escaping = returned(graph)
    for target, mv in graph.mutations:
        m, v = mv.name, inputs.get(target)
        if v is None or target.endswith(".grad") or counts[target] > 1 or counts[m] > 1 or m in escaping \
                or ends.get(target) == math.inf or numel(v.shape) is None:
            continue
        chain, x = [], target
        while x in reader and x != m:
            j, out = reader[x]
            if out.name != m and ends[out.name] == math.inf:
                break
            chain.append((j, x, out.name))
            x = out.name
        if x != m or not chain or any(j in forced for j, _, _ in chain):
            continue
        for j, prev, name in chain:
            forced[j] = (name, prev)
        targets.append(target)
    return dict(forced.values()), targets


def _counts(graph):
    """name -> how often it is a mutation's target or value."""
    counts = {}
    for t, v in graph.mutations:
        counts[t] = counts.get(t, 0) + 1
        counts[v.name] = counts.get(v.name, 0) + 1
    return counts


def _assign(chains):
    """({value name: buffer id}, [(dtype, numel)]): the greedy assignment of the docstring."""
    plan, sizes, busy = {}, [], []     # busy[b] = (sorted starts, ends)
    by_dtype = {}                      # dtype -> buffer ids, largest first (creation order)
    for st in sorted(chains, key=lambda c: (-c.size, c.start)):
        size = st.size
        best = None
        ids = by_dtype.setdefault(st.dtype, [])
        for k in range(len(ids) - 1, max(len(ids) - 1 - SEARCH, -1), -1):   # smallest first
            if _free(busy[ids[k]], st.start, st.end):
                best = ids[k]
                break
        if best is None:
            ids.append(len(sizes))
            best = len(sizes)
            sizes.append((st.dtype, size))
            busy.append(([], []))
        starts, ends = busy[best]
        k = bisect_left(starts, st.start)
        starts.insert(k, st.start)
        ends.insert(k, st.end)
        for name in st.members:
            plan[name] = best
    return plan, sizes


def _free(busy, start, end):
    """Is [start, end] disjoint from every interval of a buffer (sorted, disjoint)?"""
    starts, ends = busy
    k = bisect_left(starts, start)
    if k > 0 and ends[k - 1] >= start:
        return False
    return k == len(starts) or starts[k] > end


def check_memory_plan(graph):
    """Raise ValueError unless following graph.memory_plan is safe: no value overwrites memory
    that a live value (or a view of it) still holds, in-place hand-overs excepted; buffers hold
    nothing the user receives and fit their values; a mutation target's array is written only
    by its own chain, ending at the value written back; views and graph inputs keep theirs."""
    plan = graph.memory_plan
    if plan is None:
        return graph
    ends, root = alias_ends(graph), alias_roots(graph)
    inputs = {v.name for _, v in graph.inputs}
    escaping = returned(graph)
    counts = _counts(graph)
    target_of = {v.name: t for t, v in graph.mutations if counts[t] == counts[v.name] == 1}
    taken = {x: v for v, x in plan.inplace.items()}   # value -> the value written into its memory
    where = {}    # value name -> its memory: ("buffer", id), ("input", name) or ("fresh", name)
    owner = {}    # memory -> (value name, last index) holding it now
    for i, n in enumerate(graph.nodes):
        name, b, x = n.out.name, plan.buffer.get(n.out.name), plan.inplace.get(n.out.name)
        if b is None and x is None:
            if not may_alias(n):
                where[name] = ("fresh", name)
                owner[where[name]] = (name, ends[name])
            continue
        if may_alias(n):
            raise ValueError(f"memory plan: {name} ({n.op}) is a view and owns no memory to plan")
        if x is not None:
            ins = n.input_values()
            v = next((u for u in ins if u.name == x), None)
            if v is None or tuple(v.shape) != tuple(n.out.shape) or v.dtype != n.out.dtype:
                raise ValueError(f"memory plan: {name} is written in place into {x!r}, not an input of "
                                 "its shape and dtype")
            if any(u is not v and root[u.name] == x for u in ins):
                raise ValueError(f"memory plan: {name} is written into {x}, which another input views")
            if x in inputs:
                last = name                 # the last value of the in-place chain through name
                while last in taken:
                    last = taken[last]
                if target_of.get(last) != x or name in escaping:
                    raise ValueError(f"memory plan: {name} is written into input {x!r}, but its chain does not "
                                     f"end at the value written back to {x!r}")
                where[x] = ("input", x)
                owner[where[x]] = (x, ends.get(x, -1))
            mem = where.get(x)
            if mem is None:
                raise ValueError(f"memory plan: {name} is written into {x!r}, a view or a value without memory")
        else:
            if not 0 <= b < len(plan.buffers):
                raise ValueError(f"memory plan: {name} names buffer {b}; the plan has {len(plan.buffers)}")
            dtype, size = plan.buffers[b]
            if dtype != n.out.dtype or numel(n.out.shape) is None or size < numel(n.out.shape):
                raise ValueError(f"memory plan: buffer {b} ({dtype}[{size}]) cannot hold {n.out!r}")
            mem = ("buffer", b)
        if mem[0] == "input" and (name in escaping or ends[name] == math.inf and target_of.get(name) != mem[1]):
            raise ValueError(f"memory plan: {name} is written into input {mem[1]!r} and also returned or "
                             "written elsewhere")
        if mem[0] == "buffer" and ends[name] == math.inf:
            raise ValueError(f"memory plan: {name} is returned or written back and must not be in a buffer "
                             "(the next call overwrites it)")
        if b is not None and mem != ("buffer", b):
            raise ValueError(f"memory plan: {name} is in buffer {b} but written into {x}, held elsewhere")
        prev = owner.get(mem)
        if prev is not None:
            held, end = prev
            if end > i or (end == i and held != x):
                raise ValueError(f"memory plan: {name} (defined at node {i}) overwrites {held} (read until "
                                 f"node {end}) in {mem[0]} {mem[1]}")
        where[name] = mem
        owner[mem] = (name, ends[name])
    return graph


def returned(graph):
    """Names of the outputs and of every value an output may be a view of."""
    out = {v.name for v in graph.outputs}
    get = OPS.get
    for n in reversed(graph.nodes):
        if n.out.name in out:
            op = get(n.op)
            if op is None or op.aliases is not None:      # may_alias(n), inlined: runs per compile
                out.update(v.name for v in n.input_values())
    return out
