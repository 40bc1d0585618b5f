"""Backend "c": fused groups as C kernels (OpenMP), everything else like the numpy backend.

`CBackend().compile(graph)`:

1. prepare: decompose the row composites (softmax, layer_norm, cross-entropy, gelu and
   their backward ops) into primitives and fuse again with only what kernels compute
   (`prepare`, `fusible`), so each of them becomes one row kernel with its neighbours.
2. plan: each fusion group -- and each lone elementwise or reduction node over at least
   `singleton_min` elements -- is lowered to a Kernel (compiler/kernels/lower.py); a
   group that does not lower as a whole gives its longest lowerable prefix, and the rest
   is tried again.
3. render the kernels into C (kernels/render.py: one source per CHUNK kernels), compile
   them with the system compiler, in parallel, and load them with ctypes
   (runtime/kernel_cache.py: disk cache keyed by source + compiler version + flags).
4. generate the Python driver, like the numpy backend (its naming, literals, per-call
   attributes and override checks are imported from there): other nodes call their op's
   kernel (matmul and convolution stay on BLAS through numpy); a kernel call passes data
   pointers. Outputs go into the arrays of the mutation targets they update (optimizer
   steps, in place), into buffers reused by every call (values that stay inside the
   program), or into fresh arrays (values the user receives) -- see `render`.

Without a C compiler (none on PATH, or $EAGERC_CC missing) the graph goes to the numpy
backend, with a one-line RuntimeWarning. A graph with nothing to fuse does too. The
program carries `.source` (the driver), `.c_source`, `.kernels` (Kernel IR) and
`.library` (paths of the shared objects: a graph with many kernels is split into a few,
compiled in parallel).
"""
import ctypes
import keyword
import os
import re
import warnings

import numpy as np

from ...runtime import kernel_cache
from ...runtime.ops import OPS
from ..kernels.ir import DTYPES, contiguous_strides
from ..passes.util import numel
from ..kernels.lower import DECOMPOSED, LOWERABLE, RANDOM, REDUCIBLE, Unsupported, index_space, lower_group
from ..kernels.render import render_c
from . import register_backend
from .numpy_backend import (NumpyBackend, driver_names, load_program, _check_fixed, _INF, _literal, _np_type,
                            _per_call, _returned, _shared_or_readonly, _static_alias_ends, _where,
                            per_call_attrs)

__all__ = ["CBackend", "plan_kernels", "render"]

SINGLETON_MIN = 1 << 16     # a lone op is worth a C kernel (threads) only when this large
# composite ops whose lowering is their decomposition into a row kernel (softmax, layer_norm,
# cross-entropy and their derivatives, kernels/lower.py): decomposed before fusion, so each
# becomes one fused kernel together with the elementwise work around it; linear, embedding,
# batch_norm and conv stay as they are (their `why_not["lowering"]` says why)
ROW_COMPOSITES = tuple(n for n, op in OPS.items() if op.lowering is DECOMPOSED)


def fusible(node):
    """Can a kernel compute this node? (the lowering may still refuse a dtype or shape)"""
    return (node.op in LOWERABLE or node.op in REDUCIBLE or node.op in RANDOM) and node.out.dtype in DTYPES


def prepare(graph):
    """The graph as backend c fuses it: ROW_COMPOSITES decomposed into primitives, then the
    usual clean-up and fusion restricted to what kernels compute."""
    from ..passes import cse, dce, fusion, schedule, simplify
    from ..passes.decompose import decompose, decomposable
    ops = [op for op in ROW_COMPOSITES if op in decomposable()]
    g = graph
    if any(n.op in ops for n in g.nodes):
        g = schedule(simplify(cse(dce(decompose(g, ops=ops)))))
    return fusion(g, fusible=fusible)


def _uses_float16(k):
    return any(b.dtype == "float16" for b in k.inputs + k.outputs) or any(i.dtype == "float16" for i in k.instrs)


def plan_kernels(graph, singleton_min=SINGLETON_MIN, float16=True):
    """[(first node index, member names, Kernel)] for the groups that lower, in graph order.
    float16=False: groups computing float16 values are left to numpy."""
    index = {n.out.name: i for i, n in enumerate(graph.nodes)}
    readers = {}
    for n in graph.nodes:
        for v in n.input_values():
            readers.setdefault(v.name, set()).add(n.out.name)
    escaping = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    groups = [list(g) for g in graph.fusion_groups or ()]
    grouped = {m for g in groups for m in g}
    for n in graph.nodes:
        if n.out.name in grouped or not (n.op in LOWERABLE or n.op in REDUCIBLE):
            continue
        size = numel(index_space([n])) if all(hasattr(x, "shape") for x in n.input_values()) else None
        if size is not None and size >= singleton_min:
            groups.append([n.out.name])
    groups.sort(key=lambda g: index[g[0]])
    plan = []

    def needed(ms):
        return {m for m in ms if m in escaping or readers.get(m, set()) - ms}

    for g in groups:
        idx = [index.get(m) for m in g]
        if None in idx or idx != list(range(idx[0], idx[0] + len(idx))):
            continue      # not contiguous in this order: leave it to the kernels
        nodes = [graph.nodes[i] for i in idx]
        while nodes:
            # the longest prefix that lowers becomes a kernel; the rest is tried again
            for cut in range(len(nodes), 0, -1):
                part = nodes[:cut]
                members = {n.out.name for n in part}
                try:
                    k = lower_group(part, needed(members), f"k{len(plan)}")
                except Unsupported:
                    continue
                if not float16 and _uses_float16(k):
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
    returned = _returned(graph)
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
                    or b.name in returned or ends.get(t, _INF) > last:
                continue
            src = k.inputs[s]
            if src.dtype != b.dtype or tuple(src.shape) != tuple(k.shape) or tuple(b.shape) != tuple(k.shape) \
                    or src.strides != contiguous_strides(k.shape) or s in out.get(k.name, {}).values():
                continue
            out.setdefault(k.name, {})[o] = s
    return out


def _param_args(k, node_of, names, const, code, temps):
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
            recorded = ", ".join(f"{a}={const(n.attrs[a])}" for a in attrs)
            var = looked_up[p.node] = names.add(f"_r{len(looked_up)}")
            temps.append(var)
            code.append(f"{var} = per_call(overrides, {p.node!r}, {recorded})")
        args.append(f"A_u64({var}[{p.attr!r}])")
    return args


def render(graph, plan, inplace=True):
    """(source, globals) of the Python driver; kernels are bound later as globals K_<name>.

    Kernel outputs go (1) for a mutation whose target the kernel reads elementwise: into the
    target's own array (`inplace`; the write-back then has nothing to copy), (2) for values
    used only inside the program: into buffers allocated once per buffer set and reused by
    every call (by liveness: a buffer is taken again after the last read of its value or a
    view of it), (3) otherwise into fresh arrays (the user receives them)."""
    per_call = per_call_attrs(graph)
    names, consts, const, arg = driver_names(graph)
    kernels = {}

    starts = {start: (members, k) for start, members, k in plan}
    node_of = {n.out.name: n for n in graph.nodes}
    fused = {m for _, members, _ in plan for m in members}
    ends = _static_alias_ends(graph)
    targets = _inplace_targets(graph, plan, ends) if inplace else {}
    for k in (k for _, _, k in plan):
        k.inplace = targets.get(k.name, {})
    updated = [t for _, _, k in plan for o, b in enumerate(k.outputs) if o in k.inplace
               for t, v in graph.mutations if v.name == b.name]
    unit_of = {}             # node index -> unit index
    count = 0
    for i, n in enumerate(graph.nodes):
        if n.out.name in fused and i not in starts:
            unit_of[i] = unit_of[i - 1]
        else:
            unit_of[i] = count
            count += 1
    buffers = []             # [(name, shape, dtype)] allocated once per buffer set
    busy = []                # [(buffer index, last unit reading it)]
    free = {}                # (shape, dtype) -> [buffer index]
    # units: (code lines, comment, reads, defines)
    units = []
    contiguous = set()       # values made by kernels: contiguous, recorded dtype
    for i, n in enumerate(graph.nodes):
        if n.op not in OPS:
            raise ValueError(f"c backend: node {n.out.name} applies unknown op {n.op!r}")
        if i in starts:
            members, k = starts[i]
            u = unit_of[i]
            for bi, last in busy:
                if last < u:
                    free.setdefault(buffers[bi][1:], []).append(bi)
            busy = [(bi, last) for bi, last in busy if last >= u]
            code, ptrs, temps = [], [], []
            loaded = []
            for b in k.inputs:
                if b.name in contiguous:
                    ptrs.append(f"ptr({names[b.name]})")
                    loaded.append(names[b.name])
                else:
                    tmp = names.add("_c" + str(len(ptrs)))
                    temps.append(tmp)
                    code.append(f"{tmp} = asarray({names[b.name]}, {_np_type(b.dtype)}, order='C')")
                    ptrs.append(f"ptr({tmp})")
                    loaded.append(tmp)
            for o, b in enumerate(k.outputs):
                key = (tuple(b.shape), b.dtype)
                end = ends.get(b.name, _INF)
                if o in k.inplace:
                    code.append(f"{names[b.name]} = {loaded[k.inplace[o]]}")
                elif end != _INF and b.shape:
                    pool = free.get(key)
                    bi = pool.pop() if pool else None
                    if bi is None:
                        bi = len(buffers)
                        buffers.append((f"buf{bi}",) + key)
                    busy.append((bi, unit_of[end]))
                    code.append(f"{names[b.name]} = {buffers[bi][0]}")
                else:
                    code.append(f"{names[b.name]} = A_empty({_literal(tuple(b.shape))}, {_np_type(b.dtype)})")
                ptrs.append(f"ptr({names[b.name]})")
                contiguous.add(b.name)
            ptrs += _param_args(k, node_of, names, const, code, temps)
            code.append(f"K_{k.name}({', '.join(ptrs)})")
            if temps:
                code.append(f"del {', '.join(temps)}")
            comment = f"{k.name}: fused {' '.join(members)}"
            units.append((code, comment, [b.name for b in k.inputs], [b.name for b in k.outputs]))
            continue
        if n.out.name in fused:
            continue
        kname = kernels.get(n.op)
        if kname is None:
            kname = kernels[n.op] = "k_" + re.sub(r"\W", "_", n.op)
        args = [arg(x) for x in n.inputs]
        varying = per_call.get(n.out.name, ())
        for key, val in n.attrs.items():
            if key in varying:
                continue
            if key.isidentifier() and not keyword.iskeyword(key):
                args.append(f"{key}={const(val)}")
            else:
                args.append(f"**{{{key!r}: {const(val)}}}")
        if varying:
            recorded = ", ".join(f"{key}={const(n.attrs[key])}" for key in varying)
            args.append(f"**per_call(overrides, {n.out.name!r}, {recorded})")
        expr = f"{kname}({', '.join(args)})"
        if not n.out.shape:
            expr = f"asarray({expr})"
        units.append(([f"{names[n.out.name]} = {expr}"], _where(n) or f"{n.out.name}: {n.out.type_str()}",
                      [v.name for v in n.input_values()], [n.out.name]))

    # liveness: del each value after the unit that reads it last
    kept = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    last = {}
    for j, (_, _, reads, defines) in enumerate(units):
        for d in defines:
            last.setdefault(d, j)
        for r in reads:
            last[r] = j
    for _, v in graph.inputs:
        last.setdefault(v.name, -1)
    dead_at = {}
    for v, j in last.items():
        if v not in kept:
            dead_at.setdefault(j, []).append(v)

    lines = ["# Constructed by c_backend",
             f"# {len(graph.nodes)} nodes; {len(plan)} fused C kernel{'s' if len(plan) != 1 else ''}; "
             f"{len(buffers)} reused buffer{'s' if len(buffers) != 1 else ''}"]
    if kernels:
        lines.append("")
        for op, k in kernels.items():
            lines.append(f"{k} = OPS[{op!r}].cpu")
    bufnames = [b[0] for b in buffers]
    if buffers:
        lines += ["", "", "def alloc_buffers():", "    # kernel outputs used only inside the program, reused by every call"]
        lines += [f"    {name} = A_empty({_literal(shape)}, {_np_type(dtype)})" for name, shape, dtype in buffers]
        lines.append(f"    return ({', '.join(bufnames)},)")
    lines += ["", "", "def program(env, overrides=None):", "    # inputs"]
    for kind, v in graph.inputs:
        lines.append(f"    {names[v.name]} = env[{v.name!r}]  # {v.type_str()} "
                     f"{'external' if kind == 'external' else 'argument'}")
    if per_call:
        lines += ["    if overrides is None:",
                  "        overrides = NO_OVERRIDES",
                  "    elif not FIXED.isdisjoint(overrides):",
                  "        check_fixed(overrides)"]
    else:
        lines += ["    if overrides and not FIXED.isdisjoint(overrides):",
                  "        check_fixed(overrides)"]
    if updated:
        lines.append(f"    # updated in place: {', '.join(updated)}")
        lines.append("    if shared_or_readonly(env, UPDATED, OTHERS):  # another input views one: copy instead")
        lines += [f"        {names[t]} = {names[t]}.copy()" for t in updated]
    if buffers:
        lines += ["    try:  # a buffer set no other call is using",
                  "        bufs = POOL.pop()",
                  "    except IndexError:",
                  "        bufs = alloc_buffers()",
                  f"    {', '.join(bufnames)}, = bufs"]
    if dead_at.get(-1):
        lines.append(f"    del {', '.join(names[v] for v in dead_at[-1])}")
    lines.append("    # program")
    for j, (code, comment, _, _) in enumerate(units):
        for c in code:
            lines.append(f"    {c:<60}  # {comment}" if c is code[-1] and len(code) == 1 or c.startswith("K_") else f"    {c}")
        dead = dead_at.get(j)
        if dead:
            lines.append(f"    del {', '.join(names[v] for v in dead)}")
    if buffers:
        lines.append("    POOL.append(bufs)")
    outs = ", ".join(names[v.name] for v in graph.outputs)
    muts = ", ".join(f"({t!r}, {names[v.name]})" for t, v in graph.mutations)
    lines.append(f"    return [{outs}], [{muts}]")
    source = "\n".join(lines) + "\n"

    globs = {"np": np, "OPS": OPS, "asarray": np.asarray, "A_empty": np.empty, "ptr": kernel_cache.ptr,
             "__name__": "eagerc_compiled_c", "NO_OVERRIDES": {}, "per_call": _per_call, "POOL": [], "A_u64": int,
             "shared_or_readonly": _shared_or_readonly, "UPDATED": tuple(updated),
             "OTHERS": tuple(v.name for _, v in graph.inputs if v.name not in set(updated))}
    globs.update(consts)
    fixed = {n.out.name: n for n in graph.nodes if n.out.name not in per_call}
    globs["FIXED"] = frozenset(fixed)
    globs["check_fixed"] = lambda overrides: _check_fixed(fixed, overrides)
    return source, globs


CHUNK = 24    # kernels per shared object once a graph has more than this: compiled in parallel


def _chunks(kernels):
    """The kernels split into shared objects compiled side by side: one per CPU at most,
    never fewer than CHUNK kernels each (a compiler process costs ~40 ms to start)."""
    n = max(1, min(os.cpu_count() or 1, len(kernels) // CHUNK))
    size = -(-len(kernels) // n)
    return [kernels[i:i + size] for i in range(0, len(kernels), size)]


class CBackend:
    name = "c"
    supports_dynamic = False   # kernels are specialised to static shapes

    def __init__(self, singleton_min=SINGLETON_MIN):
        self.singleton_min = singleton_min

    def compile(self, graph):
        if kernel_cache.find_compiler() is None:
            warnings.warn("eagerc backend 'c': no C compiler found (cc, or $EAGERC_CC); "
                          "using the numpy backend", RuntimeWarning, stacklevel=2)
            return NumpyBackend().compile(graph)
        original, graph = graph, prepare(graph)
        plan = plan_kernels(graph, self.singleton_min)
        if any(_uses_float16(k) for _, _, k in plan) and not kernel_cache.has_float16():
            plan = plan_kernels(graph, self.singleton_min, float16=False)
        if not plan:
            program = NumpyBackend().compile(original)
            program.kernels = []
            return program
        kernels = [k for _, _, k in plan]
        source, globs = render(graph, plan)      # decides which outputs are written in place
        chunks = _chunks(kernels)
        sources = [render_c(c) for c in chunks]
        try:
            libs = kernel_cache.load_many(sources)
        except kernel_cache.CompileError as e:
            # a compiler without OpenMP (Apple clang), an unknown flag: the program still
            # runs, on numpy, and says why in one line
            first = next((line.strip() for line in str(e).splitlines()[1:] if "error" in line),
                         str(e).splitlines()[0])
            warnings.warn(f"eagerc backend 'c': the C compiler failed ({first[:200]}); using the numpy "
                          "backend", RuntimeWarning, stacklevel=2)
            return NumpyBackend().compile(original)
        lib_of = {k.name: lib for c, lib in zip(chunks, libs) for k in c}
        for k in kernels:
            f = getattr(lib_of[k.name], k.name)
            f.argtypes = [ctypes.c_void_p] * (len(k.inputs) + len(k.outputs)) + [ctypes.c_uint64] * len(k.params)
            f.restype = None
            globs["K_" + k.name] = f
        program = load_program(source, globs, graph, "c-")
        program.c_sources = sources
        program.c_source = "\n/* ---- next shared object ---- */\n".join(sources)
        program.kernels = kernels
        program.library = [lib._eagerc_path for lib in libs]
        program.buffers = []
        program._libs = libs
        return program

    @staticmethod
    def plannable(node):
        return False


register_backend("c", CBackend)
