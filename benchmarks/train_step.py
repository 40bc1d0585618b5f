"""Training-step time: eagerc eager vs PyTorch eager (when installed), same models.

    python benchmarks/train_step.py [--quick]

MLP (3 Linear, 256 wide, ReLU, Adam, cross-entropy) at batch 8, 64, 512; a small CNN
at batch 64; a 2-layer GPT block stack (128 wide, 4 heads, sequence 64, batch 8).
Targets (issue 3): <= 1.5x PyTorch on the MLP steps, <= 2x on CNN and GPT.

eagerc's products (linear, matmul, the convolutions' GEMMs) run on numpy's BLAS, PyTorch's on
its own: the header names the kernel family numpy's OpenBLAS runs, which decides most of the
CNN and GPT rows (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU halves sgemm's speed: README,
"Performance").
"""
import argparse
import math
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
from _harness import blas_info, per_call_us, try_torch, table, ratio  # noqa: E402


def mlp(lib, d_in=256, width=256, classes=10):
    nn = lib.nn
    return nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, classes))


def cnn(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def gpt(lib, vocab=256, d=128, heads=4, layers=2, seq=64):
    """A nanoGPT-style block stack written once for both libraries."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.reshape(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(d)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(lib.arange(idx.shape[1]))
            for b in self.blocks:
                x = b(x)
            return self.ln(x) @ self.tok.weight.T

    return GPT()


def make_step(lib, model, x, y):
    F = lib.nn.functional
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def load_state(dst_lib, dst, src):
    """Copy weights so both libraries train the same network."""
    sd = {k: v.detach().numpy().copy() for k, v in src.state_dict().items()}
    dst.load_state_dict({k: dst_lib.from_numpy(v) for k, v in sd.items()})


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    args = p.parse_args(argv)
    torch = try_torch()
    rng = np.random.default_rng(0)
    cases = []
    for b in (8, 64, 512):
        cases.append((f"MLP batch {b}", lambda lib: mlp(lib),
                      rng.standard_normal((b, 256)).astype(np.float32), rng.integers(0, 10, b)))
    cases.append(("CNN batch 64", cnn, rng.standard_normal((64, 1, 28, 28)).astype(np.float32),
                  rng.integers(0, 10, 64)))
    cases.append(("GPT 2x128 b8 t64", gpt, rng.integers(0, 256, (8, 64)), rng.integers(0, 256, (8, 64))))
    repeat = 3 if args.quick else 7
    rows = []
    for name, build, x, y in cases:
        eagerc.manual_seed(0)
        em = build(eagerc)
        e_step = make_step(eagerc, em, eagerc.from_numpy(x), eagerc.from_numpy(y.astype(np.int64)))
        e = per_call_us(e_step, repeat=repeat, budget_s=0.2) / 1000
        t = None
        if torch is not None:
            tm = build(torch)
            load_state(torch, tm, em)
            t_step = make_step(torch, tm, torch.from_numpy(x), torch.from_numpy(y.astype(np.int64)))
            t = per_call_us(t_step, repeat=repeat, budget_s=0.2) / 1000
        rows.append((name, "-" if t is None else f"{t:.2f} ms", f"{e:.2f} ms", ratio(e, t)))
    print(f"training step (forward + backward + Adam), torch threads "
          f"{torch.get_num_threads() if torch else '-'}")
    print(blas_info())
    print(table(rows, ["model", "torch", "eagerc", "eagerc/torch"]))


if __name__ == "__main__":
    main()
