"""Reading PyTorch checkpoints (`torch.save` files, Hugging Face `pytorch_model.bin`) without
running anything from the file.

A PyTorch checkpoint is a pickle: a little stack-machine program whose GLOBAL opcodes name
any importable callable and whose REDUCE opcodes call it. Python's unpickler (and PyTorch's
`weights_only` one, bypassed twice: CVE-2025-32434, CVE-2026-24747) therefore runs whatever
the file names. This module never uses `pickle`: `read_pickle` is a reader of the opcodes a
state dict needs, written for this purpose, in which a global is one of a fixed allow-list of
markers (tensor and parameter rebuilds, storage types, OrderedDict) and REDUCE / BUILD /
NEWOBJ on a marker are this module's own small functions. Anything else -- another global
(`os.system`, a Module class, `copyreg._reconstructor`), INST / OBJ / EXT codes, buffers --
is a `TorchFormatError` naming it. No code from the file can run, by construction.

Two layouts hold the pickle and the raw storages:
  zip      (torch >= 1.6, and `pytorch_model.bin`): `<prefix>/data.pkl`, storages at
           `<prefix>/data/<key>`, `<prefix>/byteorder` ("little" / "big"), `<prefix>/version`,
           where <prefix> is the single top folder of the archive (the saved file's stem,
           or "archive"): found, not assumed. Entries must be stored (uncompressed), as torch
           writes them; each one's CRC-32 is checked.
  legacy   (`_use_new_zipfile_serialization=False`): pickles of the magic number, the protocol
           version and the sys info, then the object pickle, then the list of storage keys,
           then per key an int64 element count and the raw bytes.
A storage is named by a persistent id ('storage', <storage type>, key, location, numel). A
tensor is `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)`: shape,
strides and offset are checked against the storage's size, and every byte count against the
file, before anything is allocated. Tensors viewing one storage share memory, as in PyTorch.

The result's tensors come from the caller's `make_tensor(array, location, requires_grad,
parameter, name)` (eagerc/serialization.py maps devices); this module needs numpy alone. Limits
(nesting, stack, memo, string and integer sizes) bound the memory and time of any file.
"""
import struct
import zipfile
import zlib
from collections import OrderedDict

import numpy as np

from .runtime import dtypes

__all__ = ["TorchFormatError", "NotTorch", "sniff", "read"]

MAX_PICKLE = 1 << 28       # bytes of one object pickle (data.pkl); a large model's is a few MB
MAX_STACK = 1 << 20        # items on the pickle stack and marks together
MAX_MEMO = 1 << 20         # memo entries
MAX_LINE = 256             # text opcodes (GLOBAL, INT, FLOAT...): bytes up to the newline
MAX_LONG = 64              # bytes of a LONG1 / LONG4 integer
MAX_DEPTH = 64             # containers nested in the result (as eagerc's own checkpoints)
MAX_NDIM = 64
MAX_ENTRIES = 1 << 20      # zip entries
MAGIC = 0x1950A86A20F9469CFC6C   # torch.serialization.MAGIC_NUMBER (legacy format)
LEGACY_PROTOCOL = 1001


class TorchFormatError(ValueError):
    """A PyTorch checkpoint that cannot be read (corrupted, or holding what eagerc refuses)."""


class NotTorch(TorchFormatError):
    """A zip or pickle file that is not a PyTorch checkpoint at all."""


def sniff(first):
    """'zip' or 'legacy' when the file's first bytes are a PyTorch checkpoint's; else None.
    (Callers first rule out safetensors, whose 9th byte is '{' whatever its first.)"""
    if first[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if first[:1] == b"\x80" and first[1:2] in (b"\x01", b"\x02", b"\x03", b"\x04", b"\x05"):
        return "legacy"
    return None


def read(f, size, kind, make_tensor):
    """The object `torch.save` wrote to the seekable binary file `f` of `size` bytes, in
    format `kind` (from `sniff`), with its tensors made by `make_tensor`."""
    obj = _read_zip(f, size) if kind == "zip" else _read_legacy(f, size)
    return _Finisher(make_tensor).value(obj, (), 0)


# ---------------------------------------------------------------- allow-listed globals

class _Global:
    """An allowed global: a marker REDUCE / BUILD / NEWOBJ dispatch on, never a callable."""
    __slots__ = ("name", "dtype")

    def __init__(self, name, dtype=None):
        self.name = name
        self.dtype = dtype     # storage types: a numpy dtype, or an _Unsupported one


class _Unsupported:
    """The dtype of a storage eagerc cannot hold (bfloat16...): refused when a tensor uses it,
    naming that tensor."""
    __slots__ = ("name", "itemsize", "why")

    def __init__(self, name, itemsize, why="which eagerc does not support yet"):
        self.name, self.itemsize, self.why = name, itemsize, why


class _Storage:
    """One typed storage of the file: `numel` elements of `dtype`; its bytes are read only
    when a tensor of the result needs them (`array`)."""
    __slots__ = ("key", "dtype", "numel", "location", "load")

    def __init__(self, key, dtype, numel, location, load):
        self.key, self.dtype, self.numel, self.location, self.load = key, dtype, numel, location, load


class _Tensor:
    __slots__ = ("storage", "offset", "size", "stride", "requires_grad", "parameter")

    def __init__(self, storage, offset, size, stride, requires_grad):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
        self.requires_grad, self.parameter = requires_grad, False


_STORAGE_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
                   "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
                   "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
                   "UntypedStorage": np.uint8,
                   # storages of dtypes eagerc does not have (yet): (name, bytes per element);
                   # bfloat16 is ml_dtypes' type, resolved when a file uses it (_storage_dtype)
                   "BFloat16Storage": ("bfloat16", 2), "ComplexFloatStorage": ("complex64", 8),
                   "ComplexDoubleStorage": ("complex128", 16), "QInt8Storage": ("qint8", 1),
                   "QUInt8Storage": ("quint8", 1), "QInt32Storage": ("qint32", 4)}
REBUILD_TENSOR = _Global("torch._utils._rebuild_tensor_v2")
REBUILD_TENSOR_V1 = _Global("torch._utils._rebuild_tensor")
REBUILD_PARAMETER = _Global("torch._utils._rebuild_parameter")
REBUILD_PARAMETER_STATE = _Global("torch._utils._rebuild_parameter_with_state")
ORDERED_DICT = _Global("collections.OrderedDict")
ALLOWED = {("torch._utils", "_rebuild_tensor_v2"): REBUILD_TENSOR,
           ("torch._utils", "_rebuild_tensor"): REBUILD_TENSOR_V1,
           ("torch._utils", "_rebuild_parameter"): REBUILD_PARAMETER,
           ("torch._utils", "_rebuild_parameter_with_state"): REBUILD_PARAMETER_STATE,
           ("collections", "OrderedDict"): ORDERED_DICT}
for _name, _dt in _STORAGE_DTYPES.items():
    _g = _Global("torch." + _name, _Unsupported(*_dt) if isinstance(_dt, tuple) else np.dtype(_dt))
    ALLOWED["torch", _name] = ALLOWED["torch.cuda", _name] = ALLOWED["torch.storage", _name] = _g


# ---------------------------------------------------------------- the pickle reader

class _Reader:
    """The state of one pickle being read: bytes, position, the current opcode's position,
    stack, marks, memo."""
    __slots__ = ("data", "pos", "at", "stack", "marks", "memo", "persistent_load", "where")

    def fail(self, what):
        return TorchFormatError(f"{self.where}, byte {self.at}: {what}")

    def take(self, n):
        end = self.pos + n
        if end > len(self.data):
            raise self.fail(f"truncated: an opcode wants {n} bytes, {len(self.data) - self.pos} are left")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def line(self):
        end = self.data.find(b"\n", self.pos, self.pos + MAX_LINE + 1)
        if end < 0:
            raise self.fail(f"a text argument has no newline within {MAX_LINE} bytes")
        out = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return out.decode("ascii")
        except UnicodeDecodeError:
            raise self.fail("a text argument is not ASCII") from None

    def push(self, x):
        if len(self.stack) + len(self.marks) >= MAX_STACK:
            raise self.fail(f"the stack holds more than {MAX_STACK} items")
        self.stack.append(x)

    def pop(self):
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise self.fail("pops an empty stack (or past a mark)")
        return self.stack.pop()

    def top(self):
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise self.fail("reads an empty stack (or past a mark)")
        return self.stack[-1]

    def pop_mark(self):
        if not self.marks:
            raise self.fail("pops a mark that was never set")
        i = self.marks.pop()
        items = self.stack[i:]
        del self.stack[i:]
        return items

    def put(self, i, x):
        if i not in self.memo and len(self.memo) >= MAX_MEMO:
            raise self.fail(f"the memo holds more than {MAX_MEMO} entries")
        self.memo[i] = x

    def get(self, i):
        if i not in self.memo:
            raise self.fail(f"reads memo entry {i}, which was never stored")
        self.push(self.memo[i])


def _u(fmt):
    s = struct.Struct(fmt)
    return lambda r: s.unpack(r.take(s.size))[0]


_U1, _U2, _U4, _I4, _U8, _F8 = _u("<B"), _u("<H"), _u("<I"), _u("<i"), _u("<Q"), _u(">d")


def _text(r, n):
    try:
        return r.take(n).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise r.fail("a string is not UTF-8") from None


def _int_text(r, text):
    body = text[1:] if text[:1] in "+-" else text
    if not body.isdigit():
        raise r.fail(f"{text[:40]!r} is not an integer")
    return int(text)


def _long(r, n):
    if n > MAX_LONG:
        raise r.fail(f"an integer of {n} bytes (more than {MAX_LONG})")
    return int.from_bytes(r.take(n), "little", signed=True)


def _key(r, k):
    """Dict keys are scalars or flat tuples of scalars: hashing them is shallow, whatever the file."""
    if type(k) in _SCALARS or (type(k) is tuple and all(type(x) in _SCALARS for x in k)):
        return k
    raise r.fail(f"a dict key is a {_kind(k)} (keys are strings, numbers or tuples of them)")


_SCALARS = (str, int, float, bool, type(None), bytes)


def _kind(x):
    if isinstance(x, _Global):
        return f"global {x.name!r}"
    return {_Storage: "storage", _Tensor: "tensor"}.get(type(x), type(x).__name__)


def _setitems(r, d, items):
    if type(d) not in (dict, OrderedDict):
        raise r.fail(f"sets items of a {_kind(d)}")
    if len(items) % 2:
        raise r.fail("SETITEMS with an odd number of items")
    for i in range(0, len(items), 2):
        d[_key(r, items[i])] = items[i + 1]


def _append(r, lst, items):
    if type(lst) is not list:
        raise r.fail(f"appends to a {_kind(lst)}")
    lst.extend(items)


def _global(r, module, name):
    g = ALLOWED.get((module, name))
    if g is None:
        raise r.fail(f"refused the global {(module + '.' + name)[:120]!r}: eagerc reads tensors, OrderedDicts "
                     "and plain values, and never imports or calls anything a checkpoint names")
    r.push(g)


def _stack_global(r):
    name, module = r.pop(), r.pop()
    if type(module) is not str or type(name) is not str:
        raise r.fail("STACK_GLOBAL on values that are not strings")
    _global(r, module, name)


def _persid(r):
    pid = r.pop()
    if r.persistent_load is None:
        raise r.fail("a persistent id where none may be")
    r.push(r.persistent_load(r, pid))


def _reduce(r):
    args, fn = r.pop(), r.pop()
    if type(args) is not tuple:
        raise r.fail("REDUCE with arguments that are not a tuple")
    call = _CALLS.get(fn) if isinstance(fn, _Global) else None
    if call is None:
        raise r.fail(f"REDUCE calls a {_kind(fn)}, which eagerc does not call")
    r.push(call(r, args))


def _newobj(r):
    args, cls = r.pop(), r.pop()
    if cls is not ORDERED_DICT or args != ():
        raise r.fail(f"NEWOBJ of a {_kind(cls)} (eagerc builds only OrderedDicts)")
    r.push(OrderedDict())


def _build(r):
    state, obj = r.pop(), r.top()
    # an OrderedDict's state is its instance dict: a state_dict's `_metadata` (module versions)
    if type(obj) is not OrderedDict or not (state is None or type(state) is dict):
        raise r.fail(f"BUILD sets the state of a {_kind(obj)}, which eagerc does not do")


def _ordered_dict(r, args):
    if args == ():
        return OrderedDict()
    if len(args) == 1 and type(args[0]) is list and all(type(p) is tuple and len(p) == 2 for p in args[0]):
        return OrderedDict((_key(r, k), v) for k, v in args[0])
    raise r.fail("OrderedDict(...) with arguments other than () or a list of pairs")


def _int_arg(r, x, what):
    if type(x) is not int or x < 0:
        raise r.fail(f"tensor {what} {_show(x)} is not a non-negative integer")
    return x


def _rebuild_tensor(r, args):
    if len(args) not in (6, 7):
        raise r.fail(f"_rebuild_tensor_v2 with {len(args)} arguments (6 or 7 expected)")
    storage, offset, size, stride, requires_grad, hooks = args[:6]
    if type(hooks) is not OrderedDict or hooks:
        raise r.fail("a tensor with backward hooks (eagerc loads no functions)")
    if len(args) == 7 and not (args[6] is None or args[6] == {}):
        raise r.fail("a tensor with metadata (conjugate / negative bits, subclass state) eagerc does not "
                     "support")
    if type(requires_grad) is not bool:
        raise r.fail("a tensor's requires_grad is not a bool")
    return _view(r, storage, offset, size, stride, requires_grad)


def _rebuild_tensor_v1(r, args):
    if len(args) != 4:
        raise r.fail(f"_rebuild_tensor with {len(args)} arguments (4 expected)")
    return _view(r, *args, False)


def _view(r, storage, offset, size, stride, requires_grad):
    """A tensor record, its view checked against its storage's size (nothing is read yet)."""
    if type(storage) is not _Storage:
        raise r.fail(f"a tensor rebuilt from a {_kind(storage)}, not a storage")
    if type(size) is not tuple or type(stride) is not tuple or len(size) != len(stride) or len(size) > MAX_NDIM:
        raise r.fail(f"a tensor's size and stride are not tuples of one length of at most {MAX_NDIM}")
    offset = _int_arg(r, offset, "storage offset")
    size = tuple(_int_arg(r, n, "size") for n in size)
    stride = tuple(_int_arg(r, s, "stride") for s in stride)
    if 0 not in size:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= storage.numel:
            raise r.fail(f"a tensor of size {list(size)[:8]}, stride {list(stride)[:8]} at offset {offset} reads "
                         f"element {last} of storage {storage.key[:40]!r}, which holds {storage.numel}")
    elif offset > storage.numel:
        raise r.fail(f"an empty tensor at offset {offset} past storage {storage.key[:40]!r}'s {storage.numel}")
    return _Tensor(storage, offset, size, stride, requires_grad)


def _rebuild_parameter(r, args):
    if len(args) not in (3, 4) or type(args[0]) is not _Tensor or type(args[1]) is not bool:
        raise r.fail("_rebuild_parameter with arguments other than (tensor, requires_grad, hooks[, state])")
    if type(args[2]) is not OrderedDict or args[2]:
        raise r.fail("a parameter with backward hooks (eagerc loads no functions)")
    t = _Tensor(args[0].storage, args[0].offset, args[0].size, args[0].stride, args[1])
    t.parameter = True        # (a parameter's extra Python attributes, `state`, are not kept)
    return t


_CALLS = {REBUILD_TENSOR: _rebuild_tensor, REBUILD_TENSOR_V1: _rebuild_tensor_v1,
          REBUILD_PARAMETER: _rebuild_parameter, REBUILD_PARAMETER_STATE: _rebuild_parameter,
          ORDERED_DICT: _ordered_dict}


def _mark(r):
    if len(r.stack) + len(r.marks) >= MAX_STACK:
        raise r.fail(f"the stack holds more than {MAX_STACK} items")
    r.marks.append(len(r.stack))


def _frame(r):
    n = _U8(r)
    if n > len(r.data) - r.pos:
        raise r.fail(f"a frame of {n} bytes, {len(r.data) - r.pos} are left")


def _proto(r):
    if _U1(r) > 5:
        raise r.fail("pickle protocol newer than 5")


def _put_top(r, i):
    r.put(i, r.top())


# opcode -> handler; everything not here (INST, OBJ, EXT1/2/4, PERSID, STRING, UNICODE,
# BYTEARRAY8, NEXT_BUFFER, READONLY_BUFFER, sets, NEWOBJ_EX...) is refused by name
_OPS = {
    b"\x80"[0]: _proto,
    b"\x95"[0]: _frame,
    b"("[0]: _mark,
    b"0"[0]: lambda r: r.pop(),
    b"1"[0]: lambda r: r.pop_mark(),
    b"2"[0]: lambda r: r.push(r.top()),
    b"N"[0]: lambda r: r.push(None),
    b"\x88"[0]: lambda r: r.push(True),
    b"\x89"[0]: lambda r: r.push(False),
    b"I"[0]: lambda r: r.push(_int_or_bool(r, r.line())),
    b"J"[0]: lambda r: r.push(_I4(r)),
    b"K"[0]: lambda r: r.push(_U1(r)),
    b"M"[0]: lambda r: r.push(_U2(r)),
    b"L"[0]: lambda r: r.push(_int_text(r, r.line().rstrip("L"))),
    b"\x8a"[0]: lambda r: r.push(_long(r, _U1(r))),
    b"\x8b"[0]: lambda r: r.push(_long(r, _U4(r))),
    b"F"[0]: lambda r: r.push(_float_text(r)),
    b"G"[0]: lambda r: r.push(_F8(r)),
    b"X"[0]: lambda r: r.push(_text(r, _U4(r))),
    b"\x8c"[0]: lambda r: r.push(_text(r, _U1(r))),
    b"\x8d"[0]: lambda r: r.push(_text(r, _U8(r))),
    b"B"[0]: lambda r: r.push(bytes(r.take(_U4(r)))),
    b"C"[0]: lambda r: r.push(bytes(r.take(_U1(r)))),
    b"\x8e"[0]: lambda r: r.push(bytes(r.take(_U8(r)))),
    b")"[0]: lambda r: r.push(()),
    b"t"[0]: lambda r: r.push(tuple(r.pop_mark())),
    b"\x85"[0]: lambda r: r.push((r.pop(),)),
    b"\x86"[0]: lambda r: r.push(_popn(r, 2)),
    b"\x87"[0]: lambda r: r.push(_popn(r, 3)),
    b"]"[0]: lambda r: r.push([]),
    b"l"[0]: lambda r: r.push(r.pop_mark()),
    b"}"[0]: lambda r: r.push({}),
    b"d"[0]: lambda r: r.push(_new_dict(r, r.pop_mark())),
    b"a"[0]: lambda r: _append_one(r),
    b"e"[0]: lambda r: _append_mark(r),
    b"s"[0]: lambda r: _setitem(r),
    b"u"[0]: lambda r: _setitems_mark(r),
    b"g"[0]: lambda r: r.get(_int_text(r, r.line())),
    b"h"[0]: lambda r: r.get(_U1(r)),
    b"j"[0]: lambda r: r.get(_U4(r)),
    b"p"[0]: lambda r: _put_top(r, _int_text(r, r.line())),
    b"q"[0]: lambda r: _put_top(r, _U1(r)),
    b"r"[0]: lambda r: _put_top(r, _U4(r)),
    b"\x94"[0]: lambda r: _put_top(r, len(r.memo)),
    b"c"[0]: lambda r: _global(r, r.line(), r.line()),
    b"\x93"[0]: _stack_global,
    b"Q"[0]: _persid,
    b"R"[0]: _reduce,
    b"\x81"[0]: _newobj,
    b"b"[0]: _build,
}
_NAMES = {b"i"[0]: "INST", b"o"[0]: "OBJ", b"\x82"[0]: "EXT1", b"\x83"[0]: "EXT2", b"\x84"[0]: "EXT4",
          b"P"[0]: "PERSID", b"S"[0]: "STRING", b"V"[0]: "UNICODE", b"T"[0]: "BINSTRING",
          b"U"[0]: "SHORT_BINSTRING", b"\x92"[0]: "NEWOBJ_EX", b"\x8f"[0]: "EMPTY_SET", b"\x90"[0]: "ADDITEMS",
          b"\x91"[0]: "FROZENSET", b"\x96"[0]: "BYTEARRAY8", b"\x97"[0]: "NEXT_BUFFER",
          b"\x98"[0]: "READONLY_BUFFER"}


def _int_or_bool(r, text):
    return False if text == "00" else True if text == "01" else _int_text(r, text)


def _popn(r, n):
    items = [r.pop() for _ in range(n)]
    return tuple(items[::-1])


def _float_text(r):
    text = r.line()
    try:
        return float(text)
    except ValueError:
        raise r.fail(f"{text[:40]!r} is not a float") from None


def _new_dict(r, items):
    d = {}
    _setitems(r, d, items)
    return d


def _append_one(r):
    v = r.pop()
    _append(r, r.top(), [v])


def _append_mark(r):
    items = r.pop_mark()
    _append(r, r.top(), items)


def _setitem(r):
    v, k = r.pop(), r.pop()
    _setitems(r, r.top(), [k, v])


def _setitems_mark(r):
    items = r.pop_mark()
    _setitems(r, r.top(), items)


def read_pickle(data, pos, where, persistent_load=None):
    """(object, position after STOP) of the pickle starting at data[pos]. `persistent_load(reader,
    pid)` gives the object for a persistent id (BINPERSID); without it one is an error."""
    r = _Reader()
    r.data, r.pos, r.at, r.stack, r.marks, r.memo = data, pos, pos, [], [], {}
    r.persistent_load, r.where = persistent_load, where
    n = len(data)
    ops = _OPS
    while r.pos < n:
        r.at = r.pos
        code = data[r.pos]
        r.pos += 1
        if code == 46:   # STOP
            if len(r.stack) != 1 or r.marks:
                raise r.fail(f"STOP with {len(r.stack)} items and {len(r.marks)} marks on the stack (1 and 0 "
                             "expected)")
            return r.stack[0], r.pos
        op = ops.get(code)
        if op is None:
            name = _NAMES.get(code)
            raise r.fail(f"refused the pickle opcode {name} (eagerc builds no objects but tensors and plain "
                         "values)" if name else f"unknown pickle opcode 0x{code:02x}")
        op(r)
    r.at = n
    raise r.fail("truncated: the pickle ends without STOP")


# ---------------------------------------------------------------- zip layout

_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError, struct.error,
               NotImplementedError, OverflowError, IndexError, KeyError)


def _read_zip(f, size):
    try:
        infos = zipfile.ZipFile(f).infolist()
    except _ZIP_ERRORS as e:
        raise NotTorch(f"it is not a readable zip archive ({type(e).__name__}: {str(e)[:120]})") from None
    names = [i.filename for i in infos]
    prefixes = {n.split("/", 1)[0] for n in names}
    if len(infos) > MAX_ENTRIES or len(prefixes) != 1 or any("/" not in n for n in names):
        raise NotTorch("its entries are not all in one top folder, as torch.save writes them (a numpy .npz?)")
    prefix = prefixes.pop()
    entries = {n[len(prefix) + 1:]: i for n, i in zip(names, infos)}
    if len(entries) != len(infos):
        raise TorchFormatError("the zip archive holds an entry twice")
    if "data.pkl" not in entries:
        raise NotTorch(f"it has no {prefix[:60]}/data.pkl (a TorchScript archive, or a numpy .npz?)")
    small = {k: _entry_bytes(f, size, entries[k], 64) for k in ("byteorder", "version") if k in entries}
    byteorder = small.get("byteorder", b"little")
    if byteorder not in (b"little", b"big"):
        raise TorchFormatError(f"byteorder entry {byteorder[:20]!r} is neither 'little' nor 'big'")
    version = small.get("version", b"1").strip()
    if not (version.isdigit() and 1 <= int(version) <= 20):
        raise TorchFormatError(f"format version {version[:20]!r} is not one eagerc reads")
    pickled = _entry_bytes(f, size, entries["data.pkl"], MAX_PICKLE)
    arrays = {}   # key -> the storage's bytes, read once; (key, dtype) -> its typed view

    def load(storage):
        typed = arrays.get((storage.key, storage.dtype))
        if typed is None:
            raw = arrays.get(storage.key)
            if raw is None:
                info = entries["data/" + storage.key]
                start, length = _span(f, size, info)
                raw = arrays[storage.key] = np.empty(length, np.uint8)
                f.seek(start)
                if f.readinto(memoryview(raw)) != length:
                    raise TorchFormatError(f"storage {storage.key[:40]!r} is truncated")
                _check_crc(info, raw)
            typed = raw.view(storage.dtype)
            if byteorder == b"big" and storage.dtype.itemsize > 1:
                typed = typed.byteswap()
            arrays[storage.key, storage.dtype] = typed
        return typed

    def persistent_load(r, pid):
        key, dtype, numel, location = _storage_pid(r, pid, 5)
        info = entries.get("data/" + key)
        if info is None:
            raise r.fail(f"storage {key[:40]!r} has no entry {prefix[:40]}/data/{key[:40]} in the archive")
        if numel * dtype.itemsize != info.file_size:
            raise r.fail(f"storage {key[:40]!r} says {numel} elements of {dtype.name}, its entry holds "
                         f"{info.file_size} bytes")
        return _Storage(key, dtype, numel, location, load)

    obj, end = read_pickle(pickled, 0, "data.pkl", persistent_load)
    if end != len(pickled):
        raise TorchFormatError(f"data.pkl has {len(pickled) - end} bytes after its STOP")
    return obj


def _storage_pid(r, pid, n):
    """(key, dtype, numel, location) of a persistent id ('storage', type, key, location, numel, ...)."""
    if type(pid) is not tuple or len(pid) != n or pid[0] != "storage":
        raise r.fail(f"a persistent id that is not ('storage', type, key, location, numel"
                     f"{', view' if n == 6 else ''})")
    _, stype, key, location, numel = pid[:5]
    if type(stype) is not _Global or stype.dtype is None:
        raise r.fail(f"a storage whose type is a {_kind(stype)}")
    if type(key) is not str or not key or len(key) > 64 or not key.replace("_", "").isalnum() or not key.isascii():
        raise r.fail(f"a storage key {_show(key)} that is not a short name")
    if type(location) is not str or len(location) > 32:
        raise r.fail("a storage location that is not a short string")
    if type(numel) is not int or numel < 0:
        raise r.fail(f"a storage of {_show(numel)} elements")
    return key, _storage_dtype(stype.dtype), numel, location


def _storage_dtype(dtype):
    """bfloat16 storages get ml_dtypes' bfloat16, imported only now that a file holds one;
    without ml_dtypes they stay unsupported, and a tensor using one is refused naming the extra."""
    if type(dtype) is _Unsupported and dtype.name == "bfloat16":
        try:
            return dtypes.bfloat16.np
        except ImportError:
            return _Unsupported("bfloat16", 2, "and " + dtypes.BF16_EXTRA)
    return dtype


def _span(f, size, info):
    """(first byte, length) of a zip entry's data, checked against the file before it is read."""
    if info.flag_bits & 1:
        raise TorchFormatError(f"entry {info.filename[:60]!r} is encrypted")
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise TorchFormatError(f"entry {info.filename[:60]!r} is compressed; torch.save stores entries "
                               "uncompressed, and eagerc reads them so (no zip bombs)")
    if not 0 <= info.header_offset <= size - 30:
        raise TorchFormatError(f"entry {info.filename[:60]!r} starts past the end of the file")
    f.seek(info.header_offset)
    local = f.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise TorchFormatError(f"entry {info.filename[:60]!r} has no local header where the directory says")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.file_size > size:
        raise TorchFormatError(f"entry {info.filename[:60]!r} ({info.file_size} bytes) runs past the end of "
                               "the file: truncated")
    return start, info.file_size


def _entry_bytes(f, size, info, limit):
    start, length = _span(f, size, info)
    if length > limit:
        raise TorchFormatError(f"entry {info.filename[:60]!r} is {length} bytes, more than {limit}")
    f.seek(start)
    data = f.read(length)
    if len(data) != length:
        raise TorchFormatError(f"entry {info.filename[:60]!r} is truncated")
    _check_crc(info, data)
    return data


def _check_crc(info, data):
    # (torch writes CRC 0 when saving with compute_crc32=False: nothing to check then)
    if info.CRC and zlib.crc32(data) != info.CRC:
        raise TorchFormatError(f"entry {info.filename[:60]!r} fails its CRC-32 check: corrupted")


# ---------------------------------------------------------------- legacy layout

def _read_legacy(f, size):
    f.seek(0)
    data = f.read(size)
    try:
        magic, pos = read_pickle(data, 0, "its first pickle")
    except TorchFormatError as e:
        raise NotTorch(f"its first pickle is not PyTorch's magic number ({e})") from None
    if magic != MAGIC:
        raise NotTorch("its first pickle is not PyTorch's magic number (eagerc reads no other pickles)")
    protocol, pos = read_pickle(data, pos, "the protocol pickle")
    if protocol != LEGACY_PROTOCOL:
        raise TorchFormatError(f"legacy protocol version {_show(protocol)} (eagerc reads {LEGACY_PROTOCOL})")
    info, pos = read_pickle(data, pos, "the sys info pickle")
    if type(info) is not dict or info.get("little_endian") is not True:
        raise TorchFormatError("its sys info is not a dict saying little_endian=True (big-endian legacy files "
                               "are not read)")
    storages = {}   # key -> _Storage
    offsets = {}    # key -> first byte of its data

    arrays = {}

    def load(storage):
        arr = arrays.get(storage.key)
        if arr is None:
            arr = arrays[storage.key] = np.frombuffer(data, storage.dtype, storage.numel, offsets[storage.key]).copy()
        return arr

    def persistent_load(r, pid):
        key, dtype, numel, location = _storage_pid(r, pid, 6)
        if pid[5] is not None:
            raise r.fail("a storage view (written by PyTorch before 1.0): not read")
        old = storages.get(key)
        if old is None:
            old = storages[key] = _Storage(key, dtype, numel, location, load)
        elif type(old.dtype) is not type(dtype) or old.dtype != dtype or old.numel != numel:
            raise r.fail(f"storage {key[:40]!r} is declared twice, differently")
        return old

    obj, pos = read_pickle(data, pos, "the object pickle", persistent_load)
    keys, pos = read_pickle(data, pos, "the storage keys pickle")
    if type(keys) is not list or any(type(k) is not str for k in keys) or len(set(keys)) != len(keys):
        raise TorchFormatError("its storage keys are not a list of distinct strings")
    for key in keys:
        storage = storages.get(key)
        if storage is None:
            raise TorchFormatError(f"storage {key[:40]!r} is stored but no tensor uses it")
        if pos + 8 > len(data):
            raise TorchFormatError(f"storage {key[:40]!r}: truncated")
        numel = int.from_bytes(data[pos:pos + 8], "little", signed=True)
        if numel != storage.numel:
            raise TorchFormatError(f"storage {key[:40]!r} holds {numel} elements, the pickle says "
                                   f"{storage.numel}")
        offsets[key] = pos + 8
        pos += 8 + numel * storage.dtype.itemsize
        if pos > len(data):
            raise TorchFormatError(f"storage {key[:40]!r} ({numel} elements) runs past the end of the file: "
                                   "truncated")
    missing = set(storages) - set(offsets)
    if missing:
        raise TorchFormatError(f"storage {sorted(missing)[0][:40]!r} is used but not stored")
    if pos != len(data):
        raise TorchFormatError(f"{len(data) - pos} bytes after the last storage")
    return obj


# ---------------------------------------------------------------- the result

class _Finisher:
    """Turn what the pickle built into the result: tensor records into tensors (reading their
    storages, each once), containers copied with their nesting bounded and cycles refused,
    anything else named and refused."""

    def __init__(self, make_tensor):
        self.make_tensor = make_tensor
        self.done = {}      # id(container or record) -> result
        self.active = set()

    def value(self, x, path, depth):
        t = type(x)
        if t in _SCALARS:
            return x
        got = self.done.get(id(x))
        if got is not None:
            return got
        if id(x) in self.active:
            raise TorchFormatError(f"{_path(path)} contains itself")
        if depth >= MAX_DEPTH:
            raise TorchFormatError(f"{_path(path[:4])}... is nested more than {MAX_DEPTH} containers deep")
        self.active.add(id(x))
        if t is _Tensor:
            out = self.tensor(x, path)
        elif t is list:
            out = [self.value(v, path + (i,), depth + 1) for i, v in enumerate(x)]
        elif t is tuple:
            out = tuple([self.value(v, path + (i,), depth + 1) for i, v in enumerate(x)])
        elif t is dict or t is OrderedDict:
            out = t((k, self.value(v, path + (k,), depth + 1)) for k, v in x.items())
        else:
            raise TorchFormatError(f"{_path(path)} is a {_kind(x)}, which is not a value eagerc loads")
        self.active.discard(id(x))
        self.done[id(x)] = out
        return out

    def tensor(self, t, path):
        s = t.storage
        if isinstance(s.dtype, _Unsupported):
            raise TorchFormatError(f"tensor {_path(path)} is {s.dtype.name}, {s.dtype.why}")
        flat = s.load(s)     # (read once per storage: tensors viewing one share its memory)
        if 0 in t.size:
            arr = np.empty(t.size, s.dtype)
        else:
            item = s.dtype.itemsize
            arr = np.lib.stride_tricks.as_strided(flat[t.offset:], t.size, tuple(x * item for x in t.stride))
        return self.make_tensor(arr, s.location, t.requires_grad, t.parameter, _path(path))


def _path(path):
    return "obj" + "".join(f"[{_show(p)}]" for p in path)


def _show(x):
    """A value for a message: scalars clipped, anything else by its kind (never a huge repr)."""
    if type(x) in _SCALARS or (type(x) is tuple and len(x) < 8 and all(type(v) in _SCALARS for v in x)):
        text = repr(x)
        return text if len(text) <= 60 else text[:60] + "..."
    return f"<{_kind(x)}>"
