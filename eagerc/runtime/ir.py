"""The graph IR: typed values, nodes of declared ops, and a graph that reads like a program.

A `Graph` is a list of `Node`s in a valid order. Every node applies one declared op
(eagerc.runtime.ops.OPS) to input values and Python-scalar constants, with JSON-plain
attributes, and defines one output `Value` carrying shape, dtype and device. Graph
inputs are of three kinds:

- "arg":      a tensor from the user's call (flattened from the argument structure)
- "external": a tensor read by reference at call time (a parameter, a buffer, a closure
              tensor), named by its module path, e.g. `layers.0.weight`
- constants:  Python scalars written inline in a node's inputs

Outputs are values plus `out_tree`, the JSON structure that rebuilds the user's return
value. In-place updates of external tensors are explicit `mutations` (target name ->
value), never hidden effects.

The printed form is one binding per line, like a jaxpr:

    graph(x: f32[8,256], layers.0.weight: f32[256,256] {external}) {
      t0: f32[8,256] = linear(x, layers.0.weight, layers.0.bias)     # model.py:12 (layers.0)
      return t0
    }
"""
import json
from types import MappingProxyType

from . import dtypes

__all__ = ["Value", "Node", "Graph", "MemoryPlan", "FORMAT_VERSION", "short_dtype"]

FORMAT_VERSION = 1

_SHORT = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "int16": "i16",
          "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool"}


def short_dtype(name):
    return _SHORT.get(name, name)


class Value:
    """A tensor value in a graph: a unique name and its type (shape, dtype, device).

    `shape` entries are ints, or strings for symbolic (dynamic) sizes such as "s0".
    """
    __slots__ = ("name", "shape", "dtype", "device")

    def __init__(self, name, shape, dtype, device="cpu"):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype if isinstance(dtype, str) else dtype.name
        self.device = str(device)

    def type_str(self):
        return f"{short_dtype(self.dtype)}[{','.join(str(s) for s in self.shape)}]"

    def to_json(self):
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "device": self.device}

    @classmethod
    def from_json(cls, d):
        return cls(d["name"], d["shape"], d["dtype"], d.get("device", "cpu"))

    def __repr__(self):
        return f"%{self.name}: {self.type_str()}"


class Node:
    """One op application. `inputs` holds Values and Python scalars (constants)."""
    __slots__ = ("op", "inputs", "attrs", "out", "loc", "module")

    def __init__(self, op, inputs, attrs, out, loc=None, module=None):
        self.op = op
        self.inputs = list(inputs)
        self.attrs = dict(attrs or {})
        self.out = out
        self.loc = loc          # "file.py:12" of the user's line that ran the op
        self.module = module    # module path, e.g. "layers.0", or None

    def input_values(self):
        return [v for v in self.inputs if isinstance(v, Value)]

    def copy_with(self, inputs=None, attrs=None, out=None):
        """A node like this one (same op, location and module) with some fields replaced."""
        return Node(self.op, self.inputs if inputs is None else inputs,
                    self.attrs if attrs is None else attrs, self.out if out is None else out,
                    self.loc, self.module)

    def to_json(self):
        return {"op": self.op, "inputs": [_input_json(v) for v in self.inputs],
                "attrs": _attrs_json(self.attrs), "out": self.out.to_json(),
                "loc": self.loc, "module": self.module}

    def __repr__(self):
        return format_node(self)


def _input_json(v):
    if isinstance(v, Value):
        return {"value": v.name}
    return {"const": v}


def _attrs_json(attrs):
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in attrs.items()}


def _node_of(i, nd, env):
    """Node i of a graph's JSON, reading its inputs in env (name -> Value) and defining its output there."""
    ins = []
    for x in nd["inputs"]:
        if "value" in x:
            v = env.get(x["value"])
            if v is None:
                raise ValueError(f"node {nd['out']['name']} ({nd['op']}) reads undefined value {x['value']!r}")
            ins.append(v)
        else:
            ins.append(x["const"])
    o = nd["out"]
    env[o["name"]] = out = Value(o["name"], o["shape"], o["dtype"], o.get("device", "cpu"))
    return Node(nd["op"], ins, nd["attrs"], out, nd.get("loc"), nd.get("module"))


def _fmt_input(v):
    if isinstance(v, Value):
        return v.name
    return repr(v)


def _fmt_attr(v):
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_fmt_attr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v) if isinstance(v, str) else str(v)


def format_node(node):
    args = ", ".join(_fmt_input(v) for v in node.inputs)
    attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in node.attrs.items())
    call = f"{node.op}({args}{', ' if args and attrs else ''}{attrs})"
    line = f"{node.out.name}: {node.out.type_str()} = {call}"
    where = " ".join(x for x in (node.loc, f"({node.module})" if node.module else None) if x)
    return f"{line:<60s}  # {where}" if where else line


class Graph:
    """A straight-line program over declared ops.

    inputs:    [(kind, Value)] with kind "arg" or "external"; an external's Value name is its
               path (e.g. "layers.0.weight")
    nodes:     [Node] in execution order
    outputs:   [Value]
    out_tree:  JSON structure of the return value: {"t": i} is outputs[i], {"c": x} a constant,
               {"tuple": [...]}, {"list": [...]}, {"dict": [[key, tree], ...]}, {"none": null}
    mutations: [(external name, Value)] written back into that external tensor after a run;
               a name ending in ".grad" targets that tensor's .grad

    What compiled calls and backends rely on are typed fields, not keys of a free-form dict
    (which passes silently drop, pytorch#95314): `copy`, JSON and `verify` know each one.
    grads_none:     [input name] whose .grad the function set to None (zero_grad)
    output_aliases: {output index: input name}: outputs that are that input tensor itself
    fusion_groups:  [[node output name, ...]] (passes/fusion.py) or None; dropped with the nodes
    memory_plan:    a MemoryPlan (passes/memplan.py) or None; dropped with the nodes
    """

    def __init__(self, inputs=(), nodes=(), outputs=(), out_tree=None, mutations=(),
                 grads_none=(), output_aliases=None, fusion_groups=None, memory_plan=None):
        self.inputs = list(inputs)
        self.nodes = list(nodes)
        self.outputs = list(outputs)
        self.out_tree = out_tree if out_tree is not None else {"t": 0}
        self.mutations = list(mutations)
        self.grads_none = tuple(grads_none)
        self.output_aliases = dict(output_aliases or {})
        self.fusion_groups = fusion_groups
        self.memory_plan = memory_plan

    # ------------------------------------------------------------ views
    def args(self):
        return [v for k, v in self.inputs if k == "arg"]

    def externals(self):
        return [v for k, v in self.inputs if k == "external"]

    def copy(self, **fields):
        """This graph with some fields replaced (`nodes=...`): the one way to derive a graph, so
        every typed field carries over unless the caller says otherwise."""
        kw = {k: getattr(self, k) for k in _FIELDS}
        kw.update(fields)
        return Graph(**kw)

    def producers(self):
        return {n.out.name: n for n in self.nodes}

    def users(self):
        """value name -> list of nodes that read it."""
        users = {}
        for n in self.nodes:
            for v in n.input_values():
                users.setdefault(v.name, []).append(n)
        return users

    # ------------------------------------------------------------ printing
    def __str__(self):
        head = ", ".join(f"{v.name}: {v.type_str()}" + (" {external}" if k == "external" else "")
                         for k, v in self.inputs)
        lines = [f"graph({head}) {{"]
        lines += ["  " + format_node(n) for n in self.nodes]
        for target, v in self.mutations:
            lines.append(f"  {target} <- {v.name}")
        lines.append("  return " + ", ".join(v.name for v in self.outputs))
        lines.append("}")
        return "\n".join(lines)

    __repr__ = __str__

    # ------------------------------------------------------------ serialisation
    def to_json(self):
        d = {
            "format_version": FORMAT_VERSION,
            "inputs": [{"kind": k, **v.to_json()} for k, v in self.inputs],
            "nodes": [n.to_json() for n in self.nodes],
            "outputs": [v.name for v in self.outputs],
            "out_tree": self.out_tree,
            "mutations": [[t, v.name] for t, v in self.mutations],
        }
        typed = {"grads_none": list(self.grads_none) or None, "fusion_groups": self.fusion_groups,
                 "memory_plan": self.memory_plan.to_json() if self.memory_plan is not None else None,
                 "output_aliases": [[i, name] for i, name in sorted(self.output_aliases.items())] or None}
        d.update((k, v) for k, v in typed.items() if v is not None)  # where set: a program file has none
        return d

    def dumps(self):
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, d, node=None):
        """Rebuild a graph from its JSON form. Structure only: `verify` checks the rest.
        `node(i, nd, env)`, when given, builds node i from its JSON `nd` instead, reading and
        defining values in `env` (name -> Value): the file loader checks each node as it builds it."""
        env = {}
        inputs = []
        for item in d["inputs"]:
            v = Value.from_json(item)
            env[v.name] = v
            inputs.append((item["kind"], v))
        nodes = [(node or _node_of)(i, nd, env) for i, nd in enumerate(d["nodes"])]

        def lookup(name):
            if name not in env:
                raise ValueError(f"graph output/mutation names undefined value {name!r}")
            return env[name]
        return cls(inputs, nodes, [lookup(n) for n in d["outputs"]], d["out_tree"],
                   [(t, lookup(n)) for t, n in d.get("mutations", [])],
                   d.get("grads_none", ()), {i: name for i, name in d.get("output_aliases", ())},
                   d.get("fusion_groups"), MemoryPlan.from_json(d["memory_plan"]) if "memory_plan" in d else None)

    @classmethod
    def loads(cls, text):
        return cls.from_json(json.loads(text))

    # ------------------------------------------------------------ analyses
    def to_networkx(self):
        """A networkx DiGraph: one vertex per graph input and node, edges along data flow."""
        import networkx as nx
        g = nx.DiGraph()
        for kind, v in self.inputs:
            g.add_node(v.name, kind=kind, op=None, value=v)
        for n in self.nodes:
            g.add_node(n.out.name, kind="node", op=n.op, node=n, value=n.out)
            for v in n.input_values():
                g.add_edge(v.name, n.out.name, shape=v.shape, dtype=v.dtype)
        return g


_FIELDS = ("inputs", "nodes", "outputs", "out_tree", "mutations", "grads_none", "output_aliases",
           "fusion_groups", "memory_plan")


class MemoryPlan:
    """Where each value a program makes lives (made by runtime/memplan.py, read by the
    backends): a frozen record, so a graph copy can share it.

    buffer:  {value name: buffer id}: written into that buffer, allocated once per program
    inplace: {value name: name of the input whose memory it takes over}: written into that
             input's array (a value dying at this node, or a mutation target the graph updates)
    buffers: ((dtype, numel), ...) indexed by buffer id
    A value in neither map gets a fresh array (kernel calls; values the user receives).

    made_for: the graph the planner (runtime/memplan.py) made this plan for, when it did: a
    backend follows such a plan on that graph without checking it again (check_memory_plan
    walks the whole graph); any other plan -- read from a file, built by hand, or met on a
    graph whose nodes, inputs, outputs or mutations are not the planned ones -- is checked.
    Not part of the plan's value (equality, JSON)."""
    __slots__ = ("buffer", "inplace", "buffers", "_made_for")

    def __init__(self, buffer=None, inplace=None, buffers=(), made_for=None):
        object.__setattr__(self, "buffer", MappingProxyType(dict(buffer or {})))
        object.__setattr__(self, "inplace", MappingProxyType(dict(inplace or {})))
        object.__setattr__(self, "buffers", tuple((str(d), int(n)) for d, n in buffers))
        object.__setattr__(self, "_made_for", None if made_for is None else _plan_key(made_for))

    def made_for(self, graph):
        """Did the planner make this plan for `graph` (the same node, input, output and mutation
        objects, in the same order)?"""
        return self._made_for is not None and self._made_for == _plan_key(graph)

    def __setattr__(self, name, value):
        raise AttributeError("MemoryPlan is frozen: make a new one")

    def __eq__(self, other):
        return isinstance(other, MemoryPlan) and (self.buffer, self.inplace, self.buffers) == \
            (other.buffer, other.inplace, other.buffers)

    __hash__ = None

    def __repr__(self):
        return f"MemoryPlan({len(self.buffer)} values in {len(self.buffers)} buffers, {len(self.inplace)} in place)"

    def to_json(self):
        return {"buffer": dict(self.buffer), "inplace": dict(self.inplace), "buffers": [list(b) for b in self.buffers]}

    @classmethod
    def from_json(cls, d):
        return cls(d["buffer"], d["inplace"], d["buffers"])


def _plan_key(graph):
    """What a memory plan depends on, compared by identity of its nodes and values."""
    return tuple(graph.inputs), tuple(graph.nodes), tuple(graph.outputs), tuple(graph.mutations)


def spec_of(value):
    """The runtime Spec of a Value (for the ops' shape rules)."""
    from .ops.meta import Spec
    return Spec(tuple(value.shape), dtypes.as_dtype(value.dtype))

