"""Compiled C kernels: a disk cache of shared objects keyed by source, toolchain and flags,
and a ctypes loader. Runtime layer: numpy and the standard library only.

    lib = load(source)          # compiles at most once per (source, compiler, flags, cpu)
    lib.k0(ptr(a), ptr(out))

The key is the sha256 of the exact source, the compiler's `--version` banner, the flags
and the machine (flags include -march=native). The cache lives in $EAGERC_CACHE_DIR, else
~/.cache/eagerc/kernels, one `<key>.so` per source (plus the `.c` for reading). Writes go
to a temporary file renamed into place, so concurrent processes never load a half-written
object; a second process finds the object and compiles nothing. `stats` counts compiles
and cache hits in this process.

The compiler is $EAGERC_CC, else `cc` on PATH (`find_compiler()`; None when missing).
Loading sets OpenMP's idle pool to sleep and gives each library eagerc's thread count
(threads.py: why the two thread pools need it).
"""
import ctypes
import ctypes.util
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time

from . import threads

__all__ = ["find_compiler", "compiler_version", "cache_dir", "load", "ptr", "FLAGS", "stats", "has_float16", "load_many",
           "CompileError", "NoCompiler"]

# IEEE semantics (no -ffast-math): -fno-math-errno only lets sqrt & co. inline and vectorize;
# -fno-trapping-math lets comparisons feed selects without branches (values are unchanged:
# it only gives up FP-exception traps, which numpy does not enable either);
# -ffp-contract=off: no fused multiply-add, every operation rounded as numpy's ufuncs round
# it, so an elementwise chain gives eager's bits (gnu11 would contract a*b+c by default);
# -mprefer-vector-width=512: on AVX-512 machines GCC otherwise keeps 256-bit vectors, and the
# 16-wide vector exp/log and divisions make softmax-like rows ~20% faster (an x86 option; no
# effect without AVX-512)
_WIDE = ("-mprefer-vector-width=512",) if platform.machine().lower() in ("x86_64", "amd64") else ()
FLAGS = ("-O3", "-march=native", *_WIDE, "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off",
         "-shared", "-fPIC", "-std=gnu11")

# glibc's vector math library, when present (the renderer declares its SIMD functions)
LIBS = ("-lmvec", "-lm") if ctypes.util.find_library("mvec") else ("-lm",)

stats = {"compiles": 0, "hits": 0, "compile_seconds": 0.0}
_loaded = {}           # key -> CDLL (this process)
_versions = {}         # compiler path -> version banner
_lock = threading.Lock()


class NoCompiler(RuntimeError):
    pass


class CompileError(RuntimeError):
    pass


def find_compiler():
    """Path of the C compiler ($EAGERC_CC or `cc`), or None."""
    return shutil.which(os.environ.get("EAGERC_CC") or "cc")


def compiler_version(cc):
    v = _versions.get(cc)
    if v is None:
        try:
            r = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
            v = (r.stdout or r.stderr).strip()
        except (OSError, subprocess.SubprocessError) as e:
            raise NoCompiler(f"{cc} --version failed: {e}") from None
        _versions[cc] = v
    return v


def cache_dir():
    d = os.environ.get("EAGERC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "eagerc",
                                                            "kernels")
    os.makedirs(d, exist_ok=True)
    return d


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def key_of(source, cc=None, flags=FLAGS):
    cc = cc or find_compiler()
    if cc is None:
        raise NoCompiler("no C compiler found (set EAGERC_CC or install cc)")
    h = hashlib.sha256()
    for part in (source, compiler_version(cc), " ".join(flags + LIBS), platform.machine(), _cpu()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def load(source, flags=FLAGS):
    """The ctypes library of `source`, compiled (or found in the disk cache) and loaded."""
    cc = find_compiler()
    if cc is None:
        raise NoCompiler("no C compiler found (set EAGERC_CC or install cc)")
    key = key_of(source, cc, flags)
    with _lock:
        lib = _loaded.get(key)
        if lib is not None:
            return lib
        d = cache_dir()
        so = os.path.join(d, key[:32] + ".so")
        if key in _compiled:          # just compiled by load_many: not a cache hit
            _compiled.discard(key)
        elif os.path.exists(so):
            stats["hits"] += 1
        else:
            _compile(cc, source, so, flags, d, key)
            _compiled.discard(key)
        threads.prepare_openmp()      # before libgomp loads: an idle pool sleeps (threads.py)
        lib = _loaded[key] = ctypes.CDLL(so)
        lib._eagerc_path = so
        threads.bind(lib)             # the library's OpenMP kernels use eagerc's thread count
        return lib


def load_many(sources, flags=FLAGS):
    """The libraries of several sources; the ones not cached yet are compiled in parallel,
    one compiler process per source and CPU (a graph's kernels split in a few shared
    objects compile in about 1/ncpu of the time of one)."""
    cc = find_compiler()
    if cc is None:
        raise NoCompiler("no C compiler found (set EAGERC_CC or install cc)")
    d = cache_dir()
    keys = [key_of(s, cc, flags) for s in sources]
    todo = {}
    for s, k in zip(sources, keys):
        so = os.path.join(d, k[:32] + ".so")
        if k not in _loaded and not os.path.exists(so):
            todo[k] = (s, so)
    if len(todo) > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(len(todo), os.cpu_count() or 1)) as pool:
            for f in [pool.submit(_compile, cc, s, so, flags, d, k) for k, (s, so) in todo.items()]:
                f.result()
    return [load(s, flags) for s in sources]


def _compile(cc, source, so, flags, d, key):
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        c = os.path.join(tmp, "kernels.c")
        with open(c, "w") as f:
            f.write(source)
        tmp_so = os.path.join(tmp, "kernels.so")
        r = subprocess.run([cc, *flags, c, "-o", tmp_so, *LIBS], capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(f"{cc} failed ({r.returncode}):\n{r.stderr[-4000:]}")
        os.replace(c, so[:-3] + ".c")
        os.replace(tmp_so, so)     # atomic: readers see all of it or nothing
    with _stats_lock:
        stats["compiles"] += 1
        stats["compile_seconds"] += time.perf_counter() - t0
        _compiled.add(key)
    log = os.environ.get("EAGERC_KERNEL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"compiled {key[:32]}\n")


_stats_lock = threading.Lock()
_compiled = set()     # keys compiled by this process and not loaded yet


_char = ctypes.c_char
_addressof = ctypes.addressof


_FLOAT16 = {}


def has_float16():
    """Does the compiler take C's _Float16 (GCC >= 12 and Clang >= 15 on x86-64 and arm64)?
    Checked by compiling a one-line kernel once (cached on disk like any other)."""
    cc = find_compiler()
    if cc not in _FLOAT16:
        try:
            load("_Float16 eagerc_half_probe(_Float16 x) { return x + (_Float16)1; }\n")
            _FLOAT16[cc] = True
        except (CompileError, NoCompiler, OSError):
            _FLOAT16[cc] = False
    return _FLOAT16[cc]


def ptr(a):
    """The data address of a contiguous numpy array (fast path through the buffer protocol;
    read-only arrays go through a.ctypes)."""
    try:
        return _addressof(_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data
