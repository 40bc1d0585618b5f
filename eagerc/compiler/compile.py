"""`eagerc.compile`: trace on the first call, then run the compiled graph while guards hold.

A call is described by its guard key: the argument structure (tuples, lists, dicts,
Python scalar values), each tensor's shape, dtype, device and requires_grad, grad mode,
and the training flag of every module involved. A key seen before runs its compiled
program; a new key retraces (and logs which guard failed and how); past `max_graphs`
programs the function runs eagerly with a warning. A call whose trace needed a concrete
tensor value (a graph break) runs eagerly -- it was run eagerly while tracing anyway --
and its key is remembered as eager, with a warning naming the user's file:line.
"""
import functools
import logging
import warnings

import numpy as np

from .. import dispatch
from .._tensor import Tensor
from ..runtime.pytree import flatten, unflatten
from .tracer import GraphBreak, trace

log = logging.getLogger("eagerc.compile")

__all__ = ["compile", "CompiledFunction", "explain", "GraphBreak"]

MAX_GRAPHS = 8


def _is_tensor(x):
    return isinstance(x, Tensor)


class Entry:
    """One specialisation: a graph, its program, and how to feed it."""
    __slots__ = ("key", "graph", "program", "externals", "eager", "reason", "rng", "calls")

    def __init__(self, key, graph=None, program=None, externals=None, eager=False, reason=None, rng=()):
        self.key = key
        self.graph = graph
        self.program = program
        self.externals = externals or {}
        self.eager = eager
        self.reason = reason
        self.rng = rng
        self.calls = 0


def _modules_of(fn):
    from ..nn.modules.module import Module
    mods = []
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, Module):
        mods.append(owner)
    if isinstance(fn, Module):
        mods.append(fn)
    return mods


class CompiledFunction:
    """The callable `eagerc.compile` returns for a function (or a Module's __call__)."""

    def __init__(self, fn, backend="numpy", dynamic=False, fullgraph=False, max_graphs=MAX_GRAPHS):
        from .backends import get_backend
        self.fn = fn
        self.backend_name = backend
        self.backend = get_backend(backend)
        self.dynamic = dynamic
        self.fullgraph = fullgraph
        self.max_graphs = max_graphs
        self.entries = {}
        self.traces = 0
        self.log = []           # (reason, location) for every retrace / break
        self.eager_only = False
        self.modules = _modules_of(fn)
        functools.update_wrapper(self, fn, updated=())

    # ------------------------------------------------------------ guards
    def guard_key(self, args, kwargs):
        leaves, tree = flatten((args, kwargs), _is_tensor)
        tensors = tuple((tuple(t.data.shape), t.data.dtype.str, str(t.device), t.requires_grad)
                        for t in leaves)
        training = tuple(m.training for root in self.modules for m in root.modules())
        return (repr(tree), tensors, dispatch.grad_enabled(), training), leaves

    def _why(self, key):
        """Which guard of the closest cached entry failed, in words."""
        if not self.entries:
            return "first call"
        names = ("argument structure / Python scalar values", "tensor shapes/dtypes/devices/requires_grad",
                 "grad mode", "module training flags")
        old = next(reversed(self.entries))
        for name, a, b in zip(names, old, key):
            if a != b:
                if name.startswith("tensor") and len(a) == len(b):
                    for i, (x, y) in enumerate(zip(a, b)):
                        if x != y:
                            return f"arg tensor {i}: {_fmt_spec(x)} -> {_fmt_spec(y)}"
                return f"{name} changed: {a!r} -> {b!r}"
        return "unknown"

    # ------------------------------------------------------------ calls
    def __call__(self, *args, **kwargs):
        if self.eager_only or dispatch.tracer is not None:
            return self.fn(*args, **kwargs)
        key, leaves = self.guard_key(args, kwargs)
        entry = self.entries.get(key)
        if entry is not None:
            entry.calls += 1
            if entry.eager:
                return self.fn(*args, **kwargs)
            return self._run(entry, leaves)
        if len(self.entries) >= self.max_graphs:
            warnings.warn(f"eagerc.compile: {self.__name__} has been recompiled {self.max_graphs} times "
                          f"(last reason: {self._why(key)}); running it eagerly from now on")
            self.eager_only = True
            return self.fn(*args, **kwargs)
        reason = self._why(key)
        if self.entries:
            log.info("retracing %s: %s", self.__name__, reason)
        self.log.append(reason)
        return self._trace(key, args, kwargs)

    def _external_names(self):
        names = {}
        for root in self.modules:
            for name, p in root.named_parameters():
                names.setdefault(id(p), name)
            for name, b in root.named_buffers():
                names.setdefault(id(b), name)
        return names

    def _module_paths(self):
        paths = {}
        for root in self.modules:
            for name, m in root.named_modules():
                paths.setdefault(id(m), name or type(m).__name__)
        return paths or None

    def _trace(self, key, args, kwargs):
        self.traces += 1
        graph, result, tracer = trace(self.fn, args, kwargs, self._external_names(),
                                      self._module_paths(), self.fullgraph)
        if graph is None:
            brk = tracer.broken
            warnings.warn(f"eagerc.compile: graph break in {self.__name__}: {brk}", stacklevel=3)
            self.log.append(f"graph break: {brk.what} at {brk.location}")
            self.entries[key] = Entry(key, eager=True, reason=str(brk))
            return result
        needs_grad = dispatch.grad_enabled() and (
            any(t.requires_grad for t in tracer.externals.values()) or any(k[3] for k in key[1]))
        if needs_grad:
            # Training graphs (forward + backward) are not compiled yet: stay eager, say so once.
            reason = "inputs or parameters require grad (compiled training is not supported yet)"
            log.info("eagerc.compile: %s runs eagerly: %s", self.__name__, reason)
            self.entries[key] = Entry(key, graph=graph, eager=True, reason=reason)
            return result
        from .passes import optimize
        graph = optimize(graph)
        program = self.backend.compile(graph)
        self.entries[key] = Entry(key, graph, program, tracer.externals, rng=tracer.rng_nodes(graph))
        return result

    def _run(self, entry, leaves):
        env = {f"arg{i}": t.data for i, t in enumerate(leaves)}
        for name, t in entry.externals.items():
            env[name] = t.data
        overrides = None
        if entry.rng:  # random ops draw fresh numbers each call, like eager mode
            overrides = {name: {"offset": gen.next_offset(words)} for name, gen, words in entry.rng}
        outs, mutations = entry.program(env, overrides)
        for target, arr in mutations:
            _write_back(entry, leaves, target, arr)
        tensors = [dispatch.wrap(a if type(a) is not np.generic else np.asarray(a)) for a in outs]
        return unflatten(entry.graph.out_tree, tensors)

    # ------------------------------------------------------------ inspection
    @property
    def graphs(self):
        return [e.graph for e in self.entries.values() if e.graph is not None]

    def code(self):
        """The generated source of every compiled specialisation."""
        return "\n\n".join(getattr(e.program, "source", str(e.graph)) for e in self.entries.values()
                           if e.program is not None)


def _fmt_spec(s):
    shape, dt, dev, rg = s
    return f"{np.dtype(dt).name}{list(shape)} on {dev}{' requires_grad' if rg else ''}"


def _write_back(entry, leaves, target, arr):
    from ..ops.inplace import _bump
    if target.startswith("arg"):
        t = leaves[int(target[3:])]
    else:
        t = entry.externals[target]
    t.data[...] = arr
    _bump(t, "compiled update")


def compile(model=None, *, backend="numpy", dynamic=False, fullgraph=False, mode=None, **options):
    """Compile a function, a Module instance, or a Module class (like torch.compile).

    backend: "numpy" (generated Python over numpy) or "interpreter"; dynamic: make sizes
    symbolic after a size-only retrace; fullgraph: a graph break is an error.
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
        object.__setattr__(self, "_compiled", c)

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"


def explain(fn, *args, **kwargs):
    """Trace fn once (without caching) and report its graph, breaks and guards."""
    c = fn if isinstance(fn, (CompiledFunction, CompiledModule)) else compile(fn)
    c = c._compiled if isinstance(c, CompiledModule) else c
    key, _ = c.guard_key(args, kwargs)
    graph, _, tracer = trace(c.fn, args, kwargs, c._external_names(), c._module_paths())
    lines = [f"explain({c.__name__}):"]
    if graph is None:
        lines.append(f"  graph break: {tracer.broken}")
    else:
        lines.append(f"  1 graph, {len(graph.nodes)} ops, 0 graph breaks")
        lines.append("  " + str(graph).replace("\n", "\n  "))
    lines.append("  guards:")
    lines.append(f"    argument structure: {key[0]}")
    for i, s in enumerate(key[1]):
        lines.append(f"    arg tensor {i}: {_fmt_spec(s)}")
    lines.append(f"    grad mode: {key[2]}")
    if key[3]:
        lines.append(f"    module training flags: {key[3]}")
    return "\n".join(lines)
