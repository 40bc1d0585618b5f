"""Module backward hooks (`register_full_backward_hook`, `register_full_backward_pre_hook`).

PyTorch calls `hook(module, grad_input, grad_output)` once per backward pass, with the
gradients of all the module's tensor inputs and outputs, and lets it replace grad_input (a
pre-hook, `hook(module, grad_output)`, may replace grad_output). The engine's nodes have
one output each, so the module's tensors pass through one identity node per side: the
tensors are flattened and concatenated, the concatenation goes through `_Gate` (an
identity Function whose backward runs the hooks), and the pieces are cut out again. The
gradient that reaches the gate is then the concatenation of every piece's gradient -- all
of grad_output (or grad_input) at once. Only while hooks exist, and only with grad on.
"""
import math

from ..._tensor import Tensor
from ...autograd.function import Function

__all__ = ["BackwardHooks"]


class _Gate(Function):
    @staticmethod
    def forward(ctx, flat, on_backward):
        ctx.on_backward = on_backward
        return flat

    @staticmethod
    def backward(ctx, g):
        return ctx.on_backward(g), None


def _through_gate(tensors, on_backward):
    """The tensors again, now behind one gate node; on_backward(list of grads) -> list of grads."""
    shapes = [tuple(t.shape) for t in tensors]
    sizes = [math.prod(s) for s in shapes]
    from ...ops.joining import cat
    flat = cat([t.reshape(-1) for t in tensors])

    def backward(g):
        pieces = [None if g is None else p.reshape(s) for p, s in zip(g.split(sizes), shapes)] if g is not None \
            else [None] * len(tensors)
        new = on_backward(pieces)
        from ...ops.creation import zeros
        return cat([(p if p is not None else zeros(s, dtype=t.dtype)).reshape(-1)
                    for p, t, s in zip(new, tensors, shapes)])
    gated = _Gate.apply(flat, backward)
    return [p.reshape(s) for p, s in zip(gated.split(sizes), shapes)]


class BackwardHooks:
    """One call's backward hooks: set up on the inputs before forward, on the outputs after."""

    def __init__(self, module):
        self.module = module
        self.n_inputs = 0
        self.input_slots = []     # argument positions of the inputs that require grad
        self.grad_output = None

    def _hooks(self):
        return list(self.module._backward_hooks.values())

    def inputs(self, args):
        self.n_inputs = len(args)
        slots = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a._requires_grad]
        if not slots or not self._hooks() or len({args[i]._array.dtype for i in slots}) > 1:
            return args   # (inputs of several dtypes: their hooks see no grad_input)
        self.input_slots = slots
        gated = _through_gate([args[i] for i in slots], self._input_grads)
        args = list(args)
        for i, t in zip(slots, gated):
            args[i] = t
        return tuple(args)

    def outputs(self, output):
        outs = output if isinstance(output, (tuple, list)) else (output,)
        slots = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and o._requires_grad]
        if not slots or len({outs[i]._array.dtype for i in slots}) > 1:
            return output
        self.n_outputs = len(outs)
        self.output_slots = slots
        gated = _through_gate([outs[i] for i in slots], self._output_grads)
        new = list(outs)
        for i, t in zip(slots, gated):
            new[i] = t
        if isinstance(output, (tuple, list)):
            return type(output)(new)
        return new[0]

    def _output_grads(self, grads):
        full = [None] * self.n_outputs
        for i, g in zip(self.output_slots, grads):
            full[i] = g
        for hook in list(self.module._backward_pre_hooks.values()):
            r = hook(self.module, tuple(full))
            if r is not None:
                full = list(r)
        self.grad_output = tuple(full)
        if not self.input_slots:  # nothing upstream needs a gradient: the hooks run now
            self._call(tuple([None] * self.n_inputs))
        return [full[i] for i in self.output_slots]

    def _input_grads(self, grads):
        full = [None] * self.n_inputs
        for i, g in zip(self.input_slots, grads):
            full[i] = g
        full = self._call(tuple(full))
        return [full[i] for i in self.input_slots]

    def _call(self, grad_input):
        for hook in self._hooks():
            r = hook(self.module, grad_input, self.grad_output)
            if r is not None:
                if not isinstance(r, tuple) or len(r) != len(grad_input):
                    raise RuntimeError(f"backward hook of {type(self.module).__name__} returned {type(r).__name__}: "
                                       f"expected None or a tuple of {len(grad_input)} gradients")
                grad_input = r
        return list(grad_input)
