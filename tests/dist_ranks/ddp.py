"""Run by tests/test_distributed.py under `mpiexec -n 2`: DistributedDataParallel against
single-process training on the whole batch (float64, 1e-10, several Adam steps) for an MLP,
a CNN and a GPT block; no_sync accumulation; buffers; unused parameters; a compiled model.
argv[1]: "mpi" or "nccl" (the NCCL engine over tests/nccl_standin.py). Prints OK at the end."""
import os
import sys

import numpy as np

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, root)
sys.path.insert(0, os.path.join(root, "tests"))
import eagerc  # noqa: E402
import eagerc.distributed as dist  # noqa: E402
import eagerc.nn as nn  # noqa: E402
import eagerc.nn.functional as F  # noqa: E402
from eagerc.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from examples.char_gpt import GPT  # noqa: E402

if sys.argv[1] == "nccl":
    import nccl_standin
    from mpi4py import MPI
    from eagerc.distributed.engines import MPIEngine
    from eagerc.distributed.nccl import NCCLEngine
    dist.init_process_group(backend=NCCLEngine(MPIEngine(MPI.COMM_WORLD.Dup()), nccl=nccl_standin,
                                               cuda=nccl_standin.cuda))
else:
    dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
eagerc.set_default_dtype(eagerc.float64)


def mlp():
    return nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 6, 3),
                         nn.ReLU(), nn.Flatten(), nn.Linear(6 * 2 * 2, 4))


def gpt():
    return GPT(vocab_size=11, block_size=8, n_layer=1, n_embd=16, n_head=2)


def batch(kind, size=8):
    g = eagerc.Generator().manual_seed(5)
    if kind == "gpt":
        x = eagerc.randint(0, 11, (size, 8), generator=g)
        return x, eagerc.randint(0, 11, (size, 8), generator=g)
    x = eagerc.randn(size, 6, generator=g) if kind == "mlp" else eagerc.randn(size, 1, 8, 8, generator=g)
    return x, eagerc.randint(0, 4, (size,), generator=g)


def loss_of(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def train(model, x, y, steps, micro=1, ddp=None):
    """Adam steps on (x, y) in `micro` micro-batches per step (gradient accumulation)."""
    m = ddp or model
    opt = eagerc.optim.Adam(m.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        for i, (xm, ym) in enumerate(zip(x.chunk(micro), y.chunk(micro))):
            if ddp is not None and i < micro - 1:
                with ddp.no_sync():
                    (loss_of(m(xm), ym) / micro).backward()
            else:
                (loss_of(m(xm), ym) / micro).backward()
        opt.step()
    return model


def max_diff(a, b):
    return max(float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters()))


def same_on_every_rank(model):
    flat = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    every = [None] * n
    dist.all_gather_object(every, [float(flat.sum()), float((flat * flat).sum())])
    assert all(e == every[0] for e in every), every


for kind, make in (("mlp", mlp), ("cnn", cnn), ("gpt", gpt)):
    for micro, compiled in ((1, False), (2, False), (1, kind == "mlp")):
        x, y = batch(kind)
        eagerc.manual_seed(0)
        ref = train(make(), x, y, steps=3, micro=micro)
        eagerc.manual_seed(0 if r == 0 else 1)  # rank 1 starts elsewhere: DDP must take rank 0's values
        local = make()
        ddp = DDP(eagerc.compile(local) if compiled else local, bucket_cap_mb=0.0005)
        assert len(ddp.reducer.buckets) > 2 and ddp.module is local, (kind, len(ddp.reducer.buckets))
        shard = lambda t: t.chunk(n)[r]  # noqa: E731
        train(local, shard(x), shard(y), steps=3, micro=micro, ddp=ddp)
        err = max_diff(ref, local)
        assert err < 1e-10, (kind, micro, compiled, err)
        same_on_every_rank(local)
        ddp.reducer.remove()

# the wrapper's state_dict keeps PyTorch's "module." prefix
ddp = DDP(mlp())
assert list(ddp.state_dict())[0] == "module.0.weight"
ddp.module.load_state_dict({k[len("module."):]: v for k, v in ddp.state_dict().items()})

# require_backward_grad_sync=False (nanoGPT's toggle) leaves gradients local
ddp.require_backward_grad_sync = False
x = eagerc.ones(2, 6) * (r + 1)
ddp(x).sum().backward()
local_grad = ddp.module[0].bias.grad.clone()
ddp.require_backward_grad_sync = True
every = [None] * n
dist.all_gather_object(every, float(local_grad.sum()))
assert every[0] != every[1]
ddp.reducer.remove()


class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("scale", eagerc.ones(2))

    def forward(self, x):
        return self.lin(x) * self.scale


for broadcast in (True, False):
    m = WithBuffer()
    ddp = DDP(m, broadcast_buffers=broadcast)
    m.scale.fill_(float(r + 2))  # diverges after construction
    ddp(eagerc.ones(1, 3))
    assert m.scale[0].item() == (2.0 if broadcast else r + 2), (broadcast, m.scale)
    ddp.reducer.remove()


class Partly(nn.Module):
    """`unused` never takes part; `sometimes` only on rank 0."""

    def __init__(self):
        super().__init__()
        self.a, self.unused, self.sometimes = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        x = self.a(x)
        return self.sometimes(x) if dist.get_rank() == 0 else x


m = Partly()
ddp = DDP(m, find_unused_parameters=True)
for _ in range(2):
    ddp.zero_grad()
    ddp(eagerc.ones(2, 3)).sum().backward()
assert m.unused.weight.grad is None  # no rank used it: left alone
grads = [None] * n
dist.all_gather_object(grads, [m.sometimes.weight.grad.sum().item(), m.a.weight.grad.sum().item()])
assert grads[0] == grads[1], grads
ddp.reducer.remove()

m = Partly()
ddp = DDP(m)  # without find_unused_parameters: the next forward says what is wrong, as in PyTorch
ddp(eagerc.ones(2, 3)).sum().backward()
try:
    ddp(eagerc.ones(2, 3))
    raise AssertionError("unfinished reduction not reported")
except RuntimeError as e:
    assert "find_unused_parameters=True" in str(e) and "did not receive grad" in str(e), str(e)
print("OK", r)
