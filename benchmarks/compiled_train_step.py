"""Whole compiled training steps: eagerc eager, eagerc.compile (numpy and c backends),
PyTorch eager and torch.compile (when installed), same models, same run.

    python benchmarks/compiled_train_step.py [--quick] [--no-torch-compile] [--only GPT]

The step (forward + cross-entropy + backward + Adam) is one compiled function, as in
tests/test_compile_training.py. Cases: the MLP of train_step.py at batch 8, 64, 512 and
its 2-layer GPT block stack (128 wide, 4 heads, sequence 64, batch 8). Before timing, the
compiled models' parameters after 3 steps are checked against eager (rtol 1e-4), so a
wrong program's speed is never reported. 'first' = the first two compiled calls (the
first traces and compiles, Adam making its state while traced); for backend c it
says how many C sources were compiled (cc) or found in the kernel cache (hit).

'floor' is the time of the compiled c step's matrix products alone, same shapes, back to back
through the same BLAS (_harness.matmul_floor): what the step would take if everything else
were free; 'c / floor' is how close the compiled step comes to it. torch.compile's column is
its steady state (its compile, tens of seconds, is not timed); ratios are against it.

Timing: every column of a row is timed in turns (_harness.interleaved_us), best of 7 (3 with
--quick), in this thread's CPU time with one thread (the default), wall time with more: on a
shared machine a wall clock read a minute apart for eagerc and for torch.compile measured
the load, not the step.
"""
import argparse
import copy
import os
import sys
import time

# One BLAS / OpenMP thread (BENCH_THREADS to change) for numpy, the C kernels and PyTorch
# alike: set before numpy loads OpenBLAS.
if os.environ.get("BENCH_THREADS", "1") != "default":   # "default": the user's threading, nothing pinned
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
from eagerc.runtime import kernel_cache  # noqa: E402
from _harness import blas_info, interleaved_us, matmul_floor, try_torch, table, ratio  # noqa: E402
from train_step import mlp, gpt, load_state  # noqa: E402


def training_step(lib, model):
    F = lib.nn.functional
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def check(name, build, x, y):
    """Before timing anything: in float64, 3 compiled steps per backend give the parameters of
    3 eager steps (float32 is not compared: Adam divides near-zero gradients by their own
    size, so a last-bit difference in a reduction's order moves a parameter by ~1e-5)."""
    eagerc.manual_seed(0)
    em = build(eagerc).to(eagerc.float64)
    xe, ye = eagerc.from_numpy(x.astype(np.float64) if x.dtype.kind == "f" else x), eagerc.from_numpy(y)
    models = {b: copy.deepcopy(em) for b in ("numpy", "c")}
    steps = {b: eagerc.compile(training_step(eagerc, m), backend=b) for b, m in models.items()}
    eager = training_step(eagerc, em)
    for _ in range(3):
        eager(xe, ye)
        for s in steps.values():
            s(xe, ye)
    for backend, model in models.items():
        for (n, p), q in zip(em.named_parameters(), model.parameters()):
            a, b = q.detach().numpy(), p.detach().numpy()
            if not np.allclose(a, b, rtol=1e-9, atol=1e-12):
                raise AssertionError(f"{name} backend {backend}: {n} differs from eager after 3 float64 "
                                     f"steps, max abs diff {np.abs(a - b).max():.3g}")


def _graphs(compiled):
    """The optimised graphs a compiled step's programs run (a joint entry's forward and backward)."""
    out = []
    for e in compiled.entries.values():
        if getattr(e, "program", None) is not None:
            out.append(e.graph)
        elif getattr(e, "fwd_program", None) is not None:
            out += [e.forward, e.backward]
    return out


def run_case(name, build, x, y, torch, repeat, torch_compile=True):
    check(name, build, x, y)
    eagerc.manual_seed(0)
    em = build(eagerc)
    xe, ye = eagerc.from_numpy(x), eagerc.from_numpy(y)
    steps = {"eager": training_step(eagerc, em)}
    firsts, models = {}, {}
    for backend in ("numpy", "c"):
        models[backend] = copy.deepcopy(em)
        steps[backend] = eagerc.compile(training_step(eagerc, models[backend]), backend=backend)
    for _ in range(3):
        steps["eager"](xe, ye)
    for backend in ("numpy", "c"):
        before = dict(kernel_cache.stats)
        t0 = time.perf_counter()
        steps[backend](xe, ye)
        steps[backend](xe, ye)
        firsts[backend] = f"{(time.perf_counter() - t0) * 1000:.0f} ms"
        if backend == "c":
            firsts[backend] += (f" ({kernel_cache.stats['compiles'] - before['compiles']} cc,"
                                f" {kernel_cache.stats['hits'] - before['hits']} hit)")
    floor = matmul_floor(_graphs(steps["c"]))
    steps["floor"] = floor
    calls = {k: (lambda s=s: s(xe, ye)) for k, s in steps.items()}
    if torch is not None:
        tm = build(torch)
        load_state(torch, tm, em)
        t_step = training_step(torch, tm)
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        calls["torch"] = lambda: t_step(xt, yt)
        if torch_compile:
            tcm = build(torch)
            load_state(torch, tcm, em)
            tc_step = torch.compile(training_step(torch, tcm))
            for _ in range(3):       # compiles (forward, backward, optimizer), then steady
                tc_step(xt, yt)
            calls["torch.compile"] = lambda: tc_step(xt, yt)
    ms = {k: us / 1000 for k, us in interleaved_us(calls, repeat=repeat, budget_s=0.2).items()}
    t, tc = ms.get("torch"), ms.get("torch.compile")
    return (name, "-" if t is None else f"{t:.2f} ms", "-" if tc is None else f"{tc:.2f} ms",
            *(f"{ms[k]:.2f} ms ({ratio(ms[k], t)})" for k in ("eager", "numpy")),
            f"{ms['c']:.2f} ms ({ratio(ms['c'], tc)})", f"{ms['floor']:.2f} ms ({floor.count})",
            ratio(ms["c"], ms["floor"]), firsts["numpy"], firsts["c"])


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile (its compile takes minutes)")
    p.add_argument("--only", default="", help="run only the cases whose name contains this")
    args = p.parse_args(argv)
    torch = try_torch()
    rng = np.random.default_rng(0)
    cases = [(f"MLP batch {b}", mlp, rng.standard_normal((b, 256)).astype(np.float32),
              rng.integers(0, 10, b)) for b in (8, 64, 512)]
    cases.append(("GPT 2x128 b8 t64", gpt, rng.integers(0, 256, (8, 64)), rng.integers(0, 256, (8, 64))))
    repeat = 3 if args.quick else 7
    rows = [run_case(name, build, x, y, torch, repeat, not args.no_torch_compile)
            for name, build, x, y in cases if args.only in name]
    print(f"training step (forward + backward + Adam), whole step compiled; eager and numpy: (ratio vs "
          f"torch eager), c: (ratio vs torch.compile); torch threads {torch.get_num_threads() if torch else '-'}; "
          f"{blas_info()}")
    print(table(rows, ["model", "torch", "torch.compile", "eagerc eager", "compiled numpy", "compiled c",
                       "floor (products)", "c / floor", "first numpy", "first c"]))


if __name__ == "__main__":
    main()
