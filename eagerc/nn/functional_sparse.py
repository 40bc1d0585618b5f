"""F.embedding_bag: sums, means or maxes of bags of embedding rows (PyTorch's signature).

No primitive of its own: the rows are picked with `index_select`, and each bag's entries
are reduced with Tensor ops, so it differentiates with respect to `weight` and
`per_sample_weights` (to any order) and traces like everything else:

    2-d input (B, N)       rows (B, N, D) reduced over dim 1 (sum / mean / max)
    1-d input + offsets    each entry's bag id = cumsum of the offsets marked on the entries;
                           sum and mean: zeros(bags, D).index_add(0, bag, rows); max: the rows
                           scattered into a (bags, longest bag, D) block, then the 2-d reduction

Entries equal to padding_idx take no part (they count for neither sum, mean nor max), and an
empty bag gives zeros, as in PyTorch. With include_last_offset, entries past the last offset
(PyTorch documents that it equals len(input)) belong to no bag, in every mode (PyTorch 2.13's
CPU kernels disagree there between modes and dtypes, pytorch#191965). Only the 1-d max reads a
value back from the data (the longest bag's length, a shape): under eagerc.compile that is a
graph break (the call runs eagerly), never a silent constant.
"""
from ..ops import creation, elementwise, joining
from ..runtime import dtypes

__all__ = ["embedding_bag"]

_MODES = ("sum", "mean", "max")


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """One row per bag: the sum, mean or max of weight[i] over the bag's indices i."""
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({tuple(per_sample_weights.shape)}) is not None, "
                         f"then it must have the same shape as the input ({tuple(input.shape)})")
    if weight.ndim != 2:
        raise ValueError(f"embedding_bag: weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if input._array.dtype.kind not in "iu":
        raise RuntimeError(f"embedding_bag: expected integer indices (Long or Int) for input, got {input.dtype.name}")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: if input is 2D, then offsets has to be None, as input is treated as a "
                             f"mini-batch of fixed length sequences. However, found offsets of type {type(offsets)}")
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("embedding_bag: offsets has to be a 1D Tensor but got None")
        if offsets.ndim != 1:
            raise ValueError(f"embedding_bag: offsets has to be a 1D Tensor, got shape {tuple(offsets.shape)}")
        if offsets._array.dtype.kind not in "iu":
            raise RuntimeError(f"embedding_bag: expected integer offsets (Long or Int), got {offsets.dtype.name}")
    else:
        raise ValueError(f"embedding_bag: input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if mode not in _MODES:
        raise ValueError(f"embedding_bag: mode has to be one of sum, mean or max, got {mode!r}")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("embedding_bag: max mode does not support scaling the gradient by the frequency")
    if sparse:
        raise NotImplementedError("embedding_bag: sparse gradients are not supported (eagerc has no sparse tensors); "
                                  "use sparse=False")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError("embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}').")
        if per_sample_weights.dtype != weight.dtype:
            raise RuntimeError(f"embedding_bag: per_sample_weights ({per_sample_weights.dtype.name}) must have the "
                               f"dtype of weight ({weight.dtype.name})")
    n_weights = weight.shape[0]
    if padding_idx is not None:
        if not -n_weights <= padding_idx < n_weights:
            raise RuntimeError(f"embedding_bag: padding_idx must be within the number of embeddings, {-n_weights} "
                               f"through {n_weights - 1}, but got {padding_idx}")
        padding_idx = int(padding_idx) % n_weights
    flat = input.reshape(-1)
    _check_indices(flat, n_weights)
    if max_norm is not None:
        from .functional import _embedding_renorm_
        _embedding_renorm_(weight, flat, max_norm, norm_type)
    psw = None if per_sample_weights is None else per_sample_weights.reshape(-1)

    rows = weight.index_select(0, flat.long())                     # (n, D)
    if scale_grad_by_freq:  # the documented rule (PyTorch 2.13's CPU kernel miscounts: pytorch#190063)
        rows = _scale_grad_by_freq(rows, flat.long(), n_weights)
    if psw is not None:
        rows = rows * psw.unsqueeze(-1)
    valid = None if padding_idx is None else flat != padding_idx
    if input.ndim == 2:
        B, N = input.shape
        return _reduce_dense(rows.reshape(B, N, weight.shape[1]), None if valid is None else valid.reshape(B, N), mode)
    n_bags = offsets.shape[0] - (1 if include_last_offset else 0)
    if n_bags < 0:
        raise ValueError("embedding_bag: include_last_offset=True needs at least one offset (the end of the "
                         "last bag), got an empty offsets tensor")
    _check_offsets(offsets, flat.shape[0], include_last_offset)
    return _reduce_segments(rows, valid, offsets.long(), n_bags, mode)


def _check_indices(flat, n):
    """PyTorch's range check (validation only: it reads the data but never shapes the result)."""
    a = flat._array
    if a.size:
        bad = (a < 0) | (a >= n)
        if bad.any():
            i = int(bad.argmax())
            raise RuntimeError(f"embedding_bag: Index {i} of input takes value {int(a[i])} which is not in the "
                               f"valid range [0, {n})")


def _check_offsets(offsets, n, include_last_offset):
    o = offsets._array
    if not o.size:
        return
    if int(o[0]) != 0:
        raise RuntimeError(f"embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                           f"has to start from position 0. However, got {int(o[0])}")
    if o.size > 1 and bool((o[1:] < o[:-1]).any()):
        raise RuntimeError(f"embedding_bag: offsets must be non-decreasing, got {o.tolist()}")
    if int(o[-1]) > n:
        raise RuntimeError(f"embedding_bag: offsets[-1] can not be greater than input's length {n} but got "
                           f"offsets[-1] of {int(o[-1])}")


def _scale_grad_by_freq(rows, idx, n_weights):
    """Forward value unchanged (exactly); the gradient of each entry divided by how often its index
    occurs in the whole input (PyTorch's scale_grad_by_freq)."""
    freq = creation.zeros(n_weights, dtype=dtypes.int64, device=idx.device).index_add(0, idx, creation.ones_like(idx))
    scale = (1.0 / freq.index_select(0, idx).to(rows.dtype)).unsqueeze(-1)
    base = rows.detach()
    return base + (rows - base) * scale


def _reduce_dense(rows, valid, mode):
    """rows (B, N, D), valid (B, N) bool or None -> (B, D)."""
    if mode == "max":
        if rows.shape[1] == 0:
            return creation.zeros(rows.shape[0], rows.shape[2], dtype=rows.dtype, device=rows.device)
        if valid is None:
            return rows.max(1).values
        vals = elementwise.where(valid.unsqueeze(-1), rows, float("-inf")).max(1).values
        return elementwise.where(valid.any(1, keepdim=True), vals, 0.0)
    if valid is not None:
        rows = elementwise.where(valid.unsqueeze(-1), rows, 0.0)
    out = rows.sum(1)
    if mode == "sum":
        return out
    if valid is None:
        return out / max(rows.shape[1], 1)
    return out / valid.sum(1, keepdim=True).clamp(min=1).to(rows.dtype)


def _reduce_segments(rows, valid, offsets, n_bags, mode):
    """rows (n, D) in bag order; bag b holds entries offsets[b]:offsets[b + 1] (the last one runs to
    the end, or to offsets[n_bags] when include_last_offset; entries past that are dropped)."""
    n, D = rows.shape
    n_segments = offsets.shape[0]                       # n_bags, or n_bags + 1 with an overflow segment
    dev = rows.device
    # each entry's segment: how many offsets are at or before its position, minus one
    marks = creation.zeros(n + 1, dtype=dtypes.int64, device=dev).index_add(0, offsets, creation.ones_like(offsets))
    bag = marks.cumsum(0)[:n] - 1
    if mode != "max":
        if valid is not None:
            rows = elementwise.where(valid.unsqueeze(-1), rows, 0.0)
        out = creation.zeros(n_segments, D, dtype=rows.dtype, device=dev).index_add(0, bag, rows)[:n_bags]
        if mode == "sum":
            return out
        ones = creation.ones(n, dtype=rows.dtype, device=dev) if valid is None else valid.to(rows.dtype)
        count = creation.zeros(n_segments, dtype=rows.dtype, device=dev).index_add(0, bag, ones)[:n_bags]
        return out / count.clamp(min=1).unsqueeze(-1)
    # max: scatter each segment into a row of a (segments, longest, D) block
    ends = joining.cat([offsets[1:], creation.tensor([n], dtype=dtypes.int64, device=dev)])
    longest = int((ends - offsets).max()) if n_segments else 0       # a graph break under compile
    if longest == 0 or n_bags == 0:
        return creation.zeros(n_bags, D, dtype=rows.dtype, device=dev)
    slot = bag * longest + (creation.arange(n, device=dev) - offsets.index_select(0, bag))
    block = creation.zeros(n_segments * longest, D, dtype=rows.dtype, device=dev).index_add(0, slot, rows)
    keep = creation.ones(n, dtype=dtypes.int64, device=dev) if valid is None else valid.long()
    filled = creation.zeros(n_segments * longest, dtype=dtypes.int64, device=dev).index_add(0, slot, keep) > 0
    return _reduce_dense(block.reshape(n_segments, longest, D)[:n_bags],
                         filled.reshape(n_segments, longest)[:n_bags], "max")

