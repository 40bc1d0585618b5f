"""The numpy backend: the scheduled graph as one generated Python function over numpy.

`NumpyBackend().compile(graph)` decides how each node is computed and where its result
goes, and hands the lines to the shared driver emitter (driver.py), which assembles,
registers and compiles the program -- `program(env, overrides=None) -> (outputs,
mutations)`, with `.source`, `.graph`, `.filename`, `.line_nodes` and `.buffers`.

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
  Buffers come from graph.meta["memory_plan"] ({value: buffer id}), made by passes/memplan.py
  in this backend's pipeline with its predicate (`plannable`); each planned assignment is
  checked against the alias-aware liveness (memplan.alias_ends) and dropped if unsafe. A
  graph without a plan gets no buffers. Each call takes a buffer set from a pool and puts
  it back at the end, so concurrent or re-entrant calls never share one.
- Any other node calls its op's kernel, bound once as a global (`k_linear =
  OPS["linear"].cpu`), as eager mode's dispatch calls it (driver.Driver.call).
- A mutation (an external updated in place: parameters, optimizer state, running
  stats) is computed straight into the target's array when the chain of direct nodes
  that makes the new value starts where the old value is read for the last time
  (`np.subtract(w, t52, out=w)`); compile.py's write-back then finds it in place. A
  cheap check per call (`shared_or_readonly`) falls back to updating copies when another
  input is a view of a target or a target is read-only.
- A value is `del`-ed after its last use.

Per-call attributes (a random op's seed and offset; size expressions of a dynamic graph,
so one program serves every size: `supports_dynamic`) come from `overrides` (driver.py).

Values whose memory may be shared: ops declared `aliases` (views, and kernels that may hand
back their input: contiguous, to_device, einsum) and any op this backend does not know.
Their readers keep the base's memory alive.
"""
import math

import numpy as np

from ...runtime.dtypes import FLOATING_KINDS
from ...runtime.ops import OPS
from ..passes import CLEANUP, fusion, memplan, schedule
from ..passes.memplan import alias_ends, returned
from ..passes.util import may_alias as _may_alias, nbytes, numel
from . import register_backend
from .driver import Binding, Driver, literal, np_type, where, wrap_comment
from .scalars import GLOBALS as SCALAR_GLOBALS, scalar_expr, scalar_nodes

__all__ = ["NumpyBackend", "render", "build_program"]

_INF = math.inf
NUMPY = Binding("numpy_backend")   # kernels: the ops' numpy kernels, OPS[op].cpu

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
            return uf if x == out and x.kind in FLOATING_KINDS and not node.attrs else None
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
        ends = alias_ends(graph)
        plan = graph.meta.get("memory_plan") or None
        planned = {}          # plan buffer id -> _Buffer
        storage = {}          # value name -> the _Storage it directly owns or shares in place
        for i, n in enumerate(graph.nodes):
            uf = _direct(n, table) if n.out.name not in per_call else None
            if uf is not None:
                self.direct[i] = uf
        # node index -> "f" or "f32"; inputs bound as Python floats (scalars.py)
        self.scalar, self.scalar_inputs = scalar_nodes(graph, self.direct, per_call)
        self.scalar_ufunc = {i: self.direct.pop(i, None) for i in self.scalar}
        self.scalar_values = {graph.nodes[i].out.name for i, k in self.scalar.items() if k == "f"} | \
            self.scalar_inputs
        forced = self._update_chains(graph, ends, storage)
        for i, n in enumerate(graph.nodes):
            if i in self.scalar:   # a Python (or numpy) scalar: no array memory at all
                continue
            out = n.out
            uf = self.direct.get(i)
            escapes = ends[out.name] == _INF
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
        escaping = returned(graph)
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
            if v is None or target.endswith(".grad") or counts[target] > 1 or counts[m] > 1 or m in escaping \
                    or ends.get(target) == _INF or numel(v.shape) is None:
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
        if numel(out.shape) is None:
            return None, "symbolic shape"
        b = planned.get(bid)
        if b is None:
            b = planned[bid] = _Buffer(bid)
            self.buffers.append(b)
        elif b.storage is not None and b.storage.end > i:
            last = b.storage.members[-1]
            return None, f"buffer {bid!r} still holds {last} (or a view of it), read later"
        b.nbytes = max(b.nbytes, nbytes(out))
        key = (tuple(out.shape), out.dtype)
        b.views.setdefault(key, None)
        return ("buffer", b, key), None


# ---------------------------------------------------------------- rendering

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

def render(graph):
    """(source, globals, plan) of the program for `graph`; deterministic for the same graph."""
    drv, plan = _driver(graph)
    source, globs, _ = drv.render()
    return source, globs, plan


def _driver(graph):
    """The program's Driver, every node's line added, and the _Plan it follows."""
    drv = Driver(graph, NUMPY)
    plan = _Plan(graph, drv.per_call)
    names = drv.names
    for i, n in enumerate(graph.nodes):
        if n.op not in OPS:
            raise ValueError(f"numpy backend: node {n.out.name} applies unknown op {n.op!r}")
        uf, target = plan.direct.get(i), plan.target.get(i)
        if i in plan.scalar:
            expr = scalar_expr(n, plan.scalar[i], plan.scalar_ufunc[i], names, plan.scalar_values)
            drv.globs.update(SCALAR_GLOBALS)
        elif uf is not None:
            outarg = ""
            if target is not None and target[0] == "inplace":
                outarg = names[target[1]]
            elif target is not None:
                outarg = target[1].views[(tuple(n.out.shape), n.out.dtype)]
            args = [drv.arg(x) for x in n.inputs]
            o = f", out={outarg}" if outarg else ""
            if uf == "clamp":
                lo, hi = n.attrs.get("min"), n.attrs.get("max")
                expr = args[0]
                if lo is not None:
                    expr = f"np.maximum({expr}, {drv.const(lo)}{o})"
                if hi is not None:
                    expr = f"np.minimum({expr}, {drv.const(hi)}{o})"
            elif n.op == "relu":
                expr = f"np.maximum({args[0]}, 0{o})"
            else:
                expr = f"np.{uf}({', '.join(args)}{o})"
            if not outarg and not n.out.shape:
                expr = f"asarray({expr})"   # ufuncs return numpy scalars for 0-d results
        else:
            args = None
            if n.op == "linear" and _small_inner_linear(n):
                args = [drv.arg(x) for x in n.inputs]
                args[1] = f"c_rhs({args[1]})"
                drv.globs["c_rhs"] = _c_rhs
            expr = drv.call(n, args)
        comment = where(n) + (" [in place]" if target and target[0] == "inplace" else "")
        drv.step(f"{names[n.out.name]} = {expr}", comment, [n.out.name],
                 [v.name for v in n.input_values()], [n.out.name])
    nb = len(plan.buffers)
    drv.notes.append(f"# {len(graph.nodes)} nodes; {nb} planned buffer{'s' if nb != 1 else ''}")
    if plan.has_plan:
        drv.notes.append(f"# memory plan: {plan.followed} planned value{'s' if plan.followed != 1 else ''} "
                         "written with out=")
        if plan.kernel_planned:
            drv.notes += wrap_comment("#   kernel calls keep fresh arrays: ", plan.kernel_planned)
        drv.notes += [f"#   not followed for {v}: {why}" for v, why in plan.dropped]
    for j, b in enumerate(plan.buffers):
        drv.buffers.append((None, f"raw{j} = np.empty({b.nbytes}, np.uint8)"))
    for j, b in enumerate(plan.buffers):
        for (shape, dtype), name in b.views.items():
            size = math.prod(shape) * np.dtype(dtype).itemsize
            view = f"raw{j}[:{size}].view({np_type(dtype)}).reshape({literal(tuple(shape))})"
            drv.buffers.append((name, f"{name} = {view}"))
    drv.buffer_note = "planned buffers: allocated once per buffer set, reused by every call"
    drv.updated = list(plan.targets)
    drv.float_inputs = plan.scalar_inputs
    return drv, plan


def build_program(graph):
    drv, plan = _driver(graph)
    program = drv.load()
    program.buffers = [(name, tuple(shape), dtype) for b in plan.buffers
                       for (shape, dtype), name in b.views.items()]
    program.pool = program.__globals__["POOL"]
    return program


def plannable(node):
    """Can this node write into a given buffer (a direct ufunc call with out=)? Kernel calls
    always make fresh arrays."""
    return _direct(node, _direct_table()) is not None


def plan_memory(graph):
    """passes.memplan, fed by what this backend can write into a given buffer."""
    return memplan(graph, plannable=plannable)


class NumpyBackend:
    name = "numpy"
    supports_dynamic = True   # one program for every binding of a dynamic graph's size symbols
    pipeline = CLEANUP + [schedule, fusion, plan_memory]

    def compile(self, graph):
        return build_program(graph)


register_backend("numpy", NumpyBackend)
