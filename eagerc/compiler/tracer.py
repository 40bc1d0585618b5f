"""The tracer: watch one eager run at the dispatch point and write it down as a Graph.

Tracing runs the user's function on the real inputs with a `Tracer` installed as
`eagerc.dispatch.tracer`, so the first call also returns the real result. Every op
(`apply`) and creation op (`create`) calls `record`; in-place updates call `mutate`;
anything that turns a traced tensor into a Python value calls `concretize`, which
stops the trace with a `GraphBreak` naming the user's file:line (never a silent
specialisation).

Tensors that the function reads but did not receive as arguments or make itself are
"external" inputs, read by reference at call time: module parameters and buffers are
named by their module path (`layers.0.weight`), other captured tensors `const0`, ...
"""
import contextlib
import os
import sys

from .. import dispatch
from .._tensor import Tensor
from ..runtime.ir import Graph, Node, Value
from ..runtime.pytree import flatten

__all__ = ["Tracer", "GraphBreak", "trace", "user_location"]

_EAGERC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class GraphBreak(RuntimeError):
    """The traced function needed a concrete value (item(), bool(), data-dependent size...)."""

    def __init__(self, what, location):
        self.what = what
        self.location = location
        super().__init__(f"{what} on a traced tensor at {location}: the compiled graph cannot depend "
                         "on tensor values; this call runs eagerly")


def user_location():
    """file:line of the innermost frame outside eagerc's own package."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_EAGERC_DIR):
            return f"{os.path.basename(fn)}:{f.f_lineno}"
        f = f.f_back
    return None


class Tracer:
    def __init__(self, external_names=None, fullgraph=False):
        self.names = dict(external_names or {})   # id(tensor) -> external name
        self.fullgraph = fullgraph
        self.broken = None    # the first GraphBreak, if the function needed a concrete value
        self.values = {}      # id(tensor) -> Value
        self.by_array = {}    # id(array) -> Value: tensors re-wrapping an array the trace made
        self.keep = []        # every tensor seen: keeps ids unique while tracing
        self.inputs = []      # (kind, Value)
        self.externals = {}   # external name -> Tensor
        self.nodes = []
        self.mutations = {}   # external name -> Value (last write wins)
        self.module_stack = []
        self.rng_source = None  # (generator, words) of the random op about to be recorded
        self.rng = {}           # output value name -> (generator, words)
        self._n = 0

    # ------------------------------------------------------------ values
    def _new_value(self, t, name=None):
        if name is None:
            name = f"t{self._n}"
            self._n += 1
        d = t.data
        return Value(name, tuple(d.shape), str(d.dtype) if str(d.dtype) != "bool" else "bool", t.device)

    def add_arg(self, t, name):
        v = self._new_value(t, name)
        self.values[id(t)] = v
        self.keep.append(t)
        self.inputs.append(("arg", v))
        return v

    def value_of(self, t):
        v = self.values.get(id(t))
        if v is None:  # a new Tensor object around an array the trace made (autograd's saved outputs)
            v = self.by_array.get(id(t.data))
            if v is not None:
                self.values[id(t)] = v
                self.keep.append(t)
        if v is None:
            name = self.names.get(id(t))
            if name is None:
                name = f"const{sum(1 for k in self.externals if k.startswith('const'))}"
            v = self._new_value(t, name)
            self.values[id(t)] = v
            self.keep.append(t)
            self.inputs.append(("external", v))
            self.externals[name] = t
        return v

    # ------------------------------------------------------------ events from dispatch
    def record(self, op, args, attrs, out):
        ins = [self.value_of(a) if isinstance(a, Tensor) else a for a in args]
        v = self._new_value(out)
        self.nodes.append(Node(op.name, ins, attrs, v, user_location(),
                               self.module_stack[-1] if self.module_stack else None))
        self.values[id(out)] = v
        self.by_array[id(out.data)] = v
        self.keep.append(out)
        if self.rng_source is not None:
            self.rng[v.name] = self.rng_source
            self.rng_source = None

    def rng_nodes(self, graph):
        """[(value name, generator, words)] for the random ops that survive in `graph`."""
        return [(n.out.name,) + self.rng[n.out.name] for n in graph.nodes if n.out.name in self.rng]

    def mutate(self, target, result):
        """`target` now holds `result`'s value (an in-place op); externals get a mutation output."""
        v = self.value_of(result)
        old = self.values.get(id(target))
        self.values[id(target)] = v
        self.by_array[id(target.data)] = v
        self.keep.append(target)
        for kind, inp in self.inputs:
            if inp is old and kind == "external":
                self.mutations[inp.name] = v
            elif inp is old and kind == "arg":
                self.mutations[inp.name] = v

    def concretize(self, t, what):
        self._break(what)

    def raw_write(self, t, opname):
        self._break(f"{opname} (an in-place write outside the recorded ops)")

    def _break(self, what):
        """Stop recording: under fullgraph raise; otherwise note where, and let the eager run
        go on (the function has side effects already; running it again would repeat them)."""
        loc = user_location()
        if self.fullgraph:
            raise GraphBreak(what, loc)
        if self.broken is None:
            self.broken = GraphBreak(what, loc)
        from .. import dispatch
        dispatch.tracer = None  # the rest of this call runs plainly eagerly

    # ------------------------------------------------------------ result
    def graph(self, result):
        leaves, tree = flatten(result, lambda x: isinstance(x, Tensor))
        outputs = [self.value_of(t) for t in leaves]
        mutations = [(name, v) for name, v in self.mutations.items()]
        return Graph(self.inputs, self.nodes, outputs, tree, mutations)


@contextlib.contextmanager
def tracing(tracer, modules=None):
    """Install `tracer` at the dispatch point (and module-path hooks for `modules`)."""
    if dispatch.tracer is not None:
        raise RuntimeError("eagerc.compile: nested tracing is not supported (a compiled function "
                           "called another while it was being traced)")
    handles = _module_path_hooks(tracer, modules) if modules else []
    dispatch.tracer = tracer
    try:
        yield tracer
    finally:
        dispatch.tracer = None
        for h in handles:
            h.remove()


def _module_path_hooks(tracer, paths):
    """Global forward hooks that keep tracer.module_stack = the path of the running module."""
    from ..nn.modules.module import register_module_forward_pre_hook, register_module_forward_hook

    def pre(module, args):
        tracer.module_stack.append(paths.get(id(module), type(module).__name__))

    def post(module, args, out):
        if tracer.module_stack:
            tracer.module_stack.pop()
    return [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]


def trace(fn, args, kwargs=None, external_names=None, modules=None, fullgraph=False):
    """Run fn(*args, **kwargs) eagerly while recording; returns (graph or None, result, tracer).

    The graph is None when the function needed a concrete tensor value (tracer.broken says
    where); the result is always the real eager result.
    """
    kwargs = kwargs or {}
    tracer = Tracer(external_names, fullgraph)
    leaves, _ = flatten((args, kwargs), lambda x: isinstance(x, Tensor))
    for i, t in enumerate(leaves):
        tracer.add_arg(t, f"arg{i}")
    with tracing(tracer, modules):
        result = fn(*args, **kwargs)
    if tracer.broken is not None:
        return None, result, tracer
    return tracer.graph(result), result, tracer
