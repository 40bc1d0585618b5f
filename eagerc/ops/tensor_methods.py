"""Tensor methods that are about autograd, devices and dtypes rather than math."""
import weakref

import numpy as np

from .. import dispatch
from ..dispatch import apply, wrap
from ..runtime import dtypes
from ..runtime.device import device as as_device, Device
from ..runtime.ops import OPS
from .._tensor import Tensor, set_requires_grad, leaf_flag_error
from . import creation
from .elementwise import cast
from .inplace import bump_version, check_inplace, commit, drop_history
from ..autograd.formulas import defgrad
from .. import autograd
from ..autograd import engine


def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def detach(self):
    """A new leaf sharing this tensor's memory (and version counter)."""
    t = wrap(self._array)
    if self._vc is None:
        self._vc = [0]
    t._vc = self._vc
    return t


def detach_(self):
    self.grad_fn = None
    self._requires_grad = False
    return self


def requires_grad_(self, requires_grad=True):
    """Like PyTorch: a non-leaf may be asked to require grad (it does), not to stop."""
    if self.grad_fn is not None:
        if not requires_grad:
            raise RuntimeError("requires_grad_: " + leaf_flag_error(False))
    elif requires_grad:
        set_requires_grad(self, "Only")
    else:
        self._requires_grad = False
    return self


def retain_grad(self):
    if self.grad_fn is None:
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        return
    self.grad_fn.retained = weakref.ref(self)


def register_hook(self, hook):
    """hook(grad) -> new grad or None, run when this tensor's gradient is computed."""
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if self.grad_fn is None:  # a leaf's hooks: counted, like post-accumulate hooks (the engine
        return _counted_hook(self, "_hooks", engine.LEAF_HOOKS, hook)  # reads _hooks only while some exist)
    hooks = self.grad_fn.hooks
    if hooks is None:
        hooks = self.grad_fn.hooks = []
    hooks.append(hook)
    return _RemovableHandle(hooks, hook)


def register_post_accumulate_grad_hook(self, hook):
    """hook(tensor), run on a leaf right after its .grad has been accumulated, while the rest of
    backward may still be running (PyTorch's API; DistributedDataParallel starts a gradient
    bucket's all-reduce from here). The engine counts live hooks so that backward without any
    pays nothing for them."""
    if self.grad_fn is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    return _counted_hook(self, "_post_hooks", engine.POST_ACCUMULATE_HOOKS, hook)


def _counted_hook(t, slot, live, hook):
    """Add `hook` to the list in t's `slot`, counted in `live` (one of the engine's counters)
    while it and t live."""
    hooks = getattr(t, slot, None)
    if hooks is None:
        hooks = []
        setattr(t, slot, hooks)
        weakref.finalize(t, _forget_hooks, hooks, live)
    hooks.append(hook)
    live[0] += 1
    return _RemovableHandle(hooks, hook, live)


def _forget_hooks(hooks, live):
    """A dead tensor's hooks stop counting in `live` (one of the engine's counters)."""
    live[0] -= len(hooks)
    hooks.clear()


class _RemovableHandle:
    def __init__(self, hooks, hook, live=None):
        self._hooks, self._hook, self._live = hooks, hook, live

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)
            if self._live is not None:
                self._live[0] -= 1


def _parse_to(args, kwargs):
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("copy", None)
    for a in args:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, (str, Device, int)) and not isinstance(a, bool):
            device = a
        elif a is not None:
            dtype = a
    if kwargs:
        raise TypeError(f"to() got unexpected arguments {sorted(kwargs)}")
    return (as_device(device) if device is not None else None), dtypes.as_dtype(dtype)


def to(self, *args, **kwargs):
    """to(device), to(dtype), to(device, dtype), to(other): returns self when nothing changes."""
    device, dtype = _parse_to(args, kwargs)
    t = self
    if device is not None and device != self.device:
        t = apply(OPS["to_device"], (t,), {"device": str(device)})
    if dtype is not None:
        t = cast(t, dtype)
    return t


def cuda(self, device=None):
    return to(self, "cuda" if device is None else as_device("cuda", device if isinstance(device, int) else None)
              if not isinstance(device, (str, Device)) else device)


def cpu(self):
    return to(self, "cpu")


def type_as(self, other):
    return cast(self, other.dtype)


_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long",
               "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool",
               "bfloat16": "BFloat16"}   # a name only: no legacy class (it would import ml_dtypes)


def _type(self, dtype=None, non_blocking=False):
    """t.type() names its legacy type ("eagerc.FloatTensor"); t.type(x) casts to a dtype, a
    legacy type (eagerc.LongTensor) or its name ("torch.DoubleTensor" too)."""
    if dtype is None:
        return "eagerc." + _TYPE_NAMES[self.dtype.name] + "Tensor"
    if isinstance(dtype, str) and dtype.endswith("Tensor"):
        name = dtype.rsplit(".", 1)[-1][:-len("Tensor")]
        dtype = dtypes.bfloat16 if name == "BFloat16" else _LEGACY[name].dtype
    elif isinstance(dtype, _LegacyType):
        dtype = dtype.dtype
    return cast(self, dtype)


class _LegacyType(type):
    """PyTorch's typed tensor classes (torch.FloatTensor, torch.LongTensor, ...): calling one
    makes a CPU tensor of that dtype, as the legacy constructors do, and isinstance tells a
    tensor's dtype. Tensors themselves are always plain eagerc.Tensor objects."""

    def __call__(cls, *data, device=None):
        return Tensor(*data, dtype=cls.dtype, device=device)

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj.device.type == "cpu"

    def __repr__(cls):
        return f"<class 'eagerc.{cls.__name__}'>"


_LEGACY = {name: _LegacyType(name + "Tensor", (), {"dtype": dtypes.as_dtype(dt)})
           for dt, name in _TYPE_NAMES.items() if dt != "bfloat16"}
LEGACY_TYPES = {cls.__name__: cls for cls in _LEGACY.values()}  # FloatTensor, LongTensor, ...


def pin_memory(self, device=None):
    """PyTorch pins host memory for faster copies to a GPU; without one it refuses, as here.
    With cupy, eagerc's copies do not need it: the tensor itself is returned."""
    from ..runtime.device import cuda_available
    if not cuda_available():
        raise RuntimeError("Cannot access accelerator device when none is available.")
    return self


def is_pinned(self, device=None):
    return False


def storage_offset(self):
    """Elements between the start of the memory this tensor views and its first element."""
    a = root = self._array
    while getattr(root, "base", None) is not None and hasattr(root.base, "shape"):
        root = root.base
    if root is a:
        return 0
    if type(a) is np.ndarray:
        return (a.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // a.itemsize
    return (a.data.ptr - root.data.ptr) // a.itemsize


def zero_(self):
    return fill_(self, 0)


def fill_(self, value):
    check_inplace(self, "fill_")
    if isinstance(value, Tensor):
        if value._requires_grad and dispatch.grad_enabled():
            return commit(self, value.expand(self.shape) * 1, "fill_")
        value = value.item()
    if self.grad_fn is not None and dispatch.grad_enabled() or dispatch.active_tracer() is not None:
        return commit(self, creation.full_like(self, value), "fill_")
    self._array.fill(value)
    bump_version(self, "fill_")
    return self


def copy_(self, src, non_blocking=False):
    check_inplace(self, "copy_")
    if not isinstance(src, Tensor):
        src = creation.tensor(src)
    src = to(src, self.device, self.dtype)
    grad = dispatch.grad_enabled() and (src._requires_grad or self.grad_fn is not None)
    if grad or dispatch.active_tracer() is not None:
        value = src.expand(tuple(self._array.shape))
        if grad and self.grad_fn is not None:
            # PyTorch's CopyBackwards: the overwritten values get a zero gradient (not None), so the
            # old history still reaches its leaves; where() gives that without touching the values
            from .elementwise import where
            return commit(self, where(_false(), self, value), "copy_")
        return commit(self, value.clone(), "copy_")  # (a copy: `value + 0` would make -0.0 +0.0)
    self._array[...] = src._array
    bump_version(self, "copy_")
    drop_history(self)
    return self


_FALSE = None


def _false():
    global _FALSE
    if _FALSE is None:
        _FALSE = creation.tensor(False)
    return _FALSE


def _random_fill(self, name, draw):
    """Overwrite self, in place, with draw(shape, device): a random tensor of its shape."""
    check_inplace(self, name)
    with autograd.no_grad():
        r = draw(tuple(self._array.shape), self.device)
    if dispatch.active_tracer() is not None:
        return commit(self, r, name)
    self._array[...] = r._array
    bump_version(self, name)
    drop_history(self)
    return self


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    return _random_fill(self, "normal_", lambda shape, device: creation.randn(
        shape, dtype=self.dtype, device=device, generator=generator) * std + mean)


def uniform_(self, a=0.0, b=1.0, *, generator=None):
    return _random_fill(self, "uniform_", lambda shape, device: creation.rand(
        shape, dtype=self.dtype, device=device, generator=generator) * (b - a) + a)


def bernoulli_(self, p=0.5, *, generator=None):
    return _random_fill(self, "bernoulli_", lambda shape, device: creation.rand(
        shape, dtype=dtypes.float32, device=device, generator=generator) < p)


def random_(self, low=0, high=None, *, generator=None):
    if high is None:
        low, high = 0, low
    return _random_fill(self, "random_", lambda shape, device: creation.randint(
        low, high, shape, device=device, generator=generator))


def _new(factory):
    def method(self, *size, dtype=None, device=None, requires_grad=False, **kw):
        return factory(*size, dtype=dtype or self.dtype, device=device or self.device,
                       requires_grad=requires_grad, **kw)
    return method


def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    return creation.tensor(data, dtype=dtype or self.dtype, device=device or self.device,
                           requires_grad=requires_grad)


def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    return creation.full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)


_CONVERSIONS = {"float": dtypes.float32, "double": dtypes.float64, "half": dtypes.float16,
                "long": dtypes.int64, "int": dtypes.int32, "short": dtypes.int16, "bool": dtypes.bool,
                "byte": dtypes.uint8, "char": dtypes.int8}


def _conversion(d):
    return lambda self: cast(self, d)


for _name, _d in _CONVERSIONS.items():
    setattr(Tensor, _name, _conversion(_d))


def bfloat16(self):
    """A bfloat16 copy (ml_dtypes is imported on first use, not with the conversions above)."""
    return cast(self, dtypes.bfloat16)

for _f in (bfloat16, backward, detach, detach_, requires_grad_, retain_grad, register_hook,
           register_post_accumulate_grad_hook, to, cuda, cpu,
           type_as, zero_, fill_, copy_, normal_, uniform_, bernoulli_, random_, new_tensor, new_full,
           pin_memory, is_pinned, storage_offset):
    setattr(Tensor, _f.__name__, _f)
Tensor.type = _type
Tensor.new_zeros = _new(creation.zeros)
Tensor.new_ones = _new(creation.ones)
Tensor.new_empty = _new(creation.empty)
Tensor.retains_grad = property(lambda self: self.grad_fn is not None and self.grad_fn.retained is not None)
Tensor.T = property(lambda self: self.permute(*reversed(range(self._array.ndim))))
Tensor.mT = property(lambda self: self.transpose(-2, -1))
Tensor.H = Tensor.T

defgrad("to_device", lambda g, x: g.to(x.device))
