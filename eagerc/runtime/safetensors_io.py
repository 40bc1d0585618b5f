"""The safetensors file layout, read and written with numpy alone.

A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the
tensor bytes. The header maps each tensor name to

    {"dtype": "F32", "shape": [3, 4], "data_offsets": [begin, end]}

(offsets relative to the first byte after the header; the tensors tile that region
exactly, without holes or overlap) plus an optional "__metadata__": {str: str}.
Files written here read with the `safetensors` package and the other way round.

The reader trusts nothing: `read_header` checks the length field against the file
size, decodes the JSON strictly (no duplicate keys, no NaN, bounded size), and checks
every entry's dtype, shape and offsets before any tensor byte is read. Its one error
type is `FormatError` (a ValueError); callers add the file's name.
"""
import json
import sys

import numpy as np

from .atomic import atomic_write

__all__ = ["FormatError", "DTYPES", "MAX_HEADER", "read_header", "read_tensors", "write", "save_file"]

MAX_HEADER = 100_000_000  # bytes of JSON header; the safetensors package's own limit
MAX_NDIM = 64
MAX_DIM = 2 ** 40
MAX_NAME = 1024

# safetensors dtype code <-> numpy dtype (the dtypes eagerc has)
DTYPES = {"BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
          "I16": np.dtype(np.int16), "I32": np.dtype(np.int32), "I64": np.dtype(np.int64),
          "F16": np.dtype(np.float16), "F32": np.dtype(np.float32), "F64": np.dtype(np.float64)}
_CODES = {d: code for code, d in DTYPES.items()}


class FormatError(ValueError):
    """The bytes are not a well-formed safetensors file; the message says what is wrong."""


# ---------------------------------------------------------------- reading

def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise FormatError(f"header JSON repeats the key {k!r}")
        d[k] = v
    return d


def _no_constant(name):
    raise FormatError(f"header JSON contains {name}, which is not JSON")


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def read_header(f, size, max_header=MAX_HEADER):
    """Parse and check the header of the file object `f` holding `size` bytes.

    Returns (tensors, metadata, data_start): tensors maps name -> (numpy dtype, shape
    tuple, begin, end) with absolute file offsets; metadata is the {str: str} dict.
    """
    if size < 8:
        raise FormatError(f"file is truncated: {size} bytes, shorter than the 8-byte header length")
    f.seek(0)
    n = int.from_bytes(_read_exactly(f, 8), "little")
    if n < 2:
        raise FormatError(f"header length {n} is too small for a JSON object")
    if n > max_header:
        raise FormatError(f"header length {n} exceeds the limit of {max_header} bytes")
    if 8 + n > size:
        raise FormatError(f"file is truncated: the header says it is {n} bytes long, but only "
                          f"{size - 8} bytes follow the length field")
    raw = _read_exactly(f, n)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"header is not UTF-8 ({e.reason} at byte {e.start})") from None
    if not text.startswith("{"):
        raise FormatError("header does not start with '{' (not a safetensors file?)")
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except FormatError:
        raise
    except RecursionError:
        raise FormatError("header JSON is nested too deeply") from None
    except (ValueError, MemoryError) as e:  # json.JSONDecodeError is a ValueError
        raise FormatError(f"header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError("header JSON is not an object")

    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict):
        raise FormatError("__metadata__ is not a JSON object")
    for k, v in metadata.items():
        if not isinstance(v, str):
            raise FormatError(f"__metadata__[{k!r}] is a {type(v).__name__}, not a string")

    data_start = 8 + n
    data_size = size - data_start
    tensors = {}
    for name, entry in header.items():
        tensors[name] = _check_entry(name, entry, data_size)
    spans = sorted((b, e, name) for name, (_, _, b, e) in tensors.items())
    pos = 0
    for b, e, name in spans:
        if b < pos:
            raise FormatError(f"tensor {name!r} (bytes {b}..{e}) overlaps another tensor")
        if b > pos:
            raise FormatError(f"bytes {pos}..{b} of the data belong to no tensor (before {name!r})")
        pos = e
    if pos < data_size:
        raise FormatError(f"file has {data_size - pos} bytes of trailing data after the last tensor "
                          f"(oversized or corrupted file)")
    return ({name: (dt, shape, data_start + b, data_start + e) for name, (dt, shape, b, e) in tensors.items()},
            metadata, data_start)


def _check_entry(name, entry, data_size):
    if not name or len(name) > MAX_NAME:
        raise FormatError(f"tensor name {name[:80]!r} is empty or longer than {MAX_NAME} characters")
    what = f"tensor {name!r}"
    if not isinstance(entry, dict):
        raise FormatError(f"{what}: entry is a {type(entry).__name__}, not an object")
    keys = set(entry)
    if keys != {"dtype", "shape", "data_offsets"}:
        missing, extra = {"dtype", "shape", "data_offsets"} - keys, keys - {"dtype", "shape", "data_offsets"}
        raise FormatError(f"{what}: entry " + (f"lacks {sorted(missing)}" if missing else
                                               f"has unknown keys {sorted(extra)[:5]}"))
    code, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(code, str) or code not in DTYPES:
        raise FormatError(f"{what}: unsupported dtype {str(code)[:40]!r} (supported: {', '.join(DTYPES)})")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM:
        raise FormatError(f"{what}: shape is not a list of at most {MAX_NDIM} sizes")
    for s in shape:
        if not _is_int(s) or not 0 <= s < MAX_DIM:
            raise FormatError(f"{what}: invalid size {str(s)[:40]} in shape")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(_is_int(o) for o in offsets)):
        raise FormatError(f"{what}: data_offsets is not a pair of integers")
    b, e = offsets
    if not 0 <= b <= e:
        raise FormatError(f"{what}: data_offsets {offsets} are not 0 <= begin <= end")
    if e > data_size:
        raise FormatError(f"{what}: data_offsets end {e} is past the end of the data ({data_size} bytes): "
                          "file is truncated")
    dtype = DTYPES[code]
    nbytes = dtype.itemsize
    for s in shape:
        nbytes *= s
    if e - b != nbytes:
        raise FormatError(f"{what}: {code}{shape} needs {nbytes} bytes but data_offsets {offsets} "
                          f"span {e - b}")
    return dtype, tuple(shape), b, e


def _read_exactly(f, n):
    data = f.read(n)
    if len(data) != n:
        raise FormatError(f"file is truncated: wanted {n} bytes, got {len(data)}")
    return data


def read_tensors(f, tensors, names=None):
    """Read the tensors `names` (default: all) described by read_header's `tensors` into fresh,
    aligned, native-byte-order numpy arrays."""
    out = {}
    for name in (tensors if names is None else names):
        dtype, shape, b, e = tensors[name]
        arr = np.empty(shape, dtype)
        if e > b:
            f.seek(b)
            buf = memoryview(arr.reshape(-1).view(np.uint8))
            got = f.readinto(buf)
            if got != e - b:
                raise FormatError(f"tensor {name!r}: file is truncated (read {got} of {e - b} bytes)")
            if sys.byteorder == "big" and dtype.itemsize > 1:
                arr.byteswap(inplace=True)
        out[name] = arr
    return out


# ---------------------------------------------------------------- writing

def _header_bytes(tensors, metadata):
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    pos = 0
    for name, arr in tensors.items():
        if arr.dtype not in _CODES:
            raise TypeError(f"safetensors_io: cannot store tensor {name!r} of dtype {arr.dtype}")
        header[name] = {"dtype": _CODES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [pos, pos + arr.nbytes]}
        pos += arr.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return raw + b" " * (-len(raw) % 8)  # pad so the data starts 8-byte aligned


def _write_array(f, arr):
    if arr.size:
        f.write(arr.reshape(-1).view(np.uint8).data)


def write(f, tensors, metadata=None):
    """Write `tensors` (name -> numpy array) and `metadata` ({str: str}) to the binary file `f`."""
    tensors = {name: _little_endian(np.asarray(a)) for name, a in tensors.items()}
    raw = _header_bytes(tensors, metadata)
    f.write(len(raw).to_bytes(8, "little"))
    f.write(raw)
    for arr in tensors.values():
        _write_array(f, arr)


def _little_endian(a):
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags.c_contiguous:
        a = a.copy(order="C")
    return a


def save_file(path, tensors, metadata=None):
    """Write a safetensors file atomically (see atomic.py): a crash mid-write leaves any old
    file intact."""
    atomic_write(path, lambda f: write(f, tensors, metadata), "save")
