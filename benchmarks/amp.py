"""Mixed-precision training: how far the loss under autocast drifts from float32, eagerc vs PyTorch.

    python benchmarks/amp.py [--dtype bfloat16|float16] [--steps 200]

Trains examples/char_gpt.py's GPT twice per library from the same initial weights on the
same batches -- once in float32, once under autocast("cpu", dtype) (float16 with a
GradScaler("cpu"), bfloat16 without, as is usual) -- and reports each library's gap: the mean
|loss_autocast - loss_float32| over the steps. The target (issue 14): eagerc's gap within 1.5x of
PyTorch's. PyTorch runs the very same model source (the example's classes, executed with
`torch` in place of `eagerc`). The default dtype is bfloat16 where eagerc has it, else float16.
"""
import argparse
import inspect
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
from _harness import try_torch  # noqa: E402
from examples import char_gpt  # noqa: E402

CONFIG = dict(vocab_size=None, block_size=32, n_layer=2, n_embd=64, n_head=4)


def torch_gpt_classes(torch):
    """examples/char_gpt.py's model classes, executed with torch in eagerc's place."""
    ns = {"eagerc": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math}
    for cls in (char_gpt.CausalSelfAttention, char_gpt.MLP, char_gpt.Block, char_gpt.GPT):
        exec(inspect.getsource(cls), ns)
    return ns["GPT"]


def batches(data, steps, batch_size, block_size, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        ix = rng.integers(0, len(data) - block_size - 1, size=batch_size)
        out.append((np.stack([data[i:i + block_size] for i in ix]),
                    np.stack([data[i + 1:i + 1 + block_size] for i in ix])))
    return out


def train(lib, model, data, dtype, lr):
    """Per-step training losses; dtype None: float32, else autocast("cpu", dtype) (+ a GradScaler
    for float16)."""
    F = lib.nn.functional
    opt = lib.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    scaler = lib.amp.GradScaler("cpu", enabled=dtype is not None and "float16" == str(dtype).split(".")[-1])
    losses = []
    for x, y in data:
        x, y = lib.from_numpy(x), lib.from_numpy(y)
        opt.zero_grad()
        if dtype is None:
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        else:
            with lib.autocast("cpu", dtype=dtype):
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(float(loss.item()))
    return np.array(losses)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="bfloat16" if hasattr(eagerc, "bfloat16") else "float16",
                   choices=("bfloat16", "float16"))
    p.add_argument("--steps", type=int, default=200)  # 40 steps: the gaps are rounding noise of a few steps, 2x either way
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args(argv)
    torch = try_torch()
    if args.dtype == "bfloat16" and not hasattr(eagerc, "bfloat16"):
        raise SystemExit("eagerc has no bfloat16 yet: run with --dtype float16")
    text = char_gpt.load_text(200_000)
    chars = sorted(set(text))
    data = np.array([chars.index(c) for c in text[:50_000]], dtype=np.int64)
    cfg = dict(CONFIG, vocab_size=len(chars))
    steps = batches(data, args.steps, args.batch_size, cfg["block_size"])

    eagerc.manual_seed(0)
    init = {k: v.detach().numpy().copy() for k, v in char_gpt.GPT(**cfg).state_dict().items()}

    def eagerc_model():
        m = char_gpt.GPT(**cfg)
        m.load_state_dict({k: eagerc.tensor(v) for k, v in init.items()})
        return m
    rows = []
    t0 = time.perf_counter()
    e32 = train(eagerc, eagerc_model(), steps, None, args.lr)
    elow = train(eagerc, eagerc_model(), steps, getattr(eagerc, args.dtype), args.lr)
    e_gap = float(np.mean(np.abs(elow - e32)))
    rows.append(("eagerc", e32[-1], elow[-1], e_gap, time.perf_counter() - t0))
    t_gap = None
    if torch is not None:
        TGPT = torch_gpt_classes(torch)

        def torch_model():
            m = TGPT(**cfg)
            m.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
            return m
        t0 = time.perf_counter()
        t32 = train(torch, torch_model(), steps, None, args.lr)
        tlow = train(torch, torch_model(), steps, getattr(torch, args.dtype), args.lr)
        t_gap = float(np.mean(np.abs(tlow - t32)))
        rows.append(("torch " + torch.__version__, t32[-1], tlow[-1], t_gap, time.perf_counter() - t0))
        # the float32 runs themselves agree: the same model, weights and batches
        rows.append(("float32 eagerc vs torch", float(np.mean(np.abs(e32 - t32))), None, None, None))
    print(f"GPT {cfg['n_layer']}x{cfg['n_embd']}, {args.steps} steps of {args.batch_size}x{cfg['block_size']} "
          f"tokens, autocast dtype {args.dtype}{' + GradScaler' if args.dtype == 'float16' else ''}")
    print(f"{'run':28s} {'final f32':>10s} {'final amp':>10s} {'mean |gap|':>11s} {'seconds':>8s}")
    for name, a, b, g, s in rows:
        f = lambda v, w: f"{v:{w}.4f}" if v is not None else " " * (w - 1) + "-"  # noqa: E731
        print(f"{name:28s} {f(a, 10)} {f(b, 10)} {f(g, 11)} {f(s, 8)}")
    if t_gap is not None:
        ratio = e_gap / t_gap if t_gap > 0 else float("inf")
        print(f"eagerc gap / PyTorch gap = {ratio:.2f}x (target <= 1.5x): {'OK' if ratio <= 1.5 else 'OVER'}")
    return e_gap, t_gap


if __name__ == "__main__":
    main()
