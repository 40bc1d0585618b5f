"""Backend "c": fused groups as C kernels (OpenMP), everything else on the ops' numpy kernels.

The pass pipeline, the kernel plan and the Python driver are fused.py's (shared with
backend "cuda"); this module only binds them to the CPU:

1. `optimize(graph, CBackend().pipeline)`: fused.PIPELINE (row composites decomposed and
   fused with their neighbours).
2. `CBackend().compile(graph)`: fused.plan_kernels lowers the fusion groups to Kernels;
   kernels/render.py renders them into C (one source per CHUNK kernels), compiled with the
   system compiler, in parallel, and loaded with ctypes (runtime/kernel_cache.py: disk cache
   keyed by source + compiler version + flags); the driver (fused.driver) calls them with
   data pointers as `K_<name>`, and the other nodes' numpy kernels (matmul and convolution
   stay on BLAS through numpy).

Without a C compiler (none on PATH, or $EAGERC_CC missing) the graph goes to the numpy
backend, with a one-line RuntimeWarning. A graph with nothing to fuse does too. The
program carries `.source` (the driver), `.c_source`, `.kernels` (Kernel IR) and
`.library` (paths of the shared objects: a graph with many kernels is split into a few,
compiled in parallel).
"""
import ctypes
import os
import warnings

import numpy as np

from ...runtime import kernel_cache, threads
from ...runtime.kernels.render import render_c
from . import register_backend
from .driver import Binding
from .fused import PIPELINE, SINGLETON_MIN, driver, plan_kernels, uses_float16
from .numpy_backend import NumpyBackend

__all__ = ["CBackend"]

# unfused ops: their numpy kernels; fused groups: C kernels over data pointers (ctypes)
C = Binding("c_backend", globs={"A_empty": np.empty, "ptr": kernel_cache.ptr, "A_u64": int})


CHUNK = 24    # kernels per shared object once a graph has more than this: compiled in parallel


def _chunks(kernels):
    """The kernels split into shared objects compiled side by side: one per CPU at most,
    never fewer than CHUNK kernels each (a compiler process costs ~40 ms to start)."""
    n = max(1, min(os.cpu_count() or 1, len(kernels) // CHUNK))
    size = -(-len(kernels) // n)
    return [kernels[i:i + size] for i in range(0, len(kernels), size)]


class CBackend:
    name = "c"
    supports_dynamic = False   # kernels are specialised to static shapes

    def __init__(self, singleton_min=SINGLETON_MIN):
        self.singleton_min = singleton_min

    @property
    def pipeline(self):
        """The passes `optimize` runs for this backend: fused.PIPELINE, or the numpy backend's
        without a C compiler (the program then runs on numpy)."""
        return PIPELINE if kernel_cache.find_compiler() is not None else NumpyBackend.pipeline

    def compile(self, graph):
        program = self._compile(graph)
        program.blas_context = threads.blas_context_for(graph)   # small products: BLAS stays on this thread
        return program

    def _compile(self, graph):
        if kernel_cache.find_compiler() is None:
            warnings.warn("eagerc backend 'c': no C compiler found (cc, or $EAGERC_CC); "
                          "using the numpy backend", RuntimeWarning, stacklevel=3)
            return NumpyBackend().compile(graph)
        plan = plan_kernels(graph, self.singleton_min)
        if any(uses_float16(k) for _, _, k in plan) and not kernel_cache.has_float16():
            plan = plan_kernels(graph, self.singleton_min, float16=False)
        if not plan:
            program = NumpyBackend().compile(graph)
            program.kernels = []
            return program
        kernels = [k for _, _, k in plan]
        drv = driver(graph, plan, C, "C")      # decides which outputs are written in place
        chunks = _chunks(kernels)
        sources = [render_c(c) for c in chunks]
        try:
            libs = kernel_cache.load_many(sources)
        except kernel_cache.CompileError as e:
            # a compiler without OpenMP (Apple clang), an unknown flag: the program still
            # runs, on numpy, and says why in one line
            first = next((line.strip() for line in str(e).splitlines()[1:] if "error" in line),
                         str(e).splitlines()[0])
            warnings.warn(f"eagerc backend 'c': the C compiler failed ({first[:200]}); using the numpy "
                          "backend", RuntimeWarning, stacklevel=3)
            return NumpyBackend().compile(graph)
        lib_of = {k.name: lib for c, lib in zip(chunks, libs) for k in c}
        for k in kernels:
            f = getattr(lib_of[k.name], k.name)
            f.argtypes = [ctypes.c_void_p] * (len(k.inputs) + len(k.outputs)) + [ctypes.c_uint64] * len(k.params)
            f.restype = None
            drv.globs["K_" + k.name] = f
        program = drv.load("c-")
        program.c_sources = sources
        program.c_source = "\n/* ---- next shared object ---- */\n".join(sources)
        program.kernels = kernels
        program.library = [lib._eagerc_path for lib in libs]
        program.buffers = []
        program._libs = libs
        return program


register_backend("c", CBackend)
