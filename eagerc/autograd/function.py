"""User-defined differentiable functions: `eagerc.autograd.Function`.

    class Exp(Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * y

forward runs with grad disabled on the real tensors; its outputs get one
`FunctionNode` whose backward calls the user's `backward`.
"""
from .. import dispatch
from ..dispatch import Node
from .._tensor import Tensor

__all__ = ["Function", "FunctionCtx"]


class FunctionCtx:
    def __init__(self):
        self.to_save = ()
        self.saved_versions = ()
        self.needs_input_grad = ()
        self.materialize_grads = True
        self._freed = False
        self._non_differentiable = set()

    def save_for_backward(self, *tensors):
        self.to_save = tensors
        self.saved_versions = tuple(t._version if isinstance(t, Tensor) else 0 for t in tensors)

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    @property
    def saved_tensors(self):
        if self._freed:
            from .engine import _FREED_MSG
            raise RuntimeError(_FREED_MSG)
        for t, v in zip(self.to_save, self.saved_versions):
            if isinstance(t, Tensor) and t._version != v:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: a tensor saved by {self._name}.forward is at version "
                    f"{t._version}; expected version {v} instead.")
        return self.to_save


class _FunctionOp:
    """Stands in for an OpDef in a FunctionNode (the engine reads name/grads)."""
    __slots__ = ("name", "grads", "grad_params", "broadcasts")

    def __init__(self, cls):
        self.name = cls.__name__
        self.grads = _function_backward
        self.grad_params = None
        self.broadcasts = False


def _function_backward(node, g):
    ctx = node.attrs
    grads = node.attrs.fn_cls.backward(ctx, g)
    if not isinstance(grads, tuple):
        grads = (grads,)
    n = len(node.next)
    if len(grads) < n:
        raise RuntimeError(f"function {ctx._name}Backward returned an incorrect number of gradients "
                           f"(expected {n}, got {len(grads)})")
    out = []
    for gi, edge in zip(grads, node.next):
        if gi is not None and not isinstance(gi, Tensor):
            raise TypeError(f"{ctx._name}.backward must return Tensors or None, got {type(gi).__name__}")
        out.append(gi if edge is not None else None)
    if not node.attrs.retain:
        ctx._freed = True
    return out


class Function:
    """Subclass with static forward(ctx, *args) and backward(ctx, *grads); call .apply."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        ctx._name = cls.__name__
        ctx.fn_cls = cls
        ctx.retain = True
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with_grad = dispatch.grad_enabled() and any(ctx.needs_input_grad)
        prev = dispatch.grad_enabled()
        dispatch.set_grad_enabled(False)
        try:
            out = cls.forward(ctx, *args, **kwargs)
        finally:
            dispatch.set_grad_enabled(prev)
        if not with_grad:
            return out
        outs = out if isinstance(out, tuple) else (out,)
        if len(outs) != 1:
            raise NotImplementedError(f"{cls.__name__}: eagerc's Function supports one output tensor")
        node = Node.__new__(Node)
        node.op = _function_op(cls)
        node.attrs = ctx
        node.next = [(a.grad_fn if a.grad_fn is not None else a) if isinstance(a, Tensor) and a.requires_grad
                     else None for a in args]
        node.saved = None
        node.versions = None
        node.shapes = None
        node.out = None
        node.out_vc = None
        node.hooks = None
        node.retained = None
        node.created_at = None
        result = []
        for o in outs:
            if isinstance(o, Tensor) and id(o) not in ctx._non_differentiable and o.data.dtype.kind == "f":
                if o.grad_fn is not None or o.requires_grad or any(o is a for a in args):
                    o = o.detach()  # a returned input (or an intermediate) gets a fresh node
                o.requires_grad = True
                o.grad_fn = node
                node.out_dtype = o.data.dtype
            result.append(o)
        return tuple(result) if isinstance(out, tuple) else result[0]


_ops = {}


def _function_op(cls):
    op = _ops.get(cls)
    if op is None:
        op = _ops[cls] = _FunctionOp(cls)
    return op
