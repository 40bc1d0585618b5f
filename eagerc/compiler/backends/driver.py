"""The Python driver program of the numpy, c and cuda backends: one emitter, bound per device.

Every generated backend makes the same kind of program -- `program(env, overrides=None) ->
(outputs, mutations)` -- that reads its inputs (one unpacking of `INPUTS(env)`), checks the
per-call attributes, takes a buffer set from a pool, runs one line per node (or per fused
kernel), `del`s each value after its last use and returns. Python's `compile()` of the
program pays per statement (a 32-layer GPT training step's driver: ~12.6k lines, ~0.15 s), so
the emitter spends none on bookkeeping: the inputs are one statement (their update copies,
when one views another, one more: `copied(env, UPDATED)` before it), values are named on
first use, numpy types are globals (`A_float32`), a kernel output kept in a reused buffer is
named by the buffer's local (`bind`), not copied to a name of its own. The backends differ only in what a line calls, so they
share this emitter and hand it their lines (`Driver.step`):

- numpy: direct ufunc calls and the ops' numpy kernels (`k_linear = OPS['linear'].cpu`);
- c: fused C kernels loaded with ctypes (`K_k0(ptr(x), ...)`), numpy kernels for the rest;
- cuda: fused CUDA RawKernels, cupy kernels for the rest (`OPS['matmul'].kernel(cp)`).

A `Binding` says how kernels reach a device: the source that binds an unfused op's kernel,
the globals the lines read (`asarray`, `A_empty`, `ptr`, `A_u64`...) and how constant arrays
move there. Unfused nodes are called exactly as eager dispatch calls them (`Driver.call`):
tensor inputs positional, attributes as keyword literals, per-call attributes (a random
op's seed and offset, size expressions of a dynamic graph) from `overrides`; an override
of an attribute rendered as a literal raises instead of being ignored.

`Driver.load` registers the source with `linecache` under a fake file name (tracebacks
show the generated lines, whose comments name the user's line and module path) and returns
the `program` function with `.source`, `.graph`, `.filename` and `.line_nodes` -- {line
number: names of the nodes that line computes}; a fused kernel's line names every node it
fuses -- so an observer (the profiler) can tell which node a line runs.
"""
import builtins
import itertools
import keyword
import linecache
import math
import operator
import re
import weakref

import numpy as np

from ...runtime.ops import OPS

__all__ = ["Binding", "Driver", "per_call_attrs", "shared_or_readonly", "literal", "np_type"]

_COUNTER = itertools.count()


class Binding:
    """How a driver's kernels reach one device.

    backend: the name in the program's first line ("# Constructed by numpy_backend");
    kernel: source binding op `op`'s kernel to a global (`OPS[{op!r}].cpu`);
    globs: what the lines read besides the kernels (np, asarray, A_empty, ptr, A_u64, cp);
    to_device: constant arrays -> the device's arrays (cupy.asarray), or None."""

    def __init__(self, backend, kernel="OPS[{op!r}].cpu", globs=None, to_device=None):
        self.backend, self.kernel, self.to_device = backend, kernel, to_device
        self.globs = {"np": np, "asarray": np.asarray, "A_empty": np.empty, **(globs or {})}


def literal(x):
    """Python source for a JSON-plain value, or None when it has no literal form."""
    if x is None or isinstance(x, (bool, str)) or type(x) is int:
        return repr(x)
    if type(x) is float:
        if math.isnan(x):
            return "float('nan')"
        if math.isinf(x):
            return "float('inf')" if x > 0 else "-float('inf')"
        return repr(x)
    if type(x) in (list, tuple):
        parts = [literal(v) for v in x]
        if any(p is None for p in parts):
            return None
        if type(x) is list:
            return "[" + ", ".join(parts) + "]"
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    if type(x) is dict:
        items = [(literal(k), literal(v)) for k, v in x.items()]
        if any(k is None or v is None for k, v in items):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    return None


def np_type(dtype):
    """The numpy type of `dtype` as generated code spells it (ml_dtypes' bfloat16 is no numpy
    attribute: numpy finds it by name once ml_dtypes is imported, as a bfloat16 program has)."""
    name = np.dtype(dtype).name
    return "np.bool_" if name == "bool" else "np.dtype('bfloat16')" if name == "bfloat16" else f"np.{name}"


def per_call_attrs(graph):
    """node output name -> names of the attributes that change per call and come from
    `overrides`: a random op's seed and offset, and in a dynamic graph the attributes that
    hold size expressions ("s0*16")."""
    table = {}
    for n in graph.nodes:
        op = OPS.get(n.op)
        if op is not None and "random" in op.effects:
            table[n.out.name] = [k for k in ("seed", "offset") if k in n.attrs]
    syms = _symbols(graph)
    if syms:
        from ..dynamic import scan_symbolic
        for name, attrs in scan_symbolic(graph, syms).table.items():
            table.setdefault(name, [])
            table[name] += [k for k in attrs if k not in table[name]]
    return {k: v for k, v in table.items() if v}


def _symbols(graph):
    """The size symbols of a dynamic graph ("s0", "s1", ...): identifiers in value shapes."""
    syms = set()
    for v in [v for _, v in graph.inputs] + [n.out for n in graph.nodes]:
        for d in v.shape:
            if isinstance(d, str):
                syms.update(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", d))
    return syms


def _root(a):
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def shared_or_readonly(env, targets, others=None):
    """May the program write into these inputs' arrays? Not if one is read-only, or shares its
    base array with another input (a view of it: it must keep showing the old values).
    `others`: the names of the other inputs (default: every other key of env)."""
    roots = set()
    for t in targets:
        a = env[t]
        if not a.flags.writeable:
            return True
        r = id(a) if a.base is None else id(_root(a))
        if r in roots:
            return True
        roots.add(r)
    if others is None:
        others = [name for name in env if name not in set(targets)]
    for name in others:
        a = env.get(name)
        if a is not None and id(a if a.base is None else _root(a)) in roots:
            return True
    return False


def _copied(env, targets):
    """`env` with a copy of each of `targets`' arrays (an update the program must not make in
    the caller's array: `shared_or_readonly`)."""
    return {**env, **{t: env[t].copy() for t in targets}}


def _per_call(overrides, name, **recorded):
    """A node's per-call attributes: those recorded in the graph, updated from `overrides`."""
    o = overrides.get(name)
    if o:
        recorded.update(o)
    return recorded


def _check_fixed(backend, fixed, overrides):
    """Overrides for nodes whose attributes were rendered as literals: fine only when they
    repeat the recorded values (the program could not honour a change: never silent)."""
    for name, attrs in overrides.items():
        n = fixed.get(name)
        if n is None:
            continue
        for k, v in attrs.items():
            if k not in n.attrs or n.attrs[k] != v:
                raise ValueError(f"{backend} backend: overrides set {name}.{k} = {v!r}, but this program "
                                 f"renders node {name} ({n.op}) with its attributes fixed "
                                 f"({n.attrs.get(k, '<absent>')!r}); only random ops' seed/offset "
                                 "and size expressions of dynamic graphs change per call")


_RESERVED = {"np", "cp", "env", "overrides", "bufs", "POOL", "OPS", "asarray", "alloc_buffers", "program",
             "msqrt", "fsqrt", "fpow", "fdiv", "c_rhs", "A_empty", "ptr", "A_u64",
             "NO_OVERRIDES", "FIXED", "INPUTS", "per_call", "check_fixed", "UPDATED", "OTHERS", "shared_or_readonly", "copied",
             *dir(builtins)}


class _Names:
    """Graph value names -> Python identifiers (unique, no keywords, no generated globals)."""

    def __init__(self):
        self.map = {}
        self.used = set(_RESERVED)
        self.last = {}      # base -> the last suffix given (a deep graph repeats its temporaries' names)

    def __getitem__(self, name):
        # named on first use: a fused program names only the values its lines mention (of a
        # 32-layer training step's 14k nodes, most live inside kernels)
        ident = self.map.get(name)
        return ident if ident is not None else self.add(name)

    def add(self, name):
        # an ASCII identifier is already what the substitution makes (the usual case: t12, x)
        ident = name if name.isascii() and name.isidentifier() else re.sub(r"\W", "_", name)
        if not ident or ident[0].isdigit():
            ident = "v_" + ident
        if keyword.iskeyword(ident) or ident in self.used or ident.startswith(("k_", "K_", "buf", "raw", "A_")):
            base = "v_" + ident
            k = self.last.get(base, 0)
            ident = f"{base}_{k}" if k else base
            while ident in self.used:
                k += 1
                ident = f"{base}_{k}"
            self.last[base] = k
        self.map[name] = ident
        self.used.add(ident)
        return ident


def wrap_comment(head, items, width=100):
    """`head` + comma-separated items as comment lines of at most `width` characters."""
    indent = head[:len(head) - len(head.lstrip())] + "#" + " " * 5
    lines, line = [], head
    for k, item in enumerate(items):
        piece = item + ("," if k < len(items) - 1 else "")
        if len(line) + len(piece) > width and line.strip() not in ("#", head.strip()):
            lines.append(line.rstrip())
            line = indent
        line += piece + " "
    lines.append(line.rstrip())
    return lines


def where(node):
    """The comment of a node's line: the user's file:line and module path, else its type."""
    parts = [x for x in (node.loc, f"({node.module})" if node.module else None) if x]
    return " ".join(parts) or f"{node.out.name}: {node.out.type_str()}"


class Driver:
    """The driver program of one graph, built line by line (see the module docstring).

    A backend adds notes (`notes`: comment lines under the title), steps (`step`), planned
    buffers (`buffers`), the targets it updates in place (`updated`) and extra globals
    (`globs`), then calls `load`."""

    def __init__(self, graph, binding):
        self.graph, self.binding = graph, binding
        self.per_call = per_call_attrs(graph)
        self.names = _Names()
        for _, v in graph.inputs:
            self.names.add(v.name)
        self.consts = {}        # global name -> object without a literal form
        self.kernels = {}       # op -> global name of its kernel
        self.notes = []
        self.steps = []         # (setup lines, (code, comment, node names), cleanup lines, reads, defines)
        self.buffers = []       # [(local name or None, source line)]: allocating one buffer set
        self.buffer_note = ""
        self.bound = set()      # values named by a buffer's local (`bind`): never `del`ed
        self.updated = []       # input names written in place
        self.float_inputs = ()  # input names read as Python floats (numpy backend's scalars.py)
        self.globs = {}

    def const(self, x):
        """Source of a constant: a literal, or a new A_<i> global."""
        lit = literal(x)
        if lit is not None:
            return lit
        g = f"A_{len(self.consts)}"
        self.consts[g] = x
        return g

    def dtype(self, dtype):
        """Source of numpy type `dtype` for the lines: a global A_<name> (fewer tokens for
        Python's compile() than `np.float32`, one lookup per call), np_type's for bfloat16."""
        name = np.dtype(dtype).name
        if name == "bfloat16":
            return np_type(dtype)
        g = "A_" + name
        if g not in self.globs:
            self.globs[g] = np.dtype(dtype).type
        return g

    def arg(self, x):
        """Source of a node input: its variable or its constant."""
        return self.names[x.name] if hasattr(x, "name") else self.const(x)

    def call(self, n, args=None):
        """Node `n` computed by its op's kernel, called as eager dispatch calls it."""
        k = self.kernels.get(n.op)
        if k is None:
            k = self.kernels[n.op] = "k_" + re.sub(r"\W", "_", n.op)
        args = [self.arg(x) for x in n.inputs] if args is None else args
        varying = self.per_call.get(n.out.name, ())
        for key, val in n.attrs.items():
            if key in varying:
                continue
            if key.isidentifier() and not keyword.iskeyword(key):
                args.append(f"{key}={self.const(val)}")
            else:
                args.append(f"**{{{key!r}: {self.const(val)}}}")
        if varying:
            recorded = ", ".join(f"{key}={self.const(n.attrs[key])}" for key in varying)
            args.append(f"**per_call(overrides, {n.out.name!r}, {recorded})")
        expr = f"{k}({', '.join(args)})"
        return expr if n.out.shape else f"asarray({expr})"   # kernels may return numpy scalars for 0-d

    def use_buffers(self, memory, pointers=False):
        """Allocate the buffers of a memory plan (passes/memplan.py) once per buffer set -- one
        array per buffer, or a flat one and a view of it per shape it holds -- and return
        {value name: the local name of its array or view}, in first-use order. `pointers`: each
        array's or view's data pointer too, as local `<name>_p` (taken once per buffer set)."""
        values = {n.out.name: n.out for n in self.graph.nodes}
        views, view_of = {}, {}   # (buffer id, shape) -> local name
        for name, b in memory.buffer.items():
            key = (b, tuple(values[name].shape))
            if key not in views:
                views[key] = f"buf{len(views)}"
            view_of[name] = views[key]
        shapes = {}
        for b, shape in views:
            shapes.setdefault(b, []).append(shape)
        raw = {}
        for b, shape in views:
            dtype, size = memory.buffers[b]
            if shapes[b] == [shape] and math.prod(shape) == size:
                continue
            if b not in raw:
                raw[b] = f"raw{len(raw)}"
                self.buffers.append((None, f"{raw[b]} = A_empty({size}, {np_type(dtype)})"))
        for (b, shape), view in views.items():
            dtype = memory.buffers[b][0]
            src = f"{raw[b]}[:{math.prod(shape)}].reshape({literal(shape)})" if b in raw else \
                f"A_empty({literal(shape)}, {np_type(dtype)})"
            self.buffers.append((view, f"{view} = {src}"))
        if pointers:
            self.buffers += [(f"{view}_p", f"{view}_p = ptr({view})") for view in views.values()]
        return view_of

    def bind(self, name, local):
        """Name value `name` by `local`, a buffer's array that outlives it (no alias line, no
        `del`); False when the value already has a name."""
        if name in self.names.map:
            return False
        self.names.map[name] = local
        self.bound.add(name)
        return True

    def step(self, code, comment, nodes, reads, defines, setup=(), cleanup=()):
        """One unit of the program: `code` computes `nodes` (output names; commented), after the
        `setup` lines and before `cleanup`; `reads`/`defines` value names, for the `del`s."""
        self.steps.append((list(setup), (code, comment, tuple(nodes)), list(cleanup), reads, defines))

    def _dead(self):
        """step index -> values to `del` after it (-1: inputs nothing reads)."""
        kept = {v.name for v in self.graph.outputs} | {v.name for _, v in self.graph.mutations}
        last = {}
        for j, (_, _, _, reads, defines) in enumerate(self.steps):
            for d in defines:
                last.setdefault(d, j)
            for r in reads:
                last[r] = j
        for _, v in self.graph.inputs:
            last.setdefault(v.name, -1)
        dead = {}
        for v, j in last.items():
            if v not in kept and v not in self.bound:
                dead.setdefault(j, []).append(self.names[v])
        return dead

    def render(self):
        """(source, globals, line_nodes) of the program; deterministic for the same steps."""
        g, names = self.graph, self.names
        lines = [f"# Constructed by {self.binding.backend}"] + self.notes
        if self.kernels:
            lines.append("")
            lines += [f"{k} = {self.binding.kernel.format(op=op)}" for op, k in self.kernels.items()]
        bufnames = [name for name, _ in self.buffers if name]
        if self.buffers:
            lines += ["", "", "def alloc_buffers():", f"    # {self.buffer_note}"]
            lines += [f"    {src}" for _, src in self.buffers]
            lines.append(f"    return ({', '.join(bufnames)}{',' if len(bufnames) == 1 else ''})")
        lines += ["", "", "def program(env, overrides=None):"]
        if self.updated:
            lines += wrap_comment("    # updated in place (the write-back after the run then has nothing to copy): ",
                                  self.updated)
            lines.append("    if shared_or_readonly(env, UPDATED, OTHERS):  # another input views one of them: "
                         "update copies instead")
            lines.append("        env = copied(env, UPDATED)")
        lines += self._inputs()
        if self.per_call:
            lines += ["    if overrides is None:  # per-call attributes: the values recorded in the graph",
                      "        overrides = NO_OVERRIDES",
                      "    elif not FIXED.isdisjoint(overrides):",
                      "        check_fixed(overrides)"]
        else:
            lines += ["    if overrides and not FIXED.isdisjoint(overrides):",
                      "        check_fixed(overrides)"]
        if self.buffers:
            lines += ["    try:  # a buffer set no other call is using",
                      "        bufs = POOL.pop()",
                      "    except IndexError:",
                      "        bufs = alloc_buffers()",
                      f"    {', '.join(bufnames)}{',' if len(bufnames) == 1 else ''} = bufs"]
        dead = self._dead()
        if dead.get(-1):
            lines.append(f"    del {', '.join(dead[-1])}")
        lines.append("    # program")
        pad = min(max([len(c) for _, (c, _, _), _, _, _ in self.steps] + [40]), 88)
        line_nodes = {}
        for j, (setup, (code, comment, nodes), cleanup, _, _) in enumerate(self.steps):
            lines += [f"    {c}" for c in setup]
            lines.append(f"    {code:<{pad}}  # {comment}" if comment else f"    {code}")
            if nodes:
                line_nodes[len(lines)] = nodes
            if dead.get(j):      # (one `del` with the step's own temporaries)
                if cleanup and cleanup[-1].startswith("del "):
                    cleanup = cleanup[:-1] + [f"{cleanup[-1]}, {', '.join(dead[j])}"]
                else:
                    cleanup = cleanup + [f"del {', '.join(dead[j])}"]
            lines += [f"    {c}" for c in cleanup]
        if self.buffers:
            lines.append("    POOL.append(bufs)")
        outs = ", ".join(names[v.name] for v in g.outputs)
        muts = ", ".join(f"({t!r}, {names[v.name]})" for t, v in g.mutations)
        lines.append(f"    return [{outs}], [{muts}]")
        return "\n".join(lines) + "\n", self._globals(), line_nodes

    def _inputs(self):
        """The lines reading the inputs from env: one unpacking of INPUTS(env) (an itemgetter:
        Python's compile() pays per statement, and a training step has an input per parameter
        and optimizer state), each name commented with its type; inputs read as floats (numpy backend) one line each."""
        g, names = self.graph, self.names
        rows, floats = [], []
        for kind, v in g.inputs:
            what = "external" if kind == "external" else "argument"
            if v.name in self.float_inputs:
                floats.append((f"{names[v.name]} = float(env[{v.name!r}])", f"{v.type_str()} {what}, as a float"))
            else:
                rows.append((names[v.name], f"{v.type_str()} {what}"))
        lines = ["    # inputs" + (" (INPUTS: env's values in this order)" if len(rows) > 1 else "")]
        if len(rows) == 1:
            floats.insert(0, (f"{rows[0][0]} = env[{self._read[0]!r}]", rows[0][1]))
        elif rows:
            pad = min(max(len(n) for n, _ in rows) + 1, 88)
            lines.append(f"    ({rows[0][0] + ',':<{pad}}  # {rows[0][1]}")
            lines += [f"     {n + ',':<{pad}}  # {c}" for n, c in rows[1:]]
            lines.append("    ) = INPUTS(env)")
        pad = min(max([len(c) for c, _ in floats] + [0]), 88)
        return lines + [f"    {c:<{pad}}  # {cm}" for c, cm in floats]

    @property
    def _read(self):
        """Names of the inputs read through INPUTS (all but the float inputs), in order."""
        return [v.name for _, v in self.graph.inputs if v.name not in self.float_inputs]

    def _globals(self):
        g, b = self.graph, self.binding
        fixed = {n.out.name: n for n in g.nodes if n.out.name not in self.per_call}
        updated = set(self.updated)
        backend = b.backend.replace("_backend", "")
        globs = {**b.globs, "OPS": OPS, "POOL": [], "__name__": f"eagerc_compiled_{backend}",
                 "NO_OVERRIDES": {}, "per_call": _per_call, "shared_or_readonly": shared_or_readonly, "copied": _copied,
                 "FIXED": frozenset(fixed), "UPDATED": tuple(self.updated),
                 "OTHERS": tuple(v.name for _, v in g.inputs if v.name not in updated),
                 "check_fixed": lambda overrides: _check_fixed(backend, fixed, overrides)}
        if len(self._read) > 1:
            globs["INPUTS"] = operator.itemgetter(*self._read)
        for name, x in self.consts.items():
            globs[name] = b.to_device(x) if b.to_device is not None and isinstance(x, np.ndarray) else x
        globs.update(self.globs)
        return globs

    def load(self, tag=""):
        """Compile the program under a fake file name registered with linecache (the entry goes
        with the program) and return its `program` function with .source, .graph, .filename
        and .line_nodes attached."""
        source, globs, line_nodes = self.render()
        filename = f"<eagerc-compiled-{tag}{next(_COUNTER)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), globs)
        program = globs["program"]
        program.source, program.graph, program.filename = source, self.graph, filename
        program.line_nodes = line_nodes
        weakref.finalize(program, linecache.cache.pop, filename, None)
        return program
