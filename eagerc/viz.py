"""Pictures of graphs: compiled programs (the IR) and eager backward graphs, as graphviz DOT.

    import eagerc.viz
    g = eagerc.viz.autograd_graph(loss, params=dict(model.named_parameters()))
    g.render("backward.svg")          # needs graphviz's `dot` program; g.source is the DOT text
    g                                 # in Jupyter: drawn inline (_repr_svg_) when `dot` exists

    d = eagerc.viz.program_graph(prog.graph, depth=2)   # what `eagerc viz` draws

The DOT text is written here (no Python graphviz package needed); rendering runs the `dot`
program in a subprocess. Without it, `render` writes the DOT file and raises
`GraphvizNotFound`, whose message says how to install graphviz.

Program pictures (`program_graph`): one vertex per op (its name and key attributes),
small named vertices for parameters, edges labelled with the value's type (`f32[8,16]`).
The module hierarchy (Node.module, e.g. "layers.0.attn") becomes nested clusters; `depth=N`
draws modules deeper than N as one vertex each. Fusion groups (graph.fusion_groups)
are clusters inside the innermost module holding all their members. Large graphs
collapse repeated blocks: sibling modules whose ops are identical (a ModuleList of
transformer layers) are drawn once, labelled "x12", and edges that would cross many
ranks (a mask or an embedding read by every layer) become small reference boxes next to
their reader -- dot's time goes into long edges. `times` (value name -> seconds, from
`time_nodes`) colours the ops by measured time. docs/cli.md has the measurements.
"""
import os
import shutil
import statistics
import subprocess
import time

__all__ = ["Dot", "GraphvizNotFound", "program_graph", "autograd_graph", "time_nodes", "dot_program",
           "output_paths", "op_summary", "INSTALL_HINT"]

INSTALL_HINT = ("install graphviz (apt-get install graphviz, brew install graphviz, "
                "conda install graphviz, or https://graphviz.org/download/)")

LARGE = 300          # drawn vertices above which repeated blocks are collapsed (repeats="auto")
PARAMS_MAX = 1000    # op boxes above which parameter boxes are left out (show_params=None)
MIN_SPAN = 6         # edges spanning at most this many ranks are always drawn
_FORMATS = {"svg", "png", "pdf", "dot", "gv"}


class GraphvizNotFound(RuntimeError):
    """graphviz's `dot` program is not on PATH."""


def dot_program():
    """Path of graphviz's `dot` program, or None (EAGERC_DOT overrides the lookup)."""
    env = os.environ.get("EAGERC_DOT")
    if env is not None:
        return env or None
    return shutil.which("dot")


class Dot:
    """DOT source with the few methods of graphviz.Digraph that matter here."""

    def __init__(self, source, stats=None):
        self.source = source
        self.stats = stats or {}   # what was drawn: vertices, edges, collapsed repeats...

    def __str__(self):
        return self.source

    def __repr__(self):
        return f"<eagerc.viz.Dot: {self.stats.get('vertices', '?')} vertices>"

    def pipe(self, format="svg", timeout=None):
        """The rendered bytes in `format` (svg, png, pdf...)."""
        exe = dot_program()
        if exe is None:
            raise GraphvizNotFound(f"graphviz's `dot` program is not installed; {INSTALL_HINT}")
        try:
            r = subprocess.run([exe, f"-T{format}"], input=self.source.encode(), capture_output=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"dot did not finish within {timeout} s (try a smaller --depth)") from None
        if r.returncode != 0:
            err = r.stderr.decode(errors="replace").strip().splitlines()
            why = f"crashed (signal {-r.returncode})" if r.returncode < 0 else f"failed (exit {r.returncode})"
            raise RuntimeError(f"dot {why}: {err[-1] if err else 'no message'}; a smaller picture "
                               "(--depth N, --repeats collapse) may help")
        return r.stdout

    def render(self, path, format=None, timeout=None):
        """Write the picture to `path`; the format is its extension (svg, png, pdf, dot/gv).

        Without `dot`, writes the DOT text beside it (path with .dot) and raises
        GraphvizNotFound naming that file."""
        path = os.fspath(path)
        fmt = (format or os.path.splitext(path)[1][1:] or "svg").lower()
        if fmt not in _FORMATS:
            raise ValueError(f"cannot render to {fmt!r}: use .svg, .png, .pdf or .dot")
        if fmt in ("dot", "gv"):
            _write(path, self.source.encode())
            return path
        if dot_program() is None:
            dot_path = os.path.splitext(path)[0] + ".dot"
            _write(dot_path, self.source.encode())
            raise GraphvizNotFound(f"graphviz's `dot` program is not installed: wrote {dot_path} instead of "
                                   f"{path}; {INSTALL_HINT}, or render it with `dot -T{fmt} {dot_path}`")
        _write(path, self.pipe(fmt, timeout))
        return path

    def _repr_svg_(self):
        if dot_program() is None:
            return None
        try:
            return self.pipe("svg", timeout=60).decode()
        except RuntimeError:
            return None


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ================================================================ DOT helpers

def _q(s):
    """A DOT string literal (label text: newlines become \\n, centred lines)."""
    s = str(s).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + s.replace("\n", "\\n") + '"'


def _attrs(d):
    return "[" + " ".join(f"{k}={v if isinstance(v, (int, float)) else _q(v)}" for k, v in d.items()
                          if v is not None) + "]"


def _short(text, n):
    return text if len(text) <= n else text[:n - 1] + "…"


def _type_str(shape, dtype):
    from .runtime.ir import short_dtype
    return f"{short_dtype(dtype)}[{','.join(str(s) for s in shape)}]"


def _fmt_time(s):
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} µs"


# ================================================================ key attributes of an op

_DEFAULTS = {"dilation": 1, "groups": 1, "ceil_mode": False, "keepdim": False, "count_include_pad": True,
             "divisor_override": None, "padding_idx": None, "output_padding": 0, "approximate": "none",
             "step": 1, "exact": False, "scales": None, "accumulate": False, "label_smoothing": 0.0,
             "ignore_index": -100, "weight": None}
_HIDDEN = {"seed", "offset"}   # random ops: the draw's identity, not something to read


def _compact(v):
    """(1, 1) -> 1; ((1, 1), (1, 1)) -> 1; lists as tuples."""
    if isinstance(v, (list, tuple)):
        items = [_compact(x) for x in v]
        if items and all(x == items[0] for x in items) and len(items) > 1 and not isinstance(items[0], tuple):
            return items[0]
        return tuple(items)
    return v


def _fmt_value(v):
    if isinstance(v, tuple):
        return "(" + ",".join(_fmt_value(x) for x in v) + ")"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def op_summary(node):
    """One or two lines describing a node: its op, the sizes its weights imply, key attributes."""
    extra = []
    ins = node.inputs
    if node.op in ("conv2d", "conv_transpose2d") and len(ins) >= 2 and hasattr(ins[1], "shape"):
        w = ins[1].shape
        if len(w) == 4:
            cin, cout = (w[1], w[0]) if node.op == "conv2d" else (w[0], w[1])
            extra.append(f"{cin}→{cout} k{w[2]}×{w[3]}")
    elif node.op == "linear" and len(ins) >= 2 and hasattr(ins[1], "shape") and len(ins[1].shape) == 2:
        extra.append(f"{ins[1].shape[1]}→{ins[1].shape[0]}")
    parts = []
    for k, v in node.attrs.items():
        if k in _HIDDEN:
            continue
        c = _compact(v)
        if k in _DEFAULTS and c == _compact(_DEFAULTS[k]):
            continue
        if node.op in ("conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d") and k == "padding" and c == 0:
            continue
        if node.op in ("conv2d", "conv_transpose2d") and k == "stride" and c == 1:
            continue
        if node.op in ("sum", "mean", "amax", "amin", "prod", "all", "any") and k == "dim" and v is None:
            continue
        parts.append(f"{k}={_short(_fmt_value(c), 28)}")
    consts = [_fmt_value(x) for x in ins if not hasattr(x, "shape") and x is not None]
    if consts and not parts:
        parts.append(", ".join(_short(c, 12) for c in consts[:2]))
    lines = [node.op + (" " + extra[0] if extra else "")]
    if parts:
        shown = parts[:3] + (["…"] if len(parts) > 3 else [])
        lines.append(" ".join(shown))
    return "\n".join(lines)


# ================================================================ module paths

def _root_name(nodes):
    """The root module's name when the exporter named it by its class (`GPT`): a path without
    dots, starting upper-case, that is no other path's parent. Its ops are top-level ones."""
    paths = {n.module for n in nodes if n.module}
    parents = {p.split(".", 1)[0] for p in paths if "." in p}
    roots = [p for p in paths if "." not in p and p[:1].isupper() and p not in parents]
    return roots[0] if len(roots) == 1 else None


def _parent(path):
    return path.rsplit(".", 1)[0] if "." in path else ""


def _depth(path):
    return 0 if not path else path.count(".") + 1


def _prefix(path, n):
    return ".".join(path.split(".")[:n])


def _ancestors(path):
    """"a.b.c" -> ["a", "a.b", "a.b.c"]: the path and the modules above it (the root "" left out)."""
    parts = path.split(".") if path else []
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _lca(paths):
    """The innermost module holding every path (compared part by part, not by characters)."""
    return ".".join(os.path.commonprefix([p.split(".") if p else [] for p in paths]))


# ================================================================ repeated blocks

def _find_repeats(graph, mods, param_mod):
    """Sibling modules with identical ops. Returns (alias: node index -> representative node
    index, param_alias: external name -> representative's name or None, reps: representative
    path -> list of all instance paths, instance: node index -> (rep path, instance number))."""
    from .compiler.passes.util import attrs_key
    nodes = graph.nodes
    producer = {n.out.name: i for i, n in enumerate(nodes)}
    members = {}                     # module path -> node indices (its whole subtree)
    for i, m in enumerate(mods):
        for a in _ancestors(m):
            members.setdefault(a, []).append(i)
    children = {}
    for p in members:
        children.setdefault(_parent(p), []).append(p)
    for p in children:
        children[p].sort(key=lambda c: members[c][0])

    def signature(path):
        idx = members[path]
        local = {nodes[i].out.name: k for k, i in enumerate(idx)}
        cut = len(path) + 1
        sig = []
        for i in idx:
            n = nodes[i]
            ins = []
            for x in n.inputs:
                if not hasattr(x, "shape"):
                    ins.append(("c", repr(x)))
                elif x.name in local:
                    ins.append(("l", local[x.name]))
                elif x.name not in producer and param_mod.get(x.name, "").startswith(path + "."):
                    ins.append(("p", x.name[cut:]))
                elif x.name not in producer and param_mod.get(x.name) == path:
                    ins.append(("p", x.name[cut:]))
                else:
                    ins.append(("x", x.shape, x.dtype))
            sig.append((n.op, attrs_key(n.attrs), n.out.shape, n.out.dtype, mods[i][cut:], tuple(ins)))
        return tuple(sig)

    alias, param_alias, reps, instance = {}, {}, {}, {}
    stack = [""]
    while stack:
        parent = stack.pop()
        runs = []                    # runs of numbered siblings (k, k+1, ...) with identical ops
        for c in children.get(parent, ()):
            last = c.rsplit(".", 1)[-1]
            if not last.isdigit():
                stack.append(c)
                continue
            prev = runs[-1][-1] if runs else None
            if (prev is not None and _parent(prev) == parent and int(prev.rsplit(".", 1)[-1]) + 1 == int(last)
                    and len(members[prev]) == len(members[c]) and signature(prev) == signature(c)):
                runs[-1].append(c)
            else:
                runs.append([c])
        for paths in runs:
            if len(paths) < 2:
                stack.extend(paths)
                continue
            rep = paths[0]
            reps[rep] = paths
            stack.append(rep)       # the representative may hold repeats of its own
            for k, p in enumerate(paths):
                for i, j in zip(members[p], members[rep]):
                    instance[i] = (rep, k)
                    if k:
                        alias[i] = j
                if k:
                    cut = len(p) + 1
                    for name, pm in param_mod.items():
                        if pm == p or pm.startswith(p + "."):
                            twin = rep + "." + name[cut:]
                            param_alias[name] = twin if twin in param_mod else None
    return alias, param_alias, reps, instance


# ================================================================ program pictures

def program_graph(graph, *, depth=None, repeats="auto", times=None, value_shapes=None, arg_labels=None,
                  classes=None, title=None, show_params=None, large=LARGE):
    """DOT picture of a Graph (see the module docstring). Returns a Dot.

    depth: draw modules deeper than `depth` as one vertex each (None: no limit; 0: every
        top-level module is one vertex).
    repeats: "auto" (collapse repeated sibling modules when more than `large` vertices would
        be drawn), "collapse" or "expand".
    times: value name -> seconds (see time_nodes): vertices coloured and labelled by time.
    value_shapes: value name -> shape with symbolic sizes, shown instead of the example sizes.
    arg_labels: argument value name -> label (e.g. the parameter name "x").
    classes: module path -> class name, shown in cluster labels.
    show_params: draw parameter boxes (None: unless more than PARAMS_MAX op boxes are drawn).
    """
    if repeats not in ("auto", "collapse", "expand"):
        raise ValueError(f"repeats must be 'auto', 'collapse' or 'expand', got {repeats!r}")
    nodes = graph.nodes
    value_shapes = value_shapes or {}
    arg_labels = arg_labels or {}
    classes = dict(classes or {})
    root = _root_name(nodes)
    if root is not None:
        classes.setdefault("", classes.pop(root, root))
    if title is None:
        title = classes.get("")

    def strip(m):
        return "" if not m or m == root else m
    mods = [strip(n.module) for n in nodes]
    known = {a for m in mods for a in _ancestors(m)}
    externals = graph.externals()
    external = {v.name: v for v in externals}
    param_mod = {}
    for v in externals:
        owner = _parent(v.name)
        param_mod[v.name] = owner if owner in known else ""
    producer = {n.out.name: i for i, n in enumerate(nodes)}
    users = graph.users()

    def collapsed_path(m):
        if depth is not None and _depth(m) > depth:
            return _prefix(m, depth + 1)
        return None

    # repeated blocks
    alias, param_alias, reps, instance = {}, {}, {}, {}
    if repeats != "expand":
        estimate = len({collapsed_path(m) or i for i, m in enumerate(mods)})
        if repeats == "collapse" or estimate > large:
            alias, param_alias, reps, instance = _find_repeats(graph, mods, param_mod)

    # vertices: op nodes (or the collapsed module holding them), args, params, outputs
    vertex_of = {}       # node index -> vertex id
    verts = {}           # vertex id -> dict(label, cluster, kind, ops, time, tooltip)
    for i, n in enumerate(nodes):
        j = alias.get(i, i)
        cp = collapsed_path(mods[j])
        if cp is not None:
            vid = "m:" + cp
            v = verts.get(vid)
            if v is None:
                v = verts[vid] = {"kind": "module", "cluster": _parent(cp), "path": cp, "ops": {}, "time": 0.0,
                                  "nodes": 0, "pos": j}
            if i == j:
                v["ops"][n.op] = v["ops"].get(n.op, 0) + 1
                v["nodes"] += 1
        else:
            vid = "n" + str(j)
            v = verts.get(vid)
            if v is None:
                nd = nodes[j]
                tip = f"{nd.out.name}: {_type_str(nd.out.shape, nd.out.dtype)} = {nd.op}"
                if nd.loc:
                    tip += f"  # {nd.loc}"
                v = verts[vid] = {"kind": "op", "cluster": mods[j], "label": op_summary(nd), "time": 0.0,
                                  "tooltip": tip, "pos": j}
        vertex_of[i] = vid
        if times is not None:
            v["time"] += times.get(n.out.name, 0.0)

    params_hidden = 0
    if show_params is None:
        show_params = len(verts) <= PARAMS_MAX
        params_hidden = 0 if show_params else len(externals)

    # fusion groups (only those fully drawn as single ops)
    fusion_of = {}
    groups = []
    for g in graph.fusion_groups or ():
        idx = [producer[m] for m in g if m in producer]
        drawn = [i for i in idx if i not in alias and vertex_of[i].startswith("n")]
        if len(drawn) < 2:
            continue
        gid = len(groups)
        groups.append((gid, _lca(mods[i] for i in drawn), len(g)))
        for i in drawn:
            fusion_of[vertex_of[i]] = gid

    def param_vertex(name):
        name = param_alias.get(name, name)
        if name is None:
            return None
        owner = param_mod.get(name, "")
        cp = collapsed_path(owner) if owner else None
        if cp is not None:
            targets = {vertex_of[producer[u.out.name]] for u in users.get(name, ())}
            if targets <= {"m:" + cp}:
                return "m:" + cp        # read only inside its collapsed module: part of it
            owner = _parent(cp)
        vid = "p:" + name
        if vid not in verts:
            v = external[name]
            label = name[len(owner) + 1:] if owner else name
            pos = min((producer[u.out.name] for u in users.get(name, ())), default=0)
            verts[vid] = {"kind": "param", "cluster": owner, "label": label, "pos": alias.get(pos, pos),
                          "tooltip": f"{name}: {_type_str(v.shape, v.dtype)}"}
        return vid

    arg_vertex = {}
    for k, (kind, v) in enumerate(graph.inputs):
        if kind == "arg":
            vid = "a" + str(k)
            arg_vertex[v.name] = vid
            label = arg_labels.get(v.name, v.name)
            verts[vid] = {"kind": "arg", "cluster": "", "label": f"{label}\n{_vtype(v, value_shapes)}",
                          "tooltip": f"input {v.name}", "pos": -1}

    def source_of(name):
        if name in producer:
            return vertex_of[producer[name]]
        if name in arg_vertex:
            return arg_vertex[name]
        if not show_params:
            return None
        return param_vertex(name)

    edges = {}           # (src, dst, type label) -> attrs
    for i, n in enumerate(nodes):
        dst = vertex_of[i]
        for x in n.input_values():
            src = source_of(x.name)
            if src is None or src == dst:
                continue
            label = _vtype(x, value_shapes)
            key = (src, dst, label)   # one edge per vertex pair and type (instances of a repeat merge)
            if key in edges:
                continue
            a, b = instance.get(producer.get(x.name, -1)), instance.get(i)
            cross = a is not None and b is not None and a[0] == b[0] and a[1] != b[1]
            edges[key] = {"label": label, "cross": cross, "value": x.name}
    where = output_paths(graph.out_tree)
    ends = ([("o" + str(k), "output", where.get(k, f"output {k}"), v, {}) for k, v in enumerate(graph.outputs)]
            + [("u" + str(k), "mutation", f"{target} ←", v, {"style": "dashed"})
               for k, (target, v) in enumerate(graph.mutations)])
    for vid, kind, label, v, style in ends:     # what the program returns, and what it updates in place
        verts[vid] = {"kind": kind, "cluster": "", "label": label, "pos": len(nodes)}
        src = source_of(v.name)
        if src is not None:
            edges[(src, vid, v.name)] = {"label": _vtype(v, value_shapes), "cross": False, **style}

    edges = _ghost_long_edges(verts, edges)

    # module vertices: labels now that counts are known
    for vid, v in verts.items():
        if v["kind"] == "module":
            v["label"] = _module_label(v, classes, reps)
            v["tooltip"] = f"module {v['path']}: {v['nodes']} ops"

    total = sum(v.get("time", 0.0) for v in verts.values())
    header = _title(title, len(nodes), total if times is not None else None)
    source, n_clusters = _write_dot(verts, edges, groups, fusion_of, classes, reps, header,
                                    _time_colours(verts) if times is not None else {}, total)
    stats = {"vertices": len(verts), "edges": len(edges), "nodes": len(nodes),
             "repeats": {rep: len(paths) for rep, paths in reps.items()}, "fusion_groups": len(groups),
             "clusters": n_clusters, "params_hidden": params_hidden}
    return Dot(source, stats)


def _write_dot(verts, edges, groups, fusion_of, classes, reps, header, colour, total):
    """The DOT text: module clusters nested by path (in program order), fusion groups inside
    their module, then the edges. Returns (text, number of module clusters)."""
    clusters = {a for c in {v["cluster"] for v in verts.values()} | {lca for _, lca, _ in groups}
                for a in _ancestors(c)}   # module paths with boxes, and their ancestors
    out = ["digraph eagerc {",
           "  graph [rankdir=TB fontname=Helvetica fontsize=11 newrank=true"
           + (" nslimit=4 mclimit=0.3 searchsize=10" if len(verts) > 500 else "")   # fewer layout passes
           + f" label={_q(header)} labelloc=t];",
           "  node [fontname=Helvetica fontsize=10 shape=box style=\"rounded,filled\" fillcolor=white height=0.3];",
           "  edge [fontname=Helvetica fontsize=8 color=\"#555555\" fontcolor=\"#333333\" arrowsize=0.6];"]
    by_cluster = {}
    for vid, v in verts.items():
        key = ("f", fusion_of[vid]) if vid in fusion_of else ("m", v["cluster"])
        by_cluster.setdefault(key, []).append(vid)
    ids = {vid: f"v{k}" for k, vid in enumerate(verts)}
    fusion_by_parent = {}
    for gid, lca, size in groups:
        fusion_by_parent.setdefault(lca, []).append((gid, size))
    first = {}           # cluster -> position of its first box: clusters in program order
    for k, v in enumerate(verts.values()):
        for a in _ancestors(v["cluster"]):
            first.setdefault(a, k)
    kids = {}
    for c in clusters:
        kids.setdefault(_parent(c), []).append(c)
    drawn = 0

    def emit_vertex(vid, indent):
        out.append(indent + ids[vid] + " " + _attrs(_vertex_style(verts[vid], colour.get(vid), total)))

    def emit_cluster(path, indent):
        nonlocal drawn
        for vid in by_cluster.get(("m", path), ()):
            emit_vertex(vid, indent)
        for gid, size in fusion_by_parent.get(path, ()):
            out.append(f"{indent}subgraph cluster_f{gid} {{")
            out.append(f"{indent}  label={_q(f'fusion{gid} ({size} ops)')} style=\"dashed,filled\" "
                       f"color=\"#d9534f\" fillcolor=\"#fdf2f2\" fontcolor=\"#d9534f\";")
            for vid in by_cluster.get(("f", gid), ()):
                emit_vertex(vid, indent + "  ")
            out.append(indent + "}")
        for c in sorted(kids.get(path, ()), key=lambda c: first.get(c, len(verts))):
            inside = by_cluster.get(("m", c), ())
            if len(inside) == 1 and not kids.get(c) and not fusion_by_parent.get(c):
                v = verts[inside[0]]      # a module with one box: a line of that box, not a cluster
                v["label"] = _cluster_label(c, classes, reps) + "\n" + v["label"]
                emit_vertex(inside[0], indent)
                continue
            drawn += 1
            out.append(f"{indent}subgraph {_q('cluster_m:' + c)} {{")
            out.append(f"{indent}  label={_q(_cluster_label(c, classes, reps))} style=\"rounded,filled\" "
                       f"color=\"#8fa9c7\" fillcolor={_q(_shade(_depth(c)))} labeljust=l;")
            emit_cluster(c, indent + "  ")
            out.append(indent + "}")
    emit_cluster("", "  ")
    for (src, dst, _), e in edges.items():
        attrs = {"label": e["label"]}
        if e.get("cross"):       # from one repetition of a block to the next: no layout constraint
            attrs.update(style="dashed", constraint="false", color="#999999")
        elif e.get("style"):
            attrs["style"] = e["style"]
        out.append(f"  {ids[src]} -> {ids[dst]} {_attrs(attrs)}")
    out.append("}")
    return "\n".join(out) + "\n", drawn


def _ghost_long_edges(verts, edges, min_span=MIN_SPAN):
    """Replace the longest edges by a small reference box next to the reader ("t21 from
    blocks.0.attn") until long edges cross at most 200 + boxes/4 ranks in total: dot lays out
    every rank an edge crosses, so a few values read all over a big graph (a causal mask,
    tied weights) can make it take minutes (measured: a 2,000-op GPT, 5-30 s -> 1-2 s)."""
    preds = {}
    for (src, dst, _), e in edges.items():
        if not e.get("cross"):
            preds.setdefault(dst, []).append(src)
    rank = {}
    for vid in sorted(verts, key=lambda v: verts[v]["pos"]):   # program order is topological
        ins = [rank[u] + 1 for u in preds.get(vid, ()) if rank.get(u) is not None]
        rank[vid] = max(ins, default=0) if vid in preds else None
    for (src, dst, _), e in edges.items():     # sources (parameters, inputs) sit above their first reader
        if src not in preds and not e.get("cross") and rank[dst] is not None:
            r = rank[dst] - 1
            rank[src] = r if rank[src] is None else min(rank[src], r)
    rank = {v: r or 0 for v, r in rank.items()}
    spans = sorted(((rank[dst] - rank[src], key) for key in edges
                    for src, dst, _ in [key] if not edges[key].get("cross")), reverse=True)
    excess = sum(max(0, span - 1) for span, _ in spans)
    budget = 200 + len(verts) // 4
    ghosted = set()
    for span, key in spans:
        if excess <= budget or span <= min_span:
            break
        ghosted.add(key)
        excess -= span - 1
    out = {}
    for key, e in edges.items():
        if key not in ghosted:
            out[key] = e
            continue
        src, dst, label = key
        s, d = verts[src], verts[dst]
        gid = f"g:{src}:{e.get('value')}:{dst}"
        if gid not in verts:
            where = s.get("path") or s["cluster"] or ("input" if s["kind"] == "arg" else "top level")
            name = e.get("value") or ""
            verts[gid] = {"kind": "ref", "cluster": d["cluster"], "pos": d["pos"],
                          "label": f"{name} from {where}" if s["kind"] != "param" else name,
                          "tooltip": f"{name}, computed earlier (in {where}); drawn here to keep the layout fast"}
        out[(gid, dst, label)] = e
    return out


def _vtype(v, value_shapes):
    return _type_str(value_shapes.get(v.name, v.shape), v.dtype)


def output_paths(out_tree):
    """output index -> where it sits in the returned structure: "output", "output[0]", ..."""
    paths = {}

    def walk(t, path):
        (kind, val), = t.items()
        if kind == "t":
            paths[val] = path
        elif kind in ("tuple", "list"):
            for j, x in enumerate(val):
                walk(x, f"{path}[{j}]")
        elif kind == "dict":
            for key, x in val:
                walk(x, f"{path}[{key!r}]")
    try:
        walk(out_tree, "output")
    except (AttributeError, ValueError, TypeError):
        pass
    return paths


def _title(title, n, total):
    parts = [title] if title else []
    parts.append(f"{n} ops")
    if total is not None:
        parts.append(f"{_fmt_time(total)} per call (sum over ops)")
    return " · ".join(parts)


def _rep_suffix(path, reps):
    paths = reps.get(path)
    if not paths:
        return ""
    return f" … {paths[-1].rsplit('.', 1)[-1]}  ×{len(paths)}"


def _cluster_label(path, classes, reps):
    cls = classes.get(path)
    return path + _rep_suffix(path, reps) + (f"  ({cls})" if cls else "")


def _module_label(v, classes, reps):
    path = v["path"]
    lines = [path + _rep_suffix(path, reps)]
    if classes.get(path):
        lines.append(classes[path])
    ops = sorted(v["ops"].items(), key=lambda kv: -kv[1])
    if ops:
        desc = ", ".join(f"{c}×{op}" if c > 1 else op for op, c in ops[:3])
        lines.append(_short(desc + (", …" if len(ops) > 3 else ""), 40))
    return "\n".join(lines)


def _shade(depth):
    shades = ["#ffffff", "#f3f7fc", "#e7eff8", "#dce7f4", "#d1dff0", "#c6d7ec"]
    return shades[min(depth, len(shades) - 1)]


def _time_colours(verts):
    """vertex id -> fill colour from white (fast) to red (the slowest vertex)."""
    ts = [v.get("time", 0.0) for v in verts.values() if v["kind"] in ("op", "module")]
    top = max(ts, default=0.0)
    if top <= 0:
        return {}
    palette = ["#fff7ec", "#fee8c8", "#fdd49e", "#fdbb84", "#fc8d59", "#ef6548", "#d7301f", "#b30000",
               "#7f0000"]
    out = {}
    for vid, v in verts.items():
        if v["kind"] in ("op", "module"):
            f = v.get("time", 0.0) / top
            out[vid] = palette[min(len(palette) - 1, int(f * (len(palette) - 1) + 0.5))]
    return out


_VERTEX_STYLES = {   # kind -> DOT attributes besides label and tooltip ("fillcolor" of op / module: by time)
    "op": {"fillcolor": "white"},
    "module": {"shape": "box3d", "style": "filled", "fillcolor": "#e8eef7"},
    "param": {"shape": "box", "style": "filled", "fillcolor": "#eeeeee", "color": "#bbbbbb", "fontsize": 7,
              "height": 0.15, "margin": "0.04,0.01"},
    "arg": {"shape": "ellipse", "style": "filled", "fillcolor": "#cfe8ff"},
    "output": {"shape": "ellipse", "style": "filled", "fillcolor": "#d4f4d4"},
    "ref": {"shape": "box", "style": "dashed,rounded", "color": "#999999", "fontcolor": "#666666", "fontsize": 7,
            "height": 0.15},
    "mutation": {"shape": "ellipse", "style": "dashed"},
}


def _vertex_style(v, fill, total):
    label = v["label"]
    if fill is not None:
        t = v.get("time", 0.0)
        label += "\n" + _fmt_time(t) + (f" · {t / total:.0%}" if total > 0 else "")
    s = {"label": label, "tooltip": v.get("tooltip"), **_VERTEX_STYLES[v["kind"]]}
    if fill is not None and v["kind"] in ("op", "module"):
        s["fillcolor"] = fill
        if fill in ("#d7301f", "#b30000", "#7f0000"):
            s["fontcolor"] = "white"
    return s


# ================================================================ timing

def time_nodes(graph, env, repeats=5, warmup=1):
    """Run `graph` with the runtime's executor and numpy kernels, timing each node; returns
    (value name -> median seconds, [seconds per whole run]). env: input name -> array
    (arguments and externals)."""
    from .runtime.executor import Plan
    plan = Plan(graph)
    samples = {n.out.name: [] for n in graph.nodes}
    clock = time.perf_counter

    def observe(node, kernel, args, attrs):
        t0 = clock()
        r = kernel(*args, **attrs)
        samples[node.out.name].append(clock() - t0)
        return r
    runs = []
    for r in range(warmup + repeats):
        t0 = clock()
        plan(dict(env), observe=observe)
        runs.append(clock() - t0)
    return {name: statistics.median(t[warmup:]) for name, t in samples.items() if t[warmup:]}, runs[warmup:]


# ================================================================ autograd graphs

def autograd_graph(output, params=None, show_saved=True, show_attrs=False):
    """The backward graph of an eager tensor (or a list/tuple of them), like torchviz.

    Grey boxes are backward nodes (`MulBackward0`), blue boxes the leaf tensors gradients
    accumulate into (named from `params`, a dict or iterable of (name, tensor), e.g.
    model.named_parameters()), orange boxes the tensors saved for backward with their shapes
    (dashed edges), green the output(s). Returns a Dot (`.source`, `.render(path)`,
    `_repr_svg_`)."""
    from ._tensor import Tensor
    outputs = list(output) if isinstance(output, (list, tuple)) else [output]
    for t in outputs:
        if not isinstance(t, Tensor):
            raise TypeError(f"autograd_graph expects tensors, got {type(t).__name__}")
    names = {}
    if params is not None:
        items = params.items() if isinstance(params, dict) else params
        for name, p in items:
            names[id(p)] = name

    lines = ["digraph autograd {",
             "  graph [rankdir=BT fontname=Helvetica fontsize=11];",
             "  node [fontname=Helvetica fontsize=10 shape=box style=\"rounded,filled\" fillcolor=\"#dddddd\" "
             "height=0.3];",
             "  edge [fontname=Helvetica fontsize=8 arrowsize=0.6];"]
    ids = {}
    stats = {"nodes": 0, "leaves": 0, "saved": 0}

    def vid(obj, prefix):
        key = (prefix == "s", id(obj))   # a saved tensor gets its own box, even when it is a leaf
        if key not in ids:
            ids[key] = f"{prefix}{len(ids)}"
        return ids[key]

    def tensor_type(t):
        data = t._array if isinstance(t, Tensor) else t
        return _type_str(tuple(data.shape), str(data.dtype))

    seen = set()
    drawn = set()        # saved-tensor boxes already written
    stack = []
    for k, t in enumerate(outputs):
        o = vid(t, "out")
        label = f"output{'' if len(outputs) == 1 else ' ' + str(k)}\n{tensor_type(t)}"
        lines.append(f"  {o} {_attrs({'label': label, 'fillcolor': '#d4f4d4'})}")
        if t.grad_fn is not None:
            lines.append(f"  {vid(t.grad_fn, 'n')} -> {o}")
            stack.append(t.grad_fn)
        elif t.requires_grad:
            stack.append(t)
            lines.append(f"  {vid(t, 'l')} -> {o}")
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Tensor):   # a leaf: gradients accumulate into it
            stats["leaves"] += 1
            name = names.get(id(obj))
            label = (name + "\n" if name else "") + tensor_type(obj)
            lines.append(f"  {vid(obj, 'l')} {_attrs({'label': label, 'fillcolor': '#cfe8ff'})}")
            continue
        stats["nodes"] += 1
        me = vid(obj, "n")
        label = obj.name() if hasattr(obj, "name") else type(obj).__name__
        if show_attrs and isinstance(getattr(obj, "attrs", None), dict) and obj.attrs:
            label += "\n" + _short(" ".join(f"{k}={_fmt_value(_compact(v))}" for k, v in obj.attrs.items()), 40)
        lines.append(f"  {me} {_attrs({'label': label})}")
        for e in getattr(obj, "next", None) or ():
            if e is None:
                continue
            lines.append(f"  {vid(e, 'l' if isinstance(e, Tensor) else 'n')} -> {me}")
            stack.append(e)
        if show_saved:
            stats["saved"] += _saved_lines(obj, me, lines, vid, tensor_type, drawn)
    lines.append("}")
    return Dot("\n".join(lines) + "\n", stats)


def _saved_lines(node, me, lines, vid, tensor_type, drawn):
    """Orange boxes for what `node` keeps for its backward (saved inputs, its own result),
    each tensor drawn once however many nodes saved it. Returns how many were linked."""
    saved = getattr(node, "saved", None)
    items = []
    if isinstance(saved, (list, tuple)):
        op_inputs = getattr(getattr(node, "op", None), "inputs", ()) or ()
        for i, s in enumerate(saved):
            if s is not None and (hasattr(s, "shape") or hasattr(getattr(s, "data", None), "shape")):
                items.append((op_inputs[i] if i < len(op_inputs) else f"saved[{i}]", s))
    elif isinstance(saved, str):   # the engine freed them after backward
        sid = f"{me}_freed"
        lines.append(f"  {sid} " + _attrs({"label": "saved values freed", "fillcolor": "#fff0e0", "fontsize": 7}))
        lines.append(f"  {sid} -> {me} [style=dotted arrowhead=none]")
    out = getattr(node, "out", None)
    if out is not None and hasattr(out, "shape"):
        items.append(("result", out))
    for what, s in items:
        sid = vid(s, "s")
        if sid not in drawn:
            drawn.add(sid)
            label = what + "\n" + tensor_type(s)
            lines.append(f"  {sid} " + _attrs({"label": label, "fillcolor": "#ffd8a8", "fontsize": 8}))
        lines.append(f"  {sid} -> {me} [style=dashed arrowhead=none color=\"#e8964a\"]")
    return len(items)
