"""`eagerc inspect FILE`: what an exported program is, computes and costs."""
import json

import numpy as np

from .common import fmt_bytes, fmt_count, load_program, spec_type, symbolic_shapes

HELP = "describe an exported program: inputs, outputs, parameters, FLOPs, the program text"
DESCRIPTION = """\
Prints the program's inputs and outputs with their shapes (dynamic sizes by name), the
parameter count and bytes (weights and buffers stored in the file), an estimate of the
FLOPs per call by op type (at the example sizes), the file format and the eagerc that
wrote it, then the program itself, one op per line. --json gives the same as one object.
"""


def add_arguments(p):
    p.add_argument("file", help="an exported program (eagerc.export(...).save(path))")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--no-program", action="store_true", help="leave out the program text")


def describe(path, prog):
    """Everything `inspect` reports, as one JSON-plain dict."""
    from .flops import RULES, flops_by_op
    graph = prog.graph
    shapes = symbolic_shapes(path, graph)
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
        "program": str(graph),
    }


def run(args, out):
    prog = load_program(args.file)
    info = describe(args.file, prog)
    if args.no_program:
        info.pop("program")
    if args.json:
        out.write(json.dumps(info, indent=2, default=_jsonable) + "\n")
        return 0
    out.write(render_text(info))
    return 0


def _jsonable(x):
    if isinstance(x, np.integer):
        return int(x)
    raise TypeError(type(x).__name__)


def render_text(info):
    lines = [f"{info['path']}: eagerc program, format {info['format_version']}, "
             f"written by eagerc {info['eagerc_version']}", ""]
    lines.append("inputs:")
    for s in info["inputs"]:
        lines.append(f"  {s['path']:<16} {spec_type(s):<24} ({s['name']})")
    for name, d in info["dynamic_dims"].items():
        hi = "inf" if d["max"] is None else d["max"]
        lines.append(f"  dynamic size {name}: {d['min']}..{hi} (exported at {d['example']})")
    lines.append("outputs:")
    for o in info["outputs"]:
        lines.append(f"  {o['path']:<16} {spec_type({'dtype': o['dtype'], 'shape': o['shape']}):<24} ({o['name']})")
    for t in info["mutations"]:
        lines.append(f"  updates {t} in place on every call")
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
