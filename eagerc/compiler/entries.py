"""A compiled specialisation (`Entry`) and one call of it: the inputs a program reads, the
program run, mutation outputs written back, outputs wrapped.

Both kinds of program run here: ordinary graphs (a forward, or a whole training step whose
mutations update parameters, optimizer state and .grad) and calls that need autograd (a
forward program whose outputs carry a Node running the backward program, training.py).
"""
import math

import numpy as np

from .. import dispatch
from .._tensor import Tensor
from ..ops.inplace import _bump
from ..runtime.pytree import unflatten
from . import dynamic as dyn
from .backends import pipeline

__all__ = ["Entry", "Dynamic", "run", "tensor_of", "inputs", "readers", "tensor_guards", "write_back", "reseed",
           "MAX_SPECIALISED"]

MAX_SPECIALISED = 64   # programs kept per dynamic graph (one per distinct size binding)
_ndarray = np.ndarray
_ARG_NAMES = [f"arg{i}" for i in range(256)]


class Entry:
    """One specialisation: a graph, its program, and how to feed it."""
    __slots__ = ("key", "graph", "traced", "program", "externals", "ext_items", "ext_grads", "ext_guards",
                 "eager", "reason", "rng", "calls", "aliases", "single", "dynamic", "grads_none",
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
        self.eager = eager
        self.reason = reason
        self.rng = rng              # [(node name, generator, words, seed)] in draw order
        self.calls = 0
        self.wb = None              # (program, write-back plan): see write_back
        self.dynamic = None         # a Dynamic for symbolic graphs
        self.joint = None           # a training.JointEntry when calls need autograd
        self.single = graph is not None and graph.out_tree == {"t": 0}
        self.aliases = tuple(graph.output_aliases.items()) if graph is not None else ()
        self.grads_none = graph.grads_none if graph is not None else ()

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
        self.backend = backend = getattr(backend, "dynamic_backend", backend)   # c: numpy's generic program
        self.rng_info = rng_info      # {node name: (words per element, shape expressions)}
        self.programs = {}            # binding tuple -> program
        self.generic = None
        self.generic_attrs = None
        if getattr(backend, "supports_dynamic", False):
            from .passes import optimize
            g = optimize(graph, pipeline(backend))
            self.generic = backend.compile(g)
            self.generic_attrs = dyn.scan_symbolic(g, symbols)

    def program_for(self, env):
        if self.generic is not None:
            return self.generic, (self.generic_attrs.overrides(env) if self.generic_attrs else None)
        b = tuple([env[s] for s in self.symbols])
        p = self.programs.get(b)
        if p is None:
            from .passes import optimize
            g = optimize(dyn.specialize(self.graph, self.sym_attrs, env), pipeline(self.backend))
            p = self.backend.compile(g)
            if len(self.programs) >= MAX_SPECIALISED:
                del self.programs[next(iter(self.programs))]
            self.programs[b] = p
        return p, None

    def words(self, name, env):
        per, shape = self.rng_info[name]
        return per * math.prod(dyn.evaluate(s, env) for s in shape)


def inputs(entry, leaves):
    """The arrays a program reads, by input name: arguments, external tensors (by reference),
    parameters' .grad, and the inputs made at call time (optimizer options, numpy arrays)."""
    env = {_ARG_NAMES[i]: t._array for i, t in enumerate(leaves)} if len(leaves) < 256 else \
        {f"arg{i}": t._array for i, t in enumerate(leaves)}
    for name, t in entry.ext_items:
        env[name] = t._array
    for name, p in entry.ext_grads:
        env[name] = p._grad._array
    for name, read in entry.readers:
        env[name] = read()
    return env


def readers(tracer):
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


def tensor_guards(entry, externals, owners):
    """The checks of the tensors the entry reads by reference (Entry.stale): each is the same
    tensor (still in its module, for parameters and buffers) with the same type; a parameter's
    .grad is read at call time instead."""
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
    """write_back's lookups done once per program (its mutation targets come in a fixed order):
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


def write_back(entry, leaves, program, mutations):
    """Mutation outputs into their targets (arguments, external tensors, .grad), the same way
    for every program: the lookups are planned once per program."""
    wb = entry.wb
    if wb is None or wb[0] is not program or len(wb[1]) != len(mutations):
        wb = entry.wb = (program, _write_plan(entry, mutations))
    wrap = dispatch.wrap
    for (_, arr), (grad, t, i) in zip(mutations, wb[1]):
        if t is None:
            t = leaves[i]
        if grad:  # a compiled training step sets .grad (a fresh tensor, like eager)
            t.grad = wrap(arr)
            continue
        if arr is not t._array:  # the numpy backend computes most updates straight into the target
            t._array[...] = arr
        _bump(t, "compiled update")
    for name in entry.grads_none:
        _target(entry, leaves, name).grad = None


def tensor_of(a):
    """A program's output array as a Tensor (a numpy scalar becomes a 0-d array)."""
    return dispatch.wrap(a if type(a) is _ndarray or not isinstance(a, np.generic) else np.asarray(a))


def run(entry, leaves, env, name="fn"):
    """One call of a compiled specialisation: bind the inputs, run the program with this call's
    random offsets (and size attributes when symbolic), write mutation outputs back, wrap
    the outputs (a call that needs autograd: training.JointEntry.outputs attaches the backward).
    `env`: the symbol bindings of a dynamic entry (None when static); `name`: the compiled
    function's, for the profiler's "compiled:<name>" event when a profile is active."""
    env_ = inputs(entry, leaves)
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
    prof = dispatch.modes().profiler
    if prof is None:
        outs, mutations = call(program, env_, overrides, entry.graph.mutations)
    else:  # a profile is active in this thread: it times the call and the program's nodes
        outs, mutations = prof.compiled(f"compiled:{name}", leaves, call, program, env_, overrides,
                                        entry.graph.mutations)
    if mutations or entry.grads_none:
        write_back(entry, leaves, program, mutations)
    if entry.joint is not None:
        return entry.joint.outputs(outs, leaves, env_)
    if entry.single and not entry.aliases:
        return tensor_of(outs[0])
    tensors = [tensor_of(a) for a in outs]
    for i, name in entry.aliases:
        tensors[i] = leaves[int(name[3:])] if name.startswith("arg") else entry.externals[name]
    return unflatten(entry.graph.out_tree, tensors)


def call(program, env, overrides, mutates):
    """program(env, overrides), silent on numpy's floating-point warnings as eager mode is even
    under the user's "error" filters (dispatch.quiet_rerun): a pure program runs again on that
    error path only; one that updates tensors in place (`mutates`) cannot run twice, so it runs
    with numpy's checks off (about 1 us, against a training step's hundreds). A program with
    `blas_context` (backends numpy and c, small matrix products: runtime/threads.py) runs inside it."""
    ctx = getattr(program, "blas_context", None)
    if ctx is not None:
        with ctx:
            return _call(program, env, overrides, mutates)
    return _call(program, env, overrides, mutates)


def _call(program, env, overrides, mutates):
    if mutates:
        with np.errstate(all="ignore"):
            return program(env, overrides)
    try:
        return program(env, overrides)
    except RuntimeWarning as e:
        out = dispatch.quiet_rerun(e, program, env, overrides)
        if out is None:
            raise
        return out


def reseed(entry, backend):
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
        entry.graph = optimize(entry.traced, pipeline(backend))
        entry.program = backend.compile(entry.graph)
    else:
        d = entry.dynamic
        d.graph = entry.graph = entry.traced
        d.programs.clear()
        if d.generic is not None:
            g = optimize(d.graph, pipeline(d.backend))
            d.generic, d.generic_attrs = d.backend.compile(g), dyn.scan_symbolic(g, d.symbols)
    return sorted(set(seeds.values()))
