"""Fuzzing eagerc.load on hostile PyTorch checkpoints: thousands of .pt files, and nothing
escapes but CheckpointError, nothing runs, nothing takes long or much memory.

Families (seeded, reproducible: a failure prints the seed and what was done):

  raw      bytes of a valid zip or legacy checkpoint flipped, changed, inserted, deleted,
           truncated, or garbage appended (what a disk or a network does)
  pickle   the data.pkl of a valid checkpoint mutated at the opcode level (bytes flipped,
           opcodes inserted / deleted / duplicated, a hostile opcode sequence spliced in) and
           re-zipped with fresh CRCs, so the pickle reader itself is what is fuzzed
  crafted  random opcode streams from the whole pickle alphabet with plausible arguments
           (globals from a list of dangerous and allowed names, REDUCE / BUILD / NEWOBJ on
           them, memo traffic, marks), in a valid zip or legacy layout
  payload  pickles that create a marker file when Python's unpickler runs them
           (tests/test_torch_checkpoint.py's list), spliced into valid state dicts

After all of them the marker file does not exist. Each file loads in under SLOW seconds;
a sample is loaded under tracemalloc and allocates at most a small multiple of its size.

EAGERC_FUZZ_N files (default 10000): `EAGERC_FUZZ_N=200000 pytest tests/test_torch_checkpoint_fuzz.py`.
"""
import collections
import io
import os
import struct
import time
import tracemalloc
from collections import OrderedDict

import numpy as np
import pytest

from eagerc.serialization import CheckpointError, load
from test_loader_fuzz import raw_mutation
from test_torch_checkpoint import _state, payloads
from torch_files import Storage, Tensor, data_pkl, glob, legacy_file, tensor, text, with_pickle, zip_file

N = int(os.environ.get("EAGERC_FUZZ_N", "10000"))
SLOW = 2.0
MARKER = "eagerc_fuzz_marker_must_not_exist"

NAMES = [("os", "system"), ("posix", "system"), ("builtins", "eval"), ("builtins", "exec"),
         ("builtins", "getattr"), ("builtins", "__import__"), ("subprocess", "Popen"), ("copyreg", "_reconstructor"),
         ("torch.nn.modules.linear", "Linear"), ("numpy.core.multiarray", "_reconstruct"), ("torch", "load"),
         ("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
         ("torch._utils", "_rebuild_tensor"), ("torch", "FloatStorage"), ("torch", "HalfStorage"),
         ("torch", "BFloat16Storage"), ("torch", "LongStorage"), ("torch", "UntypedStorage"), ("builtins", "set")]


def _bases():
    base = Storage(np.arange(12, dtype=np.float32))
    small = OrderedDict([("w", tensor(np.ones((2, 3), np.float32))), ("b", tensor(np.arange(3, dtype=np.int64))),
                         ("v", Tensor(base, 2, (2, 2), (1, 4))), ("t", Tensor(base, 0, (3, 4), (4, 1))),
                         ("p", tensor(np.ones(2, np.float16), requires_grad=True, parameter=True)),
                         ("meta", {"epoch": 1, "lr": 0.5, "names": ["a", "b"], "pair": (1, None)})])
    return [zip_file(small), zip_file(_state(), prefix="model"), legacy_file(small), legacy_file(_state())]


_ALPHABET = b"(012NI\x88\x89JKML\x8a\x8bFGX\x8c\x8dBC\x8e)t\x85\x86\x87]l}daesughjpqr\x94c\x93QRb\x81.\x80\x95iobPSVTU\x82\x83\x84\x92\x8f\x90\x91\x96\x97\x98"


def _opcodes(rng, n):
    """A random opcode stream with plausible arguments."""
    out = bytearray()
    for _ in range(n):
        op = _ALPHABET[int(rng.integers(len(_ALPHABET)))]
        r = int(rng.integers(4))
        if op == ord("c"):
            m, name = NAMES[int(rng.integers(len(NAMES)))]
            out += glob(m, name)
        elif op == 0x93:
            m, name = NAMES[int(rng.integers(len(NAMES)))]
            out += text(m) + text(name) + b"\x93"
        elif op in b"XBC\x8c\x8d\x8e":
            out += text(["storage", "cpu", "0", "1", "w", "x" * 70, "cuda:0", "mps"][int(rng.integers(8))])
        elif op in b"KhqC\x8a\x80":
            out += bytes([op, [0, 1, 2, 3, 5, 255, 128][int(rng.integers(7))]])
        elif op in b"Mj r":
            out += bytes([op]) + struct.pack("<I", [0, 1, 2, 2 ** 31, 2 ** 32 - 1][int(rng.integers(5))])[:2 if op == ord("M") else 4]
        elif op == ord("J"):
            out += b"J" + struct.pack("<i", [0, -1, 2 ** 31 - 1, 7][r])
        elif op in b"ILFgp":
            out += bytes([op]) + [b"0", b"01", b"-5", b"1e308", b"nan", b"x"][int(rng.integers(6))] + b"\n"
        elif op == ord("G"):
            out += b"G" + struct.pack(">d", [0.0, -1.5, 1e308, float("nan")][r])
        elif op in b"\x8b\x8d\x8e\x95":
            out += bytes([op]) + struct.pack("<Q", [0, 1, 8, 2 ** 62][r])[:4 if op == 0x8b else 8]
        else:
            out += bytes([op])
    return bytes(out)


def _pickle_mutation(data, rng):
    pkl = bytearray(data_pkl(data))
    kind = int(rng.integers(5))
    at = int(rng.integers(2, len(pkl)))
    if kind == 0:
        for _ in range(int(rng.integers(1, 4))):
            pkl[int(rng.integers(len(pkl)))] ^= 1 << int(rng.integers(8))
        what = "flips"
    elif kind == 1:
        pkl[at:at] = _opcodes(rng, int(rng.integers(1, 6)))
        what = f"opcodes inserted at {at}"
    elif kind == 2:
        del pkl[at:at + int(rng.integers(1, 6))]
        what = f"deleted at {at}"
    elif kind == 3:
        n = int(rng.integers(1, 40))
        pkl[at:at] = pkl[at:at + n]
        what = f"{n} bytes duplicated at {at}"
    else:
        payload, _ = payloads(MARKER)[int(rng.integers(len(payloads(MARKER))))]
        pkl[at:at] = payload[2:-1]   # (without PROTO and STOP)
        what = f"payload spliced at {at}"
    return with_pickle(data, bytes(pkl)), "pickle: " + what


def _crafted(rng):
    pickled = b"\x80\x02" + _opcodes(rng, int(rng.integers(1, 40))) + b"."
    if rng.integers(2):
        return zip_file(None, pickled=pickled), "crafted zip"
    return legacy_file(None, pickled=pickled), "crafted legacy"


def _payload(rng):
    payload, name = payloads(MARKER)[int(rng.integers(len(payloads(MARKER))))]
    return (zip_file(None, pickled=payload) if rng.integers(2) else legacy_file(None, pickled=payload)), f"payload {name}"


def _check(data):
    f = io.BytesIO(data)
    f.name = "fuzz.pt"
    try:
        load(f)
    except CheckpointError as e:
        assert str(e).startswith("fuzz.pt: "), e
        return "rejected"
    return "loaded"


def test_fuzzed_torch_checkpoints_raise_only_checkpoint_errors_and_run_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bases = _bases()
    for data in bases:
        assert _check(data) == "loaded"
    rng = np.random.default_rng(20261202)
    counts = collections.Counter()
    t0 = time.perf_counter()
    for i in range(N):
        s = int(rng.integers(2 ** 32))
        r = np.random.default_rng(s)
        family = ("raw", "pickle", "pickle", "crafted", "payload", "raw", "crafted", "pickle")[i % 8]
        base = bases[i % len(bases)]
        if family == "pickle" and i % len(bases) >= 2:
            base = bases[i % 2]   # (the pickle family mutates zip files' data.pkl)
        data, what = (raw_mutation(base, r) if family == "raw" else _pickle_mutation(base, r) if family == "pickle"
                      else _crafted(r) if family == "crafted" else _payload(r))
        measure = i % 100 == 0
        if measure:
            tracemalloc.start()
        start = time.perf_counter()
        try:
            result = _check(data)
        except Exception as e:  # noqa: BLE001 -- the point of the test
            pytest.fail(f"file {i} (seed {s}, {family}: {what}) escaped with {type(e).__name__}: {e}")
        finally:
            if measure:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
        took = time.perf_counter() - start
        assert took < SLOW, f"file {i} (seed {s}, {family}: {what}) took {took:.1f} s"
        if measure:
            assert peak < 64 * len(data) + (1 << 20), f"file {i} (seed {s}, {what}): {peak} bytes for {len(data)}"
        if family == "payload":
            assert result == "rejected", f"file {i} (seed {s}, {what}) loaded"
        counts[family, result] += 1
    assert not os.path.exists(MARKER) and os.listdir(tmp_path) == []
    print(f"{N} hostile .pt files in {time.perf_counter() - t0:.1f}s: {dict(counts)}")
    assert counts["raw", "rejected"] > N // 16 and counts["pickle", "rejected"] > N // 8
    assert counts["pickle", "loaded"] > 0 and counts["crafted", "rejected"] > N // 16
