"""Checkpoints: `eagerc.save(obj, path)` and `eagerc.load(path, map_location=None)`.

A checkpoint is one safetensors file. Its tensors are the tensors of `obj`, named
by where they sit in it ("model.fc.weight", "optimizer.state.0.exp_avg"); the rest
of `obj` -- nested dicts, lists and tuples of int / float / str / bool / None -- is
JSON in the file's metadata, where each tensor appears as a reference:

    {"$type": "tensor", "key": "optimizer.state.0.exp_avg", "dtype": "float32",
     "shape": [256, 10], "device": "cpu", "requires_grad": false, "crc32": 1234567}

Dicts whose keys are all strings (not starting with "$") are plain JSON objects;
others (an optimizer's int keys, an OrderedDict) are {"$type": "dict", "items":
[[key, value], ...]}, so keys keep their types. Tuples, non-finite floats, numpy
arrays, dtypes and devices are tagged the same way. Nothing is pickled and nothing
in the file is ever executed.

Loading checks everything against the metadata -- that the file is a complete
safetensors file, that it is an eagerc checkpoint, and that every tensor is there
with the dtype, shape and checksum recorded -- and fails with a CheckpointError (a
RuntimeError) naming the file and what is wrong.

Writes are atomic: the bytes go to a temporary file in the target's directory,
which is fsync'ed and then renamed over the target (os.replace), so a crash or an
error mid-write leaves any previous checkpoint intact.
"""
import json
import math
import os

from .runtime.atomic import atomic_write
import zlib
from collections import OrderedDict

import numpy as np

__all__ = ["save", "load", "CheckpointError"]

FORMAT = "eagerc.checkpoint"
VERSION = 1
_MAX_HEADER = 100_000_000  # safetensors' own limit on the JSON header


class CheckpointError(RuntimeError):
    """A file that cannot be loaded as an eagerc checkpoint; the message says why."""


def _safetensors():
    try:
        import safetensors.numpy
    except ImportError:
        raise ImportError("eagerc.save/eagerc.load store tensors in the safetensors format and need the "
                          "`safetensors` package: pip install safetensors (or pip install -e \".[data]\")"
                          ) from None
    return safetensors


# ---------------------------------------------------------------- encoding

def _path_str(path):
    return "obj" + "".join(f"[{p!r}]" for p in path)


class _Encoder:
    def __init__(self):
        self.arrays = {}  # name -> contiguous host array
        self.by_id = {}  # id(tensor or array) -> its tag (shared tensors are stored once)
        self.keep = []  # keep encoded objects alive so ids stay unique

    def name_for(self, path):
        base = ".".join(str(p) for p in path) or "obj"
        name, n = base, 1
        while name in self.arrays:
            n += 1
            name = f"{base}#{n}"
        return name

    def tensor(self, obj, path, kind):
        tag = self.by_id.get(id(obj))
        if tag is not None:
            return tag
        if kind == "tensor":
            data = obj.data
            device = str(obj.device)
            host = data if type(data) is np.ndarray else data.get()
        else:
            host, device = obj, "cpu"
        if host.dtype.kind not in "biuf":
            raise TypeError(f"eagerc.save can't store an array of dtype {host.dtype} at {_path_str(path)}")
        if not host.flags.c_contiguous:
            host = host.copy(order="C")  # (np.ascontiguousarray would turn 0-d into 1-d)
        if host.dtype.byteorder == ">":
            host = host.astype(host.dtype.newbyteorder("<"))
        name = self.name_for(path)
        self.arrays[name] = host
        tag = {"$type": kind, "key": name, "dtype": host.dtype.name, "shape": list(host.shape),
               "crc32": zlib.crc32(memoryview(host).cast("B")) if host.size else 0}
        if kind == "tensor":
            tag["device"] = device
            tag["requires_grad"] = bool(obj.requires_grad)
            if type(obj).__name__ == "Parameter":
                tag["parameter"] = True
        self.by_id[id(obj)] = tag
        self.keep.append(obj)
        return tag

    def encode(self, obj, path):
        from ._tensor import Tensor
        from .runtime.dtypes import DType
        from .runtime.device import Device
        if obj is None or isinstance(obj, (bool, int, str)):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"$type": "float", "value": repr(obj)}
        if isinstance(obj, Tensor):
            return self.tensor(obj, path, "tensor")
        if isinstance(obj, np.ndarray):
            return self.tensor(obj, path, "ndarray")
        if isinstance(obj, (np.bool_, np.integer, np.floating)):
            return self.encode(obj.item(), path)
        if isinstance(obj, list):
            return [self.encode(v, path + [i]) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"$type": "tuple", "items": [self.encode(v, path + [i]) for i, v in enumerate(obj)]}
        if isinstance(obj, dict):
            if type(obj) is not OrderedDict and all(isinstance(k, str) and not k.startswith("$") for k in obj):
                return {k: self.encode(v, path + [k]) for k, v in obj.items()}
            tag = {"$type": "dict", "items": [[self.key(k, path), self.encode(v, path + [k])]
                                              for k, v in obj.items()]}
            if isinstance(obj, OrderedDict):
                tag["ordered"] = True
            return tag
        if isinstance(obj, DType):
            return {"$type": "dtype", "name": obj.name}
        if isinstance(obj, Device):
            return {"$type": "device", "name": str(obj)}
        raise TypeError(f"eagerc.save can't store an object of type {type(obj).__name__} at {_path_str(path)}: "
                        "checkpoints hold tensors, numpy arrays, dicts, lists, tuples and int / float / str / "
                        "bool / None values (eagerc never pickles)")

    def key(self, k, path):
        if k is None or isinstance(k, (bool, int, str)):
            return k
        if isinstance(k, float):
            return self.encode(k, path)
        if isinstance(k, tuple):
            return {"$type": "tuple", "items": [self.key(v, path) for v in k]}
        raise TypeError(f"eagerc.save can't store a dict key of type {type(k).__name__} in {_path_str(path)}")


# ---------------------------------------------------------------- save

def save(obj, f):
    """Save `obj` (a state dict: nested dicts / lists / tuples of tensors and plain
    values) to the path or binary file object `f`, atomically for paths."""
    st = _safetensors()
    enc = _Encoder()
    structure = enc.encode(obj, [])
    metadata = {"eagerc.format": FORMAT, "eagerc.version": str(VERSION),
                "eagerc.structure": json.dumps(structure, separators=(",", ":"), allow_nan=False)}
    data = st.numpy.save(enc.arrays, metadata=metadata)
    if hasattr(f, "write"):
        f.write(data)
        return
    _atomic_write(os.fspath(f), data)


def _write_all(fh, data):
    """Write `data` in chunks (a seam the tests use to simulate a crash mid-write)."""
    view = memoryview(data)
    chunk = 64 << 20
    for start in range(0, len(view), chunk):
        fh.write(view[start:start + chunk])


def _atomic_write(path, data):
    atomic_write(path, lambda fh: _write_all(fh, data), "eagerc.save")



# ---------------------------------------------------------------- load

def load(f, map_location=None, *, weights_only=True, mmap=None):
    """Load what `save` wrote. map_location: None (each tensor's saved device), a
    device ('cpu', 'cuda', 'cuda:1', an eagerc.device), or a dict mapping saved
    device names to devices ({'cuda:0': 'cpu'}). weights_only and mmap are accepted
    for PyTorch compatibility (loading never runs code anyway)."""
    st = _safetensors()
    _check_map_location(map_location)
    if hasattr(f, "read"):
        where = getattr(f, "name", None) or "<file object>"
        data = f.read()
        structure = _read_metadata(data[:8], len(data), lambda n: data[8:8 + n], where)
        try:
            arrays = st.numpy.load(data)
        except Exception as e:  # SafetensorError and friends
            raise _bad_data(where, e) from None
    else:
        where = os.fspath(f)
        size = os.path.getsize(where)
        with open(where, "rb") as fh:  # only the header is read here; safetensors reads the rest
            structure = _read_metadata(fh.read(8), size, fh.read, where)
        try:
            with st.safe_open(where, framework="numpy") as sf:
                arrays = {k: sf.get_tensor(k) for k in sf.keys()}
        except Exception as e:
            raise _bad_data(where, e) from None
    dec = _Decoder(arrays, where, map_location)
    obj = dec.decode(structure)
    extra = sorted(set(arrays) - dec.used)
    if extra:
        raise CheckpointError(f"{where}: corrupted checkpoint: it holds tensors the metadata does not "
                              f"mention: {extra[:5]}")
    return obj


def _bad_data(where, e):
    return CheckpointError(f"{where}: corrupted or truncated checkpoint: the tensor data could not be read ({e})")


def _read_metadata(first8, size, read_header, where):
    """Validate the safetensors header (read_header(n) returns its n bytes) and return
    the checkpoint's structure."""
    data = first8
    if size < 8:
        raise CheckpointError(f"{where}: not an eagerc checkpoint: the file is {size} bytes long, too short "
                              "to be a safetensors file (empty or truncated?)")
    if data[:4] == b"PK\x03\x04" or data[:1] == b"\x80":
        raise CheckpointError(f"{where}: not an eagerc checkpoint: it looks like a zip or pickle file (a "
                              "PyTorch .pt file?); eagerc only reads safetensors checkpoints and never unpickles")
    n = int.from_bytes(data[:8], "little")
    if n > _MAX_HEADER:
        raise CheckpointError(f"{where}: not an eagerc checkpoint: the first 8 bytes do not hold a valid "
                              "safetensors header length")
    if 8 + n > size:
        raise CheckpointError(f"{where}: truncated checkpoint: its header needs {8 + n} bytes but the file has "
                              f"only {size}")
    try:
        header = json.loads(bytes(read_header(n)).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{where}: corrupted checkpoint or not a safetensors file: its header is not "
                              f"valid JSON ({e})") from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or meta.get("eagerc.format") != FORMAT:
        raise CheckpointError(f"{where}: not an eagerc checkpoint: a safetensors file without eagerc's "
                              "metadata (read plain safetensors files with safetensors.numpy.load_file)")
    try:
        version = int(meta.get("eagerc.version", ""))
    except ValueError:
        raise CheckpointError(f"{where}: corrupted checkpoint: bad format version "
                              f"{meta.get('eagerc.version')!r}") from None
    if version > VERSION:
        raise CheckpointError(f"{where}: written by a newer eagerc (checkpoint format {version}; this "
                              f"version reads up to {VERSION})")
    try:
        return json.loads(meta["eagerc.structure"])
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{where}: corrupted checkpoint: its structure metadata is unreadable "
                              f"({type(e).__name__}: {e})") from None


class _Decoder:
    def __init__(self, arrays, where, map_location):
        self.arrays = arrays
        self.where = where
        self.map_location = map_location
        self.used = set()
        self.cache = {}

    def fail(self, what):
        return CheckpointError(f"{self.where}: {what}")

    def decode(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict):
            raise self.fail(f"corrupted checkpoint: unexpected {type(node).__name__} in the structure metadata")
        kind = node.get("$type")
        if kind is None:
            return {k: self.decode(v) for k, v in node.items()}
        if kind in ("tensor", "ndarray"):
            return self.tensor(node, kind)
        try:
            if kind == "dict":
                d = OrderedDict() if node.get("ordered") else {}
                for k, v in node["items"]:
                    d[self.key(k)] = self.decode(v)
                return d
            if kind == "tuple":
                return tuple(self.decode(v) for v in node["items"])
            if kind == "float":
                return float(node["value"])
            if kind == "dtype":
                from .runtime import dtypes
                return dtypes.as_dtype(node["name"])
            if kind == "device":
                from .runtime.device import device
                return device(node["name"])
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise self.fail(f"corrupted checkpoint: malformed {kind!r} entry in the structure metadata "
                            f"({type(e).__name__}: {e})") from None
        raise self.fail(f"corrupted checkpoint: unknown entry type {kind!r} in the structure metadata")

    def key(self, k):
        if isinstance(k, dict):
            k = self.decode(k)
            if isinstance(k, list):
                k = tuple(k)
        return k

    def tensor(self, node, kind):
        try:
            name, dtype, shape, crc = node["key"], node["dtype"], list(node["shape"]), int(node["crc32"])
        except (KeyError, TypeError, ValueError) as e:
            raise self.fail(f"corrupted checkpoint: malformed {kind!r} entry in the structure metadata "
                            f"({type(e).__name__}: {e})") from None
        cached = self.cache.get(name)
        if cached is not None:
            return cached
        arr = self.arrays.get(name)
        if arr is None:
            raise self.fail(f"corrupted checkpoint: tensor {name!r} listed in the metadata is missing from the file")
        if arr.dtype.name != dtype or list(arr.shape) != shape:
            raise self.fail(f"corrupted checkpoint: tensor {name!r} is {arr.dtype.name}{list(arr.shape)} in "
                            f"the file but {dtype}{shape} in the metadata")
        actual = zlib.crc32(memoryview(arr if arr.flags.c_contiguous else arr.copy(order="C")).cast("B")) \
            if arr.size else 0
        if actual != crc:
            raise self.fail(f"corrupted checkpoint: the data of tensor {name!r} does not match its checksum")
        self.used.add(name)
        if not (arr.flags.writeable and arr.flags.aligned):
            arr = arr.copy()
        if kind == "ndarray":
            out = arr
        else:
            out = self.make_tensor(arr, node)
        self.cache[name] = out
        return out

    def make_tensor(self, arr, node):
        from .dispatch import wrap
        t = wrap(arr)
        saved = node.get("device", "cpu")
        target = self.target_device(saved)
        if target.type != "cpu":
            from .runtime.device import cuda_available
            if not cuda_available():
                raise RuntimeError(f"{self.where}: tensor {node['key']!r} was saved on {saved}, but CUDA is not "
                                   "available here; pass map_location='cpu' to load it on the CPU")
            t = t.to(target)
        if node.get("requires_grad"):
            t.requires_grad = True
        if node.get("parameter"):
            try:
                from .nn.parameter import Parameter
                t = Parameter(t, requires_grad=bool(node.get("requires_grad")))
            except (ImportError, TypeError):
                pass
        return t

    def target_device(self, saved):
        from .runtime.device import device
        m = self.map_location
        if m is None:
            return device(saved)
        if isinstance(m, dict):
            return device(m.get(saved, saved))
        return device(m)


def _check_map_location(m):
    from .runtime.device import Device, device
    if m is None or isinstance(m, Device):
        return
    if isinstance(m, dict):
        for v in m.values():
            device(v)
        return
    if isinstance(m, str):
        device(m)
        return
    raise TypeError(f"map_location: eagerc takes None, a device, a device name or a dict of device names, "
                    f"not {type(m).__name__}")
