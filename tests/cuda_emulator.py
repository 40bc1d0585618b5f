"""Run generated CUDA kernels on the CPU, to check their *values* without a GPU.

NVRTC proves the CUDA source compiles; this proves it computes the right numbers. The
source the CUDA renderer emits is compiled as C with a small shim:

- a block is an OpenMP parallel region of `blockDim.x` threads (`threadIdx` is
  threadprivate), blocks run one after another, `__syncthreads()` is `omp barrier`;
- `__shared__` arrays are function-level `static` (one copy, shared by the block's threads,
  which is what shared memory is while blocks run one at a time);
- the PTX `cvt` conversions of float16 become C `_Float16` conversions (same IEEE
  round-to-nearest-even), `__umul64hi` a 128-bit multiply, `__int_as_float` (and the
  `__uint_as_float` / `__float_as_uint` of bfloat16's bit conversions) a memcpy.

Everything else -- thread indexing, grid-stride loops, the per-pass block reductions of
row kernels, launch configurations -- is the generated code itself. A test can shrink the
grid (`max_grid`) so grid-stride loops wrap. `EmulatedRawModule` stands in for
`cupy.RawModule`, so backend "cuda"'s whole driver runs on numpy arrays.
"""
import ctypes
import re

import numpy as np

from eagerc.runtime import kernel_cache

SHIM = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>
typedef struct { unsigned int x, y, z; } eagerc_dim3;
static eagerc_dim3 threadIdx, blockIdx, blockDim, gridDim;
#pragma omp threadprivate(threadIdx)
#define __global__
#define __device__ static
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __restrict__ __restrict
#define __syncthreads() _Pragma("omp barrier")
#define __threadfence() __sync_synchronize()
static inline unsigned int atomicInc(unsigned int *a, unsigned int val) {   /* one block at a time */
    unsigned int old = *a;
    *a = old >= val ? 0 : old + 1;
    return old;
}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned int i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int i; memcpy(&i, &f, 4); return i; }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline float eagerc_h2f(unsigned short h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static inline unsigned short eagerc_f2h(float f) { _Float16 x = (_Float16)f; unsigned short h; memcpy(&h, &x, 2); return h; }
static inline unsigned short eagerc_d2h(double d) { _Float16 x = (_Float16)d; unsigned short h; memcpy(&h, &x, 2); return h; }
"""

_PTX_HALF = re.compile(r"^__device__ __forceinline__ [\w ]+ eagerc_[hfd]2[hf]\(.*$", re.M)
_KERNEL = re.compile(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(([^)]*)\)')


def emulated_source(cuda_source):
    """(C source, {kernel name: [param declarations]}) for a CUDA source of the renderer."""
    body = _PTX_HALF.sub("", cuda_source)
    kernels = {}
    for name, params in _KERNEL.findall(body):
        kernels[name] = [p.strip() for p in params.split(",") if p.strip()]
    body = body.replace('extern "C" ', "")
    wrappers = []
    for name, params in kernels.items():
        names = [p.split()[-1].lstrip("*") for p in params]
        wrappers.append(
            f"void run_{name}(unsigned int grid, unsigned int block{''.join(', ' + p for p in params)}) {{\n"
            "    omp_set_dynamic(0);\n"
            "    gridDim.x = grid; gridDim.y = gridDim.z = 1; blockDim.x = block; blockDim.y = blockDim.z = 1;\n"
            "    for (unsigned int b = 0; b < grid; b++) {\n"
            "        blockIdx.x = b; blockIdx.y = blockIdx.z = 0;\n"
            "        #pragma omp parallel num_threads(block)\n"
            "        {\n"
            "            threadIdx.x = (unsigned int)omp_get_thread_num(); threadIdx.y = threadIdx.z = 0;\n"
            f"            {name}({', '.join(names)});\n"
            "        }\n"
            "    }\n"
            "}\n")
    return SHIM + body + "\n" + "\n".join(wrappers), kernels


class EmulatedRawModule:
    """`cupy.RawModule(code=...)` on the CPU: get_function(name)(grid, block, args)."""
    max_grid = None     # cap on blocks per launch (grid-stride loops cover the rest)
    launches = []

    def __init__(self, code, options=()):
        source, self.params = emulated_source(code)
        self.lib = kernel_cache.load(source)

    def get_function(self, name):
        fn = getattr(self.lib, "run_" + name)
        params = self.params[name]
        fn.argtypes = [ctypes.c_uint, ctypes.c_uint] + [
            ctypes.c_void_p if "*" in p else ctypes.c_uint64 for p in params]
        fn.restype = None

        def launch(grid, block, args):
            g = grid[0] if EmulatedRawModule.max_grid is None else min(grid[0], EmulatedRawModule.max_grid)
            EmulatedRawModule.launches.append((name, grid[0], g, block[0]))
            cargs = [kernel_cache.ptr(a) if isinstance(a, np.ndarray) else int(a) for a in args]
            fn(g, block[0], *cargs)
        return launch
