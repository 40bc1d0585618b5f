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
    def __init__(self, external_names=None):
        self.names = dict(external_names or {})   # id(tensor) -> external name
        self.values = {}      # id(tensor) -> Value
        self.keep = []        # every tensor seen: keeps ids unique while tracing
        self.inputs = []      # (kind, Value)
        self.externals = {}   # external name -> Tensor
        self.nodes = []
        self.mutations = {}   # external name -> Value (last write wins)
        self.module_stack = []
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
        self.keep.append(out)

    def mutate(self, target, result):
        """`target` now holds `result`'s value (an in-place op); externals get a mutation output."""
        v = self.value_of(result)
        old = self.values.get(id(target))
        self.values[id(target)] = v
        self.keep.append(target)
        for kind, inp in self.inputs:
            if inp is old and kind == "external":
                self.mutations[inp.name] = v
            elif inp is old and kind == "arg":
                self.mutations[inp.name] = v

    def concretize(self, t, what):
        if id(t) in self.values or isinstance(t, Tensor):
            raise GraphBreak(what, user_location())

    # ------------------------------------------------------------ result
    def graph(self, result):
        leaves, tree = flatten(result, lambda x: isinstance(x, Tensor))
        outputs = [self.value_of(t) for t in leaves]
        mutations = [(name, v) for name, v in self.mutations.items()]
        return Graph(self.inputs, self.nodes, outputs, tree, mutations)


@contextlib.contextmanager
def tracing(tracer):
    prev = dispatch.tracer
    if prev is not None:
        raise RuntimeError("eagerc.compile: nested tracing is not supported (a compiled function "
                           "called another while it was being traced)")
    dispatch.tracer = tracer
    try:
        yield tracer
    finally:
        dispatch.tracer = prev


def trace(fn, args, kwargs=None, external_names=None):
    """Run fn(*args, **kwargs) eagerly while recording; returns (graph, result, tracer)."""
    kwargs = kwargs or {}
    tracer = Tracer(external_names)
    leaves, _ = flatten((args, kwargs), lambda x: isinstance(x, Tensor))
    for i, t in enumerate(leaves):
        tracer.add_arg(t, f"arg{i}")
    with tracing(tracer):
        result = fn(*args, **kwargs)
    return tracer.graph(result), result, tracer
