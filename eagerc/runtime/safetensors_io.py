"""The safetensors file layout, read and written with numpy alone, with a whole-file checksum.

A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the
tensor bytes. The header maps each tensor name to

    {"dtype": "F32", "shape": [3, 4], "data_offsets": [begin, end]}

(offsets relative to the first byte after the header; the tensors tile that region
exactly, without holes or overlap) plus an optional "__metadata__": {str: str}.
Files written here read with the `safetensors` package and the other way round.

Checksum ("sealed" files). eagerc's checkpoints and programs carry a SHA-256 of every
byte of the file -- length field, header JSON, tensor data -- as the first entry of the
metadata, at a fixed place:

    {"__metadata__":{"<key>":"sha256:<64 hex digits>", ...}, ...}

The digest is computed over the file with those 64 hex digits replaced by the ASCII
digit "0", so one flipped bit anywhere (the digest included) is a mismatch. The file
stays a plain safetensors file: the checksum is just a metadata string to other tools.
A tool that rewrites the header (the safetensors package does) moves or keeps a stale
checksum, and the reader refuses the file: use `seal` after a deliberate edit.

The reader trusts nothing: `open_regular` refuses FIFOs and devices before they can
block; `read_header` checks the length field against the file size, decodes the JSON
strictly (no duplicate keys, no NaN, bounded size and nesting), and checks every
entry's dtype, shape and offsets before any tensor byte is read; `read_tensors` hashes
every byte it reads and compares with the checksum. Its one error type is `FormatError`
(a ValueError); callers add the file's name.
"""
import contextlib
import gc
import hashlib
import json
import os
import stat
import sys

import numpy as np

from .atomic import atomic_write

__all__ = ["register_bfloat16", "FormatError", "NotSafetensors", "UnsupportedDtype", "Header", "DTYPES", "MAX_HEADER", "open_regular",
           "loads_json", "loads_json_counted", "unique_keys", "gc_paused", "sniff", "read_header", "read_tensors", "verify",
           "write", "save_file", "seal"]

MAX_HEADER = 100_000_000  # bytes of JSON header; the safetensors package's own limit
MAX_NDIM = 64
MAX_DIM = 2 ** 40
MAX_NAME = 1024
ALGORITHM = "sha256"
_HEX = 64                 # hex digits of a SHA-256 digest

# safetensors dtype code <-> numpy dtype (what eagerc stores)
DTYPES = {"BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
          "U16": np.dtype(np.uint16), "I16": np.dtype(np.int16), "U32": np.dtype(np.uint32),
          "I32": np.dtype(np.int32), "U64": np.dtype(np.uint64), "I64": np.dtype(np.int64),
          "F16": np.dtype(np.float16), "F32": np.dtype(np.float32), "F64": np.dtype(np.float64)}
_CODES = {d: code for code, d in DTYPES.items()}
_OTHER_CODES = frozenset(("F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"))


def register_bfloat16():
    """Add "BF16" to DTYPES on its first use and return its numpy dtype: bfloat16 is ml_dtypes'
    type, imported only by files and programs that hold it. None without ml_dtypes."""
    from . import dtypes
    try:
        d = dtypes.bfloat16.np
    except ImportError:
        return None
    DTYPES["BF16"], _CODES[d] = d, "BF16"
    return d


# the first bytes of files people pass by mistake
_MAGIC = [(b"\x93NUMPY", "a numpy .npy file"), (b"PK\x03\x04", "a zip file (a PyTorch .pt / numpy .npz?)"),
          (b"\x80", "a pickle file (a PyTorch .pt / .bin?)"), (b"\x89HDF", "an HDF5 file"),
          (b"GGUF", "a GGUF file"), (b"\x7fELF", "an executable")]


class FormatError(ValueError):
    """The bytes are not a well-formed safetensors file; the message says what is wrong."""


class NotSafetensors(FormatError):
    """The file is not a safetensors file at all (another format, text, empty)."""


class UnsupportedDtype(FormatError):
    """A well-formed entry of a dtype eagerc does not hold (F8_*..., or BF16 without ml_dtypes): not a corruption."""


# ---------------------------------------------------------------- opening

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _not_regular(mode):
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return FormatError(f"is {kind}, not a regular file")


def open_regular(path):
    """(binary file object, size) of the regular file `path`.

    A FIFO, device, socket or directory is refused (FormatError) before it is opened,
    and the open itself cannot block (O_NONBLOCK, then fstat again: the path may have
    been swapped in between). OSError (missing file, no permission) passes through.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise _not_regular(os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(info.st_mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), info.st_size
    except BaseException:
        os.close(fd)
        raise


# ---------------------------------------------------------------- strict JSON

@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector while a loader builds many small objects (a large
    header's JSON, a graph, a checkpoint's structure): its collections, each walking every
    live young container, cost loading a 40 MB header more than a third of its time (JSON
    values hold no cycles). On the way out what survived is moved to the oldest generation
    (freeze + unfreeze, unless the process froze objects itself), so that the first
    collection after the pause does not walk it all at once."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


class _Duplicate(Exception):
    pass


class _Constant(Exception):
    pass


def _no_duplicates(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _Duplicate(k)
            seen.add(k)
    return d


def _no_constant(name):
    raise _Constant(name)


def loads_json(text, what, *, constants=False):
    """Parse JSON from a file strictly: a repeated key anywhere, NaN/Infinity (unless
    `constants`) or nesting too deep for the parser (Python's json recurses) are FormatErrors
    whose message starts with `what`. Callers bound the nesting they walk themselves."""
    return _loads(text, what, constants, _no_duplicates)


def loads_json_counted(text, what, *, constants=False):
    """(obj, bound): `text` parsed as loads_json does but without its duplicate-key hook (a
    Python call per object: a sixth of the time a 40 MB graph takes to load), for a caller that
    walks every object anyway and then calls `unique_keys`. `bound` bounds the keys written in
    the text: each key is followed by a ':' and every other ':' is inside a string, so the
    count of ':' less those in the strings a walk sees is at least the number of keys -- and
    exactly it for the text eagerc writes. None when the text may escape a ':' (\\u003a), which
    that count would miss."""
    bound = None if "\\" in text and "\\u003" in text else text.count(":")
    return _loads(text, what, constants, None), bound


def unique_keys(text, what, bound, keys, colons, *, constants=False):
    """Refuse a repeated key in `text`, parsed by loads_json_counted with `bound`, whose objects a
    walk has seen: `keys` the sum of len() of the objects it visited (each once), `colons` the
    ':' in the strings it visited (each once). The parse kept keys <= the keys written <=
    bound - colons, so equality proves that no key was repeated; anything else (a repeat, or
    objects or strings the walk did not count) is left to the strict parse, which raises
    FormatError on a repeated key."""
    if bound is None or bound - colons != keys:
        loads_json(text, what, constants=constants)


def _loads(text, what, constants, hook):
    try:
        obj = json.loads(text, object_pairs_hook=hook,
                         **({} if constants else {"parse_constant": _no_constant}))
    except _Duplicate as e:
        raise FormatError(f"{what} repeats the key {_clip(e.args[0])}") from None
    except _Constant as e:
        raise FormatError(f"{what} contains {e.args[0]}, which is not JSON") from None
    except RecursionError:
        raise FormatError(f"{what} is nested too deeply") from None
    except (ValueError, MemoryError) as e:  # json.JSONDecodeError is a ValueError
        raise FormatError(f"{what} is not valid JSON: {str(e)[:200]}") from None
    return obj


def _clip(x, n=80):
    s = repr(x)
    return s if len(s) <= n else s[:n] + "...'"


# ---------------------------------------------------------------- reading

def _prefix(key):
    """The bytes a sealed file's header starts with, up to the digest."""
    return b'{"__metadata__":{' + json.dumps(key).encode() + b':"' + ALGORITHM.encode() + b":"


class Header:
    """A checked safetensors header.

    tensors: name -> (numpy dtype, shape tuple, begin, end), absolute file offsets;
    metadata: the {str: str} dict; data_start: offset of the first tensor byte;
    checksum: "sha256:<hex>" for a sealed file, None for a file without a checksum;
    order: the tensor names in the order of their bytes in the file.
    """
    __slots__ = ("tensors", "metadata", "data_start", "checksum", "_hash", "order")

    def __init__(self, tensors, metadata, data_start, checksum, hasher, order):
        self.tensors = tensors
        self.metadata = metadata
        self.data_start = data_start
        self.checksum = checksum
        self._hash = hasher
        self.order = order


def sniff(first):
    """What a file whose first bytes are `first` is, when it is a known other format; else None."""
    for magic, what in _MAGIC:
        if first.startswith(magic):
            return what
    return None


def read_header(f, size, max_header=MAX_HEADER, checksum_key=None):
    """Parse and check the header of the file object `f` holding `size` bytes -> Header.

    With `checksum_key`, a file whose header starts with that checksum entry is sealed:
    `read_tensors` then verifies every byte. Raises NotSafetensors for a file that is not
    safetensors at all, FormatError for a malformed one.
    """
    f.seek(0)
    first = f.read(min(size, 16))
    if first[8:9] != b"{":  # (a safetensors length field may well start with a "magic" byte)
        other = sniff(first)
        if other:
            raise NotSafetensors(f"is {other}, not a safetensors file")
        if size < 8:
            raise NotSafetensors(f"is {size} bytes long, too short for a safetensors file (empty or truncated?)")
        if size > 8:
            raise NotSafetensors("is not a safetensors file (its header does not start with '{')")
    f.seek(0)
    length = _read_exactly(f, 8)
    n = int.from_bytes(length, "little")
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
        raise NotSafetensors("is not a safetensors file (its header does not start with '{')")
    header, bound = loads_json_counted(text, "header JSON")
    if not isinstance(header, dict):
        raise FormatError("header JSON is not an object")
    _header_keys_unique(text, header, bound)

    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict):
        raise FormatError("__metadata__ is not a JSON object")
    for k, v in metadata.items():
        if not isinstance(v, str):
            raise FormatError(f"__metadata__[{_clip(k)}] is a {type(v).__name__}, not a string")

    checksum, hasher = None, None
    if checksum_key is not None and checksum_key in metadata:
        checksum = metadata[checksum_key]
        prefix = _prefix(checksum_key)
        if not raw.startswith(prefix):
            raise FormatError(f"its checksum ({checksum_key!r}) is not the first metadata entry, where eagerc "
                              "writes it: the header was rewritten by another tool, or corrupted")
        digest = checksum[len(ALGORITHM) + 1:]
        if len(digest) != _HEX or digest.strip("0123456789abcdef"):
            raise FormatError(f"its checksum {_clip(checksum)} is not {ALGORITHM}:<{_HEX} hex digits>")
        hasher = hashlib.sha256(length)
        hasher.update(raw[:len(prefix)])
        hasher.update(b"0" * _HEX)
        hasher.update(raw[len(prefix) + _HEX:])

    data_start = 8 + n
    data_size = size - data_start
    tensors = {}
    pos = data_start   # writers lay the tensors out in header order: then they tile the data as listed
    for name, entry in header.items():
        _, _, b, e = tensors[name] = _check_entry(name, entry, data_start, data_size)
        pos = e if b == pos else -1
    if pos == size:
        order = list(tensors)
    else:   # any other layout: sorted by offset, they must tile the data without holes or overlap
        spans = sorted((b - data_start, e - data_start, name) for name, (_, _, b, e) in tensors.items())
        pos = 0
        for b, e, name in spans:
            if b < pos:
                raise FormatError(f"tensor {_clip(name)} (bytes {b}..{e}) overlaps another tensor")
            if b > pos:
                raise FormatError(f"bytes {pos}..{b} of the data belong to no tensor (before {_clip(name)})")
            pos = e
        if pos < data_size:
            raise FormatError(f"file has {data_size - pos} bytes of trailing data after the last tensor "
                              f"(oversized or corrupted file)")
        order = [name for _, _, name in spans]
    return Header(tensors, metadata, data_start, checksum, hasher, order)


def _header_keys_unique(text, header, bound):
    """Refuse a repeated key in a parsed header (unique_keys' proof, before any other check so
    that a repeat is named as such): the objects are the header and its entries one level
    down (a deeper one, not counted, only sends the check to the strict parse); the ':' are
    counted in the tensor names and the metadata's strings, where a file may have some."""
    keys, colons = len(header), "".join(header).count(":")
    for entry in header.values():
        if type(entry) is dict:
            keys += len(entry)
    meta = header.get("__metadata__")
    if type(meta) is dict:
        colons += "".join(meta).count(":")
        colons += "".join([v for v in meta.values() if type(v) is str]).count(":")
    unique_keys(text, "header JSON", bound, keys, colons)


_ENTRY_KEYS = frozenset(("dtype", "shape", "data_offsets"))


def _check_entry(name, entry, data_start, data_size):
    """(dtype, shape, begin, end) of one header entry, checked, with absolute file offsets (the
    common case fast: a large header holds hundreds of thousands of these)."""
    if not name or len(name) > MAX_NAME:
        raise FormatError(f"tensor name {name[:80]!r} is empty or longer than {MAX_NAME} characters")
    if type(entry) is not dict or entry.keys() != _ENTRY_KEYS:
        what = f"tensor {_clip(name)}"
        if not isinstance(entry, dict):
            raise FormatError(f"{what}: entry is a {type(entry).__name__}, not an object")
        missing, extra = _ENTRY_KEYS - set(entry), set(entry) - _ENTRY_KEYS
        raise FormatError(f"{what}: entry " + (f"lacks {sorted(missing)}" if missing else
                                               f"has unknown keys {[_clip(k, 40) for k in sorted(extra)[:5]]}"))
    code, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    dtype = DTYPES.get(code) if type(code) is str else None
    if dtype is None and code == "BF16":
        dtype = register_bfloat16()
        if dtype is None:
            from .dtypes import BF16_EXTRA
            raise UnsupportedDtype(f"tensor {_clip(name)} is bfloat16 (BF16): {BF16_EXTRA}")
    if dtype is None:
        raise (UnsupportedDtype if type(code) is str and code in _OTHER_CODES else FormatError)(
            f"tensor {_clip(name)}: unsupported dtype {str(code)[:40]!r} (supported: {', '.join(DTYPES)})")
    if type(shape) is not list or len(shape) > MAX_NDIM:
        raise FormatError(f"tensor {_clip(name)}: shape is not a list of at most {MAX_NDIM} sizes")
    nbytes = dtype.itemsize
    for s in shape:
        if type(s) is not int or not 0 <= s < MAX_DIM:
            raise FormatError(f"tensor {_clip(name)}: invalid size {str(s)[:40]} in shape")
        nbytes *= s
    if type(offsets) is not list or len(offsets) != 2 or type(offsets[0]) is not int or type(offsets[1]) is not int:
        raise FormatError(f"tensor {_clip(name)}: data_offsets is not a pair of integers")
    b, e = offsets
    if not 0 <= b <= e:
        raise FormatError(f"tensor {_clip(name)}: data_offsets {offsets} are not 0 <= begin <= end")
    if e > data_size:
        raise FormatError(f"tensor {_clip(name)}: data_offsets end {e} is past the end of the data "
                          f"({data_size} bytes): file is truncated")
    if e - b != nbytes:
        raise FormatError(f"tensor {_clip(name)}: {code}{shape} needs {nbytes} bytes but data_offsets {offsets} "
                          f"span {e - b}")
    return dtype, tuple(shape), data_start + b, data_start + e


def _read_exactly(f, n):
    data = f.read(n)
    if len(data) != n:
        raise FormatError(f"file is truncated: wanted {n} bytes, got {len(data)}")
    return data


_SMALL = 1 << 16   # tensors below this many bytes are read in runs of up to _RUN bytes
_RUN = 1 << 22


def read_tensors(f, header, names=None):
    """Read the tensors `names` (default: all) of a Header into fresh, aligned, native-byte-order
    numpy arrays. Reading all tensors of a sealed file hashes every byte and raises FormatError
    on a checksum mismatch, before any array is returned. Large tensors are read straight into
    their arrays; runs of small ones with one read each (a checkpoint may hold 100,000 of them)."""
    tensors = header.tensors
    hasher = header._hash.copy() if names is None and header._hash is not None else None
    order = header.order if names is None else list(names)
    out = {}
    i = 0
    while i < len(order):
        dtype, shape, b, e = tensors[order[i]]
        if e - b >= _SMALL:
            arr = np.empty(shape, dtype)
            f.seek(b)
            buf = memoryview(arr.reshape(-1).view(np.uint8))
            got = f.readinto(buf)
            if got != e - b:
                raise FormatError(f"tensor {_clip(order[i])}: file is truncated (read {got} of {e - b} bytes)")
            if hasher is not None:
                hasher.update(buf)
            out[order[i]] = arr
            i += 1
            continue
        j, end = i, b
        while j < len(order):
            _, _, tb, te = tensors[order[j]]
            if tb != end or te - tb >= _SMALL or te - b > _RUN:
                break
            end, j = te, j + 1
        j = max(j, i + 1)
        end = max(end, e)
        f.seek(b)
        chunk = f.read(end - b)
        if len(chunk) != end - b:
            raise FormatError(f"file is truncated: wanted {end - b} bytes at offset {b}, got {len(chunk)}")
        if hasher is not None:
            hasher.update(chunk)
        for name in order[i:j]:
            dtype, shape, tb, te = tensors[name]
            count = (te - tb) // dtype.itemsize
            out[name] = np.frombuffer(chunk, dtype, count, tb - b).reshape(shape).copy()
        i = j
    if hasher is not None:
        _compare(hasher, header)
    if sys.byteorder == "big":
        for arr in out.values():
            if arr.dtype.itemsize > 1:
                arr.byteswap(inplace=True)
    return {name: out[name] for name in (tensors if names is None else names)}


def _compare(hasher, header):
    if f"{ALGORITHM}:{hasher.hexdigest()}" != header.checksum:
        raise FormatError(f"checksum mismatch: the file's bytes are not the bytes eagerc wrote (corrupted, "
                          f"or edited); it records {header.checksum[:len(ALGORITHM) + 13]}..., its content "
                          f"hashes to {ALGORITHM}:{hasher.hexdigest()[:12]}...")


def verify(f, header, chunk=16 << 20):
    """Check a sealed file's checksum reading its data in chunks (no arrays); True when sealed
    and intact, False for a file without a checksum; FormatError on a mismatch."""
    if header._hash is None:
        return False
    hasher = header._hash.copy()
    f.seek(header.data_start)
    while True:
        block = f.read(chunk)
        if not block:
            break
        hasher.update(block)
    _compare(hasher, header)
    return True


# ---------------------------------------------------------------- writing

def _header_bytes(tensors, metadata):
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    pos = 0
    for name, arr in tensors.items():
        if arr.dtype not in _CODES and not (arr.dtype.name == "bfloat16" and register_bfloat16() is not None):
            raise TypeError(f"safetensors_io: cannot store tensor {name!r} of dtype {arr.dtype}")
        header[name] = {"dtype": _CODES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [pos, pos + arr.nbytes]}
        pos += arr.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if len(raw) > MAX_HEADER - 8:  # a file no reader (this one, the safetensors package) would open
        raise ValueError(f"safetensors_io: the header of {len(tensors)} tensors takes {len(raw)} bytes, more "
                         f"than the format's limit of {MAX_HEADER}: store fewer, larger tensors")
    return raw + b" " * (-len(raw) % 8)  # pad so the data starts 8-byte aligned


def _bytes_of(arr):
    return arr.reshape(-1).view(np.uint8).data


def _write_array(f, arr):
    if arr.size:
        f.write(_bytes_of(arr))


def _sealed(length, raw, key, chunks):
    """raw (a header starting with key's checksum entry, digest zeroed) with the digest of
    length + raw + chunks filled in."""
    p = len(_prefix(key))
    h = hashlib.sha256(length)
    h.update(raw)
    for c in chunks:
        h.update(c)
    return raw[:p] + h.hexdigest().encode() + raw[p + _HEX:]


def write(f, tensors, metadata=None, checksum_key=None):
    """Write `tensors` (name -> numpy array) and `metadata` ({str: str}) to the binary file `f`;
    with `checksum_key`, sealed: the checksum is that metadata entry (see the module doc)."""
    tensors = {name: _little_endian(np.asarray(a)) for name, a in tensors.items()}
    meta = {}
    if checksum_key is not None:
        meta[checksum_key] = f"{ALGORITHM}:" + "0" * _HEX
    meta.update((k, v) for k, v in (metadata or {}).items() if k != checksum_key)
    raw = _header_bytes(tensors, meta)
    length = len(raw).to_bytes(8, "little")
    if checksum_key is not None:
        raw = _sealed(length, raw, checksum_key, (_bytes_of(a) for a in tensors.values() if a.size))
    f.write(length)
    f.write(raw)
    for arr in tensors.values():
        _write_array(f, arr)


def _little_endian(a):
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags.c_contiguous:
        a = a.copy(order="C")
    return a


def save_file(path, tensors, metadata=None, checksum_key=None):
    """Write a safetensors file atomically (see atomic.py): a crash mid-write leaves any old
    file intact."""
    atomic_write(path, lambda f: write(f, tensors, metadata, checksum_key), "save")


def seal(data, checksum_key):
    """The bytes of the safetensors file `data` with the header re-encoded and a fresh
    checksum under `checksum_key`: for tools and tests that edit a file on purpose (any
    tool can; the checksum guards against corruption and accidental edits, not forgery).
    The header JSON is re-encoded compactly, so its keys must be unique."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    if not isinstance(header, dict):
        raise FormatError("header JSON is not an object")
    meta = header.pop("__metadata__", None)
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta.pop(checksum_key, None)
    new = {"__metadata__": {checksum_key: f"{ALGORITHM}:" + "0" * _HEX, **meta}, **header}
    raw = json.dumps(new, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    length = len(raw).to_bytes(8, "little")
    body = data[8 + n:]
    return length + _sealed(length, raw, checksum_key, [body]) + body
