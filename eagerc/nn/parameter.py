"""Parameter: a Tensor that a Module registers as one of its learnable weights."""
from ..runtime.dtypes import FLOATING_KINDS
from .._tensor import Tensor
from ..ops.creation import empty

__all__ = ["Parameter", "Buffer"]


class Parameter(Tensor):
    """A leaf Tensor (requires_grad=True by default) that Modules collect in parameters().

    Parameter(t) shares t's memory, like PyTorch. Ops on a Parameter return plain Tensors.
    """
    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = empty(0)
        elif not isinstance(data, Tensor):
            raise TypeError(f"Parameter: expected a Tensor, got {type(data).__name__}")
        if requires_grad and data._array.dtype.kind not in FLOATING_KINDS:
            raise RuntimeError(f"Only Tensors of floating point dtype can require gradients, got {data.dtype}")
        p = Tensor.__new__(cls)
        p._array = data._array
        p.requires_grad = bool(requires_grad)
        p.grad = None
        p.grad_fn = None
        p._vc = data._vc if data._vc is not None else None
        return p

    def __init__(self, data=None, requires_grad=True):
        pass  # everything happens in __new__ (Tensor.__init__ would copy the data)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __reduce_ex__(self, protocol):
        from .._tensor import _rebuild
        return (_rebuild_parameter, (_rebuild, Tensor.__reduce_ex__(self, protocol)[1], self.requires_grad))


def _rebuild_parameter(rebuild, args, requires_grad):
    return Parameter(rebuild(*args), requires_grad)


class Buffer(Tensor):
    """Marks a tensor to register as a buffer when assigned to a Module attribute
    (`self.x = nn.Buffer(t, persistent=False)`), like torch.nn.Buffer."""
    __slots__ = ("persistent",)

    def __new__(cls, data=None, *, persistent=True):
        if data is None:
            data = empty(0)
        b = Tensor.__new__(cls)
        b._array = data._array
        b.requires_grad = data.requires_grad
        b.grad = None
        b.grad_fn = None
        b._vc = None
        b.persistent = persistent
        return b

    def __init__(self, data=None, *, persistent=True):
        pass
