"""eagerc.distributed and DistributedDataParallel.

Multi-rank checks run scripts from tests/dist_ranks/ under `mpiexec -n 2` (each within a
bounded time); the rest runs in this process on one rank or the simulated engine.
The NCCL engine's code runs on CPUs over tests/nccl_standin.py; real-GPU checks are
marked `cuda`."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import eagerc
import eagerc.distributed as dist
import eagerc.nn as nn
from eagerc.distributed.engines import SimulatedEngine
from eagerc.nn.parallel import DistributedDataParallel as DDP
from eagerc.nn.parallel.reducer import assign_buckets, readiness_order

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _mpiexec():
    from eagerc.distributed.run import find_mpiexec
    return find_mpiexec()


needs_mpi = pytest.mark.skipif(
    _mpiexec() is None or __import__("importlib").util.find_spec("mpi4py") is None,
    reason="needs mpi4py and mpiexec: pip install -e '.[distributed]'")


def run_ranks(args, n=2, timeout=60):
    """Run `python args...` on n ranks with mpiexec; returns (returncode, output, seconds)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    start = time.monotonic()
    r = subprocess.run([_mpiexec(), "-n", str(n), sys.executable] + args, capture_output=True, text=True,
                       timeout=timeout, env=env, cwd=ROOT)
    return r.returncode, r.stdout + r.stderr, time.monotonic() - start


@pytest.fixture
def simulated():
    """A one-process default group over the simulated engine, destroyed afterwards."""
    engine = SimulatedEngine()
    dist.init_process_group(backend=engine)
    yield engine
    dist.destroy_process_group()


# ---------------------------------------------------------------- several ranks

@needs_mpi
@pytest.mark.parametrize("engine", ["mpi", "nccl"])
def test_collectives_every_op_and_dtype(engine):
    rc, out, _ = run_ranks([os.path.join(HERE, "dist_ranks", "collectives.py"), engine])
    assert rc == 0 and out.count("OK") == 2, out


@needs_mpi
@pytest.mark.parametrize("engine", ["mpi", "nccl"])
def test_ddp_equals_single_process_training(engine):
    rc, out, _ = run_ranks([os.path.join(HERE, "dist_ranks", "ddp.py"), engine], timeout=120)
    assert rc == 0 and out.count("OK") == 2, out


@needs_mpi
def test_uncaught_exception_ends_the_job():
    rc, out, took = run_ranks([os.path.join(HERE, "dist_ranks", "faults.py"), "raise"])
    assert rc != 0 and "rank 1: uncaught ValueError: boom on rank 1" in out, out
    assert "not reached" not in out and took < 30, (took, out)


@needs_mpi
@pytest.mark.parametrize("case, what", [("timeout", "all_reduce timed out after 1 s on rank 0"),
                                        ("ddp", "DistributedDataParallel gradient all_reduce (bucket 0) timed out")])
def test_a_rank_that_never_arrives_times_out_naming_it(case, what):
    rc, out, took = run_ranks([os.path.join(HERE, "dist_ranks", "faults.py"), case])
    assert rc != 0 and what in out and "rank(s) [1] did not arrive" in out, out
    assert "not reached" not in out and took < 30, (took, out)


@needs_mpi
def test_launcher_sets_torchrun_variables(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nimport eagerc.distributed as dist\ndist.init_process_group('gloo')\n"
                      "r = dist.get_rank()\n"
                      "open(os.path.join(os.path.dirname(__file__), f'rank{r}.txt'), 'w').write(repr(["
                      "r, os.environ['RANK'], os.environ['LOCAL_RANK'], os.environ['WORLD_SIZE'], sys.argv[1:], "
                      "__name__]))\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "eagerc.distributed.run", "--nproc-per-node", "2", str(script),
                        "--lr", "1"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for k in range(2):  # each rank writes its own file: the ranks' stdout lines may interleave
        seen = (tmp_path / f"rank{k}.txt").read_text()
        assert seen == repr([k, str(k), str(k), "2", ["--lr", "1"], "__main__"]), seen


def test_launcher_command_for_several_machines():
    from eagerc.distributed.run import _parser, mpiexec_command
    a = _parser().parse_args(["--nnodes", "2", "--nproc-per-node", "4", "--hosts", "a,b", "--mpiexec", "mpx",
                              "train.py", "--x", "1"])
    assert mpiexec_command(a) == ["mpx", "-n", "8", "-ppn", "4", "-hosts", "a,b", sys.executable, "-m",
                                  "eagerc.distributed.run", "--worker", "train.py", "--x", "1"]


# ---------------------------------------------------------------- one process

def test_post_accumulate_grad_hook_sees_the_total_once():
    from eagerc.autograd import engine
    w = eagerc.randn(3, requires_grad=True)
    b = eagerc.randn(3, requires_grad=True)
    seen = []
    h = w.register_post_accumulate_grad_hook(lambda t: seen.append(("w", t.grad.numpy().copy(), b.grad)))
    assert engine.POST_ACCUMULATE_HOOKS[0] >= 1
    loss = ((w * 2).sum() + (w * w).sum()) * (b * b).sum()  # w reached by two paths
    loss.backward()
    assert len(seen) == 1 and np.allclose(seen[0][1], w.grad.numpy())
    h.remove()
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).register_post_accumulate_grad_hook(print)
    before = engine.POST_ACCUMULATE_HOOKS[0]
    h = w.register_post_accumulate_grad_hook(print)
    h.remove()
    h.remove()
    assert engine.POST_ACCUMULATE_HOOKS[0] == before
    w.register_post_accumulate_grad_hook(print)
    w.register_post_accumulate_grad_hook(print)
    del w, h, seen, loss
    import gc
    gc.collect()
    assert engine.POST_ACCUMULATE_HOOKS[0] == before  # a dead tensor's hooks stop counting


def test_leaves_are_accumulated_as_soon_as_complete_while_hooks_exist():
    """The first layer's gradient arrives last; the last layer's hook runs before it."""
    l1, l2 = nn.Linear(4, 4), nn.Linear(4, 4)
    order = []
    handles = [p.register_post_accumulate_grad_hook(lambda t, n=n: order.append((n, l1.weight.grad is None)))
               for n, p in (("l1", l1.weight), ("l2", l2.weight))]
    l2(l1(eagerc.randn(2, 4)).relu()).sum().backward()
    assert order == [("l2", True), ("l1", False)], order
    for h in handles:
        h.remove()


def test_ddp_starts_all_reduce_while_backward_runs(simulated):
    simulated.latency = 0.002
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)])
    first = model[0].weight
    at_first = []
    first.register_post_accumulate_grad_hook(lambda t: at_first.append(len(simulated.log)))
    ddp = DDP(model, bucket_cap_mb=64 * 65 * 4 / 2**20)  # one layer per bucket
    assert len(ddp.reducer.buckets) == 6
    ddp(eagerc.randn(8, 64)).sum().backward()
    assert at_first == [5]  # five buckets were in flight before the first layer's gradient existed
    assert [op for op, *_ in simulated.log] == ["allreduce"] * 6


def test_ddp_on_a_simulated_group_of_four_averages(simulated):
    simulated.size = 4
    eagerc.manual_seed(0)
    ref = nn.Linear(3, 2)
    eagerc.manual_seed(0)
    ddp = DDP(nn.Linear(3, 2))
    x = eagerc.randn(5, 3)
    ref(x).pow(2).sum().backward()
    ddp(x).pow(2).sum().backward()
    assert np.allclose(ddp.module.weight.grad.numpy(), ref.weight.grad.numpy(), atol=1e-6)
    t = eagerc.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [4.0, 4.0]
    dist.all_reduce(t, dist.ReduceOp.AVG)
    assert t.tolist() == [4.0, 4.0]


def test_objects_must_be_json_plain(simulated):
    got = [None]
    dist.all_gather_object(got, {"a": [1, 2.5, None]})
    assert got == [{"a": [1, 2.5, None]}]
    with pytest.raises(TypeError, match="never pickles"):
        dist.broadcast_object_list([object()], src=0)


def test_group_state_errors(simulated):
    with pytest.raises(RuntimeError, match="twice"):
        dist.init_process_group(backend=SimulatedEngine())
    assert dist.get_rank() == 0 and dist.get_world_size() == 1 and dist.get_backend() == "simulated"
    with pytest.raises(ValueError, match="unknown reduce op"):
        dist.all_reduce(eagerc.ones(1), op="mean")
    with pytest.raises(ValueError, match="not part of this group"):
        dist.broadcast(eagerc.ones(1), src=3)
    with pytest.raises(TypeError, match="wraps a Module"):
        DDP(lambda x: x)
    with pytest.raises(ValueError, match="device_ids"):
        DDP(nn.Linear(2, 2), device_ids=[0, 1])


def test_not_initialised_and_backend_names():
    from eagerc.distributed.group import _backend_name
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.get_rank()
    assert _backend_name("gloo") == _backend_name("MPI") == "mpi" and _backend_name("cpu:gloo,cuda:nccl") in (
        "mpi", "nccl")
    with pytest.raises(ValueError, match="unknown backend"):
        _backend_name("ucc")


def test_buckets_go_last_parameter_first_one_dtype_each():
    ps = [eagerc.zeros(100), eagerc.zeros(100, dtype=eagerc.float64), eagerc.zeros(10), eagerc.zeros(300)]
    buckets = assign_buckets(ps, cap_bytes=800, first_bytes=400)
    assert [b.params for b in buckets] == [[3], [2, 0], [1]]
    assert [b.offsets for b in buckets] == [[0], [0, 10], [0]]
    names = ["0.weight", "0.bias", "2.weight", "2.bias", "head"]
    assert readiness_order(names) == [4, 2, 3, 0, 1]  # modules last to first, weight with its own bias


@pytest.mark.cuda
def test_nccl_one_rank_group_on_a_gpu():
    """NCCL refuses two ranks on one GPU: a one-GPU machine checks a 1-rank group."""
    pytest.importorskip("cupy")
    from eagerc.runtime.device import cuda_available
    if not cuda_available():
        pytest.skip("no GPU")
    dist.init_process_group("nccl")
    try:
        t = eagerc.ones(4, device="cuda") * 3
        dist.all_reduce(t, dist.ReduceOp.AVG)
        assert t.cpu().tolist() == [3.0] * 4
        ddp = DDP(nn.Linear(4, 2).cuda(), device_ids=[0])
        ddp(eagerc.ones(3, 4, device="cuda")).sum().backward()
        assert ddp.module.weight.grad.device.type == "cuda"
    finally:
        dist.destroy_process_group()


@needs_mpi
def test_ddp_digits_example_with_the_launcher(tmp_path):
    pytest.importorskip("sklearn")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "eagerc.distributed.run", "--nproc-per-node", "2",
                        os.path.join(ROOT, "examples", "ddp_digits.py"), "--epochs", "2",
                        "--checkpoint", str(tmp_path / "d.safetensors")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("epoch ") == 2 and "on 2 processes: test accuracy" in r.stdout, r.stdout  # rank 0 only
    assert (tmp_path / "d.safetensors").exists()
