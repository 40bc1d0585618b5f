"""Backend "c": fused groups as C kernels (OpenMP), everything else on the ops' numpy kernels.

The pass pipeline, the kernel plan and the Python driver are fused.py's (shared with
backend "cuda"); this module only binds them to the CPU:

1. `optimize(graph, CBackend().pipeline)`: fused.PIPELINE (row composites decomposed and
   fused with their neighbours).
2. `CBackend().compile(graph)`: fused.plan_kernels lowers the fusion groups to Kernels;
   kernels/render.py renders each distinct one into a C function named by its content
   (`functions`: `k_<hash of its text>`, so identical layers share functions, and so do
   graphs and processes); runtime/kernel_cache.py finds each function in its disk cache
   (keyed by source + compiler version + flags) or compiles the missing ones together, a
   few translation units side by side, and loads them with ctypes -- while Python builds,
   renders and compiles the driver (fused.driver), which calls them with data pointers as `K_<kernel>`
   (bound once they are loaded), and the other nodes' numpy kernels (matmul and convolution
   stay on BLAS through numpy).

Without a working C compiler (none on PATH, $EAGERC_CC missing, or failing) the graph goes
to the numpy backend, with a one-line RuntimeWarning. A graph with nothing to fuse does too.
The program carries `.source` (the driver), `.c_source` (its distinct functions, as one
translation unit), `.kernels` (Kernel IR), `.functions` ({kernel: C function}) and
`.library` (paths of the shared objects holding them).
"""
import ctypes
import dataclasses
import hashlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...runtime import kernel_cache, threads
from ...runtime.kernels.render import CRenderer
from . import register_backend
from .driver import Binding
from .fused import PIPELINE, ROW_COMPOSITES, SINGLETON_MIN, driver, plan_kernels, set_inplace, uses_float16
from .numpy_backend import NumpyBackend

__all__ = ["CBackend", "functions"]

# unfused ops: their numpy kernels; fused groups: C kernels over data pointers (ctypes)
C = Binding("c_backend", globs={"A_empty": np.empty, "ptr": kernel_cache.ptr, "A_u64": int})


# most kernels per translation unit when several compile side by side (kernel_cache; one unit
# per CPU at most): from 7 distinct kernels a program's C compiles as two units or more -- an MLP
# training step's 11 took 0.23-0.27 s as one unit, 0.16-0.20 s as two on 2 cores (cold first two)
CHUNK = 6
_NAME = "eagerc_kernel_"      # the name a kernel is rendered under before it is named by content


def _shape_of(k):
    """What a kernel computes, without the names of the graph values and nodes it came from:
    kernels equal here render to the same C function (identical layers' kernels are)."""
    return (tuple(k.shape), tuple((b.dtype, tuple(b.shape), tuple(b.strides)) for b in k.inputs),
            tuple((b.dtype, tuple(b.shape), tuple(b.strides)) for b in k.outputs), tuple(k.instrs), tuple(k.stores),
            k.reduction, k.row_dims, tuple(sorted(k.inplace.items())), tuple(p.dtype for p in k.params))


def functions(kernels):
    """({kernel name: C function name}, [(C function name, (text, kernel))] distinct): each
    kernel rendered once per distinct computation, named `k_<hash of its text>` -- so 32
    identical transformer blocks give the functions of one, and a kernel met in another graph
    or process is the same function, found in kernel_cache's disk cache."""
    r = CRenderer()
    name_of, seen, units, named = {}, {}, [], set()
    for k in kernels:
        shape = _shape_of(k)
        name = seen.get(shape)
        if name is None:
            text = r.kernel(dataclasses.replace(k, name=_NAME))
            name = seen[shape] = "k_" + hashlib.sha256(text.encode()).hexdigest()[:16]
            if name not in named:
                named.add(name)
                units.append((name, (text.replace(_NAME, name), k)))
        name_of[k.name] = name
    return name_of, units


def _assemble(units):
    """The translation unit of [(text, kernel)] (kernel_cache.plan_functions' `assemble`)."""
    return CRenderer().source([k for _, k in units], [t for t, _ in units])


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

    @property
    def replaced_ops(self):
        """Ops whose eager C kernels the tracer's eager run need not build (eager.only_built):
        this backend's pipeline decomposes them and fuses their parts into its own kernels."""
        return ROW_COMPOSITES if kernel_cache.find_compiler() is not None else ()

    def compile(self, graph):
        program = self._compile(graph)
        program.blas_context = threads.blas_context_for(graph)   # small products: BLAS stays on this thread
        return program

    def _compile(self, graph):
        if kernel_cache.find_compiler() is None:
            kernel_cache.notice("backend 'c'", kernel_cache.why_not(), "the numpy backend")
            return NumpyBackend().compile(graph)
        plan = plan_kernels(graph, self.singleton_min)
        if any(uses_float16(k) for _, _, k in plan) and not kernel_cache.has_float16():
            plan = plan_kernels(graph, self.singleton_min, float16=False)
        if not plan:
            program = NumpyBackend().compile(graph)
            program.kernels = []
            return program
        kernels = [k for _, _, k in plan]
        ends = set_inplace(graph, plan)        # which outputs are written in place: part of the C
        name_of, units = functions(kernels)
        # the C compiler runs (in its own processes, waited for on a thread) as soon as the kernels
        # are rendered, while Python builds, renders and compiles the driver, which reads its
        # K_<kernel> globals only when it runs
        with ThreadPoolExecutor(1) as pool:
            building = pool.submit(kernel_cache.build_functions,
                                   kernel_cache.plan_functions(units, _assemble, chunk=CHUNK))
            drv = driver(graph, plan, C, "C", ends)
            drv.notes.append(f"# {len(units)} distinct C function{'s' if len(units) != 1 else ''}: K_<kernel> "
                             "is the function named in `functions` (C source: .c_source)")
            program = drv.load("c-")
            try:
                libs = building.result()
            except kernel_cache.CompileError as e:
                # a compiler without OpenMP (Apple clang), an unknown flag: the program still
                # runs, on numpy, and says why in one line
                first = next((line.strip() for line in str(e).splitlines()[1:] if "error" in line),
                             str(e).splitlines()[0])
                kernel_cache.notice("backend 'c'", f"the C compiler failed ({first[:200]})", "the numpy backend")
                return NumpyBackend().compile(graph)
        bound = {}      # C function name -> its ctypes function, argument types set once
        for k in kernels:
            name = name_of[k.name]
            f = bound.get(name)
            if f is None:
                f = bound[name] = getattr(libs[name], name)
                f.argtypes = [ctypes.c_void_p] * (len(k.inputs) + len(k.outputs)) + [ctypes.c_uint64] * len(k.params)
                f.restype = None
            program.__globals__["K_" + k.name] = f
        program.c_source = _assemble([u for _, u in units])
        program.kernels = kernels
        program.functions = name_of
        program.library = sorted({libs[n]._eagerc_path for n, _ in units})
        program.buffers = []
        program._libs = [libs[n] for n, _ in units]
        return program


register_backend("c", CBackend)
