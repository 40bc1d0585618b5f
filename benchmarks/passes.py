"""CPU time of each graph pass on the graphs a GPT training step compiles (issue 15 §3).

    python benchmarks/passes.py [--layers 32] [--backend c] [--repeat 5] [--dump FILE]

Traces and compiles the GPT step (`layers` x 64 wide, Adam, b=8, T=64) once, keeping every
graph `passes.optimize` is given, the pipeline it runs and the memory plans the backend makes;
then, `repeat` times, runs each pipeline pass by pass and prints each pass's CPU time (the
thread's, summed over the graphs; median and min of the repeats; Python's cyclic GC paused),
the backend's memory plans and their alias_ends, checking a plan of the optimised graph (which
a compile skips for the planner's own plans), and last `optimize` and the backend's compile of its
result, as a compiled call runs them (GC paused; kernels from a warm cache: run it twice, or
point EAGERC_CACHE_DIR at a warm one).

--dump writes each optimised graph's printed form, fusion groups, a memory plan and the
backend's program (driver and C source) to FILE: two versions of the passes are compared by
diffing their dumps (the passes must give identical graphs and programs).
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
from eagerc.compiler import passes  # noqa: E402
from eagerc.runtime import memplan as rt_memplan  # noqa: E402
from eagerc.runtime.safetensors_io import gc_paused  # noqa: E402
from compile import training_step  # noqa: E402
from train_step import gpt  # noqa: E402


def captured(layers, backend):
    """[(graph, pass list)] that compiling the GPT step's first two calls optimised, and
    [(args, kwargs)] of the memory plans the backend made (fused.py's `memplan` calls)."""
    from eagerc.compiler.backends import fused
    seen, plans = [], []
    original, original_plan = passes.optimize, fused.memplan

    def optimize(graph, passes=None):
        seen.append((graph, passes))
        return original(graph, passes)

    def memplan(*args, **kwargs):
        plans.append((args, kwargs))
        return original_plan(*args, **kwargs)
    passes.optimize, fused.memplan = optimize, memplan
    try:
        rng = np.random.default_rng(0)
        eagerc.manual_seed(0)
        model = gpt(eagerc, d=64, layers=layers)
        x, y = rng.integers(0, 256, (8, 64)), rng.integers(0, 256, (8, 64))
        x, y = eagerc.from_numpy(x), eagerc.from_numpy(y)
        step = eagerc.compile(training_step(model, eagerc.optim.Adam(model.parameters(), lr=1e-3)),
                              backend=backend)
        step(x, y)
        step(x, y)
    finally:
        passes.optimize, fused.memplan = original, original_plan
    return seen, plans


def timed_pipeline(graphs, plans):
    """{pass name: CPU seconds} of one run of every pipeline (the cyclic GC paused, as `optimize`
    runs them), of the backend's memory plans and of checking one; and the optimised graphs."""
    cost, out = {}, []

    def timed(name, f, *args, **kwargs):
        t = time.thread_time()
        r = f(*args, **kwargs)
        cost[name] = cost.get(name, 0.0) + time.thread_time() - t
        return r
    with gc_paused():
        for graph, pipeline in graphs:
            g = graph
            for p in pipeline if pipeline is not None else passes.PIPELINE:
                g = timed(p.__name__, p, g)
            plan = rt_memplan.memory_plan(g)
            timed("check_memory_plan", rt_memplan.check_memory_plan, g.copy(memory_plan=plan))
            out.append((g, plan))
        for args, kwargs in plans:
            timed("memplan (backend's)", passes.memplan, *args, **kwargs)
            timed("alias_ends", rt_memplan.alias_ends, args[0])
    return cost, out


def timed_compile(graphs, backend):
    """CPU seconds of `optimize` and of the backend's compile of its result (kernels from a warm
    cache), the GC paused as a compiled call pauses it."""
    from eagerc.compiler.backends import get_backend
    cost = {"optimize": 0.0, "backend compile": 0.0}
    with gc_paused():
        for graph, pipeline in graphs:
            t = time.thread_time()
            g = passes.optimize(graph, pipeline)
            cost["optimize"] += time.thread_time() - t
            t = time.thread_time()
            get_backend(backend).compile(g)
            cost["backend compile"] += time.thread_time() - t
    return cost


def dump(graphs, path, backend):
    """Each optimised graph, its fusion groups, a plan, and the backend's program source."""
    from eagerc.compiler.backends import get_backend
    with open(path + ".tmp", "w") as f:
        for g, plan in graphs:
            f.write(str(g) + "\n")
            f.write(json.dumps(g.fusion_groups) + "\n")
            f.write(json.dumps(plan.to_json(), sort_keys=True) + "\n")
            program = get_backend(backend).compile(g)
            f.write(getattr(program, "source", "") + "\n")
            f.write(getattr(program, "c_source", "") + "\n")
    os.replace(path + ".tmp", path)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--backend", default="c")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--dump", help="write the optimised graphs here")
    args = p.parse_args(argv)
    graphs, plans = captured(args.layers, args.backend)
    runs = []
    for _ in range(args.repeat):
        cost, out = timed_pipeline(graphs, plans)
        cost.update(timed_compile(graphs, args.backend))
        runs.append(cost)
    if args.dump:
        dump(out, args.dump, args.backend)
    nodes = sum(len(g.nodes) for g, _ in graphs)
    print(f"GPT {args.layers}x64 training step, backend {args.backend}: {len(graphs)} graph(s), {nodes} traced nodes; "
          f"CPU ms (median and min of {args.repeat})")
    for name in runs[0]:
        if name == "optimize":
            print("  -- as a compile runs them:")
        ms = [r[name] * 1e3 for r in runs]
        print(f"  {name:24s} {statistics.median(ms):8.1f} {min(ms):8.1f}")


if __name__ == "__main__":
    main()
