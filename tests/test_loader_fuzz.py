"""Fuzzing the program loader: thousands of mutated files, and nothing escapes but its own error.

Every mutant of a few valid program files either fails to load with ProgramLoadError, or
loads -- and then runs on inputs that match its specs, failing at most with the program's
own call-time errors (ProgramInputError / ProgramRunError, both ValueErrors). No
IndexError, KeyError, TypeError, MemoryError, RecursionError or numpy error may escape.

Mutations (seeded, reproducible: a failure prints the seed and the mutation):
  bytes   flips, truncations, trailing garbage, a rewritten length field
  header  the safetensors header's entries: dtypes, shapes, offsets, keys, tensors
  graph   the graph JSON: any entry replaced by hostile values, deleted, duplicated;
          ops swapped for other declared ops; sizes and attributes nudged
  meta    the other metadata: version, inputs specs, dynamic table, missing/extra keys
  digits  one digit of the header changed (valid JSON, a different number)
  stacks  two or three of the above on top of each other

Run it longer with `EAGERC_FUZZ_N=100000 pytest tests/test_loader_fuzz.py`.
"""
import copy
import io
import json
import os
import struct
import time

import numpy as np
import pytest

import eagerc
from eagerc import nn
from eagerc.compiler.export import export
from eagerc.runtime import OPS, safetensors_io
from eagerc.runtime.program import ProgramInputError, ProgramLoadError, ProgramRunError, loads

N = int(os.environ.get("EAGERC_FUZZ_N", "6000"))
LIMIT = 2 ** 22   # max_value_bytes for fuzzed files: a mutant cannot make a test allocate much

_DEEP = [0]
for _ in range(200):
    _DEEP = [_DEEP]
HOSTILE = [None, True, False, 0, 1, -1, 2, 3, 7, 255, 2 ** 31, 2 ** 40, 2 ** 63, 2 ** 64, -2 ** 63, 10 ** 30,
           0.5, -1.5, 1e308, float("inf"), float("-inf"), float("nan"), "", "x", "t0", "arg0", "__import__",
           "os.system", "float32", "int64", "F32", "eval", "\x00", "é" * 3, "a" * 5000, [], [1], [1, 2],
           [2, 3, 4], [[1, 2], [3, 4]], [-1], [0, 0], ["int", 0], [["int", 0]], {}, {"a": 1}, {"t": 0},
           {"value": "t0"}, {"const": 1}, _DEEP, list(range(20000))]


# ---------------------------------------------------------------- base programs

class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(3 * 2 * 2, 4)

    def forward(self, x):
        x = nn.functional.max_pool2d(self.bn(self.conv(x)).relu(), 2)
        return self.fc(x.flatten(1)).softmax(-1)


def _multi(a, b, idx):
    s = a * b + 1.0
    return {"s": s, "pair": (a.sum(dim=1), s[:, 1:3].mean())}, eagerc.cat([a, b], 0)[idx], (a > 0).any()


def _base_files():
    eagerc.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
    files = [
        export(mlp, (eagerc.randn(2, 4),), dynamic_shapes=({0: "batch"},), include_example_inputs=True),
        export(_CNN(), (eagerc.randn(2, 2, 4, 4),)),
        export(_multi, (eagerc.randn(3, 4), eagerc.randn(3, 4), eagerc.tensor([0, 5, 2])),
               dynamic_shapes={"a": {0: "n"}, "b": {0: "n"}}),
    ]
    out = []
    for p in files:
        tensors, metadata = p.parts()
        buf = io.BytesIO()
        safetensors_io.write(buf, tensors, metadata, checksum_key="checksum")
        out.append(buf.getvalue())
    return out


# ---------------------------------------------------------------- mutations

def _split(data):
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def _join(header, body):
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def _paths(obj, path=(), out=None, depth=0):
    """Every (path) into a JSON object, parents before children."""
    out = [] if out is None else out
    out.append(path)
    if depth > 12:
        return out
    if isinstance(obj, dict):
        for k, v in obj.items():
            _paths(v, path + (k,), out, depth + 1)
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:50]):
            _paths(v, path + (i,), out, depth + 1)
    return out


def _get(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def _mutate_json(obj, rng):
    """One random structural mutation of a JSON object (in place); returns a description."""
    paths = _paths(obj)[1:]
    if not paths:
        return "nothing to mutate"
    path = paths[rng.integers(len(paths))]
    parent, key = _get(obj, path[:-1]), path[-1]
    old = parent[key]
    r = rng.integers(10)
    if r < 4:
        parent[key] = copy.deepcopy(HOSTILE[rng.integers(len(HOSTILE))])
        return f"{path} <- hostile {str(parent[key])[:40]}"
    if r == 4:
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
        return f"delete {path}"
    if r == 5:
        if isinstance(parent, dict):
            parent[f"extra{rng.integers(3)}"] = copy.deepcopy(old)
        else:
            parent.insert(key, copy.deepcopy(old))
        return f"duplicate {path}"
    if r == 6 and isinstance(old, bool) is False and isinstance(old, int):
        parent[key] = old + int(rng.choice([-2, -1, 1, 2, 7, -old - 1, 2 ** 20]))
        return f"nudge {path}"
    if r == 7 and isinstance(old, str):
        names = list(OPS) + ["float16", "int8", "bool", "uint8", "t1", "arg0", "external", "tuple", "dict"]
        parent[key] = names[rng.integers(len(names))]
        return f"{path} <- {parent[key]}"
    if r == 8 and isinstance(old, list) and len(old) > 1:
        i, j = rng.integers(len(old), size=2)
        old[i], old[j] = old[j], old[i]
        return f"swap {path}[{i}] / [{j}]"
    # copy another entry of the same object over this one
    other = paths[rng.integers(len(paths))]
    parent[key] = copy.deepcopy(_get(obj, other))
    return f"{path} <- copy of {other}"


def _swap_op(graph, rng):
    """Replace a node's op with another declared op of the same number of inputs."""
    if not graph["nodes"]:
        return "no nodes"
    node = graph["nodes"][rng.integers(len(graph["nodes"]))]
    n = len(node["inputs"])
    same = [name for name, op in OPS.items() if len(op.inputs) == n and set(node["attrs"]) <= set(op.attrs)]
    if not same:
        return "no op to swap"
    new = same[rng.integers(len(same))]
    old, node["op"] = node["op"], new
    return f"op {old} -> {new}"


def _digit_flip(data, rng):
    """Change one digit of the header: the JSON stays valid, a number changes (a size, an
    offset, an attribute, a version, an index...)."""
    n = struct.unpack("<Q", data[:8])[0]
    header = bytearray(data[8:8 + n])
    digits = [i for i, c in enumerate(header) if 48 <= c <= 57]
    i = digits[rng.integers(len(digits))]
    header[i] = 48 + int(rng.integers(10))
    return data[:8] + bytes(header) + data[8 + n:], f"digit at header byte {i}"


def mutate(data, rng):
    """One mutant of a valid file and a description of the mutation."""
    kind = rng.integers(15)
    if kind >= 12:
        if kind == 14:  # several mutations on top of each other
            whats = []
            for _ in range(int(rng.integers(2, 4))):
                try:  # a mutant may no longer have the parts the next mutation edits
                    data, what = mutate(data, rng)
                except (ValueError, KeyError, TypeError, IndexError, AttributeError, struct.error):
                    break
                whats.append(what)
            return data, " + ".join(whats)
        return _digit_flip(data, rng)
    if kind == 0:
        b = bytearray(data)
        for _ in range(rng.integers(1, 9)):
            b[rng.integers(len(b))] = rng.integers(256)
        return bytes(b), "byte flips"
    if kind == 1:
        cut = int(rng.integers(len(data)))
        return data[:cut], f"truncate to {cut}"
    if kind == 2:
        extra = rng.bytes(int(rng.integers(1, 64)))
        return data + extra, "trailing garbage"
    if kind == 3:
        n = int(rng.choice([0, 1, 7, 2 ** 63, 2 ** 64 - 1, 10 ** 9, len(data), len(data) - 8,
                            struct.unpack("<Q", data[:8])[0] + int(rng.integers(-9, 9))]))
        return struct.pack("<Q", max(0, min(n, 2 ** 64 - 1))) + data[8:], f"length field {n}"
    header, body = _split(data)
    if kind in (4, 5):
        tensors = [k for k in header if k != "__metadata__"]
        sub = {k: header[k] for k in tensors}
        what = _mutate_json(sub, rng)
        for k in tensors:
            header.pop(k)
        header.update(sub)
        return _join(header, body), f"header: {what}"
    meta = header["__metadata__"]
    if kind == 6:
        key = ["format", "format_version", "eagerc_version", "graph", "inputs", "dynamic",
               "extra"][rng.integers(7)]
        choice = rng.integers(3)
        if choice == 0:
            meta.pop(key, None)
        else:
            meta[key] = str(HOSTILE[rng.integers(len(HOSTILE))])[:200] if choice == 1 else "2"
        return _join(header, body), f"metadata[{key}] mutated"
    if kind in (7, 8, 9, 10):
        graph = json.loads(meta["graph"])
        what = _swap_op(graph, rng) if kind == 10 else _mutate_json(graph, rng)
        meta["graph"] = json.dumps(graph)
        return _join(header, body), f"graph: {what}"
    key = "inputs" if rng.integers(2) else "dynamic"
    obj = json.loads(meta[key])
    what = _mutate_json({"root": obj}, rng)
    meta[key] = json.dumps(obj)
    return _join(header, body), f"{key}: {what}"


# ---------------------------------------------------------------- the check

def _inputs_for(prog, rng):
    binding = {}
    for name, d in prog.dynamic_dims.items():
        hi = d["example"] + 3 if d["max"] is None else min(d["max"], d["example"] + 3)
        binding[name] = int(rng.integers(max(d["min"], 1), max(hi, 1) + 1))
    out = []
    for spec in prog.input_specs:
        shape = [binding.get(s, 1) if isinstance(s, str) else s for s in spec["shape"]]
        dt = np.dtype(spec["dtype"])
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            out.append(rng.integers(0, 3, shape).astype(dt))
    return out


def check_one(data, rng):
    """Load `data`; if it loads, run it. Returns 'rejected', 'ran' or 'run-error'."""
    try:
        prog = loads(data, max_value_bytes=LIMIT)
    except ProgramLoadError:
        return "rejected"
    try:
        with np.errstate(all="ignore"):
            prog(*_inputs_for(prog, rng))
            if prog.example_inputs is not None:
                try:
                    prog.self_check()
                except ProgramRunError:
                    pass
    except (ProgramInputError, ProgramRunError):
        return "run-error"
    return "ran"


def test_base_files_load_and_run():
    rng = np.random.default_rng(0)
    for data in _base_files():
        assert check_one(data, rng) == "ran"


def test_fuzzed_files_raise_only_program_errors():
    bases = _base_files()
    rng = np.random.default_rng(20240601)
    counts = {}
    t0 = time.perf_counter()
    for i in range(N):
        seed = int(rng.integers(2 ** 32))
        r = np.random.default_rng(seed)
        base = bases[i % len(bases)]
        data, what = mutate(base, r)
        try:
            result = check_one(data, r)
        except Exception as e:  # noqa: BLE001 -- the point of the test
            pytest.fail(f"mutant {i} (seed {seed}, base {i % len(bases)}, {what}) escaped with "
                        f"{type(e).__name__}: {e}")
        counts[result] = counts.get(result, 0) + 1
    dt = time.perf_counter() - t0
    print(f"{N} mutants in {dt:.1f}s: {counts}")
    assert counts.get("rejected", 0) > N // 3  # the mutations do hit the validation
    assert counts.get("ran", 0) > 0            # ... and some mutants stay valid programs


def test_every_truncation_is_rejected():
    data = _base_files()[0]
    for cut in range(0, len(data), max(1, len(data) // 400)):
        with pytest.raises(ProgramLoadError):
            loads(data[:cut])


if __name__ == "__main__":
    test_fuzzed_files_raise_only_program_errors()
