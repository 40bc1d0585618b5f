"""Graph breaks that split the graph: compile the code before and after a `bool()` or `.item()`.

A traced tensor turned into a Python value used to end the trace, and the whole call ran
eagerly from then on. For the two commonest cases -- `if tensor:` / `while tensor:` (bool)
and `.item()` -- the tracer (asked with `split=True`) notes a `Break` instead and goes on
recording. The one traced graph is cut at each break into pieces; a compiled call runs
piece 0, reads the break's value from the arrays it produced, and picks the continuation
traced for that value:

- bool(): the continuation is the one traced with the same truth value;
- item() compared right where it is taken (`if x.norm().item() > 1.0:`, `while
  err.item() >= tol:`) gets a stand-in (`_Compared`) that notes each comparison and its
  outcome: a continuation holds for every value with the same outcomes;
- any other use of an item() value (arithmetic, an argument of an op, a size, printing,
  `float()`, `int()`) is specialised: the continuation holds for that exact value only.

So the branch taken is always guarded -- a value that would take another path never runs
a continuation traced for this one. A value no continuation holds for is a miss: the call
is traced again (an eager run of the whole function) and its path joins the tree, sharing
the pieces before it; past MAX_PATHS paths, or MAX_VALUES values of one break used as a
number, the key runs eagerly, with a warning. Nothing a
call does is committed before its last piece: mutation outputs are written back at the end,
so a miss runs the function again from a clean start. Graphs with random ops are not split
(a miss would advance their generators twice): such a break still runs the call eagerly.

Sizes: a split key becomes symbolic like an unsplit graph (dynamic.make_dynamic), one path
at a time -- the trace on synthetic sizes reads the real call's break values (note), each
piece becomes an entries.Dynamic, and a new path at any size costs one real and one
synthetic trace (dynamic.add_path); the continuations keep their value guards.

Values crossing a break are outputs of one piece and inputs of the next, by their traced
names. A call that needs autograd keeps one backward program per path (training.py's
JointEntry, the forward run here in pieces), so training through a break runs compiled too.

What still ends the trace (the call runs eagerly, as before): `.tolist()`, `.numpy()`,
data-dependent sizes, writes the tracer cannot follow, Python side effects, a value read
in the backward, and every break under `fullgraph=True` (an error) or on synthetic sizes.
"""
import bisect
import dis
import operator
import sys
import warnings

from ..runtime.ir import Graph, format_node
from ..runtime.ownership import is_eagerc_file
from ..runtime.pytree import unflatten
from . import dynamic, entries, guards
from .entries import Dynamic, Entry
from .tracer import GraphBreak, user_frame_info, user_location

__all__ = ["Break", "SplitEntry", "SplitSizes", "note", "cut", "install", "symbolic", "run", "missed", "MISS",
           "MAX_PATHS", "MAX_VALUES"]

MAX_PATHS = 8      # continuations (paths through the breaks) per key before the key runs eagerly
MAX_VALUES = 4     # ... or exact values seen at one break (a loss.item() changes every call)
MISS = object()    # run(): no continuation holds for this call's value


# ---------------------------------------------------------------- while tracing

class Break:
    """One bool() or item() the trace went on past: where the graph is cut (`pos`: nodes
    before it), the value read there (`value`: its name in the graph), and what the
    continuation traced after it assumes of that value."""
    __slots__ = ("pos", "value", "kind", "what", "location", "traced", "exact", "compares", "returned")

    def __init__(self, pos, value, kind, what, location, traced):
        self.pos, self.value, self.kind, self.what, self.location = pos, value, kind, what, location
        self.traced = traced          # the Python value the trace saw
        self.exact = True             # the continuation holds for `traced` only ...
        self.compares = []            # ... else for values with these outcomes: [(operator, other, result)]
        self.returned = False         # ... or for any value: it is the function's return value, unread

    def holds(self, c):
        """Does the continuation traced after this break hold for value `c`?"""
        if self.returned:
            return True
        if self.exact:
            t = self.traced
            return type(c) is type(t) and (c == t or (c != c and t != t))  # (nan is nan here)
        for op, other, result in self.compares:
            if op(c, other) is not result:
                return False
        return True

    def same(self, other):
        """Do two traces assume the same of this value (then they share the continuation)?"""
        if self.returned or other.returned:
            return self.returned and other.returned
        if self.exact or other.exact:
            return self.exact and other.exact and other.holds(self.traced) and self.holds(other.traced)
        return self.compares == other.compares

    def describe(self):
        if self.returned:
            return "any value (returned)"
        if self.exact:
            return f"value {self.traced!r}"
        return " and ".join(f"value {_SYMBOL[op]} {other!r} is {result}" for op, other, result in self.compares)


_SYMBOL = {operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=",
           operator.eq: "==", operator.ne: "!="}


class _Compared:
    """What item() hands to user code that compares it at once: each comparison with a plain
    number is noted (the continuation's guard) and answered with a plain bool; any other use
    makes the break exact and gets the real value."""
    __slots__ = ("_brk", "_value")

    def __init__(self, brk, value):
        self._brk, self._value = brk, value

    def _compare(self, op, other):
        if type(other) in (int, float, bool):
            result = op(self._value, other)
            if type(result) is bool:
                self._brk.compares.append((op, other, result))
                return result
        self._brk.exact = True
        return op(self._value, other)

    def __lt__(self, other):
        return self._compare(operator.lt, other)

    def __le__(self, other):
        return self._compare(operator.le, other)

    def __gt__(self, other):
        return self._compare(operator.gt, other)

    def __ge__(self, other):
        return self._compare(operator.ge, other)

    def __eq__(self, other):
        return self._compare(operator.eq, other)

    def __ne__(self, other):
        return self._compare(operator.ne, other)

    def _escape(self):
        self._brk.exact = True
        return self._value

    def __getattr__(self, name):
        return getattr(self._escape(), name)


def _escaping(name):
    def method(self, *args):
        return getattr(self._escape(), name)(*args)
    method.__name__ = name
    return method


for _name in ("__bool__", "__float__", "__int__", "__index__", "__hash__", "__repr__", "__str__", "__format__",
              "__round__", "__trunc__", "__floor__", "__ceil__", "__abs__", "__neg__", "__pos__",
              "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__divmod__"):
    setattr(_Compared, _name, _escaping(_name))


_LOADS = frozenset({"LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME",
                    "LOAD_ATTR", "LOAD_SMALL_INT", "LOAD_FAST_BORROW"})
_INSTRUCTIONS = {}   # code -> ([offset], [instruction])


def _item_caller():
    """The user frame that called Tensor.item() (None: eagerc's own code did)."""
    from .._tensor import Tensor
    item = Tensor.item.__code__
    f = sys._getframe(3)
    while f is not None and f.f_code is not item:
        f = f.f_back
    f = f.f_back if f is not None else None
    return None if f is None or is_eagerc_file(f.f_code.co_filename) else f


def _after_call(f):
    """The next few instructions of frame f after the call it is making (None if it is not in a call)."""
    code = f.f_code
    found = _INSTRUCTIONS.get(code)
    if found is None:
        ins = list(dis.get_instructions(code))
        found = _INSTRUCTIONS[code] = ([i.offset for i in ins], ins)
    offsets, ins = found
    i = bisect.bisect_right(offsets, f.f_lasti) - 1
    if i < 0 or not ins[i].opname.startswith("CALL"):
        return None
    return ins[i + 1:i + 5]


def _returned_at_once(tracer):
    """Is the item() the traced function's return value, unread (`return loss.item()`, also
    through user functions that return what they call)? Each frame from the caller up to the
    traced function returns the call's result right away."""
    f = _item_caller()
    while f is not None:
        after = _after_call(f)
        if not after or after[0].opname != "RETURN_VALUE":
            return False
        if f.f_back is tracer.base_frame:
            return True
        f = f.f_back
        if is_eagerc_file(f.f_code.co_filename):
            return False
    return False


def _compared_at_once():
    """Is the item() being taken by user code that compares the result right away
    (`t.item() > c`, `c <= t.item()`, `t.item() < cfg.limit`)? Read from the caller's bytecode:
    the call is followed by a comparison, with at most a few plain loads between."""
    f = _item_caller()
    after = _after_call(f) if f is not None else None
    if after is None:
        return False
    for x in after:
        if x.opname == "COMPARE_OP":
            return True
        if x.opname not in _LOADS:
            return False
    return False


def note(tracer, t, what, value):
    """Tracer.concretize for a splittable break: note it, hand on the value (or a _Compared)."""
    name = tracer.value_of(t).name   # (may record a node: a view re-derived after a write)
    kind = "bool" if what.startswith("bool") else "item"
    forced = tracer.symbolic.forced if tracer.symbolic is not None else None
    if forced is not None and len(tracer.breaks) < len(forced) and forced[len(tracer.breaks)][0] == kind:
        # a symbolic path (dynamic.py): Python sees the value the real call read here, so the trace
        # on synthetic sizes takes that call's path and its continuation is guarded on that value
        value = forced[len(tracer.breaks)][1]
    brk = Break(len(tracer.nodes), name, kind, what, user_location(), value)
    tracer.breaks.append(brk)
    if kind == "item" and type(value) in (int, float) and _returned_at_once(tracer):
        brk.exact, brk.returned = False, True   # (logging a loss: `return loss.item()`)
        return value
    if kind == "item" and type(value) in (int, float) and _compared_at_once():
        brk.exact = False
        return _Compared(brk, value)
    return value


# ---------------------------------------------------------------- the pieces of a key

class Leaf:
    """The end of one path: how its outputs are made from the values of the call."""
    __slots__ = ("outs", "out_tree", "aliases", "mutations", "grads_none", "joint", "inputs", "returned")

    def __init__(self, graph, joint, brks):
        self.outs = [v.name for v in graph.outputs]
        self.out_tree = graph.out_tree
        self.aliases = tuple(graph.output_aliases.items())
        self.mutations = [(target, v.name) for target, v in graph.mutations]
        self.grads_none = graph.grads_none
        self.joint = joint            # a training.JointEntry (its forward runs here, in pieces)
        self.inputs = [v.name for _, v in graph.inputs]
        self.returned = bool(brks) and brks[-1].returned   # the call returns its last break's value


class Step:
    """One piece of the graph, the break that ends it (None: a path's end, `leaf`) and the
    continuations after it: [(Break as traced on that path, Step)]. `run` holds the piece's
    program, or for a symbolic key an entries.Dynamic giving the program for the call's sizes."""
    __slots__ = ("keys", "nodes", "brk", "children", "leaf", "run", "graph")

    def __init__(self, nodes, brk):
        self.nodes, self.brk = nodes, brk
        self.keys = [format_node(n) for n in nodes]
        self.children = []
        self.leaf = None
        self.run = (None, (), ())   # (program or None, names it reads, names it writes)
        self.graph = None           # the optimised piece


def cut(graph, breaks, traced=None):
    """The pieces [(nodes, Break or None)] of `graph` at `breaks` (Break.pos counts the nodes of
    `traced`, the graph as traced; default `graph` itself). A graph generalised from it
    (dynamic.generalize) holds size nodes of its own: each goes with the node after it, its user."""
    traced = traced or graph
    piece, k = {}, 0
    for i, n in enumerate(traced.nodes):
        while k < len(breaks) and breaks[k].pos <= i:
            k += 1
        piece[n.out.name] = k
    groups, k = [[] for _ in range(len(breaks) + 1)], len(breaks)
    for n in reversed(graph.nodes):
        k = piece.get(n.out.name, k)
        groups[k].append(n)
    return [(g[::-1], b) for g, b in zip(groups, list(breaks) + [None])]


def _chain(pieces, leaf):
    """Steps for pieces [(nodes, Break or None)] in a row; returns the first."""
    steps = [Step(nodes, brk) for nodes, brk in pieces]
    for prev, s in zip(steps, steps[1:]):
        prev.children.append((prev.brk, s))
    steps[-1].leaf = leaf
    return steps[0]


def _merge(root, pieces, leaf):
    """Add a path to the tree at `root`, sharing the steps it has in common; False when the
    path does not start like the tree (then the caller starts a new tree)."""
    step = root
    for k, (nodes, brk) in enumerate(pieces):
        if step.keys != [format_node(n) for n in nodes]:
            return False
        if brk is None:
            if step.brk is not None:
                return False
            step.leaf = leaf
            return True
        if step.brk is None or step.brk.value != brk.value or step.brk.kind != brk.kind:
            return False
        child = next((c for b, c in step.children if b.same(brk)), None)
        if child is None:
            step.children.append((brk, _chain(pieces[k + 1:], leaf)))
            return True
        step = child
    return True


def _paths(step):
    return (1 if step.leaf is not None else 0) + sum(_paths(c) for _, c in step.children)


def _compile(step, kinds, backend, sym=None):
    """(Re)compile every step whose outputs changed: a piece outputs the values it defines that
    a later piece, break, output or mutation of any path through it reads. Returns the names
    read after `step`'s own nodes. `sym`: (symbols, dynamic.SymbolicAttrs) of a symbolic path,
    whose pieces become entries.Dynamic (one program per size binding, or a generic one)."""
    from .backends import pipeline
    from .passes import optimize
    later = set()
    if step.brk is not None:
        later.add(step.brk.value)
    for _, child in step.children:
        later |= _compile(child, kinds, backend, sym)
    if step.leaf is not None:
        later.update(step.leaf.outs)
        later.update(name for _, name in step.leaf.mutations)
    defined = {n.out.name for n in step.nodes}
    outs = [n.out for n in step.nodes if n.out.name in later]
    if [v.name for v in outs] != list(step.run[2]) or (outs and step.run[0] is None):
        ins, seen = [], set()
        for n in step.nodes:
            for v in n.input_values():
                if v.name not in defined and v.name not in seen:
                    seen.add(v.name)
                    ins.append((kinds.get(v.name, "arg"), v))
        if outs:
            g = Graph(ins, step.nodes, outs, {"tuple": [{"t": i} for i in range(len(outs))]})
            if sym is None:
                step.graph = optimize(g, pipeline(backend))
                program = backend.compile(step.graph)
            else:
                symbols, attrs = sym
                mine = defined.__contains__
                program = Dynamic(g, dynamic.SymbolicAttrs({k: v for k, v in attrs.table.items() if mine(k)},
                                                           {k: v for k, v in attrs.scalars.items() if mine(k)}),
                                          symbols, backend, {})
                step.graph = g
            step.run = (program, tuple(v.name for _, v in ins), tuple(v.name for v in outs))
        else:
            step.graph, step.run = None, (None, (), ())
    reads = later - defined
    for n in step.nodes:
        reads.update(v.name for v in n.input_values() if v.name not in defined)
    return reads


class Split:
    """The tree of pieces of one key, and what its paths read from outside."""

    def __init__(self, root, sources):
        self.root = root
        self.sources = sources   # input name -> what it reads (a tensor, an array, an optimizer option)
        self.missed = None       # (Step, value) of the last call no continuation held for
        self.forced = None       # [(kind, value)] the last traced path read: a symbolic trace takes it
        self.backward = None     # ... and its backward graph as traced, when the call needs autograd

    def last(self, tracer, joint):
        """Note what the path just traced (`tracer`, its training.Joint or None) read, for
        dynamic.make_dynamic."""
        self.forced = [(b.kind, b.traced) for b in tracer.breaks]
        self.backward = joint.backward if joint is not None else None

    def steps(self):
        todo = [self.root]
        while todo:
            s = todo.pop(0)
            yield s
            todo += [c for _, c in s.children]

    def graphs(self):
        return [s.graph for s in self.steps() if s.graph is not None]

    def code(self):
        """The generated source of every piece (its graph where a backend has no source), then
        each path's backward program."""
        out = [getattr(s.run[0], "source", None) or str(s.graph) for s in self.steps() if s.run[0] is not None]
        for s in self.steps():
            j = s.leaf.joint if s.leaf is not None else None
            if j is not None:
                out.append(getattr(j.bwd_program, "source", None) or str(j.backward))
        return out


class SplitEntry(Entry):
    """A key whose calls run in pieces (`split`, a Split); symbolic when `dynamic` is a SplitSizes."""
    __slots__ = ()


class SplitSizes:
    """`Entry.dynamic` of a symbolic split key (dynamic.make_dynamic): the size comparisons its
    paths made (checked per call before any piece runs, like a symbolic graph's; a path joins
    the tree only with the same ones), its symbols, and the entry for sizes where they fail."""
    __slots__ = ("guards", "symbols", "next")

    def __init__(self, guards, symbols):
        self.guards, self.symbols, self.next = list(guards), symbols, None


def _sources(tracer):
    out = dict(tracer.externals)
    out.update((name, ("array", a)) for name, (a, _) in tracer.array_inputs.items())
    out.update((name, ("option",) + info) for name, info in tracer.hyper_inputs.items())
    return out


def _same_sources(a, b):
    """Do two traces mean the same thing by every input name they share (`const0`, `array0`
    are numbered per trace)?"""
    for name, x in a.items():
        y = b.get(name)
        if y is None or x is y:
            continue
        if type(x) is not tuple or type(y) is not tuple or len(x) != len(y) or \
                any(p is not q and (type(p) is not type(q) or type(p) not in (int, str) or p != q)
                    for p, q in zip(x, y)):
            return False
    return True


def install(cf, key, fwd, joint_split, tracer, owners, result, n_args):
    """A trace of `cf` (a CompiledFunction) for `key` went on past breaks: add its path to
    the key's tree (a new SplitEntry the first time), compile the pieces that changed, and warn
    once per break location. Returns the call's (eager) result."""
    first = tracer.breaks[0]
    if tracer.rng:
        tracer.broken = GraphBreak(first.what, first.location, "a graph that draws random numbers is not split at "
                                   "a break (a miss would draw them twice)", cf.fullgraph)
        return cf._after_break(key, tracer, result)
    _settle(tracer.breaks)
    joint = None
    if joint_split is not None:
        from .training import JointEntry
        joint = JointEntry(joint_split, cf.backend, tracer, n_args, compile_forward=False)
    leaf = Leaf(fwd, joint, tracer.breaks)
    pieces = cut(fwd, tracer.breaks)
    sources = _sources(tracer)
    old = cf.entries.get(key)
    split, externals, merged = _grow(old if type(old) is SplitEntry else None, pieces, leaf, sources, tracer)
    _compile(split.root, {v.name: k for k, v in fwd.inputs}, cf.backend)
    split.last(tracer, joint_split)
    entry = SplitEntry(key, externals=externals, traced=fwd)
    cf._guard_entry(entry, tracer, owners)
    if merged:
        _join(entry, old)
    entry.split = split
    cf.entries[key] = entry
    _warn(cf, tracer)
    return result


def _settle(brks):
    """A stand-in nothing compared holds to the value."""
    for b in brks:
        if not b.exact and not b.compares and not b.returned:
            b.exact = True


def _grow(old, pieces, leaf, sources, tracer):
    """(Split, externals, joined?): the path joined to the tree of `old` (a SplitEntry or None)
    when it starts like it and reads the same inputs, else a tree of its own."""
    if old is not None and _same_sources(old.split.sources, sources) and _merge(old.split.root, pieces, leaf):
        old.split.sources.update(sources)
        return old.split, {**old.externals, **tracer.externals}, True
    return Split(_chain(pieces, leaf), sources), dict(tracer.externals), False


def _join(entry, old):
    """entry (a new path's) also checks what the paths of `old` read."""
    entry.calls = old.calls
    entry.guards = guards.union(old.guards, entry.guards)
    names = {name for name, _ in entry.readers}
    entry.readers = list(entry.readers) + [r for r in old.readers if r[0] not in names]
    made = {name for name, _ in entry.readers}
    entry.ext_items = [(n, t) for n, t in entry.ext_items if n not in made]


def _warn(cf, tracer):
    """Warn once per break location."""
    warned = cf.__dict__.setdefault("_breaks_warned", set())
    file, line, level = user_frame_info()
    for b in tracer.breaks:
        if b.location not in warned:
            warned.add(b.location)
            cf.log.append(f"graph break (split): {b.what} at {b.location}")
            warnings.warn(f"eagerc.compile: graph break in {cf.__name__}: {b.what} at {b.location}: the graph is "
                          "split there -- the code before and after it runs compiled, and the value is read "
                          "between them", stacklevel=level)


def symbolic(cf, g_sym, sym_attrs, symbols, size_guards, tracer, owners, traced, joint=None, into=None):
    """The path a trace on synthetic sizes took (tracer.breaks, read as the real call's values:
    Symbolic.forced) as a symbolic split key: its pieces cut from the generalised graph
    `g_sym` (`traced`: as traced) and compiled as entries.Dynamic. With `into` (a symbolic
    SplitEntry) the path joins its tree instead -- when it made the same size comparisons,
    else it replaces the tree -- and `into` is returned. `joint`: the path's symbolic
    training.JointEntry when the call needs autograd."""
    _settle(tracer.breaks)
    pieces = cut(g_sym, tracer.breaks, traced)
    leaf = Leaf(g_sym, joint, tracer.breaks)
    sources = _sources(tracer)
    same = into is not None and into.dynamic.guards == list(size_guards)
    split, externals, merged = _grow(into if same else None, pieces, leaf, sources, tracer)
    _compile(split.root, {v.name: k for k, v in g_sym.inputs}, cf.backend, (symbols, sym_attrs))
    split.last(tracer, None)
    entry = SplitEntry(None, externals=externals, traced=g_sym)
    cf._guard_entry(entry, tracer, owners)
    entry.split = split
    entry.dynamic = SplitSizes(size_guards, symbols)
    if into is None:
        return entry
    if merged:
        _join(entry, into)
    for name in Entry.__slots__:  # (the entry other entries' `dynamic.next` may point to stays)
        if name not in ("key", "dynamic", "calls"):
            setattr(into, name, getattr(entry, name))
    into.dynamic.guards = entry.dynamic.guards
    return into


def missed(cf, entry, key, leaves, args, kwargs):
    """No continuation holds for this call's value: trace the call again (its path joins the
    tree) or, past MAX_PATHS paths or MAX_VALUES exact values at this break, run the key eagerly
    from now on."""
    step, value = entry.split.missed
    brk = step.brk
    values = sum(1 for b, _ in step.children if b.exact)
    if _paths(entry.split.root) >= MAX_PATHS or values >= MAX_VALUES:
        why = f"{MAX_PATHS} paths" if values < MAX_VALUES else f"{MAX_VALUES} values of one break used as a number"
        return cf._eager_from_now(key, args, kwargs, (
            f"eagerc.compile: {cf.__name__} took {why} through its graph breaks for the same arguments "
            f"(last: {brk.what} at {brk.location} gave {value!r}); it runs eagerly for them from now on "
            "(compare an item() where it is taken, or keep the value a tensor)"))
    cf.log.append(f"new path after the graph break at {brk.location}: {brk.what} gave {value!r}")
    if entry.dynamic is not None:
        return dynamic.add_path(cf, entry, key, leaves, args, kwargs)
    return cf._trace(leaves, args, kwargs)


# ---------------------------------------------------------------- a call

def run(entry, leaves, sizes=None, forced=None):
    """One call of a split key: the pieces of the path its break values choose, then the
    path's outputs (mutations written back only now). MISS when no continuation holds.
    `sizes`: the symbols' binding of a symbolic key; `forced`: [(kind, value)] taken instead
    of the values read (dynamic.py checks a symbolic path on the data it was traced with)."""
    env = entries.inputs(entry, leaves)
    split = entry.split
    step = split.root
    call = entries.call
    k = 0
    while True:
        program, ins, outs = step.run
        if program is not None:
            overrides = None
            if type(program) is Dynamic:
                program, overrides = program.program_for(sizes)
            res = call(program, {n: env[n] for n in ins}, overrides, False)[0]
            for n, a in zip(outs, res):
                env[n] = a
        brk = step.brk
        if brk is None:
            break
        if forced is not None:
            c, k = forced[k][1], k + 1
        else:
            a = env[brk.value].reshape(())
            c = bool(a) if brk.kind == "bool" else a.item()
        for b, child in step.children:
            if b.holds(c):
                step = child
                break
        else:
            split.missed = (step, c)
            return MISS
    leaf = step.leaf
    if leaf.mutations:
        entries.write_back(entry, leaves, leaf, [(target, env[n]) for target, n in leaf.mutations])
    for name in leaf.grads_none:
        t = leaves[int(name[3:])] if name.startswith("arg") else entry.externals[name]
        t.grad = None
    if leaf.returned:   # `return loss.item()`: the value this call read
        return c
    outs = [env[n] for n in leaf.outs]
    if leaf.joint is not None:
        return leaf.joint.outputs(outs, leaves, {n: env[n] for n in leaf.inputs}, sizes)
    tensors = [entries.tensor_of(a) for a in outs]
    for i, name in leaf.aliases:
        tensors[i] = leaves[int(name[3:])] if name.startswith("arg") else entry.externals[name]
    return unflatten(leaf.out_tree, tensors)
