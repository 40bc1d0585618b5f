"""Data-parallel training: overlap, all-reduce bandwidth, scaling (issue 13).

    python benchmarks/distributed.py [--quick]

1. Overlap (one process, simulated engine): a ~10M-parameter MLP step at batch 64 under
   DistributedDataParallel whose all-reduces take a fixed wall time (latency + bytes /
   bandwidth, the link busy for about 40% of backward's time) without using a core. Hidden
   fraction = 1 - (time the backward waited for the link at its end) / total link time,
   both measured in the same steps (and, noisier on a shared machine, from the step times
   with the link and with an instant one). Target: >= 80% hidden.
2. Real MPI, 2 local ranks (started with mpiexec; one thread each): the same step with DDP
   against the step without communication, and the hidden fraction (1 - time waited at the
   end / blocking all-reduces of the same buckets); a 64 MB float32 all-reduce against a memcpy of the same
   bytes measured in the same run; CNN training throughput on 2 ranks against 1 rank (the same
   per-rank batch), as scaling efficiency. On 2 cores there is no spare core for MPI's
   progress, so these are reported without targets.
"""
import argparse
import json
import os
import subprocess
import sys
import time

if os.environ.get("BENCH_THREADS", "1") != "default":   # "default": the user's threading, nothing pinned
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("BENCH_THREADS", "1"))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
import eagerc.distributed as dist  # noqa: E402
import eagerc.nn as nn  # noqa: E402
import eagerc.nn.functional as F  # noqa: E402
from eagerc.distributed.engines import SimulatedEngine  # noqa: E402
from eagerc.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from _harness import table  # noqa: E402
from train_step import cnn  # noqa: E402


def mlp10m():
    """Ten 1024-wide layers and a 10-way head: 10.5M parameters, 42 MB of float32 gradients.
    (What backward cannot hide is the communication of the gradients produced last, the
    first layers': a model whose widest layers come first hides less.)"""
    layers = []
    for _ in range(10):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(1024, 10))


def best_step(model, x, y, repeat, waits=None):
    """Best wall time of a forward + backward (grads zeroed first), in seconds; `waits` collects
    how long each DDP backward waited for communication at its end (its exposed part)."""
    best = float("inf")
    for _ in range(repeat):
        model.zero_grad()
        t = time.perf_counter()
        F.cross_entropy(model(x), y).backward()
        best = min(best, time.perf_counter() - t)
        if waits is not None:
            waits.append(model.reducer.waited)
    return best


def overlap(repeat):
    engine = SimulatedEngine()
    dist.init_process_group(backend=engine)
    eagerc.manual_seed(0)
    model = mlp10m()
    x, y = eagerc.randn(64, 1024), eagerc.randint(0, 10, (64,))
    local = best_step(model, x, y, repeat)
    ddp = DDP(model, bucket_cap_mb=5)
    instant = best_step(ddp, x, y, repeat)
    nbytes = sum(p.numel() * 4 for p in model.parameters())
    engine.latency, engine.bandwidth = 50e-6, nbytes / (0.25 * local)  # busy ~40% of backward
    engine.log.clear()
    waits = []
    linked = best_step(ddp, x, y, repeat, waits)
    comm = sum(end - start for _, _, start, end in engine.log) / repeat
    dist.destroy_process_group()
    hidden = 1 - np.median(waits) / comm
    print(table([["no DDP", f"{local * 1e3:.1f} ms", ""], ["DDP, instant link", f"{instant * 1e3:.1f} ms", ""],
                 ["DDP, simulated link", f"{linked * 1e3:.1f} ms",
                  f"link busy {comm * 1e3:.1f} ms, waited for {np.median(waits) * 1e3:.1f} ms at the end"]],
                ["MLP 10.5M params, batch 64", "fwd+bwd", ""]))
    print(f"hidden communication: {hidden:.0%} (target >= 80%; from the step times: "
          f"{1 - (linked - instant) / comm:.0%}), {len(ddp.reducer.buckets)} buckets\n")
    return hidden


# ---------------------------------------------------------------- under mpiexec

def _mpi_rank_part(repeat, quick):
    """Run on every rank by `mpiexec -n 2 python benchmarks/distributed.py --ranks`."""
    dist.init_process_group("mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {}
    eagerc.manual_seed(0)
    model = mlp10m()
    x, y = eagerc.randn(64, 1024), eagerc.randint(0, 10, (64,))
    out["local"] = best_step(model, x, y, repeat)
    ddp = DDP(model)
    waits = []
    out["ddp"] = best_step(ddp, x, y, repeat, waits)
    out["waited"] = float(np.median(waits))
    grads = [p.grad for p in model.parameters()]
    best = float("inf")
    for _ in range(repeat):  # the same buckets' all-reduces, blocking, after backward
        t = time.perf_counter()
        for b in ddp.reducer.buckets:
            flat = eagerc.cat([grads[i].reshape(-1) for i in b.params])
            dist.all_reduce(flat)
        best = min(best, time.perf_counter() - t)
    out["blocking"] = best

    n = (16 if quick else 64) * 2**20 // 4
    a = np.ones(n, np.float32)
    b = np.empty_like(a)
    out["bytes"] = a.nbytes
    out["memcpy"] = min(_timed(lambda: np.copyto(b, a)) for _ in range(repeat))
    t = eagerc.from_numpy(a)
    dist.barrier()
    out["allreduce"] = min(_timed(lambda: dist.all_reduce(t)) for _ in range(repeat))

    cnn_model = DDP(cnn(eagerc))
    opt = eagerc.optim.Adam(cnn_model.parameters())
    xc, yc = eagerc.randn(64, 1, 28, 28), eagerc.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        F.cross_entropy(cnn_model(xc), yc).backward()
        opt.step()
    step()
    dist.barrier()
    times = [_timed(step) for _ in range(5 if quick else 15)]  # the median step: the machine is shared
    out["cnn_samples_per_s"] = 64 * world / float(np.median(times))
    every = [None] * world
    dist.all_gather_object(every, out)
    if rank == 0:
        print(json.dumps(every))
    dist.destroy_process_group()


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def real_mpi(repeat, quick):
    from eagerc.distributed.run import find_mpiexec
    mpiexec = find_mpiexec()
    if mpiexec is None:
        print("real MPI: skipped (no mpiexec; pip install -e '.[distributed]')")
        return
    flags = ["--quick"] if quick else []
    runs = {}
    for n in (1, 2):
        r = subprocess.run([mpiexec, "-n", str(n), sys.executable, __file__, "--ranks"] + flags,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(r.stdout + r.stderr)
        runs[n] = json.loads(r.stdout.strip().splitlines()[-1])
    two = runs[2][0]
    exposed = two["ddp"] - two["local"]
    print(table([["MLP 10.5M fwd+bwd, no communication", f"{two['local'] * 1e3:.1f} ms"],
                 ["same step under DDP (2 ranks)", f"{two['ddp'] * 1e3:.1f} ms"],
                 ["  of which waiting for the all-reduces at the end", f"{two['waited'] * 1e3:.1f} ms"],
                 ["its buckets all-reduced blocking", f"{two['blocking'] * 1e3:.1f} ms"]],
                ["real MPI, 2 ranks on 2 cores", "time"]))
    print(f"hidden communication: {1 - two['waited'] / two['blocking']:.0%} (1 - waited / blocking; from the "
          f"step times: {1 - exposed / two['blocking']:.0%}; no target: no spare core)\n")
    mb = two["bytes"] / 2**20
    print(table([[f"memcpy {mb:.0f} MB", f"{two['memcpy'] * 1e3:.1f} ms", f"{two['bytes'] / two['memcpy'] / 1e9:.2f} GB/s"],
                 [f"all_reduce {mb:.0f} MB float32, 2 ranks", f"{two['allreduce'] * 1e3:.1f} ms",
                  f"{two['bytes'] / two['allreduce'] / 1e9:.2f} GB/s"]], ["bandwidth", "time", "bytes/s"]))
    print(f"all-reduce at {two['memcpy'] / two['allreduce']:.0%} of the memcpy limit\n")
    one, both = runs[1][0]["cnn_samples_per_s"], two["cnn_samples_per_s"]
    print(table([["1 rank", f"{one:.0f}"], ["2 ranks", f"{both:.0f}"]], ["CNN step, batch 64 per rank", "samples/s"]))
    print(f"scaling efficiency: {both / (2 * one):.0%}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--ranks", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    repeat = 3 if a.quick else 7
    if a.ranks:
        return _mpi_rank_part(repeat, a.quick)
    overlap(repeat)
    real_mpi(repeat, a.quick)


if __name__ == "__main__":
    main()
