"""Fused kernels for backends c and cuda: the pass pipeline, the kernel plan and the driver.

Both backends compute fusion groups with generated kernels and everything else with the
ops' kernels; they differ only in the kernels' language and device (`Binding`):

1. `PIPELINE`: the usual clean-up, then the row composites (softmax, layer_norm,
   cross-entropy, gelu and their backward ops) decomposed into primitives and fused again
   with only what kernels compute (`fusible`), so each becomes one row kernel with its
   neighbours; a linear's bias add joins the kernel reading its output (passes/epilogue.py);
   a batch times a matrix is one GEMM, and a cat of reshaped views copies once (passes/layout.py).
2. `plan_kernels`: each fusion group -- and each lone elementwise or reduction node over at
   least `singleton_min` elements -- is lowered to a Kernel (compiler/kernels/lower.py); a
   group that does not lower as a whole gives its longest lowerable prefix, and the rest is
   tried again.
3. `set_inplace`, then `driver`: which kernel outputs overwrite their mutation target (part
   of each kernel's C function, so decided first: backend c starts its C compiler before it
   builds the driver); the Python driver (driver.py) calling kernel K_<name> with data
   pointers per group -- a pointer passed once taken inline, one passed again (a later kernel,
   an in-place output) kept in a local, a reused buffer's taken once per buffer set -- and
   the op's kernel for other nodes. Where kernel outputs go is passes/memplan.py's
   plan (each kernel one unit, fed by `_writes`): into the arrays of the mutation targets
   they update (optimizer steps, in place: `_inplace_targets` says which a kernel can),
   into buffers reused by every call (values that stay inside the program), or into fresh
   arrays (values the user receives).
"""
import math

from ...runtime.ops import OPS
from ...runtime.kernels.ir import DTYPES, contiguous_strides
from ..kernels.lower import (DECOMPOSED, LOWERABLE, RANDOM, REDUCIBLE, Unsupported, index_space, lower_group,
                             walk_group)
from ..passes import CLEANUP, cse, dce, fusion, schedule, simplify
from ..passes.decompose import decompose, decomposable
from ..passes.epilogue import bias_epilogues
from ..passes.layout import layout
from ..passes.memplan import BUFFER, FRESH, NONE, alias_ends, memplan, returned
from ..passes.util import numel
from .driver import Driver, literal, where

__all__ = ["PIPELINE", "SINGLETON_MIN", "fusible", "plan_kernels", "uses_float16", "set_inplace", "driver"]

SINGLETON_MIN = 1 << 16     # a lone op is worth a kernel (threads) only when this large
# composite ops whose lowering is their decomposition into a row kernel (softmax, layer_norm,
# cross-entropy and their derivatives, kernels/lower.py): decomposed before fusion, so each
# becomes one fused kernel together with the elementwise work around it; linear, embedding,
# batch_norm and conv stay as they are (their `why_not["lowering"]` says why)
ROW_COMPOSITES = tuple(n for n, op in OPS.items() if op.lowering is DECOMPOSED)


def fusible(node):
    """Can a kernel compute this node? (the lowering may still refuse a dtype or shape)"""
    if node.op in RANDOM:   # the kernel RNG draws float16/32/64; bfloat16 draws stay numpy's
        return node.out.dtype in DTYPES and node.out.dtype != "bfloat16"
    return (node.op in LOWERABLE or node.op in REDUCIBLE) and node.out.dtype in DTYPES


def decompose_rows(graph):
    """The row composites decomposed into primitives (each lowers to one row kernel)."""
    return decompose(graph, ops=[op for op in ROW_COMPOSITES if op in decomposable()])


def fuse_kernels(graph):
    """Fusion groups restricted to what kernels compute."""
    return fusion(graph, fusible=fusible)


def split_bias(graph):
    """linear's bias added by the kernel that reads its output (passes/epilogue.py)."""
    return bias_epilogues(graph, fusible)


PIPELINE = CLEANUP + [decompose_rows, dce, cse, simplify, layout, dce, split_bias, schedule, fuse_kernels]


def uses_float16(k):
    return k.uses_dtype("float16")


def plan_kernels(graph, singleton_min=SINGLETON_MIN, float16=True):
    """[(first node index, member names, Kernel)] for the groups that lower, in graph order.
    float16=False: groups computing float16 values are left to numpy."""
    index = {n.out.name: i for i, n in enumerate(graph.nodes)}
    escaping = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    groups = [list(g) for g in graph.fusion_groups or ()]
    grouped = {m for g in groups for m in g}
    for n in graph.nodes:
        if n.out.name in grouped or not (n.op in LOWERABLE or n.op in REDUCIBLE):
            continue
        size = numel(index_space([n])) if all(hasattr(x, "shape") for x in n.input_values()) else None
        if size is not None and size >= singleton_min:
            groups.append([n.out.name])
            grouped.add(n.out.name)
    groups.sort(key=lambda g: index[g[0]])
    readers = {}             # member of a group -> the nodes reading it
    for n in graph.nodes:
        for x in n.inputs:
            name = getattr(x, "name", None)
            if name in grouped:
                readers.setdefault(name, []).append(n.out.name)
    plan = []

    def outside_reads(nodes):
        """For each of `nodes`: True when the value escapes or a node outside `nodes` reads it,
        else the position of its last reader among `nodes` (-1: none). Its prefix nodes[:cut]
        must store it when True or >= cut: one pass serves every prefix tried."""
        pos = {n.out.name: i for i, n in enumerate(nodes)}
        out = []
        for n in nodes:
            m = n.out.name
            if m in escaping:
                out.append(True)
                continue
            last = -1
            for r in readers.get(m, ()):
                i = pos.get(r)
                if i is None:
                    last = True
                    break
                last = max(last, i)
            out.append(last)
        return out

    for g in groups:
        idx = [index.get(m) for m in g]
        if None in idx or idx != list(range(idx[0], idx[0] + len(idx))):
            continue      # not contiguous in this order: leave it to the kernels
        nodes = [graph.nodes[i] for i in idx]
        while nodes:
            # the longest prefix that lowers becomes a kernel; the rest is tried again
            walk, reads = walk_group(nodes), outside_reads(nodes)
            for cut in range(len(nodes), 0, -1):
                part = nodes[:cut]
                needed = {n.out.name for n, r in zip(part, reads) if r is True or r >= cut}
                try:
                    k = lower_group(part, needed, f"k{len(plan)}", walk)
                except Unsupported:
                    continue
                if not float16 and uses_float16(k):
                    continue
                size = numel(k.shape)
                if cut > 1 or (size is not None and size >= singleton_min):
                    plan.append((index[part[0].out.name], [n.out.name for n in part], k))
                break
            else:
                cut = 1
            nodes = nodes[cut:]
    return plan


def _inplace_targets(graph, plan, ends):
    """{kernel name: {output slot: input slot}}: mutation outputs a kernel writes straight into
    the array of the input they update (an optimizer step: p, m, v read and written at the
    same index). Only for elementwise kernels reading the target over the whole index space,
    when nothing reads the target (or a view of it) after the kernel, and the value is
    neither returned nor written to a second target."""
    counts = {}
    for t, v in graph.mutations:
        counts[t] = counts.get(t, 0) + 1
        counts[v.name] = counts.get(v.name, 0) + 1
    inputs = {v.name for _, v in graph.inputs}
    target_of = {v.name: t for t, v in graph.mutations}
    escaping = returned(graph)
    out = {}
    for start, members, k in plan:
        if k.row_dims or k.reduction is not None:
            continue
        last = start + len(members) - 1
        slots = {b.name: s for s, b in enumerate(k.inputs)}
        for o, b in enumerate(k.outputs):
            t = target_of.get(b.name)
            s = slots.get(t)
            if t is None or s is None or t not in inputs or counts[t] > 1 or counts[b.name] > 1 \
                    or b.name in escaping or ends.get(t, math.inf) > last:
                continue
            src = k.inputs[s]
            if src.dtype != b.dtype or tuple(src.shape) != tuple(k.shape) or tuple(b.shape) != tuple(k.shape) \
                    or src.strides != contiguous_strides(k.shape) or s in out.get(k.name, {}).values():
                continue
            out.setdefault(k.name, {})[o] = s
    return out


def _param_args(k, node_of, drv, code, temps):
    """Driver arguments for kernel `k`'s scalar params (ir.Param: a fused random node's seed
    and offset), taken per call from `overrides` exactly as an unfused random node takes
    them (`per_call`), so a compiled program draws the numbers eager mode would. Appends the
    lookups to `code` (their variables to `temps`); returns the argument expressions, each
    `A_u64(...)` (int for ctypes' c_uint64, numpy.uint64 for cupy)."""
    args, looked_up = [], {}
    for p in k.params:
        var = looked_up.get(p.node)
        if var is None:
            n = node_of[p.node]
            attrs = [q.attr for q in k.params if q.node == p.node]
            recorded = ", ".join(f"{a}={drv.const(n.attrs[a])}" for a in attrs)
            var = looked_up[p.node] = drv.names.add(f"_r{len(looked_up)}")
            temps.append(var)
            code.append(f"{var} = per_call(overrides, {p.node!r}, {recorded})")
        args.append(f"A_u64({var}[{p.attr!r}])")
    return args


def _writes(plan, fused):
    """The backend's predicate for passes/memplan.py: a kernel writes its (non-0-d) outputs into
    any buffer it is given, computes its other members in registers, and the ops' kernels of
    unfused nodes make fresh arrays."""
    outputs = {b.name for _, _, k in plan for b in k.outputs}

    def writes(n):
        if n.out.name in outputs:
            return BUFFER if n.out.shape else FRESH
        return NONE if n.out.name in fused else FRESH
    return writes


def set_inplace(graph, plan, inplace=True):
    """Decide which kernel outputs are written into their mutation target's array (each
    Kernel's `inplace`, part of what its C function computes: `functions` reads it) and return
    `alias_ends(graph)` for `driver`. Apart from `driver`, so that a backend can render its
    kernels and start their compiler before it builds the driver."""
    ends = alias_ends(graph)
    targets = _inplace_targets(graph, plan, ends) if inplace else {}
    for k in (k for _, _, k in plan):
        k.inplace = targets.get(k.name, {})
    return ends


def driver(graph, plan, binding, language, ends):
    """The Driver of the program that runs `plan` ([(first node index, member names, Kernel)])
    over `graph`, after `set_inplace` (`ends`: what it returned); the backend binds each kernel
    as global K_<name>, then loads it.

    Kernel outputs go where memplan puts them, each kernel one unit: (1) for a mutation whose
    target the kernel reads elementwise: into the target's own array (`inplace`; the
    write-back then has nothing to copy), (2) for values used only inside the program: into
    buffers allocated once per buffer set and reused by every call (by liveness: a buffer is
    taken again after the last read of its value or a view of it), (3) otherwise into fresh
    arrays (the user receives them)."""
    drv = Driver(graph, binding)
    names = drv.names
    starts = {start: (members, k) for start, members, k in plan}
    node_of = {n.out.name: n for n in graph.nodes}
    fused = {m for _, members, _ in plan for m in members}
    targets_of = {}
    for t, v in graph.mutations:
        targets_of.setdefault(v.name, []).append(t)
    drv.updated = [t for _, _, k in plan for o, b in enumerate(k.outputs) if o in k.inplace
                   for t in targets_of.get(b.name, ())]
    unit_of = {}             # node index -> unit index (a kernel's nodes run as one unit)
    count = 0
    for i, n in enumerate(graph.nodes):
        if n.out.name in fused and i not in starts:
            unit_of[i] = unit_of[i - 1]
        else:
            unit_of[i] = count
            count += 1
    memory = memplan(graph, _writes(plan, fused), units=unit_of, takes={
        k.outputs[o].name: k.inputs[s].name for _, _, k in plan for o, s in k.inplace.items()}, ends=ends).memory_plan
    view_of = drv.use_buffers(memory, pointers=True)
    contiguous = set()       # values made by kernels: contiguous, recorded dtype
    # each array's pointer is taken once per call (ptr() is the costliest part of a kernel line:
    # ~0.3 us, and an optimizer's kernels read lr, betas and eps again for every parameter): a
    # pointer passed more than once (a later kernel reads the array, or an in-place output
    # passes its input's again) gets a local, the others are taken inline in the call.
    # (value, dtype) -> (its array's local, its pointer's local or inline expression, whether
    # the array is a temporary to `del` after its last read)
    held = {}
    last_read = {(b.name, b.dtype): j for j, (_, _, k) in enumerate(plan) for b in k.inputs}
    kernel_index = {start: j for j, (start, _, _) in enumerate(plan)}

    def pointer(arr, code, keep):
        if not keep:
            return f"ptr({arr})"
        p = names.add(f"_p{len(names.map)}")
        code.append(f"{p} = ptr({arr})")
        return p

    for i, n in enumerate(graph.nodes):
        if n.op not in OPS:
            raise ValueError(f"{binding.backend.replace('_backend', '')} backend: node {n.out.name} applies "
                             f"unknown op {n.op!r}")
        if i not in starts:
            if n.out.name not in fused:
                drv.step(f"{names[n.out.name]} = {drv.call(n)}", where(n), [n.out.name],
                         [v.name for v in n.input_values()], [n.out.name])
            continue
        members, k = starts[i]
        j = kernel_index[i]
        code, temps = [], []
        keys = [(b.name, b.dtype) for b in k.inputs]
        passes = {}
        for key in keys:
            passes[key] = passes.get(key, 0) + 1
        into = {}            # input slot -> the in-place output whose array it is
        for o, s in k.inplace.items():
            passes[keys[s]] += 1 + (last_read.get((k.outputs[o].name, k.outputs[o].dtype), -1) > j)
            into[s] = k.outputs[o]
        arrays, ptrs = [], []
        for s, (b, key) in enumerate(zip(k.inputs, keys)):
            if key not in held:
                if b.name in contiguous:
                    arr, temp = names[b.name], False
                elif s in into and into[s].dtype == b.dtype:
                    # the converted array is the in-place output's own (its value from here on)
                    arr, temp = names[into[s].name], False
                    code.append(f"{arr} = asarray({names[b.name]}, {drv.dtype(b.dtype)}, 'C')")
                else:
                    arr, temp = names.add("_c" + str(s)), True
                    code.append(f"{arr} = asarray({names[b.name]}, {drv.dtype(b.dtype)}, 'C')")
                held[key] = (arr, pointer(arr, code, passes[key] > 1 or last_read[key] > j), temp)
            arr, p, _ = held[key]
            arrays.append(arr)
            ptrs.append(p)
        for key in dict.fromkeys(keys):   # (in order: deterministic source)
            if last_read[key] == j:
                arr, _, temp = held.pop(key)
                if temp:
                    temps.append(arr)
        for o, b in enumerate(k.outputs):
            later = last_read.get((b.name, b.dtype), -1) > j
            if o in k.inplace:
                if arrays[k.inplace[o]] != names[b.name]:
                    code.append(f"{names[b.name]} = {arrays[k.inplace[o]]}")
                p = ptrs[k.inplace[o]]
            elif b.name in view_of and drv.bind(b.name, view_of[b.name]):
                p = f"{view_of[b.name]}_p"      # the buffer's array, its pointer taken per buffer set
            else:
                if b.name in view_of:
                    code.append(f"{names[b.name]} = {view_of[b.name]}")
                else:
                    code.append(f"{names[b.name]} = A_empty({literal(tuple(b.shape))}, {drv.dtype(b.dtype)})")
                p = pointer(names[b.name], code, later)
            ptrs.append(p)
            contiguous.add(b.name)
            if later:
                held[(b.name, b.dtype)] = (names[b.name], p, False)
        ptrs += _param_args(k, node_of, drv, code, temps)
        drv.step(f"K_{k.name}({', '.join(ptrs)})", f"{k.name}: fused {' '.join(members)}", members,
                 [b.name for b in k.inputs], [b.name for b in k.outputs], setup=code,
                 cleanup=[f"del {', '.join(temps)}"] if temps else ())
    nb = len(memory.buffers)
    drv.notes.append(f"# {len(graph.nodes)} nodes; {len(plan)} fused {language} kernel"
                     f"{'s' if len(plan) != 1 else ''}; {nb} reused buffer{'s' if nb != 1 else ''}")
    drv.buffer_note = "kernel outputs used only inside the program, reused by every call"
    return drv
