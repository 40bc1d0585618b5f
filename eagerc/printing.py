"""repr(tensor) in PyTorch's layout: tensor([...], dtype=..., device=..., grad_fn=<...>)."""
import numpy as np

from .runtime import dtypes

_DEFAULTS = ("float32", "int64", "bool")


def _format_array(a):
    kind = a.dtype.kind
    if kind == "f":
        # PyTorch's _Formatter rules, on the nonzero finite values (in float64, so that
        # range tests on float16 cannot overflow): integer mode when all are whole
        # numbers; scientific when max/min > 1000 or max > 1e8 (or, outside integer
        # mode, min < 1e-4); else 4 decimals.
        finite = (a[np.isfinite(a)] if a.size else a).astype(np.float64)
        nz = np.abs(finite[finite != 0])
        int_mode = bool(np.all(finite == np.round(finite)))
        sci = bool(nz.size) and (nz.max() / nz.min() > 1000 or nz.max() > 1e8
                                 or (not int_mode and nz.min() < 1e-4))
        if sci:
            fmt = lambda v: "%.4e" % v  # noqa: E731
        elif int_mode:
            fmt = lambda v: ("%.0f." % v) if np.isfinite(v) else str(v)  # noqa: E731
        else:
            fmt = lambda v: "%.4f" % v  # noqa: E731
        return np.array2string(a, separator=", ", formatter={"float_kind": fmt}, prefix="tensor(",
                               threshold=1000, edgeitems=3)
    if kind == "b":
        return np.array2string(a, separator=", ", formatter={"bool": lambda v: str(bool(v))},
                               prefix="tensor(", threshold=1000, edgeitems=3)
    return np.array2string(a, separator=", ", prefix="tensor(", threshold=1000, edgeitems=3)


def tensor_repr(t):
    a = t._array if type(t._array) is np.ndarray else t._array.get()
    body = _format_array(a)
    extras = []
    if a.size == 0 and a.ndim != 1:
        extras.append(f"size={tuple(a.shape)}")
    if t.device.type != "cpu":
        extras.append(f"device='{t.device}'")
    name = dtypes.from_np(a.dtype).name
    if name not in _DEFAULTS or (a.size == 0 and name != "float32"):
        extras.append(f"dtype=eagerc.{name}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"
