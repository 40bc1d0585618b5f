"""Where the time of one small backward goes: `(a * b).sum().backward()` on 64x64 float32.

    python benchmarks/backward_profile.py [--cprofile N]

Prints per-step CPU times (time.thread_time, best of 7) of the pieces of the step, timed
in isolation -- forward, the implicit root gradient, each node's derivative, the leaves'
accumulation -- and the engine's own bookkeeping as the rest of a whole backward; then,
with --cprofile N (default 20000), cProfile's top functions over N steps. The numbers
before and after the leaner engine (issue 15) are in docs/tensor_autograd.md.
"""
import argparse
import cProfile
import os
import pstats
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
from eagerc.autograd import engine  # noqa: E402


def best_us(fn, number=2000, repeat=7):
    """Best per-call CPU time of this thread, in microseconds."""
    times = []
    for _ in range(repeat):
        t = time.thread_time()
        for _ in range(number):
            fn()
        times.append(time.thread_time() - t)
    return min(times) / number * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cprofile", type=int, default=20000, help="steps under cProfile (0: none)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    a = eagerc.tensor(rng.standard_normal((64, 64)).astype(np.float32), requires_grad=True)
    b = eagerc.tensor(rng.standard_normal((64, 64)).astype(np.float32), requires_grad=True)

    def step():
        (a * b).sum().backward()

    loss = (a * b).sum()
    sum_node = loss.grad_fn
    mul_node = sum_node.next[0]
    one = eagerc.ones_like(loss)
    g_mul = engine.node_input_grads(sum_node, one)[0]
    g_a, g_b = engine.node_input_grads(mul_node, g_mul)

    def derivative(node, g):
        with eagerc.no_grad():
            return lambda: engine.node_input_grads(node, g)

    def accumulate():
        engine._accumulate_leaf(a, g_a, False, False, None)
        engine._accumulate_leaf(b, g_b, False, False, None)

    for _ in range(2000):
        step()
    total = best_us(step)
    forward = best_us(lambda: (a * b).sum())
    with eagerc.no_grad():
        pieces = [("root gradient (ones_like)", best_us(lambda: eagerc.ones_like(loss))),
                  ("sum's derivative", best_us(derivative(sum_node, one))),
                  ("mul's derivative", best_us(derivative(mul_node, g_mul))),
                  ("2 leaves: accumulate into .grad", best_us(accumulate))]
    backward = total - forward
    rows = [("whole step", total), ("forward (mul, sum)", forward), ("backward()", backward)]
    rows += [("  " + name, t) for name, t in pieces]
    rows.append(("  engine bookkeeping (the rest)", backward - sum(t for _, t in pieces)))
    print("(a * b).sum().backward(), 64x64 float32, CPU us per step (best of 7)")
    for name, t in rows:
        print(f"{name:<36}{t:8.2f}")
    if args.cprofile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.cprofile):
            step()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
