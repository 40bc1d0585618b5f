"""The numpy backend: the scheduled graph as one generated Python function over numpy.

`NumpyBackend().compile(graph)` decides how each node is computed and where its result
goes, and hands the lines to the shared driver emitter (driver.py), which assembles,
registers and compiles the program -- `program(env, overrides=None) -> (outputs,
mutations)`, with `.source`, `.graph`, `.filename`, `.line_nodes` and `.buffers`.

How a node is rendered
----------------------
- A "direct" node -- a hot elementwise op whose kernel is (or plainly wraps) a numpy
  ufunc, where `ufunc.resolve_dtypes` proves the ufunc makes exactly the value's dtype --
  becomes a ufunc call, `np.add(t0, t1)`. It writes its result where graph.memory_plan
  says (passes/memplan.py, made with this backend's predicate `_Plan.writes`: direct calls
  write with `out=`, kernel calls make fresh arrays, Python-float scalars no array):
    * in place into a dying input (`np.maximum(t0, 0, out=t0)`);
    * into a planned buffer (`np.add(t2, t3, out=buf0)`) allocated once per program
      and reused by every call (only values whose memory never escapes);
    * into a mutation target's own array (`np.subtract(w, t52, out=w)`: an optimizer
      step; compile.py's write-back then finds it in place. A cheap check per call,
      `shared_or_readonly`, falls back to updating copies when another input is a view
      of a target or a target is read-only);
    * else into a fresh array.
  A plan on the graph is checked (check_memory_plan; unless the planner made it for this very
  graph: MemoryPlan.made_for) and followed; a graph without one gets
  memplan's in-place plan, without buffers. Each call takes a buffer set from a pool and puts
  it back at the end, so concurrent or re-entrant calls never share one.
- Any other node calls its op's kernel, bound once as a global (`k_linear =
  OPS["linear"].cpu`), as eager mode's dispatch calls it (driver.Driver.call).
- A value is `del`-ed after its last use.

Per-call attributes (a random op's seed and offset; size expressions of a dynamic graph,
so one program serves every size: `supports_dynamic`) come from `overrides` (driver.py).

Values whose memory may be shared: ops declared `aliases` (views, and kernels that may hand
back their input: contiguous, to_device, einsum) and any op this backend does not know.
Their readers keep the base's memory alive.
"""
import numpy as np

from ...runtime import threads
from ...runtime.dtypes import FLOATING_KINDS
from ...runtime.ops import OPS
from ..passes import CLEANUP, fusion, schedule
from ..passes.memplan import FRESH, NONE, OUT, check_memory_plan, memplan
from . import register_backend
from .driver import Binding, Driver, per_call_attrs, where
from .scalars import GLOBALS as SCALAR_GLOBALS, scalar_expr, scalar_nodes

__all__ = ["NumpyBackend", "render", "build_program"]

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
    """Per node: how it is rendered (direct ufunc, Python float or kernel call); where results
    go is graph.memory_plan's (passes/memplan.py), made with this backend's predicate.

    target[i] is the name of the input node i writes over."""

    def __init__(self, graph, per_call=(), replan=False):
        table = _direct_table()
        self.direct = {}      # node index -> ufunc name (or "clamp")
        for i, n in enumerate(graph.nodes):
            uf = _direct(n, table) if n.out.name not in per_call else None
            if uf is not None:
                self.direct[i] = uf
        # node index -> "f" or "f32"; inputs bound as Python floats (scalars.py)
        self.scalar, self.scalar_inputs = scalar_nodes(graph, self.direct, per_call)
        self.scalar_ufunc = {i: self.direct.pop(i, None) for i in self.scalar}
        self.scalar_values = {graph.nodes[i].out.name for i, k in self.scalar.items() if k == "f"} | \
            self.scalar_inputs
        self.has_plan = graph.memory_plan is not None
        self.memory = self._memory(graph, replan)
        inputs = {v.name for _, v in graph.inputs}
        written = set(self.memory.inplace.values()) & inputs
        self.targets = [t for t, _ in graph.mutations if t in written]
        self.target = {i: self.memory.inplace[n.out.name] for i, n in enumerate(graph.nodes)
                       if n.out.name in self.memory.inplace}   # node index -> the input it overwrites

    def writes(self, node, i):
        """This backend's predicate for passes/memplan.py (OUT: a direct ufunc call with out=)."""
        return NONE if i in self.scalar else OUT if i in self.direct else FRESH

    def _memory(self, graph, replan):
        """The graph's memory plan, checked, when it is one this backend can follow; else the
        plan memplan makes with this backend's predicate (in place only for a graph without a
        plan: a graph gets buffers only from its pipeline, or with replan=True)."""
        index = {n.out.name: i for i, n in enumerate(graph.nodes)}
        plan = graph.memory_plan
        if plan is not None and not replan:
            if not plan.made_for(graph):   # never follow an unsafe plan (the planner's own for
                check_memory_plan(graph)   # this graph is safe); a plan made for another backend's
            if all(self.writes(graph.nodes[index[v]], index[v]) == OUT for v in (*plan.buffer, *plan.inplace)) \
                    and all(x not in index or self.writes(graph.nodes[index[x]], index[x]) != NONE
                            for x in plan.inplace.values()):   # predicate is made again with ours
                return plan
        nodes = {id(n): i for i, n in enumerate(graph.nodes)}
        return memplan(graph, lambda n: self.writes(n, nodes[id(n)]), buffers=replan or plan is not None).memory_plan


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
    view_of = plan.view_of = drv.use_buffers(plan.memory)
    for i, n in enumerate(graph.nodes):
        if n.op not in OPS:
            raise ValueError(f"numpy backend: node {n.out.name} applies unknown op {n.op!r}")
        uf, target = plan.direct.get(i), plan.target.get(i)
        if i in plan.scalar:
            expr = scalar_expr(n, plan.scalar[i], plan.scalar_ufunc[i], names, plan.scalar_values)
            drv.globs.update(SCALAR_GLOBALS)
        elif uf is not None:
            outarg = names[target] if target is not None else view_of.get(n.out.name, "")
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
        comment = where(n) + (" [in place]" if target is not None else "")
        drv.step(f"{names[n.out.name]} = {expr}", comment, [n.out.name],
                 [v.name for v in n.input_values()], [n.out.name])
    nb = len(plan.memory.buffers)
    drv.notes.append(f"# {len(graph.nodes)} nodes; {nb} planned buffer{'s' if nb != 1 else ''}")
    mp = plan.memory
    drv.notes.append(f"# memory plan{'' if plan.has_plan else ' (in place only: the graph has none)'}: "
                     f"{len(mp.buffer)} value{'s' if len(mp.buffer) != 1 else ''} in buffers, "
                     f"{len(mp.inplace)} written in place")
    drv.buffer_note = "planned buffers: allocated once per buffer set, reused by every call"
    drv.updated = list(plan.targets)
    drv.float_inputs = plan.scalar_inputs
    return drv, plan


def build_program(graph):
    drv, plan = _driver(graph)
    program = drv.load()
    values = {n.out.name: n.out for n in graph.nodes}
    program.buffers = list({view: (view, tuple(values[v].shape), values[v].dtype)
                            for v, view in plan.view_of.items()}.values())
    program.pool = program.__globals__["POOL"]
    return program


def plan_memory(graph):
    """passes.memplan, fed by this backend's predicate (_Plan.writes): direct ufunc calls write
    where the plan says, kernel calls make fresh arrays, Python-float scalars no array."""
    return graph.copy(memory_plan=_Plan(graph, per_call_attrs(graph), replan=True).memory)


class NumpyBackend:
    name = "numpy"
    supports_dynamic = True   # one program for every binding of a dynamic graph's size symbols
    pipeline = CLEANUP + [schedule, fusion, plan_memory]

    def compile(self, graph):
        program = build_program(graph)
        program.blas_context = threads.blas_context_for(graph)   # small products: BLAS stays on this thread
        return program


register_backend("numpy", NumpyBackend)
