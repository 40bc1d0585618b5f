"""torch.backends.openmp: eagerc's C kernels (backend "c") use OpenMP when a C compiler has it."""


def is_available():
    from ..runtime.kernel_cache import find_compiler
    return find_compiler() is not None
