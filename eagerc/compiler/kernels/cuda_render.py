"""CUDA renderer: the same Kernel IR and the same `code_for_op` table as the C renderer.

`CudaRenderer` subclasses `CRenderer` (render.py) and overrides only what differs on the
GPU: the C types and literals (no <stdint.h> under NVRTC), the kernel signature
(`extern "C" __global__`, `__restrict__`), thread indexing, and the reductions. Every
instruction's expression comes from the shared table; the math names are the same
IEEE functions (`expf`/`exp`, `tanhf`/`tanh`, ...; no `__expf` fast intrinsics, no
`--use_fast_math`), so results match numpy to a few ulp as on the CPU.

Thread indexing, one kernel per Kernel IR (`launch_config(k)` gives grid and block):

- elementwise: a grid-stride loop over the flattened index space (64-bit index);
  grid = min(ceil(n / THREADS), MAX_BLOCKS).
- row kernels (ir.py: softmax, layer_norm, any row reduction): a segment of
  `row_threads(cols)` threads (a warp up to the whole block) per row, 256 / that rows
  per block, grid-stride over row groups; each pass of `Kernel.row_passes()` is a
  segment-stride loop over the row whose reductions end in a shared-memory tree per
  segment that every thread of it reads back, so the next pass can use the row's max /
  sum / mean.
- reduction over all elements: up to RED_BLOCKS blocks, each a grid-stride accumulation
  and a tree into one partial (a device global); the last block to finish (an atomicInc
  counter after __threadfence) combines the partials in block order -- one launch, and
  the result does not depend on which block finishes when.

sum/mean accumulate in double; max/min carry a NaN flag so NaN propagates like numpy.
The source is deterministic (names by position, literals by repr), so cupy's on-disk
kernel cache (keyed by source) hits in a second process.
"""
from ...runtime.kernels import philox
from ...runtime.kernels.render import CRenderer, _row_offset, _term

__all__ = ["CudaRenderer", "render_cuda", "launch_config", "row_threads", "THREADS", "MAX_BLOCKS"]

THREADS = 256            # threads per block (a power of two: the tree reduction halves it)
MAX_BLOCKS = 65535 * 16  # grid cap for elementwise kernels; the grid-stride loop does the rest
RED_BLOCKS = 1024        # blocks of a reduction over everything (one partial each)


class CudaRenderer(CRenderer):
    INDEX = "long long"
    # NVRTC has no <stdint.h>: plain C types of the same widths (LP64 / CUDA's data model)
    CTYPES = {"float16": "unsigned short", "bfloat16": "unsigned short", "float32": "float", "float64": "double", "bool": "unsigned char",
              "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
              "uint8": "unsigned char", "uint64": "unsigned long long"}
    RNG_SOURCE = philox.CUDA_SOURCE
    # INFINITY / NAN as math.h spells them (the table and the C literals use them)
    # float16 is stored as its 16 bits and converted with PTX cvt (no cuda_fp16.h under NVRTC)
    NONPOS_EXP = None     # CUDA's expf is fast enough (render.py's inline one is for the CPU's simd loops)
    PRELUDE = ("#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n"
               "#ifndef NAN\n#define NAN __int_as_float(0x7fffffff)\n#endif\n"
               "__device__ __forceinline__ float eagerc_h2f(unsigned short h) "
               "{ float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n"
               "__device__ __forceinline__ unsigned short eagerc_f2h(float f) "
               "{ unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
               "__device__ __forceinline__ unsigned short eagerc_d2h(double d) "
               "{ unsigned short h; asm(\"cvt.rn.f16.f64 %0, %1;\" : \"=h\"(h) : \"d\"(d)); return h; }\n")
    # bfloat16 as its 16 bits too, converted with the C renderer's bit operations
    BFLOAT16_SOURCE = ("__device__ __forceinline__ float eagerc_bf2f(unsigned short b) "
                       "{ return __uint_as_float((unsigned int)b << 16); }\n"
                       "__device__ __forceinline__ unsigned short eagerc_f2bf(float f) "
                       "{ unsigned int u = __float_as_uint(f); if (f != f) return (unsigned short)((u >> 16) | 64u); "
                       "return (unsigned short)((u + 32767u + ((u >> 16) & 1u)) >> 16); }\n")

    # ------------------------------------------------------------ intrinsics / literals
    def load(self, dtype, ref):
        return f"eagerc_h2f({ref})" if dtype == "float16" else super().load(dtype, ref)

    def store(self, dtype, value):
        return f"eagerc_f2h({value})" if dtype == "float16" else super().store(dtype, value)

    def to_dtype(self, dtype, expr):
        if dtype == "float16":      # one rounding, from float or from double
            return f"eagerc_h2f(eagerc_d2h((double)({expr})))"
        return super().to_dtype(dtype, expr)

    def literal(self, value, dtype):
        if dtype == "int64":
            v = int(value)
            if v == -2 ** 63:
                return "(-9223372036854775807LL - 1)"
            return f"{v}LL" if v >= 0 else f"(-{-v}LL)"
        return super().literal(value, dtype)

    # ------------------------------------------------------------ pieces
    def signature(self, k):
        params = [f"const {self.CTYPES[b.dtype]} *__restrict__ in{i}" for i, b in enumerate(k.inputs)]
        params += [f"{self.CTYPES[b.dtype]} *__restrict__ out{i}" for i, b in enumerate(k.outputs)]
        params += [f"{self.CTYPES[p.dtype]} p{i}" for i, p in enumerate(k.params)]
        return f'extern "C" __global__ void __launch_bounds__({THREADS}) {k.name}({", ".join(params)})'

    def reduction_parts(self, red, count):
        """(accumulator lines, per-element update lines, combine(a, b) of two partials over
        shared slots, final value expression of the block's accumulator `acc`/`nan`)."""
        t = self.local(red.dtype)
        v = f"v{red.src}"
        if red.kind in ("sum", "mean"):
            result = self.to_dtype(red.dtype, "acc" if red.kind == "sum" else f"acc / (double){count}")
            return ("double", ["double acc = 0.0;", "int nan = 0;"], [f"acc += {v};"],
                    lambda a, b: f"{a} + {b}", result)
        cmp = ">" if red.kind == "max" else "<"
        init = "-INFINITY" if red.kind == "max" else "INFINITY"
        return (t, [f"{t} acc = {init};", "int nan = 0;"],
                [f"acc = {v} {cmp} acc ? {v} : acc;", f"nan |= {v} != {v};"],
                lambda a, b: f"({b} {cmp} {a} ? {b} : {a})", f"(nan ? ({t})NAN : acc)")

    def _tree(self, value, combine, flag, ind, width=THREADS, lane="threadIdx.x", first="0"):
        """Every thread's (value, flag) combined over its segment of `width` threads (the
        whole block by default; `lane` is the thread's place in it, `first` the segment's
        first slot); every thread reads its segment's result back (shared slots s_acc/s_nan
        are declared once per kernel)."""
        return [ind + x for x in (
            f"s_acc[threadIdx.x] = {value};",
            f"s_nan[threadIdx.x] = {flag};",
            "__syncthreads();",
            f"for (int w = {width // 2}; w > 0; w >>= 1) {{",
            f"    if ({lane} < w) {{",
            f"        s_acc[threadIdx.x] = {combine('s_acc[threadIdx.x]', 's_acc[threadIdx.x + w]')};",
            "        s_nan[threadIdx.x] |= s_nan[threadIdx.x + w];",
            "    }",
            "    __syncthreads();",
            "}",
            f"{value} = s_acc[{first}];",
            f"{flag} = s_nan[{first}];",
            "__syncthreads();",      # the shared slots are reused by the next reduction
        )]

    SHARED = (f"__shared__ double s_acc[{THREADS}];", f"__shared__ int s_nan[{THREADS}];")

    def row_kernel(self, k):
        """`row_threads(cols)` threads per row, 256 / that rows per block: a row of 64 gets
        64 threads, not 256 of which 192 would idle. Every thread walks the same number of
        row iterations (barriers need the whole block); a segment past the last row computes
        the last row again and stores nothing."""
        sizes, strides, split = k.loop_shape()
        rows, cols = k.rows_cols()
        passes, tail = k.row_passes()
        level = k.row_level()
        width = row_threads(cols)
        per_block = THREADS // width
        ind = "    "
        out = [self.header(k), self.signature(k), "{"]
        out += [ind + x for x in self.SHARED]
        out += [ind + f"const unsigned int lane = threadIdx.x % {width}u;",
                ind + f"const unsigned int seg = threadIdx.x / {width}u;",
                ind + f"for (long long rb = blockIdx.x * {per_block}LL; rb < {rows}LL; "
                      f"rb += (long long)gridDim.x * {per_block}) {{"]
        base, elem_offs, row_offs = self.row_loads(k, sizes, strides, split, "r", "j")
        body = [f"const int active = rb + seg < {rows}LL;",
                f"const long long r = active ? rb + seg : {rows}LL - 1;"] + list(base)
        tree = dict(width=width, lane="lane", first=f"seg * {width}u")
        for p in passes:
            body += [self.instr(k, i, row_offs) for i in p.before]
            parts = [self.row_reduction_parts(k, i, cols) for i in p.reduces]
            for decl, _, _, _ in parts:
                body += decl
            body.append(f"for (long long j = lane; j < {cols}LL; j += {width}) {{")
            loop = [self.instr(k, i, elem_offs) for i in p.elems]
            for _, _, update, _ in parts:
                loop += update
            if p.stores:
                loop += [f"if (active) out{slot}[r * {cols}LL + j] = {self.store(k.instrs[i].dtype, f'v{i}')};"
                         for i, slot in k.stores if not level[i]]
            body += [ind + x for x in loop]
            body.append("}")
            for i in p.reduces:
                op = k.instrs[i].op
                if op in ("row_sum", "row_mean"):
                    body += [f"int n{i} = 0;"] + self._tree(f"a{i}", lambda a, b: f"{a} + {b}", f"n{i}", "", **tree)
                else:
                    cmp = ">" if op == "row_max" else "<"
                    t = self.local(k.instrs[i].dtype)
                    body.append(f"double d{i} = a{i};")
                    body += self._tree(f"d{i}", lambda a, b, c=cmp: f"({b} {c} {a} ? {b} : {a})", f"n{i}", "",
                                       **tree)
                    body.append(f"a{i} = ({t})d{i};")
            body += [f"const {self.local(k.instrs[i].dtype)} v{i} = {value};"
                     for i, (_, _, _, value) in zip(p.reduces, parts)]
        body += [self.instr(k, i, row_offs) for i in tail]
        stores = [f"out{slot}[r] = {self.store(k.instrs[i].dtype, f'v{i}')};" for i, slot in k.stores if level[i]]
        if stores:
            body.append("if (lane == 0 && active) {")
            body += [ind + x for x in stores]
            body.append("}")
        out += [ind * 2 + x for x in body]
        out += [ind + "}", "}"]
        return "\n".join(out) + "\n"

    def lead_kernel(self, k):
        """A sum/mean over leading dimensions: one thread per result (adjacent threads read
        adjacent elements of each row: coalesced), walking the rows in order."""
        sizes, strides, split = k.loop_shape()
        rows, cols = k.rows_cols()
        red = k.reduction
        ind = "    "
        out = [self.header(k), self.signature(k), "{",
               ind + "for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
               f"j < {cols}LL; j += (long long)blockDim.x * gridDim.x) {{",
               ind * 2 + "double acc = 0.0;",
               ind * 2 + f"for (long long r = 0; r < {rows}LL; r++) {{"]
        base, offs, _ = self.row_loads(k, sizes, strides, split, "r", "j")
        out += [ind * 3 + x for x in base]
        out += [ind * 3 + x for x in self.body(k, offs, f"r * {cols}LL + j")]
        out += [ind * 3 + f"acc += v{red.src};", ind * 2 + "}"]
        scale = "" if red.kind == "sum" else f" / (double){rows}"
        value = self.store(red.dtype, self.to_dtype(red.dtype, f"acc{scale}"))
        out += [ind * 2 + f"out{red.out}[j] = {value};", ind + "}", "}"]
        return "\n".join(out) + "\n"

    def kernel(self, k):
        if k.row_dims:
            return self.row_kernel(k)
        if k.reduction is not None and k.reduction.axis == "lead":
            return self.lead_kernel(k)
        sizes, strides, _ = k.loop_shape()
        red = k.reduction
        n = k.numel()
        ind = "    "
        out = [self.header(k), self.signature(k), "{"]
        cols = sizes[-1]
        if red is not None:
            acc_t, init, update, combine, result = self.reduction_parts(red, n)
            out += [ind + x for x in init]
        out.append(ind + "for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                   f"i < {n}LL; i += (long long)blockDim.x * gridDim.x) {{")
        if len(sizes) == 1:
            offs = [_term("i", s[0]) for s in strides]
        else:
            out.append(ind * 2 + f"const long long r = i / {cols}LL;")
            out.append(ind * 2 + f"const long long j = i - r * {cols}LL;")
            offs = [" + ".join(x for x in (_row_offset(sizes[:-1], s[:-1]), _term("j", s[-1]))
                               if x != "0") or "0" for s in strides]
        out += [ind * 2 + x for x in self.body(k, offs, "i")]
        if red is not None:
            out += [ind * 2 + x for x in update]
        out.append(ind + "}")
        if red is not None:
            out += self._grid_reduce(k, red, acc_t, combine, result, ind)
            out.insert(0, self._grid_partials(k))
        out.append("}")
        return "\n".join(out) + "\n"

    def _grid_partials(self, k):
        """Device globals of a reduction over everything: one partial per block and the
        count of blocks done (the last block resets it, so it is 0 again for the next launch)."""
        return (f"__device__ double {k.name}_part[{RED_BLOCKS}];\n"
                f"__device__ int {k.name}_partn[{RED_BLOCKS}];\n"
                f"__device__ unsigned int {k.name}_done;")

    def _grid_reduce(self, k, red, acc_t, combine, result, ind):
        """Each block reduces its threads' partials (tree) and writes one partial; the block
        that finishes last (atomicInc on a counter, after __threadfence) combines the
        partials in block order -- one launch, deterministic, every block busy."""
        ident = {"sum": "0.0", "mean": "0.0", "max": "-INFINITY", "min": "INFINITY"}[red.kind]
        lines = list(self.SHARED) + ["__shared__ int s_last;", "double d = acc;"]
        lines += self._tree("d", combine, "nan", "")
        lines += ["if (threadIdx.x == 0) {",
                  f"    {k.name}_part[blockIdx.x] = d;",
                  f"    {k.name}_partn[blockIdx.x] = nan;",
                  "    __threadfence();",
                  f"    s_last = atomicInc(&{k.name}_done, gridDim.x - 1) == gridDim.x - 1;",
                  "}",
                  "__syncthreads();",
                  "if (s_last) {",
                  f"    d = {ident};",
                  "    nan = 0;",
                  "    for (unsigned int b = threadIdx.x; b < gridDim.x; b += blockDim.x) {",
                  f"        const double p = ((volatile double *){k.name}_part)[b];",
                  f"        d = {combine('d', 'p')};",
                  f"        nan |= ((volatile int *){k.name}_partn)[b];",
                  "    }"]
        lines += ["    " + x for x in self._tree("d", combine, "nan", "")]
        lines += ["    if (threadIdx.x == 0) {",
                  f"        acc = ({acc_t})d;",
                  f"        out{red.out}[0] = {self.store(red.dtype, result)};",
                  "    }",
                  "}"]
        return [ind + x for x in lines]


def launch_config(k):
    """(grid, block) for kernel `k` as rendered above; grid 0 means nothing to launch."""
    n = k.numel()
    red = k.reduction
    if k.row_dims:                        # a segment of row_threads(cols) threads per row
        rows, cols = k.rows_cols()
        per_block = THREADS // row_threads(cols)
        return min((rows + per_block - 1) // per_block, MAX_BLOCKS), THREADS
    if red is not None and red.axis == "lead":   # one thread per result
        return min((k.rows_cols()[1] + THREADS - 1) // THREADS, MAX_BLOCKS), THREADS
    if red is not None:                   # over all elements: up to RED_BLOCKS blocks
        return max(1, min((n + THREADS - 1) // THREADS, RED_BLOCKS)), THREADS
    return min((n + THREADS - 1) // THREADS, MAX_BLOCKS), THREADS


def row_threads(cols):
    """Threads per row of a row kernel: the smallest power of two >= the row, from a warp
    (32) up to the whole block."""
    width = 32
    while width < THREADS and width < cols:
        width *= 2
    return width


def render_cuda(kernels):
    return CudaRenderer().source(kernels)
