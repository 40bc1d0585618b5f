"""Graph -> Graph passes and the pipeline that runs them.

Each pass is a plain function in its own module. With EAGERC_DEBUG=1 the verifier runs
after every pass; with EAGERC_DUMP_IR=1 the program is printed after every pass with
the pass's name and time.
"""
import os
import sys
import time

from ...runtime.verify import verify
from .dce import dce

PIPELINE = [dce]


def optimize(graph, passes=None):
    debug = os.environ.get("EAGERC_DEBUG") == "1"
    dump = os.environ.get("EAGERC_DUMP_IR") == "1"
    if debug:
        verify(graph)
    if dump:
        print(f"# traced\n{graph}", file=sys.stderr)
    for p in (PIPELINE if passes is None else passes):
        t0 = time.perf_counter()
        graph = p(graph)
        ms = (time.perf_counter() - t0) * 1e3
        if debug:
            verify(graph)
        if dump:
            print(f"# Constructed by {p.__name__} (took {ms:.2f} ms)\n{graph}", file=sys.stderr)
    return graph
