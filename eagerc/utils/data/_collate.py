"""Turning a list of samples into a batch (default_collate), and samples into tensors
without batching (default_convert). Same rules and output types as PyTorch's:

    Tensor                -> stacked Tensor (a new leading batch dimension)
    numpy array / scalar  -> stacked Tensor
    float                 -> float64 Tensor;  int -> int64 Tensor;  bool -> bool Tensor
    str / bytes           -> the list unchanged
    Mapping               -> the same mapping type, each key collated
    namedtuple            -> the same namedtuple, each field collated
    tuple                 -> list of collated fields;  other sequences -> same type if possible
"""
import collections.abc as abc
import copy

import numpy as np

from ...dispatch import wrap
from ..._tensor import Tensor
from ...runtime.device import xp_of

__all__ = ["default_collate", "default_convert"]

_ERR = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}")


def _stack(tensors):
    first = tensors[0]
    shape = first._array.shape
    for i, t in enumerate(tensors):
        if t._array.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 "
                               f"and {list(t._array.shape)} at entry {i}")
    if any(t.requires_grad for t in tensors):
        from ...ops.joining import stack
        return stack(tensors)
    d = first._array
    xp = np if type(d) is np.ndarray else xp_of(d)
    return wrap(xp.stack([t._array for t in tensors]))


def _numeric_array(a):
    if a.dtype.kind in "SaUO":
        raise TypeError(_ERR.format(a.dtype))
    return a


def _like_mapping(elem, items):
    """`items` (a dict) in `elem`'s mapping type where that type can be rebuilt, else the dict."""
    try:
        if isinstance(elem, abc.MutableMapping):
            clone = copy.copy(elem)
            clone.update(items)
            return clone
        return type(elem)(items)
    except TypeError:
        return items


def _like_sequence(elem, items):
    """`items` (a list) in `elem`'s sequence type where that type can be rebuilt, else the list."""
    try:
        if isinstance(elem, abc.MutableSequence):
            clone = copy.copy(elem)
            for i, v in enumerate(items):
                clone[i] = v
            return clone
        return type(elem)(items)
    except TypeError:
        return items


def default_collate(batch):
    """Collate a list of samples into a batch (see the module docstring for the rules)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return _stack(batch)
    if isinstance(elem, np.ndarray):
        _numeric_array(elem)
        try:
            return wrap(np.stack(batch))
        except ValueError:
            shapes = [np.shape(b) for b in batch]
            raise RuntimeError(f"stack expects each array to be equal size, got shapes {shapes[:4]}...") from None
    if isinstance(elem, (np.number, np.bool_)):
        return wrap(np.array(batch))
    if isinstance(elem, float):
        return wrap(np.array(batch, dtype=np.float64))
    if isinstance(elem, bool) and all(isinstance(b, bool) for b in batch):
        return wrap(np.array(batch, dtype=np.bool_))
    if isinstance(elem, int):
        return wrap(np.array(batch, dtype=np.int64))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, abc.Mapping):
        return _like_mapping(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = [default_collate(list(s)) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return transposed  # a list, as in PyTorch
        return _like_sequence(elem, transposed)
    raise TypeError(_ERR.format(type(elem)))


def default_convert(data):
    """Without batching: numpy arrays and scalars become tensors (sharing memory),
    containers are converted element by element, everything else is left alone."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        return data if data.dtype.kind in "SaUO" else wrap(data)
    if isinstance(data, (np.number, np.bool_)):
        return wrap(np.asarray(data))
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, abc.Mapping):
        return _like_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, abc.Sequence):
        return _like_sequence(data, [default_convert(d) for d in data])
    return data
