"""How much of its compiled speedup a model keeps with a graph break in the middle (issue 15 §8).

    python benchmarks/graph_breaks.py [--backend numpy|c] [--quick]

The model: a residual MLP (GELU + LayerNorm blocks, batch 16, width 64) whose middle reads
`h.abs().mean().item()` and branches on it (`if ... > 0.8: h = h * 0.5`) -- a graph break
that splits the compiled call in two pieces. Rows, all measured in one run, interleaved:

- eager: the model with the branch, run eagerly;
- compiled, no break: the same model with the branch fixed (h = h * 0.5 always), one graph;
- compiled, break: the model with the branch, compiled (two pieces and the value read between).

Inputs alternate between the two sides of the branch, so both continuations run. Reported:
speedup over eager with and without the break, and the share of the speedup the break keeps
(compiled-no-break time / compiled-break time; target >= 0.8), for inference (no_grad) and a
training step (forward + backward through the compiled call + SGD).
"""
import argparse
import copy
import os
import sys
import time
import warnings

if os.environ.get("BENCH_THREADS", "1") != "default":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
import eagerc.nn as nn  # noqa: E402
import eagerc.nn.functional as F  # noqa: E402
from _harness import limit_threads, table  # noqa: E402


def cpu_us(fn, number):
    """CPU time of one call in microseconds (thread time: one thread, immune to other processes)."""
    t = time.thread_time()
    for _ in range(number):
        fn()
    return (time.thread_time() - t) / number * 1e6


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, x):
        return x + F.gelu(self.fc(self.ln(x)), approximate="tanh")


class Net(nn.Module):
    def __init__(self, d=64, depth=4, gate=True):
        super().__init__()
        self.first = nn.ModuleList([Block(d) for _ in range(depth)])
        self.second = nn.ModuleList([Block(d) for _ in range(depth)])
        self.head = nn.Linear(d, 10)
        self.gate = gate

    def forward(self, x):
        h = x
        for b in self.first:
            h = b(h)
        if not self.gate:
            h = h * 0.5
        elif h.abs().mean().item() > 0.8:  # the graph break
            h = h * 0.5
        for b in self.second:
            h = b(h)
        return self.head(h)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="numpy")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    limit_threads()
    repeat = 3 if args.quick else 7
    rng = np.random.default_rng(0)
    xs = [eagerc.from_numpy((rng.standard_normal((16, 64)) * s).astype(np.float32)) for s in (0.1, 3.0)]
    y = eagerc.from_numpy(rng.integers(0, 10, 16))
    eagerc.manual_seed(0)
    base = Net()
    rows = []
    for mode in ("inference", "training step"):
        models = {"eager": copy.deepcopy(base), "no break": copy.deepcopy(base), "break": copy.deepcopy(base)}
        models["no break"].gate = False
        fns = {"eager": models["eager"],
               "no break": eagerc.compile(models["no break"], backend=args.backend),
               "break": eagerc.compile(models["break"], backend=args.backend)}
        opts = {k: eagerc.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}

        def call(k):
            fn = fns[k]
            if mode == "inference":
                def run():
                    with eagerc.no_grad():
                        for x in xs:  # both sides of the branch
                            fn(x)
            else:
                opt = opts[k]

                def run():
                    for x in xs:
                        opt.zero_grad()
                        F.cross_entropy(fn(x), y).backward()
                        opt.step()
            return run
        runs = {k: call(k) for k in fns}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the break's warning)
            for r in runs.values():
                r(), r()
        best = {k: float("inf") for k in runs}
        for _ in range(repeat):  # interleaved: load changes hit every row alike
            for k, r in runs.items():
                best[k] = min(best[k], cpu_us(r, 20) / len(xs))
        traces = fns["break"]._compiled.traces
        e, nb, b = best["eager"], best["no break"], best["break"]
        rows.append((mode, f"{e:.0f} us", f"{nb:.0f} us ({e / nb:.2f}x)", f"{b:.0f} us ({e / b:.2f}x)",
                     f"{nb / b:.2f}", f"{(e - b) / (e - nb):.2f}" if e > nb else "-", traces))
    print(f"graph break in the middle of a residual MLP (backend {args.backend}, CPU time per call, best of {repeat})")
    print(table(rows, ["case", "eager", "compiled, no break", "compiled, break", "speedup kept",
                       "time saved kept", "traces"]))


if __name__ == "__main__":
    main()
