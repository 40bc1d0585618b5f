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
   expressions are evaluated by `Expr` -- a tiny evaluator of sums of products of
   integers and symbols, never `eval`.
"""
import math

from ..runtime.ir import Graph, Node, Value

__all__ = ["Expr", "evaluate", "choose_primes", "graph_ints", "generalize", "specialize",
           "same_program", "SymbolicAttrs", "scan_symbolic"]

_NOT_SIZES = frozenset(("seed", "offset", "dim", "dims", "dim1", "dim2", "axis", "dtype", "device"))
_MAX_OFF = 2       # |c| in p + c: slice bounds such as T-1


# ---------------------------------------------------------------- expressions

class Expr:
    """A parsed size expression: a sum of terms coef * sym * sym ... (plus a constant).

    Grammar: term (('+' | '-') term)*, term = factor ('*' factor)*, factor = integer or
    symbol (a letter followed by letters/digits). Evaluated with a dict of bindings.
    """
    __slots__ = ("text", "terms")

    def __init__(self, text):
        self.text = text
        self.terms = _parse(text)

    def __call__(self, env):
        total = 0
        for coef, syms in self.terms:
            for s in syms:
                coef *= env[s]
            total += coef
        return total

    def symbols(self):
        return {s for _, syms in self.terms for s in syms}

    def __repr__(self):
        return f"Expr({self.text!r})"


def _parse(text):
    if not isinstance(text, str) or not text or len(text) > 200:
        raise ValueError(f"bad size expression {text!r}")
    terms = []
    i, n = 0, len(text)
    sign = 1
    if text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        i = 1
    while True:
        coef, syms = sign, []
        while True:
            j = i
            if j < n and text[j].isdigit():
                while j < n and text[j].isdigit():
                    j += 1
                coef *= int(text[i:j])
            elif j < n and (text[j].isalpha() or text[j] == "_"):
                while j < n and (text[j].isalnum() or text[j] == "_"):
                    j += 1
                syms.append(text[i:j])
            else:
                raise ValueError(f"bad size expression {text!r} at position {i}")
            i = j
            if i < n and text[i] == "*":
                i += 1
                continue
            break
        terms.append((coef, tuple(syms)))
        if i == n:
            return terms
        if text[i] not in "+-":
            raise ValueError(f"bad size expression {text!r} at position {i}")
        sign = -1 if text[i] == "-" else 1
        i += 1


_CACHE = {}


def evaluate(expr, env):
    """The value of a size: an int is itself, a string is an expression over `env`."""
    if isinstance(expr, int):
        return expr
    e = _CACHE.get(expr)
    if e is None:
        e = _CACHE[expr] = Expr(expr)
    return e(env)


def _fmt(terms):
    out = []
    for coef, syms in terms:
        body = "*".join(syms)
        if not syms:
            piece = str(abs(coef))
        elif abs(coef) == 1:
            piece = body
        else:
            piece = f"{body}*{abs(coef)}"
        out.append(("-" if coef < 0 else ("+" if out else "")) + piece)
    return "".join(out)


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
        return _fmt([(rest, tuple(sorted(syms)))])
    for s, p in primes.items():
        c = a - p
        if 1 <= abs(c) <= _MAX_OFF:
            return _fmt([(1, (s,)), (c, ())])
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
    expression strings in the graph and `Expr`s in the template."""
    if isinstance(x, bool) or x is None:
        return x, x, False
    if isinstance(x, int):
        e = _express(x, primes)
        return (x, x, False) if e is None else (e, Expr(e), True)
    if isinstance(x, (list, tuple)):
        items = [_gen_attr(v, primes) for v in x]
        if any(s for _, _, s in items):
            make = tuple if isinstance(x, tuple) else list
            return make(v for v, _, _ in items), make(t for _, t, _ in items), True
        return x, x, False
    return x, x, False


def _sym_shape(shape, primes):
    return tuple((_express(s, primes) or s) if isinstance(s, int) else s for s in shape)


def generalize(graph, primes, dims):
    """The graph traced on synthetic sizes, with those sizes as symbols.

    primes: {symbol: prime used for it}; dims: {symbol: [(input name, dim), ...]}.
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
    nodes = []
    for n in graph.nodes:
        ins = []
        for x in n.inputs:
            if isinstance(x, Value):
                ins.append(val(x))
            else:
                if _depends(x, primes):
                    problems.append(f"{n.op} at {n.loc or '?'} uses the Python number {x!r}, computed "
                                    f"from a size (traced as {_sizes(primes)}); a tensor op such as "
                                    "mean() keeps it symbolic")
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
    g = Graph([(k, val(v)) for k, v in graph.inputs], nodes, [val(v) for v in graph.outputs],
              graph.out_tree, [(t, val(v)) for t, v in graph.mutations], dict(graph.meta))
    g.meta["dynamic"] = {s: [list(d) for d in ds] for s, ds in dims.items()}
    return g, SymbolicAttrs(sym_attrs), problems


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
    `Expr`s where the graph shows expression strings. `overrides(env)` gives
    {node output name: {attr: concrete value}} for one binding of the symbols -- the
    per-call `overrides` a backend program accepts."""

    def __init__(self, table):
        self.table = table
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
                e = Expr(x)
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
    if isinstance(t, Expr):
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
    nodes = []
    for n in graph.nodes:
        attrs = n.attrs
        o = over.get(n.out.name)
        if o:
            attrs = {**attrs, **o}
        nodes.append(Node(n.op, [val(x) if isinstance(x, Value) else x for x in n.inputs], attrs,
                          val(n.out), n.loc, n.module))
    meta = {k: v for k, v in graph.meta.items() if k != "dynamic"}
    return Graph([(k, val(v)) for k, v in graph.inputs], nodes, [val(v) for v in graph.outputs],
                 graph.out_tree, [(t, val(v)) for t, v in graph.mutations], meta)


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
    if [(t, v.name) for t, v in g.mutations] != [(t, v.name) for t, v in static.mutations]:
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
    """A dynamic size of a synthetic input, as Python code sees it (x.shape[0], x.size(1), len(x)).

    Arithmetic gives plain ints (their values are generalised from the graph), but every
    comparison -- `if T > 32`, `assert T <= block_size`, `min(T, n)` -- is written to `log`
    as a guard (symbol, op, other, outcome) that the symbolic graph then requires."""

    def __new__(cls, value, sym, log):
        self = int.__new__(cls, value)
        self.sym = sym
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


def prune_guards(guards):
    """The guards that can fail for some size >= 2 (symbols are never bound to 0 or 1)."""
    out = []
    for g in guards:
        sym, op, other, is_sym, outcome = g
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


def check_guards(guards, env):
    """None if every recorded size comparison has its traced outcome under `env`; else which fails."""
    for sym, op, other, is_sym, outcome in guards:
        b = env[other] if is_sym else other
        if _CMP[op](env[sym], b) != outcome:
            return f"{sym} {_SIGN[op]} {other} was {outcome} when traced ({sym}={env[sym]})"
    return None


def fmt_guard(g):
    sym, op, other, _, outcome = g
    text = f"{sym} {_SIGN[op]} {other}"
    return text if outcome else f"not ({text})"


def symbolic_tensor(t, dims, log):
    """A synthetic input tensor whose dynamic sizes ({dim: symbol}) are SymInts for Python code."""
    from .._tensor import Size, Tensor

    class_ = _sym_tensor_class(Tensor, Size)
    s = class_.__new__(class_)
    s.data = t.data
    s.requires_grad = t.requires_grad
    s.grad = None
    s.grad_fn = None
    s._vc = None
    s._sym_shape = tuple(SymInt(n, dims[d], log) if d in dims else n for d, n in enumerate(t.data.shape))
    return s


_SYM_TENSOR = None


def _sym_tensor_class(Tensor, Size):
    global _SYM_TENSOR
    if _SYM_TENSOR is None:
        class SymTensor(Tensor):
            """A synthetic input whose shape reports SymInts (used only while tracing)."""
            __slots__ = ("_sym_shape",)

            @property
            def shape(self):
                return Size(self._sym_shape)

            def size(self, dim=None):
                return Size(self._sym_shape) if dim is None else self._sym_shape[dim]

            def __len__(self):
                if not self._sym_shape:
                    raise TypeError("len() of a 0-d tensor")
                return self._sym_shape[0]
        _SYM_TENSOR = SymTensor
    return _SYM_TENSOR
