"""Checkpoints: `eagerc.save(obj, path)` and `eagerc.load(path, map_location=None)`.

A checkpoint is one safetensors file, written and read by eagerc's own numpy-only
reader/writer (eagerc/runtime/safetensors_io.py; other safetensors tools read it too).
Its tensors are the tensors of `obj`, named by where they sit in it ("model.fc.weight",
"optimizer.state.0.exp_avg"); the rest of `obj` -- nested dicts, lists and tuples of
int / float / str / bool / None -- is JSON in the file's metadata, where each tensor
appears as a reference:

    {"$type": "tensor", "key": "optimizer.state.0.exp_avg", "dtype": "float32",
     "shape": [256, 10], "device": "cpu", "requires_grad": false}

Dicts whose keys are all strings (not starting with "$") are plain JSON objects;
others (an optimizer's int keys, an OrderedDict) are {"$type": "dict", "items":
[[key, value], ...]}, so keys keep their types. Tuples, non-finite floats, numpy
arrays, dtypes and devices are tagged the same way. Nothing is pickled and nothing
in the file is ever executed. Containers nest at most MAX_DEPTH deep.

Format version 2 (this one) seals the file: the metadata entry "eagerc.checksum" is a
SHA-256 of every byte of the file (see safetensors_io), checked before anything in it
is used. Version 1 files (no checksum; a CRC32 per tensor instead) still load.

Loading checks everything -- that the path is a regular file, that the bytes are a
complete safetensors file whose checksum matches, that it is an eagerc checkpoint, and
that every tensor is there with the dtype and shape recorded -- and fails with a
CheckpointError (a RuntimeError) naming the file and what is wrong. (A missing file
raises FileNotFoundError, as in PyTorch.)

Other files load too, told apart by their first bytes (docs/training.md, "Loading PyTorch
weights"): `torch.save`'s zip and legacy formats and Hugging Face's pytorch_model.bin, read by
eagerc/torch_checkpoint.py without running anything from them; and safetensors files without
eagerc's metadata (PyTorch's, Hugging Face's), which load as a dict of name -> tensor.

Writes are atomic: the bytes go to a temporary file in the target's directory,
which is fsync'ed and then renamed over the target (os.replace), so a crash or an
error mid-write leaves any previous checkpoint intact (eagerc/runtime/atomic.py;
the next save sweeps a killed writer's temporary file).
"""
import io
import json
import math
import os
import zlib
from collections import OrderedDict

import numpy as np

from . import torch_checkpoint
from .runtime import safetensors_io as st
from .runtime.atomic import atomic_write

__all__ = ["save", "load", "CheckpointError"]

FORMAT = "eagerc.checkpoint"
VERSION = 2
CHECKSUM_KEY = "eagerc.checksum"
MAX_DEPTH = 64             # containers (dicts, lists, tuples) nested in one checkpoint
_MAX_JSON_DEPTH = 3 * MAX_DEPTH + 8   # JSON levels: a tagged dict is three (tag, items, pair)


class CheckpointError(RuntimeError):
    """A file that cannot be loaded as an eagerc checkpoint; the message says why."""


_STORABLE = set(st.DTYPES.values())
_DTYPE_NAME = {d: d.name for d in _STORABLE}   # (dtype.name costs microseconds per call)
_DTYPE_NAMES = set(_DTYPE_NAME.values())


def _storable(dtype):
    """Can a checkpoint hold arrays of this numpy dtype? bfloat16 joins the tables above on
    its first use (it is ml_dtypes' type, imported only then)."""
    if dtype in _STORABLE:
        return True
    if dtype.name == "bfloat16" and st.register_bfloat16() is not None:
        _STORABLE.add(dtype)
        _DTYPE_NAME[dtype] = "bfloat16"
        _DTYPE_NAMES.add("bfloat16")
        return True
    return False


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
            data = obj._array
            device = str(obj.device)
            host = data if type(data) is np.ndarray else data.get()
        else:
            host, device = obj, "cpu"
        if not _storable(host.dtype.newbyteorder("=")):
            raise TypeError(f"eagerc.save can't store an array of dtype {host.dtype} at {_path_str(path)} "
                            f"(checkpoints hold {', '.join(sorted(d.name for d in _STORABLE))})")
        if not host.flags.c_contiguous:
            host = host.copy(order="C")  # (np.ascontiguousarray would turn 0-d into 1-d)
        name = self.name_for(path)
        self.arrays[name] = host
        tag = {"$type": kind, "key": name, "dtype": host.dtype.newbyteorder("=").name, "shape": list(host.shape)}
        if kind == "tensor":
            tag["device"] = device
            tag["requires_grad"] = bool(obj.requires_grad)
            if type(obj).__name__ == "Parameter":
                tag["parameter"] = True
        self.by_id[id(obj)] = tag
        self.keep.append(obj)
        return tag

    def encode(self, obj, path):
        if len(path) > MAX_DEPTH:
            raise ValueError(f"eagerc.save: {_path_str(path[:4])}... is nested more than {MAX_DEPTH} containers "
                             "deep (a checkpoint holds state dicts, not arbitrarily deep structures)")
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
        hint = ""
        if callable(getattr(obj, "state_dict", None)):  # torch.save(model): PyTorch pickles the whole module
            hint = (f"; save {type(obj).__name__}'s state_dict() instead and load it into one you build "
                    f"(load_state_dict)")
        raise TypeError(f"eagerc.save can't store an object of type {type(obj).__name__} at {_path_str(path)}: "
                        "checkpoints hold tensors, numpy arrays, dicts, lists, tuples and int / float / str / "
                        f"bool / None values (eagerc never pickles){hint}")

    def key(self, k, path, depth=0):
        if k is None or isinstance(k, (bool, int, str)):
            return k
        if isinstance(k, float):
            return self.encode(k, path)
        if isinstance(k, tuple):
            if depth + len(path) >= MAX_DEPTH:
                raise ValueError(f"eagerc.save: a dict key in {_path_str(path[:4])} is a tuple nested more than "
                                 f"{MAX_DEPTH} levels deep")
            return {"$type": "tuple", "items": [self.key(v, path, depth + 1) for v in k]}
        raise TypeError(f"eagerc.save can't store a dict key of type {type(k).__name__} in {_path_str(path)}")


# ---------------------------------------------------------------- save

def save(obj, f):
    """Save `obj` (a state dict: nested dicts / lists / tuples of tensors and plain
    values) to the path or binary file object `f`, atomically for paths."""
    enc = _Encoder()
    structure = enc.encode(obj, [])
    metadata = {"eagerc.format": FORMAT, "eagerc.version": str(VERSION),
                "eagerc.structure": json.dumps(structure, separators=(",", ":"), allow_nan=False)}
    if hasattr(f, "write"):
        st.write(f, enc.arrays, metadata, CHECKSUM_KEY)
        return
    atomic_write(os.fspath(f), lambda fh: st.write(fh, enc.arrays, metadata, CHECKSUM_KEY), "eagerc.save")


# ---------------------------------------------------------------- load

def load(f, map_location=None, *, weights_only=True, mmap=None):
    """Load what `save` wrote. map_location: None (each tensor's saved device), a
    device ('cpu', 'cuda', 'cuda:1', an eagerc.device), or a dict mapping saved
    device names to devices ({'cuda:0': 'cpu'}). weights_only and mmap are accepted
    for PyTorch compatibility (loading never runs code anyway)."""
    _check_map_location(map_location)
    if hasattr(f, "read"):
        where = str(getattr(f, "name", None) or "<file object>")
        data = f.read()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CheckpointError(f"{where}: read() returned {type(data).__name__}, not bytes: open the file "
                                  "in binary mode ('rb')")
        return _load(io.BytesIO(data), len(data), where, map_location)
    where = os.fspath(f)
    try:
        fh, size = st.open_regular(where)
    except FileNotFoundError:
        raise
    except st.FormatError as e:
        raise CheckpointError(f"{where}: not an eagerc checkpoint: it {e}") from None
    except OSError as e:
        raise CheckpointError(f"{where}: cannot open: {e.strerror or e}") from None
    with fh:
        return _load(fh, size, where, map_location)


def _load(f, size, where, map_location):
    f.seek(0)
    first = f.read(16)
    kind = None if first[8:9] == b"{" else torch_checkpoint.sniff(first)  # (safetensors: '{' at byte 8)
    with st.gc_paused():
        if kind is not None:
            return _load_torch(f, size, kind, where, map_location)
        try:
            header = st.read_header(f, size, checksum_key=CHECKSUM_KEY)
            arrays = st.read_tensors(f, header) if header.checksum else None  # verified before any use
            plain = _is_plain(header.metadata)
            if not plain:
                version, structure, bound = _check_metadata(header, where, counted=True)
            if arrays is None:
                arrays = st.read_tensors(f, header)
        except st.NotSafetensors as e:
            raise CheckpointError(f"{where}: not an eagerc checkpoint: it {e}") from None
        except st.UnsupportedDtype as e:
            raise CheckpointError(f"{where}: cannot load: {e}") from None
        except st.FormatError as e:
            raise CheckpointError(f"{where}: corrupted or truncated checkpoint: {e}") from None
        except OSError as e:
            raise CheckpointError(f"{where}: cannot read: {e.strerror or e}") from None
        if plain:
            dec = _Decoder(arrays, where, map_location, VERSION)
            return {name: dec.make_tensor(arr, st._clip(name), "cpu", False, False) for name, arr in arrays.items()}
        dec = _Decoder(arrays, where, map_location, version)
        try:
            obj = dec.decode(structure)
        except RecursionError:  # (only when load itself is called very deep in the stack)
            raise CheckpointError(f"{where}: its structure metadata is nested too deeply for the "
                                  "interpreter's stack") from None
        try:
            st.unique_keys(header.metadata["eagerc.structure"], "its structure metadata", bound, dec.keys,
                           dec.colons)
        except st.FormatError as e:
            raise CheckpointError(f"{where}: corrupted checkpoint: {e}") from None
    extra = sorted(set(arrays) - dec.used)
    if extra:
        raise CheckpointError(f"{where}: corrupted checkpoint: it holds tensors the metadata does not "
                              f"mention: {[st._clip(k, 60) for k in extra[:5]]}")
    return obj


def _is_plain(meta):
    """A safetensors file of tensors alone (the safetensors package's, PyTorch's, Hugging Face's):
    no eagerc metadata at all. It loads as a dict of name -> tensor."""
    return meta.get("format") != "eagerc.program" and not any(k.startswith("eagerc.") for k in meta)


def _load_torch(f, size, kind, where, map_location):
    """A file torch.save wrote (eagerc/torch_checkpoint.py reads it; nothing in it runs)."""
    dec = _Decoder({}, where, map_location, VERSION)
    try:
        return torch_checkpoint.read(f, size, kind, dec.torch_tensor)
    except torch_checkpoint.NotTorch as e:
        what = "a zip file" if kind == "zip" else "a pickle file"
        raise CheckpointError(f"{where}: not an eagerc checkpoint: it is {what}, and not a PyTorch checkpoint "
                              f"either: {e}") from None
    except torch_checkpoint.TorchFormatError as e:
        raise CheckpointError(f"{where}: cannot load this PyTorch checkpoint ({kind} format): {e}") from None
    except OSError as e:
        raise CheckpointError(f"{where}: cannot read: {e.strerror or e}") from None


def _check_metadata(header, where, counted=False):
    """(format version, structure) from a checkpoint's metadata; with `counted`, (version,
    structure, bound): the structure parsed without the duplicate-key hook (see
    safetensors_io.loads_json_counted), the decoder's walk counting what unique_keys needs to
    prove that no key was repeated."""
    meta = header.metadata
    if meta.get("eagerc.format") != FORMAT:
        hint = " (it is an eagerc program: load it with eagerc.runtime.load)" \
            if meta.get("format") == "eagerc.program" else " (read plain safetensors files with safetensors_io " \
            "or safetensors.numpy.load_file)"
        raise CheckpointError(f"{where}: not an eagerc checkpoint: a safetensors file without eagerc's "
                              f"metadata{hint}")
    text = meta.get("eagerc.version", "")
    if not (text.isascii() and text.isdigit() and len(text) <= 6) or int(text) < 1:
        raise CheckpointError(f"{where}: corrupted checkpoint: bad format version {st._clip(text)}")
    version = int(text)
    if version > VERSION:
        raise CheckpointError(f"{where}: written by a newer eagerc (checkpoint format {version}; this "
                              f"version reads up to {VERSION})")
    if version >= 2 and header.checksum is None:
        raise CheckpointError(f"{where}: corrupted checkpoint: format {version} carries a checksum as its first "
                              f"metadata entry, and this file has none there (damaged, or rewritten by another "
                              f"tool)")
    if "eagerc.structure" not in meta:
        raise CheckpointError(f"{where}: corrupted checkpoint: its metadata lacks 'eagerc.structure'")
    try:
        text, what = meta["eagerc.structure"], "its structure metadata"   # (decode bounds the depth)
        if counted:
            return (version, *st.loads_json_counted(text, what))
        return version, st.loads_json(text, what)
    except st.FormatError as e:
        raise CheckpointError(f"{where}: corrupted checkpoint: {e}") from None


class _Decoder:
    """Rebuild the saved object from the structure JSON (nesting already bounded) and the
    arrays (already checked against the file's checksum); any inconsistency is a
    CheckpointError naming the file. keys, colons: the keys of the objects its walk visited and
    the ':' in the strings it visited (each once), for safetensors_io.unique_keys."""

    def __init__(self, arrays, where, map_location, version):
        self.arrays = arrays
        self.where = where
        self.map_location = map_location
        self.version = version
        self.used = set()
        self.cache = {}
        self.devices = {}   # saved device name -> target device
        self.keys = self.colons = 0

    def fail(self, what):
        return CheckpointError(f"{self.where}: {what}")

    def malformed(self, kind, e):
        return self.fail(f"corrupted checkpoint: malformed {st._clip(kind, 40)} entry in the structure metadata "
                         f"({type(e).__name__}: {str(e)[:200]})")

    def decode(self, node, depth=0):
        if type(node) is str:
            self.colons += node.count(":")
            return node
        if node is None or isinstance(node, (bool, int, float)):
            return node
        if depth >= _MAX_JSON_DEPTH:
            raise self.fail(f"corrupted checkpoint: its structure metadata is nested more than {_MAX_JSON_DEPTH} "
                            "levels deep")
        depth += 1
        if isinstance(node, list):
            return [self.decode(v, depth) for v in node]
        self.keys += len(node)   # (JSON has only lists, dicts and scalars)
        kind = node.get("$type")
        if kind is None:
            self.colons += "".join(node).count(":")
            return {k: self.decode(v, depth) for k, v in node.items()}
        if kind in ("tensor", "ndarray"):
            return self.tensor(node, kind)
        try:
            if kind == "dict":
                d = OrderedDict() if node.get("ordered") else {}
                for k, v in _items(node):
                    d[self.key(k, depth)] = self.decode(v, depth + 2)   # (items, pair)
                return d
            if kind == "tuple":
                return tuple([self.decode(v, depth + 1) for v in _items(node)])
            if kind == "float":
                if not isinstance(node["value"], str):
                    raise TypeError("value is not a string")
                return float(self.decode(node["value"]))
            if kind == "dtype":
                from .runtime import dtypes
                return dtypes.as_dtype(str(self.decode(node["name"])))
            if kind == "device":
                from .runtime.device import device
                return device(str(self.decode(node["name"])))
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, RuntimeError) as e:  # RuntimeError: device()'s parse error
            raise self.malformed(kind, e) from None
        raise self.fail(f"corrupted checkpoint: unknown entry type {st._clip(kind, 40)} in the structure metadata")

    def key(self, k, depth):
        if type(k) is str:
            self.colons += k.count(":")
        elif isinstance(k, dict):
            k = self.decode(k, depth + 2)
        if isinstance(k, list):
            k = tuple(k)
        hash(k)  # TypeError (a malformed entry) for a dict key
        return k

    def tensor(self, node, kind):
        try:
            name, dtype, shape = node["key"], node["dtype"], node["shape"]
            if not isinstance(shape, list):
                raise TypeError("shape is not a list")
            crc = int(node["crc32"]) if self.version < 2 else None  # format 1: one CRC32 per tensor
            if not isinstance(name, str):
                raise TypeError("key is not a string")
        except (KeyError, TypeError, ValueError) as e:
            raise self.malformed(kind, e) from None
        cached = self.cache.get((name, kind))
        if cached is not None:
            return cached
        arr = self.arrays.get(name)
        if arr is None:
            raise self.fail(f"corrupted checkpoint: tensor {st._clip(name)} listed in the metadata is missing "
                            f"from the file")
        stored = _DTYPE_NAME.get(arr.dtype)
        if stored is None and _storable(arr.dtype):
            stored = _DTYPE_NAME[arr.dtype]
        if stored != dtype or arr.shape != tuple(shape):
            said = dtype if isinstance(dtype, str) and dtype in _DTYPE_NAMES else st._clip(dtype, 20)
            raise self.fail(f"corrupted checkpoint: tensor {st._clip(name)} is {arr.dtype.name}{list(arr.shape)} "
                            f"in the file but {said}{st._clip(shape, 60)} in the metadata")
        if crc is not None and (zlib.crc32(memoryview(arr).cast("B")) if arr.size else 0) != crc:
            raise self.fail(f"corrupted checkpoint: the data of tensor {st._clip(name)} does not match its checksum")
        self.used.add(name)
        self.colons += name.count(":")
        if kind == "ndarray":
            out = arr
        else:
            saved = node.get("device", "cpu")
            if type(saved) is str:
                self.colons += saved.count(":")
            out = self.make_tensor(arr, st._clip(name), saved, node.get("requires_grad"), node.get("parameter"))
        self.cache[(name, kind)] = out
        return out

    def make_tensor(self, arr, name, saved, requires_grad, parameter):
        from .dispatch import wrap
        try:
            target = self.target_device(str(saved))
            t = wrap(arr)
        except (TypeError, ValueError, RuntimeError) as e:
            raise self.malformed("tensor", e) from None
        if target.type != "cpu":
            from .runtime.device import cuda_available
            if not cuda_available():
                raise self.fail(f"tensor {name} was saved on {target}, but CUDA is "
                                "not available here; pass map_location='cpu' to load it on the CPU")
            t = t.to(target)
        try:
            if requires_grad:
                t.requires_grad_(True)   # (checks the dtype, as PyTorch does)
            if parameter:
                from .nn.parameter import Parameter
                t = Parameter(t, requires_grad=bool(requires_grad))
        except (TypeError, ValueError, RuntimeError) as e:  # e.g. an integer tensor that "requires grad"
            raise self.malformed("tensor", e) from None
        return t

    def torch_tensor(self, arr, location, requires_grad, parameter, name):
        """make_tensor for a PyTorch checkpoint's tensor, saved on `location` ('cpu', 'cuda:0'...)."""
        try:
            self.target_device(location)
        except (TypeError, ValueError, RuntimeError):
            raise self.fail(f"tensor {name} was saved on {st._clip(location, 40)}, a device eagerc does not "
                            "have: pass map_location='cpu'") from None
        return self.make_tensor(arr, name, location, requires_grad, parameter)

    def target_device(self, saved):
        d = self.devices.get(saved)
        if d is None:
            from .runtime.device import device
            m = self.map_location
            d = device(saved if m is None else m.get(saved, saved) if isinstance(m, dict) else m)
            self.devices[saved] = d
        return d


def _items(node):
    items = node["items"]
    if not isinstance(items, list):
        raise TypeError("items is not a list")
    return items


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
