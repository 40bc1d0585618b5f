"""`eagerc inspect FILE`: what an exported program is, computes and costs (or what a
checkpoint holds). Every string from the file is printed through `printable`."""
import json
import os

import numpy as np

from .common import CommandError, fmt_bytes, fmt_count, load_program, printable, spec_type

HELP = "describe an exported program (inputs, outputs, parameters, FLOPs, the program text) or a checkpoint"
DESCRIPTION = """\
Prints the program's inputs and outputs with their shapes (dynamic sizes by name), the
parameter count and bytes (weights and buffers stored in the file), an estimate of the
FLOPs per call by op type (at the example sizes), the file format, its checksum and the
eagerc that wrote it, then the program itself, one op per line. For a checkpoint
(eagerc.save), its format, checksum, tensors and top-level keys. --json gives the same
as one object.
"""


def add_arguments(p):
    p.add_argument("file", help="an exported program (eagerc.export(...).save(path)) or a checkpoint (eagerc.save)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--no-program", action="store_true", help="leave out the program text")


def describe(path, prog):
    """Everything `inspect` reports, as one JSON-plain dict."""
    from .flops import RULES, flops_by_op
    graph = prog.graph
    shapes = prog.symbolic_shapes()
    from ..viz import output_paths
    where = output_paths(graph.out_tree)
    outputs = [{"path": where.get(i, f"output {i}"), "name": v.name, "shape": list(shapes.get(v.name, v.shape)),
                "dtype": v.dtype} for i, v in enumerate(graph.outputs)]
    by_dtype = {}
    for a in prog.weights.values():
        row = by_dtype.setdefault(a.dtype.name, {"tensors": 0, "values": 0, "bytes": 0})
        row["tensors"] += 1
        row["values"] += int(a.size)
        row["bytes"] += int(a.nbytes)
    table, total = flops_by_op(graph)
    return {
        "path": path,
        "format": "eagerc.program",
        "format_version": int(prog.format_version),
        "checksum": prog.checksum,
        "eagerc_version": prog.eagerc_version,
        "inputs": prog.input_specs,
        "dynamic_dims": prog.dynamic_dims,
        "outputs": outputs,
        "mutations": [t for t, _ in graph.mutations],
        "parameters": {"tensors": len(prog.weights),
                       "values": sum(r["values"] for r in by_dtype.values()),
                       "bytes": sum(r["bytes"] for r in by_dtype.values()),
                       "by_dtype": by_dtype},
        "ops": len(graph.nodes),
        "flops": {"total": total, "by_op": table, "rules": RULES,
                  "at": {n: d["example"] for n, d in prog.dynamic_dims.items()}},
        "has_examples": prog.example_inputs is not None,
        "program": str(_printable_graph(graph)),
    }


def _printable_json(x):
    if isinstance(x, str):
        return printable(x)
    if isinstance(x, list):
        return [_printable_json(v) for v in x]
    if isinstance(x, dict):
        return {printable(k): _printable_json(v) for k, v in x.items()}
    return x


def _printable_graph(graph):
    """The graph with every string (names, locations, modules, attributes) escaped, for printing:
    a newline in a node's location must not fake a line of the program."""
    from ..runtime.ir import Graph
    return Graph.from_json(_printable_json(graph.to_json()))


def _checkpoint_file(path):
    """Whether `path` holds an eagerc checkpoint (judged by its header alone)."""
    from ..runtime import safetensors_io as st
    try:
        f, size = st.open_regular(path)
        with f:
            return st.read_header(f, size).metadata.get("eagerc.format") == "eagerc.checkpoint"
    except (OSError, ValueError):
        return False   # load_program says what is wrong with it


def describe_checkpoint(path):
    """What `inspect` reports for a checkpoint: format, checksum (verified), tensors, keys.
    Reads with the runtime's safetensors reader, never builds tensors."""
    from ..runtime import safetensors_io as st
    from ..serialization import CHECKSUM_KEY, CheckpointError, _check_metadata
    try:
        f, size = st.open_regular(path)
        with f:
            header = st.read_header(f, size, checksum_key=CHECKSUM_KEY)
            st.verify(f, header)
        version, structure = _check_metadata(header, path)
    except (CheckpointError, st.FormatError, OSError) as e:
        raise CommandError(f"not a valid eagerc checkpoint: {path}: {e}") from None
    tensors = [{"name": name, "dtype": dt.name, "shape": list(shape), "bytes": end - begin}
               for name in header.order for dt, shape, begin, end in [header.tensors[name]]]
    return {"path": path, "format": "eagerc.checkpoint", "format_version": version, "checksum": header.checksum,
            "bytes": os.path.getsize(path), "tensors": tensors,
            "keys": list(structure) if isinstance(structure, dict) and "$type" not in structure else None}


def run(args, out):
    if _checkpoint_file(args.file):
        info = describe_checkpoint(args.file)
        render = render_checkpoint
    else:
        prog = load_program(args.file)
        info = describe(args.file, prog)
        render = render_text
        if args.no_program:
            info.pop("program")
    if args.json:  # (json.dumps escapes control characters and non-ASCII itself)
        out.write(json.dumps(info, indent=2, default=_jsonable) + "\n")
        return 0
    out.write(render(info))
    return 0


def _checksum_text(info):
    if info["checksum"]:
        return f"{info['checksum'][:len('sha256:') + 16]}... verified"
    return "no checksum (a format-1 file, written before eagerc sealed files)"


def render_checkpoint(info):
    p = printable
    lines = [f"{p(info['path'])}: eagerc checkpoint, format {info['format_version']}, {_checksum_text(info)}"]
    t = info["tensors"]
    values = sum(np.prod(x["shape"], dtype=np.int64) for x in t)
    lines.append(f"tensors: {len(t)} ({int(values):,} values, {fmt_bytes(sum(x['bytes'] for x in t))}; "
                 f"file {fmt_bytes(info['bytes'])})")
    width = min(max((len(p(x["name"])) for x in t), default=0), 60)
    for x in t:
        lines.append(f"  {p(x['name']):<{width}}  {spec_type(x)}")
    if info["keys"] is not None:
        lines.append("keys: " + ", ".join(p(k) for k in info["keys"]))
    return "\n".join(lines) + "\n"


def _jsonable(x):
    if isinstance(x, np.integer):
        return int(x)
    raise TypeError(type(x).__name__)


def render_text(info):
    p = printable
    lines = [f"{p(info['path'])}: eagerc program, format {info['format_version']}, "
             f"written by eagerc {p(info['eagerc_version'])}", f"checksum: {_checksum_text(info)}", ""]
    lines.append("inputs:")
    for s in info["inputs"]:
        lines.append(f"  {p(s['path']):<16} {p(spec_type(s)):<24} ({p(s['name'])})")
    for name, d in info["dynamic_dims"].items():
        hi = "inf" if d["max"] is None else d["max"]
        lines.append(f"  dynamic size {p(name)}: {d['min']}..{hi} (exported at {d['example']})")
    lines.append("outputs:")
    for o in info["outputs"]:
        lines.append(f"  {p(o['path']):<16} {p(spec_type({'dtype': o['dtype'], 'shape': o['shape']})):<24} "
                     f"({p(o['name'])})")
    for t in info["mutations"]:
        lines.append(f"  updates {p(t)} in place on every call")
    p = info["parameters"]
    dts = ", ".join(f"{dt}: {r['values']:,}" for dt, r in p["by_dtype"].items())
    lines.append(f"parameters: {p['values']:,} values in {p['tensors']} tensors (weights and buffers), "
                 f"{fmt_bytes(p['bytes'])}"
                 + (f" ({dts})" if len(p["by_dtype"]) > 1 else ""))
    fl = info["flops"]
    at = ", ".join(f"{k}={v}" for k, v in fl["at"].items())
    lines.append(f"FLOPs per call: {fmt_count(fl['total'])}FLOP (estimate{', at ' + at if at else ''}); "
                 f"{info['ops']} ops")
    if fl["by_op"]:
        width = max(len(op) for op in fl["by_op"])
        lines.append(f"  {'op':<{width}}  {'count':>5}  {'FLOPs':>10}  {'share':>6}  rule")
        for op, r in fl["by_op"].items():
            share = r["flops"] / fl["total"] if fl["total"] else 0.0
            lines.append(f"  {op:<{width}}  {r['count']:>5}  {fmt_count(r['flops']):>10}  {share:>6.1%}  "
                         f"{r['category']}")
    if "program" in info:
        lines += ["", "program:", info["program"]]
    return "\n".join(lines) + "\n"
