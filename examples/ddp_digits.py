"""Train the digits CNN data-parallel: every process holds a replica and a shard of each epoch.

    python -m eagerc.distributed.run --nproc-per-node 2 examples/ddp_digits.py
    mpiexec -n 2 python examples/ddp_digits.py          (the same, started by MPI directly)

The model, data and optimizer are examples/train_digits.py's. DistributedSampler gives each
rank its share of every epoch (set_epoch: a new order each epoch, the same on all ranks);
DistributedDataParallel averages the gradients while backward runs, so every replica takes
the same Adam steps. Rank 0 alone prints progress and saves the checkpoint (from `ddp.module`,
without the wrapper's "module." prefix). Needs the extras: pip install -e ".[distributed,examples]".
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import eagerc  # noqa: E402
import eagerc.distributed as dist  # noqa: E402
import eagerc.nn.functional as F  # noqa: E402
from eagerc.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from eagerc.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402
from examples.train_digits import accuracy, load_data, make_model  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per process: the global batch is this x world size")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default=os.path.join("checkpoints", "ddp_digits.safetensors"))
    args = p.parse_args(argv)

    dist.init_process_group("gloo")  # eagerc's CPU engine is MPI; "gloo" is accepted for PyTorch scripts
    rank, world = dist.get_rank(), dist.get_world_size()
    eagerc.manual_seed(args.seed + rank)  # different starts: DDP makes every rank take rank 0's weights
    x_train, y_train, x_test, y_test = load_data(args.seed)  # the same split on every rank
    data = TensorDataset(x_train, y_train)
    sampler = DistributedSampler(data, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(make_model())
    opt = eagerc.optim.Adam(model.parameters(), lr=args.lr * world ** 0.5)
    sched = eagerc.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)

    start = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
        if rank == 0:
            print(f"epoch {epoch + 1:2d}  last loss {loss.item():.3f}  test accuracy "
                  f"{accuracy(model.module, x_test, y_test):.4f}  ({world} processes, "
                  f"{len(sampler)} samples each)", flush=True)
    acc = accuracy(model.module, x_test, y_test)
    every = [None] * world
    dist.all_gather_object(every, acc)  # the replicas stayed identical, so they score the same
    if rank == 0:
        print(f"trained in {time.perf_counter() - start:.1f} s on {world} processes: test accuracy {acc:.4f}")
        if len(set(every)) != 1:
            raise SystemExit(f"replicas disagree: {every}")
        os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)
        eagerc.save({"model": model.module.state_dict()}, args.checkpoint)
    dist.barrier()
    dist.destroy_process_group()
    return acc


if __name__ == "__main__":
    main()
