"""Dynamic shapes: graphs whose batch/sequence sizes are symbols ("s0", "s1", ...).

How a dynamic graph is made (see docs/compile.md):

1. The function is traced once more on *synthetic* inputs: copies of the real inputs
   whose dynamic dimensions have a distinctive prime size -- the nearest prime above the
   sizes seen, such that no static number in the graph is a multiple of it or near it.
2. `generalize` replaces every occurrence of those sizes by symbols: in value shapes and
   in integer attributes (reshape/expand/full shapes, slice bounds...), as small
   expressions such as "s0", "s0*16", "s0*s1", "s0-1". A Python number in the graph
   that was computed from a size (a divisor 1/97, a constant 97.0) cannot be made
   symbolic: it is reported as a problem and the caller stays static.
3. The caller checks the symbolic graph against the graph traced on the real inputs
   (`same_program`: the same ops with the same attributes once the symbols are bound
   to the real sizes, so Python took the same path at both sizes) and runs it once
   against the eager result before trusting it.
4. At call time the symbols are bound from the input shapes and the attribute
   expressions are evaluated by the runtime's `SizeExpr` (runtime/sizes.py) -- sums of
   products of integers and symbols, never `eval`.

A key split at graph breaks (breaks.py) is made symbolic one path at a time: the synthetic
trace reads the real call's values at the breaks (`Symbolic.forced`), so it takes that path;
a new path costs a trace at its real sizes and one at synthetic sizes (`add_path`).

Training is made dynamic the same way: a call that needs autograd gets a symbolic forward
and a symbolic backward graph (training.JointEntry with two `Dynamic`s); a whole training
step is an ordinary graph whose mutation outputs (parameters, .grad, optimizer state) keep
their static shapes. Since the synthetic trace and the checks run the function eagerly,
everything a call can update is saved first and put back after each (`Saved`).
"""
import logging
import math
import sys
import warnings

import numpy as np

from .. import dispatch
from .._tensor import Tensor
from ..runtime.ir import Node, Value
from ..runtime.pytree import flatten
from ..runtime.sizes import SizeExpr, evaluate
from .guards import is_user_file

log = logging.getLogger("eagerc.compile")
_ndarray = np.ndarray

__all__ = ["evaluate", "choose_primes", "graph_ints", "generalize", "specialize",
           "same_program", "SymbolicAttrs", "scan_symbolic"]

_NOT_SIZES = frozenset(("seed", "offset", "dim", "dims", "dim1", "dim2", "axis", "dtype", "device"))
_MAX_OFF = 2       # |c| in p + c: slice bounds such as T-1


# ---------------------------------------------------------------- choosing sizes

def graph_ints(graph):
    """Every number a graph holds: shapes, attributes, constants (integers as their absolute
    value; floats as they are, to keep a size from explaining them by chance)."""
    found = set()

    def walk(x):
        if isinstance(x, bool):
            return
        if isinstance(x, int):
            found.add(abs(x))
        elif isinstance(x, float) and math.isfinite(x) and x != 0:
            found.add(x)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
    for _, v in graph.inputs:
        walk(v.shape)
    for n in graph.nodes:
        walk(n.out.shape)
        walk([x for x in n.inputs if not isinstance(x, Value)])
        walk({k: a for k, a in n.attrs.items() if k not in ("seed", "offset")})
    return found


def _clashes(p, numbers):
    """Could a static number of the graph be mistaken for one computed from size p?"""
    for s in numbers:
        if isinstance(s, int):
            if (s >= p and s % p == 0) or abs(s - p) <= _MAX_OFF:
                return True
        elif _depends(s, {"s": p}):
            return True
    return False


def _is_prime(n):
    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def choose_primes(observed, ints, above=True):
    """{symbol: size} for the synthetic trace: distinct primes, each the nearest one above
    (or below, with above=False) the largest size seen for that symbol, that no static
    integer of the graph is a multiple of or close to. None if there is none."""
    out = {}
    for sym, seen in observed.items():
        taken = set(out.values())
        cand = range(max(seen + 1, 5), 8 * max(seen, 16) + 64) if above else range(seen - 1, 2, -1)
        for p in cand:
            if _is_prime(p) and p not in taken and not _clashes(p, ints):
                out[sym] = p
                break
        else:
            return None
    return out


# ---------------------------------------------------------------- generalising

def _express(a, primes):
    """The expression for integer `a` in terms of the symbols' primes, or None if it is static.

    `primes` maps symbol -> prime. Products of symbols times any integer are recognised
    (s0*s1*16), and one symbol plus or minus a small offset (s0-1)."""
    if isinstance(a, bool) or a == 0:
        return None
    rest, syms = a, []
    for s, p in primes.items():
        while rest % p == 0 and rest != 0:
            rest //= p
            syms.append(s)
    if syms:
        return str(SizeExpr([(rest, syms)]))
    for s, p in primes.items():
        c = a - p
        if 1 <= abs(c) <= _MAX_OFF:
            return str(SizeExpr([(1, (s,)), (c, ())]))
    return None


def _depends(x, primes):
    """Does the Python number x look computed from a symbolic size (p, k*p, 1/p, sqrt(p)...)?"""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x == 0 or not math.isfinite(x):
        return False
    if isinstance(x, int) or float(x).is_integer():
        return _express(int(x), primes) is not None
    for p in primes.values():
        for q in (x, 1.0 / x, x * x, 1.0 / (x * x)):
            r = q / p
            if abs(r - round(r)) < 1e-6 * max(1.0, abs(r)) and 1 <= round(abs(r)) <= 64 * 64:
                return True
    return False


def _gen_attr(x, primes):
    """(attr value for the graph, template, symbolic?): integers that are sizes become
    expression strings in the graph and `SizeExpr`s in the template."""
    if isinstance(x, bool) or x is None:
        return x, x, False
    if isinstance(x, int):
        e = _express(x, primes)
        return (x, x, False) if e is None else (e, SizeExpr.parse(e), True)
    if isinstance(x, (list, tuple)):
        items = [_gen_attr(v, primes) for v in x]
        if any(s for _, _, s in items):
            make = tuple if isinstance(x, tuple) else list
            return make(v for v, _, _ in items), make(t for _, t, _ in items), True
        return x, x, False
    return x, x, False


def _sym_shape(shape, primes):
    return tuple((_express(s, primes) or s) if isinstance(s, int) else s for s in shape)


def generalize(graph, primes):
    """The graph traced on synthetic sizes, with those sizes as symbols.

    primes: {symbol: prime used for it}.
    Returns (symbolic graph, SymbolicAttrs, problems); problems lists the Python
    numbers that were computed from a size (the graph cannot be dynamic if any).
    """
    vals = {}

    def val(v):
        w = vals.get(v.name)
        if w is None:
            w = vals[v.name] = Value(v.name, _sym_shape(v.shape, primes), v.dtype, v.device)
        return w
    problems = []
    sym_attrs = {}
    scalars = {}
    nodes = []
    for n in graph.nodes:
        ins = []
        for x in n.inputs:
            if isinstance(x, Value):
                ins.append(val(x))
            else:
                v = _size_scalar(n, x, primes, len(ins))
                if v is not None:   # a size as the scalar operand of an elementwise op: a node
                    node, expr = v
                    nodes.append(node)
                    sym_attrs[node.out.name] = {"value": expr}
                    scalars[node.out.name] = type(x) if type(x) is float else int
                    ins.append(node.out)
                    continue
                if _depends(x, primes):
                    problems.append(f"{n.op} at {n.loc or '?'} uses the Python number {x!r}, computed "
                                    f"from a size (traced as {_sizes(primes)}); dividing by the size "
                                    "itself, or a tensor op such as mean(), keeps it symbolic")
                ins.append(x)
        attrs = {}
        symbolic = {}
        for k, a in n.attrs.items():
            if k in _NOT_SIZES:
                attrs[k] = a
                continue
            if isinstance(a, float) and _depends(a, primes):
                problems.append(f"{n.op} at {n.loc or '?'} has {k}={a!r}, computed from a size "
                                f"(traced as {_sizes(primes)})")
            new, template, sym = _gen_attr(a, primes)
            attrs[k] = new
            if sym:
                symbolic[k] = template
        if symbolic:
            sym_attrs[n.out.name] = symbolic
        nodes.append(Node(n.op, ins, attrs, val(n.out), n.loc, n.module))
    _check_tree(graph.out_tree, primes, problems)
    g = graph.copy(inputs=[(k, val(v)) for k, v in graph.inputs], nodes=nodes,
                   outputs=[val(v) for v in graph.outputs], mutations=[(t, val(v)) for t, v in graph.mutations])
    return g, SymbolicAttrs(sym_attrs, scalars), problems


def _size_scalar(n, x, primes, k):
    """(a `full` node making the Python number x of node n's input k, the value's expression)
    when x is an integer computed from a size (`g / 44` in mean's derivative: 44 = 4*s0) and n
    is a binary elementwise op on a tensor, which takes a Python number as a weak scalar: a 0-d
    tensor of the tensor's dtype gives the same values; else None."""
    from ..runtime.ops import OPS
    op = OPS.get(n.op)
    if op is None or not op.pointwise or len(op.inputs) != 2 or isinstance(x, bool) or \
            not isinstance(x, (int, float)) or not float(x).is_integer() or not math.isfinite(x):
        return None
    e = _express(int(x), primes)
    tensors = n.input_values()
    if e is None or len(tensors) != 1:
        return None
    dt = tensors[0].dtype
    if not (dt.startswith(("float", "bfloat")) or (isinstance(x, int) and dt.startswith(("int", "uint")))):
        return None
    out = Value(f"{n.out.name}_size{k}", (), dt, tensors[0].device)
    return Node("full", [], {"shape": (), "value": e, "dtype": dt}, out, n.loc, n.module), SizeExpr.parse(e)


def _check_tree(tree, primes, problems):
    (kind, val), = tree.items()
    if kind == "c" and _depends(val, primes):
        problems.append(f"the function returns the number {val!r}, computed from a size "
                        f"(traced as {_sizes(primes)})")
    elif kind in ("tuple", "list"):
        for t in val:
            _check_tree(t, primes, problems)
    elif kind == "dict":
        for _, t in val:
            _check_tree(t, primes, problems)


def _sizes(primes):
    return ", ".join(f"{s}={p}" for s, p in primes.items())


class SymbolicAttrs:
    """The attributes of a symbolic graph that hold size expressions, ready to evaluate.

    `table`: node output name -> {attr: template}, a template being the attribute with
    `SizeExpr`s where the graph shows expression strings. `overrides(env)` gives
    {node output name: {attr: concrete value}} for one binding of the symbols -- the
    per-call `overrides` a backend program accepts. `scalars`: {name: int or float} of the
    0-d `full` nodes that stand for a Python number computed from a size (`_size_scalar`);
    `specialize` turns them back into that number."""

    def __init__(self, table, scalars=None):
        self.table = table
        self.scalars = scalars or {}
        self._compiled = [(name, [(k, _compile_template(t)) for k, t in attrs.items()])
                          for name, attrs in table.items()]

    def __bool__(self):
        return bool(self.table)

    def overrides(self, env):
        return {name: {k: f(env) for k, f in attrs} for name, attrs in self._compiled}


def scan_symbolic(graph, symbols):
    """SymbolicAttrs of any graph (e.g. after passes renamed nodes): attribute strings
    that parse as expressions over `symbols` only ("s0*16"; not "slice" or "mean")."""
    symbols = set(symbols)

    def template(x):
        if isinstance(x, str):
            try:
                e = SizeExpr.parse(x)
            except ValueError:
                return x, False
            return (e, True) if e.symbols() and e.symbols() <= symbols else (x, False)
        if isinstance(x, (list, tuple)):
            items = [template(v) for v in x]
            if any(s for _, s in items):
                return (tuple if isinstance(x, tuple) else list)(t for t, _ in items), True
        return x, False
    table = {}
    for n in graph.nodes:
        for k, a in n.attrs.items():
            t, sym = template(a)
            if sym:
                table.setdefault(n.out.name, {})[k] = t
    return SymbolicAttrs(table)


def _compile_template(t):
    if isinstance(t, SizeExpr):
        return t
    if isinstance(t, (list, tuple)):
        parts = [_compile_template(v) for v in t]
        make = tuple if isinstance(t, tuple) else list
        return lambda env: make(p(env) for p in parts)
    return lambda env: t


# ---------------------------------------------------------------- specialising

def specialize(graph, sym_attrs, env):
    """A static copy of a symbolic graph with every symbol bound by `env`."""
    vals = {}

    def val(v):
        w = vals.get(v.name)
        if w is None:
            shape = tuple(evaluate(s, env) if isinstance(s, str) else s for s in v.shape)
            w = vals[v.name] = Value(v.name, shape, v.dtype, v.device)
        return w
    over = sym_attrs.overrides(env)
    numbers = {name: kind(over[name]["value"]) for name, kind in sym_attrs.scalars.items()}
    nodes = []
    for n in graph.nodes:
        if n.out.name in numbers:   # a size scalar: the number itself again, as traced
            continue
        attrs = n.attrs
        o = over.get(n.out.name)
        if o:
            attrs = {**attrs, **o}
        nodes.append(Node(n.op, [(numbers[x.name] if x.name in numbers else val(x)) if isinstance(x, Value) else x
                                 for x in n.inputs], attrs, val(n.out), n.loc, n.module))
    return graph.copy(inputs=[(k, val(v)) for k, v in graph.inputs], nodes=nodes,
                      outputs=[val(v) for v in graph.outputs], mutations=[(t, val(v)) for t, v in graph.mutations])


def same_program(static, symbolic, sym_attrs, env):
    """None if `symbolic` with symbols bound by `env` is node for node the graph `static`
    (same ops, inputs, attributes and types; random offsets aside); else where they differ."""
    g = specialize(symbolic, sym_attrs, env)
    if len(g.nodes) != len(static.nodes):
        return f"{len(static.nodes)} ops at the real size, {len(g.nodes)} at the synthetic size"
    if [(k, v.name, v.shape, v.dtype) for k, v in g.inputs] != \
            [(k, v.name, v.shape, v.dtype) for k, v in static.inputs]:
        return "different graph inputs"
    for a, b in zip(static.nodes, g.nodes):
        if a.op != b.op or _inputs(a) != _inputs(b) or a.out.shape != b.out.shape or a.out.dtype != b.out.dtype:
            return f"{a.op} at {a.loc} differs: {a!r} vs {b!r}"
        ka = {k: _plain(v) for k, v in a.attrs.items() if k not in ("offset", "seed")}
        kb = {k: _plain(v) for k, v in b.attrs.items() if k not in ("offset", "seed")}
        if ka != kb:
            return f"{a.op} at {a.loc}: attributes {ka} at the real size, {kb} generalised"
    if [v.name for v in g.outputs] != [v.name for v in static.outputs] or g.out_tree != static.out_tree:
        return "different outputs"
    # (as a mapping: the order of .grad writes follows which .grad existed before the call)
    if {t: v.name for t, v in g.mutations} != {t: v.name for t, v in static.mutations} or \
            len(g.mutations) != len(static.mutations):
        return "different mutations"
    return None


def _inputs(n):
    return [("v", x.name) if isinstance(x, Value) else ("c", type(x).__name__, x) for x in n.inputs]


def _plain(x):
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


# ---------------------------------------------------------------- sizes that record comparisons

_CMP = {"__lt__": lambda a, b: a < b, "__le__": lambda a, b: a <= b, "__gt__": lambda a, b: a > b,
        "__ge__": lambda a, b: a >= b, "__eq__": lambda a, b: a == b, "__ne__": lambda a, b: a != b}
_SIGN = {"__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">=", "__eq__": "==", "__ne__": "!="}


class SymInt(int):
    """A dynamic size as Python code sees it during the synthetic trace (x.shape[0],
    x.size(1), len(x), x.numel(), of inputs and of every intermediate tensor).

    `expr` says which size it is ("s0", "s0*s1", "s0-1"). Sums, differences and products
    with integers and other SymInts stay SymInts with their expression, and every
    comparison -- `if T > 32`, `assert T <= block_size`, `min(T, n)`, `if n - 1 > 5` -- is
    written to `log` as a guard (expr, op, other, other is an expression, outcome) that
    the symbolic graph then requires. Arithmetic the expressions cannot hold (//, %, /,
    **, float()) is logged as unsupported at the user's line: the function then stays
    static rather than take a branch the guards cannot see."""

    def __new__(cls, value, expr, log):
        self = int.__new__(cls, value)
        self.sym = expr
        self.log = log
        return self

    def _cmp(self, other, op):
        if isinstance(other, bool) or not isinstance(other, (int, float)):
            return NotImplemented
        r = _CMP[op](int(self), other if not isinstance(other, SymInt) else int(other))
        key = (self.sym, op, other.sym if isinstance(other, SymInt) else other,
               isinstance(other, SymInt), r)
        if key not in self.log:
            self.log.append(key)
        return r

    __hash__ = int.__hash__

    def __lt__(self, o):
        return self._cmp(o, "__lt__")

    def __le__(self, o):
        return self._cmp(o, "__le__")

    def __gt__(self, o):
        return self._cmp(o, "__gt__")

    def __ge__(self, o):
        return self._cmp(o, "__ge__")

    def __eq__(self, o):
        return self._cmp(o, "__eq__")

    def __ne__(self, o):
        return self._cmp(o, "__ne__")

    def __repr__(self):
        return int.__repr__(self)

    # ---- arithmetic that stays a size expression
    def _arith(self, other, op, reflected=False):
        if isinstance(other, bool) or not isinstance(other, int):
            if isinstance(other, float):   # noted (the function stays static), computed as Python would
                self._unsupported(f"{_ARITH_SIGN[op]} with a float")
                x, y = (other, int(self)) if reflected else (int(self), other)
                return x + y if op == "add" else x - y if op == "sub" else x * y
            return NotImplemented
        a = SizeExpr.parse(self.sym)
        b = SizeExpr.parse(other.sym) if isinstance(other, SymInt) else SizeExpr([(int(other), ())])
        x, y = int(self), int(other)
        if reflected:
            a, b, x, y = b, a, y, x
        if op == "add":
            expr, value = a + b, x + y
        elif op == "sub":
            expr, value = a - b, x - y
        else:
            expr, value = a * b, x * y
        if not expr.symbols():
            return value  # the symbols cancelled out
        return SymInt(value, str(expr), self.log)

    def __add__(self, o):
        return self._arith(o, "add")

    def __radd__(self, o):
        return self._arith(o, "add", True)

    def __sub__(self, o):
        return self._arith(o, "sub")

    def __rsub__(self, o):
        return self._arith(o, "sub", True)

    def __mul__(self, o):
        return self._arith(o, "mul")

    def __rmul__(self, o):
        return self._arith(o, "mul", True)

    def __neg__(self):
        return SymInt(-int(self), str(-SizeExpr.parse(self.sym)), self.log)

    def __pos__(self):
        return self

    # ---- arithmetic that does not: the function stays static
    def _unsupported(self, what):
        """Note arithmetic the guards cannot follow -- when the user's code does it (eagerc's own
        size arithmetic ends in op attributes, which generalize() checks)."""
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename == __file__:
            f = f.f_back
        if f is None or not is_user_file(f.f_code.co_filename):
            return None
        from .tracer import user_location
        entry = ("unsupported", f"{self.sym} {what}", user_location())
        if entry not in self.log:
            self.log.append(entry)
        return None

    def _plain(self, what, fn, *args):
        self._unsupported(what)
        return fn(*args)

    def __floordiv__(self, o):
        return self._plain("//", int.__floordiv__, int(self), o)

    def __rfloordiv__(self, o):
        return self._plain("// (as divisor)", int.__rfloordiv__, int(self), o)

    def __mod__(self, o):
        return self._plain("%", int.__mod__, int(self), o)

    def __rmod__(self, o):
        return self._plain("% (as divisor)", int.__rmod__, int(self), o)

    def __truediv__(self, o):
        return self._plain("/", int.__truediv__, int(self), o)

    def __rtruediv__(self, o):
        return self._plain("/ (as divisor)", int.__rtruediv__, int(self), o)

    def __pow__(self, o, mod=None):
        return self._plain("**", pow, int(self), o, mod) if mod is not None else \
            self._plain("**", int.__pow__, int(self), o)

    def __rpow__(self, o):
        return self._plain("** (as exponent)", int.__rpow__, int(self), o)

    def __divmod__(self, o):
        return self._plain("divmod", divmod, int(self), o)

    def __float__(self):
        self._unsupported("as a float")
        return float(int(self))

    def __abs__(self):
        return self  # sizes are >= 2


_ARITH_SIGN = {"add": "+", "sub": "-", "mul": "*"}


def unsupported(log):
    """The unsupported arithmetic a synthetic trace logged (see SymInt), as words."""
    return [f"{what} at {where or '?'}" for kind, what, where in
            (g for g in log if g[0] == "unsupported")]


def size_guards(log, symbols):
    """The comparisons of a synthetic trace's log over `symbols` only, pruned."""
    out = []
    for g in log:
        if g[0] == "unsupported":
            continue
        expr, op, other, is_sym, outcome = g
        syms = SizeExpr.parse(expr).symbols() | (SizeExpr.parse(other).symbols() if is_sym else set())
        if syms <= set(symbols):
            out.append(g)
    return prune_guards(out)


def prune_guards(guards):
    """The guards that can fail for some size >= 2 (symbols are never bound to 0 or 1)."""
    out = []
    for g in guards:
        sym, op, other, is_sym, outcome = g
        if not _is_symbol(sym):
            out.append(g)
            continue
        if not is_sym:
            if op in ("__eq__", "__ne__"):
                if (other < 2 or other != int(other)) and outcome == (op == "__ne__"):
                    continue
            elif _CMP[op](2, other) == outcome and _CMP[op](1 << 62, other) == outcome:
                continue
        elif other == sym and outcome == (op in ("__eq__", "__le__", "__ge__")):
            continue
        out.append(g)
    return out


def _is_symbol(text):
    return isinstance(text, str) and text.isidentifier()


def check_guards(guards, env):
    """None if every recorded size comparison has its traced outcome under `env`; else which fails."""
    for sym, op, other, is_sym, outcome in guards:
        a = evaluate(sym, env)
        b = evaluate(other, env) if is_sym else other
        if _CMP[op](a, b) != outcome:
            return f"{sym} {_SIGN[op]} {other} was {outcome} when traced ({sym}={a})"
    return None


def fmt_guard(g):
    sym, op, other, _, outcome = g
    text = f"{sym} {_SIGN[op]} {other}"
    return text if outcome else f"not ({text})"


def symbolic_tensor(t):
    """A synthetic input tensor for a trace with `symbolic=Symbolic(...)`: while it runs, its
    shape (and that of every tensor the trace records) reports SymInts for dynamic sizes."""
    from .._tensor import Size, Tensor
    class_ = _sym_tensor_class(Tensor, Size)
    s = class_.__new__(class_)
    s._array = t._array
    s.requires_grad = t.requires_grad
    s.grad = None
    s.grad_fn = None
    s._vc = None
    return s


class Symbolic:
    """While a synthetic trace runs: the primes its symbols were traced at and the log its
    SymInts write to. Every tensor the trace records then reports SymInts for the sizes
    that are expressions of those primes (`shape_of`)."""
    __slots__ = ("primes", "log", "tensor_class", "forced")

    def __init__(self, primes, log, forced=None):
        self.primes = dict(primes)
        self.log = log
        self.forced = forced   # [(kind, value)]: the break values a split path was traced with (breaks.note)
        from .._tensor import Size, Tensor
        self.tensor_class = _sym_tensor_class(Tensor, Size)

    def shape_of(self, shape):
        out = []
        for n in shape:
            e = _express(n, self.primes) if n >= 2 else None
            out.append(SymInt(n, e, self.log) if e is not None else n)
        return tuple(out)


_SYM_TENSOR = None


def _sym_tensor_class(Tensor, Size):
    global _SYM_TENSOR
    if _SYM_TENSOR is None:
        from .. import dispatch

        def sym_shape(t):
            sym = getattr(dispatch.active_tracer(), "symbolic", None)
            return t._array.shape if sym is None else sym.shape_of(t._array.shape)

        class SymTensor(Tensor):
            """A tensor of a synthetic trace: its shape reports SymInts (only while tracing).
            No slots of its own, so the tracer can give recorded tensors this class."""
            __slots__ = ()

            @property
            def shape(self):
                return Size(sym_shape(self))

            def size(self, dim=None):
                return Size(sym_shape(self)) if dim is None else sym_shape(self)[dim]

            def __len__(self):
                shape = sym_shape(self)
                if not shape:
                    raise TypeError("len() of a 0-d tensor")
                if isinstance(shape[0], SymInt):
                    # Python's len() turns it into a plain int: comparisons on it go unseen
                    shape[0]._unsupported("through len() (a plain int: use x.shape[0] or x.size(0))")
                return shape[0]

            def numel(self):
                n = int(self._array.size)
                sym = getattr(dispatch.active_tracer(), "symbolic", None)
                return n if sym is None or n < 2 else sym.shape_of((n,))[0]

            nelement = numel
        for name in _SCALAR_METHODS:   # a size as an operand: the plain int eager code would pass
            setattr(SymTensor, name, _with_plain_ints(getattr(Tensor, name)))
        _SYM_TENSOR = SymTensor
    return _SYM_TENSOR


# Tensor methods taking a Python number: numpy takes a Python int as a weak scalar (float32 / 7
# stays float32) but an int subclass as int64 (float32 / SymInt(7) would be float64), so the
# synthetic trace would differ from eager; SymTensor passes them the SymInt's plain int (the
# symbolic graph still sees the size: generalize's size scalars).
_SCALAR_METHODS = ("__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__", "__rmul__",
                   "__imul__", "__truediv__", "__rtruediv__", "__itruediv__", "add", "sub", "mul", "div",
                   "add_", "sub_", "mul_", "div_")


def _with_plain_ints(method):
    def call(self, *args, **kwargs):
        return method(self, *[int(a) if type(a) is SymInt else a for a in args], **kwargs)
    call.__name__ = method.__name__
    return call


# ---------------------------------------------------------------- making a compiled function dynamic
# (called by compile.CompiledFunction; `cf` is that object: its keys, entries, log, tracing)

class _Failed:
    def __repr__(self):
        return "<failed>"


FAILED = _Failed()  # make_dynamic's answer when the function stays static


def from_start(cf, entry, leaves, args, kwargs):
    """dynamic=True: make batch/sequence sizes symbolic right after the first trace.

    Candidates: every size >= 2 that no parameter or buffer has (a feature size usually
    does); if tracing on synthetic sizes fails, only the first dimension of each input."""
    ext_sizes = {s for t in entry.externals.values() for s in t._array.shape}
    cands = {(i, d): (n, n) for i, t in enumerate(leaves) for d, n in enumerate(t._array.shape)
             if (n >= 2 and n not in ext_sizes) or (d == 0 and n == 1)}
    firsts = {k: v for k, v in cands.items() if k[1] == 0}
    for dims in (cands, firsts):
        if not dims:
            continue
        if make_dynamic(cf, entry, dims, entry.key, leaves, args, kwargs, verify_call=False,
                              keep_small=True) is not FAILED:
            return
        cf.dyn_failed = None  # let the narrower attempt (and later automatic ones) run
        if dims == firsts:
            break


def make_dynamic(cf, ref, changed, key, leaves, args, kwargs, verify_call=True, keep_small=False, into=None):
    """Build a symbolic graph for the sizes in `changed` ({(leaf, dim): (ref size, new size)}).

    ref is the specialisation the call differs from only in those sizes: an ordinary graph
    (a forward, or a whole training step whose mutations update parameters, optimizer state
    and .grad) or a call that needs autograd (ref.joint: forward and backward programs, both
    made symbolic). Tensors the function updates keep their static shapes; what the trace on
    synthetic inputs and the checks update is put back as it was (`Saved`). Returns the result
    of this call (None with verify_call=False), or FAILED: the function then stays static.

    A key split at graph breaks (ref.split, breaks.py) is made symbolic one path at a time: the
    synthetic trace reads, at each break, the value the reference's last path read (so Python
    takes that path; its continuations stay guarded on those values), and its pieces become
    symbolic (breaks.symbolic). `into`: a symbolic split key the path joins (add_path)."""
    from . import breaks, entries, keys

    def fail(why):
        cf.dyn_failed = why
        msg = (f"dynamic shapes: {cf.__name__} stays static in "
               f"{', '.join(f'arg {i} dim {d}' for i, d in sorted(changed))}: {why}")
        cf.log.append(msg)
        log.info("eagerc.compile: %s", msg)
        return FAILED
    # the symbols: dims already dynamic keep theirs; new dims sharing (old, new) sizes share one
    dims = dict(cf.keys.dyn_dims)
    groups = {}
    n_old = len(set(dims.values()))
    for (i, d), pair in sorted(changed.items()):
        if (i, d) in dims:
            continue
        sym = groups.get(pair)
        if sym is None:
            sym = groups[pair] = f"s{n_old + len(groups)}"
        dims[(i, d)] = sym
    # this specialisation's symbols: the dynamic dims where this call has a size >= 2 (a 1
    # stays a 1 in its key and its graph)
    all_dims = dims
    dims = {(i, d): s for (i, d), s in all_dims.items()
            if leaves[i]._array.shape[d] >= 2 or (keep_small and (i, d) in changed)}
    if not dims:
        return fail("no size of this call can be symbolic")
    symbols = sorted(set(dims.values()), key=lambda s: int(s[1:]))
    forced = ref.split.forced if ref.split is not None else None
    # the backward graph as traced, of a call that needs autograd (a split key's: its last path's)
    ref_backward = ref.joint.traced_backward if ref.joint is not None else \
        ref.split.backward if ref.split is not None else None
    if ref.eager:
        # a graph break runs eagerly anyway: one eager entry serves every size instead of a
        # retrace per size
        cf.keys.set_dims(all_dims)
        nkey = keys.full_mask(cf.keys.of(args, kwargs, masked=False)[0], dims)
        cf.entries[nkey] = entries.Entry(nkey, graph=ref.graph, eager=True, reason=ref.reason)
        cf.log.append(f"dynamic shapes: {cf.__name__} runs eagerly for every size of "
                        f"{cf.keys.fmt_dims(dims)}")
        return cf.fn(*args, **kwargs)
    traced = ref.traced
    ints = graph_ints(traced)
    if ref_backward is not None:
        ints |= graph_ints(ref_backward)
    for i, t in enumerate(leaves):
        ints.update(n for d, n in enumerate(t._array.shape) if (i, d) not in dims)
    for _, v in forced or ():   # a break value the continuations use is no size
        if type(v) in (int, float) and v == v and abs(v) != math.inf and v != 0:
            ints.add(abs(v) if type(v) is int else v)
    seen = {}
    for (i, d), sym in dims.items():
        sizes = [leaves[i]._array.shape[d]] + [x for x in changed.get((i, d), ()) if x is not None]
        seen[sym] = max(seen.get(sym, 0), *sizes)
    ref_env = {}  # the reference's sizes, to check that Python took the same path at both
    for (i, d), s in dims.items():
        n = ref.key[1][i][0][d] if i < len(ref.key[1]) else None
        if n is None or n < 2 or ref_env.get(s, n) != n:
            ref_env = None
            break
        ref_env[s] = n
    gens = _generators(ref)
    saved = [g.get_state() for g in gens]
    updatable = updatable_tensors(cf, ref, leaves)
    errors = []
    built = None
    for above in (True, False):  # sizes above those seen; if that fails (a bound such as a
        primes = choose_primes(seen, ints, above)  # block size, a branch), below them
        if primes is None:
            continue
        size_log = []
        syn = [_resize(t, {d: primes[s] for (j, d), s in dims.items() if j == i})
               for i, t in enumerate(leaves)]
        syn = [symbolic_tensor(t) if any(j == i for j, _ in dims) else t for i, t in enumerate(syn)]
        syn_args, syn_kwargs = _replace_tensors((args, kwargs), iter(syn))
        where = f"at synthetic sizes {cf.keys.fmt_dims(dims, primes)}"
        state = Saved(updatable + [(f"arg{i}", t) for i, t in enumerate(syn)])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graph_p, split_p, result_p, tracer_p, owners = cf._do_trace(
                    syn_args, syn_kwargs, False, symbolic=Symbolic(primes, size_log, forced),
                    joint=ref_backward is not None)
            after_p = state.take()  # what the eager run at the synthetic sizes updated
        except Exception as e:  # e.g. a size that must match a parameter
            errors.append(f"tracing {where} failed: {type(e).__name__}: {e}")
            continue
        finally:
            state.put()
            for g, s in zip(gens, saved):
                g.set_state(s)
        if graph_p is None:
            errors.append(f"graph break {where}: {tracer_p.broken}")
            continue
        if forced is not None and not _same_values([(b.kind, b.traced) for b in tracer_p.breaks], forced):
            errors.append(f"the trace {where} took other graph breaks than at the real sizes")
            continue
        if (ref_backward is None) != (split_p is None):
            errors.append(f"the call {'no longer' if split_p is None else 'now'} needs autograd {where}")
            continue
        lost = state.missing(graph_p, tracer_p, syn)
        if lost:
            # (cannot happen while Python takes the reference's path: it updates what it read)
            warnings.warn(f"eagerc.compile: the trace of {cf.__name__} {where} updated {lost}, which the call "
                          "at the real size did not read; its value now includes that update")
            errors.append(f"the trace {where} updated {lost}, which the reference trace did not read")
            break
        g_sym, sym_attrs, problems = generalize(graph_p, primes)
        if split_p is not None:
            g_bwd, bwd_attrs, more = generalize(split_p.backward, primes)
            problems += more
        if problems:
            errors.append(problems[0])
            break
        odd = unsupported(size_log)
        if odd:
            errors.append(f"Python computes with a size in a way size guards cannot follow: {odd[0]}")
            break
        guards = size_guards(size_log, primes)
        if ref_env:
            diff = check_guards(guards, ref_env) or same_program(traced, g_sym, sym_attrs, ref_env)
            if diff is None and split_p is not None:
                diff = same_program(ref_backward, g_bwd, bwd_attrs, ref_env)
                diff = diff and f"its backward: {diff}"
            if diff:
                errors.append(f"Python takes another path {where} than at {ref_env}: {diff}")
                continue
        built = (primes, syn, state, after_p, result_p, tracer_p, owners, g_sym, sym_attrs, guards,
                 split_p and (split_p, g_bwd, bwd_attrs))
        break
    if built is None:
        return fail("; ".join(errors) or "no distinctive size left to trace with")
    primes, syn, state, after_p, result_p, tracer_p, owners, g_sym, sym_attrs, guards, split = built
    rng_info = {}
    producers = graph_p.producers()
    for name, gen, words, _ in tracer_p.rng_draws():
        node = next(n for n in g_sym.nodes if n.out.name == name)
        numel = math.prod(producers[name].out.shape)
        rng_info[name] = (words // numel if numel else 0, node.out.shape)
    try:   # (a split key: its forward runs in symbolic pieces, breaks.symbolic)
        d = None if forced is not None else entries.Dynamic(g_sym, sym_attrs, symbols, cf.backend, rng_info, guards)
        jentry = None
        if split is not None:
            from .training import JointEntry
            split_p, g_bwd, bwd_attrs = split
            bwd = entries.Dynamic(g_bwd, bwd_attrs, symbols, cf.backend, {})
            jentry = JointEntry(split_p, cf.backend, tracer_p, len(syn), dynamic=(d, bwd))
        if forced is not None:
            entry = breaks.symbolic(cf, g_sym, sym_attrs, symbols, guards, tracer_p, owners, graph_p, jentry)
    except Exception as e:
        return fail(f"the backend cannot compile the symbolic graph: {type(e).__name__}: {e}")
    if forced is None:
        entry = entries.Entry(None, g_sym, None, tracer_p.externals, rng=tracer_p.rng_draws(), traced=g_sym)
        entry.dynamic = d
        if split is not None:
            entry.joint = jentry
        cf._guard_entry(entry, tracer_p, owners)
    run = (lambda e, ts, sizes, path=None: cf._run(e, ts, sizes)) if forced is None else breaks.run
    # 1. the program at the synthetic sizes reproduces the synthetic eager run: its outputs,
    #    the gradients its backward gives, and every tensor it updates
    try:
        got = run(entry, syn, dict(primes), forced)
        bad = _differs(result_p, got) or state.differs(after_p)
        if bad is None and split is not None:
            bad = _grads_differ(result_p, got, _grad_targets(syn, entry))
    except Exception as e:
        bad = f"{type(e).__name__}: {e}"
    finally:
        state.put()
        for g, s in zip(gens, saved):
            g.set_state(s)
    if bad:
        return fail(f"the symbolic program disagrees with eager at sizes {primes}: {bad}")
    # 2. this call: the program against an eager run of the function on the real inputs; the
    #    call's updates are the eager run's
    result = None
    if verify_call:
        env = {}
        for (i, d), sym in dims.items():
            n = leaves[i]._array.shape[d]
            if env.setdefault(sym, n) != n or n < 2:
                env = None
                break
        if env is None or check_guards(guards, env):
            return fail("this call's sizes cannot bind the symbols")
        real = Saved(updatable)
        before = [g.get_state() for g in gens]
        expected = cf.fn(*args, **kwargs)
        after = [g.get_state() for g in gens]
        after_e = real.take()
        real.put()
        for g, s in zip(gens, before):
            g.set_state(s)
        got = None
        try:
            got = run(entry, leaves, env)
            bad = None if got is breaks.MISS else _differs(expected, got) or real.differs(after_e)
            if bad is None and split is not None and got is not breaks.MISS:
                bad = _grads_differ(expected, got, _grad_targets(leaves, entry))
        except Exception as e:
            bad = f"{type(e).__name__}: {e}"
        call_missed = got is breaks.MISS  # another path: the state stays as before the call, traced below
        if not call_missed:
            real.put(after_e)
            for g, s in zip(gens, after):
                g.set_state(s)
        if bad:
            fail(f"the symbolic graph disagrees with eager on this call: {bad}")
            return expected
        result = expected
    if into is not None:   # a path of a symbolic split key (the caller's trace made the result)
        breaks.symbolic(cf, g_sym, sym_attrs, symbols, guards, tracer_p, owners, graph_p, jentry, into)
        return result
    # install: the dims become symbols in every key; drop the specialisations the new mask
    # makes unreachable (older symbolic entries) or that the symbolic graph covers
    old_dims = cf.keys.dyn_dims
    cf.keys.set_dims(all_dims)
    nkey = keys.full_mask(cf.keys.of(args, kwargs, masked=False)[0], dims)
    entry.key = nkey
    for k, e in list(cf.entries.items()):
        if e.dynamic is not None and old_dims != all_dims:
            del cf.entries[k]
        elif e.dynamic is None and not e.eager and keys.masks_to(k, cf.keys.dyn) == nkey:
            env_ = keys.bind(nkey, k, dims)
            if env_ is not None and not check_guards(guards, env_):
                del cf.entries[k]
    head = cf.entries.get(nkey)
    if head is not None and head.dynamic is not None:  # another region of the same sizes
        while head.dynamic.next is not None:
            head = head.dynamic.next
        head.dynamic.next = entry
    else:
        cf.entries[nkey] = entry
    cf.log.append(f"dynamic shapes: {cf.__name__} now treats {cf.keys.fmt_dims(dims)} as symbolic"
                    + (f" where {', '.join(fmt_guard(g) for g in guards)}" if guards else ""))
    log.info("eagerc.compile: %s", cf.log[-1])
    if verify_call and call_missed:
        return breaks.missed(cf, entry, nkey, leaves, args, kwargs)
    return result


def add_path(cf, entry, key, leaves, args, kwargs):
    """A call of a symbolic split key (breaks.py) read a value no continuation holds for: trace
    it at its real sizes (its result, and the values its breaks read), then at synthetic sizes
    reading those values, and join that symbolic path to the key's tree -- two traces per
    path, whatever sizes come later. A path that cannot be made symbolic runs the key eagerly."""
    from . import breaks, entries
    fwd, joint, result, tracer, owners = cf._do_trace(args, kwargs, cf.fullgraph, joint=cf._wants_autograd(leaves))
    cf._learn_modules(tracer)
    if fwd is None:
        return cf._after_break(key, tracer, result)
    why = "it draws random numbers" if tracer.rng else None
    if why is None:
        ref = breaks.SplitEntry(cf.keys.of(args, kwargs, masked=False)[0], externals=tracer.externals, traced=fwd)
        ref.split = breaks.Split(None, {})
        ref.split.last(tracer, joint)
        if make_dynamic(cf, ref, {}, key, leaves, args, kwargs, verify_call=False, into=entry) is not FAILED:
            return result
        why = cf.dyn_failed
        cf.dyn_failed = None
    msg = f"eagerc.compile: {cf.__name__} runs eagerly for {cf.keys.fmt_dims(cf.keys.dyn_dims)} from now on: " \
          f"a new path through its graph breaks cannot be symbolic ({why})"
    cf.log.append(msg)
    cf.entries[key] = entries.Entry(key, eager=True, reason=msg)
    return result


def _same_values(a, b):
    """Do two lists of (kind, value) read at graph breaks agree (nan agreeing with nan)?"""
    return len(a) == len(b) and all(k == q and type(v) is type(w) and (v == w or (v != v and w != w))
                                    for (k, v), (q, w) in zip(a, b))


# ---------------------------------------------------------------- what a trace on synthetic inputs updates

def updatable_tensors(cf, ref, leaves):
    """[(name, tensor)] a call of the function can update in place: its tensor arguments, every
    tensor the reference trace read by reference (parameters, buffers, .grad, optimizer state,
    tensors from globals and closures) and every parameter and buffer of its modules."""
    out = [(f"arg{i}", t) for i, t in enumerate(leaves)] + list(ref.externals.items())
    names, owners = cf._external_index()
    out += [(names[i], t) for i, (_, _, t) in owners.items()]
    return out


class Saved:
    """Tensors as they were, to be put back: a trace on synthetic inputs runs the function
    eagerly, so a training step updates the real parameters, optimizer state and .grad with
    a step on made-up data; the checks that follow run the step again. `take()` copies what
    a tensor holds (its array's contents, the array object, version counter, autograd
    history, .grad); `put(taken)` makes the tensors hold it again (default: as at creation)."""

    def __init__(self, named):
        self.names, self.tensors, ids = [], [], set()
        for name, t in named:
            if id(t) not in ids:
                ids.add(id(t))
                self.names.append(name)
                self.tensors.append(t)
        self.first = self.take()

    def take(self):
        out = []
        for t in self.tensors:
            a, vc, g = t._array, t._vc, t._grad
            out.append((a, a.copy(), vc, None if vc is None else list(vc), t.grad_fn, t._requires_grad, g,
                        None if g is None else g._array.copy()))
        return out

    def put(self, taken=None):
        for t, (a, data, vc, vcv, fn, rg, g, gdata) in zip(self.tensors, taken or self.first):
            t._array = a
            if getattr(a.flags, "writeable", True):
                a[...] = data
            t._vc = vc
            if vc is not None:
                vc[:] = vcv
            t.grad_fn, t._requires_grad, t._grad = fn, rg, g
            if g is not None and getattr(g._array.flags, "writeable", True):
                g._array[...] = gdata

    def differs(self, taken):
        """None if the tensors hold what `taken` recorded (values and .grad, within _differs'
        tolerance); else which tensor differs and how."""
        for name, t, (_, data, *_rest, g, gdata) in zip(self.names, self.tensors, taken):
            bad = _differs(dispatch.wrap(data), t.detach())
            if bad is None and (g is None) != (t._grad is None):
                bad = f".grad is {'None' if t._grad is None else 'set'} (eager: {'None' if g is None else 'set'})"
            if bad is None and g is not None:
                bad = _differs(dispatch.wrap(gdata), t._grad.detach())
            if bad:
                return f"{name} after the call: {bad.replace('output 0: ', '')}"
        return None

    def missing(self, graph, tracer, syn):
        """The tensors the trace updated (graph mutations) that were not saved, in words."""
        ids = {id(t) for t in self.tensors}
        lost = []
        for target, _ in graph.mutations:
            name = target[:-5] if target.endswith(".grad") else target
            t = syn[int(name[3:])] if name.startswith("arg") and name[3:].isdigit() else tracer.externals.get(name)
            if t is None or id(t) not in ids:
                lost.append(name)
        return ", ".join(lost)


def _grad_targets(leaves, entry):
    return [t for t in leaves if t.requires_grad] + [t for t in entry.externals.values() if t.requires_grad]


def _grads_differ(expected, got, targets):
    """None if backward through both results (a gradient of ones for each differentiable
    output) gives the same gradients for `targets`; else which differs."""
    from ..autograd import grad
    is_t = lambda x: isinstance(x, Tensor)  # noqa: E731
    outs_e = [t for t in flatten(expected, is_t)[0] if t.requires_grad]
    outs_g = [t for t in flatten(got, is_t)[0] if t.requires_grad]
    if len(outs_e) != len(outs_g):
        return f"{len(outs_g)} outputs require grad, eager has {len(outs_e)}"
    if not outs_e or not targets:
        return None
    from ..runtime.device import xp_of
    ones = [dispatch.wrap(xp_of(t._array).ones_like(t._array)) for t in outs_e]
    ge = grad(outs_e, targets, ones, retain_graph=True, allow_unused=True)
    gg = grad(outs_g, targets, ones, allow_unused=True)
    for k, (a, b) in enumerate(zip(ge, gg)):
        if (a is None) != (b is None):
            return f"gradient {k} is {'None' if b is None else 'set'} (eager: {'None' if a is None else 'set'})"
        bad = a is not None and _differs(a, b)
        if bad:
            return f"gradient {k}: {bad.replace('output 0: ', '')}"
    return None


def _resize(t, sizes):
    """A copy of tensor t with dims resized to `sizes` ({dim: n}), repeating its data."""
    if not sizes:
        return t
    a = t._array
    for d, n in sizes.items():
        m = a.shape[d]
        if m == 0:
            shape = list(a.shape)
            shape[d] = n
            a = np.zeros(shape, a.dtype) if type(a) is _ndarray else type(a)(shape, a.dtype)
        else:
            idx = np.arange(n) % m
            a = a.take(idx if type(a) is _ndarray else _to_xp(a, idx), axis=d)
    out = dispatch.wrap(a, t.requires_grad)
    return out


def _to_xp(a, idx):
    from ..runtime.device import xp_of
    return xp_of(a).asarray(idx)


def _replace_tensors(obj, it):
    if isinstance(obj, Tensor):
        return next(it)
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_replace_tensors(v, it) for v in obj)
    if isinstance(obj, tuple):
        return type(obj)(*[_replace_tensors(v, it) for v in obj])
    if isinstance(obj, list):
        return [_replace_tensors(v, it) for v in obj]
    if isinstance(obj, dict):
        return {k: _replace_tensors(v, it) for k, v in obj.items()}
    return obj


def _generators(entry):
    from ..runtime.random import default_generator
    gens = [default_generator]
    for _, g, _, _ in entry.rng or ():
        if not any(g is h for h in gens):
            gens.append(g)
    return gens


def _differs(expected, got):
    """None if two results agree (structure, shapes, dtypes, values); else what differs."""
    is_t = lambda x: isinstance(x, Tensor)  # noqa: E731
    try:
        la, ta = flatten(expected, is_t)
        lb, tb = flatten(got, is_t)
    except TypeError as e:
        return str(e)
    if ta != tb or len(la) != len(lb):
        return "different output structure"
    for i, (a, b) in enumerate(zip(la, lb)):
        x, y = _host(a._array), _host(b._array)
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output {i}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
        if x.dtype.kind in "fc":
            if not np.allclose(x, y, rtol=1e-4, atol=1e-6, equal_nan=True):
                return f"output {i}: values differ (max abs diff {np.nanmax(np.abs(x - y)):.3g})"
        elif not np.array_equal(x, y):
            return f"output {i}: values differ"
    return None


def _host(a):
    return a if type(a) is _ndarray else (a.get() if hasattr(a, "get") else np.asarray(a))
