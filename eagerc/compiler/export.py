"""`eagerc.export`: capture a model as a standalone program and save it as one file.

    prog = eagerc.export(model, (x,), dynamic_shapes=({0: "batch"},))
    prog.save("model.eagerc")
    run = eagerc.runtime.load("model.eagerc")   # needs only eagerc.runtime and numpy
    y = run(x.numpy())

Export traces the function once on the example inputs (under no_grad, with modules
in eval mode unless `eval_mode=False`), runs the pass pipeline, and copies the weights.
Anything that would make the program depend on tensor values (`.item()`, `bool()`,
data-dependent sizes) is an error naming the user's file:line.

Dynamic sizes: the graph is traced at the example sizes and again with each dynamic
dimension one larger, and once more with all of them three larger. Every integer of
the graph that changes (shapes, `reshape` targets, slice bounds, integer constants)
must be `c0 + k * product(dims)`; the file stores the example graph plus these
expressions, and the runtime re-derives and re-verifies the graph for new sizes. A
graph whose structure changes with a size is an error naming the first differing op.
"""
import inspect
import json

import numpy as np

from .. import dispatch
from .._tensor import Tensor
from ..runtime import program as _program
from ..runtime.device import xp_of as _xp_of
from ..runtime.ir import Graph
from ..runtime.pytree import flatten
from ..runtime.sizes import SizeExpr
from ..runtime.verify import verify
from . import passes as _passes
from .tracer import GraphBreak, root_modules, tensor_leaves, trace

__all__ = ["export", "Program", "ExportError"]


class ExportError(RuntimeError):
    """The function cannot be exported as a program; the message says why and where."""


def _is_tensor(x):
    return isinstance(x, Tensor)


class Program:
    """An exported program: graph, weights (copied at export time) and input specs.

    `prog(*arrays)` runs it exactly as the file will run after `eagerc.runtime.load`
    (same checks, same executor); `prog.save(path)` writes the file atomically.
    """

    def __init__(self, graph, weights, input_specs, dynamic, producer, examples=None):
        self.graph = graph
        self.weights = weights
        self.input_specs = input_specs
        self.dynamic = dynamic
        self.producer = producer
        self.examples = examples
        self._loaded = None

    @property
    def dynamic_dims(self):
        return dict(self.dynamic["dims"])

    def parts(self):
        """(tensors, metadata): exactly what the file holds."""
        return _program.encode(self.graph.dumps(), self.input_specs, self.dynamic, self.weights,
                               self.producer, self.examples)

    def save(self, path):
        """Write the program to `path` (one file, atomic: temporary file + fsync + rename)."""
        tensors, metadata = self.parts()
        _program.save(path, tensors, metadata)
        return path

    def loaded(self):
        """The runtime's LoadedProgram for this program (validated like a file)."""
        if self._loaded is None:
            tensors, metadata = self.parts()
            self._loaded = _program.from_parts(tensors, metadata, where="<exported program>")
        return self._loaded

    def __call__(self, *inputs):
        return self.loaded()(*[x.numpy() if isinstance(x, Tensor) else x for x in inputs])

    def __repr__(self):
        args = ", ".join(f"{s['path']}: {s['dtype']}[{', '.join(map(str, s['shape']))}]"
                         for s in self.input_specs)
        return f"<eagerc.export.Program ({args}): {len(self.graph.nodes)} ops, {len(self.weights)} weights>"

    def __str__(self):
        return str(self.graph)


# ---------------------------------------------------------------- export

def export(fn_or_module, example_args, *, example_kwargs=None, dynamic_shapes=None,
           include_example_inputs=False, eval_mode=True):
    """Trace `fn_or_module(*example_args, **example_kwargs)` into a Program.

    example_args: a tuple of arguments (a single tensor is taken as one argument); numpy
        arrays are accepted and become tensors. Python scalars are fixed into the program.
    dynamic_shapes: for each argument, None or {axis: "name"} for a tensor (or the same
        structure as the argument, for lists/tuples/dicts of tensors); as a tuple aligned with
        the positional arguments, or a dict keyed by parameter name. A name may be
        ("name", min, max). The same name on several inputs means the same size.
    include_example_inputs: store the example inputs and outputs in the file, so that
        `LoadedProgram.self_check()` can compare.
    eval_mode: trace modules in eval mode (their flags are restored afterwards).
    """
    from ..nn.modules.module import Module
    from ..autograd import no_grad
    if not isinstance(example_args, tuple):
        example_args = (example_args,)
    if isinstance(getattr(fn_or_module, "_orig_mod", None), Module):  # eagerc.compile(model)
        fn_or_module = fn_or_module._orig_mod
    args = tuple(_as_tensors(a) for a in example_args)
    kwargs = {k: _as_tensors(v) for k, v in (example_kwargs or {}).items()}
    if not callable(fn_or_module):
        raise TypeError(f"eagerc.export expects a function or a Module, got {type(fn_or_module).__name__}")
    roots = root_modules(fn_or_module)
    names, paths = {}, {}
    for prefix, root in roots:
        for n, p in root.named_parameters():
            names.setdefault(id(p), prefix + n)
        for n, b in root.named_buffers():
            names.setdefault(id(b), prefix + n)
        for n, m in root.named_modules():
            paths.setdefault(id(m), prefix + n if n else prefix[:-1] or type(m).__name__)
    roots = [m for _, m in roots]

    leaves = tensor_leaves((args, kwargs), [])
    leaf_paths = _leaf_paths(fn_or_module, args, kwargs)
    dyn = _dynamic_axes(dynamic_shapes, fn_or_module, args, kwargs, leaf_paths, leaves)

    flags = [(m, m.training) for root in roots for m in root.modules()]
    # Tracing runs the model: in train mode that updates buffers (batch-norm statistics), once
    # per trace. The program gets the buffers as they were, and so does the model afterwards.
    saved = [(b, _host(b._array)) for root in roots for _, b in root.named_buffers()]
    try:
        if eval_mode:
            for m, _ in flags:
                m.training = False
        with no_grad():
            graph, result, tracer = _trace(fn_or_module, args, kwargs, names, paths or None)
            dims, patches = {}, []
            if dyn:
                dims, patches = _fit_dynamic(fn_or_module, args, kwargs, names, paths or None, graph,
                                             tracer, leaves, dyn)
    finally:
        for m, training in flags:
            m.training = training
        for b, before in saved:
            b._array[...] = before if isinstance(b._array, np.ndarray) else _xp_of(b._array).asarray(before)

    graph, patches = _finalize(graph, patches)
    weights = {}
    for v in graph.externals():
        weights[v.name] = np.array(_host(tracer.externals[v.name]._array), copy=True, order="C")
    specs = []
    for i, (t, path) in enumerate(zip(leaves, leaf_paths)):
        shape = [dyn[i][ax][0] if ax in dyn.get(i, {}) else n for ax, n in enumerate(t._array.shape)]
        specs.append({"name": f"arg{i}", "path": path, "shape": shape, "dtype": graph.args()[i].dtype})
    dynamic = {"dims": {n: {"example": ex, "min": lo, "max": hi} for n, (ex, lo, hi) in dims.items()},
               "patches": patches}
    examples = None
    if include_example_inputs:
        outs, _ = flatten(result, _is_tensor)
        examples = ([_host(t._array) for t in leaves], [_host(t._array) for t in outs])
    import eagerc
    prog = Program(graph, weights, specs, dynamic, eagerc.__version__, examples)
    prog.loaded()  # the runtime's own checks, now rather than when the file is loaded
    return prog


def _host(a):
    return np.array(a if isinstance(a, np.ndarray) else a.get(), copy=True)


def _as_tensors(x):
    if isinstance(x, np.ndarray):
        return dispatch.wrap(x)
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_as_tensors(v) for v in x)
    if isinstance(x, list):
        return [_as_tensors(v) for v in x]
    if isinstance(x, dict):
        return {k: _as_tensors(v) for k, v in x.items()}
    return x


def _trace(fn, args, kwargs, names, paths):
    """Trace, optimise and check one graph; returns (graph, result, tracer)."""
    try:
        graph, result, tracer = trace(fn, args, kwargs, names, paths, fullgraph=True)
    except GraphBreak as e:
        raise ExportError(f"eagerc.export: {e.what} at {e.location}: an exported program cannot depend on "
                          "tensor values (compute it with tensor ops, or pass it as a Python argument)") from None
    for n in graph.nodes:
        if n.op in _program.NOT_IN_PROGRAMS:
            raise ExportError(f"eagerc.export: the function moves tensors between devices at {n.loc}; "
                              "export a program that stays on one device")
    # the clean-up only: the runtime interprets the graph (no fusion groups or memory plan), and
    # scheduling runs last, on the final graph only, since the order it picks may change with sizes
    graph = _prune_externals(_passes.optimize(graph, passes=_passes.CLEANUP))
    for target, _ in graph.mutations:
        if target.endswith(".grad") or not any(k == "external" and v.name == target for k, v in graph.inputs):
            raise ExportError(f"eagerc.export: the function writes into {target!r} in place; exported "
                              "programs may only update module buffers")
    verify(graph)
    return graph, result, tracer


def _finalize(graph, patches):
    """Schedule the graph for low peak memory, drop backend annotations; renumber the patches."""
    schedule = getattr(_passes, "schedule", None)
    final = schedule(graph) if schedule is not None else graph
    final = Graph(final.inputs, final.nodes, final.outputs, final.out_tree, final.mutations)  # the program alone
    verify(final)
    index = {n.out.name: i for i, n in enumerate(final.nodes)}
    for p in patches:
        if p[0][0] == "nodes":
            p[0][1] = index[graph.nodes[p[0][1]].out.name]
    return final, patches


def _prune_externals(graph):
    """Drop external inputs that no node, output or mutation reads (arguments always stay)."""
    used = {v.name for n in graph.nodes for v in n.input_values()}
    used |= {v.name for v in graph.outputs} | {t for t, _ in graph.mutations}
    inputs = [(k, v) for k, v in graph.inputs if k == "arg" or v.name in used]
    return graph.copy(inputs=inputs)


# ---------------------------------------------------------------- argument paths and dynamic specs

def _param_names(fn, n):
    try:
        sig = inspect.signature(fn.forward if hasattr(fn, "forward") and not inspect.isfunction(fn) else fn)
    except (TypeError, ValueError):
        return [f"args[{i}]" for i in range(n)]
    names = []
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            names += [f"{p.name}[{i}]" for i in range(n - len(names))]
            break
    names += [f"args[{i}]" for i in range(len(names), n)]
    return names[:n]


def _walk(x, path, out):
    """Tensor leaves of x with their paths, in pytree.flatten's order."""
    if _is_tensor(x):
        out.append(path)
    elif isinstance(x, (tuple, list)):
        for i, v in enumerate(x):
            _walk(v, f"{path}[{i}]", out)
    elif isinstance(x, dict):
        for k, v in x.items():
            _walk(v, f"{path}[{k!r}]", out)


def _leaf_paths(fn, args, kwargs):
    out = []
    for name, a in zip(_param_names(fn, len(args)), args):
        _walk(a, name, out)
    for k, v in kwargs.items():
        _walk(v, k, out)
    return out


def _dynamic_axes(dynamic_shapes, fn, args, kwargs, leaf_paths, leaves):
    """dynamic_shapes -> {leaf index: {axis: (name, min, max)}}."""
    if dynamic_shapes is None:
        return {}
    names = _param_names(fn, len(args))
    per_arg = {}
    if isinstance(dynamic_shapes, dict):
        for key, spec in dynamic_shapes.items():
            if key in kwargs:
                per_arg[key] = (kwargs[key], spec)
            elif key in names:
                per_arg[key] = (args[names.index(key)], spec)
            else:
                raise ExportError(f"eagerc.export: dynamic_shapes names {key!r}, which is not an argument "
                                  f"(arguments: {names + list(kwargs)})")
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) > len(args):
            raise ExportError(f"eagerc.export: dynamic_shapes has {len(dynamic_shapes)} entries for "
                              f"{len(args)} positional arguments")
        for name, a, spec in zip(names, args, dynamic_shapes):
            per_arg[name] = (a, spec)
    else:
        raise ExportError("eagerc.export: dynamic_shapes must be a tuple (one entry per positional "
                          "argument) or a dict keyed by argument name")
    found = {}
    for name, (a, spec) in per_arg.items():
        _match(a, spec, name, found)
    out = {}
    for path, axes in found.items():
        i = leaf_paths.index(path)
        ndim = leaves[i]._array.ndim
        out[i] = {}
        for ax, dim in axes.items():
            if not isinstance(ax, int) or not -ndim <= ax < ndim:
                raise ExportError(f"eagerc.export: dynamic_shapes[{path}]: axis {ax!r} is out of range for a "
                                  f"{ndim}-d tensor")
            if isinstance(dim, str):
                dim = (dim, 1, None)
            if not (isinstance(dim, tuple) and len(dim) == 3 and isinstance(dim[0], str) and dim[0].isidentifier()):
                raise ExportError(f"eagerc.export: dynamic_shapes[{path}][{ax}] must be a name or "
                                  f"(name, min, max), got {dim!r}")
            out[i][ax % ndim] = dim
    return out


def _match(a, spec, path, found):
    if spec is None:
        return
    if _is_tensor(a):
        if not isinstance(spec, dict):
            raise ExportError(f"eagerc.export: dynamic_shapes for tensor {path} must be {{axis: name}}, "
                              f"got {spec!r}")
        found[path] = spec
    elif isinstance(a, (tuple, list)):
        if not isinstance(spec, (tuple, list)) or len(spec) != len(a):
            raise ExportError(f"eagerc.export: dynamic_shapes for {path} must be a list of {len(a)} entries")
        for i, (x, s) in enumerate(zip(a, spec)):
            _match(x, s, f"{path}[{i}]", found)
    elif isinstance(a, dict):
        if not isinstance(spec, dict):
            raise ExportError(f"eagerc.export: dynamic_shapes for {path} must be a dict")
        for k, s in spec.items():
            if k not in a:
                raise ExportError(f"eagerc.export: dynamic_shapes names {path}[{k!r}], which is not there")
            _match(a[k], s, f"{path}[{k!r}]", found)
    else:
        raise ExportError(f"eagerc.export: dynamic_shapes gives a spec for {path}, which holds no tensor")


# ---------------------------------------------------------------- fitting dynamic sizes

def _fit_dynamic(fn, args, kwargs, names, paths, graph, tracer, leaves, dyn):
    """Trace at other sizes and express every size-dependent integer as c0 + k * prod(dims)."""
    dims = {}  # name -> (example, min, max)
    for i, axes in dyn.items():
        for ax, (name, lo, hi) in axes.items():
            n = leaves[i]._array.shape[ax]
            if name in dims and dims[name][0] != n:
                raise ExportError(f"eagerc.export: dynamic dimension {name!r} has size {dims[name][0]} in one "
                                  f"input and {n} in another")
            if n < 2:
                raise ExportError(f"eagerc.export: dynamic dimension {name!r} has example size {n}; use an "
                                  "example of size >= 2 so that the trace does not specialise on it")
            if not (isinstance(lo, int) and lo >= 0 and (hi is None or (isinstance(hi, int) and hi >= n))
                    and lo <= n):
                raise ExportError(f"eagerc.export: dynamic dimension {name!r}: need 0 <= min <= example "
                                  f"({n}) <= max, got min={lo!r}, max={hi!r}")
            dims[name] = (n, lo, hi)
    base = {n: ex for n, (ex, _, _) in dims.items()}
    bindings = [dict(base, **{n: base[n] + 1}) for n in dims] + [{n: v + 3 for n, v in base.items()}]
    for b in bindings:
        for n, v in b.items():
            if dims[n][2] is not None and v > dims[n][2]:
                raise ExportError(f"eagerc.export: dynamic dimension {n!r} needs a max of at least {v} "
                                  "(export traces a few larger sizes to fit the program)")
    base_json = json.loads(graph.dumps())
    others = []
    for b in bindings:
        new_leaves = iter([_resized(t, dyn.get(i, {}), b) for i, t in enumerate(leaves)])
        a2, k2 = _replace_leaves((args, kwargs), new_leaves)
        g2, _, tr2 = _trace(fn, a2, k2, names, paths)
        for name, t in tracer.externals.items():
            t2 = tr2.externals.get(name)
            if t2 is not None and t2._array.shape == t._array.shape and not np.array_equal(_host(t._array), _host(t2._array)):
                raise ExportError(f"eagerc.export: tensor {name!r} that the function reads changes with the "
                                  "dynamic sizes; compute it inside the function with tensor ops")
        others.append(json.loads(g2.dumps()))
    diffs = {}
    _diff(base_json, others, [], diffs, base_json)
    patches = []
    for path, values in diffs.items():
        patches.append(_fit(path, base_json, base, values, list(dims), bindings))
    return dims, patches


def _replace_leaves(x, new):
    """x with its tensors replaced, in tensor_leaves order, by the items of the iterator `new`."""
    if _is_tensor(x):
        return next(new)
    if isinstance(x, tuple):
        vals = [_replace_leaves(v, new) for v in x]
        return type(x)(*vals) if hasattr(x, "_fields") else tuple(vals)
    if isinstance(x, list):
        return [_replace_leaves(v, new) for v in x]
    if isinstance(x, dict):
        return {k: _replace_leaves(v, new) for k, v in x.items()}
    return x


def _resized(t, axes, binding):
    a = _host(t._array)
    for ax, (name, _, _) in axes.items():
        a = np.take(a, np.arange(binding[name]) % a.shape[ax], axis=ax)
    if not isinstance(t._array, np.ndarray):
        a = _xp_of(t._array).asarray(a)
    return dispatch.wrap(a)


def _where(base_json, path):
    if len(path) >= 2 and path[0] == "nodes" and isinstance(path[1], int) and path[1] < len(base_json["nodes"]):
        n = base_json["nodes"][path[1]]
        return f" at op {path[1]} ({n['op']} -> {n['out']['name']}{', ' + n['loc'] if n.get('loc') else ''})"
    return f" at {'/'.join(map(str, path))}"


def _diff(a, others, path, diffs, root):
    """Walk the base graph JSON and the others in parallel; collect int leaves that differ."""
    if isinstance(a, dict):
        if any(not isinstance(o, dict) or set(o) != set(a) for o in others):
            raise _structure_error(root, path)
        random_attrs = len(path) == 3 and path[0] == "nodes" and path[2] == "attrs" and {"seed", "offset"} <= set(a)
        for k in a:
            if k == "loc" or (random_attrs and k in ("seed", "offset")):
                continue  # random ops keep the base trace's draw
            _diff(a[k], [o[k] for o in others], path + [k], diffs, root)
    elif isinstance(a, list):
        if any(not isinstance(o, list) or len(o) != len(a) for o in others):
            raise _structure_error(root, path)
        for i, x in enumerate(a):
            _diff(x, [o[i] for o in others], path + [i], diffs, root)
    elif all(type(o) is type(a) and o == a for o in others):
        return
    elif isinstance(a, int) and not isinstance(a, bool) and all(type(o) is int for o in others):
        if not _program._allowed_path(path) or (path[0] == "inputs" and root["inputs"][path[1]]["kind"] != "arg"):
            raise ExportError(f"eagerc.export: a value that depends on the dynamic sizes{_where(root, path)} "
                              f"({'/'.join(map(str, path))}) cannot be part of a program; make that size static")
        diffs[tuple(path)] = [a] + list(others)
    else:
        raise _structure_error(root, path)


def _structure_error(root, path):
    return ExportError(f"eagerc.export: the program's structure depends on the dynamic sizes (first "
                       f"difference{_where(root, path)}); make that dimension static or avoid branching on it")


def _fit(path, root, base, values, names, bindings):
    v0, per_dim, check = values[0], values[1:-1], values[-1]
    dep = [n for n, v in zip(names, per_dim) if v != v0]
    prod0 = 1
    for n in dep:
        prod0 *= base[n]
    k = None
    ok = bool(dep)
    for n, v in zip(names, per_dim):
        if n in dep:
            rest = prod0 // base[n]
            if (v - v0) % rest:
                ok = False
            elif k is None:
                k = (v - v0) // rest
            elif k != (v - v0) // rest:
                ok = False
    if ok:
        c0 = v0 - k * prod0
        ok = k != 0 and SizeExpr.affine(c0, k, dep)(bindings[-1]) == check
    if not ok:
        sizes = ", ".join(f"{v} at {b}" for v, b in zip(values[1:], bindings))
        raise ExportError(f"eagerc.export: the integer {'/'.join(map(str, path))}{_where(root, path)} depends on "
                          f"the dynamic sizes in a way eagerc cannot express as c0 + k * product of sizes "
                          f"({v0} at {base}, {sizes}); make that dimension static")
    return [list(path), c0, k, dep]
