"""Run by tests/test_distributed.py under `mpiexec -n 2`: every collective, op and dtype
against numpy, object collectives, groups, async handles and mismatch errors.
argv[1]: "mpi" or "nccl" (the NCCL engine over tests/nccl_standin.py). Prints OK at the end."""
import os
import sys

import numpy as np

import eagerc
import eagerc.distributed as dist

engine = sys.argv[1]
if engine == "nccl":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import nccl_standin
    from mpi4py import MPI
    from eagerc.distributed.engines import MPIEngine
    from eagerc.distributed.nccl import NCCLEngine
    dist.init_process_group(backend=NCCLEngine(MPIEngine(MPI.COMM_WORLD.Dup()), nccl=nccl_standin,
                                               cuda=nccl_standin.cuda))
else:
    dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
assert n == 2 and dist.is_initialized() and dist.get_backend() == engine


def data(rank, dtype, shape=(3, 4)):
    """Rank-dependent values that every dtype holds exactly."""
    a = (np.arange(np.prod(shape)).reshape(shape) % 5 + rank + 1)
    return (a % 2 == rank) if dtype == "bool" else a.astype(dtype)


every = [data(k, "float64") for k in range(n)]
DTYPES = ["float32", "float64", "int32", "int64", "uint8", "int8", "float16"] + (["bool"] if engine == "mpi" else [])
REDUCE = {"SUM": np.sum, "PRODUCT": np.prod, "MIN": np.min, "MAX": np.max}
for dt in DTYPES:
    every = [data(k, dt) for k in range(n)]
    for name, f in REDUCE.items():
        if dt == "bool" and name in ("SUM", "PRODUCT"):
            continue
        t = eagerc.from_numpy(every[r].copy())
        dist.all_reduce(t, getattr(dist.ReduceOp, name))
        want = f(np.stack(every), axis=0).astype(dt)
        assert t.numpy().dtype == want.dtype and (t.numpy() == want).all(), (dt, name, t, want)
    if dt != "bool":
        t = eagerc.from_numpy(every[r].copy())
        dist.all_reduce(t, dist.ReduceOp.AVG)
        want = np.sum(np.stack(every), axis=0)
        want = want / n if want.dtype.kind == "f" else want // n
        assert np.allclose(t.numpy(), want), (dt, "AVG")
    for src in range(n):
        t = eagerc.from_numpy(every[r].copy())
        dist.broadcast(t, src)
        assert (t.numpy() == every[src]).all()
    outs = [eagerc.from_numpy(np.zeros_like(every[0])) for _ in range(n)]
    dist.all_gather(outs, eagerc.from_numpy(every[r]))
    assert all((o.numpy() == e).all() for o, e in zip(outs, every))
    big = eagerc.from_numpy(np.zeros((n * 3, 4), every[0].dtype))
    dist.all_gather_into_tensor(big, eagerc.from_numpy(every[r]))
    assert (big.numpy() == np.concatenate(every)).all()
    if dt != "bool":
        out = eagerc.from_numpy(np.zeros((3 // 3, 4), every[0].dtype).repeat(3 // n + 1, 0)[:1])
        src = eagerc.from_numpy(np.concatenate([every[r][:1]] * n))
        dist.reduce_scatter_tensor(out, src)
        assert (out.numpy() == sum(e[:1] for e in every).astype(dt)).all()
        for dst in range(n):
            t = eagerc.from_numpy(every[r].copy())
            dist.reduce(t, dst, dist.ReduceOp.MAX)
            assert (t.numpy() == (np.max(np.stack(every), 0) if r == dst else every[r])).all()
    for root in range(n):
        lst = [eagerc.from_numpy(np.zeros_like(every[0])) for _ in range(n)] if r == root else None
        dist.gather(eagerc.from_numpy(every[r]), lst, dst=root)
        if r == root:
            assert all((o.numpy() == e).all() for o, e in zip(lst, every))
        t = eagerc.from_numpy(np.zeros_like(every[0]))
        dist.scatter(t, [eagerc.from_numpy(e) for e in every] if r == root else None, src=root)
        assert (t.numpy() == every[r]).all()

# point to point, both directions
x = eagerc.from_numpy(np.arange(5.0) * (r + 1))
if r == 0:
    dist.send(x, 1)
    y = eagerc.zeros(5, dtype=eagerc.float64)
    assert dist.recv(y, 1) == 1 and (y.numpy() == np.arange(5.0) * 2).all()
else:
    y = eagerc.zeros(5, dtype=eagerc.float64)
    dist.recv(y, 0)
    assert (y.numpy() == np.arange(5.0)).all()
    dist.send(x, 0)

# non-contiguous tensors are written through their own memory
t = eagerc.zeros(4, 6).t()
t[1, 2] = r + 1.0
dist.all_reduce(t)
assert t[1, 2].item() == 3.0 and t.sum().item() == 3.0

# async work handles
works = [dist.all_reduce(eagerc.ones(1000) * (r + 1), async_op=True) for _ in range(3)]
t = eagerc.ones(10) * (r + 1)
w = dist.all_reduce(t, async_op=True)
assert all(wk.wait() for wk in works) and w.wait() and (t.numpy() == 3).all() and w.is_completed()

# JSON-plain objects, never pickle
objs = [{"rank": r, "list": [1, 2.5, None, "x" * r]}, r == 0]
dist.broadcast_object_list(objs, src=1)
assert objs == [{"rank": 1, "list": [1, 2.5, None, "x"]}, False], objs
got = [None] * n
dist.all_gather_object(got, {"r": r, "s": "é" * (r + 3)})
assert got == [{"r": k, "s": "é" * (k + 3)} for k in range(n)], got
try:
    dist.all_gather_object(got, {1, 2})
    raise AssertionError("a set must not be sent")
except TypeError as e:
    assert "JSON-plain" in str(e) and "never pickles" in str(e)

# mismatched shapes, dtypes and collectives are errors naming each rank's call, before any data moves
for mine, theirs, words in (((2, 3), (3, 2), "[2, 3]"), ("float32", "float64", "float64")):
    a = eagerc.zeros(*(mine if r == 0 else theirs)) if isinstance(mine, tuple) else \
        eagerc.zeros(3, dtype=getattr(eagerc, mine if r == 0 else theirs))
    try:
        dist.all_reduce(a)
        raise AssertionError("mismatch not detected")
    except dist.DistError as e:
        assert "ranks disagree" in str(e) and words in str(e) and "rank 1" in str(e), str(e)
try:
    if r == 0:
        dist.broadcast(eagerc.zeros(3), 0)
    else:
        dist.all_reduce(eagerc.zeros(3))
    raise AssertionError("different collectives not detected")
except dist.DistError as e:
    assert "broadcast root 0" in str(e) and "all_reduce:sum" in str(e), str(e)
dist.barrier()

# groups: ranks outside do nothing; src/dst are global ranks
g = dist.new_group([1])
if r == 1:
    assert dist.get_rank(g) == 0 and dist.get_world_size(g) == 1
    t = eagerc.ones(2)
    dist.broadcast(t, 1, group=g)
elif r == 0:
    assert g is dist.GroupMember.NON_GROUP_MEMBER and dist.get_rank(g) == -1
    assert dist.all_reduce(eagerc.ones(2), group=g) is None
pair = dist.new_group([0, 1])
t = eagerc.ones(1) * r
dist.all_reduce(t, group=pair)
assert t.item() == 1
dist.destroy_process_group()
assert not dist.is_initialized()
print("OK", r)
