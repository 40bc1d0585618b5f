"""LSTM layer forward + backward: eagerc eager and compiled vs PyTorch eager (when installed).

    python benchmarks/rnn.py [--quick]

One nn.LSTM layer, sequence 64, batch 32, input 128, hidden 256 (issue 12 item 2: within 1.5x of
PyTorch CPU eager at the same thread count), plus a GRU of the same size. The input requires grad,
as it does after an embedding or a lower layer.

How it measures, so that one run's ratio can be trusted on a shared, loaded machine: CPU time of
the calling thread (time.thread_time: every library runs on this one thread when pinned, and CPU
time measures the work where wall time measures the neighbours; process CPU time with
BENCH_THREADS=default, where BLAS may start threads), the three callables interleaved call by call
for ROUNDS rounds (a load spike hits all alike), and for each the median and the range over the
rounds, and the eagerc/PyTorch ratio as the median (and range) of the per-round ratios. The load
average is printed with the table.
"""
import argparse
import os
import sys
import time

if os.environ.get("BENCH_THREADS", "1") != "default":   # "default": the user's threading, nothing pinned
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
from _harness import ratio, table, try_torch  # noqa: E402


def _step(lib, model, x):
    def run():
        out, _ = model(x)
        out.sum().backward()
        x.grad = None
        for p in model.parameters():
            p.grad = None
    return run


def _rounds_ms(fns, rounds):
    """Each fn's CPU time in ms, `rounds` times, calling them in turns: a list per fn."""
    clock = time.process_time if os.environ.get("BENCH_THREADS") == "default" else time.thread_time
    times = [[] for _ in fns]
    for fn in fns:
        fn()  # warm up (and trace, for compiled)
        fn()
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t = clock()
            fn()
            times[i].append((clock() - t) * 1e3)
    return times


def _median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def _spread(v, unit=" ms", digits=1):
    """'median (min-max)' of a list of numbers."""
    return f"{_median(v):.{digits}f}{unit} ({min(v):.{digits}f}-{max(v):.{digits}f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch = try_torch()
    T, B, I, H = 64, 32, 128, 256
    rounds = 5 if args.quick else 21
    x_np = np.random.default_rng(0).standard_normal((T, B, I)).astype(np.float32)
    rows = []
    for kind in ("LSTM", "GRU"):
        model = getattr(eagerc.nn, kind)(I, H)
        x = eagerc.tensor(x_np, requires_grad=True)
        fns = [_step(eagerc, model, x), _step(eagerc, eagerc.compile(model), x)]
        if torch is not None:
            tmodel = getattr(torch.nn, kind)(I, H)
            tmodel.load_state_dict({k: torch.from_numpy(v.detach().numpy()) for k, v in model.state_dict().items()})
            fns.append(_step(torch, tmodel, torch.tensor(x_np, requires_grad=True)))
        times = _rounds_ms(fns, rounds)
        per_round = [] if torch is None else [[t / p for t, p in zip(times[i], times[2])] for i in (0, 1)]
        rows.append([f"{kind} fwd+bwd [{T},{B},{I}]->{H}", _spread(times[0]), _spread(times[1]),
                     "-" if torch is None else _spread(times[2]),
                     "-" if torch is None else _spread(per_round[0], "x", 2),
                     "-" if torch is None else _spread(per_round[1], "x", 2)])
    print(f"threads: {os.environ.get('BENCH_THREADS', '1')} (BENCH_THREADS), {rounds} interleaved rounds, "
          f"median (min-max) of CPU time; load average {os.getloadavg()[0]:.2f}")
    print(table(rows, ["case", "eagerc", "compiled", "pytorch", "eager/pt", "compiled/pt"]))


if __name__ == "__main__":
    main()
