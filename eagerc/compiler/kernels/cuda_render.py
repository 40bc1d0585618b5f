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
- per-row reduction (axis "last"): one block per row (grid-stride over rows), each
  thread accumulates a strided slice of the row, then a shared-memory tree reduction.
- reduction over all elements: one block, grid-stride accumulation then the same tree
  (deterministic, no atomics; a two-pass multi-block version is future work).

sum/mean accumulate in double; max/min carry a NaN flag so NaN propagates like numpy.
The source is deterministic (names by position, literals by repr), so cupy's on-disk
kernel cache (keyed by source) hits in a second process.
"""
from .render import CRenderer, _row_offset, _term

__all__ = ["CudaRenderer", "render_cuda", "launch_config", "THREADS", "MAX_BLOCKS"]

THREADS = 256            # threads per block (a power of two: the tree reduction halves it)
MAX_BLOCKS = 65535 * 16  # grid cap for elementwise kernels; the grid-stride loop does the rest


class CudaRenderer(CRenderer):
    # NVRTC has no <stdint.h>: plain C types of the same widths (LP64 / CUDA's data model)
    CTYPES = {"float32": "float", "float64": "double", "bool": "unsigned char",
              "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
              "uint8": "unsigned char"}
    # INFINITY / NAN as math.h spells them (the table and the C literals use them)
    PRELUDE = ("#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n"
               "#ifndef NAN\n#define NAN __int_as_float(0x7fffffff)\n#endif\n")

    # ------------------------------------------------------------ intrinsics / literals
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
        return f'extern "C" __global__ void __launch_bounds__({THREADS}) {k.name}({", ".join(params)})'

    def reduction_parts(self, red, count):
        """(accumulator lines, per-element update lines, combine(a, b) of two partials over
        shared slots, final value expression of the block's accumulator `acc`/`nan`)."""
        t = self.CTYPES[red.dtype]
        v = f"v{red.src}"
        if red.kind in ("sum", "mean"):
            result = f"({t})acc" if red.kind == "sum" else f"({t})(acc / (double){count})"
            return ("double", ["double acc = 0.0;", "int nan = 0;"], [f"acc += {v};"],
                    lambda a, b: f"{a} + {b}", result)
        cmp = ">" if red.kind == "max" else "<"
        init = "-INFINITY" if red.kind == "max" else "INFINITY"
        return (t, [f"{t} acc = {init};", "int nan = 0;"],
                [f"acc = {v} {cmp} acc ? {v} : acc;", f"nan |= {v} != {v};"],
                lambda a, b: f"({b} {cmp} {a} ? {b} : {a})", f"(nan ? ({t})NAN : acc)")

    def _block_reduce(self, red, acc_t, combine, result, out_index, ind):
        """Shared-memory tree reduction of every thread's (acc, nan); thread 0 stores."""
        return [ind + x for x in (
            f"__shared__ {acc_t} s_acc[{THREADS}];",
            f"__shared__ int s_nan[{THREADS}];",
            "s_acc[threadIdx.x] = acc;",
            "s_nan[threadIdx.x] = nan;",
            "__syncthreads();",
            f"for (int w = {THREADS // 2}; w > 0; w >>= 1) {{",
            "    if (threadIdx.x < w) {",
            f"        s_acc[threadIdx.x] = {combine('s_acc[threadIdx.x]', 's_acc[threadIdx.x + w]')};",
            "        s_nan[threadIdx.x] |= s_nan[threadIdx.x + w];",
            "    }",
            "    __syncthreads();",
            "}",
            "if (threadIdx.x == 0) {",
            "    acc = s_acc[0];",
            "    nan = s_nan[0];",
            f"    out{red.out}[{out_index}] = {result};",
            "}",
            "__syncthreads();",      # the shared slots are reused by the next row
        )]

    def kernel(self, k):
        sizes, strides = k.loop_shape()
        red = k.reduction
        n = k.numel()
        ind = "    "
        out = [f"/* {k.name}: {' '.join(k.nodes)} over [{','.join(str(s) for s in k.shape)}] */",
               self.signature(k), "{"]
        cols = sizes[-1]
        rows = _prod(sizes[:-1])
        if red is not None and red.axis == "last":
            acc_t, init, update, combine, result = self.reduction_parts(red, cols)
            out.append(ind + f"for (long long r = blockIdx.x; r < {rows}LL; r += gridDim.x) {{")
            offs = []
            for slot, s in enumerate(strides):
                out.append(ind * 2 + f"const long long b{slot} = {_row_offset(sizes[:-1], s[:-1])};")
                offs.append(f"b{slot}" + ("" if s[-1] == 0 else f" + {_term('j', s[-1])}"))
            out += [ind * 2 + x for x in init]
            out.append(ind * 2 + f"for (long long j = threadIdx.x; j < {cols}LL; j += blockDim.x) {{")
            out += [ind * 3 + x for x in self.body(k, offs, f"r * {cols}LL + j")]
            out += [ind * 3 + x for x in update]
            out.append(ind * 2 + "}")
            out += self._block_reduce(red, acc_t, combine, result, "r", ind * 2)
            out.append(ind + "}")
        else:
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
                out += self._block_reduce(red, acc_t, combine, result, "0", ind)
        out.append("}")
        return "\n".join(out) + "\n"


def launch_config(k):
    """(grid, block) for kernel `k` as rendered above; grid 0 means nothing to launch."""
    sizes, _ = k.loop_shape()
    n = k.numel()
    red = k.reduction
    if red is not None and red.axis == "last":
        return min(_prod(sizes[:-1]), MAX_BLOCKS), THREADS
    if red is not None:                   # over all elements: one block
        return 1, THREADS
    return min((n + THREADS - 1) // THREADS, MAX_BLOCKS), THREADS


def _prod(shape):
    p = 1
    for s in shape:
        p *= s
    return p


def render_cuda(kernels):
    return CudaRenderer().source(kernels)
