"""torch.backends.cudnn: eagerc does not use cuDNN, so `is_available()` is False and the flags
(enabled, benchmark, deterministic, allow_tf32) are kept only to be read back. eagerc's kernels
are deterministic whatever `deterministic` says."""
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True
benchmark_limit = 10


def is_available():
    return False


def version():
    return None
