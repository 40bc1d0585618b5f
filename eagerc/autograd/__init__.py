"""Automatic differentiation: backward, grad, grad modes, custom Functions, checks."""
from .. import dispatch
from .._tensor import Tensor
from .engine import run_backward, _accumulate_leaf
from .function import Function, FunctionCtx
from .grad_mode import no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled
from .gradcheck import gradcheck, gradgradcheck
from ..ops import creation  # the ops package is loaded by then (engine imports it)

__all__ = ["backward", "grad", "Function", "FunctionCtx", "no_grad", "enable_grad",
           "set_grad_enabled", "inference_mode", "is_grad_enabled", "gradcheck",
           "gradgradcheck", "detect_anomaly", "set_detect_anomaly"]


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, Tensor):
        return [x]
    return list(x)


def _default_grads(outputs, grad_outputs, api):
    grads = []
    for i, t in enumerate(outputs):
        g = grad_outputs[i] if grad_outputs is not None else None
        if g is None:
            if t._array.size != 1:
                raise RuntimeError(f"{api}: grad can be implicitly created only for scalar outputs; "
                                   f"output {i} has shape {tuple(t._array.shape)}, pass a gradient of that shape")
            g = creation.ones_like(t)
        elif not isinstance(g, Tensor):
            from ..ops.creation import tensor
            g = tensor(g, dtype=t.dtype, device=t.device)
        elif tuple(g._array.shape) != tuple(t._array.shape):
            raise RuntimeError(f"{api}: mismatch in shape: grad_output[{i}] has a shape of "
                               f"{tuple(g._array.shape)} and output[{i}] has a shape of {tuple(t._array.shape)}")
        grads.append(g)
    return grads


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients into `.grad` of the leaves (or only of `inputs`, when given)."""
    tensors = _as_list(tensors)
    grads = _default_grads(tensors, _as_list(grad_tensors), "backward")
    if retain_graph is None:
        retain_graph = create_graph
    if inputs is None:
        run_backward(tensors, grads, retain_graph=retain_graph, create_graph=create_graph)
        return
    inputs = _as_list(inputs)
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"backward: inputs[{i}] (shape {tuple(t._array.shape)}) does not require grad")
    result = run_backward(tensors, grads, retain_graph=retain_graph, create_graph=create_graph,
                          targets=inputs)
    for t, g in zip(inputs, result):
        if g is not None:
            _accumulate_leaf(t, g, create_graph, False, dispatch.active_tracer())


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False, materialize_grads=False):
    """Gradients of `outputs` w.r.t. `inputs`, returned (not accumulated into .grad)."""
    outputs = _as_list(outputs)
    single = isinstance(inputs, Tensor)
    inputs = _as_list(inputs)
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"grad: input {i} (shape {tuple(t._array.shape)}) does not require grad")
    for i, t in enumerate(outputs):
        if not t.requires_grad:
            raise RuntimeError(f"grad: output {i} does not require grad and does not have a grad_fn")
    grads = _default_grads(outputs, _as_list(grad_outputs), "grad")
    if retain_graph is None:
        retain_graph = create_graph
    result = run_backward(outputs, grads, retain_graph=retain_graph, create_graph=create_graph,
                          targets=inputs)
    for i, r in enumerate(result):
        if r is None:
            if materialize_grads:
                from ..ops.creation import zeros_like
                result[i] = zeros_like(inputs[i])
            elif not allow_unused:
                raise RuntimeError(f"grad: input {i} was not used in the graph; "
                                   "set allow_unused=True if this is the desired behavior")
    return tuple(result)


class detect_anomaly:
    """Record where each op was created; name it when its backward yields nan/inf.

    Like grad mode, it is per thread: other threads keep their own setting."""

    def __init__(self, check_nan=True):
        self.check_nan = check_nan

    def __enter__(self):
        self._prev = dispatch.anomaly_enabled()
        dispatch.set_anomaly_enabled(self.check_nan)
        return self

    def __exit__(self, *exc):
        dispatch.set_anomaly_enabled(self._prev)
        return False


class set_detect_anomaly(detect_anomaly):
    """Sets the mode at construction (usable as a plain call), restores it on exit."""

    def __init__(self, mode):
        super().__init__(mode)
        self._prev = dispatch.anomaly_enabled()
        dispatch.set_anomaly_enabled(mode)

    def __enter__(self):  # the mode is already set; keep the one from before construction
        return self
