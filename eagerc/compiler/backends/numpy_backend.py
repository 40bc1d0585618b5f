"""The numpy backend: the scheduled graph as one generated Python function over numpy.

`NumpyBackend().compile(graph)` renders the graph as readable source, registers it with
`linecache` under a fake file name (`<eagerc-compiled-3>`, like torch.fx), compiles it
once and returns the generated function itself -- `program(env, overrides=None) ->
(outputs, mutations)` -- with `.source`, `.graph`, `.filename` and `.buffers` attached.
A traceback through a program shows the generated line, whose trailing comment names
the user's source line and module path.

How a node is rendered
----------------------
- A "direct" node -- a hot elementwise op whose kernel is (or plainly wraps) a numpy
  ufunc, where `ufunc.resolve_dtypes` proves the ufunc makes exactly the value's dtype --
  becomes a ufunc call, `np.add(t0, t1)`. It may write its result with `out=`:
    * in place into a dying input (`np.maximum(t0, 0, out=t0)`): an input that is
      the same shape and dtype, was made fresh by this call, and whose memory nothing
      reads afterwards (views included) -- safe even when the result is returned;
    * into a planned buffer (`np.add(t2, t3, out=buf0)`) allocated once per program
      and reused by every call: only for values whose memory never escapes (neither
      returned, nor written back as a mutation, nor reachable from those through
      views), so no call ever hands out memory that the next call overwrites.
  Buffers come from graph.meta["memory_plan"] ({value: buffer id}) when a pass made
  one -- each planned assignment is checked against the backend's own alias-aware
  liveness and dropped if unsafe -- and otherwise from a small greedy planner here
  (reuse by liveness, same shape and dtype). Each call takes a buffer set from a pool
  and puts it back at the end, so concurrent or re-entrant calls never share one.
- Any other node calls its op's kernel, bound once as a global (`k_linear =
  OPS["linear"].cpu`), with tensor inputs positional and attributes as keyword
  literals, exactly as eager mode's dispatch calls it.
- A mutation (an external updated in place: parameters, optimizer state, running
  stats) is computed straight into the target's array when the chain of direct nodes
  that makes the new value starts where the old value is read for the last time
  (`np.subtract(w, t52, out=w)`); compile.py's write-back then finds it in place. A
  cheap check per call (`shared_or_readonly`) falls back to updating copies when another
  input is a view of a target or a target is read-only.
- A value is `del`-ed after its last use.

Per-call attributes come from `overrides` ({node name: {attr: value}}): a random op's
seed and offset (compile.py passes fresh offsets every call) and, in a dynamic graph,
the attributes holding size expressions ("s0*16"), so one program serves every size
(`supports_dynamic`). Every other attribute is a literal in the source; overrides that
would change one raise instead of being ignored.

Values whose memory may be shared: ops declared `aliases` (views, and kernels that may hand
back their input: contiguous, to_device, einsum) and any op this backend does not know.
Their readers keep the base's memory alive.
"""
import builtins
import itertools
import keyword
import linecache
import math
import re
import weakref

import numpy as np

from ...runtime.ops import OPS
from ...runtime.executor import last_uses
from ..passes.util import may_alias as _may_alias
from . import register_backend

__all__ = ["NumpyBackend", "render", "build_program", "per_call_attrs"]

_COUNTER = itertools.count()
_INF = math.inf

# Ops rendered as direct ufunc calls: every elementwise op whose kernel is exactly its declared
# ufunc (the declaration gave no kernel of its own), and these, direct only under the conditions
# _direct() checks: pow and sign, whose kernels add a result cast or a special case to their
# declared ufunc, and relu (maximum(x, 0)), round (rint, of floats) and clamp (maximum, then
# minimum), which declare none.
_WRAPPED = {"pow": "power", "sign": "sign", "round": "rint", "relu": "maximum", "clamp": None}


def _checked_table():
    from ...runtime.ops import load_all
    load_all()
    direct = {name: op.ufunc for name, op in OPS.items()
              if op.kind == "elementwise" and op.ufunc and op.cpu is getattr(np, op.ufunc, None)}
    for name, uf in _WRAPPED.items():
        if OPS[name].ufunc in (uf, None):
            direct[name] = uf
    return direct


_DIRECT = None


def _direct_table():
    global _DIRECT
    if _DIRECT is None:
        _DIRECT = _checked_table()
    return _DIRECT


# ---------------------------------------------------------------- literals

def _literal(x):
    """Python source for a JSON-plain value, or None when it has no literal form."""
    if x is None or isinstance(x, (bool, str)):
        return repr(x)
    if type(x) is int:
        return repr(x)
    if type(x) is float:
        if math.isnan(x):
            return "float('nan')"
        if math.isinf(x):
            return "float('inf')" if x > 0 else "-float('inf')"
        return repr(x)
    if type(x) in (list, tuple):
        parts = [_literal(v) for v in x]
        if any(p is None for p in parts):
            return None
        if type(x) is list:
            return "[" + ", ".join(parts) + "]"
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    if type(x) is dict:
        items = [(_literal(k), _literal(v)) for k, v in x.items()]
        if any(k is None or v is None for k, v in items):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    return None


def _scalar_dtype(x):
    """What ufunc.resolve_dtypes takes for a constant input (Python scalars are 'weak')."""
    if isinstance(x, bool):
        return np.dtype(bool)
    if isinstance(x, (int, float, complex)):
        return type(x)
    if isinstance(x, np.generic):
        return x.dtype
    return None


# ---------------------------------------------------------------- analysis

def _static_alias_ends(graph):
    """value name -> index of the last node that reads it or any value that may alias it;
    inf when it (or such a value) is returned or written back; its definition if unread."""
    end = {}
    for i, n in enumerate(graph.nodes):
        end[n.out.name] = i
        for v in n.input_values():
            end[v.name] = i
    for v in graph.outputs:
        end[v.name] = _INF
    for _, v in graph.mutations:
        end[v.name] = _INF
    for n in reversed(graph.nodes):
        if _may_alias(n):
            e = end[n.out.name]
            for v in n.input_values():
                if e > end.get(v.name, -1):
                    end[v.name] = e
    return end


def _returned(graph):
    """Names of the outputs and of every value an output may be a view of."""
    out = {v.name for v in graph.outputs}
    for n in reversed(graph.nodes):
        if n.out.name in out and _may_alias(n):
            out.update(v.name for v in n.input_values())
    return out


def _static_shape(shape):
    return all(type(s) is int for s in shape)


def _nbytes(v):
    return _size(v.shape, v.dtype)


def _size(shape, dtype):
    n = 1
    for s in shape:
        n *= s
    return n * np.dtype(dtype).itemsize


class _Storage:
    """Memory made by this program: 'fresh' (allocated during the call) or 'buffer'."""
    __slots__ = ("kind", "members", "end", "buf")

    def __init__(self, kind, end, buf=None):
        self.kind = kind
        self.members = []
        self.end = end
        self.buf = buf


class _Buffer:
    """One planned allocation: raw bytes and the typed views the program writes through."""
    __slots__ = ("key", "nbytes", "views", "storage")

    def __init__(self, key):
        self.key = key
        self.nbytes = 0
        self.views = {}      # (shape, dtype) -> local name
        self.storage = None  # the storage that occupies it now


def _resolves_to(ufunc, ins, out):
    """Does `ufunc` on inputs of these dtypes (Python types for weak scalars) make `out`?"""
    try:
        return ufunc.resolve_dtypes(tuple(ins) + (None,) * ufunc.nout)[-1] == out
    except Exception:
        return False


def _direct(node, table):
    """The ufunc name for a node that can be a direct ufunc call -- exactly equivalent to its
    kernel, given the recorded output dtype -- or None. ("clamp" is maximum then minimum.)"""
    if node.op not in table:
        return None
    uf = table[node.op]
    out = np.dtype(node.out.dtype)
    ins = []
    for x in node.inputs:
        d = np.dtype(x.dtype) if hasattr(x, "name") else _scalar_dtype(x)
        if d is None:
            return None
        ins.append(d)
    first = node.inputs[0] if node.inputs else None
    if node.op in ("relu", "sign", "round", "clamp"):
        if not hasattr(first, "name") or len(ins) != 1:
            return None
        x = ins[0]
        if node.op == "relu":  # maximum(x, 0).astype(x.dtype): a no-op cast when dtypes agree
            return uf if x == out and x.kind in "fiu" and _resolves_to(np.maximum, (x, int), out) else None
        if node.op == "sign":  # bool inputs are copied, not signed
            return uf if x == out and x.kind != "b" and _resolves_to(np.sign, (x,), out) else None
        if node.op == "round":  # np.round(x) of a float array is rint(x)
            return uf if x == out and x.kind == "f" and not node.attrs else None
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
        if set(node.attrs) - {"min", "max"} or (lo is None and hi is None) or x != out or x.kind not in "fiu":
            return None
        for b in (lo, hi):
            if b is None:
                continue
            bd = _scalar_dtype(b)
            if bd is None or isinstance(b, bool):
                return None
            if not (_resolves_to(np.maximum, (x, bd), out) and _resolves_to(np.minimum, (x, bd), out)):
                return None
        return "clamp"
    if node.attrs:
        return None
    ufunc = getattr(np, uf)
    if len(ins) != ufunc.nin or not _resolves_to(ufunc, ins, out):
        return None
    if node.op == "pow":  # the kernel casts to the first tensor operand's dtype afterwards
        tensor = [d for x, d in zip(node.inputs, ins) if hasattr(x, "name")]
        if not tensor or tensor[0] != out:
            return None
    return uf


def _symbols(graph):
    """The size symbols of a dynamic graph ("s0", "s1", ...): identifiers in value shapes."""
    syms = set()
    for v in [v for _, v in graph.inputs] + [n.out for n in graph.nodes]:
        for d in v.shape:
            if isinstance(d, str):
                syms.update(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", d))
    return syms


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


_SCALAR_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": None, "neg": None, "sqrt": None}


def _scalar_const(x):
    return (type(x) is float) or (type(x) is int and abs(x) < 2 ** 53)


def _scalar_nodes(graph, direct, per_call):
    """0-d float64 arithmetic computed with Python floats instead of 0-d ufunc calls.

    Optimizer bias corrections (1 - beta ** step, sqrt, lr / bias...) are chains of 0-d
    nodes; a ufunc call on a 0-d array costs ~0.6 us, Python float arithmetic ~0.03 us.
    A node is a scalar node when its value is 0-d and
      "f":   float64 add/sub/mul/div/pow/neg/sqrt (a direct node) whose tensor inputs are
             all "f" values (other inputs: Python int/float constants), or a cast to
             float64 of a 0-d float array (`float(x)`, exact) or of an "f" value;
      "f32": a cast to float32 of an "f" value (`np.float32(x)`, rounded like astype),
             read only by direct ufunc nodes (a numpy scalar there acts like a 0-d array).
    An "f" value is read only by scalar nodes; neither kind is returned or written back.
    0-d float64 graph inputs (an optimizer's lr, betas... read at every call) read only by
    scalar nodes are "f" values too: the program binds them with float().
    Python float +, -, *, / are IEEE double like numpy's; division by zero, sqrt of a
    negative number and pow overflow / complex results go to numpy (helpers fdiv, fsqrt,
    fpow), so results and infs/nans agree. pow is C pow() as in Python (`beta ** step`,
    the eager optimizers' arithmetic), where numpy's array loop may use a SIMD pow.
    Returns ({node index: kind}, {names of the inputs that are "f" values})."""
    f64, f32 = np.dtype(np.float64), np.dtype(np.float32)
    kept = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    index = {}
    cand = {v.name: ("f", None) for _, v in graph.inputs
            if not v.shape and v.dtype == "float64" and v.name not in kept}
    for i, n in enumerate(graph.nodes):
        out = n.out
        index[out.name] = i
        if out.shape or out.name in per_call or out.name in kept:
            continue
        try:
            odt = np.dtype(out.dtype)
        except TypeError:
            continue
        if n.op == "cast":
            if len(n.inputs) != 1 or set(n.attrs) != {"dtype"} or not hasattr(n.inputs[0], "name"):
                continue
            x = n.inputs[0]
            if x.shape:
                continue
            if odt == f64:
                if x.name in cand and cand[x.name][0] == "f":
                    cand[out.name] = ("f", i)
                elif np.dtype(x.dtype).kind == "f":
                    cand[out.name] = ("f", i)
            elif odt == f32 and x.name in cand and cand[x.name][0] == "f":
                cand[out.name] = ("f32", i)
            continue
        if n.op not in _SCALAR_OPS or odt != f64 or i not in direct or n.attrs:
            continue
        vals = [x for x in n.inputs if hasattr(x, "name")]
        if not vals or any(cand.get(x.name, ("",))[0] != "f" for x in vals):
            continue
        if any(not hasattr(x, "name") and not _scalar_const(x) for x in n.inputs):
            continue
        cand[out.name] = ("f", i)
    readers = {}
    for i, n in enumerate(graph.nodes):
        for x in n.input_values():
            readers.setdefault(x.name, []).append(i)
    changed = True
    while changed:
        changed = False
        nodes = {i for _, i in cand.values()}
        for name, (kind, i) in list(cand.items()):
            rs = readers.get(name, ())
            if kind == "f":
                ok = all(j in nodes for j in rs)
            else:
                ok = all(j in direct and j not in nodes for j in rs)
            if ok and kind == "f" and i is not None:
                n = graph.nodes[i]
                ok = n.op == "cast" or all(x.name in cand for x in n.input_values())
            if not ok:
                del cand[name]
                changed = True
    return ({i: kind for kind, i in cand.values() if i is not None},
            {name for name, (_, i) in cand.items() if i is None})


class _Plan:
    """Per node: how it is rendered (direct ufunc or kernel call) and where its result goes.

    target[i] is ("inplace", input value name) or ("buffer", _Buffer, (shape, dtype)).
    """

    def __init__(self, graph, per_call=()):
        table = _direct_table()
        self.direct = {}      # node index -> ufunc name (or "clamp")
        self.target = {}
        self.buffers = []     # [_Buffer] in first-use order
        self.dropped = []     # [(value, why)]: memory-plan entries not safe to follow
        self.kernel_planned = []  # planned values made by kernel calls (they keep fresh arrays)
        self.followed = 0
        self.has_plan = bool(graph.meta.get("memory_plan"))
        ends = _static_alias_ends(graph)
        plan = graph.meta.get("memory_plan") or None
        planned = {}          # plan buffer id -> _Buffer
        storage = {}          # value name -> the _Storage it directly owns or shares in place
        active = []           # own planner: buffers whose contents may still be read
        free = {}             # own planner: (shape, dtype) -> [_Buffer] free for reuse
        for i, n in enumerate(graph.nodes):
            uf = _direct(n, table) if n.out.name not in per_call else None
            if uf is not None:
                self.direct[i] = uf
        # node index -> "f" or "f32"; inputs bound as Python floats
        self.scalar, self.scalar_inputs = _scalar_nodes(graph, self.direct, per_call)
        for i in self.scalar:
            self.direct.pop(i, None)
        self.scalar_values = {graph.nodes[i].out.name for i, k in self.scalar.items() if k == "f"} | \
            self.scalar_inputs
        handed_out = self._handed_out(graph, ends)
        forced = self._update_chains(graph, ends, storage)
        for i, n in enumerate(graph.nodes):
            if i in self.scalar:   # a Python (or numpy) scalar: no array memory at all
                continue
            out = n.out
            uf = self.direct.get(i)
            escapes = ends[out.name] == _INF
            if plan is None and active:
                still = []
                for b in active:
                    (free.setdefault(b.key, []) if b.storage.end < i else still).append(b)
                active = still
            if i in forced:
                chosen = ("inplace", forced[i])
            else:
                chosen = self._inplace(i, n, storage, escapes) if uf is not None else None
            if plan is not None and out.name in plan:
                if uf is None:
                    self.kernel_planned.append(out.name)
                elif chosen is None:
                    chosen, why = self._planned(i, n, plan[out.name], planned, escapes)
                    if chosen is None:
                        self.dropped.append((out.name, why))
                    else:
                        self.followed += 1
                else:
                    self.followed += 1   # in place: the plan's chain, or no new memory at all
            if chosen is None and uf is not None and plan is None and not escapes \
                    and _static_shape(out.shape) and out.shape and out.name not in handed_out:
                key = (tuple(out.shape), out.dtype)
                pool = free.get(key)
                if pool:
                    b = pool.pop()
                else:
                    b = _Buffer(key)
                    b.nbytes = _nbytes(out)
                    b.views[key] = None
                    self.buffers.append(b)
                active.append(b)
                chosen = ("buffer", b, key)
            # the memory the output lives in
            if chosen is not None and chosen[0] == "inplace":
                st = storage[chosen[1]]
                st.members.append(out.name)
                st.end = max(st.end, ends[out.name])
                storage[out.name] = st
            elif chosen is not None:
                st = _Storage("buffer", ends[out.name], chosen[1])
                st.members.append(out.name)
                chosen[1].storage = st
                storage[out.name] = st
            elif not _may_alias(n):
                st = _Storage("fresh", ends[out.name])
                st.members.append(out.name)
                storage[out.name] = st
            if chosen is not None:
                self.target[i] = chosen
        k = 0
        for b in self.buffers:
            for key in b.views:
                b.views[key] = f"buf{k}"
                k += 1

    def _handed_out(self, graph, ends):
        """Values whose memory a chain of in-place direct nodes would hand to the user: they
        are better fresh than in a buffer (the escaping end of the chain can then reuse them)."""
        made_fresh = {n.out.name for n in graph.nodes if not _may_alias(n)}
        out = set()
        for j in range(len(graph.nodes) - 1, -1, -1):
            if j not in self.direct:
                continue
            n = graph.nodes[j]
            for x in n.inputs:
                if hasattr(x, "name") and x.name in made_fresh and ends[x.name] == j \
                        and tuple(x.shape) == tuple(n.out.shape) and x.dtype == n.out.dtype:
                    if ends[n.out.name] == _INF or n.out.name in out:
                        out.add(x.name)
                    break
        return out

    def _update_chains(self, graph, ends, storage):
        """Mutation outputs computed straight into their target's memory.

        For an external (or argument) T that the graph updates (a mutation T <- m), follow T's
        heirs: the direct node where T is read for the last time (views included) and whose
        output has T's shape and dtype, then that output's such node, and so on. If the chain
        reaches m, and none of its values is returned or written elsewhere, every node of it
        writes into T's own array (`np.subtract(w, t52, out=w)`): no fresh array, and the
        write-back after the run finds the value already in place. Returns {node index: name
        of the input it overwrites}; self.targets lists the T written this way."""
        self.targets = []
        muts = {t: v.name for t, v in graph.mutations}
        inputs = {v.name: v for _, v in graph.inputs}
        returned = _returned(graph)
        reader = {}   # value name -> (node index, output) where it dies in place-ably
        for j, n in enumerate(graph.nodes):
            if j not in self.direct:
                continue
            for x in n.inputs:
                if hasattr(x, "name") and ends.get(x.name) == j and x.name not in reader \
                        and tuple(x.shape) == tuple(n.out.shape) and x.dtype == n.out.dtype:
                    reader[x.name] = (j, n.out)
                    break
        counts = {}   # a target written twice, or a value written to two targets: leave alone
        for t, v in graph.mutations:
            counts[t] = counts.get(t, 0) + 1
            counts[v.name] = counts.get(v.name, 0) + 1
        forced = {}
        for target, m in muts.items():
            v = inputs.get(target)
            if v is None or target.endswith(".grad") or counts[target] > 1 or counts[m] > 1 or m in returned \
                    or ends.get(target) == _INF or not _static_shape(v.shape):
                continue
            chain, x = [], target
            while x in reader and x != m:
                j, out = reader[x]
                if out.name != m and ends[out.name] == _INF:
                    break
                chain.append((j, x, out.name))
                x = out.name
            if x != m or not chain or any(j in forced for j, _, _ in chain):
                continue
            st = _Storage("target", _INF)
            st.members.append(target)
            storage[target] = st
            for j, prev, _ in chain:
                forced[j] = prev
            self.targets.append(target)
        return forced

    @staticmethod
    def _inplace(i, n, storage, escapes):
        """An input whose memory this node may overwrite: made by this call, same shape and
        dtype, and read by nothing after this node (views included)."""
        out = n.out
        for x in n.inputs:
            st = storage.get(x.name) if hasattr(x, "name") else None
            if st is None or st.end != i or tuple(x.shape) != tuple(out.shape) or x.dtype != out.dtype:
                continue
            if st.kind == "buffer" and escapes or st.kind == "target":
                continue
            return ("inplace", x.name)
        return None

    def _planned(self, i, n, bid, planned, escapes):
        out = n.out
        if escapes:
            return None, "returned or written back: a buffer is overwritten by the next call"
        if not _static_shape(out.shape):
            return None, "symbolic shape"
        b = planned.get(bid)
        if b is None:
            b = planned[bid] = _Buffer(bid)
            self.buffers.append(b)
        elif b.storage is not None and b.storage.end > i:
            last = b.storage.members[-1]
            return None, f"buffer {bid!r} still holds {last} (or a view of it), read later"
        b.nbytes = max(b.nbytes, _nbytes(out))
        key = (tuple(out.shape), out.dtype)
        b.views.setdefault(key, None)
        return ("buffer", b, key), None


# ---------------------------------------------------------------- rendering

_RESERVED = {"np", "env", "overrides", "bufs", "POOL", "OPS", "asarray", "alloc_buffers", "program",
             "msqrt", "fsqrt", "fpow", "fdiv", "c_rhs",
             "NO_OVERRIDES", "FIXED", "per_call", "check_fixed", "UPDATED", "OTHERS", "shared_or_readonly",
             *dir(builtins)}


class _Names:
    """Graph value names -> Python identifiers (unique, no keywords, no generated globals)."""

    def __init__(self):
        self.map = {}
        self.used = set(_RESERVED)

    def __getitem__(self, name):
        return self.map[name]

    def add(self, name):
        ident = re.sub(r"\W", "_", name)
        if not ident or ident[0].isdigit():
            ident = "v_" + ident
        if keyword.iskeyword(ident) or ident in self.used or ident.startswith(("k_", "buf", "raw", "A_")):
            base, k = "v_" + ident, 0
            ident = base
            while ident in self.used:
                k += 1
                ident = f"{base}_{k}"
        self.map[name] = ident
        self.used.add(ident)
        return ident


def _wrap_comment(head, items, width=100):
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


def _np_type(dtype):
    name = np.dtype(dtype).name
    return "np.bool_" if name == "bool" else f"np.{name}"


def _tuple_src(names):
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def _unpack_src(names):
    return names[0] + "," if len(names) == 1 else ", ".join(names)


def _scalar_src(x, names):
    if hasattr(x, "name"):
        return names[x.name]
    lit = repr(float(x)) if type(x) is float else repr(x)
    return f"({lit})" if lit.startswith("-") or lit.startswith("float") else lit


def _scalar_expr(n, kind, names, scalar_values):
    """Python source of a scalar node (see _scalar_nodes)."""
    if n.op == "cast":
        x = n.inputs[0]
        a = names[x.name]
        if kind == "f32":
            return f"np.float32({a})"
        return a if x.name in scalar_values else f"float({a})"
    args = [_scalar_src(x, names) for x in n.inputs]
    if n.op == "neg":
        return f"-{args[0]}"
    if n.op == "sqrt":
        return f"(msqrt({args[0]}) if {args[0]} >= 0.0 else fsqrt({args[0]}))"
    if n.op == "pow":
        return f"fpow({args[0]}, {args[1]})"
    a, b = args
    if n.op == "div":
        y = n.inputs[1]
        if not hasattr(y, "name") and y != 0:
            return f"{a} / {b}"
        return f"({a} / {b} if {b} else fdiv({a}, {b}))"
    return f"{a} {_SCALAR_OPS[n.op]} {b}"


def _small_inner_linear(n):
    """A linear node the kernel computes as x @ weight.T (2-d x of more than `few_rows` rows, an
    attribute the runtime's linear kernel carries) over a small inner dimension (<= 64): a weight
    gradient dY.T @ X. Its weight operand is rendered as c_rhs(weight) (see _c_rhs)."""
    few_rows = getattr(OPS["linear"].cpu, "few_rows", None)
    if len(n.inputs) < 2 or not all(hasattr(v, "name") for v in n.inputs[:2]) or few_rows is None:
        return False
    x, w = n.inputs[0], n.inputs[1]
    return len(x.shape) == 2 and len(w.shape) == 2 and type(x.shape[0]) is int and x.shape[0] > few_rows \
        and type(x.shape[1]) is int and x.shape[1] <= 64


def _c_rhs(w):
    """w, or the same values as a view whose transpose is C-contiguous: the linear kernel then
    multiplies x @ w.T with a C-ordered right operand, which single-threaded OpenBLAS runs
    ~1.6x faster than an F-ordered one for a small inner dimension (e.g. 256x8 @ 8x256, when
    the activations came out of the few-rows linear path F-ordered). The copy is small
    (inner dimension <= 64 rows)."""
    if type(w) is not _ndarray or w.ndim != 2:
        return w
    t = w.T
    return w if t.flags.c_contiguous else np.ascontiguousarray(t).T


_ndarray = np.ndarray


def _fpow(a, b):
    try:
        r = a ** b
    except (ArithmeticError, ValueError):  # 0.0 ** -1, overflow: numpy's inf and warning
        return float(np.power(np.float64(a), b))
    return r if r.__class__ is float else float(np.power(np.float64(a), b))  # complex: nan


def _fsqrt(a):
    return float(np.sqrt(np.float64(a)))


def _fdiv(a, b):
    return float(np.divide(np.float64(a), b))


def _where(node):
    parts = [x for x in (node.loc, f"({node.module})" if node.module else None) if x]
    return " ".join(parts)


def driver_names(graph):
    """What a generated driver (numpy and c backends) names things with: `names` (a Python
    variable per graph value), `consts` (global name -> object without a literal form),
    `const(x)` (the source text of a constant: a literal, or a new A_<i> global) and
    `arg(x)` (the source text of a node input: its variable or its constant)."""
    names = _Names()
    consts = {}
    for _, v in graph.inputs:
        names.add(v.name)
    for n in graph.nodes:
        names.add(n.out.name)

    def const(x):
        lit = _literal(x)
        if lit is not None:
            return lit
        g = f"A_{len(consts)}"
        consts[g] = x
        return g

    def arg(x):
        return names[x.name] if hasattr(x, "name") else const(x)
    return names, consts, const, arg


def render(graph):
    """(source, globals) of the program for `graph`; deterministic for the same graph."""
    per_call = per_call_attrs(graph)
    plan = _Plan(graph, per_call)
    names, consts, const, arg = driver_names(graph)
    kernels = {}           # op -> global name

    free = last_uses(graph)
    kept = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    read = {v.name for n in graph.nodes for v in n.input_values()}

    body = []   # (code, comment)
    uses_c_rhs = False
    for i, n in enumerate(graph.nodes):
        out = names[n.out.name]
        uf = plan.direct.get(i)
        target = plan.target.get(i)
        where = f"{n.out.name}: {n.out.type_str()}"
        if n.op not in OPS:
            raise ValueError(f"numpy backend: node {n.out.name} applies unknown op {n.op!r}")
        if i in plan.scalar:
            expr = _scalar_expr(n, plan.scalar[i], names, plan.scalar_values)
        elif uf is not None:
            outarg = ""
            if target is not None and target[0] == "inplace":
                outarg = names[target[1]]
            elif target is not None:
                b, key = target[1], (tuple(n.out.shape), n.out.dtype)
                outarg = b.views[key]
            args = [arg(x) for x in n.inputs]
            o = f", out={outarg}" if outarg else ""
            if uf == "clamp":
                lo, hi = n.attrs.get("min"), n.attrs.get("max")
                expr = args[0]
                if lo is not None:
                    expr = f"np.maximum({expr}, {const(lo)}{o})"
                if hi is not None:
                    expr = f"np.minimum({expr}, {const(hi)}{o})"
            elif n.op == "relu":
                expr = f"np.maximum({args[0]}, 0{o})"
            else:
                expr = f"np.{uf}({', '.join(args)}{o})"
            if not outarg and not n.out.shape:
                expr = f"asarray({expr})"   # ufuncs return numpy scalars for 0-d results
        else:
            k = kernels.get(n.op)
            if k is None:
                k = kernels[n.op] = "k_" + re.sub(r"\W", "_", n.op)
            args = [arg(x) for x in n.inputs]
            if n.op == "linear" and _small_inner_linear(n):
                args[1] = f"c_rhs({args[1]})"
                uses_c_rhs = True
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
            expr = f"{k}({', '.join(args)})"
            if not n.out.shape:
                expr = f"asarray({expr})"   # kernels may return numpy scalars for 0-d results
        comment = " ".join(x for x in (_where(n), "[in place]" if target and target[0] == "inplace" else "")
                           if x)
        body.append((f"{out} = {expr}", comment or where))
        dead = [names[x] for x in free.get(i, ())]
        if n.out.name not in read and n.out.name not in kept:
            dead.append(out)
        if dead:
            body.append((f"del {', '.join(dead)}", ""))

    # ---- assemble
    lines = ["# Constructed by numpy_backend",
             f"# {len(graph.nodes)} nodes; {len(plan.buffers)} planned buffer"
             f"{'s' if len(plan.buffers) != 1 else ''}"]
    if plan.has_plan:
        lines.append(f"# memory plan: {plan.followed} planned value{'s' if plan.followed != 1 else ''} "
                     "written with out=")
        if plan.kernel_planned:
            lines += _wrap_comment("#   kernel calls keep fresh arrays: ", plan.kernel_planned)
        for v, why in plan.dropped:
            lines.append(f"#   not followed for {v}: {why}")
    if kernels:
        lines.append("")
        for op, k in kernels.items():
            lines.append(f"{k} = OPS[{op!r}].cpu")
    views = [(b, key, name) for b in plan.buffers for key, name in b.views.items()]
    if plan.buffers:
        lines += ["", "", "def alloc_buffers():",
                  "    # planned buffers: allocated once per buffer set, reused by every call"]
        for j, b in enumerate(plan.buffers):
            lines.append(f"    raw{j} = np.empty({b.nbytes}, np.uint8)")
        rawname = {id(b): f"raw{j}" for j, b in enumerate(plan.buffers)}
        for b, (shape, dtype), name in views:
            nb = _size(shape, dtype)
            lines.append(f"    {name} = {rawname[id(b)]}[:{nb}].view({_np_type(dtype)})"
                         f".reshape({_literal(tuple(shape))})")
        lines.append(f"    return {_tuple_src([name for _, _, name in views])}")
    lines += ["", "", "def program(env, overrides=None):"]
    width = max([len(c) for c, _ in body] + [0])
    pad = min(max(width, 40), 88)
    inputs = []
    for kind, v in graph.inputs:
        what = "external" if kind == "external" else "argument"
        if v.name in plan.scalar_inputs:  # read by Python float arithmetic only
            inputs.append((f"{names[v.name]} = float(env[{v.name!r}])", f"{v.type_str()} {what}, as a float"))
        else:
            inputs.append((f"{names[v.name]} = env[{v.name!r}]", f"{v.type_str()} {what}"))
    ipad = min(max([len(c) for c, _ in inputs] + [0]), 88)
    lines.append("    # inputs")
    for c, cm in inputs:
        lines.append(f"    {c:<{ipad}}  # {cm}")
    if per_call:
        lines += ["    if overrides is None:  # per-call attributes: the values recorded in the graph",
                  "        overrides = NO_OVERRIDES",
                  "    elif not FIXED.isdisjoint(overrides):",
                  "        check_fixed(overrides)"]
    else:
        lines += ["    if overrides and not FIXED.isdisjoint(overrides):",
                  "        check_fixed(overrides)"]
    if plan.targets:
        lines += _wrap_comment("    # updated in place (the write-back after the run then has nothing to copy): ",
                               plan.targets)
        lines.append("    if shared_or_readonly(env, UPDATED, OTHERS):  # another input views one of them: "
                     "update copies instead")
        for t in plan.targets:
            lines.append(f"        {names[t]} = {names[t]}.copy()")
    if plan.buffers:
        lines += ["    try:  # a buffer set no other call is using",
                  "        bufs = POOL.pop()",
                  "    except IndexError:",
                  "        bufs = alloc_buffers()"]
        lines.append(f"    {_unpack_src([name for _, _, name in views])} = bufs")
    lines.append("    # program")
    for c, cm in body:
        lines.append(f"    {c:<{pad}}  # {cm}" if cm else f"    {c}")
    if plan.buffers:
        lines.append("    POOL.append(bufs)")
    outs = ", ".join(names[v.name] for v in graph.outputs)
    muts = ", ".join(f"({t!r}, {names[v.name]})" for t, v in graph.mutations)
    lines.append(f"    return [{outs}], [{muts}]")
    source = "\n".join(lines) + "\n"

    globs = {"np": np, "OPS": OPS, "asarray": np.asarray, "POOL": [], "__name__": "eagerc_compiled"}
    if uses_c_rhs:
        globs["c_rhs"] = _c_rhs
    if plan.scalar:
        globs.update(msqrt=math.sqrt, fsqrt=_fsqrt, fpow=_fpow, fdiv=_fdiv)
    globs.update(consts)
    fixed = {n.out.name: n for n in graph.nodes if n.out.name not in per_call}
    globs["FIXED"] = frozenset(fixed)
    globs["UPDATED"] = tuple(plan.targets)
    globs["OTHERS"] = tuple(v.name for _, v in graph.inputs if v.name not in set(plan.targets))
    globs["shared_or_readonly"] = _shared_or_readonly
    globs["NO_OVERRIDES"] = {}
    globs["per_call"] = _per_call
    globs["check_fixed"] = lambda overrides: _check_fixed(fixed, overrides)
    return source, globs, plan


def _root(a):
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def _shared_or_readonly(env, targets, others=None):
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


def _per_call(overrides, name, **recorded):
    """A node's per-call attributes: those recorded in the graph, updated from `overrides`."""
    o = overrides.get(name)
    if o:
        recorded.update(o)
    return recorded


def _check_fixed(fixed, overrides):
    """Overrides for nodes whose attributes were rendered as literals: fine only when they
    repeat the recorded values (the program could not honour a change: never silent)."""
    for name, attrs in overrides.items():
        n = fixed.get(name)
        if n is None:
            continue
        for k, v in attrs.items():
            if k not in n.attrs or n.attrs[k] != v:
                raise ValueError(f"numpy backend: overrides set {name}.{k} = {v!r}, but this program "
                                 f"renders node {name} ({n.op}) with its attributes fixed "
                                 f"({n.attrs.get(k, '<absent>')!r}); only random ops' seed/offset "
                                 "and size expressions of dynamic graphs change per call")


def load_program(source, globs, graph, tag=""):
    """Compile generated driver source under a fake file name registered with linecache
    (tracebacks show the generated lines; the entry goes with the program) and return its
    `program` function with .source, .graph and .filename attached."""
    filename = f"<eagerc-compiled-{tag}{next(_COUNTER)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), globs)
    program = globs["program"]
    program.source = source
    program.graph = graph
    program.filename = filename
    weakref.finalize(program, linecache.cache.pop, filename, None)
    return program


def build_program(graph):
    source, globs, plan = render(graph)
    program = load_program(source, globs, graph)
    program.buffers = [(name, tuple(shape), dtype) for b in plan.buffers
                       for (shape, dtype), name in b.views.items()]
    program.pool = globs["POOL"]
    return program


class NumpyBackend:
    name = "numpy"
    supports_dynamic = True   # one program for every binding of a dynamic graph's size symbols

    def compile(self, graph):
        return build_program(graph)

    @staticmethod
    def plannable(node):
        """Can this node write into a given buffer (a direct ufunc call with out=)? For
        passes.memplan(graph, plannable=...): kernel calls always make fresh arrays."""
        return _direct(node, _direct_table()) is not None


register_backend("numpy", NumpyBackend)
