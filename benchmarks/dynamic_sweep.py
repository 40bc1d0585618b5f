"""A batch-size sweep over compiled functions: traces and total time, against eager, same run.

    python benchmarks/dynamic_sweep.py [--backend numpy|interpreter|c] [--max-batch 64]

Sweeps the batch size 1..max over the MLP of train_step.py (256 wide): inference (no_grad),
a compiled model whose outputs need a backward (the loss and backward() outside), and a whole
training step (forward, cross-entropy, backward, optimizer step in one compiled function)
with Adam, RMSprop and SGD with momentum. Each row: traces the compiled function made
(`traces`, an eager first step that asked for a retrace included), the CPU time of the whole
compiled sweep (tracing and compiling included) and of the same sweep run eagerly. Target
(issue 15 section 3): at most 2 traces per sweep (one static, one symbolic), the optimizer's
first step included: Adam and RMSprop make their state while the first call is traced, and so
does SGD with momentum (its first buffer is a copy of the gradient: the traced call sets it,
its graph holds the general rule; 3 traces before, its first step running eagerly).
"training step with loss.item()" checks the loss value in the middle of the step (a graph break:
the step runs in two compiled pieces, breaks.py); its pieces become symbolic too, so it also
costs 2 traces (one per size up to max_graphs before, then eager); so does one that returns
`loss.item()` (its value is read per call, no guard: 4 values, then eager before). "training step with
GradScaler" scales the loss, steps through the scaler (its inf check reads a value: a break)
and updates the scale.
Backend "c" builds
kernels per new size (its kernels are static-shaped): the wall time shows the compiler runs,
the first time (an empty kernel cache: EAGERC_CACHE_DIR=$(mktemp -d)) and from the cache.
"""
import argparse
import copy
import os
import sys
import time
import warnings

# One BLAS thread (BENCH_THREADS to change), as in the other benchmarks
if os.environ.get("BENCH_THREADS", "1") != "default":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
import eagerc.nn.functional as F  # noqa: E402
from _harness import limit_threads, table, ratio  # noqa: E402
from compile import training_step  # noqa: E402
from train_step import mlp  # noqa: E402


def batches(n, width=256, seed=0):
    rng = np.random.default_rng(seed)
    return [(eagerc.from_numpy(rng.standard_normal((b, width)).astype(np.float32)),
             eagerc.from_numpy(rng.integers(0, 10, b))) for b in range(1, n + 1)]


def infer(model):
    def f(x):
        with eagerc.no_grad():
            return model(x)
    return f


def with_backward(model):
    def f(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss.detach()
    return f


def reading_loss(model, opt, returns=False):
    """A training step that reads its loss (a graph break), as logging code does: it checks the
    value in the middle of the step, or (`returns`) returns loss.item()."""
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if not returns and loss.item() > 1e4:
            raise FloatingPointError("the loss diverged")
        loss.backward()
        opt.step()
        if returns:
            return loss.item()
        return loss.detach()
    return step


def scaled(model, opt):
    """A training step through a GradScaler (float32 here: the scaler's work without autocast)."""
    scaler = eagerc.amp.GradScaler("cpu")

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach()
    return step


def sweep(fn, data, takes_y):
    """(wall seconds, CPU seconds of this process, outputs); wall counts kernel builds by the C
    compiler (child processes), CPU is steadier on a loaded machine."""
    w0, c0 = time.perf_counter(), time.process_time()
    outs = [fn(x, y) if takes_y else fn(x) for x, y in data]
    return time.perf_counter() - w0, time.process_time() - c0, outs


def case(name, make, data, backend, takes_y):
    """make(model) -> (function to sweep, the object whose .traces counts)."""
    eagerc.manual_seed(0)
    model = mlp(eagerc)
    twin = copy.deepcopy(model)
    eager_fn, _ = make(model, None)
    compiled_fn, counter = make(twin, backend)
    we, te, oe = sweep(eager_fn, data, takes_y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # an older tree's max_graphs warning
        try:
            wc, tc, oc = sweep(compiled_fn, data, takes_y)
        except Exception as e:   # (an older tree: a symbolic forward lost its backward)
            return (name, str(counter().traces), f"fails: {type(e).__name__}", "-", f"{te:.2f} s", "-", "-")
    arr = lambda v: v.detach().numpy() if isinstance(v, eagerc.Tensor) else np.asarray(v)  # noqa: E731 (a float)
    worst = max(float(np.max(np.abs(arr(a) - arr(b)))) for a, b in zip(oe, oc))
    return (name, str(counter().traces), f"{wc:.2f} s", f"{tc:.2f} s", f"{te:.2f} s", ratio(te, tc), f"{worst:.1e}")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="numpy")
    p.add_argument("--max-batch", type=int, default=64)
    args = p.parse_args(argv)
    limit_threads()
    data = batches(args.max_batch)
    rows = []

    def make_infer(model, backend):
        if backend is None:
            return infer(model), None
        c = eagerc.compile(infer(model), backend=backend)
        return c, lambda: c
    rows.append(case("inference", make_infer, data, args.backend, False))

    def make_backward(model, backend):
        if backend is None:
            return with_backward(model), None
        c = eagerc.compile(model, backend=backend)
        return with_backward(c), lambda: c

    rows.append(case("forward + backward outside", make_backward, data, args.backend, True))

    optimizers = {"Adam": lambda ps: eagerc.optim.Adam(ps, lr=1e-3),
                  "RMSprop": lambda ps: eagerc.optim.RMSprop(ps, lr=1e-3),
                  "SGD momentum": lambda ps: eagerc.optim.SGD(ps, lr=1e-2, momentum=0.9)}
    for name, make_opt in optimizers.items():
        def make_step(model, backend, make_opt=make_opt):
            opt = make_opt(model.parameters())
            if backend is None:
                return training_step(model, opt), None
            c = eagerc.compile(training_step(model, opt), backend=backend)
            return c, lambda: c
        rows.append(case(f"training step ({name})", make_step, data, args.backend, True))

    for name, wrap in (("training step with loss.item() (Adam)", reading_loss),
                       ("training step returning loss.item() (Adam)", lambda m, o: reading_loss(m, o, returns=True)),
                       ("training step with GradScaler (Adam)", scaled)):
        def make_wrapped(model, backend, wrap=wrap):
            opt = eagerc.optim.Adam(model.parameters(), lr=1e-3)
            if backend is None:
                return wrap(model, opt), None
            c = eagerc.compile(wrap(model, opt), backend=backend)
            return c, lambda: c
        rows.append(case(name, make_wrapped, data, args.backend, True))
    print(f"batch sizes 1..{args.max_batch}, backend {args.backend}: time of the whole sweep")
    print(table(rows, ["sweep", "traces", "compiled wall", "compiled CPU", "eager CPU", "CPU speedup",
                       "max |diff|"]))


if __name__ == "__main__":
    main()
