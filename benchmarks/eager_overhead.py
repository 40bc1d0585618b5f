"""Per-op eager time on small tensors: eagerc vs plain numpy vs PyTorch (if installed).

    python benchmarks/eager_overhead.py

Reports microseconds per call and the ratio eagerc / PyTorch measured in this run.
Target (issue 2): 64x64 float32 add within 1.5x of PyTorch eager, with and without
requires_grad; (issue 15) mul+sum+backward within 1.1x of PyTorch (the autograd engine's
per-node cost; benchmarks/backward_profile.py shows where that time goes).
"""
import os
import sys

# One BLAS thread (BENCH_THREADS to change) for numpy and PyTorch alike: set before numpy
# loads OpenBLAS; on a small shared machine threaded BLAS on small matrices measures contention.
if os.environ.get("BENCH_THREADS", "1") != "default":   # "default": the user's threading, nothing pinned
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
from _harness import per_call_us, try_torch, table, fmt, ratio  # noqa: E402


def expression(m, x, w):
    """A 20-op expression (forward), the same code for eagerc and torch."""
    h = (x @ w).tanh() * 0.5 + x
    h = h.exp().log() - h.sigmoid()
    h = (h * h).sqrt() + h.abs() * 0.1
    h = m.relu(h) / (h.abs() + 1.0)
    return (h.mean() + h.sum() * 1e-3 - h.amax()) * 2.0


def mlp_like(x, params):
    """10 ops (3 x matmul, bias add, tanh; a mean), the same code for eagerc and torch."""
    for w, c in params:
        x = (x @ w + c).tanh()
    return x.mean()


def main():
    torch = try_torch()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    ea, eb = eagerc.from_numpy(a.copy()), eagerc.from_numpy(b.copy())
    ga, gb = eagerc.tensor(a, requires_grad=True), eagerc.tensor(b, requires_grad=True)
    cases = [
        ("add", lambda: np.add(a, b), lambda: ea + eb, "add"),
        ("add (requires_grad)", None, lambda: ga + gb, "add_g"),
        ("mul", lambda: np.multiply(a, b), lambda: ea * eb, "mul"),
        ("mul (requires_grad)", None, lambda: ga * gb, "mul_g"),
        ("mul by a Python float", lambda: np.multiply(a, 0.5), lambda: ea * 0.5, "muls"),
        ("matmul", lambda: a @ b, lambda: ea @ eb, "mm"),
        ("matmul (requires_grad)", None, lambda: ga @ gb, "mm_g"),
        ("sum", lambda: a.sum(), lambda: ea.sum(), "sum"),
        ("sum (requires_grad)", None, lambda: ga.sum(), "sum_g"),
    ]

    def eager_expr():
        x = eagerc.tensor(a, requires_grad=True)
        w = eagerc.tensor(b, requires_grad=True)
        expression(eagerc, x, w).backward()
    cases.append(("20-op expr fwd+bwd", None, eager_expr, "expr"))
    # the autograd engine's per-node cost (issue 15): .grad accumulates across calls, as in torch
    cases.append(("mul+sum+backward", None, lambda: (ga * gb).sum().backward(), "msb"))
    x = rng.standard_normal((8, 64)).astype(np.float32)
    layers = [(rng.standard_normal((64, 64)).astype(np.float32) * 0.1,
               rng.standard_normal(64).astype(np.float32) * 0.1) for _ in range(3)]
    ex = eagerc.from_numpy(x)
    eparams = [(eagerc.tensor(w, requires_grad=True), eagerc.tensor(c, requires_grad=True)) for w, c in layers]
    cases.append(("MLP-like 10-op backward", None, lambda: mlp_like(ex, eparams).backward(), "mlp"))

    tfns = {}
    if torch is not None:
        ta, tb = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
        tga, tgb = ta.clone().requires_grad_(), tb.clone().requires_grad_()

        def torch_expr():
            x = torch.tensor(a, requires_grad=True)
            w = torch.tensor(b, requires_grad=True)
            expression(torch, x, w).backward()
        tx = torch.from_numpy(x.copy())
        tparams = [(torch.tensor(w, requires_grad=True), torch.tensor(c, requires_grad=True)) for w, c in layers]
        tfns = {"msb": lambda: (tga * tgb).sum().backward(),
                "mlp": lambda: mlp_like(tx, tparams).backward(),
                "add": lambda: ta + tb, "add_g": lambda: tga + tgb, "mul": lambda: ta * tb,
                "mul_g": lambda: tga * tgb, "muls": lambda: ta * 0.5, "mm": lambda: ta @ tb, "mm_g": lambda: tga @ tgb,
                "sum": lambda: ta.sum(), "sum_g": lambda: tga.sum(), "expr": torch_expr}

    rows = []
    for name, npf, ef, key in cases:
        n = per_call_us(npf) if npf else None
        e = per_call_us(ef)
        t = per_call_us(tfns[key]) if key in tfns else None
        rows.append((name, fmt(n), fmt(t), fmt(e), ratio(e, t), ratio(e, n)))
    print(f"eager per-op time, 64x64 float32 (numpy {np.__version__}"
          f"{', torch ' + torch.__version__ if torch else ', torch not installed'})")
    print(table(rows, ["op", "numpy", "torch", "eagerc", "eagerc/torch", "eagerc/numpy"]))


if __name__ == "__main__":
    main()
