"""`eagerc viz`: draw a program's graph (an exported file, or a traced Python callable)."""
import os

from .common import CommandError, UsageError, example_shape, load_program, parse_dtype, parse_shape, \
    printable, random_inputs
from .target import is_target, load_target

HELP = "draw a program's graph (SVG, PNG, PDF or DOT) with graphviz"
DESCRIPTION = """\
TARGET is an exported program file, or package.module:callable -- an nn.Module class
(built without arguments), a Module instance, a factory returning one, or a function --
traced in eval mode under no_grad on random inputs of the --input-shape sizes.

Ops are boxes with their key attributes, edges carry the value's type (f32[8,16]),
parameters are small named boxes, and the module hierarchy is nested clusters.
--depth N draws modules deeper than N as one box each (0: one box per top-level module).
Large graphs (over 300 boxes) draw repeated blocks -- numbered siblings with identical
ops, like the layers of a ModuleList -- once, labelled "x12" (--repeats).

The output format is the -o file's extension: .svg, .png, .pdf (rendered by graphviz's
`dot` program) or .dot (the DOT text; `-o -` prints it). Without `dot`, the DOT file is
written next to the requested output and the command fails (exit 1) saying how to
install graphviz.
"""
STAGES = ("traced", "optimized", "fused")


def add_arguments(p):
    p.add_argument("target", metavar="TARGET", help="a program file, or package.module:callable")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="OUT.svg, .png, .pdf or .dot ('-' prints DOT); default: <name>.svg here")
    p.add_argument("--input-shape", action="append", default=[], metavar="1,3,32,32",
                   help="example input sizes for a callable, once per argument")
    p.add_argument("--dtype", action="append", default=[], metavar="float32",
                   help="input dtype for a callable: once for all inputs or once per input (default float32)")
    p.add_argument("--stage", choices=STAGES, default=None,
                   help="traced (no passes; callables only), optimized (the export pipeline; the default) "
                        "or fused (fusion groups drawn as clusters)")
    p.add_argument("--depth", type=_depth, default=None, metavar="N",
                   help="draw modules deeper than N as one box each")
    p.add_argument("--repeats", choices=("auto", "collapse", "expand"), default="auto",
                   help="draw repeated blocks once: when the graph is large (auto), always, or never")
    p.add_argument("--no-params", action="store_true", help="leave out the parameter boxes")
    p.add_argument("--profile", action="store_true",
                   help="run the program op by op and colour the ops by measured time")
    p.add_argument("--profile-repeat", type=int, default=5, metavar="N",
                   help="timed runs for --profile (default 5; the median time per op is shown)")
    p.add_argument("--timeout", type=float, default=120, metavar="S",
                   help="give up when graphviz takes longer (default 120 s)")


def _depth(text):
    import argparse
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return n


def run(args, out):
    from .. import viz
    stage = args.stage or "optimized"
    if args.output not in (None, "-") and os.path.splitext(args.output)[1].lower() not in \
            (".svg", ".png", ".pdf", ".dot", ".gv"):
        raise UsageError(f"-o {args.output}: the extension picks the format: .svg, .png, .pdf or .dot")
    if is_target(args.target):
        shapes = [parse_shape(s) for s in args.input_shape]
        dtypes_ = [parse_dtype(d) for d in args.dtype] or ["float32"]
        target = load_target(args.target, shapes, dtypes_)
        graph = target.stage(stage)
        env = dict(target.weights)
        env.update({f"arg{i}": a for i, a in enumerate(target.inputs)})
        opts = {"arg_labels": target.arg_labels, "classes": target.classes}
        name = args.target.rpartition(":")[2].rpartition(".")[2]
    else:
        if args.input_shape or args.dtype:
            raise UsageError("--input-shape and --dtype are for a module:callable; a program file "
                             "has its own inputs")
        if stage == "traced":
            raise UsageError("--stage traced needs a module:callable: a program file holds the "
                             "optimized program")
        prog = load_program(args.target)
        graph = prog.graph
        if stage == "fused":
            from ..compiler.passes import fusion
            graph = fusion(graph)
        specs = prog.input_specs
        arrays = random_inputs([example_shape(s, prog.dynamic_dims) for s in specs], [s["dtype"] for s in specs])
        env = dict(prog.weights)
        env.update({s["name"]: a for s, a in zip(specs, arrays)})
        opts = {"arg_labels": {s["name"]: s["path"] for s in specs},
                "value_shapes": prog.symbolic_shapes()}
        name = os.path.splitext(os.path.basename(args.target))[0]
    times = None
    if args.profile:
        if args.profile_repeat < 1:
            raise UsageError("--profile-repeat must be at least 1")
        try:
            times, _ = viz.time_nodes(graph, env, repeats=args.profile_repeat)
        except Exception as e:
            raise CommandError(f"--profile: running the program failed: {type(e).__name__}: {e}") from None
    dot = viz.program_graph(graph, depth=args.depth, repeats=args.repeats, times=times,
                            show_params=False if args.no_params else None,
                            title=f"{name} ({stage})", **opts)
    # labels quote the file's strings: neither the DOT text nor the SVG may carry a raw escape
    dot.source = printable(dot.source, lines=True)
    output = args.output or name + ".svg"
    if output == "-":
        out.write(dot.source)
        return 0
    try:
        dot.render(output, timeout=args.timeout)
    except OSError as e:
        raise CommandError(f"cannot write {e.filename or output}: {e.strerror or e}") from None
    except RuntimeError as e:   # viz.GraphvizNotFound, or dot failing: the message says which
        raise CommandError(str(e)) from None
    s = dot.stats
    extra = []
    if s.get("repeats"):
        extra.append("repeated blocks drawn once: " + ", ".join(f"{printable(k)} x{n}"
                                                                 for k, n in s["repeats"].items()))
    if s.get("params_hidden"):
        extra.append(f"{s['params_hidden']} parameters not drawn (graph too large)")
    if s.get("fusion_groups"):
        extra.append(f"{s['fusion_groups']} fusion groups")
    out.write(f"wrote {printable(output)}: {s['nodes']} ops as {s['vertices']} boxes"
              + ("; " + "; ".join(extra) if extra else "") + "\n")
    return 0
