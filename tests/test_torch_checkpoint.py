"""eagerc.load reads PyTorch checkpoints (torch.save's zip and legacy formats, Hugging Face
pytorch_model.bin, safetensors from PyTorch) without running anything from them.

The fixtures are written by tests/torch_files.py (opcodes by hand, no pickle, no PyTorch);
the tests at the end check that layout against real torch.save output and load real files
when PyTorch is installed.
"""
import io
import os
import struct
from collections import OrderedDict

import numpy as np
import pytest

import eagerc
from eagerc import nn
from eagerc.runtime.dtypes import as_dtype
from eagerc.serialization import CheckpointError
from torch_files import Raw, Storage, Tensor, data_pkl, glob, legacy_file, tensor, text, with_pickle, zip_file


def _load(data, name="ck.pt", **kw):
    f = io.BytesIO(data)
    f.name = name
    return eagerc.load(f, **kw)


def _refused(data, match):
    with pytest.raises(CheckpointError, match=match) as e:
        _load(data)
    assert str(e.value).startswith("ck.pt: ")
    return str(e.value)


def _state():
    rng = np.random.default_rng(0)
    base = Storage(np.arange(24, dtype=np.float32))
    return OrderedDict([
        ("fc.weight", tensor(rng.standard_normal((4, 3)).astype(np.float32))),
        ("fc.bias", tensor(rng.standard_normal(4).astype(np.float64))),
        ("half", tensor(np.array([1.5, -2.0], np.float16))),
        ("steps", tensor(np.array(7, np.int64))),
        ("mask", tensor(np.array([True, False]))),
        ("bytes", tensor(np.arange(5, dtype=np.uint8))),
        ("whole", Tensor(base, 0, (4, 6), (6, 1))),
        ("transposed", Tensor(base, 0, (6, 4), (1, 6))),     # non-contiguous view of the same storage
        ("window", Tensor(base, 7, (2, 3), (6, 2))),         # offset and strides
        ("expanded", Tensor(base, 3, (3, 2), (0, 1))),       # stride 0
        ("empty", Tensor(Storage(np.zeros(0, np.float32)), 0, (0, 3), (3, 1))),
        ("param", tensor(np.ones(3, np.float32), requires_grad=True, parameter=True)),
        ("meta", {"epoch": 3, "lr": 1e-3, "name": "run", "ok": True, "none": None,
                  "betas": (0.9, 0.999), "ids": [1, -2, 2 ** 40, 2 ** 70]}),
    ])


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_dtypes_shapes_strides_and_structure(fmt):
    obj = _state()
    data = zip_file(obj, prefix="my_model") if fmt == "zip" else legacy_file(obj)
    got = _load(data)
    assert type(got) is OrderedDict and list(got) == list(obj)
    flat = np.arange(24, dtype=np.float32)
    expect = {"whole": flat.reshape(4, 6), "transposed": flat.reshape(4, 6).T,
              "window": np.lib.stride_tricks.as_strided(flat[7:], (2, 3), (24, 8)),
              "expanded": np.broadcast_to(flat[3:5], (3, 2))}
    for k, v in obj.items():
        if k == "meta":
            assert got[k] == v and type(got[k]["betas"]) is tuple
            continue
        t = got[k]
        ref = expect.get(k)
        if ref is None:
            ref = np.lib.stride_tricks.as_strided(v.storage.flat[v.offset:], v.size,
                                                  [s * v.storage.flat.itemsize for s in v.stride])
        assert t.dtype == as_dtype(ref.dtype.name) and tuple(t.shape) == ref.shape, k
        np.testing.assert_array_equal(t.detach().numpy(), ref)
        assert tuple(s // ref.itemsize for s in t._array.strides) == v.stride or 0 in v.size, k
    assert isinstance(got["param"], nn.Parameter) and got["param"].requires_grad
    assert not got["fc.weight"].requires_grad


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_tensors_of_one_storage_share_memory(fmt):
    base = Storage(np.arange(6, dtype=np.float32))
    obj = {"a": Tensor(base, 0, (2, 3), (3, 1)), "b": Tensor(base, 3, (3,), (1,)), "c": Tensor(base, 0, (3, 2), (1, 3))}
    got = _load(zip_file(obj) if fmt == "zip" else legacy_file(obj))
    got["a"].add_(100.0)  # like PyTorch: writing through one view shows in the others
    np.testing.assert_array_equal(got["b"].numpy(), [103, 104, 105])
    np.testing.assert_array_equal(got["c"].numpy(), np.arange(100, 106, dtype=np.float32).reshape(2, 3).T)


def test_the_prefix_is_found_not_assumed():
    for prefix in ("archive", "pytorch_model", "weird name.v2"):
        assert list(_load(zip_file({"w": tensor(np.ones(2, np.float32))}, prefix=prefix))) == ["w"]
    _refused(zip_file({"w": 1}, prefix=""), "not an eagerc checkpoint: it is a zip file, and not a PyTorch")
    data = zip_file({"w": 1}, extra={"../escape": b"x"})
    _refused(data, "not all in one top folder")


def test_load_state_dict_takes_the_result(tmp_path):
    eagerc.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    rng = np.random.default_rng(1)
    state = OrderedDict((k, tensor(rng.standard_normal(tuple(v.shape)).astype(np.float32)))
                        for k, v in model.state_dict().items())
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(zip_file(state, prefix="pytorch_model"))
    model.load_state_dict(eagerc.load(path))
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k].storage.flat.reshape(state[k].size))


def test_locations_and_map_location():
    obj = {"w": Tensor(Storage(np.ones(2, np.float32), location="cuda:0"), 0, (2,), (1,))}
    if not eagerc.cuda.is_available():
        _refused(zip_file(obj), r"saved on cuda:0, but CUDA is not available here; pass map_location='cpu'")
    assert _load(zip_file(obj), map_location="cpu")["w"].device.type == "cpu"
    obj["w"].storage.location = "mps"
    _refused(zip_file(obj), "saved on 'mps', a device eagerc does not have: pass map_location='cpu'")
    assert _load(zip_file(obj), map_location={"mps": "cpu"})["w"].device.type == "cpu"


def test_bfloat16_storages_load_as_bfloat16():
    # bfloat16 is the top half of a float32: 0x3FC0 = 1.5, 0xC040 = -3.0, 0x3F81 = 1.0078125
    bits = np.array([0x3FC0, 0xC040, 0x3F81], np.uint16)
    obj = {"layer": {"w": Tensor(Storage(bits, type_name="BFloat16Storage"), 1, (2,), (1,))}}
    for data in (zip_file(obj), legacy_file(obj)):
        w = _load(data)["layer"]["w"]
        assert w.dtype == eagerc.bfloat16 and w.float().tolist() == [-3.0, 1.0078125]


def test_plain_safetensors_files_load_as_dicts(tmp_path):
    from eagerc.runtime import safetensors_io
    buf = io.BytesIO()
    safetensors_io.write(buf, {"b": np.arange(3), "a": np.ones(2, np.float16)}, {"format": "pt"})
    got = _load(buf.getvalue(), "m.safetensors")
    assert set(got) == {"a", "b"} and got["a"].dtype == eagerc.float16
    head = b'{"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}'
    got = _load(struct.pack("<Q", len(head)) + head + np.array([0x3FC0, 0xC040], "<u2").tobytes(), "m.safetensors")
    assert got["w"].dtype == eagerc.bfloat16 and got["w"].float().tolist() == [1.5, -3.0]


# ---------------------------------------------------------------- refused: code, classes, opcodes

MARKER = "eagerc_torch_marker_must_not_exist"


def payloads(marker):
    """Pickles that would run code (create `marker`) under Python's unpickler, and the name eagerc
    refuses in each."""
    cmd = text(f"touch {marker}")
    state = b"\x80\x02}(" + text("w")
    return [
        (state + glob("os", "system") + b"(" + cmd + b"tRu.", "os.system"),
        (state + glob("posix", "system") + cmd + b"\x85Ru.", "posix.system"),
        (state + text("builtins") + text("exec") + b"\x93" + text(f"open({marker!r}, 'w')") + b"\x85Ru.", "builtins.exec"),
        (b"\x80\x02" + glob("builtins", "eval") + text(f"open({marker!r}, 'w')") + b"\x85R.", "builtins.eval"),
        (b"\x80\x02" + glob("subprocess", "call") + b"(" + text("touch") + text(marker) + b"l\x85R.", "subprocess.call"),
        (b"\x80\x02" + glob("builtins", "open") + text(marker) + text("w") + b"\x86R.", "builtins.open"),
        (b"\x80\x02" + glob("copyreg", "_reconstructor") + b"(" + glob("torch.nn", "Linear") + b"tR.", "copyreg._reconstructor"),
        (b"\x80\x02" + glob("torch.nn.modules.linear", "Linear") + b")\x81.", "torch.nn.modules.linear.Linear"),
        (b"\x80\x02" + glob("torch", "load") + text(marker) + b"\x85R.", "torch.load"),
        (b"\x80\x02" + glob("numpy.core.multiarray", "_reconstruct") + b")R.", "numpy.core.multiarray._reconstruct"),
        (b"\x80\x02" + glob("collections", "OrderedDict") + b")R}" + text("__setstate__") + glob("os", "system")
         + b"sb.", "os.system"),
        (b"(" + text(f"touch {marker}") + b"ios\nsystem\n.", "INST"),
        (b"(" + glob("os", "system") + text(f"touch {marker}") + b"o.", "os.system"),
        (b"\x80\x02\x82\x01.", "EXT1"),
        (b"\x80\x04" + glob("os", "system") + b")}\x92.", "os.system"),
        (b"\x80\x02" + glob("collections", "OrderedDict") + b")}\x92.", "NEWOBJ_EX"),
        (b"\x80\x02" + glob("torch._utils", "_rebuild_tensor_v2") + text("x") + b"\x85R.",
         "_rebuild_tensor_v2 with 1 arguments"),
        (b"\x80\x02" + glob("torch", "FloatStorage") + b")R.", "REDUCE calls a global 'torch.FloatStorage'"),
        (b"\x80\x02]" + glob("os", "system") + b"a.", "os.system"),
    ]


@pytest.mark.parametrize("i", range(len(payloads(MARKER))))
def test_code_and_classes_are_refused_by_name(tmp_path, monkeypatch, i):
    monkeypatch.chdir(tmp_path)
    pickled, name = payloads(MARKER)[i]
    for data in (zip_file(None, pickled=pickled), legacy_file(None, pickled=pickled)):
        msg = _refused(data, "cannot load this PyTorch checkpoint")
        assert name in msg
    assert not os.path.exists(MARKER)


def test_limits_are_checked_before_anything_is_allocated():
    big = {"w": Tensor(Storage(np.ones(4, np.float32), numel=2 ** 60), 0, (2 ** 30, 2 ** 30), (2 ** 30, 1))}
    _refused(zip_file(big), "says 1152921504606846976 elements of float32, its entry holds 16 bytes")
    _refused(legacy_file(big), "holds 4 elements, the pickle says 1152921504606846976")
    past = {"w": Tensor(Storage(np.ones(4, np.float32)), 1, (2, 2), (2, 1))}
    _refused(zip_file(past), r"reads element 4 of storage '0', which holds 4")
    _refused(zip_file({"w": Tensor(Storage(np.ones(4, np.float32)), 0, (2,), (-1,))}), "not a non-negative")
    _refused(zip_file({"w": Tensor(Storage(np.ones(4, np.float32)), 0, (2, 2), (1,))}), "one length")
    _refused(zip_file({"w": tensor(np.ones(4, np.float32))}, compress=True), "is compressed")
    data = bytearray(zip_file({"w": tensor(np.arange(4, dtype=np.float32))}))
    at = bytes(data).index(np.arange(4, dtype=np.float32).tobytes())
    data[at + 5] ^= 1
    _refused(bytes(data), "fails its CRC-32 check")
    for pickled, match in [
        (b"\x80\x02" + b"]" * 100 + b"a" * 99 + b".", "nested more than 64"),
        (b"\x80\x02]q\x00h\x00a.", "contains itself"),
        (b"\x80\x02\x8b\xff\xff\xff\x7f.", "integer of 2147483647 bytes"),
        (b"\x80\x02X\xff\xff\xff\x7f.", "truncated: an opcode wants 2147483647 bytes"),
        (b"\x80\x02h\x05.", "memo entry 5, which was never stored"),
        (b"\x80\x02a.", "empty stack"),
        (b"\x80\x02}]K\x01s.", "a dict key is a list"),
        (b"\x80\x02N", "without STOP"),
        (b"\x80\x02NN.", "STOP with 2 items"),
        (b"\x80\x02(" * 3 + b".", "STOP with 0 items and 3 marks"),
        (b"\x80\x02" + glob("torch", "FloatStorage") + b".", "is a global 'torch.FloatStorage'"),
    ]:
        _refused(zip_file(None, pickled=pickled), match)


def test_files_that_are_zip_or_pickle_but_not_torch():
    _refused(b"\x80\x04\x95" + b"\x00" * 40, "not an eagerc checkpoint: it is a pickle file, and not a PyTorch")
    _refused(b"\x80\x02K\x07." + b"\x00" * 10, "not PyTorch's magic number")
    buf = io.BytesIO()
    np.savez(buf, a=np.ones(2))
    _refused(buf.getvalue(), "not an eagerc checkpoint: it is a zip file, and not a PyTorch checkpoint either")


# ---------------------------------------------------------------- against PyTorch itself

def _torch():
    return pytest.importorskip("torch")


def _torch_states(torch):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 2))
    cnn(torch.randn(3, 2, 4, 4))   # running stats move
    base = torch.arange(24.0)
    shared = {"base": base, "view": base[2:8].view(2, 3), "t": base.view(4, 6).t(), "half": torch.randn(3).half(),
              "int": torch.arange(4), "param": torch.nn.Parameter(torch.ones(2)), "meta": {"epoch": 2, "tag": "x"}}
    return {"mlp": mlp.state_dict(), "cnn": cnn.state_dict(), "shared": shared}, mlp, cnn


def _same(torch, got, ref):
    if isinstance(ref, torch.Tensor):
        np.testing.assert_array_equal(got.detach().numpy(), ref.detach().numpy())
        assert str(got.dtype).split(".")[-1] == str(ref.dtype).split(".")[-1] and tuple(got.shape) == ref.shape
        assert isinstance(got, nn.Parameter) == isinstance(ref, torch.nn.Parameter)
    elif isinstance(ref, dict):
        assert type(got) is type(ref) and (list(got) == list(ref) if type(ref) is OrderedDict else set(got) == set(ref))
        for k in ref:
            _same(torch, got[k], ref[k])
    else:
        assert got == ref


@pytest.mark.parametrize("legacy", [False, True])
def test_real_torch_save_files_load_with_torchs_values(tmp_path, legacy):
    torch = _torch()
    states, mlp, cnn = _torch_states(torch)
    for name, state in states.items():
        path = tmp_path / f"{name}.pt"
        torch.save(state, path, _use_new_zipfile_serialization=not legacy)
        got = eagerc.load(path)
        _same(torch, got, state)
        if name == "shared":
            got["base"].add_(1.0)
            np.testing.assert_array_equal(got["view"].numpy(), np.arange(3.0, 9.0).reshape(2, 3))
            np.testing.assert_array_equal(got["t"].numpy(), np.arange(1.0, 25.0).reshape(4, 6).T)
    # a pretrained-style state dict gives the same outputs in eagerc
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    model.load_state_dict(eagerc.load(tmp_path / "mlp.pt"))
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(model(eagerc.tensor(x)).detach().numpy(),
                               mlp(torch.from_numpy(x)).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_the_hand_built_layout_matches_torch_save(tmp_path):
    """tests/torch_files.py writes what torch.save writes: the same entries, and files that
    torch.load(weights_only=True) reads back to the same values."""
    torch = _torch()
    import zipfile
    torch.save({"w": torch.ones(2, 3)}, tmp_path / "model.pt")
    real = zipfile.ZipFile(tmp_path / "model.pt")
    mine = zipfile.ZipFile(io.BytesIO(zip_file({"w": tensor(np.ones((2, 3), np.float32))}, prefix="model")))
    assert sorted(real.namelist()) == sorted(mine.namelist())
    for entry in ("byteorder", "version", ".format_version", ".storage_alignment"):
        assert real.read(f"model/{entry}") == mine.read(f"model/{entry}")
    obj = _state()
    for data in (zip_file(obj), legacy_file(obj)):
        ref = torch.load(io.BytesIO(data), weights_only=True)
        _same(torch, _load(data), ref)
    # and both readers refuse the same hostile file (torch's own weights_only unpickler too)
    pickled, _ = payloads(MARKER)[0]
    with pytest.raises(Exception):
        torch.load(io.BytesIO(zip_file(None, pickled=pickled)), weights_only=True)
    assert data_pkl(zip_file(obj)).startswith(b"\x80\x02" + glob("collections", "OrderedDict"))


def test_real_safetensors_files_from_pytorch(tmp_path):
    torch = _torch()
    stt = pytest.importorskip("safetensors.torch")
    ref = {"w": torch.randn(3, 2), "h": torch.randn(4).half(), "i": torch.arange(3)}
    stt.save_file(ref, tmp_path / "model.safetensors", metadata={"format": "pt"})
    _same(torch, eagerc.load(tmp_path / "model.safetensors"), ref)
    bf = {"b": torch.randn(3, 2).to(torch.bfloat16)}
    stt.save_file(bf, tmp_path / "bf.safetensors")
    torch.save(bf, tmp_path / "bf.pt")
    for name in ("bf.safetensors", "bf.pt"):
        got = eagerc.load(tmp_path / name)["b"]
        assert got.dtype == eagerc.bfloat16
        assert got.float().numpy().tolist() == bf["b"].float().numpy().tolist()
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")   # a pickled Module: refused by name
    with pytest.raises(CheckpointError, match="refused the global 'torch.nn.modules.linear.Linear'"):
        eagerc.load(tmp_path / "module.pt")
