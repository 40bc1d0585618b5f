"""Renderers: Kernel IR -> source, through one table of C-style expressions.

`code_for_op[op](r, *args)` returns the C expression of one instruction (each row is the
rendering part of the op or kernel instruction of that name); `args` are the
names of earlier instructions' variables (each instruction is bound to a `const` local,
so an argument may be used twice safely) and `r` is the instruction's context: its dtype
(`r.dtype`), its first operand's dtype (`r.src`), the math function name for that dtype
(`r.fn("exp")` -> `expf` for float32, `exp` for float64) and literals (`r.lit(1)`).
The C renderer (OpenMP) and the CUDA renderer (cuda_render.py) share the table; a
renderer overrides only the types and how values are loaded / stored, the kernel
signature, the loops / thread indexing and the reductions.

No fast-math: IEEE semantics, so results match numpy to rounding (maximum/minimum and
max/min reductions propagate NaN like numpy). The source is deterministic for a given
list of kernels (no ids, no addresses, no dict-order dependence), so disk caches hit.
"""
import math

import numpy as np

from . import philox
from .ir import FLOATS, HALVES, LEAVES

__all__ = ["code_for_op", "CRenderer", "render_c"]

# a kernel takes one thread per PARALLEL_GRAIN elements, up to eagerc.get_num_threads(), and
# below PARALLEL_MIN runs on the calling thread without an OpenMP region: waking a sleeping
# pool costs tens of us (more on a loaded machine), so small kernels -- most of a training
# step -- never do (runtime/threads.py). Sums over threads run on one thread: their order,
# and so their bits, would otherwise depend on the thread count.
PARALLEL_GRAIN = 1 << 16
PARALLEL_MIN = 2 * PARALLEL_GRAIN
SCRATCH_BYTES = 1 << 15
SUM_BLOCK = 256   # float32 row sums: float partial sums over this many elements, then double
# a row kernel of several passes asks for the next row's cache lines once its first pass has read
# its own row (PREFETCH_LINE bytes apart), so that memory fetches them while the later passes compute
# on the row in cache: a 4096x1024 float32 layer_norm otherwise waits for memory and computes in
# turn (0.84x PyTorch's time -> 0.62x; softmax, bound by its exp, about unchanged). Rows of fewer
# bytes than PREFETCH_MIN_BYTES are left to the hardware prefetcher.
PREFETCH_LINE = 64
PREFETCH_MIN_BYTES = 1024
ROW_THREADS_MIN = 8   # fewer rows than this (and enough elements): threads split each row
LEAD_BLOCK = 64   # columns per thread's share of a sum over leading dims (lead_kernel)


def _call(name):
    return lambda r, *a: f"{r.fn(name)}({', '.join(a)})"


def _exact(expr):
    """A row whose result picks or compares its operands' values: a float16 result needs no rounding."""
    expr.exact = True
    return expr


def _costly(expr):
    """A row worth computing once: row kernels keep its values in a per-row scratch array (on the
    stack, at most SCRATCH_BYTES) rather than recomputing them in a later pass."""
    expr.costly = True
    return expr


def _logaddexp(r, a, b):
    # numpy's formula: log1p of exp of a non-positive difference only (no overflow); equal
    # operands (infinities of one sign included) give a + log(2); NaNs propagate
    d = f"({a} - {b})"
    return (f"({a} == {b} ? {a} + {r.lit(math.log(2.0))} : ({d} > 0 ? {a} + {r.fn('log1p')}({r.fn('exp')}(-{d})) : "
            f"({d} <= 0 ? {b} + {r.fn('log1p')}({r.fn('exp')}({d})) : {d})))")


def _maximum(r, a, b):
    if r.dtype in FLOATS:   # NaN propagates, as in numpy
        return f"(({a} != {a} || {a} > {b}) ? {a} : {b})"
    return f"({a} > {b} ? {a} : {b})"


def _minimum(r, a, b):
    if r.dtype in FLOATS:
        return f"(({a} != {a} || {a} < {b}) ? {a} : {b})"
    return f"({a} < {b} ? {a} : {b})"


def _abs(r, a):
    return f"{r.fn('fabs')}({a})" if r.dtype in FLOATS else f"({a} < 0 ? -{a} : {a})"


def _sign(r, a):
    if r.dtype in FLOATS:   # NaN stays NaN, zeros stay
        return f"({a} > 0 ? {r.lit(1)} : ({a} < 0 ? {r.lit(-1)} : {a}))"
    return f"(({a} > 0) - ({a} < 0))"


def _sigmoid(r, a):
    # the eager kernel's formula: exp of a non-positive number only; its three ufuncs (exp, the
    # add, the division) each round a 16-bit float result, so the two inner ones round here
    # too (the instruction rounds the division)
    e = r.rounded(f"{r.fn('exp')}(-{r.fn('fabs')}({a}))")
    d = r.rounded(f"({r.lit(1)} + {e})")
    return f"({a} >= 0 ? {r.lit(1)} / {d} : {e} / {d})"


def _rsqrt(r, a):
    # eager's reciprocal of sqrt: a 16-bit float sqrt is rounded before the division
    root = r.rounded(f"{r.fn('sqrt')}({a})")
    return f"({r.lit(1)} / {root})"


def _cast(r, a):
    if r.dtype == "bool":
        return f"({a} != 0)"
    return f"(({r.ctype(r.dtype)}){a})"


def _rand(kind):
    """rand_uniform / rand_normal (seed, offset, index): element `index` of a draw at word
    `offset` of stream `seed` (philox.py), the eager numbers bit for bit."""
    step = philox.element_words(kind)

    def draw(r, seed, offset, index):
        i = f"({r.ctype('uint64')}){index}"
        value = philox.expr(kind, r.dtype, seed, f"{offset} + {i}" if step == 1 else f"{offset} + {step} * {i}")
        return value if kind == "uniform" else f"(({r.ctype(r.dtype)}){value})"
    return draw


code_for_op = {
    "add": lambda r, a, b: f"({a} + {b})",
    "sub": lambda r, a, b: f"({a} - {b})",
    "mul": lambda r, a, b: f"({a} * {b})",
    "div": lambda r, a, b: f"({a} / {b})",
    "neg": _exact(lambda r, a: f"(-{a})"),
    "square": lambda r, a: f"({a} * {a})",
    "reciprocal": lambda r, a: f"({r.lit(1)} / {a})",
    "rsqrt": _rsqrt,
    "relu": _exact(lambda r, a: _maximum(r, a, r.lit(0))),
    "maximum": _exact(_maximum),
    "minimum": _exact(_minimum),
    "abs": _exact(_abs),
    "sign": _exact(_sign),
    "sigmoid": _costly(_sigmoid),
    "pow": _costly(_call("pow")),
    "exp": _costly(_call("exp")), "exp2": _costly(_call("exp2")), "log": _costly(_call("log")),
    "log2": _costly(_call("log2")), "log1p": _costly(_call("log1p")), "expm1": _costly(_call("expm1")),
    "sqrt": _call("sqrt"), "sin": _costly(_call("sin")), "cos": _costly(_call("cos")),
    "tan": _costly(_call("tan")), "tanh": _costly(_call("tanh")), "erf": _costly(_call("erf")),
    "logaddexp": _costly(_logaddexp),
    "hypot": _call("hypot"),
    "atan2": _costly(_call("atan2")),
    "floor": _exact(_call("floor")), "ceil": _exact(_call("ceil")), "trunc": _exact(_call("trunc")),
    "round": _exact(_call("rint")),   # half to even, like numpy
    "eq": _exact(lambda r, a, b: f"({a} == {b})"),
    "ne": _exact(lambda r, a, b: f"({a} != {b})"),
    "lt": _exact(lambda r, a, b: f"({a} < {b})"),
    "le": _exact(lambda r, a, b: f"({a} <= {b})"),
    "gt": _exact(lambda r, a, b: f"({a} > {b})"),
    "ge": _exact(lambda r, a, b: f"({a} >= {b})"),
    "logical_and": _exact(lambda r, a, b: f"(({a} != 0) & ({b} != 0))"),
    "logical_or": _exact(lambda r, a, b: f"(({a} != 0) | ({b} != 0))"),
    "logical_xor": _exact(lambda r, a, b: f"(({a} != 0) ^ ({b} != 0))"),
    "logical_not": _exact(lambda r, a: f"({a} == 0)"),
    "isnan": _exact(lambda r, a: f"({a} != {a})"),
    "isinf": _exact(lambda r, a: f"({r.fn('fabs')}({a}) == INFINITY)"),
    "isfinite": _exact(lambda r, a: f"({a} - {a} == 0)"),
    "bitwise_and": lambda r, a, b: f"({a} & {b})",
    "bitwise_or": lambda r, a, b: f"({a} | {b})",
    "bitwise_xor": lambda r, a, b: f"({a} ^ {b})",
    "bitwise_not": lambda r, a: f"(~{a})",
    "where": _exact(lambda r, c, a, b: f"({c} ? {a} : {b})"),
    "cast": _cast,
    "rand_uniform": _rand("uniform"),
    "rand_normal": _rand("normal"),
}
HALF_EXACT = frozenset(op for op, expr in code_for_op.items() if getattr(expr, "exact", False))
SCRATCH_OPS = frozenset(op for op, expr in code_for_op.items() if getattr(expr, "costly", False))


class _Ctx:
    """What a code_for_op entry knows about its instruction."""
    __slots__ = ("renderer", "dtype", "src")

    def __init__(self, renderer, dtype, src):
        self.renderer, self.dtype, self.src = renderer, dtype, src

    def fn(self, name):
        return self.renderer.math(name, self.src if self.src in FLOATS else self.dtype)

    def lit(self, value):
        return self.renderer.literal(value, self.dtype)

    def ctype(self, dtype):
        return self.renderer.CTYPES[dtype]

    def rounded(self, expr):
        """`expr` rounded to the instruction's 16-bit float dtype, as an intermediate result
        of a row that eager computes with several ufuncs (each rounding); others: as is."""
        return self.renderer.to_dtype(self.dtype, expr) if self.dtype in HALVES else expr


# bfloat16 is stored as its 16 bits (the top half of a float32) and held as float: widening
# is a shift; narrowing rounds to nearest even (adding 32767 plus the kept lowest bit), and a
# NaN stays a quiet NaN (bit 64 of the half set), as ml_dtypes does. Decimal constants: the
# source holds no "0x" (its tests read one as a leaked address).
BFLOAT16_C = (
    "static inline float eagerc_bf2f(uint16_t b) { union { uint32_t u; float f; } v; v.u = (uint32_t)b << 16; "
    "return v.f; }\n"
    "static inline uint16_t eagerc_f2bf(float f) { union { uint32_t u; float f; } v; v.f = f; "
    "if (f != f) return (uint16_t)((v.u >> 16) | 64u); "
    "return (uint16_t)((v.u + 32767u + ((v.u >> 16) & 1u)) >> 16); }\n")


class CRenderer:
    """C11 + OpenMP. Subclasses (CUDA) override signature(), loops, MATH and reductions."""
    INDEX = "int64_t"
    CTYPES = {"float16": "_Float16", "bfloat16": "uint16_t", "float32": "float", "float64": "double", "bool": "unsigned char",
              "int8": "int8_t",
              "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
              "uint64": "uint64_t"}      # uint64: kernel params (seeds, offsets) only
    RNG_SOURCE = philox.C_SOURCE      # in the source only when a kernel draws random numbers
    MATH_SUFFIX = {"float16": "f", "bfloat16": "f", "float32": "f", "float64": ""}
    # glibc's vector math (libmvec, <= 4 ulp) is declared by math.h only under -ffast-math;
    # declaring the SIMD variants here lets the loops vectorise with IEEE semantics kept
    VECTOR_MATH = ("exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "tan", "tanh", "erf")
    PRELUDE = ("#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n"
               "#if defined(__x86_64__) && defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)\n"
               + "".join(f"#pragma omp declare simd notinbranch\n{t} {f}{sfx}({t});\n"
                         for f in VECTOR_MATH for t, sfx in (("float", "f"), ("double", "")))
               + "#pragma omp declare simd notinbranch\nfloat powf(float, float);\n"
               + "#pragma omp declare simd notinbranch\ndouble pow(double, double);\n"
               + "#endif\n"
               # the thread count, set by the loader (runtime/threads.py), and a kernel's team size
               + "static int eagerc_threads = 1;\n"
               + "void eagerc_set_num_threads(int n) { eagerc_threads = n > 0 ? n : 1; }\n"
               + "static inline int eagerc_team(int64_t work, int64_t units) {\n"
               + f"    int64_t t = work / {PARALLEL_GRAIN};\n"
               + "    if (t > units) t = units;\n"
               + "    if (t > eagerc_threads) t = eagerc_threads;\n"
               + "    return t < 1 ? 1 : (int)t;\n}\n")
    # exp of a row's values less their max (softmax, log_softmax: an argument <= 0 or NaN), float32:
    # inline, so the simd loop runs it without a call -- 2^n p(r), r = x - n ln2 by Cody-Waite,
    # p Cephes' degree-6 polynomial by fused multiply-adds: within 1 ulp of exp (glibc's vector
    # expf: 4 ulp), a 4096x1024 softmax ~25% faster. A result below FLT_MIN (x < -87.34) is 0
    # where exp gives a subnormal (< 1.2e-38 against a row sum >= 1).
    NONPOS_EXP = "eagerc_expf_nonpos"
    NONPOS_EXP_SOURCE = (
        "static inline float eagerc_expf_nonpos(float x) {\n"
        "    const float n = rintf(x * 1.44269504088896341f);\n"
        "    float r = fmaf(n, -0.693145751953125f, x);\n"
        "    r = fmaf(n, -1.428606765330187045e-06f, r);\n"
        "    float p = 1.9875691500e-4f;\n"
        "    p = fmaf(p, r, 1.3981999507e-3f);\n"
        "    p = fmaf(p, r, 8.3334519073e-3f);\n"
        "    p = fmaf(p, r, 4.1665795894e-2f);\n"
        "    p = fmaf(p, r, 1.6666665459e-1f);\n"
        "    p = fmaf(p, r, 5.0000001201e-1f);\n"
        "    p = fmaf(p, r * r, r) + 1.0f;\n"
        "    union { int32_t i; float f; } s;\n"
        "    s.i = ((int32_t)n + 127) << 23;\n"
        "    const float y = x < -87.33654f ? 0.0f : p * s.f;\n"
        "    return x != x ? x : y;\n}\n")
    BFLOAT16_SOURCE = BFLOAT16_C      # in the source only when a kernel holds bfloat16
    code_for_op = code_for_op

    # ------------------------------------------------------------ intrinsics
    def local(self, dtype):
        """The C type of a value held in a variable: bool is stored as one byte but held
        as int (GCC does not vectorise loops converting bytes to floats, as cast(bool ->
        float) does); float16 is held as float, rounded to half after every operation --
        numpy's float16 ufuncs compute in float32 and round each result the same way."""
        return {"bool": "int", "float16": "float", "bfloat16": "float"}.get(dtype) or self.CTYPES[dtype]

    def load(self, dtype, ref):
        """A value read from memory (`ref`), as its local type."""
        return f"eagerc_bf2f({ref})" if dtype == "bfloat16" else ref

    def store(self, dtype, value):
        """A local value as written to memory."""
        return f"eagerc_f2bf({value})" if dtype == "bfloat16" else value

    def to_dtype(self, dtype, expr):
        """A float or double expression rounded once to float dtype, as its local type
        (bfloat16 through float: its eager sums and means are float32 values too)."""
        if dtype == "float16":
            return f"((float)(_Float16)({expr}))"
        if dtype == "bfloat16":
            return f"eagerc_bf2f(eagerc_f2bf((float)({expr})))"
        return f"(({self.CTYPES[dtype]})({expr}))"

    def math(self, name, dtype):
        return name + self.MATH_SUFFIX.get(dtype, "")

    def literal(self, value, dtype):
        if dtype in FLOATS:
            v = float(value)
            if math.isnan(v):
                s = "NAN"
            elif math.isinf(v):
                s = "INFINITY" if v > 0 else "-INFINITY"
            else:
                s = repr(float(np.dtype(dtype).type(v)))
                if "e" not in s and "." not in s:
                    s += ".0"
                s += "" if dtype == "float64" else "f"     # float16 values are held as float
                return s if v >= 0 else f"({s})"
            return f"((double){s})" if dtype == "float64" else s
        if dtype == "bool":
            return "1" if value else "0"
        v = int(value)
        if dtype == "int64":
            return f"INT64_C({v})" if v >= 0 else f"(-INT64_C({-v}))" if v != -2 ** 63 else "INT64_MIN"
        return str(v) if v >= 0 else f"({v})"

    # ------------------------------------------------------------ pieces
    def signature(self, k):
        # an output written into the array of the input it updates (k.inplace) aliases it:
        # neither pointer is restrict (each element is read before it is written, same index)
        shared = set(k.inplace.values())
        params = [f"const {self.CTYPES[b.dtype]} *{'' if i in shared else 'restrict '}in{i}"
                  for i, b in enumerate(k.inputs)]
        params += [f"{self.CTYPES[b.dtype]} *{'' if i in k.inplace else 'restrict '}out{i}"
                   for i, b in enumerate(k.outputs)]
        params += [f"{self.CTYPES[p.dtype]} p{i}" for i, p in enumerate(k.params)]
        return f"void {k.name}({', '.join(params)})"

    def instr(self, k, i, offsets):
        """`const T v<i> = <expr>;` for instruction i; `offsets[slot]` is the load offset
        expression of input `slot`."""
        ins = k.instrs[i]
        if ins.op == "load":
            expr = self.load(ins.dtype, f"in{ins.args[0]}[{offsets[ins.args[0]]}]")
        elif ins.op == "const":
            expr = self.literal(ins.args[0], ins.dtype)
        elif ins.op == "param":
            expr = f"p{ins.args[0]}"
        elif ins.op == "index":
            if self.index_expr is None:
                raise ValueError(f"{k.name}: instruction {i} (index) rendered outside an element loop")
            expr = self.index_expr
        elif ins.op == "cast" and ins.dtype in HALVES:
            expr = self.to_dtype(ins.dtype, f"v{ins.args[0]}")
        elif ins.op == "exp" and self.NONPOS_EXP and ins.dtype == "float32" and _less_row_max(k, ins.args[0]):
            expr = f"{self.NONPOS_EXP}(v{ins.args[0]})"
        else:
            src = k.instrs[ins.args[0]].dtype if ins.args else ins.dtype
            expr = self.code_for_op[ins.op](_Ctx(self, ins.dtype, src), *(f"v{a}" for a in ins.args))
            if ins.dtype in HALVES and ins.op not in HALF_EXACT:
                expr = self.to_dtype(ins.dtype, expr)
        return f"const {self.local(ins.dtype)} v{i} = {expr};"

    def body(self, k, offsets, store_index):
        """Statements computing every instruction at one index, then the stores.
        `store_index` is the flat C-order index of that element (the `index` instruction)."""
        self.index_expr = store_index
        lines = [self.instr(k, i, offsets) for i in range(len(k.instrs))]
        for i, slot in k.stores:
            lines.append(f"out{slot}[{store_index}] = {self.store(k.instrs[i].dtype, f'v{i}')};")
        return lines

    # row reductions: (declarations, OpenMP clause, per-element update, row value)
    def row_reduction_parts(self, k, i, cols):
        ins = k.instrs[i]
        t = self.local(ins.dtype)
        v, a, f = f"v{ins.args[0]}", f"a{i}", f"n{i}"
        if ins.op in ("row_sum", "row_mean"):
            value = self.to_dtype(ins.dtype, a if ins.op == "row_sum" else f"{a} / (double){cols}")
            return [f"double {a} = 0.0;"], f"reduction(+:{a})", [f"{a} += {v};"], value
        kind = "max" if ins.op == "row_max" else "min"
        cmp = ">" if kind == "max" else "<"
        return ([f"{t} {a} = {'-' if kind == 'max' else ''}INFINITY;", f"int {f} = 0;"],
                f"reduction({kind}:{a}) reduction(|:{f})",
                [f"{a} = {v} {cmp} {a} ? {v} : {a};", f"{f} |= {v} != {v};"],
                f"({f} ? ({t})NAN : {a})")

    def row_loads(self, k, sizes, strides, split, row_var, col_var):
        """(lines defining each input's row base b<slot>, element offsets, row offsets).
        Sets the flat element index (`index` instructions) to row_var * cols + col_var."""
        self.index_expr = f"{row_var} * {math.prod(sizes[split:])} + {col_var}"
        lines, elem, row = [], [], []
        for slot, st in enumerate(strides):
            lines.append(f"const {self.INDEX} b{slot} = {_row_offset(sizes[:split], st[:split], row_var)};")
            col = _row_offset(sizes[split:], st[split:], col_var)
            elem.append(f"b{slot}" + ("" if col == "0" else f" + {col}"))
            row.append(f"b{slot}")
        return lines, elem, row

    # reductions: (accumulator type, init, clause, update, result)
    def reduction_parts(self, red, count):
        t = self.local(red.dtype)
        v = f"v{red.src}"
        if red.kind in ("sum", "mean"):
            result = self.to_dtype(red.dtype, "acc" if red.kind == "sum" else f"acc / (double){count}")
            return (["double acc = 0.0;"], "reduction(+:acc)", [f"acc += {v};"], result)
        cmp = ">" if red.kind == "max" else "<"
        init = "-INFINITY" if red.kind == "max" else "INFINITY"
        return ([f"{t} acc = {init};", "int nan = 0;"],
                f"reduction({red.kind}:acc) reduction(|:nan)",
                [f"acc = {v} {cmp} acc ? {v} : acc;", f"nan |= {v} != {v};"],
                "(nan ? NAN : acc)")

    def kernel(self, k):
        if k.row_dims:
            return self.row_kernel(k)
        if k.reduction is not None and k.reduction.axis == "lead":
            return self.lead_kernel(k)
        sizes, strides, _ = k.loop_shape()
        red = k.reduction
        n = k.numel()
        par = n >= PARALLEL_MIN and (red is None or red.kind not in ("sum", "mean"))
        out = [self.header(k), self.signature(k), "{"]
        ind = "    "
        clause = ""
        if red is not None:
            init, clause, update, result = self.reduction_parts(red, n)
            out += [ind + x for x in init]
        if len(sizes) == 1:
            # one flat loop
            offs = [_term("i", s[0]) for s in strides]
            out.append(ind + (f"#pragma omp parallel for simd {_team(n, n)}" if par else "#pragma omp simd")
                       + (" " + clause if clause else ""))
            out.append(ind + f"for (int64_t i = 0; i < {sizes[0]}; i++) {{")
            out += [ind * 2 + x for x in self.body(k, offs, "i")]
            if red is not None:
                out += [ind * 2 + x for x in update]
            out.append(ind + "}")
        else:
            rows, cols = math.prod(sizes[:-1]), sizes[-1]
            if par:
                out.append(ind + f"#pragma omp parallel for {_team(n, rows)}" + (" " + clause if clause else ""))
            out.append(ind + f"for (int64_t r = 0; r < {rows}; r++) {{")
            base, offs, _ = self.row_loads(k, sizes, strides, len(sizes) - 1, "r", "j")
            out += [ind * 2 + x for x in base]
            out.append(ind * 2 + "#pragma omp simd" + (" " + clause if clause else ""))
            out.append(ind * 2 + f"for (int64_t j = 0; j < {cols}; j++) {{")
            out += [ind * 3 + x for x in self.body(k, offs, f"r * {cols} + j")]
            if red is not None:
                out += [ind * 3 + x for x in update]
            out.append(ind * 2 + "}")
            out.append(ind + "}")
        if red is not None:
            out.append(ind + f"out{red.out}[0] = {self.store(red.dtype, result)};")
        out.append("}")
        return "\n".join(out) + "\n"

    def lead_kernel(self, k):
        """A sum/mean over leading dimensions: one double accumulator per result, rows walked
        in order (each row's loop is unit-stride and vectorised). From PARALLEL_MIN elements
        (a GELU backward with its bias-gradient sum), when more than one thread would run,
        threads share out blocks of LEAD_BLOCK columns instead, each walking every row in
        order over its own columns: each accumulator adds the same values in the same order
        whatever the thread count (the same bits), and the elementwise work the kernel also
        does is not left on one thread. One thread keeps the row walk."""
        sizes, strides, split = k.loop_shape()
        rows, cols = k.rows_cols()
        red = k.reduction
        ind = "    "
        base, offs, _ = self.row_loads(k, sizes, strides, split, "r", "j")
        body = [ind * 2 + x for x in self.body(k, offs, f"r * {cols} + j")]

        def walk(lo, hi):       # every row in order, columns lo..hi
            return ([ind + f"for (int64_t r = 0; r < {rows}; r++) {{"] + [ind * 2 + x for x in base]
                    + [ind * 2 + "#pragma omp simd", ind * 2 + f"for (int64_t j = {lo}; j < {hi}; j++) {{"]
                    + [ind + x for x in body] + [ind * 3 + f"acc[j] += v{red.src};", ind * 2 + "}", ind + "}"])
        out = [self.header(k), self.signature(k), "{",
               ind + f"double *acc = (double *)calloc({max(cols, 1)}, sizeof(double));",
               ind + "if (!acc) return;"]
        blocks = -(-cols // LEAD_BLOCK)
        if k.numel() >= PARALLEL_MIN and blocks > 1:
            team = _team(k.numel(), blocks)[len("num_threads("):-1]
            out += [ind + f"if ({team} > 1) {{",
                    ind * 2 + f"#pragma omp parallel for num_threads({team})",
                    ind * 2 + f"for (int64_t jb = 0; jb < {cols}; jb += {LEAD_BLOCK}) {{",
                    ind * 3 + f"const int64_t je = jb + {LEAD_BLOCK} < {cols} ? jb + {LEAD_BLOCK} : {cols};"]
            out += [ind * 2 + x for x in walk("jb", "je")]
            out += [ind * 2 + "}", ind + "} else {"] + [ind + x for x in walk("0", str(cols))] + [ind + "}"]
        else:
            out += walk("0", str(cols))
        scale = "" if red.kind == "sum" else f" / (double){rows}"
        value = self.store(red.dtype, self.to_dtype(red.dtype, f"acc[j]{scale}"))
        out += [ind + f"for (int64_t j = 0; j < {cols}; j++) out{red.out}[j] = {value};",
                ind + "free(acc);", "}"]
        return "\n".join(out) + "\n"

    def header(self, k):
        """The kernel's comment line: its ops (not its graph nodes' names, which differ between
        identical layers: a kernel's source depends on what it computes only, so backend c
        names, shares and caches kernels by content)."""
        rows = f" rows of {k.row_dims} dim(s)" if k.row_dims else ""
        ops = " ".join(i.op for i in k.instrs if i.op not in LEAVES)
        return f"/* {k.name}: {ops} over [{','.join(str(s) for s in k.shape)}]{rows} */"

    def row_kernel(self, k):
        """One iteration per row; inside, one simd loop per pass of row_passes(). Threads
        share out the rows -- or, with fewer rows than ROW_THREADS_MIN (a softmax over one
        long vector), each pass's loop over the row."""
        sizes, strides, split = k.loop_shape()
        rows, cols = k.rows_cols()
        passes, tail = k.row_passes(lambda i: k.instrs[i].op in SCRATCH_OPS
                                    and cols * np.dtype(k.instrs[i].dtype).itemsize <= SCRATCH_BYTES)
        level = k.row_level()
        ind = "    "
        out = [self.header(k), self.signature(k), "{"]
        par = k.numel() >= PARALLEL_MIN
        # threads split a row only where no sum runs along it (a sum's bits must not depend
        # on the thread count); otherwise they share out the rows
        inner = par and rows < ROW_THREADS_MIN and not any(i.op in ("row_sum", "row_mean") for i in k.instrs)
        if par and not inner:
            out.append(ind + f"#pragma omp parallel for {_team(k.numel(), rows)}")
        out.append(ind + f"for (int64_t r = 0; r < {rows}; r++) {{")
        base, elem_offs, row_offs = self.row_loads(k, sizes, strides, split, "r", "j")
        body = [x for x in base]
        body += [f"{self.local(k.instrs[i].dtype)} s{i}[{cols}];" for p in passes for i in p.saves]
        for p in passes:
            body += [self.instr(k, i, row_offs) for i in p.before]
            parts = [self.row_reduction_parts(k, i, cols) for i in p.reduces]
            for decl, _, _, _ in parts:
                body += decl
            # float32/float16/bfloat16 sums: float partial sums over blocks of SUM_BLOCK elements, added
            # up in double -- as accurate as numpy's pairwise sum, and the vector loop stays in
            # float (accumulating every element in double halves its speed)
            blocked = [i for i in p.reduces if k.instrs[i].op in ("row_sum", "row_mean")
                       and k.instrs[i].dtype in ("float32",) + HALVES] if cols > 1 and not inner else []
            clause = " ".join(c for i, (_, c, _, _) in zip(p.reduces, parts) if i not in blocked)
            clause = " ".join([clause] + [f"reduction(+:f{i})" for i in blocked]).strip()
            lo = "0"
            if blocked:
                body.append(f"for (int64_t jb = 0; jb < {cols}; jb += {SUM_BLOCK}) {{")
                body.append(ind + f"const int64_t je = jb + {SUM_BLOCK} < {cols} ? jb + {SUM_BLOCK} : {cols};")
                body += [ind + f"float f{i} = 0.0f;" for i in blocked]
                lo, hi, pre = "jb", "je", ind
            else:
                hi, pre = str(cols), ""
            body.append(pre + (f"#pragma omp parallel for simd {_team(k.numel(), cols)}" if inner
                               else "#pragma omp simd")
                        + (" " + clause if clause else ""))
            body.append(pre + f"for (int64_t j = {lo}; j < {hi}; j++) {{")
            loop = [f"const {self.local(k.instrs[i].dtype)} v{i} = s{i}[j];" if i in p.reloads
                    else self.instr(k, i, elem_offs) for i in sorted(p.elems + p.reloads)]
            loop += [f"s{i}[j] = v{i};" for i in p.saves]
            for i, (_, _, update, _) in zip(p.reduces, parts):
                loop += [f"f{i} += v{k.instrs[i].args[0]};"] if i in blocked else update
            if p.stores:
                loop += [f"out{slot}[r * {cols} + j] = {self.store(k.instrs[i].dtype, f'v{i}')};"
                         for i, slot in k.stores if not level[i]]
            body += [pre + ind + x for x in loop]
            body.append(pre + "}")
            if blocked:
                body += [ind + f"a{i} += f{i};" for i in blocked]
                body.append("}")
            body += [f"const {self.local(k.instrs[i].dtype)} v{i} = {value};"
                     for i, (_, _, _, value) in zip(p.reduces, parts)]
            if p is passes[0] and len(passes) > 1 and not inner:
                body += self.prefetch_next_row(k, sizes, strides, split, elem_offs)
        body += [self.instr(k, i, row_offs) for i in tail]
        body += [f"out{slot}[r] = {self.store(k.instrs[i].dtype, f'v{i}')};" for i, slot in k.stores if level[i]]
        out += [ind * 2 + x for x in body]
        out += [ind + "}", "}"]
        return "\n".join(out) + "\n"

    def prefetch_next_row(self, k, sizes, strides, split, elem_offs):
        """Prefetch hints for the next row of each input read as a contiguous row (not a weight
        every row shares) and of each row output (see PREFETCH_LINE). A hint never faults, so
        the row after the last one is asked for too; the address is formed as an integer."""
        rows, cols = k.rows_cols()
        lines = []

        def hint(buf, dtype, offset, write):
            size = np.dtype(dtype).itemsize if dtype != "bfloat16" else 2
            if cols * size < PREFETCH_MIN_BYTES:
                return
            step = max(1, PREFETCH_LINE // size)
            lines.append(f"for (int64_t j = 0; j < {cols}; j += {step}) __builtin_prefetch((const void *)"
                         f"((uintptr_t){buf} + (uintptr_t)(({offset}) + j) * {size}), {int(write)}, 3);")
        for slot, b in enumerate(k.inputs):
            if slot in k.next_rows:
                offset = k.next_rows[slot]
            elif rows > 1 and any(strides[slot][:split]) and elem_offs[slot] == f"b{slot} + j":
                offset = _row_offset(sizes[:split], strides[slot][:split], "(r + 1)")
            else:
                continue
            hint(f"in{slot}", b.dtype, offset, False)
        level = k.row_level()
        for i, slot in k.stores:
            if not level[i]:
                hint(f"out{slot}", k.outputs[slot].dtype, f"(r + 1) * {cols}", True)
        return lines

    # the flat element index expression of the loop being rendered (body(), row_loads())
    index_expr = None

    def source(self, kernels, texts=None):
        """The translation unit of `kernels`; `texts`: their functions already rendered
        (backend c renders each kernel once, under a name taken from its content)."""
        rng = self.RNG_SOURCE if any(k.uses_rng() for k in kernels) else ""
        bf16 = self.BFLOAT16_SOURCE if any(k.uses_dtype("bfloat16") for k in kernels) else ""
        texts = texts or [self.kernel(k) for k in kernels]
        nonpos = self.NONPOS_EXP_SOURCE if self.NONPOS_EXP and any(self.NONPOS_EXP in t for t in texts) else ""
        return self.PRELUDE + bf16 + rng + nonpos + "".join("\n" + t for t in texts)


def _less_row_max(k, i):
    """Whether instruction i is `x - row_max(x)`: <= 0, or NaN."""
    ins = k.instrs[i]
    if ins.op != "sub":
        return False
    m = k.instrs[ins.args[1]]
    return m.op == "row_max" and m.args[0] == ins.args[0]


def _team(work, units):
    """The num_threads clause of a parallel loop over `units` iterations doing `work` elements."""
    return f"num_threads(eagerc_team({work}, {units}))"


def _term(var, stride):
    if stride == 0:
        return "0"
    return var if stride == 1 else f"{var} * {stride}"


def _row_offset(sizes, strides, var="r"):
    """Offset of flat index `var` over dimensions `sizes` for one input with `strides`."""
    terms = []
    div = 1
    for d in range(len(sizes) - 1, -1, -1):
        if strides[d]:
            idx = var if div == 1 else f"({var} / {div})"
            if d > 0:
                idx = f"({idx} % {sizes[d]})"
            terms.append(_term(idx, strides[d]))
        div *= sizes[d]
    return " + ".join(reversed(terms)) or "0"


def render_c(kernels):
    return CRenderer().source(kernels)
