"""Autocast: regions where listed ops run in a lower-precision dtype (PyTorch's torch.autocast).

    with eagerc.autocast(device_type="cpu", dtype=eagerc.bfloat16):
        loss = loss_fn(model(x), y)     # linear/matmul/conv in bfloat16, losses in float32

State. Each thread's autocast state is one immutable `AutocastState` in the dispatch.Modes
slot `autocast` (per thread, like grad mode; see dispatch.py's docstring): which devices
autocast and to which dtype, the configured dtype of each device, whether weight casts are
cached, and the nesting depth. The slot is None for the default state (nothing enabled,
default dtypes), so `apply` pays one slot test when autocast was never used. Entering a
region publishes a new state; leaving it restores the previous one.

Policy. Which op does what is data (lists.py). For a declared op on a list, `apply` calls
`AutocastState.cast_args` before the kernel; for a frontend function on a list (a loss, addmm,
scaled_dot_product_attention), `@autocast_op(name)` casts its inputs on entry and runs its body
with autocast off, as PyTorch's wrappers exclude the autocast key below them. The casts are
ordinary `cast` ops: autograd differentiates them (gradients come back in each input's dtype),
the tracer records them, so a compiled function traced under autocast holds them in its graph;
the compile key includes `AutocastState.key`, so another autocast state retraces.

Cache. As in PyTorch, the low-precision cast of a float32 leaf that requires grad (a weight)
is made once per outermost region and reused by later ops (cache_enabled=True), and dropped
when the outermost region exits. eagerc also drops an entry when the leaf's version counter
moved (an in-place update inside the region), and never caches while tracing (a trace must
record its own casts).
"""
import copy
import functools
import warnings
import weakref

import numpy as np

from .. import dispatch
from .._tensor import Tensor
from ..runtime import dtypes
from ..runtime.dtypes import FLOATING_KINDS
from ..runtime.ops import OPS
from . import lists

__all__ = ["autocast", "autocast_op", "will_autocast", "AutocastState", "is_autocast_available", "is_autocast_enabled",
           "is_autocast_cpu_enabled", "set_autocast_enabled", "set_autocast_cpu_enabled",
           "get_autocast_dtype", "get_autocast_cpu_dtype", "get_autocast_gpu_dtype", "set_autocast_dtype",
           "set_autocast_cpu_dtype", "set_autocast_gpu_dtype", "is_autocast_cache_enabled",
           "set_autocast_cache_enabled", "clear_autocast_cache"]

_ndarray = np.ndarray
_modes = dispatch.modes   # the thread's Modes (one C call)


def _low_dtypes():
    """The dtypes autocast may lower to: float16, and bfloat16 where eagerc has it."""
    bf16 = getattr(dtypes, "bfloat16", None)
    return (dtypes.float16,) if bf16 is None else (dtypes.float16, bf16)


def _default_dtype(device):
    """PyTorch's defaults: bfloat16 on CPU, float16 on CUDA (None: CPU without bfloat16)."""
    return dtypes.float16 if device == "cuda" else getattr(dtypes, "bfloat16", None)


def _device_type(device_type):
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type).__name__}`")
    if device_type not in lists.DEVICES:
        raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}' "
                           f"(eagerc autocasts on {', '.join(repr(d) for d in lists.DEVICES)})")
    return device_type


class AutocastState:
    """One thread's autocast settings; never changed once published (a change makes a new one).

    `enabled`: {device: DType} for each device that autocasts now; `dtypes`: {device: DType}
    the configured dtype of every device (get_autocast_dtype); `cache_enabled`; `depth`: how
    many autocast regions are open; `cache`: {id(weight): (weakref, version, cast)}, shared by
    the nested regions of one outermost region; `key`: what a compiled call's key holds."""
    __slots__ = ("enabled", "dtypes", "cache_enabled", "depth", "cache", "key")

    def __init__(self, enabled, dtypes_, cache_enabled, depth, cache):
        self.enabled, self.dtypes, self.cache_enabled = enabled, dtypes_, cache_enabled
        self.depth, self.cache = depth, cache
        self.key = tuple(sorted((d, t.name) for d, t in enabled.items())) or None

    def replace(self, **changes):
        f = {"enabled": self.enabled, "dtypes": self.dtypes, "cache_enabled": self.cache_enabled,
             "depth": self.depth, "cache": self.cache}
        f.update(changes)
        return AutocastState(f["enabled"], f["dtypes"], f["cache_enabled"], f["depth"], f["cache"])

    def is_default(self):
        return (not self.enabled and self.depth == 0 and self.cache_enabled
                and all(t is _default_dtype(d) for d, t in self.dtypes.items()))

    # ---------------------------------------------------------------- casting
    def policy(self, name, tensor):
        """(category, low dtype, device) for `name` on `tensor`'s device, or None (no casting)."""
        device = "cpu" if type(tensor._array) is _ndarray else "cuda"
        low = self.enabled.get(device)
        if low is None:
            return None
        cat = lists.category(device, name)
        return None if cat is None else (cat, low, device)

    def cast_args(self, op, args):
        """`args` of declared op `op` with autocast's casts applied (dispatch.apply calls this)."""
        first = next((a for a in args if isinstance(a, Tensor)), None)
        if first is None:
            return args
        p = self.policy(op.name, first)
        return args if p is None else self._cast_all(op.name, p, args, {})[0]

    def _cast_all(self, name, policy, args, kwargs):
        cat, low, device = policy
        if cat == "banned":
            raise RuntimeError(_BANNED.get(name, f"{name} is unsafe to autocast"))
        tensors = [t for t in _tensors(args) + _tensors(kwargs.values()) if _eligible(t, device)]
        if cat == "lower":
            to = low
        elif cat == "fp32":
            to = dtypes.float32
        else:  # promote: float32 wins over the low dtype (PyTorch's autocast::prioritize)
            to = low
            for t in tensors:
                d = dtypes.from_np(t._array.dtype)
                if d is dtypes.float32:
                    to = d
                elif d is not low:
                    raise RuntimeError(f"{name} under autocast({device!r}, dtype={low.name}): cannot promote a "
                                       f"{d.name} input with the {low.name} ones (PyTorch: Unexpected floating "
                                       "ScalarType in at::autocast::prioritize); cast it first")
        if all(t._array.dtype == to.np for t in tensors):
            return args, kwargs

        def conv(v):
            if isinstance(v, Tensor):
                return self.cast(v, to, low) if _eligible(v, device) else v
            if type(v) in (list, tuple):
                return type(v)(conv(x) for x in v)
            return v
        return tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}

    def cast(self, t, to, low):
        """t in dtype `to`; a weight's low-precision cast comes from the cache when allowed."""
        if t._array.dtype == to.np:
            return t
        if not (self.cache_enabled and to is low and t._requires_grad and t.grad_fn is None
                and t._array.dtype == np.float32 and getattr(t, "_base", None) is None
                and dispatch.active_tracer() is None):
            return t.to(to)
        version = t._vc[0] if t._vc is not None else 0
        hit = self.cache.get(id(t))
        if hit is not None and hit[0]() is t and hit[1] == version and hit[2]._array.dtype == to.np:
            return hit[2]
        out = t.to(to)
        self.cache[id(t)] = (weakref.ref(t), version, out)
        return out

    def run(self, name, fn, args, kwargs):
        """fn(*args, **kwargs) for frontend function `name`: inputs cast, the body with autocast off."""
        first = next(iter(_tensors(args) + _tensors(kwargs.values())), None)
        p = None if first is None else self.policy(name, first)
        if p is None:
            return fn(*args, **kwargs)
        args, kwargs = self._cast_all(name, p, args, kwargs)
        dispatch.set_autocast_state(None)
        try:
            return fn(*args, **kwargs)
        finally:
            dispatch.set_autocast_state(self)


_BANNED = {"binary_cross_entropy": (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.")}


def _tensors(values):
    out = []
    for v in values:
        if isinstance(v, Tensor):
            out.append(v)
        elif type(v) in (list, tuple):
            out.extend(x for x in v if isinstance(x, Tensor))
    return out


def _eligible(t, device):
    """PyTorch's is_eligible: a floating tensor on the autocast device, float64 excepted."""
    d = t._array.dtype
    return d.kind in FLOATING_KINDS and d != np.float64 and (type(t._array) is _ndarray) == (device == "cpu")


# ---------------------------------------------------------------- the thread's state

def _state():
    s = dispatch.autocast_state()
    if s is None:
        s = AutocastState({}, {d: _default_dtype(d) for d in lists.DEVICES}, True, 0, {})
    return s


def _publish(s):
    dispatch.set_autocast_state(None if s.is_default() else s)


def autocast_op(name):
    """Mark frontend function `fn` as PyTorch's op `name` for autocast: under autocast its
    inputs are cast per lists.py and its body runs with autocast off. Outside autocast the
    wrapper costs one slot test."""
    def deco(fn):
        FUNCTIONS[name] = fn

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            state = _modes().autocast
            if state is None or not state.enabled:
                return fn(*args, **kwargs)
            return state.run(name, fn, args, kwargs)
        return wrapper
    return deco


FUNCTIONS = {}  # name -> the frontend function marked with @autocast_op(name)


def will_autocast(name, tensor):
    """Whether op `name` on `tensor` gets autocast's casts here (a frontend check of mixed
    dtypes lets such a call through: the casts make them one)."""
    state = dispatch.modes().autocast
    return state is not None and isinstance(tensor, Tensor) and state.policy(name, tensor) is not None


class autocast:
    """A region (context manager, or decorator) where ops on lists.py's lists autocast.

    `device_type` "cpu" or "cuda"; `dtype` the low dtype (default: get_autocast_dtype(device),
    bfloat16 on CPU and float16 on CUDA, as PyTorch); `enabled=False` turns autocast off for
    that device inside the region (also inside an enabled one); `cache_enabled` caches weight
    casts (default: is_autocast_cache_enabled()). Unsupported settings warn and disable the
    region, as PyTorch does (CUDA without a GPU, a dtype that is not a low float dtype)."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        self.device = _device_type(device_type)
        self._enabled = bool(enabled)
        self.fast_dtype = get_autocast_dtype(self.device) if dtype is None else dtypes.as_dtype(dtype)
        self._cache_enabled = is_autocast_cache_enabled() if cache_enabled is None else bool(cache_enabled)
        if not self._enabled:
            return
        if self.device == "cuda":
            from ..runtime.device import cuda_available
            if not cuda_available():
                warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling",
                              UserWarning, stacklevel=2)
                self._enabled = False
                return
        if self.fast_dtype is None:
            raise RuntimeError("autocast('cpu') lowers to bfloat16 by default, and this eagerc has no "
                               "bfloat16 dtype: pass dtype=eagerc.float16")
        if self.fast_dtype not in _low_dtypes():
            warnings.warn(f"In {self.device.upper()} autocast, but the target dtype {self.fast_dtype.name} is not "
                          f"supported. Disabling autocast.\n{self.device.upper()} Autocast only supports dtype of "
                          f"{', '.join(d.name for d in _low_dtypes())} currently.", UserWarning, stacklevel=2)
            self._enabled = False

    def __enter__(self):
        self._prev = dispatch.autocast_state()
        s = _state()
        enabled = dict(s.enabled)
        if self._enabled:
            enabled[self.device] = self.fast_dtype
        else:
            enabled.pop(self.device, None)
        types = dict(s.dtypes)
        if self.fast_dtype is not None:
            types[self.device] = self.fast_dtype
        cache = s.cache if s.depth else {}
        _publish(s.replace(enabled=enabled, dtypes=types, cache_enabled=self._cache_enabled,
                           depth=s.depth + 1, cache=cache))
        return self

    def __exit__(self, *exc):
        leaving = _state()
        dispatch.set_autocast_state(self._prev)
        if leaving.depth <= 1:  # the outermost region: its cached casts go (PyTorch: clear_cache)
            leaving.cache.clear()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def decorated(*args, **kwargs):
            with copy.copy(self):  # a copy per call: a recursive call keeps its own previous state
                return func(*args, **kwargs)
        return decorated


# ---------------------------------------------------------------- PyTorch's functions

def is_autocast_available(device_type):
    return device_type in lists.DEVICES


def is_autocast_enabled(device_type=None):
    """Whether `device_type` autocasts here; without an argument, CUDA (PyTorch's meaning)."""
    return _device_type("cuda" if device_type is None else device_type) in _state().enabled


def is_autocast_cpu_enabled():
    return is_autocast_enabled("cpu")


def set_autocast_enabled(device_type, enabled=None):
    """set_autocast_enabled(device_type, enabled), or set_autocast_enabled(enabled) for CUDA."""
    if enabled is None:
        device_type, enabled = "cuda", device_type
    device = _device_type(device_type)
    s = _state()
    en = dict(s.enabled)
    if enabled:
        if s.dtypes[device] is None:
            raise RuntimeError("autocast('cpu') needs a dtype: this eagerc has no bfloat16")
        en[device] = s.dtypes[device]
    else:
        en.pop(device, None)
    _publish(s.replace(enabled=en))


def set_autocast_cpu_enabled(enabled):
    set_autocast_enabled("cpu", enabled)


def get_autocast_dtype(device_type):
    return _state().dtypes[_device_type(device_type)]


def get_autocast_cpu_dtype():
    return get_autocast_dtype("cpu")


def get_autocast_gpu_dtype():
    return get_autocast_dtype("cuda")


def set_autocast_dtype(device_type, dtype):
    device = _device_type(device_type)
    dtype = dtypes.as_dtype(dtype)
    s = _state()
    en = dict(s.enabled)
    if device in en:
        en[device] = dtype
    _publish(s.replace(dtypes=dict(s.dtypes, **{device: dtype}), enabled=en))


def set_autocast_cpu_dtype(dtype):
    set_autocast_dtype("cpu", dtype)


def set_autocast_gpu_dtype(dtype):
    set_autocast_dtype("cuda", dtype)


def is_autocast_cache_enabled():
    return _state().cache_enabled


def set_autocast_cache_enabled(enabled):
    _publish(_state().replace(cache_enabled=bool(enabled)))


def clear_autocast_cache():
    _state().cache.clear()


lists.attach(OPS)
