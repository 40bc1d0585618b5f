"""finfo / iinfo: the numeric limits of a dtype, as torch.finfo / torch.iinfo report them.

Plain values read from numpy's finfo/iinfo once per call (Python floats and ints), so code
that writes `eagerc.finfo(x.dtype).min` as a mask value or `.eps` as a tolerance gets what
it gets from PyTorch. It lives in the runtime: it is a fact about dtypes, nothing more.
"""
import numpy as np

from . import dtypes

__all__ = ["finfo", "iinfo"]


def _dtype(d, cls, wanted):
    d = dtypes.get_default_dtype() if d is None and cls == "finfo" else dtypes.as_dtype(d)
    if d is dtypes.bool:
        raise TypeError(f"torch.bool is not supported by torch.{cls}")
    if d.is_floating_point != (wanted == "float"):
        other = "iinfo" if cls == "finfo" else "finfo"
        kind = "a floating point" if wanted == "float" else "an integer"
        raise TypeError(f"torch.{cls}() requires {kind} input type. Use torch.{other} to handle 'torch.{cls}'")
    return d


class finfo:
    """bits, eps, max, min, tiny (= smallest_normal), resolution and dtype (its name) of a
    floating-point dtype; the default dtype when none is given."""
    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")

    def __init__(self, type=None):
        d = _dtype(type, "finfo", "float")
        info = np.finfo(d.np)
        self.bits, self.dtype = info.bits, d.name
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -info.precision  # 1e-06 for float32, 0.001 for float16 (numpy rounds it)

    def __eq__(self, other):
        return isinstance(other, finfo) and other.dtype == self.dtype

    def __hash__(self):
        return hash(("finfo", self.dtype))

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """bits, max, min and dtype (its name) of an integer dtype."""
    __slots__ = ("bits", "max", "min", "dtype")

    def __init__(self, type):
        d = _dtype(type, "iinfo", "int")
        info = np.iinfo(d.np)
        self.bits, self.max, self.min, self.dtype = info.bits, int(info.max), int(info.min), d.name

    def __eq__(self, other):
        return isinstance(other, iinfo) and other.dtype == self.dtype

    def __hash__(self):
        return hash(("iinfo", self.dtype))

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"
