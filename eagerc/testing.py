"""eagerc.testing (torch.testing): `assert_close`, with PyTorch's tolerances and messages.

A test written against torch.testing.assert_close keeps its meaning here: the same default
tolerances per dtype, the same attribute checks (shape, dtype, device) first, the same
containers (sequences and mappings compared item by item, the failing item named), and an
AssertionError worded the same way, so a failure reads as it would under PyTorch.
The comparison runs on host copies of the values with numpy: it tests, it is not an op.
"""
import math
from collections.abc import Mapping, Sequence

import numpy as np

from .runtime.dtypes import FLOATING_KINDS
from ._tensor import Tensor
from .runtime import dtypes

__all__ = ["assert_close"]

# PyTorch's defaults: (rtol, atol) by dtype; integers and bool compare exactly
_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
               "float64": (1e-7, 1e-7)}


class _Mismatch(Exception):
    """A failed comparison: its message, and whether it is a type error (no pair handles it)."""
    def __init__(self, message, error=AssertionError):
        super().__init__(message)
        self.error = error


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    """Raise AssertionError unless `actual` and `expected` are close: tensors (same shape,
    dtype and device unless told otherwise) with |actual - expected| <= atol + rtol * |expected|
    elementwise, Python numbers, or sequences and mappings of those."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         f"{'rtol' if rtol is None else 'atol'}.")
    try:
        _compare(actual, expected, (), dict(rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=check_device,
                                            check_dtype=check_dtype))
    except _Mismatch as m:
        text, path = m.args[0], getattr(m, "path", ())
        if m.error is not AssertionError:
            raise m.error(text) from None
        if msg is not None:
            text = msg(text) if callable(msg) else msg
        elif path:
            text += "\n\nThe failure occurred for item " + "".join(f"[{p!r}]" for p in path)
        raise AssertionError(text) from None


def _compare(actual, expected, path, opts):
    try:
        if isinstance(actual, (Tensor, np.ndarray)) and isinstance(expected, (Tensor, np.ndarray)):
            return _tensors(actual, expected, opts)
        if _is_number(actual) and _is_number(expected):
            return _numbers(actual, expected, opts)
        if isinstance(actual, Mapping) and isinstance(expected, Mapping):
            if set(actual) != set(expected):
                raise _Mismatch(f"The keys of the mappings do not match:\n"
                                f"Missing keys in the actual mapping: {sorted(set(expected) - set(actual), key=str)}\n"
                                f"Extra keys in the actual mapping: {sorted(set(actual) - set(expected), key=str)}")
            for k in expected:
                _compare(actual[k], expected[k], path + (k,), opts)
            return
        if _is_sequence(actual) and _is_sequence(expected):
            if len(actual) != len(expected):
                raise _Mismatch(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}")
            for i, (a, e) in enumerate(zip(actual, expected)):
                _compare(a, e, path + (i,), opts)
            return
    except _Mismatch as m:
        if not hasattr(m, "path"):
            m.path = path
        raise
    raise _Mismatch(f"No comparison pair was able to handle inputs of type {type(actual)} and {type(expected)}.",
                    TypeError)


def _is_number(x):
    return isinstance(x, (bool, int, float, np.number, np.bool_))


def _is_sequence(x):
    return isinstance(x, Sequence) and not isinstance(x, str)


def _tolerances(names, rtol, atol):
    if rtol is not None:
        return rtol, atol
    pairs = [_TOLERANCES.get(n, (0.0, 0.0)) for n in names]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _tensors(actual, expected, opts):
    a_t = actual if isinstance(actual, Tensor) else None
    e_t = expected if isinstance(expected, Tensor) else None
    a, e = _host(actual), _host(expected)
    if a.shape != e.shape:
        raise _Mismatch(f"The values for attribute 'shape' do not match: {_shape(actual)} != {_shape(expected)}.")
    if opts["check_device"] and a_t is not None and e_t is not None and a_t.device != e_t.device:
        raise _Mismatch(f"The values for attribute 'device' do not match: {a_t.device} != {e_t.device}.")
    a_d, e_d = dtypes.from_np(a.dtype), dtypes.from_np(e.dtype)
    if opts["check_dtype"] and a_d is not e_d:
        raise _Mismatch(f"The values for attribute 'dtype' do not match: {a_d} != {e_d}.")
    rtol, atol = _tolerances((a_d.name, e_d.name), opts["rtol"], opts["atol"])
    if a.ndim == 0:  # PyTorch words a 0-d mismatch like one of Python numbers
        if not _close(a.astype(np.float64), e.astype(np.float64), rtol, atol, opts["equal_nan"]):
            _scalar_mismatch(a.item(), e.item(), rtol, atol)
        return
    _values("Tensor-likes", a, e, rtol, atol, opts["equal_nan"])


def _host(x):
    if isinstance(x, Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _shape(x):
    return x.shape if isinstance(x, Tensor) else tuple(x.shape)


def _numbers(actual, expected, opts):
    exact = all(isinstance(v, (bool, int, np.integer, np.bool_)) for v in (actual, expected))
    name = "int64" if exact else dtypes.get_default_dtype().name
    rtol, atol = _tolerances((name,), opts["rtol"], opts["atol"])
    a, e = (int(actual), int(expected)) if exact else (float(actual), float(expected))
    if not _close(np.asarray(a, np.float64), np.asarray(e, np.float64), rtol, atol, opts["equal_nan"]):
        _scalar_mismatch(a, e, rtol, atol)


def _scalar_mismatch(a, e, rtol, atol):
    equal = rtol == 0 and atol == 0
    diff = abs(a - e)
    rel = diff / abs(e) if e != 0 else (math.inf if diff else 0.0)
    raise _Mismatch(f"Scalars are not {'equal' if equal else 'close'}!\n\nExpected {e} but got {a}.\n"
                    f"Absolute difference: {diff}{_allowed(atol, equal)}\n"
                    f"Relative difference: {rel}{_allowed(rtol, equal)}")


def _close(a, e, rtol, atol, equal_nan):
    close = a == e
    if equal_nan:
        close |= np.isnan(a) & np.isnan(e)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - e)
        return close | (np.isfinite(diff) & (diff <= atol + rtol * np.abs(e)))


def _allowed(tol, equal):
    return "" if equal else f" (up to {tol} allowed)"


def _values(kind, a, e, rtol, atol, equal_nan):
    """Compare arrays of one shape; on failure, PyTorch's summary of the mismatches."""
    floating = a.dtype.kind in FLOATING_KINDS or e.dtype.kind in FLOATING_KINDS
    work = np.result_type(a.dtype, e.dtype) if floating else dtypes.get_default_dtype().np
    if a.dtype.kind == "b":
        a, e = a.astype(np.int64), e.astype(np.int64)
    close = _close(a.astype(work), e.astype(work), rtol, atol, equal_nan)
    if close.all():
        return
    equal = rtol == 0 and atol == 0
    bad = int(close.size - np.count_nonzero(close))
    with np.errstate(all="ignore"):
        if floating:
            diff = np.abs(a.astype(work) - e.astype(work))
        else:  # integers: the exact difference, in int64
            diff = np.abs(a.astype(np.int64) - e.astype(np.int64))
        rel = diff.astype(work) / np.abs(e.astype(work))
    diff = np.where(close, 0, diff)
    rel = np.where(close, 0, rel)
    i_abs, i_rel = _argmax(diff), _argmax(rel)
    raise _Mismatch(f"{kind} are not {'equal' if equal else 'close'}!\n\n"
                    f"Mismatched elements: {bad} / {close.size} ({bad / close.size:.1%})\n"
                    f"Greatest absolute difference: {diff[i_abs].item()} at index {i_abs}{_allowed(atol, equal)}\n"
                    f"Greatest relative difference: {rel[i_rel].item()} at index {i_rel}{_allowed(rtol, equal)}")


def _argmax(x):
    """The index of the largest value, nan first (as PyTorch reports nan differences)."""
    flat = x.reshape(-1)
    nan = np.isnan(flat) if flat.dtype.kind in FLOATING_KINDS else np.zeros(flat.shape, bool)
    i = int(np.argmax(nan)) if nan.any() else int(np.argmax(flat))
    return tuple(int(j) for j in np.unravel_index(i, x.shape)) if x.shape else ()
