"""Finite-difference checks of analytical gradients (float64 inputs recommended)."""
import numpy as np

from .._tensor import Tensor, wrap

__all__ = ["gradcheck", "gradgradcheck", "numerical_jacobian", "analytical_jacobian"]


def _outputs(fn, inputs):
    out = fn(*inputs)
    return [out] if isinstance(out, Tensor) else [o for o in out if isinstance(o, Tensor)]


def numerical_jacobian(fn, inputs, eps):
    """d(flattened outputs)/d(input i) by central differences, for each differentiable input."""
    jacs = []
    outs0 = _outputs(fn, inputs)
    nout = sum(o._array.size for o in outs0)
    for x in inputs:
        if not (isinstance(x, Tensor) and x.requires_grad):
            jacs.append(None)
            continue
        flat = x._array.reshape(-1)  # x is contiguous (we made it so), so this is a view
        jac = np.zeros((flat.size, nout))
        for k in range(flat.size):
            orig = flat[k].item()
            flat[k] = orig + eps
            plus = np.concatenate([np.asarray(o._array, np.float64).ravel() for o in _outputs(fn, inputs)])
            flat[k] = orig - eps
            minus = np.concatenate([np.asarray(o._array, np.float64).ravel() for o in _outputs(fn, inputs)])
            flat[k] = orig
            jac[k] = (plus - minus) / (2 * eps)
        jacs.append(jac)
    return jacs


def analytical_jacobian(fn, inputs):
    from . import grad
    from ..ops.creation import zeros_like
    outs = _outputs(fn, inputs)
    diff = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    nout = sum(o._array.size for o in outs)
    jacs = [np.zeros((x._array.size, nout)) for x in diff]
    col = 0
    for o in outs:
        for k in range(o._array.size):
            if not o.requires_grad:
                col += 1
                continue
            go = zeros_like(o)
            go._array.reshape(-1)[k] = 1
            gs = grad([o], diff, [go], retain_graph=True, allow_unused=True)
            for j, g in enumerate(gs):
                if g is not None:
                    jacs[j][:, col] = np.asarray(g._array, np.float64).ravel()
            col += 1
    it = iter(jacs)
    return [next(it) if isinstance(x, Tensor) and x.requires_grad else None for x in inputs]


def _contiguous_inputs(inputs):
    """Fresh contiguous leaves for the inputs that require grad (0-d ones stay 0-d)."""
    return [wrap(np.array(x._array, order="C", copy=True), True) if isinstance(x, Tensor) and x.requires_grad
            else x for x in inputs]


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, **_):
    """Compare analytical and numerical Jacobians of fn at `inputs`."""
    inputs = _contiguous_inputs(inputs if isinstance(inputs, (tuple, list)) else (inputs,))
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad and x._array.dtype != np.float64:
            import warnings
            warnings.warn("gradcheck: inputs are not float64; finite differences will be imprecise")
    num = numerical_jacobian(fn, inputs, eps)
    ana = analytical_jacobian(fn, inputs)
    for i, (n, a) in enumerate(zip(num, ana)):
        if n is None:
            continue
        if not np.allclose(a, n, atol=atol, rtol=rtol):
            if not raise_exception:
                return False
            err = np.abs(a - n).max()
            raise RuntimeError(f"gradcheck: Jacobian mismatch for input {i} (max abs error {err:.3g}):\n"
                               f"numerical:\n{n}\nanalytical:\n{a}")
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, **_):
    """gradcheck of the function that maps inputs to their (create_graph) gradients."""
    from . import grad
    from ..ops.creation import tensor
    inputs = _contiguous_inputs(inputs if isinstance(inputs, (tuple, list)) else (inputs,))
    outs = _outputs(fn, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = [tensor(rng.standard_normal(o._array.shape), dtype=o.dtype, requires_grad=True)
                        for o in outs]
    ngo = len(grad_outputs)

    def first_grads(*args):
        xs, gos = args[:len(args) - ngo], args[len(args) - ngo:]
        diff = [x for x in xs if isinstance(x, Tensor) and x.requires_grad]
        gs = grad(_outputs(fn, xs), diff, list(gos), create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return gradcheck(first_grads, list(inputs) + list(grad_outputs), eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
