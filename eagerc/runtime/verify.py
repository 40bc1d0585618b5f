"""The IR verifier: every value defined before use, ops declared, attributes JSON-plain,
and each node's type equal to what its op's shape/dtype rule says.

Runs after every compiler pass in debug mode and on every file the runtime loads, so a
malformed or hostile graph is rejected before anything executes.
"""
import inspect

from .ir import Graph, Value, spec_of
from .ops import OPS
from . import dtypes

__all__ = ["GraphError", "verify", "Rules", "check_ends"]


class GraphError(ValueError):
    """A graph that is not well formed; the message names the node and the problem."""


_VARIADIC_NAMES = ("tensors", "operands", "indices")
_ARITY = {}


def arity(op):
    """(fewest, most) inputs a node of `op` may have: exactly the declared inputs (an absent
    optional one is recorded as None), or, for ops whose last input is a list of tensors
    (cat, stack, einsum, index...), any number of those. Extra inputs must never reach a
    kernel: a numpy ufunc takes a third positional argument as its `out=` array."""
    r = _ARITY.get(op.name)
    if r is None:
        n = len(op.inputs)
        variadic = False
        if n and op.inputs[-1] in _VARIADIC_NAMES:
            try:
                variadic = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(op.cpu).parameters.values())
            except (TypeError, ValueError):
                variadic = False
        r = _ARITY[op.name] = (n - 1, 4096) if variadic else (n, n)
    return r


def _json_plain(x, depth=0):
    if depth > 32:
        return False
    if x is None or isinstance(x, (bool, int, str)):
        return True
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        return all(_json_plain(v, depth + 1) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and _json_plain(v, depth + 1) for k, v in x.items())
    return False


def _static(shape):
    return all(isinstance(s, int) for s in shape)


def _check_value(v, where):
    """Raise GraphError unless Value v is well formed; `where()` names the place (built only
    for the message: this runs for every value of every graph a loader reads). Returns
    whether its shape is static (all sizes integers)."""
    if not isinstance(v.name, str) or not v.name:
        raise GraphError(f"{where()}: value without a name")
    if v.dtype not in _DTYPE_NAMES:
        try:
            dtypes.as_dtype(v.dtype)
        except TypeError:
            raise GraphError(f"{where()}: value {v.name} has unknown dtype {v.dtype!r}") from None
    static = True
    for s in v.shape:
        if type(s) is int:
            if 0 <= s < 2 ** 40:
                continue
        elif isinstance(s, str):
            static = False
            continue
        elif isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2 ** 40:
            continue
        raise GraphError(f"{where()}: value {v.name} has invalid size {s!r} in shape {list(v.shape)}")
    return static


_DTYPE_NAMES = frozenset(dtypes.NAMES)


def _where(i, n):
    return f"node {i} ({n.op} -> {getattr(n.out, 'name', '?')})"


def verify(graph: Graph, check_types=True):
    """Raise GraphError if `graph` is malformed; return it otherwise. (The file loader checks a
    graph as it reads it: program._NodeReader, with this module's Rules and check_ends.)"""
    defined = {}
    static_of = {}   # value name -> whether its shape is static
    for kind, v in graph.inputs:
        if kind not in ("arg", "external"):
            raise GraphError(f"graph input {v.name!r} has unknown kind {kind!r}")
        static_of[v.name] = _check_value(v, lambda: f"input {v.name}")
        if v.name in defined:
            raise GraphError(f"graph input {v.name!r} is defined twice")
        defined[v.name] = v
    rules = Rules() if check_types else None
    for i, n in enumerate(graph.nodes):
        op = OPS.get(n.op)
        if op is None:
            raise GraphError(f"{_where(i, n)}: unknown op {n.op!r}")
        if n.attrs and not _json_plain(n.attrs):
            raise GraphError(f"{_where(i, n)}: attributes are not JSON-plain: {n.attrs!r}")
        lo, hi = arity(op)
        if not lo <= len(n.inputs) <= hi:  # an extra input would reach a ufunc as its out= array
            raise GraphError(f"{_where(i, n)}: has {len(n.inputs)} inputs; {n.op} takes "
                             f"{lo if lo == hi else f'at least {lo}'} ({', '.join(op.inputs)})")
        for k in n.attrs:
            if k not in op.attrs:
                unknown = sorted(set(n.attrs) - set(op.attrs))
                raise GraphError(f"{_where(i, n)}: unknown attributes {unknown} (op takes {list(op.attrs)})")
        static = True
        ins = []
        for x in n.inputs:
            if isinstance(x, Value):
                if defined.get(x.name) is not x:
                    raise GraphError(f"{_where(i, n)}: reads {x.name!r} before it is defined")
                if not static_of[x.name]:
                    static = False
                ins.append((x.shape, x.dtype))
            else:
                if not (x is None or isinstance(x, (bool, int, float))):
                    raise GraphError(f"{_where(i, n)}: constant input {x!r} is not a Python number")
                ins.append((type(x), x))
        out = n.out
        static_of[out.name] = out_static = _check_value(out, lambda: _where(i, n))
        if out.name in defined:
            raise GraphError(f"{_where(i, n)}: redefines value {out.name!r}")
        if rules is not None and static and out_static:
            rules.check(i, n, op, tuple(ins))
        defined[out.name] = out
    check_ends(graph, defined)
    return graph


class Rules:
    """The ops' shape/dtype rules applied to nodes, memoised on what a rule depends on -- op,
    input types (a constant's with its Python type: True is not 1), attributes -- so the
    repeated layers of a large graph run each rule once. `verify` holds one per call; the file
    loader one per graph it builds, checking each node as it reads it."""
    __slots__ = ("memo",)

    def __init__(self):
        self.memo = {}   # (op, input types, repr of the attributes) -> (shape, dtype name)

    def check(self, i, n, op, ins):
        """Raise GraphError unless node n (number i, of OpDef op) declares the type its rule gives
        for `ins`: one (shape, dtype name) per input Value, (type, value) per constant."""
        key = (n.op, ins, repr(n.attrs) if n.attrs else "")
        got = self.memo.get(key)
        if got is None:
            specs = [spec_of(x) if isinstance(x, Value) else x for x in n.inputs]
            try:
                spec = op.meta(*specs, **n.attrs)
            except (RuntimeError, TypeError, ValueError, IndexError, KeyError) as e:
                raise GraphError(f"{_where(i, n)}: {e}") from None
            got = self.memo[key] = (tuple(spec.shape), dtypes.as_dtype(spec.dtype).name)
        out = n.out
        if got[0] != tuple(out.shape) or got[1] != out.dtype:
            raise GraphError(f"{_where(i, n)}: declared {out.type_str()} but {n.op}'s rule gives "
                             f"{got[1]}{list(got[0])}")


def check_ends(graph, defined):
    """What follows the nodes: outputs and mutations read defined values (`defined`: name ->
    Value, every input and node output), a mutation fits its target, the output structure and
    the typed fields are well formed."""
    for v in graph.outputs:
        if defined.get(v.name) is not v:
            raise GraphError(f"graph output {v.name!r} is not defined")
    externals = {v.name: v for k, v in graph.inputs if k == "external"}
    for target, v in graph.mutations:
        base = target[:-5] if target.endswith(".grad") else target
        if base not in externals:
            raise GraphError(f"mutation target {target!r} is not an external input")
        if defined.get(v.name) is not v:
            raise GraphError(f"mutation of {target!r} reads undefined value {v.name!r}")
        if _static(v.shape) and tuple(v.shape) != tuple(externals[base].shape):
            raise GraphError(f"mutation of {target!r}: value shape {list(v.shape)} != target shape "
                             f"{list(externals[base].shape)}")
    _check_tree(graph.out_tree, len(graph.outputs))
    _check_fields(graph)
    return graph


def _check_fields(graph):
    """The typed fields name what the graph has: inputs, outputs, nodes (each in one group)."""
    inputs = {v.name for _, v in graph.inputs}
    if not inputs.issuperset(graph.grads_none):
        raise GraphError(f"grads_none {list(graph.grads_none)} names what is not a graph input")
    if any(not (type(i) is int and 0 <= i < len(graph.outputs)) or name not in inputs
           for i, name in graph.output_aliases.items()):
        raise GraphError(f"output_aliases {graph.output_aliases} names what is not an output and an input")
    grouped = [name for g in graph.fusion_groups or () for name in g]
    if grouped and (len(set(grouped)) < len(grouped) or not {n.out.name for n in graph.nodes}.issuperset(grouped)):
        raise GraphError(f"fusion_groups {graph.fusion_groups} name a node twice or what is not a node")
    plan = graph.memory_plan
    if plan is not None and (not {n.out.name for n in graph.nodes}.issuperset(plan.buffer.keys() | plan.inplace.keys())
                             or any(not (type(b) is int and 0 <= b < len(plan.buffers)) for b in plan.buffer.values())):
        raise GraphError(f"memory_plan {plan} names what is not a node, or a buffer it does not have")


def _check_tree(tree, n, depth=0):
    if depth > 64 or not isinstance(tree, dict) or len(tree) != 1:
        raise GraphError(f"malformed out_tree {tree!r}")
    (kind, val), = tree.items()
    if kind in ("tuple", "list", "dict") and not isinstance(val, list):
        raise GraphError(f"malformed out_tree: {kind} of {type(val).__name__}")
    if kind == "t":
        if not isinstance(val, int) or isinstance(val, bool) or not 0 <= val < n:
            raise GraphError(f"out_tree refers to output {val!r}; the graph has {n}")
    elif kind in ("tuple", "list"):
        for t in val:
            _check_tree(t, n, depth + 1)
    elif kind == "dict":
        for item in val:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], (str, int))):
                raise GraphError(f"malformed dict entry in out_tree: {item!r}")
            _check_tree(item[1], n, depth + 1)
    elif kind == "c":
        if not _json_plain(val):
            raise GraphError(f"out_tree constant {val!r} is not JSON-plain")
    elif kind != "none":
        raise GraphError(f"unknown out_tree kind {kind!r}")
