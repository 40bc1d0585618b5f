"""A program's kernels bound once: attributes resolved, results written into buffers that every
call reuses, row composites called straight into their generated C kernels.

Why: an exported program runs one graph on the same shapes call after call (a dynamic size
gets a plan of its own), so what does not depend on the arrays' values is decided when its
plan is bound, not per node per call. `bind(graph)` returns {value name: kernel} for the
executor's Plan (`Plan(graph, check=True, bound=bind(graph))`, runtime/program.py); each such
kernel takes the node's arguments, attributes already applied:

- buffers: a value a bound kernel writes lives in a buffer allocated at bind time and reused
  by every call; values whose lifetimes are disjoint share one, as the compiler's backends
  share theirs (runtime/memplan.py: one planner, greedy by size, a value in the first
  elements of its buffer). A value lives until the last node that reads it or any value
  that may alias it (`memplan.alias_ends`, from the ops' `aliases` trait). Memory the caller
  receives -- outputs, mutation values, and whatever they may view -- is never in a buffer:
  it is a fresh array every call, so the results of two calls never share memory.
- ufunc kernels (add, mul, matmul, ge...: an op whose kernel is its numpy ufunc) write with
  `out=`; `linear` multiplies with np.matmul(out=) and adds its bias in place; `where` is two
  `np.copyto`. Same ufunc loops and BLAS calls as the op's kernel: the same bits -- and the
  same layout, so only when the operands are C-contiguous (numpy's own result would follow a
  strided operand's order, and a later product may depend on it).
- values computed from constants alone (arange, and the causal mask made from it) are computed
  at the first call and kept (read-only, never returned: outputs are fresh every call).
- row composites (softmax, log_softmax, layer_norm, gelu): the generated C row kernel that
  the op's own kernel would pick (runtime/kernels/eager.py: same decision, same kernel, same
  bits) is looked up at the first call, then called with the arrays' addresses (those of
  buffers and weights computed once).
A node that binds none of these keeps the op's kernel; a bound kernel whose arrays are not
laid out as it needs (a strided input) runs the op's kernel for that call. The decisions
are the kernels' own, taken once: `eager.set_enabled` later does not change a bound plan.

Nothing from the file reaches generated source: row kernels are named by the op, dtype, row
length and the variant the op's own rule derives from attributes the loader validated, and
the attributes that enter it are checked here again (numbers, and gelu's two forms) before a
node is bound.
"""
import math

import numpy as np

from . import kernel_cache
from .ir import Value
from .kernels import eager as c_rows
from .memplan import BUFFER, FRESH, alias_ends, memory_plan
from .ops import OPS

__all__ = ["bind", "buffers"]

# dtypes whose values bound kernels write (numpy's own: bfloat16 keeps the op's kernel)
_DTYPES = {np.dtype(d) for d in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                 "float16", "float32", "float64")}
_FLOATS = ("float32", "float64")   # by name: a numpy dtype compares equal to None (float64)


def bind(graph):
    """{value name: kernel} for the nodes of `graph` that bind (see the module docstring). A graph
    with symbolic sizes binds nothing (its plans are bound per size, specialised)."""
    if any(not isinstance(s, int) for n in graph.nodes for s in n.out.shape):
        return {}
    ends = alias_ends(graph)
    makers, bound, fixed = {}, {}, set()
    for i, n in enumerate(graph.nodes):
        op = OPS[n.op]
        if not op.effects and ends[n.out.name] != math.inf and \
                all(not isinstance(x, Value) or x.name in fixed for x in n.inputs):
            fixed.add(n.out.name)      # from constants alone: computed at the first call, then kept
            bound[n.out.name] = _once(op.cpu, n.attrs)
            continue
        make = _BINDERS.get(n.op, _rows_or_ufunc)(n)
        if make is not None:
            makers[i] = make
    outs = buffers(graph, makers)
    for i, make in makers.items():
        k = make(outs.get(i))
        if k is not None:
            bound[graph.nodes[i].out.name] = k
    return bound


def _once(kernel, attrs):
    """A value computed from constants only (a causal mask from arange): the op's kernel runs at
    the first call; later calls get that array, read-only (nothing the caller receives)."""
    kept = []

    def once(*args):
        if not kept:
            r = np.asarray(kernel(*args, **attrs))
            r.flags.writeable = False
            kept.append(r)
        return kept[0]
    return once


def buffers(graph, nodes):
    """{node index: array}: the buffer each node in `nodes` writes (those whose value stays inside
    the program), as the compiler's planner plans it (runtime/memplan.py), each a BUFFER writer."""
    writers = {id(graph.nodes[i]) for i in nodes}
    plan = memory_plan(graph, lambda n: BUFFER if id(n) in writers else FRESH)
    arrays = [_skewed(size, dtype, k) for k, (dtype, size) in enumerate(plan.buffers)]
    out = {}
    for i, n in enumerate(graph.nodes):
        b = plan.buffer.get(n.out.name)
        if b is not None:
            out[i] = arrays[b][:math.prod(n.out.shape)].reshape(n.out.shape)
    return out


def _skewed(n, dtype, k):
    """A new buffer of n elements whose start sits k * 7 cache lines (mod 4 KiB) past an aligned
    block's. Buffers allocated one after another otherwise start at the same offset within a
    page, and a kernel reading one while writing another at the same 4 KiB offset stalls on
    false store-to-load dependencies (4K aliasing) and cache-set conflicts: char-GPT's plan ran
    about 20% slower with aligned buffers than with these."""
    itemsize = np.dtype(dtype).itemsize
    skew = (k * 7 % 64) * 64 // itemsize
    return np.empty(n + skew, dtype)[skew:]


def _dtype(v):
    d = np.dtype(v.dtype) if v.dtype != "bfloat16" else None
    return d if d in _DTYPES else None


# ---------------------------------------------------------------- out= kernels

def _ufunc(node):
    """An op whose kernel is its ufunc: write into the buffer (out=), when the ufunc's own result
    type for these operands is the declared one."""
    op = OPS[node.op]
    uf = getattr(np, op.ufunc, None) if op.ufunc else None
    if uf is None or op.cpu is not uf or uf.nout != 1 or node.attrs or _dtype(node.out) is None:
        return None
    probe = []
    for x in node.inputs:
        if isinstance(x, Value):
            if _dtype(x) is None:
                return None
            probe.append(np.zeros(1, x.dtype))
        elif type(x) in (bool, int, float):
            probe.append(x)
        else:
            return None
    try:
        if uf(*probe).dtype != _dtype(node.out):
            return None
    except (TypeError, ValueError, OverflowError):
        return None

    arrays = [j for j, x in enumerate(node.inputs) if isinstance(x, Value)]

    def make(out):
        if out is None:
            return None
        if len(probe) == 2 and len(arrays) == 2:
            def binary(a, b):
                if a.flags.c_contiguous and b.flags.c_contiguous:
                    return uf(a, b, out=out)
                return uf(a, b)
            return binary
        if len(arrays) == 1:
            j = arrays[0]

            def one_array(*args):
                if args[j].flags.c_contiguous:
                    return uf(*args, out=out)
                return uf(*args)
            return one_array

        def ufunc(*args):
            if all(args[j].flags.c_contiguous for j in arrays):
                return uf(*args, out=out)
            return uf(*args)
        return ufunc
    return make


def _linear(node):
    """linear as the op's kernel computes it (runtime/ops/nn.py), the product written into the
    buffer: a C-contiguous input of more than two dimensions as one matrix, a 2-d input of more
    than `few_rows` rows as x @ weight.T; other inputs keep the op's kernel."""
    x = node.inputs[0]
    kernel = OPS["linear"].cpu
    rows = math.prod(x.shape[:-1]) if isinstance(x, Value) else 0
    if node.out.dtype not in _FLOATS or not isinstance(x, Value) or len(x.shape) < 2 or \
            (len(x.shape) == 2 and rows <= kernel.few_rows):
        return None
    flat = (rows, x.shape[-1])

    def make(out):
        if out is None:
            return None
        out2 = out.reshape(rows, out.shape[-1])

        def linear(x, weight, bias=None):
            if x.ndim > 2:
                if not x.flags.c_contiguous:
                    return kernel(x, weight, bias)
                x = x.reshape(flat)
            np.matmul(x, weight.T, out=out2)
            if bias is not None:
                np.add(out2, bias, out=out2)
            return out
        return linear
    return make


def _where(node):
    """where(cond, a, b) into the buffer: b copied in, then a where cond holds (float results,
    each operand an array of the result's dtype or a Python number)."""
    cond, a, b = node.inputs
    kernel = OPS["where"].cpu
    if node.out.dtype not in _FLOATS or not isinstance(cond, Value):
        return None
    for x in (a, b):
        if (isinstance(x, Value) and x.dtype != node.out.dtype) or \
                (not isinstance(x, Value) and type(x) not in (int, float)):
            return None

    def make(out):
        if out is None:
            return None

        def where(cond, a, b):
            if not all(x.flags.c_contiguous for x in (cond, a, b) if type(x) is np.ndarray):
                return kernel(cond, a, b)
            np.copyto(out, b)
            np.copyto(out, a, where=cond)
            return out
        return where
    return make


# ---------------------------------------------------------------- row composites

def _attrs_checked(node):
    """The attributes that reach a row kernel's source, checked again: numbers are numbers, an
    approximation is one of gelu's two (the loader's shape rules check these too)."""
    a = node.attrs
    if "eps" in a and (type(a["eps"]) not in (int, float) or not math.isfinite(a["eps"])):
        return False
    if "approximate" in a and a["approximate"] not in ("none", "tanh"):
        return False
    return all(type(a[k]) is int for k in ("dim",) if k in a)


def _rows(node):
    """A row composite (the op's kernel carries `c_rows`, runtime/ops/nn.py): at the first call,
    the C row kernel the op's kernel would choose for these arrays; then that kernel, called with
    the addresses of the arrays it reads (those of arrays seen at the previous call reused)."""
    op = OPS[node.op]
    kernel = getattr(op.cpu, "inner", op.cpu)
    spec = getattr(kernel, "c_rows", None)
    if spec is None or node.out.dtype not in _FLOATS or not _attrs_checked(node):
        return None
    name, rows_of = spec
    attrs, shape, dtype = node.attrs, node.out.shape, _dtype(node.out)

    def make(out):
        ptr = kernel_cache.ptr
        out_ptr = None if out is None else ptr(out)
        state = []      # [fn, picks, rows, last arrays, their addresses] once chosen; [None] if not

        def first(args):
            if c_rows.use(name, args[0]):
                plan = rows_of(*args, **attrs)
                if plan is not None:
                    inputs, cols, variant = plan
                    rk = c_rows.row_kernel(name, dtype.name, cols, *variant)
                    if rk is not None:
                        picks = [next(j for j, a in enumerate(args) if a is x) for x in inputs]
                        state[:] = [rk.fn, picks, math.prod(shape) // cols, [None] * len(picks), [0] * len(picks)]
                        return
            state[:] = [None]

        def row_composite(*args):
            if not state:
                first(args)
            fn = state[0]
            if fn is None:
                return kernel(*args, **attrs)
            _, picks, rows, last, addr = state
            for j, p in enumerate(picks):
                a = args[p]
                if a is not last[j]:
                    if not a.flags.c_contiguous:
                        return kernel(*args, **attrs)
                    last[j], addr[j] = a, ptr(a)
            if out is None:
                o = np.empty(shape, dtype)
                fn(*addr, ptr(o), rows)
                return o
            fn(*addr, out_ptr, rows)
            return out
        return row_composite
    return make


def _rows_or_ufunc(node):
    return _rows(node) or _ufunc(node)


_BINDERS = {"linear": _linear, "where": _where}
