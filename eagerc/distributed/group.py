"""Process groups: who takes part, on which engine, and how long to wait for them.

The default group spans every process MPI started (`mpiexec -n N`, or the launcher in
run.py). `new_group(ranks)` splits it; ranks in the API are global ranks, as in
PyTorch. Each group owns two communicators: the engine's (tensors) and a host one for
arrivals and JSON objects, always MPI (NCCL bootstraps over it too).

Faults are the group's job, not the engine's:
- every wait has a deadline (`timeout=`): past it, the error names the collective and
  the ranks that did not arrive. A collective first exchanges a few integers with every
  peer (its "arrival": kind, root, dtype, shape); the peers whose arrival never came are
  the missing ranks, and arrivals that disagree are reported before any data moves.
- an uncaught exception on any rank ends the whole job (MPI_Abort from sys.excepthook),
  after printing that rank's traceback: no rank is left hanging in a collective.
"""
import datetime
import os
import sys
import time
import zlib

import numpy as np

from .engines import MPIEngine, mpi

__all__ = ["ProcessGroup", "GroupMember", "DistError", "DistTimeoutError", "init_process_group",
           "destroy_process_group", "is_initialized", "is_available", "is_mpi_available", "is_nccl_available",
           "is_gloo_available", "get_rank", "get_world_size", "get_backend", "new_group", "world",
           "default_timeout"]

default_timeout = datetime.timedelta(minutes=30)  # PyTorch's default for CPU groups

_ARRIVE_TAG = 7201
_DIMS = 6
_META = 5 + _DIMS  # seq, kind, root, dtype, ndim, dims...
_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
           "complex128", "bfloat16", "uint16", "uint32", "uint64")


class DistError(RuntimeError):
    """A collective failed: ranks disagree, or the engine refused."""


class DistTimeoutError(DistError, TimeoutError):
    """A collective did not complete within the group's timeout."""


class _NonMember:
    def __repr__(self):
        return "GroupMember.NON_GROUP_MEMBER"


class GroupMember:
    WORLD = None  # the default group, once initialised
    NON_GROUP_MEMBER = _NonMember()


def _seconds(timeout):
    if timeout is None:
        return default_timeout.total_seconds()
    return timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)


class ProcessGroup:
    """A set of ranks and the engine that connects them.

    `ranks`: global ranks in group order; `engine`: the tensor transport; `host`: an
    MPIEngine for arrivals and objects (None for a simulated one-process group)."""

    def __init__(self, backend, engine, host, ranks, timeout):
        self.backend, self.engine, self.host = backend, engine, host
        self.ranks = list(ranks)
        self.timeout = _seconds(timeout)
        self._seq = 0

    def rank(self):
        return self.engine.rank

    def size(self):
        return self.engine.size

    def group_rank(self, global_rank, what):
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            raise ValueError(f"{what}: global rank {global_rank} is not part of this group "
                             f"(ranks {self.ranks})") from None

    def name(self, group_rank):
        return self.ranks[group_rank]

    # ------------------------------------------------------------ arrivals
    def arrive(self, kind, array=None, root=-1):
        """Tell every peer this rank reached collective `kind` (with this array's dtype and
        shape, and the root); returns the pending Arrival."""
        self._seq += 1
        meta = np.zeros(_META, np.int64)
        code = zlib.crc32(kind.encode())  # the same number on every rank (a per-process count would not be)
        _KINDS[code] = kind
        meta[0], meta[1], meta[2] = self._seq, code, root
        if array is not None:
            name = array.dtype.name
            meta[3] = _DTYPES.index(name) if name in _DTYPES else -1
            meta[4] = array.ndim
            meta[5:5 + min(array.ndim, _DIMS)] = array.shape[:_DIMS]
        return Arrival(self, kind, meta)

    def wait(self, req, what, arrival=None, timeout=None):
        """Wait for `req` (an engine request) until the group's deadline. Polls without pause
        for the first half second (each test is what lets MPI move a large message along),
        then every millisecond."""
        if req.test():
            return
        limit = self.timeout if timeout is None else _seconds(timeout)
        start = time.monotonic()
        deadline = start + limit
        while not req.test():
            now = time.monotonic()
            if now > deadline:
                raise self._timed_out(what, limit, arrival)
            if now - start > 0.5:
                time.sleep(0.001)

    def _timed_out(self, what, limit, arrival):
        me = self.ranks[self.rank()]
        if arrival is not None:
            missing = [self.ranks[r] for r in arrival.missing()]
            who = (f"rank(s) {missing} did not arrive" if missing else
                   "every rank arrived but the transfer did not finish")
        else:
            who = "the ranks that did not arrive are not known for this operation"
        return DistTimeoutError(f"{what} timed out after {limit:g} s on rank {me}: {who} "
                                f"(group ranks {self.ranks}). Raise `timeout=` in init_process_group or "
                                "new_group if a rank is only slow.")

    def __repr__(self):
        return f"ProcessGroup(backend={self.backend!r}, ranks={self.ranks})"


_KINDS = {}  # crc32 of a collective's name -> the name, for every collective this process called


class Arrival:
    """One collective's arrival exchange: this rank's (seq, kind, root, dtype, shape) sent to
    every peer, and theirs received. Complete means every peer reached the collective."""

    def __init__(self, group, kind, meta):
        self.group, self.kind = group, kind
        size, me = group.size(), group.rank()
        self.rows = np.empty((size, _META), np.int64)
        self.rows[me] = meta
        self.meta = meta
        self.recvs = {}
        self.reqs = []
        if group.host is None or size == 1:
            self.rows[:] = meta
            return
        comm = group.host.comm
        for p in range(size):
            if p != me:
                self.reqs.append(comm.Isend(meta, dest=p, tag=_ARRIVE_TAG))
                self.recvs[p] = comm.Irecv(self.rows[p], source=p, tag=_ARRIVE_TAG)
        self.reqs.extend(self.recvs.values())

    def test(self):
        return not self.reqs or self.group.host.MPI.Request.Testall(self.reqs)

    def missing(self):
        return [p for p, r in self.recvs.items() if not r.Test()]

    def check(self, what):
        """Wait for every peer, then raise if they called a different collective or passed a
        different root, dtype or shape."""
        self.group.wait(self, what, self)
        rows = self.rows
        if (rows[:, 1:] == rows[self.group.rank(), 1:]).all():
            return
        lines = "\n".join(f"  rank {self.group.ranks[r]}: {_describe(row)}" for r, row in enumerate(rows))
        raise DistError(f"{what}: the ranks disagree (every rank must call the same collective with the same "
                        f"root, dtype and shape):\n{lines}")


def _describe(row):
    kind = _KINDS.get(int(row[1]), f"a collective this rank never called (#{row[1]})")
    dtype = _DTYPES[row[3]] if 0 <= row[3] < len(_DTYPES) else "?"
    ndim = int(row[4])
    shape = [int(d) for d in row[5:5 + min(ndim, _DIMS)]] + (["..."] if ndim > _DIMS else [])
    root = f" root {row[2]}" if row[2] >= 0 else ""
    return f"{kind}{root} {dtype} {shape}"


# ---------------------------------------------------------------- the default group

_state = {"world": None, "hook": None}
ABORT_GRACE_S = 0.2   # after an uncaught exception's traceback, before MPI_Abort (see the hook)


def world(group=None, what="this collective"):
    """`group`, or the default group; raises if none was initialised."""
    if group is not None:
        return group
    w = _state["world"]
    if w is None:
        raise RuntimeError(f"{what}: default process group has not been initialized, please make sure to call "
                           "init_process_group.")
    return w


def is_available():
    """True when mpi4py is installed (the CPU engine; NCCL also bootstraps over it)."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


is_mpi_available = is_gloo_available = is_available


def is_nccl_available():
    try:
        from cupy.cuda import nccl  # noqa: F401
    except Exception:
        return False
    return True


def is_initialized():
    return _state["world"] is not None


def _backend_name(backend):
    name = (backend or "mpi").lower()
    if "," in name or ":" in name:  # "cpu:gloo,cuda:nccl": the GPU engine when a GPU is there
        from ..runtime.device import cuda_available
        name = "nccl" if cuda_available() and "nccl" in name else "mpi"
    if name == "gloo":  # PyTorch's CPU engine; ours is MPI
        name = "mpi"
    if name not in ("mpi", "nccl"):
        raise ValueError(f"init_process_group: unknown backend {backend!r}; eagerc runs 'mpi' (alias 'gloo') on "
                         "CPUs and 'nccl' on GPUs")
    return name


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    """Join the default group. Ranks come from MPI (start the processes with `mpiexec -n N`
    or `python -m eagerc.distributed.run`); RANK/WORLD_SIZE from the launcher, and the
    `rank`/`world_size` arguments, must agree with MPI's. `init_method` and `store` are
    accepted for PyTorch scripts and unused: MPI already connects the ranks.
    `backend` may also be an engine object (engines.SimulatedEngine, or an NCCLEngine over
    stand-ins) for tests and benchmarks."""
    if _state["world"] is not None:
        raise RuntimeError("trying to initialize the default process group twice!")
    if not isinstance(backend, (str, type(None))):  # an engine object
        g = ProcessGroup(backend.name, backend, getattr(backend, "host", None), range(backend.size), timeout)
        _state["world"] = GroupMember.WORLD = g
        if backend.size > 1:
            _abort_on_uncaught_exception(backend.host.comm)
        return
    name = _backend_name(backend)
    MPI = mpi()
    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    for what, given, actual in (("RANK", os.environ.get("RANK"), r), ("WORLD_SIZE", os.environ.get("WORLD_SIZE"), n),
                                ("rank", rank, r), ("world_size", world_size, n)):
        if given not in (None, -1, "") and int(given) != actual:
            hint = (" -- start the processes with `mpiexec -n N` or `python -m eagerc.distributed.run "
                    "--nproc-per-node N`: eagerc's ranks are MPI's" if n == 1 else "")
            raise RuntimeError(f"init_process_group: {what}={given}, but MPI says this process is rank {r} of "
                               f"{n}{hint}")
    host = MPIEngine(comm.Dup())
    engine = _engine(name, host, device_id)
    g = ProcessGroup(name, engine, host, range(n), timeout)
    _state["world"] = GroupMember.WORLD = g
    if n > 1:
        _abort_on_uncaught_exception(comm)


def _engine(name, host, device_id=None):
    if name == "nccl":
        from .nccl import NCCLEngine
        return NCCLEngine(host, device_id)
    return MPIEngine(host.comm.Dup())


def _abort_on_uncaught_exception(comm):
    """An uncaught exception prints this rank's error and traceback, then MPI_Abort ends every
    rank. The error itself comes first, in the line that announces the abort: when the abort
    kills the job, mpiexec may drop what it had not yet forwarded of a rank's output (under
    load the traceback was cut off mid-line, the message with it), so the line that matters
    most goes out first, and the rank pauses a moment before the abort for the rest."""
    previous = sys.excepthook

    def hook(tp, value, tb):
        try:
            sys.stderr.write(f"[eagerc.distributed] rank {comm.Get_rank()}: uncaught {tp.__name__}: {value}\n"
                             "[eagerc.distributed] ending the job (MPI_Abort); the traceback follows\n")
            sys.stderr.flush()
            previous(tp, value, tb)
            sys.stderr.flush()
            sys.stdout.flush()
            time.sleep(ABORT_GRACE_S)
        finally:
            comm.Abort(1)

    sys.excepthook = hook
    _state["hook"] = (hook, previous)


def destroy_process_group(group=None):
    """Release a group (the default one, and every group made from it, when `group` is None)."""
    if group is not None and group is not _state["world"]:
        _free(group)
        return
    w = _state["world"]
    if w is None:
        raise RuntimeError("destroy_process_group: default process group has not been initialized")
    _free(w)
    _state["world"] = GroupMember.WORLD = None
    hooks = _state["hook"]
    if hooks is not None and sys.excepthook is hooks[0]:
        sys.excepthook = hooks[1]
    _state["hook"] = None


def _free(group):
    for e in (group.engine, group.host):
        close = getattr(e, "close", None)
        if close is not None:
            close()


def _member(group, what):
    """The group to use, or None when this rank is not in it (the call does nothing)."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return None
    return world(group, what)


def get_rank(group=None):
    g = _member(group, "get_rank")
    return -1 if g is None else g.rank()


def get_world_size(group=None):
    g = _member(group, "get_world_size")
    return -1 if g is None else g.size()


def get_backend(group=None):
    return world(group, "get_backend").backend


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None):
    """A group of some global ranks; every rank of the default group must call it (as in
    PyTorch). Ranks outside get GroupMember.NON_GROUP_MEMBER."""
    w = world(None, "new_group")
    ranks = list(range(w.size())) if ranks is None else sorted(int(r) for r in ranks)
    if any(not 0 <= r < w.size() for r in ranks) or len(set(ranks)) != len(ranks):
        raise ValueError(f"new_group: ranks {ranks} must be distinct ranks of the world (0..{w.size() - 1})")
    if w.host is None:  # simulated: one process, one group
        return ProcessGroup(w.backend, w.engine, None, ranks, timeout or w.timeout)
    MPI = w.host.MPI
    me = w.ranks[w.rank()]
    sub = w.host.comm.Split(0 if me in ranks else MPI.UNDEFINED, ranks.index(me) if me in ranks else 0)
    if me not in ranks:
        return GroupMember.NON_GROUP_MEMBER
    host = MPIEngine(sub)
    if backend is None:  # the default group's kind of engine, over the new ranks
        name, engine = w.backend, w.engine.split(host)
    else:
        name = _backend_name(backend)
        engine = _engine(name, host, device_id)
    return ProcessGroup(name, engine, host, ranks, w.timeout if timeout is None else timeout)
