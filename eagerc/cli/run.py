"""`eagerc run` and `eagerc bench`: call an exported program on arrays, and time it."""
import json
import os
import statistics
import time

import numpy as np

from .common import (CommandError, UsageError, example_shape, load_program, one_line, output_leaves,
                     printable, random_inputs, read_inputs, spec_type)

RUN_HELP = "run an exported program on .npy inputs, save the outputs to .npz"
RUN_DESCRIPTION = """\
Loads the program (every check of eagerc.runtime.load), reads one .npy file per input
(in the program's input order; dtypes and shapes must match exactly), runs it, and writes
the outputs to an .npz file: a single output under the key "output", several under
"output.0", "output.1", ... (or "output.<key>" for a dict). An .npy output path takes a
single output. Without --output, prints each output's type and first values.
"""
BENCH_HELP = "time calls of an exported program (min / median / mean latency)"
BENCH_DESCRIPTION = """\
Calls the program --warmup times untimed, then --repeat times timed, one call at a time,
and prints the per-call latency. Inputs are random arrays of the exported shapes (dynamic
sizes at their example values) unless --input files are given.
"""
BACKENDS = ("numpy", "c", "cuda")


def add_run_arguments(p):
    p.add_argument("file", help="an exported program")
    p.add_argument("--input", "-i", action="append", default=[], metavar="X.npy",
                   help="an input array (np.save); once per program input, in order")
    p.add_argument("--output", "-o", metavar="OUT.npz", help="where to write the outputs (.npz, or .npy for one)")
    p.add_argument("--backend", default="numpy", choices=BACKENDS, help="what runs the program (default numpy)")


def add_bench_arguments(p):
    p.add_argument("file", help="an exported program")
    p.add_argument("--input", "-i", action="append", default=[], metavar="X.npy",
                   help="an input array; default: random arrays of the exported shapes")
    p.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed calls first (default 3)")
    p.add_argument("--repeat", type=int, default=20, metavar="N", help="timed calls (default 20)")
    p.add_argument("--backend", default="numpy", choices=BACKENDS, help="what runs the program (default numpy)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _runner(prog, backend):
    """A function arrays -> outputs for `backend`: numpy runs the loaded program itself; another
    backend (when it exists in eagerc.compiler.backends) compiles the program's graph."""
    if backend == "numpy":
        return prog
    from ..compiler.backends import get_backend
    try:
        b = get_backend(backend)
    except ValueError:
        raise CommandError(f"the {backend!r} backend does not exist yet in this eagerc; exported programs run "
                           "with --backend numpy") from None
    from ..compiler.backends import pipeline
    from ..compiler.passes import optimize
    from ..runtime.pytree import unflatten
    compiled = b.compile(optimize(prog.graph, pipeline(b)))   # as eagerc.compile does
    names = [s["name"] for s in prog.input_specs]

    def call(*arrays):
        for spec, a in zip(prog.input_specs, arrays):
            for s, n in zip(spec["shape"], a.shape):
                ex = prog.dynamic_dims[s]["example"] if isinstance(s, str) else n
                if n != ex:
                    raise CommandError(f"the {backend!r} backend runs programs at their exported sizes only "
                                       f"({s} = {ex}, got {n}); use --backend numpy for other sizes")
        env = dict(prog.weights)
        env.update(zip(names, arrays))
        outs, _ = compiled(env)
        return unflatten(prog.graph.out_tree, list(outs))
    return call


def run(args, out):
    prog = load_program(args.file)
    call = _runner(prog, args.backend)
    arrays = read_inputs(args.input, prog.input_specs, prog.dynamic_dims)
    if args.output:
        ext = os.path.splitext(args.output)[1].lower()
        if ext not in (".npz", ".npy"):
            raise UsageError(f"--output {args.output}: use an .npz file (or .npy for a single output)")
    try:
        result = call(*arrays)
    except ValueError as e:   # ProgramInputError / ProgramRunError: their message says what and where
        raise CommandError(one_line(e)) from None
    leaves = [(k, v) for k, v in output_leaves(result) if hasattr(v, "shape")]
    if args.output:
        try:
            if ext == ".npy":
                if len(leaves) != 1:
                    raise UsageError(f"--output {args.output}: the program has {len(leaves)} outputs; "
                                     "use an .npz file")
                np.save(args.output, np.asarray(leaves[0][1]))
            else:
                np.savez(args.output, **{k: np.asarray(v) for k, v in leaves})
        except OSError as e:
            raise CommandError(f"--output {args.output}: cannot write: {e.strerror or e}") from None
        desc = ", ".join(f"{printable(k)} {_type(v)}" for k, v in leaves)
        out.write(f"wrote {printable(args.output)}: {desc}\n")
    else:
        for k, v in leaves:
            a = np.asarray(v)
            flat = np.array2string(a.reshape(-1)[:6], precision=4, separator=", ")
            out.write(f"{printable(k)}: {_type(a)} {flat[:-1]}{', ...]' if a.size > 6 else ']'}\n")
    return 0


def _type(a):
    from ..runtime.ir import short_dtype
    return f"{short_dtype(np.asarray(a).dtype.name)}[{','.join(map(str, np.shape(a)))}]"


def bench(args, out):
    if args.warmup < 0 or args.repeat < 1:
        raise UsageError("--warmup must be >= 0 and --repeat >= 1")
    prog = load_program(args.file)
    call = _runner(prog, args.backend)
    specs = prog.input_specs
    if args.input:
        arrays = read_inputs(args.input, specs, prog.dynamic_dims)
        source = "from --input"
    else:
        shapes = [example_shape(s, prog.dynamic_dims) for s in specs]
        arrays = random_inputs(shapes, [s["dtype"] for s in specs])
        source = "random"
    try:
        for _ in range(args.warmup):
            call(*arrays)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            call(*arrays)
            times.append(time.perf_counter() - t0)
    except ValueError as e:
        raise CommandError(one_line(e)) from None
    stats = {"min": min(times), "median": statistics.median(times), "mean": statistics.fmean(times),
             "max": max(times), "stdev": statistics.stdev(times) if len(times) > 1 else 0.0}
    if args.json:
        out.write(json.dumps({"path": args.file, "backend": args.backend, "warmup": args.warmup,
                              "repeat": args.repeat, "inputs": source,
                              "input_shapes": [list(a.shape) for a in arrays],
                              "seconds": stats, "times": times}, indent=2) + "\n")
        return 0
    ins = ", ".join(f"{printable(s['path'])}: {spec_type({'dtype': s['dtype'], 'shape': a.shape})}"
                    for s, a in zip(specs, arrays))
    out.write(f"{printable(args.file)}: {len(prog.graph.nodes)} ops, backend {args.backend}, inputs ({ins}) "
              f"{source}\n")
    out.write(f"{args.repeat} calls after {args.warmup} warm-up: "
              + "  ".join(f"{k} {_ms(stats[k])}" for k in ("min", "median", "mean", "max"))
              + f"  (stdev {_ms(stats['stdev'])})\n")
    out.write(f"throughput: {1 / stats['median']:.1f} calls/s at the median\n")
    return 0


def _ms(s):
    return f"{s * 1e3:.3f} ms"
