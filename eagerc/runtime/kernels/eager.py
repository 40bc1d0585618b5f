"""Eager mode on generated C kernels: the row composites (softmax, log_softmax, layer_norm and
their backward kernels) as the same row kernels backend "c" fuses their decompositions into,
and gelu (both forms) with its derivative as one elementwise pass each.

Why here: eager mode must not import the compiler, but its composites are exactly the
multi-pass row patterns the C renderer does well (one read of each row from memory, the
passes over it in cache). So this module builds the kernel IR (ir.py) of each op directly --
the instruction sequence the compiler's lowering produces from the op's decomposition
(eagerc/ops/nn.py, `*_decomposed`) -- and renders it with the one C renderer (render.py).

Shape-generic in the rows: the IR is rendered for ONE row of `cols` elements (the row length
decides the scratch arrays and the blocked sums, so it stays in the source), and a small
generated wrapper walks the rows, `rows` being an argument (OpenMP splits them above
render.PARALLEL_MIN elements). One compile per (op, dtype, row length, variant), not per
shape; compiled on first use and kept in kernel_cache's disk cache, so a second process
compiles nothing.

    k = row_kernel("softmax", "float32", 1024)     # None: use numpy (see `available`)
    k(out, x, rows=4096)

When the C kernels are used (`use(op, array)`): a C compiler works, the kernels are enabled
($EAGERC_EAGER_KERNELS=0 or `set_enabled(False)` turns them off, for debugging), the array is a
C-contiguous float32/float64 numpy array of at least MIN_ELEMENTS[op] elements (below that
numpy's few calls are cheaper than a kernel call). Without a
compiler -- or if it fails -- the numpy kernels run, after one RuntimeWarning line, as backend c.

Numbers: not bit for bit numpy's. The elementwise steps are numpy's, in its order, rounded as
its ufuncs round them (-ffp-contract=off), but row sums add float partial sums in double
(render.py) where numpy sums pairwise, and exp/log/tanh/erf come from glibc (vector and scalar;
softmax's exp(x - max) is render.py's inline one, <= 1 ulp) rather than numpy's own loops:
results agree to a few ulp of the row's scale
(tests/test_eager_kernels.py states the tolerance). Where the C kernel does not apply, or is
switched off, results are numpy's bits.
"""
import contextlib
import ctypes
import os
import threading

import numpy as np

from ...runtime import kernel_cache
from .ir import Kernel
from .render import PARALLEL_MIN, CRenderer

__all__ = ["row_kernel", "c_function", "prefetch", "only_built", "building", "COMPANIONS", "use", "NAMES", "enabled", "set_enabled", "available", "MIN_ELEMENTS", "BUILDERS"]

# per op: from this many elements the C kernel beats numpy's (a kernel call costs ~6 us of
# ctypes and pointers; numpy's softmax_backward is two cheap passes, layer_norm's are many).
# Measured one thread, float32, [n/64, 64] rows: the crossovers are ~1k, ~4k and < 64 elements.
MIN_ELEMENTS = {"softmax": 2048, "log_softmax": 2048, "softmax_backward": 8192, "log_softmax_backward": 8192,
                "layer_norm": 256, "layer_norm_backward": 256, "rms_norm": 256, "rms_norm_backward": 256, "gelu": 2048, "gelu_backward": 256,
                "cross_entropy": 1024, "norm_weight_backward": 256, "embedding_backward": 1024,
                "lstm_step": 0, "copy4d": 16384,
                "max_pool2d_2x2": 1024, "col2im_runs": 16384, "max_pool2d_backward": 1024}
DTYPES = ("float32", "float64")
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)     # native byte order (dtype singletons)
NAMES = {_F32: "float32", _F64: "float64"}   # dtype -> name without numpy's Python-level `dtype.name`

_enabled = os.environ.get("EAGERC_EAGER_KERNELS", "1").strip().lower() not in ("0", "false", "no", "off")
_available = None          # None: not checked yet; False after a missing or failing compiler
_kernels = {}              # (op, dtype, cols, variant) -> RowKernel
_lock = threading.Lock()
_scope = threading.local()   # .replaced: ops whose kernels are not built now (see only_built)
_absent = set()            # row-kernel keys and sources found not built under only_built
# eager kernels serving ops of another name (the op names `only_built` is given)
_SERVES = {"norm_weight_backward": ("layer_norm_weight_backward", "rms_norm_weight_backward")}


@contextlib.contextmanager
def only_built(ops):
    """Within: the eager kernels of `ops` (op names) are used only if built already (this
    process, the disk cache), never compiled; their numpy kernels run otherwise. Why: a trace
    runs the function eagerly once, and backend "c" replaces these ops by its own fused
    kernels (their decompositions) -- building their eager kernels cost a cold compile of the
    2-layer GPT training step 12 compiles (~1 s of compiler CPU) beside the graph's own 2
    libraries, for kernels the compiled program never calls. Ops the program still runs as
    they are (embedding_backward, an LSTM step) build as usual: the first call and the
    following ones then run the same kernel. The numpy kernels agree to the tolerance the
    module docstring states (the first call of a cold trace differs from the later, compiled
    calls as the compiled kernels differ from numpy's)."""
    old = getattr(_scope, "replaced", None)
    _scope.replaced = frozenset(ops)
    try:
        yield
    finally:
        _scope.replaced = old


def building(op):
    """May the eager kernel of `op` be compiled now (not within `only_built` of it)?"""
    skip = getattr(_scope, "replaced", None)
    return not skip or not any(n in skip for n in _SERVES.get(op, (op,)))


def enabled():
    """Do eager composites use the generated C kernels (when a compiler works)?"""
    return _enabled


def set_enabled(flag):
    """Turn the eager C kernels on or off (off: the numpy kernels, as without a compiler).
    Returns the previous setting. $EAGERC_EAGER_KERNELS=0 sets it off at start."""
    global _enabled
    old, _enabled = _enabled, bool(flag)
    return old


def available():
    """Does a C compiler build eager kernels (kernel_cache.works)? Checked once; False after a compile failure."""
    global _available
    if _available is None:
        _available = kernel_cache.works()
        if not _available:
            _notice(kernel_cache.why_not())
    return _available


def _notice(why):
    kernel_cache.notice("eager kernels", why, "the numpy kernels", stacklevel=4)


def use(op, a):
    """Should `op` on numpy array `a` (its main input) run its generated C kernel?"""
    return (_enabled and a.size >= MIN_ELEMENTS[op] and (a.dtype is _F32 or a.dtype is _F64) and a.flags.c_contiguous
            and (_available or available()))


# ---------------------------------------------------------------- the IR of each op
# Each builder adds to kernel `k` (one row of `cols` elements) the instructions of the op's
# decomposition, in its order of operations, and names its inputs in call order.

def _row_load(k, name, dtype, cols):
    return k.load(name, dtype, (1, cols))


# exp's argument below which the vector exp of glibc's libmvec leaves its fast path (its
# special-input fallback calls the scalar exp once per lane of the whole vector): float32 from
# about -87, float64 from about -708. A masked score (-inf: a causal attention row's upper half)
# sent every vector of such a row there: softmax of (8, 4, 64, 64) causal scores took 247 us
# against 63 us unmasked (PyTorch: 81 us).
_EXP_FAST_LOW = {"float32": -80.0, "float64": -700.0}


def _exp_shifted(k, d, x, mx):
    """(x - mx, exp(x - mx)) for a row x and its max mx, exp's argument kept in its fast range:
    where(x - mx < low, 0, exp(max(x, mx + low) - mx)). From low on the argument is x - mx
    itself (the same value); below, exp is under 2e-35 (1e-304), 0 at the row sum's ulp. NaN
    and infinite rows give NaN as numpy does. The clamp is on x against the row's mx + low, not
    on x - mx against a constant: GCC turns exp(select(c, s, low)) into select(c, exp(s),
    exp(low)), which hands the unclamped s to exp again."""
    o = _Ops(k, d)
    low = o.const(_EXP_FAST_LOW[d])
    s = o.sub(x, mx)
    return s, o.where(k.add("lt", (s, low), "bool"), o.const(0.0), o.exp(o.sub(o.maximum(x, o.add(mx, low)), mx)))


def _softmax(k, d, cols):
    x = _row_load(k, "x", d, cols)
    s = k.add("sub", (x, k.add("row_max", (x,), d)), d)
    e = k.add("exp", (s,), d)
    # times 1/sum rather than / sum: a multiply per element instead of a division (~0.8 ms of
    # 2.5 at 4096x1024); at most one more rounding (<= 1 ulp) on the sum's own few ulp
    k.store(k.add("mul", (e, k.add("reciprocal", (k.add("row_sum", (e,), d),), d)), d), "out", d, (1, cols))


def _log_softmax(k, d, cols):
    x = _row_load(k, "x", d, cols)
    s = k.add("sub", (x, k.add("row_max", (x,), d)), d)
    z = k.add("row_sum", (k.add("exp", (s,), d),), d)
    k.store(k.add("sub", (s, k.add("log", (z,), d)), d), "out", d, (1, cols))


def _softmax_masked(k, d, cols):
    """softmax for rows holding masked (-inf) scores: exp kept in its fast range (_exp_shifted)."""
    x = _row_load(k, "x", d, cols)
    _, e = _exp_shifted(k, d, x, k.add("row_max", (x,), d))
    k.store(k.add("mul", (e, k.add("reciprocal", (k.add("row_sum", (e,), d),), d)), d), "out", d, (1, cols))


def _log_softmax_masked(k, d, cols):
    x = _row_load(k, "x", d, cols)
    s, e = _exp_shifted(k, d, x, k.add("row_max", (x,), d))
    k.store(k.add("sub", (s, k.add("log", (k.add("row_sum", (e,), d),), d)), d), "out", d, (1, cols))


# Row kernels with a twin for masked rows: the guard costs ~20% on rows without -inf (a select
# and the row read again in the last pass), so `<name>_rows` runs the twin only for a row whose
# first or last element is -inf (causal and padding masks end or start a row with one). Any row
# may take either kernel: they agree except below exp's fast range, where the twin gives 0.
# float32 has no twin: its exp(x - max) is the renderer's inline one, which takes -inf lanes at
# full speed and gives 0 below -87.34 too (causal float32 rows: ~20% faster than with the twin).
MASKED_TWINS = {"softmax": _softmax_masked, "log_softmax": _log_softmax_masked}


def _inline_exp(k):
    """Whether kernel k's exp(x - max) is render.py's inline exp (no slow path for -inf)."""
    return bool(CRenderer.NONPOS_EXP) and k.inputs[0].dtype == "float32"


def _softmax_backward(k, d, cols):
    g, out = _row_load(k, "g", d, cols), _row_load(k, "out", d, cols)
    gx = k.add("mul", (g, out), d)
    t = k.add("mul", (out, k.add("row_sum", (gx,), d)), d)
    k.store(k.add("sub", (gx, t), d), "gx", d, (1, cols))


def _log_softmax_backward(k, d, cols):
    g, out = _row_load(k, "g", d, cols), _row_load(k, "out", d, cols)
    t = k.add("mul", (k.add("exp", (out,), d), k.add("row_sum", (g,), d)), d)
    k.store(k.add("sub", (g, t), d), "gx", d, (1, cols))


def _normalized(k, d, cols, x, eps):
    """(xhat, rstd) as eagerc/ops/nn.py's _ln_normalized computes them."""
    xc = k.add("sub", (x, k.add("row_mean", (x,), d)), d)
    var = k.add("row_mean", (k.add("mul", (xc, xc), d),), d)
    rstd = k.add("rsqrt", (k.add("add", (var, k.add("const", (float(np.dtype(d).type(eps)),), d)), d),), d)
    return k.add("mul", (xc, rstd), d), rstd


def _layer_norm(k, d, cols, weight, bias, eps):
    y, _ = _normalized(k, d, cols, _row_load(k, "x", d, cols), eps)
    if weight:
        y = k.add("mul", (y, k.load("weight", d, (cols,))), d)
    if bias:
        y = k.add("add", (y, k.load("bias", d, (cols,))), d)
    k.store(y, "out", d, (1, cols))


def _norm_backward(normalized, center):
    """The input gradient of layer_norm (center: the mean of gy is subtracted too) or rms_norm:
    (gy [- mean(gy)] - xhat * mean(gy * xhat)) * rstd with gy = g * weight."""
    def build(k, d, cols, weight, eps):
        g = _row_load(k, "g", d, cols)
        xhat, rstd = normalized(k, d, cols, _row_load(k, "x", d, cols), eps)
        gy = k.add("mul", (g, k.load("weight", d, (cols,))), d) if weight else g
        a = k.add("sub", (gy, k.add("row_mean", (gy,), d)), d) if center else gy
        b = k.add("mul", (xhat, k.add("row_mean", (k.add("mul", (gy, xhat), d),), d)), d)
        k.store(k.add("mul", (k.add("sub", (a, b), d), rstd), d), "gx", d, (1, cols))
    return build


def _rms_normalized(k, d, cols, x, eps):
    """(xhat, rstd) as runtime/ops/nn.py's _rms_normalized computes them."""
    ms = k.add("row_mean", (k.add("mul", (x, x), d),), d)
    rstd = k.add("rsqrt", (k.add("add", (ms, k.add("const", (float(np.dtype(d).type(eps)),), d)), d),), d)
    return k.add("mul", (x, rstd), d), rstd


def _rms_norm(k, d, cols, weight, eps):
    y, _ = _rms_normalized(k, d, cols, _row_load(k, "x", d, cols), eps)
    if weight:
        y = k.add("mul", (y, k.load("weight", d, (cols,))), d)
    k.store(y, "out", d, (1, cols))



# gelu: elementwise (a row kernel without reductions), in the numpy kernel's order of operations;
# float32's erf is C's erff where numpy's kernel uses the Abramowitz-Stegun formula (< 1.5e-7 apart)
_SQRT_HALF, _SQRT_2_OVER_PI, _INV_SQRT_2PI = 0.7071067811865476, 0.7978845608028654, 0.3989422804014327


class _Ops:
    """k.add with the dtype fixed and Python numbers as constants of that dtype: `o.mul(a, 0.5)`."""

    def __init__(self, k, d):
        self.k, self.d = k, d

    def __getattr__(self, op):
        def add(*args):
            return self.k.add(op, tuple(self.const(a) if isinstance(a, float) else a for a in args), self.d)
        return add

    def const(self, v):
        return self.k.add("const", (float(np.dtype(self.d).type(v)),), self.d)


def _gelu(k, d, cols, approximate):
    o, x = _Ops(k, d), _row_load(k, "x", d, cols)
    if approximate == "tanh":
        inner = o.add(o.mul(o.mul(x, x), 0.044715), 1.0)
        y = o.tanh(o.mul(inner, o.mul(x, _SQRT_2_OVER_PI)))
    else:
        y = o.erf(o.mul(x, _SQRT_HALF))
    k.store(o.mul(o.mul(o.add(y, 1.0), x), 0.5), "out", d, (1, cols))


def _gelu_backward(k, d, cols, approximate):
    o = _Ops(k, d)
    g, x = _row_load(k, "g", d, cols), _row_load(k, "x", d, cols)
    if approximate == "tanh":
        x2 = o.mul(x, x)
        t = o.tanh(o.mul(o.mul(x, _SQRT_2_OVER_PI), o.add(o.mul(x2, 0.044715), 1.0)))
        a = o.mul(o.add(t, 1.0), 0.5)
        b = o.mul(o.mul(o.mul(o.mul(x, 0.5), o.sub(o.const(1.0), o.mul(t, t))), _SQRT_2_OVER_PI),
                  o.add(o.mul(x2, 3 * 0.044715), 1.0))
        dx = o.add(a, b)
    else:
        cdf = o.mul(o.add(o.erf(o.mul(x, _SQRT_HALF)), 1.0), 0.5)
        pdf = o.mul(o.mul(o.exp(o.mul(o.mul(x, x), -0.5)), x), _INV_SQRT_2PI)
        dx = o.add(cdf, pdf)
    k.store(o.mul(dx, g), "gx", d, (1, cols))


# op -> builder(k, dtype, cols, *variant)
BUILDERS = {"softmax": _softmax, "log_softmax": _log_softmax, "softmax_backward": _softmax_backward,
            "log_softmax_backward": _log_softmax_backward, "layer_norm": _layer_norm,
            "layer_norm_backward": _norm_backward(_normalized, True), "rms_norm": _rms_norm,
            "rms_norm_backward": _norm_backward(_rms_normalized, False),
            "gelu": _gelu, "gelu_backward": _gelu_backward}


# ---------------------------------------------------------------- building and calling

def kernel_ir(op, dtype, cols, *variant):
    """The Kernel (IR) of `op` over one row of `cols` elements of `dtype`."""
    k = Kernel("_".join(["eager", op, dtype, str(cols)] + [_tag(v) for v in variant]), (1, cols), row_dims=1,
               nodes=[op])
    BUILDERS[op](k, dtype, cols, *variant)
    _run_by_rows(k)
    return k


def _run_by_rows(k):
    """k is run row after row by `source`'s wrapper: its row inputs' next row is `cols` on."""
    k.next_rows = {i: k.shape[-1] for i, b in enumerate(k.inputs) if len(b.shape) == 2}


def _tag(v):
    if isinstance(v, str):
        return v
    return {True: "t", False: "f"}.get(v) if isinstance(v, bool) else repr(float(v)).replace(".", "p").replace("-", "m")


def source(k):
    """C source: the one-row kernel as render.py renders it, and `<name>_rows`, which runs it
    over `rows` rows (inputs that vary along the row advance one row each; weights stay) --
    for an op in MASKED_TWINS, the twin on rows that start or end with -inf."""
    cols = k.shape[-1]
    kernels, call = [k], k.name
    twin = MASKED_TWINS.get(k.nodes[0]) if k.nodes and not _inline_exp(k) else None
    if twin is not None:
        t = Kernel(k.name + "_masked", k.shape, row_dims=1, nodes=list(k.nodes))
        twin(t, k.inputs[0].dtype, cols)
        _run_by_rows(t)
        kernels.append(t)
        call = f"(in0[r * {cols}] == -INFINITY || in0[r * {cols} + {cols - 1}] == -INFINITY ? {t.name} : {k.name})"
    ct = CRenderer.CTYPES
    steps = [cols if len(b.shape) == 2 else 0 for b in k.inputs]      # (1, cols): a row; (cols,): a weight
    params = ([f"const {ct[b.dtype]} *in{i}" for i, b in enumerate(k.inputs)]
              + [f"{ct[b.dtype]} *out{i}" for i, b in enumerate(k.outputs)] + ["int64_t rows"])
    args = ([f"in{i} + r * {s}" if s else f"in{i}" for i, s in enumerate(steps)]
            + [f"out{i} + r * {cols}" for i in range(len(k.outputs))])
    loop = f"for (int64_t r = 0; r < rows; r++) {call}({', '.join(args)});"
    # threads share the rows from PARALLEL_MIN elements (a long row is split by the kernel itself);
    # below, no OpenMP call at all (a one-thread team still costs a microsecond)
    par = (f"    if (rows * {cols} >= {PARALLEL_MIN}) {{\n        #pragma omp parallel for\n        {loop}\n"
           f"        return;\n    }}\n") if cols < PARALLEL_MIN else ""
    wrapper = f"\nvoid {k.name}_rows({', '.join(params)})\n{{\n{par}    {loop}\n}}\n"
    return CRenderer().source(kernels) + wrapper


class RowKernel:
    """A compiled eager row kernel: `kernel(*inputs, *outputs, rows=n)`, inputs in the builder's
    load order, arrays C-contiguous."""
    __slots__ = ("name", "fn", "n_in")

    def __init__(self, k, lib):
        self.name, self.n_in = k.name, len(k.inputs)
        self.fn = getattr(lib, k.name + "_rows")
        self.fn.argtypes = [ctypes.c_void_p] * (len(k.inputs) + len(k.outputs)) + [ctypes.c_int64]
        self.fn.restype = None

    def __call__(self, *arrays, rows):
        ptr = kernel_cache.ptr
        self.fn(*[ptr(a) for a in arrays], rows)


def row_kernel(op, dtype, cols, *variant):
    """The compiled kernel of `op` for rows of `cols` `dtype` elements, built on first use (or
    found in the disk cache); None if the C compiler fails (numpy runs, after one notice)."""
    key = (op, dtype, cols) + variant
    k = _kernels.get(key)
    if k is not None or key in _kernels:
        return k
    build = building(op)
    if not build and key in _absent:
        return None
    with _lock:
        if key in _kernels:
            return _kernels[key]
        if build:
            prefetch(op, dtype, cols, variant)      # its backward's kernels compile beside it
        ir = kernel_ir(op, dtype, cols, *variant)
        lib = _build(source(ir), build)
        if lib is None and not build:
            _absent.add(key)
            return None
        k = _kernels[key] = None if lib is None else RowKernel(ir, lib)
        return k


# The kernels an op's backward runs, from the op's own (dtype, cols, variant): row kernels
# here as (op, dtype, cols, *variant), rows.py's kernels as (op, dtype). `prefetch` starts their
# compilers when the op's kernel is first built (or, for embedding, its forward first runs), so
# a first training step waits for one wave of compilers, not one compiler per op in turn.
COMPANIONS = {
    "softmax": lambda d, cols, v: [("softmax_backward", d, cols)],
    "log_softmax": lambda d, cols, v: [("log_softmax_backward", d, cols)],
    "layer_norm": lambda d, cols, v: [("layer_norm_backward", d, cols, v[0], v[2])]
                                     + [("norm_weight_backward", d)] * v[0],
    "rms_norm": lambda d, cols, v: [("rms_norm_backward", d, cols) + tuple(v)] + [("norm_weight_backward", d)] * v[0],
    "gelu": lambda d, cols, v: [("gelu_backward", d, cols) + tuple(v)],
    "cross_entropy": lambda d, cols, v: [("cross_entropy_backward", d)],
    "lstm_step": lambda d, cols, v: [("lstm_step_backward", d)],
    "embedding": lambda d, cols, v: [("embedding_backward", d)],
}


_prefetched = set()        # (op, dtype, cols, variant) whose companions were started


def prefetch(op, dtype, cols=None, variant=()):
    """Start compiling, in the background (kernel_cache.prefetch), the kernels COMPANIONS says
    `op`'s backward will run; a later row_kernel / rows.kernel of one of them finds it built.
    Nothing when the kernels are off or no compiler works."""
    companions = COMPANIONS.get(op)
    if companions is None or not (_enabled and _available) or (op, dtype, cols, variant) in _prefetched:
        return
    _prefetched.add((op, dtype, cols, variant))
    from . import rows       # rows.py builds on this module
    for key in companions(dtype, cols, variant):
        if key in _kernels or key in rows._kernels or not building(key[0]):
            continue
        src = source(kernel_ir(*key)) if key[0] in BUILDERS else rows.source(*key)[1]
        try:
            kernel_cache.prefetch(src)
        except (kernel_cache.NoCompiler, OSError):
            return


def c_function(name, src, build=True):
    """Function `name` of C source `src` (a hand-written eager kernel: foreach.py, rows.py),
    compiled on first use or found in the disk cache; None when the kernels are off, no
    compiler works or it fails (after one notice: the caller runs numpy), or when it is not
    built and `build` is False (the caller must not remember that None: see `building`)."""
    if not (_enabled and (_available or available())):
        return None
    if not build and src in _absent:
        return None
    with _lock:
        lib = _build(src, build)
    if lib is None and not build:
        _absent.add(src)
    return None if lib is None else getattr(lib, name)


def _build(src, build=True):
    """kernel_cache.load(src), or None after the one notice when the compiler fails (or when it
    is not built and build=False)."""
    global _available
    try:
        return kernel_cache.load(src, build=build)
    except (kernel_cache.CompileError, kernel_cache.NoCompiler, OSError) as e:
        lines = str(e).splitlines() or [type(e).__name__]
        first = next((line.strip() for line in lines[1:] if "error" in line), lines[0])
        _notice(f"the C compiler failed ({first[:200]})")
        _available = False
        return None
