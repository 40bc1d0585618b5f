"""Fused C kernels (backend "c") vs eager numpy vs PyTorch eager, same run.

    python benchmarks/fused_kernels.py          # BENCH_THREADS=1 by default (as compile.py);
                                                # BENCH_THREADS=default: no thread variables set
    python benchmarks/fused_kernels.py --no-torch-compile   # without torch.compile's column

Cases (issue 5): tanh-GELU written as elementwise ops on 4M float32; softmax and
layer_norm over 4096x1024 float32 written as primitives (amax/sub/exp/sum/div;
mean/sub/mul/mean/add/rsqrt/mul) and as the nn.functional ops (which backend c
decomposes into the same one-kernel row computation); C compile time per kernel, and the
time to load the same kernels from the disk cache. With PyTorch installed, PyTorch eager and
torch.compile's steady state (its compile is not timed) of the same case.

Then eager mode: F.softmax / F.log_softmax / F.layer_norm / F.rms_norm / F.cross_entropy /
F.dropout forward and forward+backward over
4096x1024 float32, eager with the generated C row kernels (runtime/kernels/eager.py) vs
the numpy kernels (EAGERC_EAGER_KERNELS=0's path) vs PyTorch eager, in CPU time of the calling
thread (one thread each; process CPU time with BENCH_THREADS=default): C and PyTorch as
EAGER_ROUNDS back-to-back pairs (which of the two goes first alternates), so load on the machine
hits both alike, then the numpy kernels in rounds of their own. The median time of each, and
C / torch as the median (and quartiles) of the per-pair ratios. Why so: a best-of-N of each side taken
at different moments mixed quiet and loaded moments and swung the ratio 1.0-1.4x; and with the
numpy kernels measured between the two, their 16 MB temporaries evicted the input from the
cache before one side and not the other (4096x1024 float32 in and out is half of this machine's
L3), which swung per-round ratios 0.2-2.0x.
    python benchmarks/fused_kernels.py --eager   # the eager table only
"""
import os
import sys
import tempfile
import time

if os.environ.get("BENCH_THREADS", "1") != "default":   # "default": the user's threading, nothing pinned
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
os.environ.setdefault("EAGERC_CACHE_DIR", tempfile.mkdtemp(prefix="eagerc-bench-kernels-"))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
import eagerc.compiler.backends.c_backend  # noqa: E402,F401  (registers "c")
from eagerc.runtime import kernel_cache  # noqa: E402
from _harness import per_call_us, table, ratio, fmt, try_torch, THREADS  # noqa: E402
from eagerc.runtime.kernels import eager as c_rows  # noqa: E402

ROUNDS = 7
EAGER_ROUNDS = 15


def gelu(x):
    return 0.5 * x * (1 + eagerc.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def layer_norm(x):
    d = x - x.mean(-1, keepdim=True)
    return d * ((d * d).mean(-1, keepdim=True) + 1e-5).rsqrt()


W = eagerc.tensor(np.random.default_rng(1).standard_normal(1024).astype(np.float32))
B = eagerc.tensor(np.random.default_rng(2).standard_normal(1024).astype(np.float32))


def main(torch_compile=True):
    torch = try_torch()
    rng = np.random.default_rng(0)
    cases = [
        ("gelu_tanh 4M f32", gelu, rng.standard_normal(1 << 22).astype(np.float32),
         (lambda t: torch.nn.functional.gelu(t, approximate="tanh")) if torch else None),
        ("softmax 4096x1024 f32", softmax, rng.standard_normal((4096, 1024)).astype(np.float32),
         (lambda t: torch.softmax(t, -1)) if torch else None),
        ("layer_norm 4096x1024 f32", layer_norm, rng.standard_normal((4096, 1024)).astype(np.float32),
         (lambda t: torch.nn.functional.layer_norm(t, (1024,))) if torch else None),
        ("F.softmax 4096x1024 f32", lambda x: eagerc.nn.functional.softmax(x, -1),
         rng.standard_normal((4096, 1024)).astype(np.float32), (lambda t: torch.softmax(t, -1)) if torch else None),
        ("F.log_softmax 4096x1024 f32", lambda x: eagerc.nn.functional.log_softmax(x, -1),
         rng.standard_normal((4096, 1024)).astype(np.float32),
         (lambda t: torch.log_softmax(t, -1)) if torch else None),
        ("F.layer_norm(w, b) 4096x1024 f32", lambda x: eagerc.nn.functional.layer_norm(x, (1024,), W, B),
         rng.standard_normal((4096, 1024)).astype(np.float32),
         (lambda t: torch.nn.functional.layer_norm(t, (1024,), torch.from_numpy(W.numpy()),
                                                   torch.from_numpy(B.numpy()))) if torch else None),
    ]
    rows, compile_rows = [], []
    for name, fn, a, tfn in cases:
        x = eagerc.tensor(a)
        c = eagerc.compile(fn, backend="c")
        before = dict(kernel_cache.stats)
        with eagerc.no_grad():
            t0 = time.perf_counter()
            got = c(x)
            first = time.perf_counter() - t0
            got = c(x)    # the first call may run eagerly while tracing
            want = fn(x)
            err = float(np.max(np.abs(got.numpy() - want.numpy()) / (1 + np.abs(want.numpy()))))
            t_c = per_call_us(lambda: c(x), repeat=7)
            t_np = per_call_us(lambda: fn(x), repeat=5)
        t_torch = t_tc = None
        if tfn is not None:
            tx = torch.from_numpy(a)
            with torch.no_grad():
                tfn(tx)
                t_torch = per_call_us(lambda: tfn(tx), repeat=7)
                if torch_compile:
                    tc = torch.compile(tfn)
                    tc(tx)
                    t_tc = per_call_us(lambda: tc(tx), repeat=7)
        progs = [e.program for e in c.entries.values() if getattr(e, "program", None) is not None]
        nk = sum(len(getattr(p, "kernels", ())) for p in progs)
        comp_s = kernel_cache.stats["compile_seconds"] - before["compile_seconds"]
        # the same kernels from the disk cache: forget the loaded library, load again
        src = progs[0].c_source
        kernel_cache._loaded.clear()
        t0 = time.perf_counter()
        kernel_cache.load(src)
        cached = time.perf_counter() - t0
        rows.append([name, fmt(t_c / 1e3, "ms"), fmt(t_np / 1e3, "ms"), fmt(t_torch and t_torch / 1e3, "ms"),
                     ratio(t_torch, t_c), fmt(t_tc and t_tc / 1e3, "ms"), ratio(t_c, t_tc), f"{err:.1e}"])
        compile_rows.append([name, str(nk), f"{comp_s * 1e3:.0f} ms", f"{first * 1e3:.0f} ms",
                             f"{cached * 1e3:.2f} ms"])
    print(f"threads: {THREADS or 'default'} (BENCH_THREADS; C kernels {eagerc.get_num_threads()}), "
          f"cache: {os.environ['EAGERC_CACHE_DIR']}")
    print(table(rows, ["case", "backend c", "numpy eager", "torch eager", "torch / c", "torch.compile",
                       "c / torch.compile", "max rel. diff c vs eager"]))
    print()
    print(table(compile_rows, ["case", "kernels", "cc time (one .so)", "first call (trace+cc)",
                               "load from disk cache"]))


def _cpu_us(fn, number=2):
    """CPU time per call (the calling thread's when threads are pinned: time.thread_time; all
    threads' with BENCH_THREADS=default): on a loaded machine wall time mostly measures the
    other processes; CPU time is what the call itself costs."""
    clock = time.process_time if THREADS is None else time.thread_time
    fn()
    t0 = clock()
    for _ in range(number):
        fn()
    return (clock() - t0) / number * 1e6


def _median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def _quartiles(v):
    v = sorted(v)
    return f"{v[len(v) // 4]:.2f}-{v[(3 * len(v)) // 4]:.2f}"


def eager_main():
    """Eager composites: generated C kernels vs numpy kernels vs PyTorch, interleaved."""
    torch = try_torch()
    F = eagerc.nn.functional
    a = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)
    g = np.random.default_rng(1).standard_normal((4096, 1024)).astype(np.float32)
    ew, eb = W.detach(), B.detach()
    cases = [("softmax", lambda x: F.softmax(x, -1), lambda t: torch.softmax(t, -1)),
             ("log_softmax", lambda x: F.log_softmax(x, -1), lambda t: torch.log_softmax(t, -1)),
             ("layer_norm(w, b)", lambda x: F.layer_norm(x, (1024,), ew, eb),
              lambda t: torch.nn.functional.layer_norm(t, (1024,), tw, tb)),
             ("rms_norm(w)", lambda x: F.rms_norm(x, (1024,), ew, 1e-6),
              lambda t: torch.nn.functional.rms_norm(t, (1024,), tw, 1e-6)),
             ("cross_entropy", lambda x: F.cross_entropy(x, et),
              lambda t: torch.nn.functional.cross_entropy(t, tt)),
             ("dropout(0.1)", lambda x: F.dropout(x, 0.1), lambda t: torch.nn.functional.dropout(t, 0.1))]
    targets = np.random.default_rng(2).integers(0, 1024, 4096)
    et = eagerc.tensor(targets)
    if torch:
        tw, tb = torch.from_numpy(W.numpy()), torch.from_numpy(B.numpy())
        tt = torch.from_numpy(targets)
    rows = []
    for name, fn, tfn in cases:
        for backward in (False, True):
            x, gx = eagerc.tensor(a, requires_grad=backward), eagerc.tensor(g)
            tx, tg = (torch.from_numpy(a).requires_grad_(backward), torch.from_numpy(g)) if torch else (None, None)

            def ours(f=fn, x=x, gx=gx, backward=backward):
                y = f(x)
                if backward:
                    y.backward(gx if y.ndim else None)   # a loss: its own gradient

            def theirs(f=tfn, t=tx, tg=tg, backward=backward):
                y = f(t)
                if backward:
                    y.backward(tg if y.ndim else None)
            times = {"c": [], "numpy": [], "torch": []}
            # C and PyTorch as back-to-back pairs, first one then the other in turn; the numpy
            # kernels in rounds of their own after them (their 16 MB temporaries, run between the
            # two, evicted the shared input from the cache for whichever came next)
            for r in range(EAGER_ROUNDS):
                for k in (("c", "torch") if r % 2 == 0 else ("torch", "c")) if torch else ("c",):
                    times[k].append(_cpu_us(theirs if k == "torch" else ours))
            c_rows.set_enabled(False)
            for _ in range(EAGER_ROUNDS // 3 + 1):
                times["numpy"].append(_cpu_us(ours))
            c_rows.set_enabled(True)
            t = {k: _median(v) if v else None for k, v in times.items()}
            per_round = [c / p for c, p in zip(times["c"], times["torch"])]
            rows.append([f"F.{name}{' + backward' if backward else ''} 4096x1024 f32", fmt(t["c"] / 1e3, "ms"),
                         fmt(t["numpy"] / 1e3, "ms"), fmt(t["torch"] and t["torch"] / 1e3, "ms"),
                         f"{_median(per_round):.2f}x ({_quartiles(per_round)})"
                         if per_round else "-", ratio(t["c"], t["numpy"])])
    print(f"eager, threads: {THREADS} (BENCH_THREADS), {EAGER_ROUNDS} interleaved rounds, medians of CPU time; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(table(rows, ["case", "eager C kernels", "eager numpy kernels", "torch eager", "C / torch (quartiles)",
                       "C / numpy"]))


if __name__ == "__main__":
    if "--eager" not in sys.argv:
        main(torch_compile="--no-torch-compile" not in sys.argv)
        print()
    eager_main()
