"""Tracing a GPT training step (Adam) with the optimizer's per-parameter replay on and off.

    python benchmarks/trace_replay.py [--layers 32] [--rounds 4] [--backend c]

A traced optimizer rule runs its Python for the first parameter of each kind and replays that
tape for the others (optim/rules.py TensorOps.each_alike, compiler/tracer.py Tracer.replay);
`rules.REPLAY = False` runs the rule for every parameter, as before. In turns, in this process,
on fresh models (GPT layers x 64 wide, batch 8 x 64 tokens): the CPU time of this thread
(`time.thread_time`; one BLAS/OpenMP thread) of one trace alone (`eagerc.compile.explain`: a
trace, no compile) and of the first two calls of the compiled step (trace, compile, one run;
use a warm $EAGERC_CACHE_DIR so the C compiler is not what is timed). Best and median of
`--rounds` each. The graphs are identical either way (tests/test_optim.py,
test_alike_parameters_replay_the_first_ones_update).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
from eagerc.compiler.compile import explain  # noqa: E402
from eagerc.optim import rules  # noqa: E402
from _harness import table  # noqa: E402
from compile import training_step  # noqa: E402 (benchmarks/compile.py)
from train_step import gpt  # noqa: E402


def _step(layers):
    rng = np.random.default_rng(0)
    eagerc.manual_seed(0)
    model = gpt(eagerc, d=64, layers=layers)
    x, y = eagerc.from_numpy(rng.integers(0, 256, (8, 64))), eagerc.from_numpy(rng.integers(0, 256, (8, 64)))
    return training_step(model, eagerc.optim.Adam(model.parameters(), lr=1e-3)), x, y


def _trace_s(layers):
    step, x, y = _step(layers)
    t = time.thread_time()
    explain(step, x, y)
    return time.thread_time() - t


def _first_two_s(layers, backend):
    step, x, y = _step(layers)
    compiled = eagerc.compile(step, backend=backend)
    t = time.thread_time()
    compiled(x, y)
    compiled(x, y)
    return time.thread_time() - t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--backend", default="c")
    args = p.parse_args()
    runs = {(what, replay): [] for what in ("trace", "first two") for replay in (False, True)}
    _trace_s(1), _first_two_s(1, args.backend)   # imports and kernels loaded before timing
    for _ in range(args.rounds):
        for replay in (False, True):
            rules.REPLAY = replay
            runs["trace", replay].append(_trace_s(args.layers))
            runs["first two", replay].append(_first_two_s(args.layers, args.backend))
    rules.REPLAY = True
    rows = []
    for what in ("trace", "first two"):
        for replay in (False, True):
            r = sorted(runs[what, replay])
            rows.append((what, "on" if replay else "off", f"{r[0]:.3f} s", f"{r[len(r) // 2]:.3f} s"))
    print(f"GPT {args.layers}x64 training step (Adam), backend {args.backend}, CPU time of this thread")
    print(table(rows, ["what", "replay", "best", "median"]))


if __name__ == "__main__":
    main()
