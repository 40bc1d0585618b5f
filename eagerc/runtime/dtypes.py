"""dtypes and PyTorch's type-promotion rules.

A `DType` wraps a numpy dtype so that user code can write `eagerc.float32` like
`torch.float32`. Promotion follows PyTorch, not numpy: categories are ordered
bool < integer < floating; a higher category wins outright (int64 + float16 is
float16, not float64), Python scalars and 0-d tensors only choose the dtype when
they are of a higher category than the dimensioned operands.

bfloat16 comes from the `ml_dtypes` package (numpy's bfloat16, the one JAX uses), an
extra: it is imported on the first use of bfloat16 (`eagerc.bfloat16`, the name
"bfloat16", an array of that type), never by `import eagerc.runtime`, so a program without
bfloat16 needs numpy alone. Its numpy dtype has kind "V", not "f": code that asks "is this
array floating?" tests `kind in FLOATING_KINDS`.
"""
import numpy as np

__all__ = [
    "DType", "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64", "promote_types", "result_type",
    "as_dtype", "get_default_dtype", "set_default_dtype",
]

_builtin_bool = bool


class DType:
    """A named scalar type; `np` is the numpy dtype it maps to."""
    __slots__ = ("name", "np", "itemsize", "is_floating_point", "is_signed", "category")

    def __init__(self, name, np_dtype, category):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.is_floating_point = category == 2
        self.is_signed = self.np.kind in "if" or category == 2
        self.category = category  # 0 bool, 1 integer, 2 floating

    @property
    def is_complex(self):
        return False

    def __repr__(self):
        return "eagerc." + self.name

    def __reduce__(self):  # dtypes are singletons; copy/deepcopy keep them so
        return (as_dtype, (self.name,))


bool = DType("bool", np.bool_, 0)  # noqa: A001 - mirrors torch.bool
uint8 = DType("uint8", np.uint8, 1)
int8 = DType("int8", np.int8, 1)
int16 = DType("int16", np.int16, 1)
int32 = DType("int32", np.int32, 1)
int64 = DType("int64", np.int64, 1)
float16 = DType("float16", np.float16, 2)
float32 = DType("float32", np.float32, 2)
float64 = DType("float64", np.float64, 2)

ALL = (bool, uint8, int8, int16, int32, int64, float16, float32, float64)   # + bfloat16 once loaded
NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
_BY_NP = {d.np: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64,
                 "int": int32, "short": int16, "bool_": bool})

_default_float = float32

# numpy dtype kinds of eagerc's floating types: "f", and "V" for ml_dtypes' bfloat16 (eagerc
# has no other void-kind type, so the test stays one string lookup)
FLOATING_KINDS = "fV"

BF16_EXTRA = ("bfloat16 needs the ml_dtypes package (numpy's bfloat16 type, as JAX uses), "
              "which is not installed: pip install \"eagerc[bf16]\"  (or: pip install ml_dtypes)")


def _load_bfloat16():
    """Import ml_dtypes and register bfloat16: on its first use, so that the runtime of a
    program without bfloat16 never imports it (and works where it is not installed)."""
    global ALL
    d = _BY_NAME.get("bfloat16")
    if d is not None:
        return d
    try:
        import ml_dtypes
    except ImportError:
        raise ImportError(BF16_EXTRA) from None
    d = DType("bfloat16", ml_dtypes.bfloat16, 2)
    ALL = ALL[:7] + (d,) + ALL[7:]   # after float16
    _BY_NP[d.np] = _BY_NAME["bfloat16"] = d
    globals()["bfloat16"] = d
    return d


def __getattr__(name):  # PEP 562: `dtypes.bfloat16` loads ml_dtypes on first use
    if name == "bfloat16":
        return _load_bfloat16()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_default_dtype():
    return _default_float


def set_default_dtype(d):
    global _default_float
    d = as_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"set_default_dtype: only floating dtypes can be the default, got {d}")
    _default_float = d


def from_np(np_dtype):
    """The DType of a numpy dtype; raises for types eagerc does not support."""
    d = _BY_NP.get(np_dtype)
    if d is None:
        d = _BY_NP.get(np.dtype(np_dtype))
        if d is None:
            if np.dtype(np_dtype).name == "bfloat16":   # an ml_dtypes array met before eagerc.bfloat16
                return _load_bfloat16()
            raise TypeError(f"eagerc does not support numpy dtype {np_dtype}; "
                            f"supported: {', '.join(x.name for x in ALL)}")
    return d


def as_dtype(d):
    """Accept a DType, a numpy dtype/type, a string name, or Python's float/int/bool."""
    if d is None or type(d) is DType:
        return d
    if isinstance(d, str):
        r = _BY_NAME.get(d)  # a plain name: no prefix to strip
        if r is not None:
            return r
        try:
            return _BY_NAME[d.replace("eagerc.", "").replace("torch.", "")]
        except KeyError:
            if d.replace("eagerc.", "").replace("torch.", "") == "bfloat16":
                return _load_bfloat16()
            raise TypeError(f"unknown dtype name {d!r}") from None
    if d is float:
        return _default_float
    if d is int:
        return int64
    if d is _builtin_bool:
        return bool
    return from_np(np.dtype(d))


def promote_types(a, b):
    """PyTorch's promote_types for two dtypes."""
    if a is b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    return _BY_NP[np.promote_types(a.np, b.np)]


def scalar_category(x):
    if isinstance(x, _builtin_bool) or isinstance(x, np.bool_):
        return 0
    if isinstance(x, (int, np.integer)):
        return 1
    return 2


def result_type(dims, zerodims, scalars):
    """Result dtype of an op whose operands are dimensioned tensors (`dims`, dtypes),
    0-d tensors (`zerodims`, dtypes) and Python scalars (`scalars`, values).

    Mirrors torch.result_type: each priority class is promoted on its own, and a
    lower class only contributes when it has a higher category.
    """
    out = None
    for group in (dims, zerodims):
        g = None
        for d in group:
            g = d if g is None else promote_types(g, d)
        if g is not None and (out is None or g.category > out.category):
            out = g
    if scalars:
        cat = max(scalar_category(s) for s in scalars)
        if out is None or cat > out.category:
            out = (bool, int64, _default_float)[cat]   # a scalar's dtype: its category's default
    return out
