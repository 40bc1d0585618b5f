"""repr(tensor) exactly as PyTorch prints it, and the print options that steer it.

The text is PyTorch's character for character (with `eagerc.` where it writes `torch.`):

* One format for every element of a tensor, chosen from its nonzero finite values: integers
  print as themselves; floats print in "integer mode" (`3.`) when all those values are whole,
  else with `precision` decimals, and switch to scientific notation when the largest is over
  1e8, the smallest under 1e-4, or their ratio over 1000 (`sci_mode` True/False forces it).
  All elements are right-aligned to the widest nonzero finite one, so columns line up
  (nan/inf/0 do not count towards that width, as in PyTorch).
* Rows are wrapped to `linewidth`, nested brackets indented by one per level, sub-blocks of an
  n-d tensor separated by n-1 newlines.
* Past `threshold` elements, each dimension longer than 2*`edgeitems` keeps only its first and
  last `edgeitems` entries, with `...` between; only those entries are ever read or formatted
  (and, for a GPU tensor, copied to the host), so printing a huge tensor is cheap.
* Suffixes: device when not CPU; `size=` for empty tensors that are not 1-d (and for every
  tensor when edgeitems is 0); `dtype=` unless it is the default float dtype, int64 or bool
  (for an empty tensor, unless it is the default float dtype); then grad_fn or requires_grad.
  A suffix that would pass `linewidth` goes on its own line (judged by the length of PyTorch's
  `torch.` name, so that breaks fall exactly where PyTorch's do).
"""
import math

import numpy as np

from .runtime.dtypes import FLOATING_KINDS
from .runtime import dtypes
from .runtime.device import xp_of

_PROFILES = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80},
}

_OPTS = dict(_PROFILES["default"], sci_mode=None)


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None,
                     sci_mode=None):
    """Set how tensors print, as torch.set_printoptions: a profile ("default", "short", "full")
    first, then each option given; None leaves an option as it is, except `sci_mode`, which is
    always set (None: automatic, True/False: always/never scientific notation)."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: profile must be one of {sorted(_PROFILES)}, got {profile!r}")
    for name, value in (("precision", precision), ("edgeitems", edgeitems)):
        if value is not None and (type(value) is bool or not isinstance(value, int) or value < 0):
            raise ValueError(f"set_printoptions: {name} must be a non-negative int, got {value!r}")
    for name, value in (("threshold", threshold), ("linewidth", linewidth)):
        if value is not None and (type(value) is bool or not isinstance(value, (int, float)) or value != value):
            raise ValueError(f"set_printoptions: {name} must be a number, got {value!r}")
    if profile is not None:
        _OPTS.update(_PROFILES[profile])
    for name, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                        ("linewidth", linewidth)):
        if value is not None:
            _OPTS[name] = value
    _OPTS["sci_mode"] = sci_mode


def get_printoptions():
    """The current print options, as a dict that set_printoptions(**...) accepts (PyTorch's
    torch._tensor_str.get_printoptions)."""
    return dict(_OPTS)


# ---------------------------------------------------------------- elements

def _float_format(flat, precision, sci_mode):
    """PyTorch's float formatter: a function value -> text, and the nonzero finite values
    that decide the column width (None when there are none: the width is then 1)."""
    finite = flat[np.isfinite(flat) & (flat != 0)]
    if finite.size == 0:   # only zeros, nan and inf: integer mode, whatever sci_mode says
        return (lambda v: f"{v:.0f}." if math.isfinite(v) else f"{v:.0f}"), None
    mags = np.abs(finite).astype(np.float64)
    lo, hi = float(mags.min()), float(mags.max())
    int_mode = bool(np.all(finite == np.ceil(finite)))
    sci = (hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4) if sci_mode is None else sci_mode
    if sci:
        return (lambda v: f"{v:.{precision}e}"), finite
    if int_mode:
        return (lambda v: f"{v:.0f}." if math.isfinite(v) else f"{v:.0f}"), finite
    return (lambda v: f"{v:.{precision}f}"), finite


def _element_strings(a):
    """Every element of `a` (a host array) as text, right-aligned to PyTorch's common width."""
    values = a.ravel().tolist()
    if a.dtype.kind not in FLOATING_KINDS:
        texts = [str(v) for v in values]
        width = max(map(len, texts))
    else:
        fmt, counted = _float_format(a.ravel(), _OPTS["precision"], _OPTS["sci_mode"])
        texts = [fmt(v) for v in values]
        # The width comes from the nonzero finite values alone (at least 1).
        width = 1 if counted is None else max(1, max(len(fmt(v)) for v in _widest(counted)))
    return [s.rjust(width) for s in texts], width


def _widest(finite):
    """The few values whose text is widest: in each sign, the largest and smallest magnitude
    (a formatted number's length grows with its magnitude, and in scientific notation with its
    exponent's magnitude), so the width needs no second pass over every element."""
    picks = []
    for part in (finite[finite > 0], finite[finite < 0]):
        if part.size:
            picks += [float(part.min()), float(part.max())]
    return picks


# ---------------------------------------------------------------- layout

def _summarized(arr, edgeitems, summarize):
    """The entries that get printed (first/last `edgeitems` of each long dimension when
    summarizing) and, per dimension, whether `...` goes in its middle."""
    cut = []
    for axis, n in enumerate(arr.shape):
        c = summarize and n > 2 * edgeitems
        if c:
            lead = (slice(None),) * axis
            halves = (arr[lead + (slice(0, edgeitems),)], arr[lead + (slice(n - edgeitems, n),)])
            arr = xp_of(arr).concatenate(halves, axis=axis)
        cut.append(c)
    return arr, cut


def _block(texts, cut, indent, edgeitems, per_line):
    """One bracketed block of an object array of element texts, starting at column `indent`."""
    if texts.ndim == 1:
        items = list(texts)
        if cut[0]:
            items[edgeitems:edgeitems] = [" ..."]
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = [_block(texts[i], cut[1:], indent + 1, edgeitems, per_line) for i in range(texts.shape[0])]
    if cut[0]:
        rows[edgeitems:edgeitems] = ["..."]
    return "[" + ("," + "\n" * (texts.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def _body(arr, indent):
    """The text inside `tensor(...)` for a non-empty array (numpy or cupy)."""
    edgeitems = _OPTS["edgeitems"]
    summarize = arr.size > _OPTS["threshold"]
    if summarize and edgeitems == 0 and arr.ndim:
        return "[...]"
    arr, cut = _summarized(arr, edgeitems, summarize)
    host = arr if type(arr) is np.ndarray else arr.get()
    texts, width = _element_strings(host)
    if host.ndim == 0:
        return texts[0]
    grid = np.empty(len(texts), dtype=object)
    grid[:] = texts
    per_line = max(1, math.floor((_OPTS["linewidth"] - (indent + host.ndim - 1)) / (width + 2)))
    return _block(grid.reshape(host.shape), cut, indent, edgeitems, per_line)


def _add_suffixes(text, suffixes, indent):
    """Append `, suffix` to `text`, starting a new line where the suffix would pass linewidth
    (measuring the last line as PyTorch does, two characters long). Each suffix comes with the
    length PyTorch's own text has ("dtype=torch.int32" is one shorter than eagerc's), so the line
    breaks fall where PyTorch's do and the text is PyTorch's with only the name changed."""
    parts = [text]
    last = len(text) - text.rfind("\n") + 1
    for s, length in suffixes:
        if last + length + 2 > _OPTS["linewidth"]:
            parts.append(",\n" + " " * indent + s)
            last = indent + length
        else:
            parts.append(", " + s)
            last += length + 2
    return "".join(parts) + ")"


def _suffix(s):
    return s, len(s)


def _dtype_suffix(dtype):
    return f"dtype={dtype!r}", len(f"dtype=torch.{dtype.name}")


def tensor_repr(t):
    """PyTorch's repr of a tensor: tensor([...], device=..., dtype=..., grad_fn=<...>)."""
    arr = t._array
    prefix = "tensor("
    suffixes = []
    if t.device.type != "cpu":
        suffixes.append(_suffix(f"device='{t.device}'"))
    dtype = dtypes.from_np(arr.dtype)
    default = dtypes.get_default_dtype()
    if arr.size == 0:
        body = "[]"
        if arr.ndim != 1:
            suffixes.append(_suffix(f"size={tuple(arr.shape)}"))
        if dtype is not default:
            suffixes.append(_dtype_suffix(dtype))
    else:
        body = _body(arr, len(prefix))
        if _OPTS["edgeitems"] == 0:
            suffixes.append(_suffix(f"size={tuple(arr.shape)}"))
        if dtype not in (default, dtypes.int64, dtypes.bool):
            suffixes.append(_dtype_suffix(dtype))
    if t.grad_fn is not None:
        suffixes.append(_suffix(f"grad_fn=<{t.grad_fn.name()}>"))
    elif t.requires_grad:
        suffixes.append(_suffix("requires_grad=True"))
    return _add_suffixes(prefix + body, suffixes, len(prefix))
