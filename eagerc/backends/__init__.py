"""eagerc.backends: the switches PyTorch scripts set on `torch.backends`, so they run unchanged.

eagerc computes on numpy (CPU) and cupy (GPU) and has no cuDNN, TF32 or MKL-DNN code paths,
so most switches change nothing here: they are kept (and read back) so that a script that sets
`torch.backends.cudnn.benchmark = True` or `torch.backends.cuda.matmul.allow_tf32 = True`
works, and each submodule's docstring says what the flag means in eagerc. The availability
queries answer truthfully (`cudnn.is_available()` is False: eagerc does not use cuDNN).

`set_float32_matmul_precision` is PyTorch's global: "highest" (the default), "high" or
"medium"; eagerc's float32 matmuls are always full float32 ("highest"), which every
setting allows.
"""
from . import cpu, cuda, cudnn, mkl, mkldnn, mps, openmp, opt_einsum  # noqa: F401

__all__ = ["cpu", "cuda", "cudnn", "mkl", "mkldnn", "mps", "openmp", "opt_einsum",
           "set_float32_matmul_precision", "get_float32_matmul_precision"]

_PRECISIONS = ("highest", "high", "medium")
_precision = ["highest"]


def set_float32_matmul_precision(precision):
    """PyTorch's precision hint for float32 matmuls: "highest", "high" or "medium". eagerc always
    computes them in full float32, which all three allow; the value is kept and read back."""
    if precision not in _PRECISIONS:
        raise RuntimeError(f"set_float32_matmul_precision: invalid precision {precision!r}; expected one of "
                           f"{', '.join(repr(p) for p in _PRECISIONS)}")
    _precision[0] = precision
    cuda.matmul.allow_tf32 = precision != "highest"


def get_float32_matmul_precision():
    return _precision[0]
