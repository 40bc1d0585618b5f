"""Train a small character-level GPT on the Python standard library's own source, eagerly, on the CPU.

    python -m examples.char_gpt        (or: python examples/char_gpt.py)

nanoGPT-style: token + position embeddings, pre-LayerNorm blocks with causal
self-attention (scaled_dot_product_attention(is_causal=True)) and a GELU MLP, a final
LayerNorm and a head tied to the token embedding. Trained with AdamW on a few stdlib
.py files (found next to os.py) concatenated; prints train/val loss every few steps and
then an autoregressively generated sample (temperature + top-k).
"""
import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import eagerc  # noqa: E402
import eagerc.nn as nn  # noqa: E402
import eagerc.nn.functional as F  # noqa: E402
import eagerc.nn.utils  # noqa: E402,F401  (eagerc.nn does not import its utils subpackage itself)

STDLIB_FILES = ("os.py", "inspect.py", "argparse.py", "typing.py", "dataclasses.py", "functools.py",
                "collections/__init__.py", "pathlib.py", "subprocess.py", "threading.py", "logging/__init__.py",
                "shutil.py", "tarfile.py", "zipfile.py", "enum.py", "ast.py", "pydoc.py")


def load_text(max_chars):
    """Concatenate stdlib sources (found next to os.py) up to max_chars characters."""
    root = os.path.dirname(os.__file__)
    parts, total = [], 0
    for name in STDLIB_FILES:
        path = os.path.join(root, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
        total += len(parts[-1])
        if total >= max_chars:
            break
    text = "\n".join(parts)[:max_chars]
    if not text:
        raise SystemExit(f"no stdlib sources found under {root}")
    return text


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_embd, n_head, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        # nanoGPT-style init: N(0, 0.02) weights, zero biases, residual projections scaled down
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif name.endswith("weight") and p.ndim == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias") and not name.startswith("ln") and ".ln" not in name:
                nn.init.zeros_(p)

    def forward(self, idx):
        B, T = idx.shape
        pos = eagerc.arange(T)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.tok_emb.weight.T  # weight-tied head

    @eagerc.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        """Append max_new_tokens sampled tokens to idx (1 x T, int64); returns a list of ids.
        nanoGPT's sampler: top-k filtering, softmax, multinomial (from eagerc's Philox stream)."""
        was_training = self.training
        self.eval()
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.block_size:])[:, -1, :] / max(temperature, 1e-8)
            if top_k is not None and top_k < logits.shape[-1]:
                v, _ = eagerc.topk(logits, top_k)
                logits = logits.masked_fill(logits < v[:, [-1]], -math.inf)
            probs = F.softmax(logits, dim=-1)
            idx = eagerc.cat((idx, eagerc.multinomial(probs, num_samples=1, generator=generator)), dim=1)
        self.train(was_training)
        return idx[0].tolist()


def get_batch(data, block_size, batch_size, rng):
    ix = rng.integers(0, len(data) - block_size - 1, size=batch_size)
    x = np.stack([data[i:i + block_size] for i in ix])
    y = np.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return eagerc.from_numpy(x), eagerc.from_numpy(y)


@eagerc.no_grad()
def estimate_loss(model, data, block_size, batch_size, iters, seed):
    """Mean loss over `iters` fixed batches (same batches every call, so values compare)."""
    model.eval()
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(iters):
        x, y = get_batch(data, block_size, batch_size, rng)
        logits = model(x)
        losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item())
    model.train()
    return float(np.mean(losses))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-iters", type=int, default=8, help="batches per loss estimate")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--max-chars", type=int, default=1_000_000, help="how much stdlib source to read")
    p.add_argument("--sample-len", type=int, default=300, help="characters to generate at the end")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="only print the final summary")
    args = p.parse_args(argv)

    eagerc.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    text = load_text(args.max_chars)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], dtype=np.int64)
    n_train = int(0.9 * len(data))
    train_data, val_data = data[:n_train], data[n_train:]
    if not args.quiet:
        print(f"{len(text):,} characters of stdlib source, vocabulary {len(chars)}, "
              f"train {len(train_data):,} / val {len(val_data):,}")

    model = GPT(len(chars), args.block_size, args.n_layer, args.n_embd, args.n_head, args.dropout)
    if not args.quiet:
        print(f"{sum(p.numel() for p in model.parameters()):,} parameters")
    # nanoGPT: weight decay on matrices only, not on biases / LayerNorm gains
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = eagerc.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.99))

    def evaluate():
        return (estimate_loss(model, train_data, args.block_size, args.batch_size, args.eval_iters, args.seed + 1),
                estimate_loss(model, val_data, args.block_size, args.batch_size, args.eval_iters, args.seed + 2))

    start = time.perf_counter()
    train_loss, initial_val = evaluate()
    if not args.quiet:
        print(f"step {0:5d}  train loss {train_loss:.4f}  val loss {initial_val:.4f}  (ln vocab {math.log(len(chars)):.4f})")
    val_loss = initial_val
    warmup = max(1, min(50, args.steps // 10))
    for step in range(1, args.steps + 1):
        # linear warmup, then cosine decay to 10% of lr
        if step <= warmup:
            lr = args.lr * step / warmup
        else:
            frac = (step - warmup) / max(1, args.steps - warmup)
            lr = args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, args.block_size, args.batch_size, rng)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.eval_every == 0 or step == args.steps:
            train_loss, val_loss = evaluate()
            if not args.quiet:
                print(f"step {step:5d}  train loss {train_loss:.4f}  val loss {val_loss:.4f}  "
                      f"({time.perf_counter() - start:.1f} s)")
    seconds = time.perf_counter() - start
    print(f"trained {args.steps} steps in {seconds:.1f} s: val loss {initial_val:.4f} -> {val_loss:.4f}")

    if args.sample_len > 0:
        prompt = "def "
        ids = model.generate(eagerc.tensor([[stoi[c] for c in prompt]], dtype=eagerc.int64), args.sample_len,
                             temperature=args.temperature, top_k=args.top_k,
                             generator=eagerc.Generator().manual_seed(args.seed))
        sample = "".join(chars[i] for i in ids)
        main.last_sample = sample[len(prompt):]
        if not args.quiet:
            print("-" * 60 + "\n" + sample + "\n" + "-" * 60)
    return initial_val, val_loss


if __name__ == "__main__":
    main()
