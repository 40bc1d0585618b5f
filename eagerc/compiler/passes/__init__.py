"""Graph -> Graph passes and the pipeline that runs them.

Each pass is a plain function in its own module, listed here in pipeline order (CLEANUP
is the first five, PIPELINE all but decompose; backends name theirs as `pipeline`):

    dce        dead-code elimination (outputs and mutations are the roots)
    decompose  fused composites -> primitives (not in PIPELINE: fusing backends put it in theirs)
    cse        common-subexpression elimination (never merges random draws)
    simplify   algebraic identities: x*1, x+0, double permutes, reshape chains, no-op casts
    fold       constant folding into `full` nodes
    schedule   a node order with a lower peak of live bytes
    fusion     groups of elementwise ops + a trailing reduction -> graph.fusion_groups
    memplan    where each value lives: buffers by liveness, in place where safe -> graph.memory_plan

With EAGERC_DEBUG=1 the verifier runs after every pass (and the memory plan is checked);
with EAGERC_DUMP_IR=1 the program is printed after every pass with the pass's name and
time. EAGERC_FUSION_FUEL=N limits the number of fusions (see fusion.py).
"""
import os
import sys
import time

from ...runtime.safetensors_io import gc_paused
from ...runtime.verify import verify
from .cse import cse
from .dce import dce
from .decompose import decompose
from .fold import fold
from .fusion import fusion
from .memplan import check_memory_plan, memplan, peak_bytes
from .schedule import schedule
from .simplify import simplify

__all__ = ["optimize", "CLEANUP", "PIPELINE", "dce", "cse", "simplify", "fold", "decompose", "schedule", "fusion",
           "memplan", "peak_bytes", "check_memory_plan"]

# the clean-up every pipeline starts with; exported programs stop here (the runtime interprets
# the graph; export schedules the final graph itself)
CLEANUP = [dce, cse, simplify, fold, dce]
# the full pipeline: scheduling, fusion groups and a memory plan (graph.memory_plan). Each backend
# names its own (`backend.pipeline`: numpy's plans only what it writes with out=, c and cuda
# decompose and fuse for their kernels), run once by `optimize` before `backend.compile`
PIPELINE = CLEANUP + [schedule, fusion, memplan]


def optimize(graph, passes=None):
    """Run `passes` (default PIPELINE) over `graph`, the cyclic garbage collector paused as a
    compiled call pauses it (`gc_paused`; passes allocate ~10 short-lived objects per node, and
    the collections they set off walk every live object: ~30% of the pipeline's CPU on a
    32-layer GPT step). For the callers outside a compiled call: export, the command line."""
    if passes is None:
        passes = PIPELINE
    with gc_paused():
        return _run(graph, passes)


def _run(graph, passes):
    debug = os.environ.get("EAGERC_DEBUG") == "1"
    dump = os.environ.get("EAGERC_DUMP_IR") == "1"
    if debug:
        verify(graph)
    if dump:
        print(f"# traced\n{graph}", file=sys.stderr)
    for p in passes:
        t0 = time.perf_counter()
        graph = p(graph)
        ms = (time.perf_counter() - t0) * 1e3
        if debug:
            verify(graph)
            check_memory_plan(graph)
        if dump:
            print(f"# Constructed by {p.__name__} (took {ms:.2f} ms)\n{graph}{_meta_lines(graph)}",
                  file=sys.stderr)
    return graph


def _meta_lines(graph):
    """The analyses' results under the dumped program, as comments."""
    lines = []
    for i, g in enumerate(graph.fusion_groups or ()):
        lines.append(f"# fusion{i}: [{', '.join(g)}]")
    plan = graph.memory_plan
    if plan is not None:
        lines.append(f"# memory plan: {len(plan.buffer)} values in {len(plan.buffers)} buffers, "
                     f"{len(plan.inplace)} in place; peak {peak_bytes(graph)} -> "
                     f"{peak_bytes(graph, plan.buffer)} bytes")
    return "".join("\n" + line for line in lines)
