"""Compile latency and steady-state time: eagerc eager vs eagerc.compile, same run.

    python benchmarks/compile.py [--backend numpy|interpreter]

Cases: MLP inference (batch 8), MLP training step (Adam, batch 8 and 64) and a GPT block
stack training step. Targets (issue 4): tracing + compiling the whole MLP training step
<= 0.25 s; the compiled MLP step at batch 8 >= 1.3x faster than eager; compiled never
more than 5% slower than eager.
"""
import argparse
import copy
import os
import sys
import time

# One BLAS thread (BENCH_THREADS to change) for numpy and PyTorch alike: set before numpy
# loads OpenBLAS; on a small shared machine threaded BLAS on small matrices measures contention.
if os.environ.get("BENCH_THREADS", "1") != "default":   # "default": the user's threading, nothing pinned
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
import eagerc.nn.functional as F  # noqa: E402
from _harness import per_call_us, limit_threads, table, ratio  # noqa: E402
from train_step import mlp, gpt  # noqa: E402


def training_step(model, opt):
    def step(x, y):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def measure(name, eager_fn, compiled_fn, args, repeat):
    eager_fn(*args)
    t0 = time.perf_counter()
    compiled_fn(*args)  # first call: may run eagerly (optimizer warm-up) ...
    compiled_fn(*args)  # ... and trace + compile
    first = time.perf_counter() - t0
    e = per_call_us(lambda: eager_fn(*args), repeat=repeat, budget_s=0.2) / 1000
    c = per_call_us(lambda: compiled_fn(*args), repeat=repeat, budget_s=0.2) / 1000
    return (name, f"{first * 1000:.0f} ms", f"{e:.3f} ms", f"{c:.3f} ms", ratio(e, c))


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="numpy")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    limit_threads()
    repeat = 3 if args.quick else 7
    rng = np.random.default_rng(0)
    rows = []

    eagerc.manual_seed(0)
    m = mlp(eagerc).eval()
    x8 = eagerc.from_numpy(rng.standard_normal((8, 256)).astype(np.float32))

    def infer(model):
        def f(x):
            with eagerc.no_grad():
                return model(x)
        return f
    rows.append(measure("MLP inference b8", infer(m), eagerc.compile(infer(m), backend=args.backend), (x8,),
                        repeat))

    for b in (8, 64):
        eagerc.manual_seed(0)
        me = mlp(eagerc)
        mc = copy.deepcopy(me)
        x = eagerc.from_numpy(rng.standard_normal((b, 256)).astype(np.float32))
        y = eagerc.from_numpy(rng.integers(0, 10, b))
        se = training_step(me, eagerc.optim.Adam(me.parameters(), lr=1e-3))
        sc = eagerc.compile(training_step(mc, eagerc.optim.Adam(mc.parameters(), lr=1e-3)),
                            backend=args.backend)
        rows.append(measure(f"MLP train step b{b}", se, sc, (x, y), repeat))

    eagerc.manual_seed(0)
    ge = gpt(eagerc)
    gc = copy.deepcopy(ge)
    idx = eagerc.from_numpy(rng.integers(0, 256, (8, 64)))
    tgt = eagerc.from_numpy(rng.integers(0, 256, (8, 64)))
    se = training_step(ge, eagerc.optim.Adam(ge.parameters(), lr=1e-3))
    sc = eagerc.compile(training_step(gc, eagerc.optim.Adam(gc.parameters(), lr=1e-3)), backend=args.backend)
    rows.append(measure("GPT 2x128 train step", se, sc, (idx, tgt), repeat))

    print(f"eagerc.compile (backend={args.backend}) vs eager; 'first' = warm-up + trace + compile")
    print(table(rows, ["case", "first", "eager", "compiled", "speedup"]))


if __name__ == "__main__":
    main()
