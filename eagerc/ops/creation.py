"""Tensor creation: tensor, zeros, ones, full, arange, rand, randn, ... and *_like."""
import math
import numbers

import numpy as np

from .. import dispatch
from ..dispatch import create, wrap
from ..runtime import dtypes, random as rng
from ..runtime.device import CPU, device as as_device, device_of_array, xp_for
from ..runtime.ops import OPS
from ..runtime.ops.creation import check_count, check_range, check_size
from .._tensor import Tensor

__all__ = ["tensor", "as_tensor", "from_numpy", "from_dlpack", "zeros", "ones", "full", "empty",
           "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
           "randint_like", "arange", "linspace", "eye", "rand", "randn", "randint", "randperm",
           "manual_seed", "Generator", "default_generator", "seed", "initial_seed",
           "get_rng_state", "set_rng_state"]

Generator = rng.Generator
default_generator = rng.default_generator


def manual_seed(s):
    """Seed the default generator (CPU and CUDA share one counter-based stream)."""
    return default_generator.manual_seed(int(s))


def seed():
    return default_generator.seed()


def initial_seed():
    return default_generator.initial_seed()


def get_rng_state():
    return wrap(default_generator.get_state())


def set_rng_state(state):
    default_generator.set_state(np.asarray(state))


def _infer_dtype(data):
    """PyTorch's dtype for Python data: floats -> default float, ints -> int64, bools -> bool."""
    if isinstance(data, bool):
        return dtypes.bool
    if isinstance(data, numbers.Integral):
        return dtypes.int64
    if isinstance(data, numbers.Real):
        return dtypes.get_default_dtype()
    return None


def _nested_dtype(data):
    cat = -1
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, Tensor):
            return None  # numpy decides from the tensor's dtype
        elif isinstance(x, (bool, np.bool_)):
            cat = max(cat, 0)
        elif isinstance(x, numbers.Integral):
            cat = max(cat, 1)
        elif isinstance(x, numbers.Real):
            cat = max(cat, 2)
        else:
            return None
    return (dtypes.bool, dtypes.int64, dtypes.get_default_dtype())[cat] if cat >= 0 else dtypes.get_default_dtype()


def to_array(data, dtype=None, device=None, copy=True):
    """An array on `device` (numpy or cupy) holding `data`, with PyTorch's dtype inference."""
    dtype = dtypes.as_dtype(dtype)
    dev = as_device(device) if device is not None else None
    if isinstance(data, Tensor):
        arr = data._array
    elif isinstance(data, np.ndarray) or hasattr(data, "__cuda_array_interface__"):
        arr = data
    else:
        inferred = _nested_dtype(data) if isinstance(data, (list, tuple)) else _infer_dtype(data)
        arr = np.array(data, dtype=(dtype or inferred).np if (dtype or inferred) else None)
        if arr.dtype == np.float64 and dtype is None and inferred is None:
            arr = arr.astype(dtypes.get_default_dtype().np)
        copy = False
    if arr.dtype not in dtypes._BY_NP and arr.dtype.name == "bfloat16":
        dtypes.from_np(arr.dtype)    # an ml_dtypes array met before eagerc.bfloat16: registers it
    if arr.dtype not in dtypes._BY_NP:
        if arr.dtype.kind == "f":    # float128...
            arr = arr.astype(np.float32)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"tensor: can't convert data of dtype {arr.dtype}; supported dtypes are "
                            f"{', '.join(d.name for d in dtypes.ALL)}")
        copy = False
    src_dev = device_of_array(arr)
    target = dev or src_dev
    if target != src_dev:
        arr = _move(arr, target)
        copy = False
    if dtype is not None and arr.dtype != dtype.np:
        arr = arr.astype(dtype.np)
        copy = False
    if copy:
        arr = arr.copy()
    return arr


def _move(arr, target):
    if target.type == "cpu":
        return arr.get()
    cp = xp_for(target)
    with cp.cuda.Device(target.index or 0):
        return cp.asarray(arr)


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor copying `data` (a list, scalar, numpy array or Tensor)."""
    if isinstance(data, Tensor):  # a copy, as data.detach().clone() (recorded when traced)
        t = data.detach().clone()
        if dtype is not None or device is not None:
            t = t.to(device=device, dtype=dtype)
    else:
        t = _from_data(data, dtype, device, True)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _from_data(data, dtype, device, copy):
    """A tensor made from Python or numpy data. Traced, a numpy array is a graph input read
    again at every call, so the compiled function sees later changes to it."""
    arr = to_array(data, dtype, device, copy=copy)
    t = wrap(arr)
    tracer = dispatch.active_tracer()
    if tracer is not None and isinstance(data, np.ndarray) and arr is not data:
        tracer.array_input(t, data, lambda a: to_array(a, dtype, device, copy=True))
    return t


def as_tensor(data, dtype=None, device=None):
    """Like tensor, but shares memory with numpy arrays and tensors when it can."""
    if isinstance(data, Tensor) and dtype is None and device is None:
        return data
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype)
    return _from_data(data, dtype, device, False)


def from_numpy(array):
    """A tensor sharing memory with `array` (zero-copy)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray (got {type(array).__name__})")
    dtypes.from_np(array.dtype)
    return wrap(array)


def from_dlpack(ext):
    """Zero-copy import of any DLPack-capable array (numpy, cupy, torch, ...)."""
    if hasattr(ext, "__dlpack_device__"):
        dev_type, dev_id = ext.__dlpack_device__()
        if int(dev_type) == 1:  # kDLCPU
            arr = np.from_dlpack(ext)
        else:
            arr = xp_for(as_device("cuda", int(dev_id))).from_dlpack(ext)
        dtypes.from_np(arr.dtype)  # refuse dtypes eagerc has no DType for (complex, uint16, ...)
        return wrap(arr)
    raise TypeError(f"from_dlpack: {type(ext).__name__} does not support DLPack")


def _shape(size, fn):
    """The size arguments of `fn` (`zeros(2, 3)` or `zeros((2, 3))`) as a tuple of ints."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return check_size(fn, size)


def _dev(device):
    return CPU if device is None else as_device(device)


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)  # refuses integer and bool dtypes, like tensor(..., requires_grad=True)
    return t


_FULL = OPS["full"]


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    dtype = dtypes.as_dtype(dtype) or _infer_dtype(fill_value) or dtypes.get_default_dtype()
    shape = _shape((size,), "full")  # full((2, 3), v), or full(3, v) for one dimension
    t = create(OPS["full"], {"shape": shape, "value": fill_value, "dtype": dtype.name}, _dev(device))
    return _finish(t, requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return full(_shape(size, "zeros"), 0, dtype=dtype or dtypes.get_default_dtype(), device=device,
                requires_grad=requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return full(_shape(size, "ones"), 1, dtype=dtype or dtypes.get_default_dtype(), device=device,
                requires_grad=requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):
    return zeros(_shape(size, "empty"), dtype=dtype, device=device, requires_grad=requires_grad)


def zeros_like(x, *, dtype=None, device=None, requires_grad=False):
    return zeros(tuple(x._array.shape), dtype=dtype or x.dtype, device=device or x.device,
                 requires_grad=requires_grad)


def ones_like(x, *, dtype=None, device=None, requires_grad=False):
    return full_like(x, 1, dtype=dtype, device=device, requires_grad=requires_grad)


def empty_like(x, *, dtype=None, device=None, requires_grad=False):
    return zeros_like(x, dtype=dtype, device=device, requires_grad=requires_grad)


def full_like(x, fill_value, *, dtype=None, device=None, requires_grad=False):
    d = x._array
    if dtype is None and device is None and isinstance(fill_value, (int, float)):
        # x's shape, dtype and device are valid already: straight to the op (backward's implicit
        # root gradient is ones_like(loss))
        dev = CPU if type(d) is np.ndarray else device_of_array(d)
        t = create(_FULL, {"shape": d.shape, "value": fill_value, "dtype": dtypes.from_np(d.dtype).name}, dev)
        return _finish(t, requires_grad)
    return full(tuple(x._array.shape), fill_value, dtype=dtype or x.dtype, device=device or x.device,
                requires_grad=requires_grad)


def rand_like(x, *, dtype=None, device=None, generator=None):
    return rand(tuple(x._array.shape), dtype=dtype or x.dtype, device=device or x.device, generator=generator)


def randn_like(x, *, dtype=None, device=None, generator=None):
    return randn(tuple(x._array.shape), dtype=dtype or x.dtype, device=device or x.device, generator=generator)


def randint_like(x, low=0, high=None, *, dtype=None, device=None, generator=None):
    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(x._array.shape), dtype=dtype or x.dtype, device=device or x.device,
                   generator=generator)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = dtypes.int64 if all(isinstance(v, numbers.Integral) for v in (start, end, step)) \
            else dtypes.get_default_dtype()
    dtype = dtypes.as_dtype(dtype)
    check_range(start, end, step)
    t = create(OPS["arange"], {"start": start, "end": end, "step": step, "dtype": dtype.name}, _dev(device))
    return _finish(t, requires_grad)


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    dtype = dtypes.as_dtype(dtype) or dtypes.get_default_dtype()
    steps = check_count("linspace", "steps", steps, "number of steps must be non-negative")
    t = create(OPS["linspace"], {"start": start, "end": end, "steps": steps, "dtype": dtype.name},
               _dev(device))
    return _finish(t, requires_grad)


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False):
    dtype = dtypes.as_dtype(dtype) or dtypes.get_default_dtype()
    n = check_count("eye", "n", n, "n must be greater or equal to 0")
    m = n if m is None else check_count("eye", "m", m, "m must be greater or equal to 0")
    t = create(OPS["eye"], {"n": n, "m": m, "dtype": dtype.name}, _dev(device))
    return _finish(t, requires_grad)


def reserve_words(generator, words):
    """(generator, offset): the next `words` words of the stream of `generator` (None: the
    default one), for a random op's seed and offset attributes."""
    gen = generator or default_generator
    offset = gen.next_offset(words)
    tracer = dispatch.active_tracer()
    if tracer is not None:  # a compiled graph must draw fresh offsets each call
        tracer.rng_source = (gen, words)
    return gen, offset


def _draw(name, attrs, numel, kind, device, generator, **extra):
    """Op `name` drawing `numel` values of distribution `kind` (random.words_used) from the
    generator's next words: their offset joins the attributes."""
    gen, offset = reserve_words(generator, rng.words_used(kind, numel))
    return create(OPS[name], {**attrs, "seed": gen.initial_seed(), "offset": offset, **extra}, _dev(device))


def _draw_shape(name, shape, dtype, kind, device, generator, **extra):
    return _draw(name, {"shape": shape, "dtype": dtype.name}, math.prod(shape), kind, device, generator, **extra)


def _float_dtype(dtype, fn):
    dtype = dtypes.as_dtype(dtype) or dtypes.get_default_dtype()
    if not dtype.is_floating_point:
        raise TypeError(f"{fn}: expected a floating dtype, got {dtype}")
    return dtype


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform [0, 1) from the counter-based stream (see docs/random.md)."""
    t = _draw_shape("uniform", _shape(size, "rand"), _float_dtype(dtype, "rand"), "uniform", device, generator)
    return _finish(t, requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    t = _draw_shape("normal", _shape(size, "randn"), _float_dtype(dtype, "randn"), "normal", device, generator)
    return _finish(t, requires_grad)


def randint(low, high=None, size=None, *, generator=None, dtype=None, device=None):
    if size is None:  # randint(high, size)
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if high <= low:
        raise RuntimeError(f"randint: expected low < high, got low={low}, high={high}")
    dtype = dtypes.as_dtype(dtype) or dtypes.int64
    return _draw_shape("randint", _shape((size,) if isinstance(size, int) else size, "randint"), dtype, "integers",
                       device, generator, low=int(low), high=int(high))


def randperm(n, *, generator=None, dtype=None, device=None):
    dtype = dtypes.as_dtype(dtype) or dtypes.int64
    n = check_count("randperm", "n", n)
    return _draw("randperm", {"n": n, "dtype": dtype.name}, n, "permutation", device, generator)
