"""Shared timing harness: best-of-N per-call times, ratios against a baseline
measured in the same run (machines here are shared and noisy)."""
import os
import time
import timeit


def per_call_us(fn, number=None, repeat=9, budget_s=0.05):
    """Best per-call time in microseconds; `number` auto-sized to ~budget_s per repeat."""
    if number is None:
        t = timeit.timeit(fn, number=1)
        number = max(1, int(budget_s / max(t, 1e-7)))
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


# BENCH_THREADS=N pins N threads everywhere; BENCH_THREADS=default pins nothing: the threading
# a user gets with no variables set (eagerc's own defaults, eagerc/runtime/threads.py)
_SETTING = os.environ.get("BENCH_THREADS", "1")
THREADS = None if _SETTING == "default" else int(_SETTING)


def interleaved_us(fns, repeat=7, budget_s=0.2):
    """{name: best per-call time in microseconds} of the callables `fns` ({name: fn}), timed in
    turns -- one repeat of each, then the next round -- so a change of load on a shared machine
    falls on every column alike instead of on whichever ran last. With one thread (the
    default) the clock is this thread's CPU time (`time.thread_time`): BLAS, the C kernels and
    PyTorch all run in the calling thread then, and time other processes take the core from
    it is not counted (with wall time, torch.compile measured a minute after eagerc moved the
    GPT step's ratio from 0.81x to 0.93x). With more threads it is wall time (their work is
    elsewhere than this thread)."""
    clock = time.thread_time if THREADS == 1 else time.perf_counter
    numbers, best = {}, {}
    for name, fn in fns.items():
        t = timeit.timeit(fn, number=1)
        numbers[name] = max(1, int(budget_s / max(t, 1e-7)))
        best[name] = float("inf")
    for _ in range(repeat):
        for name, fn in fns.items():
            n = numbers[name]
            t0 = clock()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (clock() - t0) / n)
    return {name: t * 1e6 for name, t in best.items()}


def limit_threads():
    """Give numpy's BLAS and PyTorch the same thread count (default 1: on a small shared
    machine multi-threaded BLAS on small matrices mostly measures contention)."""
    if THREADS is None:
        return
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(THREADS)
    except ImportError:
        pass


def blas_info():
    """numpy's BLAS as it runs in this process: library, version and the kernel family it picked.

    Printed with the timings because the family decides most of a step's time: a DYNAMIC_ARCH
    OpenBLAS (numpy's wheels) picks kernels from the CPU when it loads, and OPENBLAS_CORETYPE
    overrides it. On an AVX-512 CPU pinned to "Haswell" (AVX2) kernels, sgemm runs at about half
    speed (the conv GEMM of train_step.py's CNN, 32x144 @ 144x14208 on one thread: 1.8 ms against
    1.1 ms with SkylakeX), while PyTorch's own BLAS and oneDNN are unaffected."""
    core = os.environ.get("OPENBLAS_CORETYPE")
    pinned = f" (OPENBLAS_CORETYPE={core})" if core else ""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "numpy BLAS: ? (threadpoolctl not installed)" + pinned
    import numpy  # noqa: F401  (its BLAS is loaded, so threadpoolctl sees it)
    libs = [i for i in threadpool_info() if i.get("user_api") == "blas" and "numpy" in i.get("filepath", "")]
    libs = libs or [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if not libs:
        return "numpy BLAS: ?" + pinned
    i = libs[0]
    return f"numpy BLAS: {i.get('internal_api')} {i.get('version')}, {i.get('architecture')} kernels{pinned}"


def try_torch():
    limit_threads()
    try:
        import torch
        if THREADS is not None:
            torch.set_num_threads(THREADS)
        return torch
    except ImportError:
        return None


def table(rows, headers):
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return "\n".join(out)


def fmt(x, unit="us"):
    return "-" if x is None else f"{x:.2f} {unit}"


def ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}x"


def matmul_floor(graphs):
    """A callable running the matrix products of `graphs` (compiled programs' graphs) alone,
    back to back, through numpy's BLAS: each `linear` as x @ W.T (W row-major: BLAS's transpose
    flag, no bias) and each `matmul` with its shapes, on C-contiguous operands made once. The
    time of one call (its arguments are ignored) is the floor a compiled step could reach if everything but its products
    were free. Other product ops (conv, einsum...) raise: their floor is not a plain GEMM."""
    import numpy as np
    products = []
    for g in graphs:
        for n in g.nodes:
            ins = [x for x in n.inputs if hasattr(x, "shape")]
            if n.op == "linear":
                x, w = ins[0], ins[1]
                rows = int(np.prod(x.shape[:-1]))
                products.append((np.ones((rows, x.shape[-1]), x.dtype), np.ones(w.shape, w.dtype).T))
            elif n.op == "matmul":
                products.append(tuple(np.ones(v.shape, v.dtype) for v in ins))
            else:
                from eagerc.runtime.ops import flops_of
                if flops_of(n.op).category == "matmul-like":
                    raise NotImplementedError(f"matmul_floor: no floor for op {n.op!r}")
    outs = [np.matmul(a, b) for a, b in products]

    def run(*_):
        for (a, b), o in zip(products, outs):
            np.matmul(a, b, out=o)
    run.count, run.products = len(products), products
    return run
