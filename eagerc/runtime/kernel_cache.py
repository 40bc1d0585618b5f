"""Compiled C kernels: a disk cache of shared objects keyed by source, toolchain and flags,
and a ctypes loader. Runtime layer: numpy and the standard library only.

    lib = load(source)          # compiles at most once per (source, compiler, flags, cpu)
    lib.k0(ptr(a), ptr(out))
    libs = build_functions(plan_functions([(name, text), ...], assemble))   # {name: lib}, per function

The key is the sha256 of the exact source, the compiler's `--version` banner, the flags
and the machine (flags include -march=native). The cache lives in $EAGERC_CACHE_DIR, else
~/.cache/eagerc/kernels, one `<key>.so` per compiled source (plus the `.c` for reading).
`plan_functions` / `build_functions` (backend c, whose kernels are functions named by their content) cache
each function on its own key: a `<key>.fn` index names the object holding it, so a kernel
met in any earlier graph or process is loaded, not compiled, and the missing ones are
compiled together, a few translation units side by side. Writes go to a temporary file
renamed into place, so concurrent processes never load a half-written object; a second
process finds the objects and compiles nothing. `stats` counts compiles and cache hits in
this process.

The compiler is $EAGERC_CC, else `cc` on PATH (`find_compiler()`; None when missing);
`works()` probes it once per process, and `notice` is the one-line warning of whoever falls
back to numpy without it. Loading sets OpenMP's idle pool to sleep and gives each library
eagerc's thread count (threads.py: why the two thread pools need it).
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
import warnings

from . import threads

__all__ = ["find_compiler", "works", "why_not", "notice", "compiler_version", "cache_dir", "load", "plan_functions",
           "build_functions",
           "ptr", "FLAGS", "stats", "has_float16", "CompileError", "NoCompiler"]

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
_loaded = {}           # source key -> CDLL (this process)
_libs = {}             # shared object path -> CDLL (this process)
_versions = {}         # compiler path -> version banner
_lock = threading.Lock()


class NoCompiler(RuntimeError):
    pass


class CompileError(RuntimeError):
    pass


def find_compiler():
    """Path of the C compiler ($EAGERC_CC or `cc`), or None."""
    return shutil.which(os.environ.get("EAGERC_CC") or "cc")


def works():
    """Does the C compiler build eagerc's kernels (FLAGS, OpenMP included)? Probed once per
    compiler and process by compiling a one-line function (which later processes find in the
    disk cache): eager mode's C kernels and eagerc.compile's default backend both ask here."""
    cc = find_compiler()
    if cc is None:
        return False
    ok = _works.get(cc)
    if ok is None:
        try:
            load("int eagerc_probe(void) { return 1; }\n")
            ok = True
        except (CompileError, NoCompiler, OSError):
            ok = False
        _works[cc] = ok
    return ok


_works = {}            # compiler path -> does it work (this process)


def why_not():
    """Why the C kernels are not used, in a few words (for `notice`)."""
    cc = find_compiler()
    return "no C compiler found (cc, or $EAGERC_CC)" if cc is None else f"the C compiler {cc} fails with eagerc's flags"


def notice(who, why, instead, stacklevel=3):
    """THE one-line RuntimeWarning of a user of the C kernels that runs on numpy instead
    (eager kernels, backend c, eagerc.compile's default): `eagerc <who>: <why>; using <instead>`."""
    warnings.warn(f"eagerc {who}: {why}; using {instead}", RuntimeWarning, stacklevel=stacklevel + 1)


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
    global _CPU
    if _CPU is None:
        _CPU = _read_cpu()
    return _CPU


_CPU = None


def _read_cpu():
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


def load(source, flags=FLAGS, build=True):
    """The ctypes library of `source`, compiled (or found in the disk cache) and loaded; waits
    for a `prefetch` of the same source rather than compiling it again. With build=False, only
    a library already built (this process, the disk cache or a prefetch on its way): None if
    it would have to be compiled."""
    cc = find_compiler()
    if cc is None:
        raise NoCompiler("no C compiler found (set EAGERC_CC or install cc)")
    key = key_of(source, cc, flags)
    lib = _loaded.get(key)
    if lib is None:
        so = os.path.join(cache_dir(), key[:32] + ".so")
        with _lock:
            pending = _pending.pop(so, None)
        if pending is not None:
            pending.result()          # its compile error, if any, is this load's
        elif so in _libs or os.path.exists(so):
            stats["hits"] += 1
        elif not build:
            return None
        else:
            _compile(cc, source, so, flags)
        lib = _loaded[key] = _open(so)
    return lib


def prefetch(source, flags=FLAGS):
    """Start compiling `source` in the background (unless it is loaded, cached on disk or on its
    way) so that a later `load(source)` finds it built. Why: eager mode meets its kernels one at
    a time (a forward op, later its backward), each compile ~0.1 s; a forward kernel's build
    announces the kernels its backward will need, and their compilers run beside the forward
    pass instead of one after another. A failure is reported by that later `load`, never here."""
    cc = find_compiler()
    if cc is None:
        return
    key = key_of(source, cc, flags)
    so = os.path.join(cache_dir(), key[:32] + ".so")
    with _lock:
        if key in _loaded or so in _pending or so in _libs or os.path.exists(so):
            return
        global _pool
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor
            _pool = ThreadPoolExecutor(max(1, os.cpu_count() or 1), thread_name_prefix="eagerc-cc")
        _pending[so] = _pool.submit(_compile, cc, source, so, flags)


def wait_prefetched():
    """Wait until every prefetched compile has finished (its errors stay for its `load`):
    for a caller that counts `stats["compiles"]` and must not see a background one land later."""
    with _lock:
        futures = list(_pending.values())
    for f in futures:
        f.exception()


_pending = {}         # shared object path -> Future of a prefetched compile (this process)
_pool = None          # the prefetch compilers' threads, made on first use


def plan_functions(units, assemble, flags=FLAGS, chunk=24):
    """The plan for `units`, [(name, text)] of distinct functions whose names come from their
    text (backend c's canonical kernels): (found {name: lib}, jobs, toolchain), which
    `build_functions` turns into {name: library holding C function `name`}.

    Each function is cached on its own key -- that of `assemble([text])`, the translation unit
    holding it alone -- so a kernel met before, in any graph or process, is found and loaded
    and compiles nothing: a `<key>.fn` index file names the shared object that holds it. The
    missing ones are compiled together: one translation unit (`assemble(texts)`) per `chunk`
    functions, at most one per CPU, of about equal text (`_balanced`), the units' compilers
    running in parallel (a compiler process costs ~40 ms to start; a unit of many kernels
    costs its kernels' time, split between the CPUs).

    Why two steps: backend c builds on a helper thread while its own thread generates the
    driver; this part (keys, lookups, sources: a few ms), run on the helper, waited for the
    busy thread's GIL (~0.1-0.2 s before the first compiler started, for a 32-layer GPT step),
    so the caller runs it first and the helper only waits for compilers."""
    cc = find_compiler()
    if cc is None:
        raise NoCompiler("no C compiler found (set EAGERC_CC or install cc)")
    d = cache_dir()
    out, todo = {}, []
    for name, text in units:
        key = key_of(assemble([text]), cc, flags)
        lib = _functions.get(key)
        if lib is None:
            so = _indexed(d, key)
            if so is not None:
                lib = _functions[key] = _open(so)
                stats["hits"] += 1
        if lib is None:
            todo.append((name, text, key))
        else:
            out[name] = lib
    jobs = []
    if todo:
        for part in _balanced(todo, max(1, min(os.cpu_count() or 1, -(-len(todo) // chunk)))):
            source = assemble([t for _, t, _ in part])
            so = os.path.join(d, key_of(source, cc, flags)[:32] + ".so")
            jobs.append((part, source, so))
    return out, jobs, (cc, d, flags)


def build_functions(planned):
    """Compile plan_functions' translation units (their compilers side by side) and load them:
    {name: library} for every function planned."""
    out, jobs, (cc, d, flags) = planned
    out = dict(out)
    missing = [(s, so) for _, s, so in jobs if not os.path.exists(so)]
    if len(missing) > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(len(missing)) as pool:
            for f in [pool.submit(_compile, cc, s, so, flags) for s, so in missing]:
                f.result()
    else:
        for s, so in missing:
            _compile(cc, s, so, flags)
    for part, _, so in jobs:
        lib = _open(so)
        for name, _, key in part:
            _index(d, key, so)
            out[name] = _functions[key] = lib
    return out


_functions = {}       # function key -> CDLL (this process)


def _balanced(todo, n):
    """`todo` in `n` parts of about equal source length (the longest function first into the
    lightest part), each in `todo`'s order: the compilers run in parallel and the slowest
    decides, so a part of twice the other's text (a GPT step's backward and Adam kernels in
    one, as consecutive chunks made them) kept a core idle while it finished."""
    if n == 1:
        return [todo]
    load, member = [0] * n, {}
    for i in sorted(range(len(todo)), key=lambda i: -len(todo[i][1])):
        j = load.index(min(load))
        load[j] += len(todo[i][1])
        member[i] = j
    return [p for p in ([t for i, t in enumerate(todo) if member[i] == j] for j in range(n)) if p]


def _indexed(d, key):
    """The shared object the index names for function `key`, if both exist."""
    try:
        with open(os.path.join(d, key[:32] + ".fn")) as f:
            so = os.path.join(d, f.read().strip())
    except OSError:
        return None
    return so if os.path.exists(so) else None


def _index(d, key, so):
    path = os.path.join(d, key[:32] + ".fn")
    if _indexed(d, key) == so:
        return
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(os.path.basename(so))
    os.replace(tmp, path)      # atomic: readers see an old name or the new one


def _open(so):
    """The loaded library at path `so` (once per process)."""
    with _lock:
        lib = _libs.get(so)
        if lib is None:
            threads.prepare_openmp()      # before libgomp loads: an idle pool sleeps (threads.py)
            lib = _libs[so] = ctypes.CDLL(so)
            lib._eagerc_path = so
            threads.bind(lib)             # the library's OpenMP kernels use eagerc's thread count
        return lib


def _compile(cc, source, so, flags):
    """Compile `source` into shared object `so` (written whole or not at all)."""
    t0 = time.perf_counter()
    d = os.path.dirname(so)
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
    log = os.environ.get("EAGERC_KERNEL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"compiled {os.path.basename(so)[:-3]}\n")


_stats_lock = threading.Lock()


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
