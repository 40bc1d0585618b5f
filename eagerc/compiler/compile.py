"""`eagerc.compile`: trace on the first call, then run the compiled graph while guards hold.

A call is described by its guard key: the argument structure (tuples, lists, dicts,
Python scalar values, other objects by identity), each tensor's shape, dtype, device
and requires_grad, which arguments are the same tensor, grad mode, the training flag
of every module the function ran (or owns), and the Python scalars the function reads
from its globals and closure. A key seen before runs its compiled program (after a
cheap check that the parameters and buffers it reads are still the same tensors with
the same shapes and dtypes); a new key retraces -- logging which guard failed, the old
and new value and the user's file:line -- and past `max_graphs` programs new keys run
eagerly with a warning.

Dynamic shapes: after a retrace caused only by sizes (or from the first call with
`dynamic=True`) the sizes that changed become symbols, the function is traced once
more on synthetic sizes, and one symbolic graph serves every size (see dynamic.py).
Keys of such calls have None in place of the dynamic sizes; sizes 0 and 1 stay
specialised, like torch.compile.

A call whose trace needed a concrete tensor value (a graph break) runs eagerly -- it
was run eagerly while tracing anyway -- and its key is remembered as eager, with a
warning naming the user's file:line.
"""
import functools
import logging
import math
import operator
import threading
import types
import warnings

import numpy as np

from .. import dispatch
from .._tensor import Tensor
from ..runtime.pytree import flatten, unflatten
from . import dynamic as dyn
from ..ops.inplace import _bump
from .guards import Watch
from .tracer import GraphBreak, root_modules, trace, user_frame_info

log = logging.getLogger("eagerc.compile")

__all__ = ["compile", "CompiledFunction", "CompiledModule", "explain", "ExplainOutput", "GraphBreak"]

MAX_GRAPHS = 8
MAX_SPECIALISED = 64   # programs kept per dynamic graph (one per distinct size binding)
MAX_GUARD_RETRACES = 8  # retraces of one key because a guard failed, before it runs eagerly

_ndarray = np.ndarray
_training = operator.attrgetter("training")
_SCALARS = (int, float, bool, str, type(None), complex)
_ARG_NAMES = [f"arg{i}" for i in range(256)]


# ---------------------------------------------------------------- guard keys

def _spec(x, leaves):
    """A hashable description of one argument; tensors are appended to `leaves` (None marks one)."""
    t = type(x)
    if t is Tensor or isinstance(x, Tensor):
        leaves.append(x)
        return None
    if t in _SCALARS:
        return (t, x)
    if t is tuple or t is list:
        return (t,) + tuple([_spec(v, leaves) for v in x])
    if t is dict:
        return (dict,) + tuple([(k, _spec(v, leaves)) for k, v in x.items()])
    if isinstance(x, tuple):  # namedtuple
        return (t,) + tuple([_spec(v, leaves) for v in x])
    if isinstance(x, np.generic):
        return (t, x.item())
    return (t, "id", id(x))  # anything else: the very same object


def _fmt_struct(s):
    if s is None:
        return "T"
    if type(s) is int:  # n tensor arguments, nothing else
        return "(" + ", ".join(["T"] * s) + ("," if s == 1 else "") + ")"
    t = s[0]
    if t is tuple or t is list or (isinstance(t, type) and issubclass(t, tuple)):
        inner = ", ".join(_fmt_struct(v) for v in s[1:])
        return f"({inner}{',' if len(s) == 2 else ''})" if t is not list else f"[{inner}]"
    if t is dict:
        return "{" + ", ".join(f"{k!r}: {_fmt_struct(v)}" for k, v in s[1:]) + "}"
    if len(s) == 3 and s[1] == "id":
        return f"<{t.__name__} object>"
    return repr(s[1])


def _fmt_shape(shape):
    return "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"


def _fmt_spec(s):
    shape, dt, dev, rg = s
    return f"{np.dtype(dt).name}{_fmt_shape(shape)} on {dev}{' requires_grad' if rg else ''}"


_KEY_PARTS = ("argument structure / Python values", "tensor", "grad mode", "module training flags",
              "argument aliasing", "global/closure values")


class Entry:
    """One specialisation: a graph, its program, and how to feed it."""
    __slots__ = ("key", "graph", "traced", "program", "externals", "ext_items", "ext_grads", "ext_guards",
                 "eager", "reason", "rng", "calls", "aliases", "single", "dynamic", "grads_none", "retries",
                 "joint", "wb", "guards", "readers")

    def __init__(self, key, graph=None, program=None, externals=None, eager=False, reason=None, rng=(),
                 traced=None):
        self.key = key
        self.graph = graph          # the optimised graph the program runs (symbolic when dynamic)
        self.traced = traced        # the graph as traced, before passes
        self.program = program
        self.externals = externals or {}
        self.ext_items = [(n, t) for n, t in self.externals.items() if not n.endswith(".grad")]
        self.ext_grads = []         # [(name, parameter)]: a parameter's .grad, read at call time
        self.ext_guards = []
        self.guards = None          # guards.Guards: what the trace read from Python, checked per call
        self.readers = ()           # [(input name, function)]: inputs made at call time (optimizer
                                    # options, numpy arrays the function turns into tensors)
        self.grads_none = ()
        self.retries = 0
        self.eager = eager
        self.reason = reason
        self.rng = rng              # [(node name, generator, words, seed)] in draw order
        self.calls = 0
        self.aliases = ()
        self.single = False
        self.wb = None              # (program, write-back plan): see _write_plan
        self.dynamic = None         # a Dynamic for symbolic graphs
        self.joint = None           # a training.JointEntry when calls need autograd
        if graph is not None:
            self.single = graph.out_tree == {"t": 0}
            al = graph.meta.get("output_aliases")
            if al:
                self.aliases = [(int(i), name) for i, name in al.items()]
            self.grads_none = tuple(graph.meta.get("grads_none", ()))

    def stale(self):
        """None while every external tensor is the one traced, with the same type; else why not."""
        for name, p in self.ext_grads:
            g, t = p.grad, self.externals[name]
            if g is None or g._array.shape != t._array.shape or g._array.dtype != t._array.dtype:
                return f"{name} changed"
        for g in self.ext_guards:
            t, owner, attr, arr, shape, dtype, rg, name = g
            if owner is not None and owner.get(attr) is not t:
                return f"{name} was replaced by another tensor"
            if t._requires_grad is not rg:
                return f"{name}.requires_grad changed: {rg} -> {t.requires_grad}"
            d = t._array
            if d is not arr:
                if d.shape != shape or d.dtype != dtype or type(d) is not type(arr):
                    return (f"{name} changed: {np.dtype(dtype).name}{list(shape)} -> "
                            f"{d.dtype.name}{list(d.shape)}")
                g[3] = d
        return None


class Dynamic:
    """A symbolic graph and the programs specialised from it, one per binding of the symbols."""

    def __init__(self, graph, sym_attrs, symbols, backend, rng_info, guards=()):
        self.graph = graph            # symbolic, as generalised (before passes)
        self.guards = list(guards)    # size comparisons Python made while tracing (dynamic.SymInt)
        self.next = None              # another symbolic graph for sizes where these guards fail
        self.sym_attrs = sym_attrs
        self.symbols = symbols        # [symbol] in binding order
        self.backend = backend
        self.rng_info = rng_info      # {node name: (words per element, shape expressions)}
        self.programs = {}            # binding tuple -> program
        self.generic = None
        self.generic_attrs = None
        if getattr(backend, "supports_dynamic", False):
            from .passes import optimize
            g = optimize(graph)
            self.generic = backend.compile(g)
            self.generic_attrs = dyn.scan_symbolic(g, symbols)

    def program_for(self, env):
        if self.generic is not None:
            return self.generic, (self.generic_attrs.overrides(env) if self.generic_attrs else None)
        b = tuple([env[s] for s in self.symbols])
        p = self.programs.get(b)
        if p is None:
            from .passes import optimize
            p = self.backend.compile(optimize(dyn.specialize(self.graph, self.sym_attrs, env)))
            if len(self.programs) >= MAX_SPECIALISED:
                del self.programs[next(iter(self.programs))]
            self.programs[b] = p
        return p, None

    def words(self, name, env):
        per, shape = self.rng_info[name]
        return per * math.prod(dyn.evaluate(s, env) for s in shape)


# ---------------------------------------------------------------- modules and externals

_AGNOSTIC = None


def _agnostic():
    """eagerc.nn classes whose forward never reads `training` (exact classes: a subclass may)."""
    global _AGNOSTIC
    if _AGNOSTIC is None:
        from .. import nn
        names = ("ReLU ReLU6 SiLU Mish SELU Hardsigmoid Hardswish LeakyReLU GELU ELU CELU Softplus "
                 "Hardtanh Tanh Sigmoid Softsign LogSigmoid Tanhshrink Softmax Softmin LogSoftmax GLU "
                 "Sequential ModuleList ModuleDict Conv2d Conv1d ConvTranspose2d ConvTranspose1d Flatten "
                 "Unflatten Identity Linear Bilinear CrossEntropyLoss NLLLoss MSELoss L1Loss SmoothL1Loss "
                 "HuberLoss BCELoss BCEWithLogitsLoss KLDivLoss LayerNorm GroupNorm RMSNorm MaxPool1d "
                 "MaxPool2d AvgPool1d AvgPool2d AdaptiveAvgPool1d AdaptiveAvgPool2d Upsample "
                 "UpsamplingNearest2d Embedding").split()
        _AGNOSTIC = frozenset(getattr(nn, n) for n in names if isinstance(getattr(nn, n, None), type))
    return _AGNOSTIC


def _roots_of(fn):
    """[(module, path prefix)] of the modules `fn` is or reads (see tracer.root_modules)."""
    return [(m, prefix) for prefix, m in root_modules(fn)]


def _scalar_guards(fn):
    """Globals and closure cells the function reads that hold Python scalars (guarded by value)."""
    code = getattr(fn, "__code__", None)
    if code is None or getattr(fn, "__self__", None) is not None:
        return [], []
    g = getattr(fn, "__globals__", {})
    globs = [n for n in code.co_names if type(g.get(n)) in _SCALARS and g.get(n) is not None]
    cells = []
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            if type(cell.cell_contents) in _SCALARS:
                cells.append((name, cell))
        except ValueError:
            pass
    return globs, cells


class CompiledFunction:
    """The callable `eagerc.compile` returns for a function (or a Module's __call__)."""

    def __init__(self, fn, backend="numpy", dynamic=None, fullgraph=False, max_graphs=MAX_GRAPHS):
        from .backends import get_backend
        self.fn = fn
        self.backend_name = backend
        self.backend = get_backend(backend)
        self.dynamic = dynamic        # None: automatic after a size-only retrace; True: from the start
        self.fullgraph = fullgraph
        self.max_graphs = max_graphs
        self.entries = {}
        self.traces = 0
        self.log = []                 # one line per retrace, graph break, dynamic decision, limit
        self.eager_only = False       # True: calls that match no specialisation run eagerly
        self._limit_warned = False
        self._roots = _roots_of(fn)
        self._guard_mods = []         # modules whose training flag is part of the key
        self._guard_names = []
        for m, prefix in self._roots:
            self._add_guard_module(m, prefix.rstrip(".") or type(m).__name__)
        self._globs, self._cells = [], []  # set at the first trace (globals defined after the
        self._scanned = False               # decorator exist by then)
        self._g = getattr(fn, "__globals__", {})
        self._dyn = None              # {leaf index: ((dim, symbol), ...)}: sizes that are symbols
        self._dyn_dims = {}           # {(leaf, dim): symbol}
        self._dyn_failed = None       # why the function stays static, once a dynamic attempt failed
        self._retries = {}            # key -> calls that asked to be traced again (tracer.retry)
        self._guard_fails = {}        # key -> retraces because a guard of its entry failed
        self._method = False          # bound through __get__ (a compiled method)
        self._lock = threading.RLock()  # held while tracing: calls from several threads
        functools.update_wrapper(self, fn, updated=())

    @property
    def modules(self):
        return [m for m, _ in self._roots]

    @modules.setter
    def modules(self, mods):
        self._roots = [(m, "") for m in mods]
        for m in mods:
            self._add_guard_module(m, type(m).__name__)

    def _add_guard_module(self, m, name):
        if any(g is m for g in self._guard_mods) or type(m) in _agnostic():
            return False
        self._guard_mods.append(m)
        self._guard_names.append(name)
        return True

    # ------------------------------------------------------------ guards
    def _key(self, args, kwargs, masked=True):
        """(key, tensor leaves, symbol bindings or None)."""
        if not kwargs and all([type(a) is Tensor for a in args]):
            leaves = list(args)     # the common case: plain tensor arguments
            struct = len(args)
        else:
            leaves = []
            struct = _spec(args, leaves) if not kwargs else (_spec(args, leaves), _spec(kwargs, leaves))
        dynd = self._dyn if masked else None
        env = None
        if dynd is None:
            specs = tuple([(d.shape, d.dtype, "cpu" if type(d) is _ndarray else str(t.device), t._requires_grad)
                           for t, d in [(t, t._array) for t in leaves]])
        else:
            specs = []
            for i, t in enumerate(leaves):
                d = t._array
                shape = d.shape
                dims = dynd.get(i)
                if dims is not None:
                    if env is None:
                        env = {}
                    shape, env = _mask(shape, dims, env)
                    if env is False:  # symbols bound inconsistently: this call can only be static
                        return self._key(args, kwargs, masked=False)
                specs.append((shape, d.dtype, "cpu" if type(d) is _ndarray else str(t.device), t._requires_grad))
            specs = tuple(specs)
        alias = ()
        if len(leaves) > 1:
            ids = [id(t) for t in leaves]
            if len(set(ids)) != len(ids):
                alias = tuple([ids.index(i) for i in ids])
        scal = ()
        if self._globs or self._cells:
            g = self._g
            scal = tuple([(type(v), v) for v in [g.get(n) for n in self._globs] +
                          [c.cell_contents for _, c in self._cells]])
        mods = self._guard_mods
        key = (struct, specs, dispatch.grad_enabled(), tuple(map(_training, mods)) if mods else (), alias, scal)
        return key, leaves, env

    def guard_key(self, args, kwargs):
        key, leaves, _ = self._key(args, kwargs)
        return key, leaves

    def _describe(self, old, new):
        """The guards that differ between two keys, in words (old -> new)."""
        out = []
        for part, a, b in zip(_KEY_PARTS, old, new):
            if a == b:
                continue
            if part == "tensor":
                if len(a) != len(b):
                    out.append(f"number of tensor arguments: {len(a)} -> {len(b)}")
                    continue
                for i, (x, y) in enumerate(zip(a, b)):
                    if x == y:
                        continue
                    for what, u, v in zip(("shape", "dtype", "device", "requires_grad"), x, y):
                        if what == "shape":
                            if len(u) == len(v) and all(p is None or p == q for p, q in zip(u, v)):
                                small = [d for d, (p, q) in enumerate(zip(u, v)) if p is None and q < 2]
                                if small:
                                    out.append(f"tensor argument {i} shape {_fmt_shape(v)}: size "
                                               f"{v[small[0]]} of dim {small[0]} is specialised (sizes 0 and "
                                               f"1 are never symbolic)")
                                continue
                            u, v = _fmt_shape(u), _fmt_shape(v)
                        elif what == "dtype":
                            u, v = np.dtype(u).name, np.dtype(v).name
                        if u != v:
                            out.append(f"tensor argument {i} {what}: {u} -> {v}")
            elif part == "argument structure / Python values":
                out.append(f"{part}: {_fmt_struct(a)} -> {_fmt_struct(b)}")
            elif part == "module training flags":
                names = self._guard_names
                diffs = [f"{names[i]}.training {x} -> {y}" for i, (x, y) in enumerate(zip(a, b)) if x != y]
                if len(diffs) > 4:
                    diffs = diffs[:3] + [f"and {len(diffs) - 3} more"]
                out.append("module training flags: " + (", ".join(diffs) or f"{a} -> {b}"))
            elif part == "global/closure values":
                names = self._globs + [n for n, _ in self._cells]
                out.append("; ".join(f"global/closure value {n}: {x[1]!r} -> {y[1]!r}"
                                     for n, x, y in zip(names, a, b) if x != y))
            else:
                out.append(f"{part}: {a!r} -> {b!r}")
        return "; ".join(x for x in out if x) or "no guard differs"

    def _closest(self, key):
        best, score = None, None
        for e in self.entries.values():
            s = sum(1 for a, b in zip(e.key, key) if a != b)
            if len(e.key[1]) == len(key[1]):
                s += sum(1 for x, y in zip(e.key[1], key[1]) if x != y) / (1 + len(key[1]))
            if score is None or s < score:
                best, score = e, s
        return best

    # ------------------------------------------------------------ calls
    def __call__(self, *args, **kwargs):
        if dispatch.active_tracer() is not None:  # called while tracing another function: inline it
            return self.fn(*args, **kwargs)
        key, leaves, env = self._key(args, kwargs)
        entry = self.entries.get(key)
        guard_miss = None
        if env is not None:  # sizes are symbols in this key
            while entry is not None and entry.dynamic is not None and entry.dynamic.guards and \
                    dyn.check_guards(entry.dynamic.guards, env):
                guard_miss = entry  # Python compared a size and would take another path here
                entry = entry.dynamic.next
            if entry is None:  # maybe a static specialisation
                key, leaves, env = self._key(args, kwargs, masked=False)
                entry = self.entries.get(key)
        if entry is not None:
            if entry.eager:
                entry.calls += 1
                return self.fn(*args, **kwargs)
            if entry.rng:
                for _, gen, _, seed in entry.rng:
                    if gen.initial_seed() != seed:
                        self._reseed(entry)
                        break
            if entry.ext_guards or entry.ext_grads:
                why = entry.stale()
                if why is not None:
                    return self._guard_failed(key, leaves, env, args, kwargs, f"{why} (a guard on the "
                                              "tensors the graph reads by reference)")
            if entry.guards is not None:
                why = entry.guards.check()
                if why is not None:
                    return self._guard_failed(key, leaves, env, args, kwargs, why)
            entry.calls += 1
            return self._run(entry, leaves, env)
        with self._lock:  # one thread at a time traces and installs entries
            return self._miss(key, leaves, env, args, kwargs, guard_miss=guard_miss)

    def _guard_failed(self, key, leaves, env, args, kwargs, why):
        """Something the entry's program was traced with changed: trace again, unless this key
        keeps changing (then run eagerly from now on, saying so)."""
        with self._lock:
            return self._retrace(key, leaves, env, args, kwargs, why)

    def _retrace(self, key, leaves, env, args, kwargs, why):
        self.entries.pop(key, None)
        n = self._guard_fails[key] = self._guard_fails.get(key, 0) + 1
        if n > MAX_GUARD_RETRACES:
            file, line, level = user_frame_info()
            msg = (f"eagerc.compile: {self.__name__} was traced again {n - 1} times for the same arguments "
                   f"because what it reads keeps changing (last: {why}); it runs eagerly for them from now "
                   "on (pass such values as arguments instead)")
            self.log.append(msg)
            warnings.warn(msg, stacklevel=level)
            self.entries[key] = Entry(key, eager=True, reason=msg)
            return self.fn(*args, **kwargs)
        return self._miss(key, leaves, env, args, kwargs, stale=why)

    def _miss(self, key, leaves, env, args, kwargs, stale=None, guard_miss=None):
        file, line, level = user_frame_info()
        where = f"{file}:{line}" if file else "?"
        if self.eager_only:
            return self.fn(*args, **kwargs)
        ref = None
        if stale is not None:
            reason = stale
        elif not self.entries:
            reason = "first call"
        elif guard_miss is not None:
            env_ = _bind(guard_miss.key, key, self._dyn_dims) or {}
            reason = f"a size guard of the symbolic graph fails: {dyn.check_guards(guard_miss.dynamic.guards, env_)}"
            # a specialisation on this side of the guard to generalise from, if there is one
            masked = _masks_to(key, self._dyn)
            ref = next((e for k, e in self.entries.items() if type(e) is Entry and e.dynamic is None
                        and not e.eager and k != key and _masks_to(k, self._dyn) == masked), None)
        else:
            ref = self._closest(key)
            reason = self._describe(ref.key, key)
        if stale is None and self._count() >= self.max_graphs:
            if not self._limit_warned:
                self._limit_warned = True
                msg = (f"eagerc.compile: {self.__name__} reached max_graphs={self.max_graphs} "
                       f"specialisations (last guard failure at {where}: {reason}); calls that match "
                       "none of them run eagerly from now on")
                self.log.append(msg)
                warnings.warn(msg, stacklevel=level)
            return self.fn(*args, **kwargs)
        if self.entries or stale is not None:
            line_ = f"retrace at {where}: {reason}"
            log.info("eagerc.compile: %s: %s", self.__name__, line_)
        else:
            line_ = f"first call at {where}"
        self.log.append(line_)
        if type(ref) is Entry and self.dynamic is not False and self._dyn_failed is None:
            dims = self._size_change(ref.key, key)
            if dims:
                result = self._make_dynamic(ref, dims, key, leaves, args, kwargs)
                if result is not _FAILED:
                    return result
        return self._trace(leaves, args, kwargs)

    def _count(self):
        """Specialisations held, symbolic graphs for other size regions included."""
        n = 0
        for e in self.entries.values():
            while e is not None:
                n += 1
                d = getattr(e, "dynamic", None)
                e = d.next if d is not None else None
        return n

    def _external_index(self):
        """({id(tensor): path}, {id(tensor): (owner dict, attr, tensor) or ("grad", parameter,
        grad)}) for the modules' parameters, their .grad, and buffers. The second dict keeps
        those tensors alive while a trace runs, so no new tensor can take one of their ids."""
        names, owners, used = {}, {}, set()
        for root, prefix in self._roots:
            for mpath, m in root.named_modules():
                for attr, t in list(m._parameters.items()) + list(m._buffers.items()):
                    if t is None or id(t) in names:
                        continue
                    path = prefix + (f"{mpath}.{attr}" if mpath else attr)
                    if path in used:  # two modules with the same paths (e.g. two instances)
                        n = 2
                        while f"{path}_{n}" in used:
                            n += 1
                        path = f"{path}_{n}"
                    used.add(path)
                    names[id(t)] = path
                    owners[id(t)] = (m._parameters if attr in m._parameters else m._buffers, attr, t)
                    g = t._grad
                    if g is not None and id(g) not in names:
                        names[id(g)] = path + ".grad"
                        used.add(path + ".grad")
                        owners[id(g)] = ("grad", t, g)
        return names, owners

    def _module_paths(self):
        paths = {}
        for root, prefix in self._roots:
            for name, m in root.named_modules():
                paths.setdefault(id(m), (prefix + name).rstrip(".") or type(m).__name__)
        return paths

    def _learn_modules(self, tracer):
        """Guard the training flag of every module that ran; True if the key grew."""
        paths = None
        grew = False
        for m in tracer.modules.values():
            if not any(g is m for g in self._guard_mods):
                paths = paths or self._module_paths()
                grew |= self._add_guard_module(m, paths.get(id(m), type(m).__name__))
        if grew:
            self._rekey()
        return grew

    def _rekey(self):
        """New modules joined the training-flag guard: old keys lack their flags, and held
        whatever value those flags have now (those modules did not run in their traces)."""
        added = tuple(map(_training, self._guard_mods))
        old = list(self.entries.items())
        self.entries.clear()
        for k, head in old:
            nk = k[:3] + (k[3] + added[len(k[3]):],) + k[4:]
            e = head
            while e is not None:
                e.key = nk
                d = getattr(e, "dynamic", None)
                e = d.next if d is not None else None
            self.entries[nk] = head

    def _refresh_roots(self, args):
        """Modules the function reaches: found again at each trace (a global defined after the
        decorator ran, a module passed as an argument -- e.g. `self` of a compiled method)."""
        from ..nn.modules.module import Module
        if not self._scanned:
            self._scanned = True
            self._globs, self._cells = _scalar_guards(self.fn)
        found = _roots_of(self.fn) + [(a, "" if i == 0 and self._method else f"arg{i}.")
                                      for i, a in enumerate(args) if isinstance(a, Module)]
        grew = False
        for m, prefix in found:
            if not any(r is m for r, _ in self._roots):
                self._roots.append((m, prefix))
                grew |= self._add_guard_module(m, prefix.rstrip(".") or type(m).__name__)
        if grew:
            self._rekey()

    def __get__(self, instance, owner=None):
        """@eagerc.compile on a method: bound to the instance, which becomes argument 0."""
        if instance is None:
            return self
        self._method = True
        return types.MethodType(self, instance)

    def _watch(self, args):
        return Watch(self.fn, args, [m for m, _ in self._roots])

    def _do_trace(self, args, kwargs, fullgraph, symbolic=None):
        self._refresh_roots(args)
        names, owners = self._external_index()
        self.traces += 1
        watch = self._watch(args)
        graph, result, tracer = trace(self.fn, args, kwargs, names, self._module_paths(), fullgraph, watch,
                                      symbolic)
        tracer.watch = watch
        return graph, result, tracer, owners

    def _wants_autograd(self, leaves):
        """Will this call's outputs need a backward? (grad on, and an input or parameter needs it)"""
        if not dispatch.grad_enabled():
            return False
        if any(t.requires_grad for t in leaves):
            return True
        return any(p.requires_grad for m in self.modules for p in m.parameters())

    def _trace_training(self, leaves, args, kwargs):
        """Trace forward and backward together (see training.py): one forward program whose
        outputs carry a Node running the backward program. A function that runs backward (and
        an optimizer step) itself is an ordinary graph whose mutations update parameters,
        optimizer state and .grad."""
        from .training import trace_joint, JointEntry
        self._refresh_roots(args)
        names, owners = self._external_index()
        self.traces += 1
        watch = self._watch(args)
        fwd, bwd, result, tracer = trace_joint(self.fn, args, kwargs, names, self._module_paths(),
                                               self.fullgraph, watch)
        tracer.watch = watch
        self._learn_modules(tracer)
        key = self._key(args, kwargs, masked=False)[0]
        if fwd is None:
            return self._after_break(key, tracer, result)
        if bwd is None:  # a whole training step: backward already ran inside the function
            self.entries[key] = self._compile_entry(key, fwd, tracer, owners)
            return result
        joint = JointEntry(fwd, bwd, self.backend, tracer, len(leaves))
        entry = Entry(key, joint.forward, joint.fwd_program, tracer.externals, rng=tracer.rng_draws(),
                      traced=fwd)
        entry.joint = joint
        self._guard_entry(entry, tracer, owners)
        self.entries[key] = entry
        return result

    def _run_joint(self, entry, leaves):
        overrides = None
        if entry.rng:  # random ops draw fresh numbers each call, like eager mode
            overrides = {name: {"seed": gen.initial_seed(), "offset": gen.next_offset(words)}
                         for name, gen, words, _ in entry.rng}
        result, mutations = entry.joint.run(leaves, _env(entry, leaves), overrides)
        for target, arr in mutations:
            _write_back(entry, leaves, target, arr)
        return result

    def _after_break(self, key, tracer, result):
        if tracer.retryable and self._retries.get(key, 0) < 3:
            # e.g. an optimizer creating its state on its first step: this call ran eagerly and
            # the next one traces again
            self._retries[key] = self._retries.get(key, 0) + 1
            self.log.append(f"eager call, traced again next time: {tracer.broken.what} at "
                            f"{tracer.broken.location}")
            log.info("eagerc.compile: %s: %s", self.__name__, self.log[-1])
            return result
        brk = tracer.broken
        file, line, level = user_frame_info()
        warnings.warn(f"eagerc.compile: graph break in {self.__name__}: {brk}", stacklevel=level)
        self.log.append(f"graph break: {brk.what} at {brk.location}")
        self.entries[key] = Entry(key, eager=True, reason=str(brk))
        return result

    def _trace(self, leaves, args, kwargs):
        """Trace this call; its specialisation is stored under the key without symbols."""
        if self._wants_autograd(leaves):
            return self._trace_training(leaves, args, kwargs)
        graph, result, tracer, owners = self._do_trace(args, kwargs, self.fullgraph)
        self._learn_modules(tracer)
        key = self._key(args, kwargs, masked=False)[0]
        if graph is None and tracer.retryable and self._retries.get(key, 0) < 3:
            # e.g. an optimizer creating its state on its first step: this call ran eagerly and
            # the next one traces again
            self._retries[key] = self._retries.get(key, 0) + 1
            self.log.append(f"eager call, traced again next time: {tracer.broken.what} at "
                            f"{tracer.broken.location}")
            log.info("eagerc.compile: %s: %s", self.__name__, self.log[-1])
            return result
        if graph is None:
            brk = tracer.broken
            file, line, level = user_frame_info()
            warnings.warn(f"eagerc.compile: graph break in {self.__name__}: {brk}", stacklevel=level)
            self.log.append(f"graph break: {brk.what} at {brk.location}")
            self.entries[key] = Entry(key, eager=True, reason=str(brk))
            return result
        needs_grad = dispatch.grad_enabled() and any(
            t.requires_grad for t in tracer.externals.values()) and not getattr(tracer, "backward_ran", False)
        if needs_grad:
            # a tensor that requires grad, read from a closure (not a module parameter): this call
            # ran eagerly; keep it eager rather than lose its gradient
            reason = "reads a tensor that requires grad from outside the compiled modules"
            log.info("eagerc.compile: %s runs eagerly: %s", self.__name__, reason)
            self.entries[key] = Entry(key, graph=graph, eager=True, reason=reason, traced=graph)
            return result
        entry = self._compile_entry(key, graph, tracer, owners)
        self.entries[key] = entry
        if self.dynamic is True and self._dyn is None and self._dyn_failed is None and type(entry) is Entry:
            self._dynamic_from_start(entry, leaves, args, kwargs)
        return result

    def _compile_entry(self, key, graph, tracer, owners):
        from .passes import optimize
        opt = optimize(graph)
        program = self.backend.compile(opt)
        entry = Entry(key, opt, program, tracer.externals, rng=tracer.rng_draws(), traced=graph)
        self._guard_entry(entry, tracer, owners)
        return entry

    def _guard_entry(self, entry, tracer, owners):
        """The checks an entry makes before each call: the external tensors it reads by
        reference, and everything else the trace read from Python (guards.py); and the
        inputs it makes at call time."""
        _ext_guards(entry, tracer.externals, owners)
        watch = getattr(tracer, "watch", None)
        if watch is not None:
            entry.guards = watch.guards(tracer, self._module_paths())
        entry.readers = _readers(tracer)
        made = {name for name, _ in entry.readers}
        entry.ext_items = [(n, t) for n, t in entry.ext_items if n not in made]

    def _reseed(self, entry):
        """A generator the graph draws from was reseeded: the seed is an attribute of the random
        ops, so the programs are rebuilt from the traced graph with the new seeds (no retrace)."""
        from .passes import optimize
        seeds = {name: gen.initial_seed() for name, gen, _, _ in entry.rng}
        entry.rng = [(name, gen, words, seeds[name]) for name, gen, words, _ in entry.rng]

        def patch(g):
            return g.copy(nodes=[n.copy_with(attrs={**n.attrs, "seed": seeds[n.out.name]})
                                 if n.out.name in seeds else n for n in g.nodes])
        entry.traced = patch(entry.traced)
        if entry.dynamic is None:
            entry.graph = optimize(entry.traced)
            entry.program = self.backend.compile(entry.graph)
        else:
            d = entry.dynamic
            d.graph = entry.graph = entry.traced
            d.programs.clear()
            if d.generic is not None:
                g = optimize(d.graph)
                d.generic, d.generic_attrs = self.backend.compile(g), dyn.scan_symbolic(g, d.symbols)
        self.log.append(f"reseeded: {self.__name__}'s random ops now use seeds {sorted(set(seeds.values()))}")

    # ------------------------------------------------------------ running
    def _run(self, entry, leaves, env):
        if entry.joint is not None:
            return self._run_joint(entry, leaves)
        env_ = _env(entry, leaves)
        d = entry.dynamic
        overrides = None
        if d is None:
            program = entry.program
        else:
            program, overrides = d.program_for(env)
        if entry.rng:  # random ops draw fresh numbers each call, like eager mode
            rng = {}
            for name, gen, words, _ in entry.rng:
                if d is not None:
                    words = d.words(name, env)
                rng[name] = {"seed": gen.initial_seed(), "offset": gen.next_offset(words)}
            if overrides:
                for k, v in overrides.items():
                    rng[k] = {**rng[k], **v} if k in rng else v
            overrides = rng
        outs, mutations = program(env_, overrides)
        if mutations:
            wb = entry.wb
            if wb is None or wb[0] is not program or len(wb[1]) != len(mutations):
                wb = entry.wb = (program, _write_plan(entry, mutations))
            wrap_ = dispatch.wrap
            for (_, arr), (grad, t, i) in zip(mutations, wb[1]):
                if t is None:
                    t = leaves[i]
                if grad:  # a compiled training step sets .grad (a fresh tensor, like eager)
                    t.grad = wrap_(arr)
                    continue
                if arr is not t._array:  # the numpy backend computes most updates straight into the target
                    t._array[...] = arr
                _bump(t, "compiled update")
        for name in entry.grads_none:
            _target(entry, leaves, name).grad = None
        wrap = dispatch.wrap
        if entry.single and not entry.aliases:
            a = outs[0]
            return wrap(a if type(a) is _ndarray or not isinstance(a, np.generic) else np.asarray(a))
        tensors = [wrap(a if type(a) is _ndarray or not isinstance(a, np.generic) else np.asarray(a))
                   for a in outs]
        for i, name in entry.aliases:
            tensors[i] = leaves[int(name[3:])] if name.startswith("arg") else entry.externals[name]
        return unflatten(entry.graph.out_tree, tensors)

    # ------------------------------------------------------------ dynamic shapes
    def _size_change(self, old, new):
        """{(leaf, dim): (old size, new size)} if the keys differ only in sizes (new ones >= 2)."""
        if old[0] != new[0] or old[2:] != new[2:] or len(old[1]) != len(new[1]):
            return None
        dims = {}
        for i, (a, b) in enumerate(zip(old[1], new[1])):
            if a[1:] != b[1:] or len(a[0]) != len(b[0]):
                return None
            for d, (x, y) in enumerate(zip(a[0], b[0])):
                if x is None:  # already symbolic in `old`
                    if y is not None and y < 2:
                        return None
                elif x != y:
                    if y is None or y < 2:
                        return None
                    dims[(i, d)] = (x, y)
        return dims or None

    def _dynamic_from_start(self, entry, leaves, args, kwargs):
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
            if self._make_dynamic(entry, dims, entry.key, leaves, args, kwargs, verify_call=False,
                                  keep_small=True) is not _FAILED:
                return
            self._dyn_failed = None  # let the narrower attempt (and later automatic ones) run
            if dims == firsts:
                break

    def _make_dynamic(self, ref, changed, key, leaves, args, kwargs, verify_call=True, keep_small=False):
        """Build a symbolic graph for the sizes in `changed` ({(leaf, dim): (ref size, new size)}).

        ref is the specialisation the call differs from only in those sizes. Returns the result
        of this call (None with verify_call=False), or _FAILED: the function then stays static."""
        def fail(why):
            self._dyn_failed = why
            msg = (f"dynamic shapes: {self.__name__} stays static in "
                   f"{', '.join(f'arg {i} dim {d}' for i, d in sorted(changed))}: {why}")
            self.log.append(msg)
            log.info("eagerc.compile: %s", msg)
            return _FAILED
        # the symbols: dims already dynamic keep theirs; new dims sharing (old, new) sizes share one
        dims = dict(self._dyn_dims)
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
        if ref.eager:
            # a graph break or a call that needs autograd runs eagerly anyway: one eager entry
            # serves every size instead of a retrace per size
            self._set_dims(all_dims)
            nkey = _full_mask(self._key(args, kwargs, masked=False)[0], dims)
            self.entries[nkey] = Entry(nkey, graph=ref.graph, eager=True, reason=ref.reason)
            self.log.append(f"dynamic shapes: {self.__name__} runs eagerly for every size of "
                            f"{self._fmt_dims(dims)}")
            return self.fn(*args, **kwargs)
        traced = ref.traced
        if traced.mutations:
            return fail("it updates its inputs or buffers in place (a trace on synthetic inputs "
                        "would repeat that)")
        ints = dyn.graph_ints(traced)
        for i, t in enumerate(leaves):
            ints.update(n for d, n in enumerate(t._array.shape) if (i, d) not in dims)
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
        dim_names = {}
        for (i, d), s in sorted(dims.items()):
            dim_names.setdefault(s, []).append([f"arg{i}", d])
        gens = _generators(ref)
        saved = [g.get_state() for g in gens]
        errors = []
        built = None
        for above in (True, False):  # sizes above those seen; if that fails (a bound such as a
            primes = dyn.choose_primes(seen, ints, above)  # block size, a branch), below them
            if primes is None:
                continue
            size_log = []
            syn = [_resize(t, {d: primes[s] for (j, d), s in dims.items() if j == i})
                   for i, t in enumerate(leaves)]
            syn = [dyn.symbolic_tensor(t) if any(j == i for j, _ in dims) else t for i, t in enumerate(syn)]
            syn_args, syn_kwargs = _replace_tensors((args, kwargs), iter(syn))
            where = f"at synthetic sizes {self._fmt_dims(dims, primes)}"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    graph_p, result_p, tracer_p, owners = self._do_trace(
                        syn_args, syn_kwargs, False, symbolic=dyn.Symbolic(primes, size_log))
            except Exception as e:  # e.g. a size that must match a parameter
                errors.append(f"tracing {where} failed: {type(e).__name__}: {e}")
                continue
            finally:
                for g, s in zip(gens, saved):
                    g.set_state(s)
            if graph_p is None:
                errors.append(f"graph break {where}: {tracer_p.broken}")
                continue
            if graph_p.mutations:
                errors.append("it updates its inputs or buffers in place")
                break
            g_sym, sym_attrs, problems = dyn.generalize(graph_p, primes, dim_names)
            if problems:
                errors.append(problems[0])
                break
            odd = dyn.unsupported(size_log)
            if odd:
                errors.append(f"Python computes with a size in a way size guards cannot follow: {odd[0]}")
                break
            guards = dyn.size_guards(size_log, primes)
            if ref_env:
                diff = dyn.check_guards(guards, ref_env) or dyn.same_program(traced, g_sym, sym_attrs, ref_env)
                if diff:
                    errors.append(f"Python takes another path {where} than at {ref_env}: {diff}")
                    continue
            built = (primes, syn, graph_p, result_p, tracer_p, owners, g_sym, sym_attrs, guards)
            break
        if built is None:
            return fail("; ".join(errors) or "no distinctive size left to trace with")
        primes, syn, graph_p, result_p, tracer_p, owners, g_sym, sym_attrs, guards = built
        rng_info = {}
        producers = graph_p.producers()
        for name, gen, words, _ in tracer_p.rng_draws():
            node = next(n for n in g_sym.nodes if n.out.name == name)
            numel = math.prod(producers[name].out.shape)
            rng_info[name] = (words // numel if numel else 0, node.out.shape)
        try:
            d = Dynamic(g_sym, sym_attrs, symbols, self.backend, rng_info, guards)
        except Exception as e:
            return fail(f"the backend cannot compile the symbolic graph: {type(e).__name__}: {e}")
        entry = Entry(None, g_sym, None, tracer_p.externals, rng=tracer_p.rng_draws(), traced=g_sym)
        entry.dynamic = d
        self._guard_entry(entry, tracer_p, owners)
        # 1. the program at the synthetic sizes reproduces the synthetic eager run
        try:
            got = self._run(entry, syn, dict(primes))
            bad = _differs(result_p, got)
        except Exception as e:
            bad = f"{type(e).__name__}: {e}"
        finally:
            for g, s in zip(gens, saved):
                g.set_state(s)
        if bad:
            return fail(f"the symbolic program disagrees with eager at sizes {primes}: {bad}")
        # 2. this call: the program against an eager run of the function on the real inputs
        result = None
        if verify_call:
            env = {}
            for (i, d), sym in dims.items():
                n = leaves[i]._array.shape[d]
                if env.setdefault(sym, n) != n or n < 2:
                    env = None
                    break
            if env is None or dyn.check_guards(guards, env):
                return fail("this call's sizes cannot bind the symbols")
            before = [g.get_state() for g in gens]
            expected = self.fn(*args, **kwargs)
            after = [g.get_state() for g in gens]
            for g, s in zip(gens, before):
                g.set_state(s)
            try:
                got = self._run(entry, leaves, env)
                bad = _differs(expected, got)
            except Exception as e:
                bad = f"{type(e).__name__}: {e}"
            for g, s in zip(gens, after):
                g.set_state(s)
            if bad:
                fail(f"the symbolic graph disagrees with eager on this call: {bad}")
                return expected
            result = expected
        # install: the dims become symbols in every key; drop the specialisations the new mask
        # makes unreachable (older symbolic entries) or that the symbolic graph covers
        old_dims = self._dyn_dims
        self._set_dims(all_dims)
        nkey = _full_mask(self._key(args, kwargs, masked=False)[0], dims)
        entry.key = nkey
        for k, e in list(self.entries.items()):
            if e.dynamic is not None and old_dims != all_dims:
                del self.entries[k]
            elif e.dynamic is None and not e.eager and _masks_to(k, self._dyn) == nkey:
                env_ = _bind(nkey, k, dims)
                if env_ is not None and not dyn.check_guards(guards, env_):
                    del self.entries[k]
        head = self.entries.get(nkey)
        if head is not None and head.dynamic is not None:  # another region of the same sizes
            while head.dynamic.next is not None:
                head = head.dynamic.next
            head.dynamic.next = entry
        else:
            self.entries[nkey] = entry
        self.log.append(f"dynamic shapes: {self.__name__} now treats {self._fmt_dims(dims)} as symbolic"
                        + (f" where {', '.join(dyn.fmt_guard(g) for g in guards)}" if guards else ""))
        log.info("eagerc.compile: %s", self.log[-1])
        return result

    def _set_dims(self, dims):
        self._dyn_dims = dict(dims)
        m = {}
        for (i, d), s in sorted(dims.items()):
            m.setdefault(i, []).append((d, s))
        self._dyn = {i: tuple(v) for i, v in m.items()} if m else None

    def _fmt_dims(self, dims, primes=None):
        parts = []
        for (i, d), s in sorted(dims.items()):
            parts.append(f"arg {i} dim {d}" + (f"={primes[s]}" if primes else f" ({s})"))
        return ", ".join(parts)

    # ------------------------------------------------------------ inspection
    @property
    def graphs(self):
        """The optimised graph of every compiled specialisation (symbolic ones show sizes as s0...)."""
        return [e.graph for e in self.entries.values() if e.graph is not None and not e.eager]

    @property
    def traced_graphs(self):
        return [e.traced for e in self.entries.values() if e.traced is not None]

    def code(self):
        """The generated source of every compiled specialisation. Before anything is compiled
        (no call yet, or every call ran eagerly) it says so, and why, as a comment."""
        out = []
        for e in self.entries.values():
            if e.joint is not None:
                progs = [e.joint.fwd_program, e.joint.bwd_program]
            elif e.dynamic is None:
                progs = [e.program]
            else:
                progs = list(e.dynamic.programs.values()) + ([e.dynamic.generic] if e.dynamic.generic else [])
            for p in progs:
                if p is not None:
                    out.append(getattr(p, "source", None) or str(e.graph))
        if out:
            return "\n\n".join(out)
        if not self.entries and not self.log:
            return (f"# {self.__name__} is not compiled yet: the first call traces it (and runs it eagerly),\n"
                    "# then later calls run the generated program shown here.")
        why = [f"#   {e.reason}" for e in self.entries.values() if e.eager and e.reason] or \
            [f"#   {line}" for line in self.log[-3:]]
        return f"# {self.__name__} has no compiled program: its calls ran eagerly.\n" + "\n".join(why)

    def explain(self, *args, **kwargs):
        return explain(self, *args, **kwargs)


class _Failed:
    def __repr__(self):
        return "<failed>"


_FAILED = _Failed()


def _bind(masked_key, key, dims):
    """Bindings of the symbols from an unmasked key, at the positions masked in masked_key."""
    env = {}
    for (i, d), sym in dims.items():
        try:
            if masked_key[1][i][0][d] is None:
                env[sym] = key[1][i][0][d]
        except (IndexError, TypeError):
            return None
    return env


def _full_mask(key, dims):
    """key with every size in dims ({(leaf, dim): symbol}) as None."""
    specs = [list(sp[0]) for sp in key[1]]
    for (i, d) in dims:
        specs[i][d] = None
    return (key[0], tuple((tuple(sh),) + tuple(sp[1:]) for sh, sp in zip(specs, key[1]))) + key[2:]


def _mask(shape, dims, env):
    """shape with dynamic dims (>= 2) as None, binding their symbols in env (False if inconsistent)."""
    s = list(shape)
    for d, sym in dims:
        if d >= len(s):
            continue
        n = s[d]
        if n < 2:
            continue
        b = env.get(sym)
        if b is None:
            env[sym] = n
        elif b != n:
            return shape, False
        s[d] = None
    return tuple(s), env


def _masks_to(key, dynd):
    if dynd is None:
        return key
    specs = []
    for i, sp in enumerate(key[1]):
        dims = dynd.get(i)
        shape = sp[0]
        if dims is not None and None not in shape:
            shape, ok = _mask(shape, dims, {})
            if ok is False:
                return None
        specs.append((shape,) + tuple(sp[1:]))
    return (key[0], tuple(specs)) + key[2:]


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


def _env(entry, leaves):
    """The arrays a program reads, by input name: arguments, external tensors (by reference),
    parameters' .grad, and the inputs made at call time (optimizer options, numpy arrays)."""
    env = {_ARG_NAMES[i]: t._array for i, t in enumerate(leaves)} if len(leaves) < 256 else \
        {f"arg{i}": t._array for i, t in enumerate(leaves)}
    for name, t in entry.ext_items:
        env[name] = t._array
    for name, p in entry.ext_grads:
        env[name] = p.grad._array
    for name, read in entry.readers:
        env[name] = read()
    return env


def _readers(tracer):
    """[(input name, function)] for the graph inputs made at each call (see Tracer.hyper and
    Tracer.array_input)."""
    out = []
    for name, (opt, group, key, element) in tracer.hyper_inputs.items():
        out.append((name, _hyper_reader(opt, group, key, element)))
    for name, (array, convert) in tracer.array_inputs.items():
        out.append((name, lambda a=array, f=convert: f(a)))
    return out


def _hyper_reader(opt, group, key, element):
    f64 = np.float64

    def read():
        v = opt.param_groups[group][key]
        if element is not None:
            v = v[element]
        if isinstance(v, Tensor):
            v = v._array
        return np.asarray(v, f64)
    return read


def _ext_guards(entry, externals, owners):
    out = []
    for name, t in externals.items():
        # (the index holds its tensors: their ids stay theirs while a trace frees others)
        owner, attr, _ = owners.get(id(t), (None, None, None))
        if owner == "grad":
            entry.ext_grads.append((name, attr))
            continue
        d = t._array
        out.append([t, owner, attr, d, d.shape, d.dtype, t.requires_grad, name])
    entry.ext_guards = out


def _target(entry, leaves, name):
    return leaves[int(name[3:])] if name.startswith("arg") else entry.externals[name]


def _write_plan(entry, mutations):
    """_write_back's lookups done once per program (its mutation targets come in a fixed order):
    per mutation (sets .grad, external tensor or None, argument index)."""
    plan = []
    for target, _ in mutations:
        grad = target.endswith(".grad")
        name = target[:-5] if grad else target
        if name.startswith("arg"):
            plan.append((grad, None, int(name[3:])))
        else:
            plan.append((grad, entry.externals[name], 0))
    return tuple(plan)


def _write_back(entry, leaves, target, arr):
    if target.endswith(".grad"):  # a compiled training step sets .grad (a fresh tensor, like eager)
        _target(entry, leaves, target[:-5]).grad = dispatch.wrap(arr)
        return
    t = _target(entry, leaves, target)
    if arr is not t._array:  # the numpy backend computes most updates straight into the target
        t._array[...] = arr
    _bump(t, "compiled update")


def compile(model=None, *, backend="numpy", dynamic=None, fullgraph=False, mode=None, **options):
    """Compile a function, a Module instance, or a Module class (like torch.compile).

    backend: "numpy" (generated Python over numpy) or "interpreter".
    dynamic: None (default) makes sizes symbolic after a retrace caused only by sizes;
             True makes batch/sequence sizes symbolic from the first call; False never.
    fullgraph: a graph break is an error instead of an eager fallback.
    max_graphs: specialisations kept per function (default 8); past it new keys run eagerly.
    """
    if model is None:
        return lambda m: compile(m, backend=backend, dynamic=dynamic, fullgraph=fullgraph, **options)
    from ..nn.modules.module import Module
    if isinstance(model, type) and issubclass(model, Module):
        cls = model

        class Compiled(cls):
            def __call__(self, *args, **kwargs):
                c = self.__dict__.get("_compiled_call")
                if c is None:
                    c = CompiledFunction(super().__call__, backend, dynamic, fullgraph, **options)
                    c.modules = [self]
                    c.__name__ = cls.__name__
                    self.__dict__["_compiled_call"] = c
                return c(*args, **kwargs)
        Compiled.__name__ = Compiled.__qualname__ = cls.__name__
        Compiled.__module__ = cls.__module__
        return Compiled
    if isinstance(model, Module):
        return CompiledModule(model, backend, dynamic, fullgraph, **options)
    if not callable(model):
        raise TypeError(f"eagerc.compile expects a function, a Module or a Module class, got "
                        f"{type(model).__name__}")
    return CompiledFunction(model, backend, dynamic, fullgraph, **options)


class CompiledModule:
    """Wraps a Module: calls go through the compiled forward; attributes reach the module."""

    def __init__(self, module, backend, dynamic, fullgraph, **options):
        object.__setattr__(self, "_orig_mod", module)
        c = CompiledFunction(module.__call__, backend, dynamic, fullgraph, **options)
        c.modules = [module]
        c.__name__ = type(module).__name__
        object.__setattr__(self, "_compiled", c)

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"

    # the compiled function's inspection surface (everything else reaches the module)
    log = property(lambda self: self._compiled.log)
    traces = property(lambda self: self._compiled.traces)
    entries = property(lambda self: self._compiled.entries)
    graphs = property(lambda self: self._compiled.graphs)
    traced_graphs = property(lambda self: self._compiled.traced_graphs)

    def code(self):
        return self._compiled.code()


# ---------------------------------------------------------------- explain

class ExplainOutput(str):
    """The report of `explain` (a str), with its parts as attributes:
    graphs, graph_count, breaks ([GraphBreak]), break_count, guards ([str]), ops (op count)."""

    def __new__(cls, text, graphs, breaks, guards):
        self = super().__new__(cls, text)
        self.graphs = graphs
        self.graph_count = len(graphs)
        self.breaks = breaks
        self.break_count = len(breaks)
        self.guards = guards
        self.ops = sum(len(g.nodes) for g in graphs)
        return self


def explain(fn, *args, **kwargs):
    """Trace fn once on these arguments (nothing is cached) and report its graph, graph
    breaks and the guards a compiled call would check. Runs fn once."""
    c = fn if isinstance(fn, (CompiledFunction, CompiledModule)) else compile(fn)
    c = c._compiled if isinstance(c, CompiledModule) else c
    c._refresh_roots(args)
    names, _ = c._external_index()
    watch = c._watch(args)
    graph, _, tracer = trace(c.fn, args, kwargs, names, c._module_paths(), watch=watch)
    for m in tracer.modules.values():
        c._add_guard_module(m, c._module_paths().get(id(m), type(m).__name__))
    key, leaves, _ = c._key(args, kwargs, masked=False)
    lines = [f"explain({c.__name__}):"]
    graphs, breaks = [], []
    if graph is None:
        breaks.append(tracer.broken)
        lines.append(f"  0 graphs, 1 graph break: {tracer.broken}")
        lines.append("  (the call runs eagerly; under fullgraph=True it raises)")
    else:
        graphs.append(graph)
        lines.append(f"  1 graph, {len(graph.nodes)} ops, 0 graph breaks"
                     + (f", {len(graph.mutations)} mutations" if graph.mutations else ""))
        lines.append("  " + str(graph).replace("\n", "\n  "))
    guards = [f"argument structure: {_fmt_struct(key[0])}"]
    guards += [f"tensor argument {i}: {_fmt_spec(s)}" for i, s in enumerate(key[1])]
    guards.append(f"grad mode: {key[2]}")
    guards += [f"{n}.training == {f}" for n, f in zip(c._guard_names, key[3])]
    if key[4]:
        guards.append(f"argument aliasing: {key[4]}")
    guards += [f"global/closure value {n} == {v[1]!r}" for n, v in
               zip(c._globs + [n for n, _ in c._cells], key[5])]
    if graph is not None:
        guards += [f"{name} is the same tensor, {t._array.dtype.name}{list(t._array.shape)}"
                   for name, t in tracer.externals.items() if name not in tracer.hyper_inputs
                   and name not in tracer.array_inputs]
        guards += [f"{name} is read at every call" for name in list(tracer.hyper_inputs) + list(tracer.array_inputs)]
        if watch is not None:
            guards += watch.guards(tracer, c._module_paths()).describe()
    lines.append("  guards:")
    lines += ["    " + g for g in guards]
    return ExplainOutput("\n".join(lines), graphs, breaks, guards)
