"""Thread counts for the two pools eagerc runs on: numpy's BLAS and the C kernels' OpenMP.

    eagerc.set_num_threads(1)     # BLAS and the C kernels together (PyTorch's name)
    eagerc.get_num_threads()      # -> 1

Why a module: on a small machine the two pools fight. OpenBLAS's workers and libgomp's
spin after each parallel region, each waiting for a core the other holds: a compiled MLP
step at batch 8 took 84x longer with the default threading than with one thread (issue 15).
eagerc makes them cooperate without asking for variables:

- the OpenMP pool sleeps when idle: `prepare_openmp()` sets OMP_WAIT_POLICY=PASSIVE before
  the first kernel library loads libgomp (kernel_cache.load calls it), unless the user set
  OMP_WAIT_POLICY or GOMP_SPINCOUNT themselves;
- a C kernel takes as many threads as its work size pays for (`num_threads(...)` clauses,
  compiler/kernels/render.py): small kernels -- most of a training step -- run on the
  calling thread and never wake the pool, so BLAS's spinning workers do not delay them;
- a compiled CPU program (backend numpy or c) whose matrix products are all small
  (< BLAS_PARALLEL_MIN FLOPs, and one at least large enough for OpenBLAS to split:
  BLAS_THREADED_FROM) runs with numpy's BLAS on one thread (`blas_context_for(graph)`, set
  by the backends' compile and entered per call by compiler/entries.call; the FLOPs are the
  ops' `flops` traits); the count is restored after the call (by the
  last one out when programs run in several Python threads at once);
- the count is process-wide: each kernel library exports `eagerc_set_num_threads`, and
  kernel_cache.load calls `bind(lib)` so every library, loaded before or after a
  set_num_threads, uses the current count.

The default count is OMP_NUM_THREADS when set, else the CPUs this process may run on.
BLAS is set through threadpoolctl when installed (it knows MKL, BLIS and OpenBLAS builds),
else through numpy's bundled OpenBLAS found with ctypes; without either, set_num_threads
changes only the C kernels (numpy's BLAS then follows OPENBLAS_NUM_THREADS as usual).
Runtime layer: the standard library, ctypes and numpy (to find its BLAS) only.
"""
import ctypes
import os
import threading

__all__ = ["prepare_openmp", "bind", "set_num_threads", "get_num_threads", "set_num_interop_threads",
           "get_num_interop_threads", "blas_threads", "one_blas_thread", "blas_context_for", "BLAS_PARALLEL_MIN", "BLAS_THREADED_FROM"]

# matrix products below this many FLOPs (about a millisecond on one core) run on one BLAS
# thread inside a compiled C program: OpenBLAS splits products from ~0.5 MFLOP on, and waking
# its pool costs more than such a product saves -- far more when the C kernels' pool or
# other processes hold the cores (issue 15: MLP step at batch 8, 36 ms vs 0.5 ms)
BLAS_PARALLEL_MIN = 1 << 25
# below this many FLOPs OpenBLAS never splits a product (gemv from ~9216 elements, gemm from
# 262144 multiply-adds): a program whose products are all smaller needs no pinning, and its
# calls skip the context's microsecond
BLAS_THREADED_FROM = 1 << 14

_lock = threading.Lock()
_libs = []                    # kernel libraries that export eagerc_set_num_threads
_count = None                 # the C kernels' thread count, once decided
_interop = None               # set_num_interop_threads' value (no inter-op pool: recorded only)
_blas = None                  # ctypes (set, get) of numpy's OpenBLAS, or False when not found


def _cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _default():
    """OMP_NUM_THREADS (its first entry, as OpenMP reads a nested list) when set, else the CPUs."""
    v = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    try:
        return max(1, int(v))
    except ValueError:
        return _cpus()


def prepare_openmp():
    """Called before a kernel library is loaded: an idle OpenMP pool sleeps instead of
    spinning (libgomp reads the variable once, when it loads). A user's own setting wins."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def bind(lib):
    """Give a freshly loaded kernel library the current thread count (libraries without
    OpenMP kernels, such as a probe, export no setter and are skipped)."""
    try:
        setter = lib.eagerc_set_num_threads
    except AttributeError:
        return
    setter.argtypes = [ctypes.c_int]
    setter.restype = None
    with _lock:
        setter(get_num_threads())
        _libs.append(lib)


def get_num_threads():
    """The number of threads the C kernels use (and BLAS, once set_num_threads set it)."""
    global _count
    if _count is None:
        _count = _default()
    return _count


def set_num_threads(n):
    """Use `n` threads for the C kernels and for numpy's BLAS (torch.set_num_threads)."""
    global _count
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive int, got {n!r}")
    with _lock:
        _count = n
        for lib in _libs:
            lib.eagerc_set_num_threads(n)
    _set_blas(n)


def get_num_interop_threads():
    """PyTorch's inter-op pool size. eagerc runs ops on the calling thread (no inter-op pool):
    the value set, else the intra-op default."""
    return _interop if _interop is not None else get_num_threads()


def set_num_interop_threads(n):
    """Recorded for get_num_interop_threads (eagerc has no inter-op pool to size)."""
    global _interop
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_interop_threads: expected a positive int, got {n!r}")
    _interop = n


# ------------------------------------------------------------------ BLAS

def _openblas():
    """(set, get) of the OpenBLAS numpy loaded (its bundled copy names its symbols
    scipy_openblas_*64_ or openblas_*64_), found in this process's mapped libraries. SciPy
    bundles another copy with its own pool: numpy's own (under numpy's install) comes first."""
    global _blas
    if _blas is None:
        _blas = False
        import numpy  # noqa: F401  (loads numpy's BLAS, so it is mapped)
        home = os.path.dirname(os.path.dirname(os.path.abspath(numpy.__file__)))
        mine = lambda p: os.path.join(home, "numpy") in p or os.path.join(home, "numpy.libs") in p  # noqa: E731
        paths = []
        try:
            with open("/proc/self/maps") as f:
                for line in f:
                    p = line.split()[-1]
                    if "openblas" in os.path.basename(p).lower() and p not in paths:
                        paths.append(p)
        except OSError:
            pass
        for p in sorted(paths, key=lambda p: (not mine(p), "scipy.libs" in p)):
            try:
                lib = ctypes.CDLL(p)
            except OSError:
                continue
            for pre, suf in (("scipy_openblas", "64_"), ("openblas", "64_"), ("scipy_openblas", ""), ("openblas", "")):
                try:
                    s, g = getattr(lib, f"{pre}_set_num_threads{suf}"), getattr(lib, f"{pre}_get_num_threads{suf}")
                except AttributeError:
                    continue
                s.argtypes, s.restype, g.argtypes, g.restype = [ctypes.c_int], None, [], ctypes.c_int
                _blas = (s, g)
                return _blas
    return _blas


def _set_blas(n):
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        ob = _openblas()
        if ob:
            ob[0](n)
        return
    threadpool_limits(n, user_api="blas")


def blas_threads():
    """The thread count numpy's BLAS uses now (its OpenBLAS read through ctypes, else the
    first BLAS threadpoolctl lists), or None when it cannot be read."""
    ob = _openblas()
    if ob:
        return ob[1]()
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
    return counts[0] if counts else None


class _OneBlasThread:
    """A context in which numpy's OpenBLAS runs on the calling thread only (two ctypes calls,
    about a microsecond, and none when BLAS already has one thread). One per process, counted:
    programs running at once in several Python threads pin BLAS once, and the last one out
    restores the count the first one found."""
    __slots__ = ("set", "get", "saved", "depth", "lock")

    def __init__(self, setter, getter):
        self.set, self.get, self.saved, self.depth, self.lock = setter, getter, 1, 0, threading.Lock()

    def __enter__(self):
        with self.lock:
            if self.depth == 0:
                self.saved = n = self.get()
                if n != 1:
                    self.set(1)
            self.depth += 1

    def __exit__(self, *exc):
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.saved != 1:
                self.set(self.saved)


_one = None


def one_blas_thread():
    """The context manager pinning numpy's OpenBLAS to one thread, or None where OpenBLAS
    cannot be reached through ctypes (another BLAS: it then keeps its own threading)."""
    global _one
    if _one is None:
        ob = _openblas()
        _one = _OneBlasThread(*ob) if ob else False
    return _one or None


def blas_context_for(graph):
    """The context a compiled CPU program runs in: one BLAS thread when its largest matrix
    product is too small for OpenBLAS's threads to pay (BLAS_THREADED_FROM <= FLOPs <
    BLAS_PARALLEL_MIN: waking and then spinning its pool costs more than the product), else None.
    A size that is not a number yet (a dynamic graph) counts as large."""
    from .ops import flops_of, node_flops
    most = 0
    for n in graph.nodes:
        if flops_of(n.op).category == "matmul-like":
            try:
                most = max(most, int(node_flops(n)))
            except (TypeError, ValueError):
                return None
    return one_blas_thread() if BLAS_THREADED_FROM <= most < BLAS_PARALLEL_MIN else None
