"""The launcher, like torchrun:

    python -m eagerc.distributed.run --nproc-per-node 2 train.py --lr 0.1
    python -m eagerc.distributed.run --nnodes 2 --nproc-per-node 4 --hosts a,b train.py

It starts the processes with mpiexec (the mpich wheel's, next to this Python, else the
first on PATH); each one sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (and
MASTER_ADDR/MASTER_PORT, which some scripts read) from MPI's process manager, then runs
the script as __main__. The job's exit status is mpiexec's: non-zero when any rank
fails. A script started directly by `mpiexec -n N python train.py` works the same, as
init_process_group takes the ranks from MPI; only the environment variables are missing.
"""
import argparse
import os
import runpy
import shutil
import sys

__all__ = ["main", "mpiexec_command", "find_mpiexec"]


def _parser():
    p = argparse.ArgumentParser(prog="python -m eagerc.distributed.run",
                                description="Start a data-parallel eagerc script on N processes (via mpiexec).")
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1,
                   help="processes on each machine (one per GPU, or per core group on CPUs)")
    p.add_argument("--nnodes", type=int, default=1, help="number of machines")
    p.add_argument("--hosts", default=None, help="comma-separated machine names (passed to mpiexec -hosts)")
    p.add_argument("--hostfile", default=None, help="a file of machine names (passed to mpiexec -f)")
    p.add_argument("--mpiexec", default=None, help="the mpiexec to use (default: next to this Python, else PATH)")
    p.add_argument("--mpiexec-args", default="", help="more arguments for mpiexec, as one string")
    p.add_argument("-m", "--module", action="store_true", help="run the script argument as a module (python -m)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("script", help="the training script (or module, with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return p


def find_mpiexec():
    """The mpich wheel's mpiexec: next to this Python (a venv's bin), next to the base Python
    (a venv made with --system-site-packages), else the first on PATH; None if none."""
    for folder in (os.path.dirname(sys.executable), os.path.join(sys.base_prefix, "bin")):
        here = os.path.join(folder, "mpiexec")
        if os.path.exists(here):
            return here
    return shutil.which("mpiexec")


def _mpiexec(given):
    if given:
        return given
    found = find_mpiexec()
    if found is None:
        raise SystemExit("eagerc.distributed.run: mpiexec not found; install the MPI wheels: "
                         'pip install -e ".[distributed]"')
    return found


def mpiexec_command(a):
    """The mpiexec command line that starts every rank of the job `a` (parsed arguments)."""
    n = a.nproc_per_node * a.nnodes
    cmd = [_mpiexec(a.mpiexec), "-n", str(n)]
    if a.nnodes > 1 or a.hosts or a.hostfile:
        cmd += ["-ppn", str(a.nproc_per_node)]
    if a.hosts:
        cmd += ["-hosts", a.hosts]
    if a.hostfile:
        cmd += ["-f", a.hostfile]
    cmd += a.mpiexec_args.split()
    cmd += [sys.executable, "-m", "eagerc.distributed.run", "--worker"] + (["-m"] if a.module else [])
    return cmd + [a.script] + a.args


def _env_from_mpi():
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE from the process manager (Hydra's PMI
    variables, or Open MPI's), as torchrun sets them."""
    e = os.environ
    rank = e.get("PMI_RANK", e.get("OMPI_COMM_WORLD_RANK"))
    size = e.get("PMI_SIZE", e.get("OMPI_COMM_WORLD_SIZE"))
    if rank is None or size is None:  # another process manager: ask MPI itself
        from .engines import mpi
        comm = mpi().COMM_WORLD
        rank, size = str(comm.Get_rank()), str(comm.Get_size())
    e["RANK"], e["WORLD_SIZE"] = rank, size
    e["LOCAL_RANK"] = e.get("MPI_LOCALRANKID", e.get("OMPI_COMM_WORLD_LOCAL_RANK", rank))
    e["LOCAL_WORLD_SIZE"] = e.get("MPI_LOCALNRANKS", e.get("OMPI_COMM_WORLD_LOCAL_SIZE", size))
    e.setdefault("MASTER_ADDR", "127.0.0.1")
    e.setdefault("MASTER_PORT", "29500")


def main(argv=None):
    a = _parser().parse_args(argv)
    if a.worker:
        _env_from_mpi()
        sys.argv = [a.script] + a.args
        if a.module:
            runpy.run_module(a.script, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
            runpy.run_path(a.script, run_name="__main__")
        return 0
    if a.nproc_per_node < 1 or a.nnodes < 1:
        raise SystemExit("eagerc.distributed.run: --nproc-per-node and --nnodes must be at least 1")
    import subprocess
    return subprocess.call(mpiexec_command(a))


if __name__ == "__main__":
    sys.exit(main())
