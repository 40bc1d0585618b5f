"""Train a small CNN on scikit-learn's 8x8 handwritten digits, eagerly, on the CPU.

    python -m examples.train_digits        (or: python examples/train_digits.py)

Reaches >= 97% test accuracy in well under a minute on 2 cores, saves a checkpoint
(safetensors + JSON, no pickle), reloads it into a fresh model and checks that the
reloaded model scores the same.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import eagerc  # noqa: E402
import eagerc.nn as nn  # noqa: E402
import eagerc.nn.functional as F  # noqa: E402
from eagerc.utils.data import DataLoader, TensorDataset  # noqa: E402


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(64, 10),
    )


def load_data(seed):
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # N x 1 x 8 x 8 in [0, 1]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = len(x) // 5
    test, train = order[:n_test], order[n_test:]
    return (eagerc.from_numpy(x[train]), eagerc.from_numpy(y[train]),
            eagerc.from_numpy(x[test]), eagerc.from_numpy(y[test]))


@eagerc.no_grad()
def accuracy(model, x, y):
    model.eval()
    pred = model(x).argmax(dim=1)
    return (pred == y).float().mean().item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default=os.path.join("checkpoints", "digits.safetensors"))
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)

    from tqdm import tqdm
    eagerc.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = load_data(args.seed)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True,
                        generator=eagerc.Generator().manual_seed(args.seed))
    model = make_model()
    opt = eagerc.optim.Adam(model.parameters(), lr=args.lr)
    sched = eagerc.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)

    start = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        bar = tqdm(loader, desc=f"epoch {epoch + 1}/{args.epochs}", leave=False, disable=args.quiet)
        for xb, yb in bar:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")
        sched.step()
        if not args.quiet:
            print(f"epoch {epoch + 1:2d}  test accuracy {accuracy(model, x_test, y_test):.4f}")
    seconds = time.perf_counter() - start
    acc = accuracy(model, x_test, y_test)
    print(f"trained in {seconds:.1f} s: test accuracy {acc:.4f}")

    os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)
    eagerc.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": args.epochs},
                args.checkpoint)
    restored = make_model()
    restored.load_state_dict(eagerc.load(args.checkpoint)["model"])
    acc2 = accuracy(restored, x_test, y_test)
    print(f"checkpoint {args.checkpoint}: reloaded model test accuracy {acc2:.4f}")
    if acc2 != acc:
        raise SystemExit("reloaded model disagrees with the trained one")
    return acc


if __name__ == "__main__":
    main()
