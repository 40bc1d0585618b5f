"""LSTM layer forward + backward: eagerc eager and compiled vs PyTorch eager (when installed).

    python benchmarks/rnn.py [--quick]

One nn.LSTM layer, sequence 64, batch 32, input 128, hidden 256 (issue 12 item 2: within 1.5x of
PyTorch CPU eager at the same thread count), plus a GRU of the same size. The input requires grad,
as it does after an embedding or a lower layer. Times are the best of N in CPU time of this process
(time.process_time: every library runs on one thread, and on a shared, loaded machine CPU time
still measures the work where wall time measures the neighbours), the libraries measured in turns.
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


def _best_ms(fns, repeat):
    """Best CPU time of each fn in ms, calling them in turns (so load spikes hit all alike)."""
    best = [float("inf")] * len(fns)
    for fn in fns:
        fn()  # warm up (and trace, for compiled)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.process_time()
            fn()
            best[i] = min(best[i], (time.process_time() - t) * 1e3)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch = try_torch()
    T, B, I, H = 64, 32, 128, 256
    repeat = 3 if args.quick else 10
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
        times = _best_ms(fns, repeat)
        t_torch = times[2] if torch is not None else None
        rows.append([f"{kind} fwd+bwd [{T},{B},{I}]->{H}", f"{times[0]:.1f} ms", f"{times[1]:.1f} ms",
                     "-" if t_torch is None else f"{t_torch:.1f} ms", ratio(times[0], t_torch),
                     ratio(times[1], t_torch)])
    print(table(rows, ["case", "eagerc", "compiled", "pytorch", "eager/pt", "compiled/pt"]))


if __name__ == "__main__":
    main()
