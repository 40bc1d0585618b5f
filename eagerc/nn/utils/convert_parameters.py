"""Flatten parameters into one vector and back."""
from ..._tensor import Tensor
from ...ops.inplace import bump_version

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_device(p, device):
    if device is not None and p.device != device:
        raise TypeError(f"Found two parameters on different devices, this is currently not supported "
                        f"({device} and {p.device})")
    return p.device


def parameters_to_vector(parameters):
    """One 1-D tensor: every parameter flattened and concatenated (differentiable)."""
    from ...ops.joining import cat
    device = None
    flat = []
    for p in parameters:
        device = _check_device(p, device)
        flat.append(p.reshape(-1))
    return cat(flat)


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of `vec` into the parameters (in place, so every
    reference and view of a parameter sees the new values)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected eagerc.Tensor, but got: {type(vec).__name__}")
    if vec.ndim != 1:
        raise ValueError(f"expected a 1-D vector, got shape {tuple(vec.shape)}")
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if vec.numel() != total:
        raise ValueError(f"vector has {vec.numel()} elements but the parameters have {total} in all")
    device = None
    src = vec._array
    pointer = 0
    for p in params:
        device = _check_device(p, device)
        n = p.numel()
        p._array[...] = src[pointer:pointer + n].reshape(p._array.shape)
        bump_version(p, "copy_")
        pointer += n
