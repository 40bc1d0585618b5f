"""`eagerc.compile`: trace on the first call, then run the compiled graph while guards hold.

This module is the call policy; each step lives in its own module:

- keys.py: a call's key -- argument structure and Python values, each tensor's shape,
  dtype, device and requires_grad, aliasing, grad mode, training flags, the scalars the
  function reads from its globals and closure -- looked up in `entries` per call;
- entries.py: a specialisation (Entry) and one call of it: its checks of the tensors it
  reads by reference, its inputs (arguments, externals, options read at call time), the
  program run, mutation outputs written back;
- guards.py: everything else the trace read from Python, checked before the program runs,
  and the side effects that make a trace a graph break;
- tracer.py / training.py: tracing a call (with its backward when it needs autograd);
- dynamic.py: making sizes symbolic after a retrace caused only by sizes (or from the
  first call with `dynamic=True`).

A key seen before runs its program while its checks hold; a failed check or a new key
retraces -- logging which guard failed, the old and new value and the user's file:line --
and past `max_graphs` programs new keys run eagerly with a warning. A `bool()` or `.item()`
splits the graph (breaks.py): the key runs in compiled pieces, the value read between them
choosing the continuation. A call whose trace hit any other graph break runs eagerly -- it
was run eagerly while tracing anyway -- and its key is remembered as eager; either way a
warning names the user's file:line.
"""
import functools
import logging
import threading
import types
import warnings

from .. import dispatch
from ..runtime.kernels import eager as eager_kernels
from ..runtime.safetensors_io import gc_paused
from . import breaks, dynamic as dyn, entries, keys
from .entries import Entry
from .guards import Watch
from .keys import CallKeys, fmt_autocast, fmt_spec, fmt_struct
from .tracer import GraphBreak, root_modules, trace, user_frame_info

log = logging.getLogger("eagerc.compile")

__all__ = ["compile", "CompiledFunction", "CompiledModule", "explain", "ExplainOutput", "GraphBreak"]

MAX_GRAPHS = 8
MAX_GUARD_RETRACES = 8  # retraces of one key because a guard failed, before it runs eagerly
_STATIC = (Entry, breaks.SplitEntry)  # what a size-only retrace generalises from (dynamic.make_dynamic)


def _roots_of(fn):
    """[(module, path prefix)] of the modules `fn` is or reads (see tracer.root_modules)."""
    return [(m, prefix) for prefix, m in root_modules(fn)]


class CompiledFunction:
    """The callable `eagerc.compile` returns for a function (or a Module's __call__): the call
    policy. A call's key (keys.py) finds its entry; the entry's checks (the tensors it reads by
    reference, guards.py's Python guards) decide whether its program runs (entries.run) or
    the function is traced again; a new key traces (tracer.py, training.py), and sizes may
    become symbolic (dynamic.py)."""

    def __init__(self, fn, backend=None, dynamic=None, fullgraph=False, max_graphs=MAX_GRAPHS):
        from .backends import get_backend
        self.fn = fn
        self.requested_backend = backend  # None: the fastest that works, chosen per trace (`_choose_backend`)
        self.backend_name = backend
        self.backend = get_backend(backend) if backend is not None else None
        self._backends = {}           # default backend: name -> instance
        self.dynamic = dynamic        # None: automatic after a size-only retrace; True: from the start
        self.fullgraph = fullgraph
        self.max_graphs = max_graphs
        self.entries = {}
        self.traces = 0
        self.log = []                 # one line per retrace, graph break, dynamic decision, limit
        self.eager_only = False       # True: calls that match no specialisation run eagerly
        self._limit_warned = False
        self._roots = _roots_of(fn)
        self.keys = CallKeys(fn)
        for m, prefix in self._roots:
            self.keys.add_module(m, prefix.rstrip(".") or type(m).__name__)
        self.dyn_failed = None        # why the function stays static, once a dynamic attempt failed
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
            self.keys.add_module(m, type(m).__name__)

    # ------------------------------------------------------------ calls
    def __call__(self, *args, **kwargs):
        if dispatch.active_tracer() is not None:  # called while tracing another function: inline it
            return self.fn(*args, **kwargs)
        key, leaves, env = self.keys.of(args, kwargs)
        entry = self.entries.get(key)
        guard_miss = None
        if env is not None:  # sizes are symbols in this key
            while entry is not None and entry.dynamic is not None and entry.dynamic.guards and \
                    dyn.check_guards(entry.dynamic.guards, env):
                guard_miss = entry  # Python compared a size and would take another path here
                entry = entry.dynamic.next
            if entry is None:  # maybe a static specialisation
                key, leaves, env = self.keys.of(args, kwargs, masked=False)
                entry = self.entries.get(key)
        if entry is not None:
            if entry.eager:
                entry.calls += 1
                return self.fn(*args, **kwargs)
            if entry.rng:
                for _, gen, _, seed in entry.rng:
                    if gen.initial_seed() != seed:
                        seeds = entries.reseed(entry, self._choose_backend(leaves))
                        self.log.append(f"reseeded: {self.__name__}'s random ops now use seeds {seeds}")
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
            if entry.split is not None:
                return self._run_split(entry, key, leaves, env, args, kwargs)
            return self._run(entry, leaves, env)
        # one thread at a time traces and installs entries; the garbage collector pauses meanwhile:
        # a trace and its compile build ~10 objects per graph node, and the collections they set
        # off walk every live object (a 32-layer GPT step: a quarter of its compile time)
        with self._lock, gc_paused():
            return self._miss(key, leaves, env, args, kwargs, guard_miss=guard_miss)

    def _run(self, entry, leaves, env):
        return entries.run(entry, leaves, env, self.__name__)

    def _eager_from_now(self, key, args, kwargs, msg):
        """Give up compiling calls of `key`: `msg` logged and warned once at the user's line, this
        call and later ones run eagerly."""
        _, _, level = user_frame_info()
        self.log.append(msg)
        warnings.warn(msg, stacklevel=level)
        self.entries[key] = Entry(key, eager=True, reason=msg)
        return self.fn(*args, **kwargs)

    def _run_split(self, entry, key, leaves, env, args, kwargs):
        """A key that runs in pieces (breaks.py; `env`: its sizes when symbolic); a break value no
        continuation holds for traces the call again (nothing was committed yet)."""
        out = breaks.run(entry, leaves, env)
        if out is not breaks.MISS:
            return out
        with self._lock:
            return breaks.missed(self, entry, key, leaves, args, kwargs)

    def _choose_backend(self, leaves):
        """The backend of the programs made for a call on `leaves`: the one asked for, else
        (backends.default_backend) "cuda" for cupy tensors, "c" when a C compiler works,
        "numpy" otherwise. Decided before each trace from the call's tensors (the module's
        parameters when it has none), so one function may hold programs for both devices."""
        if self.requested_backend is not None:
            return self.backend
        from .backends import default_backend, get_backend
        arrays = [t._array for t in leaves] or [p._array for m in self.modules for p in m.parameters()][:1]
        _, _, level = user_frame_info()
        name = default_backend(arrays, stacklevel=level)
        b = self._backends.get(name)
        if b is None:
            b = self._backends[name] = get_backend(name)
        self.backend, self.backend_name = b, name
        return b

    def _guard_failed(self, key, leaves, env, args, kwargs, why):
        """Something the entry's program was traced with changed: trace again, unless this key
        keeps changing (then run eagerly from now on, saying so)."""
        with self._lock:
            self.entries.pop(key, None)
            n = self._guard_fails[key] = self._guard_fails.get(key, 0) + 1
            if n > MAX_GUARD_RETRACES:
                return self._eager_from_now(key, args, kwargs, (
                    f"eagerc.compile: {self.__name__} was traced again {n - 1} times for the same arguments "
                    f"because what it reads keeps changing (last: {why}); it runs eagerly for them from now "
                    "on (pass such values as arguments instead)"))
            return self._miss(key, leaves, env, args, kwargs, stale=why)

    def _miss(self, key, leaves, env, args, kwargs, stale=None, guard_miss=None):
        file, line, level = user_frame_info()
        where = f"{file}:{line}" if file else "?"
        if self.eager_only:
            return self.fn(*args, **kwargs)
        ref = None
        k = self.keys
        if stale is not None:
            reason = stale
        elif not self.entries:
            reason = "first call"
        elif guard_miss is not None:
            env_ = keys.bind(guard_miss.key, key, k.dyn_dims) or {}
            reason = f"a size guard of the symbolic graph fails: {dyn.check_guards(guard_miss.dynamic.guards, env_)}"
            # a specialisation on this side of the guard to generalise from, if there is one
            masked = keys.masks_to(key, k.dyn)
            ref = next((e for kk, e in self.entries.items() if type(e) in _STATIC and e.dynamic is None
                        and not e.eager and kk != key and keys.masks_to(kk, k.dyn) == masked), None)
        else:
            ref = k.closest(self.entries, key)
            reason = k.describe(ref.key, key)
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
        self._choose_backend(leaves)
        if type(ref) in _STATIC and self.dynamic is not False and self.dyn_failed is None:
            dims = k.size_change(ref.key, key)
            if dims:
                result = dyn.make_dynamic(self, ref, dims, key, leaves, args, kwargs)
                if result is not dyn.FAILED:
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

    # ------------------------------------------------------------ what the function reads
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
            if not any(g is m for g in self.keys.modules):
                paths = paths or self._module_paths()
                grew |= self.keys.add_module(m, paths.get(id(m), type(m).__name__))
        if grew:
            self.keys.rekey(self.entries)
        return grew

    def _refresh_roots(self, args):
        """Modules the function reaches: found again at each trace (a global defined after the
        decorator ran, a module passed as an argument -- e.g. `self` of a compiled method)."""
        from ..nn.modules.module import Module
        self.keys.scan(self.fn)
        found = _roots_of(self.fn) + [(a, "" if i == 0 and self._method else f"arg{i}.")
                                      for i, a in enumerate(args) if isinstance(a, Module)]
        grew = False
        for m, prefix in found:
            if not any(r is m for r, _ in self._roots):
                self._roots.append((m, prefix))
                grew |= self.keys.add_module(m, prefix.rstrip(".") or type(m).__name__)
        if grew:
            self.keys.rekey(self.entries)

    def __get__(self, instance, owner=None):
        """@eagerc.compile on a method: bound to the instance, which becomes argument 0."""
        if instance is None:
            return self
        self._method = True
        return types.MethodType(self, instance)

    # ------------------------------------------------------------ tracing
    def _do_trace(self, args, kwargs, fullgraph, symbolic=None, joint=False):
        """Trace one call (its forward and backward together when `joint`, training.py).
        Returns (graph or forward graph, training.Joint or None, result, tracer, owners)."""
        self._refresh_roots(args)
        names, owners = self._external_index()
        self.traces += 1
        watch = self._watch(args)
        cut = symbolic is None or symbolic.forced is not None  # (forced: a symbolic path of a split key)
        # the backend replaces some eager kernels by its own: the trace's eager run builds none of those
        with eager_kernels.only_built(getattr(self.backend, "replaced_ops", ())):
            if joint:
                from .training import trace_joint
                fwd, split, result, tracer = trace_joint(self.fn, args, kwargs, names, self._module_paths(),
                                                         fullgraph, watch, symbolic, split=cut)
            else:
                fwd, result, tracer = trace(self.fn, args, kwargs, names, self._module_paths(), fullgraph, watch,
                                            symbolic, split=cut)
                split = None
        tracer.watch = watch
        return fwd, split, result, tracer, owners

    def _watch(self, args):
        return Watch(self.fn, args, [m for m, _ in self._roots])

    def _wants_autograd(self, leaves):
        """Will this call's outputs need a backward? (grad on, and an input or parameter needs it)"""
        if not dispatch.grad_enabled():
            return False
        if any(t.requires_grad for t in leaves):
            return True
        return any(p.requires_grad for m in self.modules for p in m.parameters())

    def _trace(self, leaves, args, kwargs):
        """Trace this call; its specialisation is stored under the key without symbols.

        A call that needs autograd traces its backward too: one forward program whose outputs
        carry a Node running the backward program (training.py). A function that runs backward
        (and an optimizer step) itself is an ordinary graph whose mutations update parameters,
        optimizer state and .grad."""
        training = self._wants_autograd(leaves)
        fwd, split, result, tracer, owners = self._do_trace(args, kwargs, self.fullgraph, joint=training)
        self._learn_modules(tracer)
        key = self.keys.of(args, kwargs, masked=False)[0]
        if fwd is None:
            return self._after_break(key, tracer, result)
        if not training and dispatch.grad_enabled() and not getattr(tracer, "backward_ran", False) and \
                any(t.requires_grad for t in tracer.externals.values()):
            # a tensor that requires grad, read from a closure (not a module parameter): this call
            # ran eagerly; keep it eager rather than lose its gradient
            reason = "reads a tensor that requires grad from outside the compiled modules"
            log.info("eagerc.compile: %s runs eagerly: %s", self.__name__, reason)
            self.entries[key] = Entry(key, graph=fwd, eager=True, reason=reason, traced=fwd)
            return result
        if tracer.breaks:  # bool()/item() went on: the graph runs in pieces
            result = breaks.install(self, key, fwd, split, tracer, owners, result, len(leaves))
            entry = self.entries.get(key)
            if type(entry) is breaks.SplitEntry:
                self._dynamic_from_start(entry, leaves, args, kwargs)
            return result
        if split is not None:
            from .training import JointEntry
            joint = JointEntry(split, self.backend, tracer, len(leaves))
            entry = Entry(key, joint.forward, joint.fwd_program, tracer.externals, rng=tracer.rng_draws(),
                          traced=fwd)
            entry.joint = joint
            self._guard_entry(entry, tracer, owners)
            self.entries[key] = entry
            self._dynamic_from_start(entry, leaves, args, kwargs)
            return result
        entry = self._compile_entry(key, fwd, tracer, owners)
        self.entries[key] = entry
        self._dynamic_from_start(entry, leaves, args, kwargs)
        return result

    def _dynamic_from_start(self, entry, leaves, args, kwargs):
        """dynamic=True: the first traced call makes its batch/sequence sizes symbolic."""
        if self.dynamic is True and self.keys.dyn is None and self.dyn_failed is None:
            dyn.from_start(self, entry, leaves, args, kwargs)

    def _after_break(self, key, tracer, result):
        """The trace stopped at a graph break: this call ran eagerly (it did while tracing).
        Either the break asks to be traced again next time (an optimizer making its state on
        its first step), or the key is remembered as eager, with one warning naming the line."""
        if tracer.retryable and self._retries.get(key, 0) < 3:
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

    def _compile_entry(self, key, graph, tracer, owners):
        from .backends import pipeline
        from .passes import optimize
        opt = optimize(graph, pipeline(self.backend))
        program = self.backend.compile(opt)
        entry = Entry(key, opt, program, tracer.externals, rng=tracer.rng_draws(), traced=graph)
        self._guard_entry(entry, tracer, owners)
        return entry

    def _guard_entry(self, entry, tracer, owners):
        """The checks an entry makes before each call: the external tensors it reads by
        reference, and everything else the trace read from Python (guards.py); and the
        inputs it makes at call time."""
        entries.tensor_guards(entry, tracer.externals, owners)
        watch = getattr(tracer, "watch", None)
        if watch is not None:
            entry.guards = watch.guards(tracer, self._module_paths())
        entry.readers = entries.readers(tracer)
        made = {name for name, _ in entry.readers}
        entry.ext_items = [(n, t) for n, t in entry.ext_items if n not in made]

    # ------------------------------------------------------------ inspection
    @property
    def graphs(self):
        """The optimised graph of every compiled specialisation (symbolic ones show sizes as s0...)."""
        return [g for e in self.entries.values() if not e.eager
                for g in ([e.graph] if e.split is None else e.split.graphs()) if g is not None]

    @property
    def traced_graphs(self):
        return [e.traced for e in self.entries.values() if e.traced is not None]

    def code(self):
        """The generated source of every compiled specialisation. Before anything is compiled
        (no call yet, or every call ran eagerly) it says so, and why, as a comment."""
        out = []
        for e in self.entries.values():
            if e.split is not None:
                out += e.split.code()
                continue
            if e.dynamic is not None:   # (a symbolic forward and, for autograd, its backward)
                ds = [e.dynamic] + ([e.joint.dynamic[1]] if e.joint is not None else [])
                progs = [p for d in ds for p in list(d.programs.values()) + ([d.generic] if d.generic else [])]
            elif e.joint is not None:
                progs = [e.joint.fwd_program, e.joint.bwd_program]
            else:
                progs = [e.program]
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


def compile(model=None, *, backend=None, dynamic=None, fullgraph=False, mode=None, **options):
    """Compile a function, a Module instance, or a Module class (like torch.compile).

    backend: None (default) picks the fastest that works, per trace from the call's tensors:
             "cuda" for cupy tensors, "c" when a C compiler works, else "numpy" (after a
             one-line RuntimeWarning); or one by name: "c" (fused C kernels, OpenMP),
             "numpy" (generated Python over numpy), "cuda" or "interpreter".
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
        c.keys.add_module(m, c._module_paths().get(id(m), type(m).__name__))
    key, leaves, _ = c.keys.of(args, kwargs, masked=False)
    lines = [f"explain({c.__name__}):"]
    graphs, breaks = [], []
    if graph is None:
        breaks.append(tracer.broken)
        lines.append(f"  0 graphs, 1 graph break: {tracer.broken}")
        lines.append("  (compiled, a bool() or item() break splits the graph there, any other runs the call "
                     "eagerly; under fullgraph=True it raises)")
    else:
        graphs.append(graph)
        lines.append(f"  1 graph, {len(graph.nodes)} ops, 0 graph breaks"
                     + (f", {len(graph.mutations)} mutations" if graph.mutations else ""))
        lines.append("  " + str(graph).replace("\n", "\n  "))
    guards = [f"argument structure: {fmt_struct(key[0])}"]
    guards += [f"tensor argument {i}: {fmt_spec(s)}" for i, s in enumerate(key[1])]
    guards.append(f"grad mode: {key[2]}")
    guards += [f"{n}.training == {f}" for n, f in zip(c.keys.names, key[3])]
    if key[4]:
        guards.append(f"argument aliasing: {key[4]}")
    guards += [f"global/closure value {n} == {v[1]!r}" for n, v in
               zip(c.keys.globs + [n for n, _ in c.keys.cells], key[5])]
    if key[6] is not None:
        guards.append(f"autocast: {fmt_autocast(key[6])}")
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
