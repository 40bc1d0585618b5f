"""Backend "cuda": fused groups as CUDA kernels (cupy.RawModule), everything else on cupy.

The same pass pipeline, kernel plan and Python driver as backend "c" (fused.py); only
what the driver is bound to changes (its `Binding`):

- kernels: all kernels of a graph are one CUDA source (kernels/cuda_render.py), one
  `cupy.RawModule` compiled with `--fmad=false` (no fused multiply-add: eager's
  rounding); `K_<name>(*arrays)` launches `<name>` with `cuda_render.launch_config(kernel)`
  (256 threads; grid-stride elementwise loops, one block per row for row kernels, one
  thread per result for sums over leading dims, up to 1024 blocks for a reduction over
  everything). cupy caches compiled modules on disk by source, so a second process
  compiles nothing.
- arrays: `asarray` is `cupy.asarray` (contiguous, recorded dtype), outputs `cupy.empty`
  or buffers reused by every call; data pointers are the cupy arrays themselves
  (RawKernel takes them), random seeds/offsets `numpy.uint64`. Optimizer updates are not
  written in place here (cupy arrays have no `writeable` flag for the aliasing check).
- other nodes call their op's cupy kernel (`OPS[op].kernel(cupy)`): matmul goes to cuBLAS
  through cupy.

Importing this module needs no cupy (it registers "cuda"); compiling a graph without cupy
raises a RuntimeError that says so.
"""
import numpy as np

from . import register_backend
from .driver import Binding
from .fused import PIPELINE, SINGLETON_MIN, driver, plan_kernels, set_inplace
from ..kernels.cuda_render import launch_config, render_cuda

__all__ = ["CudaBackend", "import_cupy"]


def import_cupy():
    try:
        import cupy
    except ImportError as e:
        raise RuntimeError("eagerc backend 'cuda' needs cupy (pip install cupy-cuda12x) and an "
                           f"NVIDIA GPU: {e}") from None
    return cupy


def _launcher(fn, grid, block):
    if grid == 0:
        return lambda *arrays: None
    grid, block = (grid,), (block,)
    return lambda *arrays: fn(grid, block, arrays)


class CudaBackend:
    name = "cuda"
    supports_dynamic = False   # kernels are specialised to static shapes

    # no fused multiply-add: every operation rounds as numpy's ufuncs do (as backend "c")
    OPTIONS = ("--fmad=false",)
    pipeline = PIPELINE   # the same decompositions and fusion as backend "c"

    def __init__(self, singleton_min=SINGLETON_MIN, options=()):
        self.singleton_min = singleton_min
        self.options = self.OPTIONS + tuple(options)   # NVRTC options for cupy.RawModule

    def compile(self, graph):
        cp = import_cupy()
        plan = plan_kernels(graph, self.singleton_min)
        kernels = [k for _, _, k in plan]
        # unfused ops: their cupy kernels; arrays, constants and buffers on the GPU; kernel params
        # (a fused random node's seed / offset) go to RawKernel as uint64 scalars
        binding = Binding("cuda_backend", kernel="OPS[{op!r}].kernel(cp)", to_device=cp.asarray,
                          globs={"cp": cp, "asarray": cp.asarray, "A_empty": cp.empty, "ptr": lambda a: a,
                                 "A_u64": np.uint64})
        drv = driver(graph, plan, binding, "CUDA", set_inplace(graph, plan, inplace=False))
        cuda_source = render_cuda(kernels) if kernels else ""
        module = None
        if kernels:
            module = cp.RawModule(code=cuda_source, options=self.options)
            for k in kernels:
                drv.globs["K_" + k.name] = _launcher(module.get_function(k.name), *launch_config(k))
        program = drv.load("cuda-")
        program.cuda_source = cuda_source
        program.kernels = kernels
        program.buffers = []
        program._module = module
        return program


register_backend("cuda", CudaBackend)
