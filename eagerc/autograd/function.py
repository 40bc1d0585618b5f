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

forward runs with grad disabled on the real tensors. Each differentiable output gets its
own node whose backward calls the user's `backward` with that output's gradient and zeros
(or None, with `ctx.set_materialize_grads(False)`) for the others: the engine's nodes have
one output each, and a vector-Jacobian product is linear in the output gradients, so the
contributions of several outputs add up to PyTorch's single call. The nodes share the ctx
and its saved tensors (freed when the last of them has run, unless retain_graph).

PyTorch's newer style -- `forward(*args)` without ctx, plus `setup_context(ctx, inputs,
output)` -- works too.
"""
import weakref

from ..runtime.dtypes import FLOATING_KINDS
from .. import dispatch
from .._tensor import Tensor
from ..runtime.ownership import user_stack

__all__ = ["Function", "FunctionCtx"]


class FunctionCtx:
    def __init__(self):
        self.to_save = ()
        self.saved_versions = ()
        self.needs_input_grad = ()
        self.materialize_grads = True
        self._non_differentiable = set()
        self._node = None  # weakref to the FunctionNode, which owns the saved tensors

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
        saved, versions = self.to_save, self.saved_versions
        node = self._node() if self._node is not None else None
        if node is not None:
            saved, versions = node.saved or (), node.versions or ()
        from .engine import _FREED, _FREED_MSG
        if saved is _FREED:
            raise RuntimeError(_FREED_MSG)
        for t, v in zip(saved, versions):
            if isinstance(t, Tensor) and t._version != v:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: a tensor saved by {self._name}.forward is at version "
                    f"{t._version}; expected version {v} instead.")
        return tuple(saved)


def _function_backward(node, g):
    ctx = node.attrs.ctx
    slot = node.attrs.slot
    ctx._node = weakref.ref(node)  # saved_tensors reads this node's references
    out_grads = [g if i == slot else
                 (_zeros(shape, dtype) if ctx.materialize_grads else None)
                 for i, (shape, dtype) in enumerate(ctx._out_specs)]
    grads = ctx.fn_cls.backward(ctx, *out_grads)
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
    return out


class _Slot:
    """A node's attrs: the shared ctx and which output the node is for."""
    __slots__ = ("ctx", "slot")

    def __init__(self, ctx, slot):
        self.ctx = ctx
        self.slot = slot


def _zeros(shape, dtype):
    if dtype is None:  # a non-Tensor output gets no gradient
        return None
    from ..ops.creation import zeros
    return zeros(shape, dtype=dtype)


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
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        with_grad = dispatch.grad_enabled() and any(ctx.needs_input_grad)
        prev = dispatch.grad_enabled()
        dispatch.set_grad_enabled(False)
        try:
            if _new_style(cls):  # forward(*args) and setup_context(ctx, inputs, output)
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        finally:
            dispatch.set_grad_enabled(prev)
        if not with_grad:
            return out
        outs = out if isinstance(out, tuple) else (out,)
        diff = [i for i, o in enumerate(outs) if isinstance(o, Tensor)
                and id(o) not in ctx._non_differentiable and o._array.dtype.kind in FLOATING_KINDS]
        if not diff:
            return out
        ctx._out_specs = [(tuple(o._array.shape), o.dtype) if isinstance(o, Tensor) else ((), None)
                          for o in outs]
        edges = [(a.grad_fn if a.grad_fn is not None else a) if isinstance(a, Tensor) and a.requires_grad
                 else None for a in args]
        saved = list(ctx.to_save) if ctx.to_save else None
        versions = list(ctx.saved_versions) if ctx.to_save else None
        ctx.to_save = ()
        created = user_stack() if dispatch.anomaly_enabled() else None   # where the user called apply
        result = list(outs)
        for i in diff:
            o = outs[i]
            if o.grad_fn is not None or o.requires_grad or any(o is a for a in args) or \
                    any(o is result[j] for j in diff if j < i):
                o = o.detach()  # a returned input (or an intermediate, or a repeat) gets a fresh node
            # each node holds the saved tensors: the engine frees them after its backward unless
            # retain_graph, and a second backward then raises the freed-graph error
            node = dispatch.custom_node(_function_op(cls), _Slot(ctx, i), list(edges), o._array.dtype,
                                        list(saved) if saved is not None else None, versions, created)
            ctx._node = weakref.ref(node)
            o._requires_grad = True
            o.grad_fn = node
            result[i] = o
        return tuple(result) if isinstance(out, tuple) else result[0]

    @staticmethod
    def setup_context(ctx, inputs, output):
        """PyTorch's newer style: save what backward needs (forward then takes no ctx)."""
        raise NotImplementedError


def _new_style(cls):
    return getattr(cls.setup_context, "__func__", cls.setup_context) is not \
        getattr(Function.setup_context, "__func__", Function.setup_context)


_ops = {}


def _function_op(cls):
    op = _ops.get(cls)
    if op is None:
        op = _ops[cls] = dispatch.CustomOp(cls.__name__, _function_backward, user_code=True)
    return op
