"""Variable-length sequences: padding and packing, as torch.nn.utils.rnn.

A PackedSequence stores a batch of sequences time step by time step, longest first:
`data` holds step 0 of every sequence, then step 1 of those at least 2 long, and so on;
`batch_sizes[t]` says how many sequences are still running at step t. nn.RNN/LSTM/GRU
read it step by step, so padding is never computed on. Packing and unpacking are one
gather each (`index_select` by a precomputed index), so their gradients are one scatter.
Lengths and batch sizes are host-side integers (an int64 CPU tensor, as in PyTorch).
"""
from collections import namedtuple

import numpy as np

from ..._tensor import Tensor
from ...ops.creation import full, tensor
from ...ops.joining import cat, stack
from ...runtime import dtypes
from ...runtime.device import device
from .. import functional as F

__all__ = ["PackedSequence", "pad_sequence", "pack_padded_sequence", "pad_packed_sequence", "pack_sequence",
           "unpad_sequence", "unpack_sequence", "invert_permutation"]


def invert_permutation(permutation):
    if permutation is None:
        return None
    return tensor(np.argsort(permutation.numpy()), device=permutation.device)


class PackedSequence(namedtuple("PackedSequence_", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """(data, batch_sizes, sorted_indices, unsorted_indices): a named tuple, as PyTorch's."""
    __slots__ = ()

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """The data moved or cast like Tensor.to; the indices follow the data's device."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        idx = [None if i is None else i.to(data.device) for i in (self.sorted_indices, self.unsorted_indices)]
        return type(self)(data, self.batch_sizes, *idx)

    def cuda(self, *args, **kwargs):
        return self.to(*args, device="cuda", **kwargs) if not args else self.to(device("cuda", args[0]))

    def cpu(self):
        return self.to("cpu")

    def double(self):
        return self.to(dtype=dtypes.float64)

    def float(self):
        return self.to(dtype=dtypes.float32)

    def half(self):
        return self.to(dtype=dtypes.float16)

    def bfloat16(self):
        return self.to(dtype=dtypes.bfloat16)

    def long(self):
        return self.to(dtype=dtypes.int64)

    def int(self):
        return self.to(dtype=dtypes.int32)

    @property
    def is_cuda(self):
        return self.data.is_cuda

    def is_pinned(self):
        return False


def _lengths(lengths):
    return [int(n) for n in (lengths.tolist() if isinstance(lengths, Tensor) else lengths)]


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack (L_i, *) tensors into (max L, B, *) (or (B, max L, *)), padded with `padding_value`."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    if isinstance(sequences, Tensor):
        sequences = sequences.unbind(0)
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        extra = longest - s.shape[0]
        if extra:
            widths = [0, 0] * (s.ndim - 1) + ([0, extra] if padding_side == "right" else [extra, 0])
            s = F.pad(s, widths, value=padding_value)
        padded.append(s)
    return stack(padded, 0 if batch_first else 1)


def _batch_sizes(lengths):
    """Per time step, how many of the (sorted, decreasing) sequences are still running."""
    n = np.asarray(lengths)
    return [int((n > t).sum()) for t in range(int(n[0]) if len(n) else 0)]


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded (T, B, *) (or (B, T, *)) batch whose sequences have the given lengths."""
    lengths = _lengths(lengths)
    if enforce_sorted:
        if any(a < b for a, b in zip(lengths, lengths[1:])):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
                               "to sidestep this requirement if you do not need ONNX exportability.")
        sorted_indices = None
        order = np.arange(len(lengths))
    else:
        order = np.argsort(-np.asarray(lengths), kind="stable")
        sorted_indices = tensor(order, device=input.device)
    if any(n <= 0 for n in lengths):
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           "that is <= 0")
    if batch_first:
        input = input.transpose(0, 1)
    T, B = input.shape[0], input.shape[1]
    if len(lengths) != B:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {len(lengths)} "
                           f"(batch_size={B})")
    sizes = _batch_sizes(sorted(lengths, reverse=True))
    if len(sizes) > T:
        raise RuntimeError(f"Expected sequence length to be at most {T} (the input's time dimension), but got "
                           f"{len(sizes)}")
    rows = np.concatenate([t * B + order[:n] for t, n in enumerate(sizes)]).astype(np.int64)
    flat = input.reshape((T * B,) + tuple(input.shape[2:]))
    data = flat.index_select(0, tensor(rows, device=input.device))
    return PackedSequence(data, tensor(sizes), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded, lengths), in the original batch order."""
    data, batch_sizes = sequence.data, _lengths(sequence.batch_sizes)
    T, B = len(batch_sizes), batch_sizes[0] if batch_sizes else 0
    if total_length is not None:
        if total_length < T:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, "
                             f"but got total_length={total_length} and max sequence length being {T}")
        T = total_length
    where = np.full(T * B, data.shape[0], dtype=np.int64)     # row of `data` for each (t, b); the last: padding
    at = 0
    for t, n in enumerate(batch_sizes):
        where[t * B:t * B + n] = np.arange(at, at + n)
        at += n
    pad_row = full((1,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    padded = cat([data, pad_row]).index_select(0, tensor(where, device=data.device))
    padded = padded.reshape((T, B) + tuple(data.shape[1:]))
    lengths = np.asarray([sum(1 for n in batch_sizes if n > b) for b in range(B)], dtype=np.int64)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths[sequence.unsorted_indices.cpu().numpy()]
    return (padded.transpose(0, 1) if batch_first else padded), tensor(lengths)


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of (L_i, *) tensors (pad_sequence, then pack_padded_sequence)."""
    return pack_padded_sequence(pad_sequence(sequences), [s.shape[0] for s in sequences],
                                enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences, each cut to its length."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [seq[:n] for seq, n in zip(padded_sequences.unbind(0), _lengths(lengths))]


def unpack_sequence(packed_sequences):
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
