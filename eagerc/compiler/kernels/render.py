"""Renderers: Kernel IR -> source, through one table of C-style expressions.

`code_for_op[op](r, *args)` returns the C expression of one instruction; `args` are the
names of earlier instructions' variables (each instruction is bound to a `const` local,
so an argument may be used twice safely) and `r` is the instruction's context: its dtype
(`r.dtype`), its first operand's dtype (`r.src`), the math function name for that dtype
(`r.fn("exp")` -> `expf` for float32, `exp` for float64) and literals (`r.lit(1)`).
The C renderer (OpenMP) and a later CUDA renderer share the table; a renderer overrides
only the kernel signature, the loops / thread indexing, intrinsic names (`MATH`) and
the reductions.

No fast-math: IEEE semantics, so results match numpy to rounding (maximum/minimum and
max/min reductions propagate NaN like numpy). The source is deterministic for a given
list of kernels (no ids, no addresses, no dict-order dependence), so disk caches hit.
"""
import math

import numpy as np

from .ir import FLOATS

__all__ = ["code_for_op", "CRenderer", "render_c"]

# elements below which a kernel runs on one thread (OpenMP start-up costs a few us)
PARALLEL_MIN = 1 << 15


def _call(name):
    return lambda r, *a: f"{r.fn(name)}({', '.join(a)})"


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
    # the eager kernel's formula: exp of a non-positive number only
    e = f"{r.fn('exp')}(-{r.fn('fabs')}({a}))"
    return f"({a} >= 0 ? {r.lit(1)} / ({r.lit(1)} + {e}) : {e} / ({r.lit(1)} + {e}))"


def _cast(r, a):
    if r.dtype == "bool":
        return f"({a} != 0)"
    return f"(({r.ctype(r.dtype)}){a})"


code_for_op = {
    "add": lambda r, a, b: f"({a} + {b})",
    "sub": lambda r, a, b: f"({a} - {b})",
    "mul": lambda r, a, b: f"({a} * {b})",
    "div": lambda r, a, b: f"({a} / {b})",
    "neg": lambda r, a: f"(-{a})",
    "square": lambda r, a: f"({a} * {a})",
    "reciprocal": lambda r, a: f"({r.lit(1)} / {a})",
    "rsqrt": lambda r, a: f"({r.lit(1)} / {r.fn('sqrt')}({a}))",
    "relu": lambda r, a: _maximum(r, a, r.lit(0)),
    "maximum": _maximum,
    "minimum": _minimum,
    "abs": _abs,
    "sign": _sign,
    "sigmoid": _sigmoid,
    "pow": _call("pow"),
    "exp": _call("exp"), "exp2": _call("exp2"), "log": _call("log"), "log2": _call("log2"),
    "log1p": _call("log1p"), "expm1": _call("expm1"), "sqrt": _call("sqrt"), "sin": _call("sin"),
    "cos": _call("cos"), "tan": _call("tan"), "tanh": _call("tanh"), "erf": _call("erf"),
    "floor": _call("floor"), "ceil": _call("ceil"), "trunc": _call("trunc"),
    "round": _call("rint"),   # half to even, like numpy
    "eq": lambda r, a, b: f"({a} == {b})",
    "ne": lambda r, a, b: f"({a} != {b})",
    "lt": lambda r, a, b: f"({a} < {b})",
    "le": lambda r, a, b: f"({a} <= {b})",
    "gt": lambda r, a, b: f"({a} > {b})",
    "ge": lambda r, a, b: f"({a} >= {b})",
    "logical_and": lambda r, a, b: f"(({a} != 0) & ({b} != 0))",
    "logical_or": lambda r, a, b: f"(({a} != 0) | ({b} != 0))",
    "logical_xor": lambda r, a, b: f"(({a} != 0) ^ ({b} != 0))",
    "logical_not": lambda r, a: f"({a} == 0)",
    "isnan": lambda r, a: f"({a} != {a})",
    "isinf": lambda r, a: f"({r.fn('fabs')}({a}) == INFINITY)",
    "isfinite": lambda r, a: f"({a} - {a} == 0)",
    "bitwise_and": lambda r, a, b: f"({a} & {b})",
    "bitwise_or": lambda r, a, b: f"({a} | {b})",
    "bitwise_xor": lambda r, a, b: f"({a} ^ {b})",
    "bitwise_not": lambda r, a: f"(~{a})",
    "where": lambda r, c, a, b: f"({c} ? {a} : {b})",
    "cast": _cast,
}


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


class CRenderer:
    """C11 + OpenMP. Subclasses (CUDA) override signature(), loops, MATH and reductions."""
    CTYPES = {"float32": "float", "float64": "double", "bool": "unsigned char", "int8": "int8_t",
              "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t"}
    MATH_SUFFIX = {"float32": "f", "float64": ""}
    # glibc's vector math (libmvec, <= 4 ulp) is declared by math.h only under -ffast-math;
    # declaring the SIMD variants here lets the loops vectorise with IEEE semantics kept
    VECTOR_MATH = ("exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "tan", "tanh", "erf")
    PRELUDE = ("#include <math.h>\n#include <stdint.h>\n"
               "#if defined(__x86_64__) && defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)\n"
               + "".join(f"#pragma omp declare simd notinbranch\n{t} {f}{sfx}({t});\n"
                         for f in VECTOR_MATH for t, sfx in (("float", "f"), ("double", "")))
               + "#pragma omp declare simd notinbranch\nfloat powf(float, float);\n"
               + "#pragma omp declare simd notinbranch\ndouble pow(double, double);\n"
               + "#endif\n")
    code_for_op = code_for_op

    # ------------------------------------------------------------ intrinsics
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
                s += "f" if dtype == "float32" else ""
                return s if v >= 0 else f"({s})"
            return s if dtype == "float32" else f"((double){s})"
        if dtype == "bool":
            return "1" if value else "0"
        v = int(value)
        if dtype == "int64":
            return f"INT64_C({v})" if v >= 0 else f"(-INT64_C({-v}))" if v != -2 ** 63 else "INT64_MIN"
        return str(v) if v >= 0 else f"({v})"

    # ------------------------------------------------------------ pieces
    def signature(self, k):
        params = [f"const {self.CTYPES[b.dtype]} *restrict in{i}" for i, b in enumerate(k.inputs)]
        params += [f"{self.CTYPES[b.dtype]} *restrict out{i}" for i, b in enumerate(k.outputs)]
        return f"void {k.name}({', '.join(params)})"

    def body(self, k, offsets, store_index):
        """Statements computing every instruction at one index; `offsets[slot]` is the load
        offset expression of input `slot`, `store_index` the full-shape output index."""
        lines = []
        for i, ins in enumerate(k.instrs):
            t = self.CTYPES[ins.dtype]
            if ins.op == "load":
                expr = f"in{ins.args[0]}[{offsets[ins.args[0]]}]"
            elif ins.op == "const":
                expr = self.literal(ins.args[0], ins.dtype)
            else:
                src = k.instrs[ins.args[0]].dtype if ins.args else ins.dtype
                expr = self.code_for_op[ins.op](_Ctx(self, ins.dtype, src), *(f"v{a}" for a in ins.args))
            lines.append(f"const {t} v{i} = {expr};")
        for i, slot in k.stores:
            lines.append(f"out{slot}[{store_index}] = v{i};")
        return lines

    # reductions: (accumulator type, init, clause, update, result)
    def reduction_parts(self, red, count):
        t = self.CTYPES[red.dtype]
        v = f"v{red.src}"
        if red.kind in ("sum", "mean"):
            result = "(%s)acc" % t if red.kind == "sum" else f"({t})(acc / (double){count})"
            return (["double acc = 0.0;"], "reduction(+:acc)", [f"acc += {v};"], result)
        cmp = ">" if red.kind == "max" else "<"
        init = "-INFINITY" if red.kind == "max" else "INFINITY"
        return ([f"{t} acc = {init};", "int nan = 0;"],
                f"reduction({red.kind}:acc) reduction(|:nan)",
                [f"acc = {v} {cmp} acc ? {v} : acc;", f"nan |= {v} != {v};"],
                "(nan ? NAN : acc)")

    def kernel(self, k):
        sizes, strides = k.loop_shape()
        red = k.reduction
        n = k.numel()
        par = n >= PARALLEL_MIN
        out = [f"/* {k.name}: {' '.join(k.nodes)} over [{','.join(str(s) for s in k.shape)}] */",
               self.signature(k), "{"]
        ind = "    "
        if len(sizes) == 1 and not (red is not None and red.axis == "last"):
            # one flat loop
            offs = [_term("i", s[0]) for s in strides]
            clause = ""
            if red is not None:
                init, clause, update, result = self.reduction_parts(red, n)
                out += [ind + x for x in init]
            out.append(ind + ("#pragma omp parallel for simd" if par else "#pragma omp simd")
                       + (" " + clause if clause else ""))
            out.append(ind + f"for (int64_t i = 0; i < {sizes[0]}; i++) {{")
            out += [ind * 2 + x for x in self.body(k, offs, "i")]
            if red is not None:
                out += [ind * 2 + x for x in update]
            out.append(ind + "}")
            if red is not None:
                out.append(ind + f"out{red.out}[0] = {result};")
        else:
            rows = 1
            for s in sizes[:-1]:
                rows *= s
            cols = sizes[-1]
            last = red is not None and red.axis == "last"
            clause_all = ""
            if red is not None and not last:
                init, clause_all, update, result = self.reduction_parts(red, n)
                out += [ind + x for x in init]
            if par:
                out.append(ind + "#pragma omp parallel for" + (" " + clause_all if clause_all else ""))
            out.append(ind + f"for (int64_t r = 0; r < {rows}; r++) {{")
            offs = []
            for slot, s in enumerate(strides):
                out.append(ind * 2 + f"const int64_t b{slot} = {_row_offset(sizes[:-1], s[:-1])};")
                offs.append(f"b{slot}" + ("" if s[-1] == 0 else f" + {_term('j', s[-1])}"))
            clause = clause_all
            if last:
                init, clause, update, result = self.reduction_parts(red, cols)
                out += [ind * 2 + x for x in init]
            out.append(ind * 2 + "#pragma omp simd" + (" " + clause if clause else ""))
            out.append(ind * 2 + f"for (int64_t j = 0; j < {cols}; j++) {{")
            out += [ind * 3 + x for x in self.body(k, offs, f"r * {cols} + j")]
            if red is not None:
                out += [ind * 3 + x for x in update]
            out.append(ind * 2 + "}")
            if last:
                out.append(ind * 2 + f"out{red.out}[r] = {result};")
            out.append(ind + "}")
            if red is not None and not last:
                out.append(ind + f"out{red.out}[0] = {result};")
        out.append("}")
        return "\n".join(out) + "\n"

    def source(self, kernels):
        return self.PRELUDE + "".join("\n" + self.kernel(k) for k in kernels)


def _term(var, stride):
    if stride == 0:
        return "0"
    return var if stride == 1 else f"{var} * {stride}"


def _row_offset(sizes, strides):
    """Offset of row r's first element for one input: sum over the outer dimensions."""
    terms = []
    div = 1
    for d in range(len(sizes) - 1, -1, -1):
        if strides[d]:
            idx = "r" if div == 1 else f"(r / {div})"
            if d > 0:
                idx = f"({idx} % {sizes[d]})"
            terms.append(_term(idx, strides[d]))
        div *= sizes[d]
    return " + ".join(reversed(terms)) or "0"


def render_c(kernels):
    return CRenderer().source(kernels)
