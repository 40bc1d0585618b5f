"""The public frontend namespace (what `eagerc.<name>` resolves to)."""
from .runtime import _load_all  # noqa: F401  (registers every op)
from .runtime.dtypes import (bool, uint8, int8, int16, int32, int64, float16, float32, float64,  # noqa: F401
                             DType as dtype, promote_types, get_default_dtype, set_default_dtype)
from .runtime.device import Device as device_type, device  # noqa: F401
from .runtime.typeinfo import finfo, iinfo  # noqa: F401
from ._tensor import Tensor, Size  # noqa: F401
from . import dispatch  # noqa: F401
from . import ops as _ops  # noqa: F401  (every op family: functions, Tensor methods, derivatives)
from .ops.tensor_methods import LEGACY_TYPES as _LEGACY_TYPES
globals().update(_LEGACY_TYPES)   # FloatTensor, LongTensor, ... (PyTorch's legacy typed tensors)
from .ops.creation import *  # noqa: F401,F403
from .ops.elementwise import *  # noqa: F401,F403  (one function per declared elementwise op, and aliases)
from .ops.elementwise import result_dtype  # noqa: F401
from .ops.reduction import (  # noqa: F401
    sum, mean, prod, max, min, amax, amin, argmax, argmin, var, std, var_mean, std_mean, logsumexp,
    norm, all, any, cumsum, cumprod, count_nonzero, logcumsumexp)
from .ops.shape import (  # noqa: F401
    reshape, expand, expand_as, broadcast_to, permute, transpose, swapaxes, swapdims, t, squeeze,
    unsqueeze, flatten, contiguous)
from .ops.shape import *  # noqa: F401,F403
from .ops.indexing import *  # noqa: F401,F403
from .ops.joining import *  # noqa: F401,F403
from .ops.linalg import *  # noqa: F401,F403
from .ops.sorting import *  # noqa: F401,F403
from . import autograd  # noqa: F401
from .autograd import no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled  # noqa: F401
from . import cuda  # noqa: F401
from . import amp  # noqa: F401
from .amp.autocast_mode import (  # noqa: F401  (torch.autocast and PyTorch's autocast-state functions)
    autocast, is_autocast_enabled, is_autocast_cpu_enabled, set_autocast_enabled, set_autocast_cpu_enabled,
    get_autocast_dtype, get_autocast_cpu_dtype, get_autocast_gpu_dtype, set_autocast_dtype,
    set_autocast_cpu_dtype, set_autocast_gpu_dtype, is_autocast_cache_enabled, set_autocast_cache_enabled,
    clear_autocast_cache)
from .backends import set_float32_matmul_precision, get_float32_matmul_precision  # noqa: F401
from .serialization import save, load  # noqa: F401
from .printing import set_printoptions, get_printoptions  # noqa: F401
from .runtime.threads import (set_num_threads, get_num_threads, set_num_interop_threads,  # noqa: F401
                              get_num_interop_threads)


def is_tensor(obj):
    return isinstance(obj, Tensor)


def numel(input):
    return input.numel()


def is_floating_point(input):
    return input.is_floating_point()


def result_type(a, b):
    return result_dtype(a, b)


long, int, float, double, half, short = int64, int32, float32, float64, float16, int16  # noqa: A001
float16, bool_ = float16, bool


# nn's fused ops (softmax, layer_norm, cross_entropy, conv...) get their derivatives and
# Tensor methods when nn.functional is imported; the frontend is incomplete without them.
from .nn import functional as _nn_functional  # noqa: E402,F401
from .nn.functional import softmax, log_softmax  # noqa: E402,F401
from .nn.functional_rnn import lstm_cell, gru_cell, rnn_tanh_cell, rnn_relu_cell  # noqa: E402,F401
# torch.<name> forms of nn.functional's convolutions and shuffles (the same signatures)
from .nn.functional import (conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,  # noqa: E402,F401
                            conv_transpose3d, pixel_shuffle, pixel_unshuffle, channel_shuffle, native_channel_shuffle)

# every torch.Tensor name still missing says so when read (after all methods are attached)
from ._missing import mark_missing_methods  # noqa: E402
mark_missing_methods(Tensor)

# The compiler is the layer above: eager use never imports it. `eagerc.compile` and
# `eagerc.export` load it on first use (PEP 562); so does `eagerc.bfloat16` its ml_dtypes.
_LAZY = {"compile": ("eagerc.compiler.compile", "compile"), "export": ("eagerc.compiler.export", "export"),
         "bfloat16": ("eagerc.runtime.dtypes", "bfloat16")}


def __getattr__(name):
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'eagerc._api' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(home[0]), home[1])
    globals()[name] = value
    return value


__all__ = sorted([n for n in dir() if not n.startswith("_")] + list(_LAZY))
