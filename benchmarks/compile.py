"""Compile latency and steady-state time: eagerc eager vs eagerc.compile, same run.

    python benchmarks/compile.py [--backend default|c|numpy|interpreter]
    python benchmarks/compile.py --cold [--backend c] [--layers 2,8,32]

Cases: MLP inference (batch 8), MLP training step (Adam, batch 8 and 64) and a GPT block
stack training step. Targets (issue 4): tracing + compiling the whole MLP training step
<= 0.25 s; the compiled MLP step at batch 8 >= 1.3x faster than eager; compiled never
more than 5% slower than eager.

--cold (issue 15): time to a compiled steady state -- the first two calls of a training
step (Adam) -- with an EMPTY kernel cache (a temporary $EAGERC_CACHE_DIR), each case in a
fresh process: the MLP step (b=64), the GPT step (2 layers x 128, b=8, T=64) and, with
--layers, GPT steps of that many layers x 64 wide. Each case then runs again in a second
process on the now warm cache, which must compile nothing. Columns: wall time of the first
two calls, of which the C compiler's (wall, kernel_cache.stats; and its processes' CPU
time), the process's own CPU time, kernels / distinct C functions, compiles cold and warm, steady step time
(compiles and compiler time count the first two calls only: building the model beforehand may
build eager kernels of its own, e.g. init's uniform_, once per machine). Targets:
MLP <= 0.25 s, GPT <= 1.5 s, 32 layers <= 1.5 s (backend c), 0 compiles warm.
"""
import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
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


def _backend(name):
    return None if name == "default" else name


def cold_case(case, layers, backend):
    """One case in this (fresh) process: the first two calls of its compiled training step
    timed, then its steady step; a JSON line for `cold`."""
    from eagerc.runtime import kernel_cache
    rng = np.random.default_rng(0)
    eagerc.manual_seed(0)
    if case == "mlp":
        model = mlp(eagerc)
        x, y = rng.standard_normal((64, 256)).astype(np.float32), rng.integers(0, 10, 64)
    else:
        model = gpt(eagerc, d=128 if case == "gpt" else 64, layers=layers)
        x, y = rng.integers(0, 256, (8, 64)), rng.integers(0, 256, (8, 64))
    x, y = eagerc.from_numpy(x), eagerc.from_numpy(y)
    step = eagerc.compile(training_step(model, eagerc.optim.Adam(model.parameters(), lr=1e-3)),
                          backend=_backend(backend))
    # the compilers' figures count from here: model construction may build eager kernels (init's uniform_)
    cc0, n0 = kernel_cache.stats["compile_seconds"], kernel_cache.stats["compiles"]
    ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, c0 = time.perf_counter(), time.process_time()
    step(x, y)
    step(x, y)
    first, cpu = time.perf_counter() - t0, time.process_time() - c0
    ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cc, compiles = kernel_cache.stats["compile_seconds"] - cc0, kernel_cache.stats["compiles"] - n0
    steady = min(_timed(lambda: step(x, y)) for _ in range(5))
    progs = [p for e in step.entries.values() for p in ((e.joint.fwd_program, e.joint.bwd_program)
                                                          if e.joint is not None else (e.program,))]
    kernels = sum(len(getattr(p, "kernels", None) or ()) for p in progs)
    distinct = len({f for p in progs for f in (getattr(p, "functions", None) or {}).values()})
    print(json.dumps({"first": first, "cpu": cpu, "cc": cc,
                      "cc_cpu": ch1.ru_utime + ch1.ru_stime - ch0.ru_utime - ch0.ru_stime,
                      "compiles": compiles, "kernels": kernels, "distinct": distinct,
                      "steady": steady, "backend": step.backend_name}))


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def cold(backend, layers):
    """Each case in a fresh process on an empty kernel cache, then again on the warm one."""
    cases = [("MLP train step b64", "mlp", 0), ("GPT 2x128 train step", "gpt", 2)]
    cases += [(f"GPT {n}x64 train step", "layers", n) for n in layers]
    rows = []
    for title, case, n in cases:
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, EAGERC_CACHE_DIR=d)
            runs = []
            for _ in range(2):       # cold, then warm
                r = subprocess.run([sys.executable, __file__, "--worker", f"{case},{n}", "--backend", backend],
                                   env=env, capture_output=True, text=True)
                if r.returncode:
                    raise SystemExit(r.stderr)
                runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        c, w = runs
        rows.append((title, c["backend"], f"{c['first']:.2f} s", f"{c['cc']:.2f} s", f"{c['cc_cpu']:.2f} s",
                     f"{c['cpu']:.2f} s",
                     f"{c['kernels']} / {c['distinct']}", f"{c['compiles']} / {w['compiles']}",
                     f"{w['first']:.2f} s", f"{c['steady'] * 1000:.1f} ms"))
    print(f"eagerc.compile (backend={backend}): first two calls of a training step, empty kernel cache, "
          "fresh process each")
    print(table(rows, ["case", "backend", "first two", "of which cc", "cc cpu", "python cpu", "kernels / distinct",
                       "compiles cold / warm", "warm first two", "steady"]))


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="default", help="default (eagerc.compile's choice), c, numpy, interpreter")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cold", action="store_true", help="compile latency with an empty kernel cache")
    p.add_argument("--layers", default="", help="with --cold: GPT layer counts to sweep, e.g. 2,8,32")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        limit_threads()
        case, n = args.worker.split(",")
        return cold_case(case, int(n), args.backend)
    if args.cold or args.layers:
        return cold(args.backend, [int(n) for n in args.layers.split(",") if n])
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
    rows.append(measure("MLP inference b8", infer(m), eagerc.compile(infer(m), backend=_backend(args.backend)), (x8,),
                        repeat))

    for b in (8, 64):
        eagerc.manual_seed(0)
        me = mlp(eagerc)
        mc = copy.deepcopy(me)
        x = eagerc.from_numpy(rng.standard_normal((b, 256)).astype(np.float32))
        y = eagerc.from_numpy(rng.integers(0, 10, b))
        se = training_step(me, eagerc.optim.Adam(me.parameters(), lr=1e-3))
        sc = eagerc.compile(training_step(mc, eagerc.optim.Adam(mc.parameters(), lr=1e-3)),
                            backend=_backend(args.backend))
        rows.append(measure(f"MLP train step b{b}", se, sc, (x, y), repeat))

    eagerc.manual_seed(0)
    ge = gpt(eagerc)
    gc = copy.deepcopy(ge)
    idx = eagerc.from_numpy(rng.integers(0, 256, (8, 64)))
    tgt = eagerc.from_numpy(rng.integers(0, 256, (8, 64)))
    se = training_step(ge, eagerc.optim.Adam(ge.parameters(), lr=1e-3))
    sc = eagerc.compile(training_step(gc, eagerc.optim.Adam(gc.parameters(), lr=1e-3)), backend=_backend(args.backend))
    rows.append(measure("GPT 2x128 train step", se, sc, (idx, tgt), repeat))

    print(f"eagerc.compile (backend={args.backend}) vs eager; 'first' = warm-up + trace + compile")
    print(table(rows, ["case", "first", "eager", "compiled", "speedup"]))


if __name__ == "__main__":
    main()
