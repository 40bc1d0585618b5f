"""Max pooling in eager mode: its C kernels (runtime/kernels/rows.py: max_pool2d_2x2,
max_pool2d_backward) vs the numpy kernels they replace vs PyTorch, and the CNN training step of
benchmarks/train_step.py with and without them -- all interleaved in one run, one thread.

    python benchmarks/max_pool.py [--quick]

The numpy column is the same process with the two kernels' MIN_ELEMENTS set out of reach.
PyTorch's backward is timed given its forward's indices (aten.max_pool2d_with_indices_backward),
as its autograd runs it; eagerc's backward finds each window's argmax again from x.
"""
import argparse
import os
import sys

if os.environ.get("BENCH_THREADS", "1") != "default":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
from eagerc.runtime.kernels import eager as c_rows  # noqa: E402
from eagerc.runtime.ops import OPS  # noqa: E402
from _harness import blas_info, interleaved_us, try_torch, table, ratio  # noqa: E402
from train_step import cnn, make_step, load_state  # noqa: E402

KERNELS = ("max_pool2d_2x2", "max_pool2d_backward")
_MIN = {k: c_rows.MIN_ELEMENTS[k] for k in KERNELS}


def with_numpy(fn):
    """fn run with the pooling C kernels out of reach (the numpy kernels)."""
    def run():
        for k in KERNELS:
            c_rows.MIN_ELEMENTS[k] = 1 << 62
        try:
            fn()
        finally:
            c_rows.MIN_ELEMENTS.update(_MIN)
    return run


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    args = p.parse_args(argv)
    repeat = 3 if args.quick else 7
    torch = try_torch()
    rng = np.random.default_rng(0)
    attrs = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)
    rows = []
    for shape in ((64, 16, 28, 28), (64, 32, 14, 14)):     # the CNN step's two poolings (channel-major x)
        x = np.ascontiguousarray(rng.standard_normal((shape[1], shape[0]) + shape[2:]).astype(np.float32))
        x = x.swapaxes(0, 1)
        gy = rng.standard_normal(shape[:2] + (shape[2] // 2, shape[3] // 2)).astype(np.float32)
        fns = {"fwd C": lambda: OPS["max_pool2d"].cpu(x, **attrs),
               "bwd C": lambda: OPS["max_pool2d_backward"].cpu(gy, x, **attrs)}
        fns["fwd numpy"], fns["bwd numpy"] = with_numpy(fns["fwd C"]), with_numpy(fns["bwd C"])
        if torch is not None:
            tx, tg = torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(gy)
            _, ti = torch.nn.functional.max_pool2d(tx, 2, 2, return_indices=True)
            fns["fwd torch"] = lambda: torch.nn.functional.max_pool2d(tx, 2, 2)
            fns["bwd torch"] = lambda: torch.ops.aten.max_pool2d_with_indices_backward(
                tg, tx, [2, 2], [2, 2], [0, 0], [1, 1], False, ti)
        t = interleaved_us(fns, repeat=repeat)
        for d, name in (("fwd", "max_pool2d"), ("bwd", "max_pool2d_backward")):
            tt = t.get(f"{d} torch")
            rows.append((f"{name} {'x'.join(map(str, shape))}", "-" if tt is None else f"{tt:.0f} us",
                         f"{t[f'{d} numpy']:.0f} us", f"{t[f'{d} C']:.0f} us", ratio(t[f"{d} C"], tt)))
    x = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    eagerc.manual_seed(0)
    em = cnn(eagerc)
    e_step = make_step(eagerc, em, eagerc.from_numpy(x), eagerc.from_numpy(y))
    fns = {"C": e_step, "numpy": with_numpy(e_step)}
    if torch is not None:
        tm = cnn(torch)
        load_state(torch, tm, em)
        fns["torch"] = make_step(torch, tm, torch.from_numpy(x), torch.from_numpy(y))
    t = interleaved_us(fns, repeat=repeat, budget_s=0.3)
    tt = t.get("torch")
    rows.append(("CNN train step b=64", "-" if tt is None else f"{tt / 1e3:.2f} ms", f"{t['numpy'] / 1e3:.2f} ms",
                 f"{t['C'] / 1e3:.2f} ms", ratio(t["C"], tt)))
    print(f"max pooling, eager, one thread (BENCH_THREADS to change); {blas_info()}")
    print(table(rows, ["case", "torch", "eagerc numpy kernels", "eagerc C kernels", "C/torch"]))


if __name__ == "__main__":
    main()
