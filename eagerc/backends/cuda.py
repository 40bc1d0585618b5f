"""torch.backends.cuda: matmul precision flags and the scaled-dot-product-attention kernel switches.

eagerc's CUDA matmuls go through cupy (cuBLAS) in full precision; TF32 and reduced-precision
reductions are not used whatever these flags say. The SDPA switches choose among PyTorch's
flash / memory-efficient / math kernels; eagerc has one implementation (the math one), so
enabling or disabling the others changes nothing."""
import contextlib


class _Matmul:
    """`torch.backends.cuda.matmul`: allow_tf32 (default False) and the reduced-precision flags."""

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True
        self.allow_fp16_accumulation = False

    def __repr__(self):
        return f"<eagerc.backends.cuda.matmul allow_tf32={self.allow_tf32}>"


matmul = _Matmul()
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built():
    """True when eagerc can run on CUDA here (cupy installed)."""
    from ..runtime.device import cupy_or_none
    return cupy_or_none() is not None


def flash_sdp_enabled():
    return _sdp["flash"]


def mem_efficient_sdp_enabled():
    return _sdp["mem_efficient"]


def math_sdp_enabled():
    return _sdp["math"]


def cudnn_sdp_enabled():
    return _sdp["cudnn"]


def enable_flash_sdp(enabled):
    _sdp["flash"] = bool(enabled)


def enable_mem_efficient_sdp(enabled):
    _sdp["mem_efficient"] = bool(enabled)


def enable_math_sdp(enabled):
    _sdp["math"] = bool(enabled)


def enable_cudnn_sdp(enabled):
    _sdp["cudnn"] = bool(enabled)


def is_flash_attention_available():
    return False


@contextlib.contextmanager
def sdp_kernel(enable_flash=True, enable_math=True, enable_mem_efficient=True, enable_cudnn=True):
    """The (deprecated) context manager choosing SDPA kernels; restores the switches on exit."""
    old = dict(_sdp)
    _sdp.update(flash=enable_flash, math=enable_math, mem_efficient=enable_mem_efficient, cudnn=enable_cudnn)
    try:
        yield
    finally:
        _sdp.update(old)
