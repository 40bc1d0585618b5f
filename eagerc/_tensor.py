"""The Tensor: an ndarray (numpy or cupy) plus what autograd needs to know about it.

This module holds the data model only -- storage, properties, conversions, printing.
Operations are attached by the op families in `eagerc/ops/` (each registers its
functions as methods), so this file stays readable and every op still goes through
`eagerc.dispatch.apply`.
"""
import math
import warnings

import numpy as np

from .runtime.dtypes import FLOATING_KINDS
from .runtime import dtypes
from .runtime.device import CPU, device_of_array

__all__ = ["Tensor", "wrap"]

_new = object.__new__


class Tensor:
    """A multi-dimensional array that records operations for automatic differentiation.

    Slots: `_array` (the numpy or cupy array), `_requires_grad`, `_grad`, `grad_fn` (the
    Node that made it, None for leaves) and `_vc`, a version counter shared with views (a
    one-item list, created lazily on the first in-place op or view).

    `requires_grad`, `grad` and `data` are properties over the slots: users get PyTorch's
    behaviour (only float tensors can require grad, only leaves can change the flag,
    reading `.grad` of a non-leaf warns, `.data` is a Tensor sharing the memory), while
    `dispatch.apply`, the engine and code that builds tensors read and write the slots
    directly, at slot speed.
    """
    __slots__ = ("_array", "_requires_grad", "_grad", "grad_fn", "_vc", "_base", "_view", "_hooks", "_post_hooks",
                 "__weakref__")
    __array_priority__ = 1000  # make numpy defer to Tensor's reflected operators

    def __init__(self, *data, dtype=None, device=None, requires_grad=False):
        """Tensor(data) copies data (a list, number or array); Tensor(2, 3), PyTorch's legacy
        constructor, makes a float tensor of that size (zero-filled here, uninitialised in
        PyTorch); Tensor() is empty."""
        from .ops.creation import to_array
        if len(data) > 1 or len(data) == 1 and type(data[0]) is int and not isinstance(data[0], bool):
            if not all(type(n) is int for n in data):
                raise TypeError(f"Tensor(*sizes): expected integer sizes, got {data!r}")
            self._array = to_array(np.zeros(data), dtype or dtypes.get_default_dtype(), device, copy=False)
            data = None
        else:
            data = data[0] if data else None
            self._array = to_array([] if data is None else data, dtype, device)
            if dtype is None and data is not None and self._array.dtype.kind in "iub" and \
                    not isinstance(data, (np.ndarray, Tensor)):
                self._array = self._array.astype(dtypes.get_default_dtype().np)  # torch.Tensor([1, 2]) is float
        if isinstance(data, np.ndarray):
            from . import dispatch
            tracer = dispatch.active_tracer()
            if tracer is not None:  # read again at every compiled call (see creation._from_data)
                tracer.array_input(self, data, lambda a: to_array(a, dtype, device))
        self._requires_grad = False
        self._grad = None
        self.grad_fn = None
        self._vc = None
        if requires_grad:
            set_requires_grad(self, "Only")

    # ------------------------------------------------------------ autograd attributes
    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        """PyTorch's attribute rules: a non-leaf keeps its flag, only float tensors require grad."""
        if getattr(self, "grad_fn", None) is not None:  # tensors built slot by slot may lack it yet
            raise RuntimeError(leaf_flag_error(bool(value)))
        if value:
            set_requires_grad(self, "only")
        else:
            self._requires_grad = False

    @property
    def grad(self):
        """The accumulated gradient (a leaf's, or a non-leaf's after retain_grad()), or None."""
        g = self._grad
        if g is None and self.grad_fn is not None and self.grad_fn.retained is None:
            warnings.warn(_NON_LEAF_GRAD, UserWarning, stacklevel=2)
        return g

    @grad.setter
    def grad(self, value):
        self._grad = value

    @property
    def data(self):
        """A new Tensor sharing this one's memory, detached from autograd and from this
        tensor's version counter (PyTorch's `.data`: `p.data.add_(...)` updates p unseen by
        autograd). While traced, ops on it are recorded like ops on any tensor."""
        return wrap(self._array)

    @data.setter
    def data(self, value):
        """`x.data = y` makes x use y's memory (shape and dtype included), as in PyTorch."""
        if not isinstance(value, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(value).__name__}")
        from . import dispatch
        tracer = dispatch.active_tracer()
        if tracer is not None:  # the memory changes under the tracer's feet
            tracer.raw_write(self, "setting .data")
        self._array = value._array

    # ------------------------------------------------------------ properties
    @property
    def shape(self):
        return Size(self._array.shape)

    @property
    def dtype(self):
        return dtypes.from_np(self._array.dtype)

    @property
    def device(self):
        d = self._array
        return CPU if type(d) is np.ndarray else device_of_array(d)

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    @property
    def ndim(self):
        return self._array.ndim

    @property
    def is_leaf(self):
        return self.grad_fn is None

    @property
    def _version(self):
        return 0 if self._vc is None else self._vc[0]

    @property
    def itemsize(self):
        return self._array.itemsize

    @property
    def nbytes(self):
        return self._array.nbytes

    def dim(self):
        return self._array.ndim

    def size(self, dim=None):
        if dim is None:
            return Size(self._array.shape)
        return self._array.shape[dim]

    def numel(self):
        return int(self._array.size)

    nelement = numel

    def element_size(self):
        return self._array.itemsize

    def is_floating_point(self):
        return self._array.dtype.kind in FLOATING_KINDS

    def stride(self, dim=None):
        strides = tuple(s // self._array.itemsize for s in self._array.strides)
        return strides if dim is None else strides[dim]

    def is_contiguous(self):
        return bool(self._array.flags.c_contiguous)

    def data_ptr(self):
        d = self._array
        return d.ctypes.data if type(d) is np.ndarray else d.data.ptr

    def __len__(self):
        if self._array.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._array.shape[0]

    # ------------------------------------------------------------ conversions
    def item(self):
        if self._array.size != 1:
            _concrete(self, "item()")
            raise RuntimeError(f"a Tensor with {self._array.size} elements cannot be converted to Scalar")
        return _concrete(self, "item()", self._array.reshape(()).item())

    def tolist(self):
        _concrete(self, "tolist()")
        return _host(self._array).tolist()

    def numpy(self, *, force=False):
        """The numpy array sharing this tensor's memory (CPU tensors only, like PyTorch)."""
        _concrete(self, "numpy()")
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        if type(self._array) is not np.ndarray:
            if not force:
                raise TypeError(f"can't convert {self.device} device type tensor to numpy. "
                                "Use Tensor.cpu() to copy the tensor to host memory first.")
            return _host(self._array)
        return self._array

    def __array__(self, dtype=None, copy=None):
        _concrete(self, "conversion to a numpy array")
        a = _host(self._array)
        return a if dtype is None else a.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """numpy ufuncs on tensors (`ndarray + t`, `np.exp(t)`) run as eagerc ops, like PyTorch."""
        fn = _ufunc_op(ufunc) if method == "__call__" and not kwargs else None
        if fn is not None:
            return fn(*inputs)
        arrays = [x.__array__() if isinstance(x, Tensor) else x for x in inputs]
        return getattr(ufunc, method)(*arrays, **kwargs)

    def __dlpack__(self, *args, **kwargs):
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def __bool__(self):
        if self._array.size != 1:
            _concrete(self, "bool() (an `if` or `while` on a tensor)")
            raise RuntimeError(f"Boolean value of Tensor with {self._array.size} values is ambiguous")
        return _concrete(self, "bool() (an `if` or `while` on a tensor)", bool(self._array.reshape(())))

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._array.dtype.kind not in "iub" or self._array.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __hash__(self):
        return id(self)

    def __iter__(self):
        if self._array.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._array.shape[0]))

    def __repr__(self):
        from .printing import tensor_repr
        return tensor_repr(self)

    __str__ = __repr__

    def __format__(self, spec):
        # As PyTorch: a 0-d tensor formats its Python value (f"{loss:.4f}", and f"{loss}" is
        # "0.25"); any other tensor -- and a Parameter, which is not a plain tensor there --
        # formats as str() and takes no format spec.
        from .nn.parameter import Parameter
        if self._array.ndim == 0 and not isinstance(self, Parameter):
            return format(self.item(), spec)
        if spec:
            raise TypeError("unsupported format string passed to Tensor.__format__")
        return str(self)

    def __reduce_ex__(self, protocol):
        # Needed so DataLoader workers can send tensors between processes; the user
        # never loads pickles (checkpoints use safetensors).
        return (wrap, (_host(self._array), self.requires_grad))

    def __deepcopy__(self, memo):
        t = wrap(self._array.copy(), self._requires_grad)
        t._grad = None if self._grad is None else self._grad.__deepcopy__(memo)
        memo[id(self)] = t
        if type(self) is not Tensor:  # Parameter and friends keep their class
            t = type(self)(t, requires_grad=self._requires_grad)
        return t


class Size(tuple):
    """A shape, like torch.Size: a tuple with numel()."""

    def numel(self):
        return math.prod(self)

    def __repr__(self):
        return f"eagerc.Size([{', '.join(str(s) for s in self)}])"


_UFUNC_NAMES = {}   # numpy ufunc name -> op name, from the ops' ufunc traits (np.subtract -> sub)


def _ufunc_op(ufunc):
    import eagerc
    if not _UFUNC_NAMES:
        from .runtime.ops import OPS
        _UFUNC_NAMES.update((op.ufunc, name) for name, op in OPS.items() if op.ufunc)
    return getattr(eagerc, _UFUNC_NAMES.get(ufunc.__name__, ufunc.__name__), None)


def _concrete(t, what, value=None):
    """A tensor is turned into a Python value: a tracer must know (guard or graph break).
    Returns `value`, or what a tracer hands on in its place (compiler/breaks.py)."""
    from . import dispatch
    tracer = dispatch.active_tracer()
    if tracer is not None:
        return tracer.concretize(t, what, value)
    return value


_NON_LEAF_GRAD = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
    "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. "
    "If you access the non-leaf Tensor by mistake, make sure you access the leaf Tensor "
    "instead.")


def leaf_flag_error(requires_grad):
    """PyTorch's message for changing requires_grad of a tensor that has a grad_fn."""
    msg = "you can only change requires_grad flags of leaf variables."
    if not requires_grad:
        msg += (" If you want to use a computed variable in a subgraph that doesn't require "
                "differentiation use var_no_grad = var.detach().")
    return msg


def set_requires_grad(t, first_word):
    """Set requires_grad on `t`, or raise PyTorch's error for integer and bool dtypes
    (`first_word` "only" from the attribute, "Only" from requires_grad_ / tensor(...))."""
    if t._array.dtype.kind not in FLOATING_KINDS:  # eagerc has no complex dtypes
        raise RuntimeError(f"{first_word} Tensors of floating point and complex dtype can require "
                           f"gradients (this tensor is {dtypes.from_np(t._array.dtype)})")
    t._requires_grad = True


def wrap(data, requires_grad=False):
    """A fresh leaf Tensor around an array (no copy)."""
    t = _new(Tensor)
    t._array = data
    t._grad = None
    t._vc = None
    t._requires_grad = requires_grad
    t.grad_fn = None
    return t


def _host(a):
    return a if type(a) is np.ndarray else a.get()

