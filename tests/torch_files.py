"""Writing PyTorch checkpoint files without PyTorch (and without Python's pickle): the
pickle opcodes by hand, in the zip layout `torch.save` writes or its legacy one.

    obj = OrderedDict(w=tensor(np.ones((2, 3), np.float32)), step=3)
    data = zip_file(obj, prefix="model")      # bytes of what torch.save(obj, "model.pt") writes
    data = legacy_file(obj)                   # ... with _use_new_zipfile_serialization=False

A `Storage` is a flat numpy array with a key; `Tensor(storage, offset, size, stride)` views
it (two Tensors of one Storage share it, as in PyTorch). `Raw(b"...")` splices opcodes in:
how the tests build hostile files. tests/test_torch_checkpoint.py checks this layout once
against real torch.save output when PyTorch is installed.
"""
import io
import struct
import zipfile
from collections import OrderedDict

import numpy as np

STORAGE_TYPES = {np.dtype(np.float32): "FloatStorage", np.dtype(np.float64): "DoubleStorage",
                 np.dtype(np.float16): "HalfStorage", np.dtype(np.int64): "LongStorage",
                 np.dtype(np.int32): "IntStorage", np.dtype(np.int16): "ShortStorage",
                 np.dtype(np.int8): "CharStorage", np.dtype(np.uint8): "ByteStorage",
                 np.dtype(np.bool_): "BoolStorage"}
MAGIC = 0x1950A86A20F9469CFC6C


class Storage:
    def __init__(self, flat, key=None, type_name=None, location="cpu", numel=None):
        self.flat = np.ascontiguousarray(flat).reshape(-1)
        self.key = key
        self.type_name = type_name or STORAGE_TYPES[self.flat.dtype]
        self.location = location
        self.numel = self.flat.size if numel is None else numel


class Tensor:
    def __init__(self, storage, offset, size, stride, requires_grad=False, parameter=False):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)
        self.requires_grad, self.parameter = requires_grad, parameter


class Raw:
    def __init__(self, opcodes):
        self.opcodes = opcodes


def tensor(arr, **kw):
    """A Tensor owning a fresh storage holding `arr` (C order)."""
    arr = np.array(arr, order="C")   # (np.ascontiguousarray would make a 0-d array 1-d)
    stride = tuple(s // arr.itemsize for s in arr.strides)
    return Tensor(Storage(arr), 0, arr.shape, stride, **kw)


def glob(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def text(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def integer(x):
    if 0 <= x < 256:
        return b"K" + bytes([x])
    if -2 ** 31 <= x < 2 ** 31:
        return b"J" + struct.pack("<i", x)
    n = (x.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + x.to_bytes(n, "little", signed=True)


class Writer:
    """One pickle (protocol 2), the opcodes torch's pickler emits for a state dict."""

    def __init__(self, legacy=False):
        self.out = bytearray(b"\x80\x02")
        self.legacy = legacy
        self.storages = {}   # key -> Storage, in first-use order

    def dump(self, obj):
        self.emit(obj)
        self.out += b"."
        return bytes(self.out)

    def emit(self, x):
        o = self.out
        if isinstance(x, Raw):
            o += x.opcodes
        elif x is None:
            o += b"N"
        elif x is True or x is False:
            o += b"\x88" if x else b"\x89"
        elif isinstance(x, int):
            o += integer(x)
        elif isinstance(x, float):
            o += b"G" + struct.pack(">d", x)
        elif isinstance(x, str):
            o += text(x)
        elif isinstance(x, tuple):
            if not x:
                o += b")"
            else:
                o += b"("
                for v in x:
                    self.emit(v)
                o += b"t"
        elif isinstance(x, list):
            o += b"]("
            for v in x:
                self.emit(v)
            o += b"e"
        elif isinstance(x, dict):
            o += glob("collections", "OrderedDict") + b")R" if isinstance(x, OrderedDict) else b"}"
            if x:
                o += b"("
                for k, v in x.items():
                    self.emit(k)
                    self.emit(v)
                o += b"u"
        elif isinstance(x, Tensor):
            self.tensor(x)
        else:
            raise TypeError(type(x))

    def tensor(self, t):
        o = self.out
        if t.parameter:
            o += glob("torch._utils", "_rebuild_parameter") + b"("
        s = t.storage
        if s.key is None:
            s.key = str(len(self.storages))
        self.storages[s.key] = s
        o += glob("torch._utils", "_rebuild_tensor_v2") + b"((" + text("storage")
        o += glob("torch", s.type_name) + text(s.key) + text(s.location) + integer(s.numel)
        o += (b"Nt" if self.legacy else b"t") + b"Q"
        self.emit(t.offset)
        self.emit(t.size)
        self.emit(t.stride)
        o += b"\x88" if t.requires_grad and not t.parameter else b"\x89"
        o += glob("collections", "OrderedDict") + b")Rt" + b"R"
        if t.parameter:
            o += (b"\x88" if t.requires_grad else b"\x89") + glob("collections", "OrderedDict") + b")RtR"


def zip_file(obj, prefix="archive", pickled=None, extra=None, compress=False):
    """The bytes of torch.save's zip format holding `obj` (or the opcodes `pickled`), plus the
    entries `extra` ({full name: bytes})."""
    w = Writer()
    data = w.dump(obj) if pickled is None else pickled
    entries = [("data.pkl", data), (".format_version", b"1"), (".storage_alignment", b"64"),
               ("byteorder", b"little")]
    entries += [(f"data/{k}", s.flat.tobytes()) for k, s in w.storages.items()]
    entries += [("version", b"3\n"), (".data/serialization_id", b"0" * 40)]
    entries = [(f"{prefix}/{name}" if prefix else name, payload) for name, payload in entries]
    entries += list((extra or {}).items())   # (named in full)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        for name, payload in entries:
            z.writestr(name, payload)
    return buf.getvalue()


def legacy_file(obj, pickled=None):
    """The bytes of torch.save(obj, f, _use_new_zipfile_serialization=False)."""
    w = Writer(legacy=True)
    head = b"\x80\x02" + integer(MAGIC) + b"." + b"\x80\x02M\xe9\x03."
    info = Writer().dump({"protocol_version": 1001, "little_endian": True,
                          "type_sizes": {"short": 2, "int": 4, "long": 4}})
    data = w.dump(obj) if pickled is None else pickled
    keys = sorted(w.storages)
    out = head + info + data + Writer().dump(keys)
    for k in keys:
        s = w.storages[k]
        out += struct.pack("<q", s.flat.size) + s.flat.tobytes()
    return out


def with_pickle(data, pickled):
    """A zip checkpoint `data` with its data.pkl replaced by `pickled` (entries and CRCs rewritten)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for info in src.infolist():
            z.writestr(info.filename, pickled if info.filename.endswith("/data.pkl") else src.read(info))
    return buf.getvalue()


def data_pkl(data):
    z = zipfile.ZipFile(io.BytesIO(data))
    return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
