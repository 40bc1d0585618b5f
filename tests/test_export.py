"""eagerc.export -> Program.save -> eagerc.runtime.load: round trips, the standalone runtime,
atomic writes, and the loader's rejection of corrupted and hostile files."""
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eagerc
from eagerc import nn
from eagerc.compiler.export import ExportError, Program, export
from eagerc.runtime import program as rp
from eagerc.runtime import safetensors_io
from eagerc.runtime.program import ProgramInputError, ProgramLoadError, ProgramRunError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- models

def _mlp():
    eagerc.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(8 * 2 * 2, 5))

    def forward(self, x):
        return self.head(self.features(x)).log_softmax(-1)


def _cnn():
    eagerc.manual_seed(1)
    m = SmallCNN()
    bn = m.features[1]
    bn.running_mean._array[...] = np.linspace(-0.5, 0.5, 8)   # non-trivial statistics
    bn.running_var._array[...] = np.linspace(0.5, 2.0, 8)
    return m


def multi(a, b, idx, *, scale):
    s = a * b + scale
    m = s.mean(dim=1)
    return {"sum": s, "stats": (m, s.amax(dim=0)), "picked": s[idx], "n": 3}, [a.sum(), None], scale * 2


def _multi_inputs(n=4, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 5)).astype(np.float32), rng.standard_normal((n, 5)).astype(np.float32),
            np.array([0, 2, 1], dtype=np.int64), rng.standard_normal(5).astype(np.float32))


def _eager(fn, *arrays, **kw):
    with eagerc.no_grad():
        out = fn(*[eagerc.tensor(a) for a in arrays], **{k: eagerc.tensor(v) for k, v in kw.items()})
    return _to_numpy(out)


def _to_numpy(x):
    if isinstance(x, eagerc.Tensor):
        return x.numpy()
    if isinstance(x, tuple):
        return tuple(_to_numpy(v) for v in x)
    if isinstance(x, list):
        return [_to_numpy(v) for v in x]
    if isinstance(x, dict):
        return {k: _to_numpy(v) for k, v in x.items()}
    return x


def _assert_close(got, want, rtol=1e-6, atol=1e-6):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _assert_close(got[k], want[k], rtol, atol)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_close(g, w, rtol, atol)
    else:
        assert got == want


@pytest.fixture(scope="module")
def exported():
    """The three example programs with their models (exported once for the module)."""
    mlp, cnn = _mlp(), _cnn()
    a, b, idx, scale = _multi_inputs()
    return {
        "mlp": (mlp, export(mlp, (eagerc.randn(4, 6),), dynamic_shapes=({0: "batch"},),
                            include_example_inputs=True)),
        "cnn": (cnn, export(cnn, (eagerc.randn(2, 3, 8, 8),), dynamic_shapes={"x": {0: "batch"}})),
        "multi": (multi, export(multi, (a, b, idx), example_kwargs={"scale": scale},
                                dynamic_shapes={"a": {0: "n"}, "b": {0: "n"}})),
    }


@pytest.fixture
def mlp_file(exported, tmp_path):
    path = str(tmp_path / "mlp.eagerc")
    exported["mlp"][1].save(path)
    exported["mlp"][1].save(path + ".orig")  # _parts reads this pristine copy
    return path


# ---------------------------------------------------------------- round trips

def test_mlp_round_trip_matches_model_on_new_inputs(exported, tmp_path):
    model, prog = exported["mlp"]
    path = prog.save(tmp_path / "mlp.eagerc")
    loaded = eagerc.runtime.load(path)
    rng = np.random.default_rng(5)
    for batch in (4, 1, 7, 32):
        x = rng.standard_normal((batch, 6)).astype(np.float32)
        want = _eager(model, x)
        _assert_close(loaded(x), want)
        _assert_close(prog(x), want)
    assert loaded.input_specs == [{"name": "arg0", "path": "input", "shape": ["batch", 6], "dtype": "float32"}]
    assert loaded.dynamic_dims == {"batch": {"example": 4, "min": 1, "max": None}}
    assert loaded.eagerc_version == eagerc.__version__ and loaded.format_version == 2
    assert loaded.self_check()


def test_cnn_round_trip_in_eval_mode_and_training_flags_restored(exported, tmp_path):
    model, prog = exported["cnn"]
    assert model.training and model.features[1].training  # export put them back
    loaded = eagerc.runtime.load(prog.save(tmp_path / "cnn.eagerc"))
    model.eval()
    try:
        rng = np.random.default_rng(6)
        for batch in (2, 3):
            x = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)
            _assert_close(loaded(x), _eager(model, x))
    finally:
        model.train()
    assert "conv2d" in {n.op for n in loaded.graph.nodes}
    assert set(loaded.weights) >= {"features.0.weight", "features.1.running_mean", "head.2.bias"}


def test_multi_input_output_structure(exported, tmp_path):
    fn, prog = exported["multi"]
    loaded = eagerc.runtime.load(prog.save(tmp_path / "multi.eagerc"))
    assert [s["path"] for s in loaded.input_specs] == ["a", "b", "idx", "scale"]
    assert [s["shape"] for s in loaded.input_specs] == [["n", 5], ["n", 5], [3], [5]]
    for n in (4, 3, 9):
        a, b, idx, scale = _multi_inputs(n, seed=n)
        want = _eager(fn, a, b, idx, scale=scale)
        got = loaded(a, b, idx, scale)
        _assert_close(got, want)
        assert got[0]["n"] == 3 and got[1][1] is None


def test_weights_are_copied_at_export_time(tmp_path):
    model = _mlp()
    prog = export(model, (eagerc.randn(2, 6),))
    x = np.ones((2, 6), np.float32)
    before = prog(x)
    with eagerc.no_grad():
        model[0].weight.mul_(2.0)
    np.testing.assert_array_equal(prog(x), before)
    np.testing.assert_array_equal(eagerc.runtime.load(prog.save(tmp_path / "m.eagerc"))(x), before)


def test_numpy_arrays_as_example_inputs_and_single_tensor_args():
    model = _mlp()
    prog = export(model, np.zeros((3, 6), np.float32))
    assert isinstance(prog, Program) and prog.input_specs[0]["shape"] == [3, 6]
    compiled = export(eagerc.compile(model), (np.zeros((3, 6), np.float32),))
    assert set(compiled.weights) == set(prog.weights) == {"0.weight", "0.bias", "2.weight", "2.bias",
                                                          "4.weight", "4.bias"}


def test_function_reading_a_module_names_its_weights_and_uses_eval_mode():
    model = _cnn()

    def fn(x):
        return model(x).exp()
    prog = export(fn, (eagerc.randn(2, 3, 8, 8),))
    assert "model.features.0.weight" in prog.weights and "model.features.1.running_var" in prog.weights
    assert model.training
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    model.eval()
    try:
        _assert_close(prog(x), _eager(fn, x), rtol=1e-5)
    finally:
        model.train()


def test_batchnorm_train_mode_updates_state_like_eager(tmp_path):
    eagerc.manual_seed(3)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    stats = model[1].running_mean.numpy().copy()
    prog = export(model, (eagerc.randn(5, 3),), eval_mode=False)
    np.testing.assert_array_equal(model[1].running_mean.numpy(), stats)  # export left the model as it was
    loaded = eagerc.runtime.load(prog.save(tmp_path / "bn.eagerc"))
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((5, 3)).astype(np.float32)
        _assert_close(loaded(x), _eager(model, x), rtol=1e-5)
    np.testing.assert_allclose(loaded.weights["1.running_mean"], model[1].running_mean.numpy(), rtol=1e-6)


# ---------------------------------------------------------------- the standalone runtime

_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import eagerc.runtime
    result = {}
    for name in sys.argv[2:]:
        prog = eagerc.runtime.load(f"{sys.argv[1]}/{name}.eagerc")
        inputs = np.load(f"{sys.argv[1]}/{name}.in.npz")
        out = prog(*[inputs[f"x{i}"] for i in range(len(inputs.files))])
        def enc(x):
            if isinstance(x, np.ndarray):
                return {"dtype": str(x.dtype), "shape": list(x.shape), "data": x.ravel().tolist()}
            if isinstance(x, dict):
                return {"dict": [[k, enc(v)] for k, v in x.items()]}
            if isinstance(x, (tuple, list)):
                return {type(x).__name__: [enc(v) for v in x]}
            return {"c": x}
        result[name] = enc(out)
    bad = sorted(m for m in sys.modules if m.startswith("eagerc") and m != "eagerc"
                 and not m.startswith("eagerc.runtime"))
    result["modules"] = bad
    print(json.dumps(result))
""")


def _dec(x):
    (kind, v), = x.items() if "data" not in x else [("array", x)]
    if kind == "array":
        return np.array(v["data"], dtype=v["dtype"]).reshape(v["shape"])
    if kind == "dict":
        return {k: _dec(t) for k, t in v}
    if kind in ("tuple", "list"):
        return (tuple if kind == "tuple" else list)(_dec(t) for t in v)
    return v


def test_fresh_subprocess_runs_without_frontend_or_compiler(exported, tmp_path):
    rng = np.random.default_rng(9)
    cnn = exported["cnn"][0]
    cases = {"mlp": (rng.standard_normal((5, 6)).astype(np.float32),),
             "cnn": (rng.standard_normal((3, 3, 8, 8)).astype(np.float32),),
             "multi": _multi_inputs(6, seed=11)}
    for name, inputs in cases.items():
        exported[name][1].save(tmp_path / f"{name}.eagerc")
        np.savez(tmp_path / f"{name}.in.npz", **{f"x{i}": a for i, a in enumerate(inputs)})
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), *cases], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["modules"] == [], f"the runtime imported {result['modules']}"
    cnn.eval()
    try:
        want = {"mlp": _eager(exported["mlp"][0], *cases["mlp"]), "cnn": _eager(cnn, *cases["cnn"])}
    finally:
        cnn.train()
    a, b, idx, scale = cases["multi"]
    want["multi"] = _eager(multi, a, b, idx, scale=scale)
    for name in cases:
        _assert_close(_dec(result[name]), want[name])


def test_runtime_load_is_a_runtime_name():
    import eagerc.runtime
    assert callable(eagerc.runtime.load)


# ---------------------------------------------------------------- atomic writes

def test_failed_write_leaves_old_file_intact(exported, tmp_path, monkeypatch):
    path = str(tmp_path / "m.eagerc")
    prog = exported["mlp"][1]
    prog.save(path)
    old = open(path, "rb").read()
    calls = []

    def boom(f, arr):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        f.write(arr.reshape(-1).view(np.uint8).data)
    monkeypatch.setattr(safetensors_io, "_write_array", boom)
    with pytest.raises(OSError, match="No space"):
        exported["cnn"][1].save(path)
    assert open(path, "rb").read() == old
    assert os.listdir(tmp_path) == ["m.eagerc"]  # the temporary file is gone
    eagerc.runtime.load(path)


def test_crash_mid_write_leaves_old_file_intact(exported, tmp_path):
    """A process killed while writing (simulated with os._exit) never leaves a torn file."""
    path = tmp_path / "m.eagerc"
    exported["mlp"][1].save(path)
    old = path.read_bytes()
    code = textwrap.dedent(f"""
        import os, numpy as np
        from eagerc.runtime import safetensors_io, program
        n = [0]
        def crash(f, arr):
            n[0] += 1
            f.write(arr.reshape(-1).view(np.uint8).data[: max(1, arr.nbytes // 2)])
            if n[0] == 2:
                f.flush()
                os._exit(3)
        safetensors_io._write_array = crash
        program.save({str(path)!r}, {{"w": np.ones((100, 100), np.float32), "v": np.zeros(10)}},
                     {{"format": "eagerc.program"}})
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert path.read_bytes() == old
    eagerc.runtime.load(str(path))


# ---------------------------------------------------------------- corrupted files

def _parts(path):
    """(header, body) of the file at `path` -- as first saved, when a pristine copy exists."""
    path = str(path)
    data = open(path + ".orig" if os.path.exists(path + ".orig") else path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def _write(path, header, body, pad=True):
    """Write an edited header and body, re-sealed with a fresh checksum: the checks behind the
    checksum are what these tests are about (a hostile file can always recompute it)."""
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(safetensors_io.seal(struct.pack("<Q", len(raw)) + raw + body, "checksum"))
    return path


def _edit_graph(path, fn):
    header, body = _parts(path)
    g = json.loads(header["__metadata__"]["graph"])
    fn(g)
    header["__metadata__"]["graph"] = json.dumps(g)
    return _write(path, header, body)


def _node(g, op):
    return next(n for n in g["nodes"] if n["op"] == op)


def _expect(path, *fragments):
    with pytest.raises(ProgramLoadError) as e:
        eagerc.runtime.load(path)
    msg = str(e.value)
    assert str(path) in msg
    for frag in fragments:
        assert frag in msg, msg
    return msg


def test_truncated_file(mlp_file):
    data = open(mlp_file, "rb").read()
    open(mlp_file, "wb").write(data[:-10])
    _expect(mlp_file, "truncated")
    open(mlp_file, "wb").write(data[:5])
    _expect(mlp_file, "truncated")
    open(mlp_file, "wb").write(data[:40])
    _expect(mlp_file, "truncated")


def test_oversized_file_with_trailing_garbage(mlp_file):
    with open(mlp_file, "ab") as f:
        f.write(b"\0" * 16)
    _expect(mlp_file, "trailing data")


def test_header_length_insane(mlp_file):
    data = open(mlp_file, "rb").read()
    open(mlp_file, "wb").write(struct.pack("<Q", 2 ** 62) + data[8:])
    _expect(mlp_file, "exceeds the limit")
    open(mlp_file, "wb").write(struct.pack("<Q", len(data)) + data[8:])
    _expect(mlp_file, "truncated")


def test_header_not_json(mlp_file):
    data = open(mlp_file, "rb").read()
    b = bytearray(data)
    b[9:13] = b"@@@@"
    open(mlp_file, "wb").write(bytes(b))
    _expect(mlp_file, "JSON")


def test_duplicate_keys_in_header(mlp_file):
    header, body = _parts(mlp_file)
    raw = json.dumps(header)
    raw = raw[:-1] + ', "__metadata__": {"format": "x"}}'
    raw_b = raw.encode()
    open(mlp_file, "wb").write(struct.pack("<Q", len(raw_b)) + raw_b + body)
    _expect(mlp_file, "repeats the key '__metadata__'")


@pytest.mark.parametrize("edit,fragment", [
    (lambda e: e.update(dtype="F8_E4M3"), "unsupported dtype"),
    (lambda e: e.update(dtype="F64"), "needs"),
    (lambda e: e.update(shape=e["shape"] + [2]), "needs"),
    (lambda e: e.update(shape=[-1]), "invalid size"),
    (lambda e: e.update(data_offsets=[e["data_offsets"][0], e["data_offsets"][1] + 4]), "span"),
    (lambda e: e.update(data_offsets=[0, 10 ** 12]), "past the end"),
    (lambda e: e.pop("shape"), "lacks ['shape']"),
    (lambda e: e.update(extra=1), "unknown keys"),
    (lambda e: e.update(data_offsets="0-12"), "pair of integers"),
])
def test_bad_tensor_entries(mlp_file, edit, fragment):
    header, body = _parts(mlp_file)
    edit(header["0.weight"])
    _expect(_write(mlp_file, header, body), fragment)


def test_overlapping_tensors(mlp_file):
    header, body = _parts(mlp_file)
    a, b = header["0.bias"], header["2.bias"]
    b["data_offsets"] = list(a["data_offsets"])
    b["shape"] = a["shape"]
    _expect(_write(mlp_file, header, body), "overlaps")


def test_not_a_program(mlp_file):
    header, body = _parts(mlp_file)
    header["__metadata__"]["format"] = "pt"
    _expect(_write(mlp_file, header, body), "not an eagerc program")
    del header["__metadata__"]
    _expect(_write(mlp_file, header, body), "not an eagerc program")


def test_newer_format_version_says_what_is_needed(mlp_file):
    header, body = _parts(mlp_file)
    header["__metadata__"]["format_version"] = "3"
    header["__metadata__"]["eagerc_version"] = "9.0.0"
    header["__metadata__"]["new_thing"] = "{}"   # a newer file may hold keys this eagerc does not know
    msg = _expect(_write(mlp_file, header, body),
                  "this file needs format version 3; this eagerc reads version 2 -- upgrade eagerc")
    assert "written by eagerc 9.0.0" in msg


@pytest.mark.parametrize("value,fragment", [("one", "not a version number"), ("0", "does not exist"),
                                            ("99999999999", "not a version number")])
def test_bad_format_versions(mlp_file, value, fragment):
    header, body = _parts(mlp_file)
    header["__metadata__"]["format_version"] = value
    _expect(_write(mlp_file, header, body), fragment)


def test_missing_and_extra_metadata(mlp_file):
    header, body = _parts(mlp_file)
    header["__metadata__"].pop("inputs")
    _expect(_write(mlp_file, header, body), "lacks ['inputs']")
    header, body = _parts(mlp_file)
    header["__metadata__"]["inputs"] = "[]"
    header["__metadata__"]["surprise"] = "1"
    _expect(_write(mlp_file, header, body), "unknown keys ['surprise']")


def test_unknown_op(mlp_file):
    _expect(_edit_graph(mlp_file, lambda g: _node(g, "relu").update(op="fancy_relu")), "unknown op 'fancy_relu'")


def test_bad_attributes(mlp_file):
    header, body = _parts(mlp_file)
    _expect(_edit_graph(mlp_file, lambda g: _node(g, "relu")["attrs"].update(inplace=True)),
            "unknown attributes ['inplace']")


def test_attribute_value_checked_by_the_ops_rule(tmp_path):
    prog = export(lambda x: x.reshape(3, 4).sum(dim=1), (eagerc.randn(12),))
    path = prog.save(tmp_path / "r.eagerc")
    _expect(_edit_graph(path, lambda g: _node(g, "reshape")["attrs"].update(shape=[5, 4])), "reshape")
    prog.save(path)
    _expect(_edit_graph(path, lambda g: _node(g, "sum")["attrs"].update(dim=7)), "out of range")


def test_inconsistent_shapes_and_dtypes(mlp_file):
    _expect(_edit_graph(mlp_file, lambda g: _node(g, "relu")["out"].update(shape=[4, 17])), "declared f32[4,17]")
    header, body = _parts(mlp_file)
    _expect(_edit_graph(mlp_file, lambda g: _node(g, "relu")["out"].update(dtype="float64")), "declared f64")
    _expect(_edit_graph(mlp_file, lambda g: _node(g, "relu")["out"].update(dtype="complex128")),
            "unknown dtype")


def test_reads_undefined_value(mlp_file):
    _expect(_edit_graph(mlp_file, lambda g: _node(g, "relu")["inputs"][0].update(value="nowhere")),
            "undefined value 'nowhere'")


def test_weights_missing_or_wrong(mlp_file):
    header, body = _parts(mlp_file)
    del header["4.bias"]   # its bytes now belong to no tensor
    _expect(_write(mlp_file, header, body), "belong to no tensor")
    header, body = _parts(mlp_file)
    b = header.pop("4.bias")
    header["4.bias_renamed"] = b
    _expect(_write(mlp_file, header, body), "weight '4.bias' (float32[3]) is missing")
    header, body = _parts(mlp_file)
    header["4.bias"]["dtype"] = "I32"
    _expect(_write(mlp_file, header, body), "weight '4.bias' is int32[3] in the file but the graph reads float32[3]")


def test_extra_tensor(mlp_file, tmp_path):
    loaded = eagerc.runtime.load(mlp_file)
    tensors = dict(loaded.weights, junk=np.zeros(3, np.float32))
    header, _ = _parts(mlp_file)
    path = str(tmp_path / "x.eagerc")
    safetensors_io.save_file(path, tensors, header["__metadata__"], checksum_key="checksum")
    _expect(path, "does not read: ['junk']")


def test_input_specs_checked_against_graph(mlp_file):
    header, body = _parts(mlp_file)
    specs = json.loads(header["__metadata__"]["inputs"])
    specs[0]["dtype"] = "float64"
    header["__metadata__"]["inputs"] = json.dumps(specs)
    _expect(_write(mlp_file, header, body), "inputs: spec 0 (arg0): dtype 'float64'")
    specs[0]["dtype"], specs[0]["shape"] = "float32", ["batch", 7]
    header["__metadata__"]["inputs"] = json.dumps(specs)
    _expect(_write(mlp_file, header, body), "does not match the graph's 6")
    specs[0]["shape"] = ["seq", 6]
    header["__metadata__"]["inputs"] = json.dumps(specs)
    _expect(_write(mlp_file, header, body), "'seq' is not a declared dynamic dimension")
    header["__metadata__"]["inputs"] = "[]"
    _expect(_write(mlp_file, header, body), "expected a list of 1 input specs")


def test_dynamic_table_checked_at_load(mlp_file):
    header, body = _parts(mlp_file)
    dyn = json.loads(header["__metadata__"]["dynamic"])
    dyn["patches"] = [p for p in dyn["patches"] if p[0][:2] != ["nodes", 2]]   # one size no longer follows
    header["__metadata__"]["dynamic"] = json.dumps(dyn)
    _expect(_write(mlp_file, header, body), "size table gives an invalid graph at batch=7")
    header, body = _parts(mlp_file)
    dyn = json.loads(header["__metadata__"]["dynamic"])
    dyn["patches"][0][1] = 5
    header["__metadata__"]["dynamic"] = json.dumps(dyn)
    _expect(_write(mlp_file, header, body), "at the example sizes")
    dyn["patches"][0] = [["format_version"], 0, 1, ["batch"]]
    header["__metadata__"]["dynamic"] = json.dumps(dyn)
    _expect(_write(mlp_file, header, body), "is not a shape, attribute or constant")


def test_example_tensors_checked(exported, tmp_path):
    prog = exported["mlp"][1]
    tensors, metadata = prog.parts()
    tensors["__example_output__.0"] = tensors["__example_output__.0"] + 1
    path = str(tmp_path / "e.eagerc")
    safetensors_io.save_file(path, tensors, metadata, checksum_key="checksum")
    loaded = eagerc.runtime.load(path)   # loads: the examples are well-formed
    with pytest.raises(ProgramRunError, match="self-check failed: output 0"):
        loaded.self_check()
    with pytest.raises(ProgramRunError, match="self-check failed"):
        eagerc.runtime.load(path, self_check=True)
    tensors["__example__.0"] = tensors["__example__.0"][:1]
    safetensors_io.save_file(path, tensors, metadata, checksum_key="checksum")
    _expect(path, "example input 0 is not float32[4, 6]")


# ---------------------------------------------------------------- hostile files

def test_hostile_op_names(mlp_file):
    for name in ("__import__", "eval", "os.system", "__class__", "", "relu\x00"):
        _expect(_edit_graph(mlp_file, lambda g: _node(g, "linear").update(op=name)), "unknown op")


def test_huge_nested_attribute(mlp_file):
    deep = []
    for _ in range(30_000):
        deep = [deep]
    header, body = _parts(mlp_file)
    g = json.loads(header["__metadata__"]["graph"])
    _node(g, "relu")["attrs"]["x"] = 0
    text = json.dumps(g).replace('"x": 0', '"x": ' + "[" * 30_000 + "]" * 30_000)
    header["__metadata__"]["graph"] = text
    _expect(_write(mlp_file, header, body), "graph")


def test_deeply_nested_attribute(tmp_path):
    """Shallow enough for Python's json module, too deep for a graph."""
    path = export(lambda x: x.reshape(2, 6), (eagerc.randn(12),)).save(tmp_path / "r.eagerc")
    nested = 0
    for _ in range(60):
        nested = [nested]
    _expect(_edit_graph(path, lambda g: _node(g, "reshape")["attrs"].update(shape=nested)),
            "nested more than 32 levels deep")


def test_huge_attribute_list(tmp_path):
    prog = export(lambda x: x.reshape(2, 6), (eagerc.randn(12),))
    path = prog.save(tmp_path / "r.eagerc")
    _expect(_edit_graph(path, lambda g: _node(g, "reshape")["attrs"].update(shape=list(range(10 ** 6)))),
            "more than 10000 items")


def test_json_bombs(mlp_file):
    header, body = _parts(mlp_file)
    raw = b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    open(mlp_file, "wb").write(struct.pack("<Q", len(raw)) + raw)
    _expect(mlp_file, "header JSON is nested too deeply")
    header["__metadata__"]["dynamic"] = "[" * 100_000 + "]" * 100_000
    _expect(_write(mlp_file, header, body), "dynamic")
    header, body = _parts(mlp_file)
    header["__metadata__"]["graph"] = '{"a": ' * 100_000 + "1" + "}" * 100_000
    _expect(_write(mlp_file, header, body), "graph")


def test_value_too_large_for_the_limit(tmp_path):
    prog = export(lambda x: x + eagerc.zeros(4, 4), (eagerc.randn(4, 4),))
    path = prog.save(tmp_path / "z.eagerc")
    big = 2 ** 20

    def blow_up(g):
        for n in g["nodes"]:
            if n["op"] == "full":
                n["attrs"]["shape"] = [big, big]
                n["out"]["shape"] = [big, big]
    _expect(_edit_graph(path, blow_up), "larger than the limit")


def test_extra_inputs_never_reach_a_kernel(mlp_file):
    """np.add(a, b, c) writes into c: a node with one input too many must not load."""
    def third_input(g):
        n = _node(g, "linear")
        n["op"] = "add"
        n["inputs"] = [n["inputs"][0], n["inputs"][0], {"value": "arg0"}]
    _expect(_edit_graph(mlp_file, third_input), "has 3 inputs; the op takes 2")


def test_pickle_and_other_formats_are_rejected(tmp_path):
    import pickle
    path = tmp_path / "p.eagerc"
    path.write_bytes(pickle.dumps({"a": 1}))
    _expect(str(path))
    path.write_bytes(b"")
    _expect(str(path), "truncated")
    _expect(str(tmp_path), "")  # a directory


def test_not_a_file_and_missing_file(tmp_path):
    with pytest.raises(ProgramLoadError, match="cannot open"):
        eagerc.runtime.load(tmp_path / "missing.eagerc")


# ---------------------------------------------------------------- call-time checks

def test_call_time_input_checks(mlp_file, exported):
    loaded = eagerc.runtime.load(mlp_file)
    x = np.zeros((3, 6), np.float32)
    with pytest.raises(ProgramInputError, match="has dtype float64, the program expects float32"):
        loaded(x.astype(np.float64))
    with pytest.raises(ProgramInputError, match=r"has shape \[3, 5\], the program expects \['batch', 6\]"):
        loaded(np.zeros((3, 5), np.float32))
    with pytest.raises(ProgramInputError, match="takes 1 inputs"):
        loaded(x, x)
    multi_prog = exported["multi"][1]
    a, b, idx, scale = _multi_inputs(4)
    with pytest.raises(ProgramInputError, match="'n'"):
        multi_prog(a, b[:3], idx, scale)


def test_inputs_are_not_modified(mlp_file):
    loaded = eagerc.runtime.load(mlp_file)
    x = np.ones((2, 6), np.float32)
    loaded(x)
    assert x.flags.writeable and (x == 1).all()


def test_outputs_are_writable_arrays(tmp_path):
    eagerc.manual_seed(0)
    lin = nn.Linear(2, 2)
    prog = export(lambda x: (x + 1, lin.weight), (eagerc.randn(2),))
    loaded = eagerc.runtime.load(prog.save(tmp_path / "w.eagerc"))
    y, w = loaded(np.zeros(2, np.float32))
    w[...] = 0   # a copy: the program's own weights stay read-only
    assert not (loaded(np.zeros(2, np.float32))[1] == 0).all()


# ---------------------------------------------------------------- export errors

def test_graph_break_is_an_error_naming_the_line():
    def f(x):
        if x.sum() > 0:   # the line the error names
            return x
        return -x
    line = f.__code__.co_firstlineno + 1
    with pytest.raises(ExportError, match=rf"test_export.py:{line}"):
        export(f, (eagerc.randn(3),))
    with pytest.raises(ExportError, match="item"):
        export(lambda x: x * x.sum().item(), (eagerc.randn(3),))


def test_dynamic_shapes_that_cannot_be_expressed():
    with pytest.raises(ExportError, match="structure depends on the dynamic sizes|cannot express"):
        export(lambda x: x[: x.shape[0] // 2], (eagerc.randn(6, 2),), dynamic_shapes=({0: "n"},))
    with pytest.raises(ExportError, match="example size 1"):
        export(lambda x: x * 2, (eagerc.randn(1, 2),), dynamic_shapes=({0: "n"},))
    with pytest.raises(ExportError, match="not an argument"):
        export(lambda x: x * 2, (eagerc.randn(3, 2),), dynamic_shapes={"y": {0: "n"}})


def test_dynamic_sequence_model_products_of_sizes():
    eagerc.manual_seed(0)
    emb, lin = nn.Embedding(11, 8), nn.Linear(8, 11)

    def lm(idx):
        b, t = idx.shape
        x = emb(idx)
        att = (x @ x.transpose(-2, -1)) * 8 ** -0.5
        att = att.masked_fill(eagerc.tril(eagerc.ones(t, t)) == 0, float("-inf")).softmax(-1)
        return lin((att @ x).reshape(b * t, 8)).reshape(b, t, 11)
    prog = export(lm, (eagerc.randint(0, 11, (2, 5)),), dynamic_shapes=({0: "batch", 1: "seq"},))
    loaded = rp.loads(_bytes(prog))
    rng = np.random.default_rng(0)
    for b, t in ((2, 5), (1, 1), (3, 9), (4, 2)):
        idx = rng.integers(0, 11, (b, t))
        _assert_close(loaded(idx), _eager(lm, idx), rtol=1e-5)


def _bytes(prog):
    tensors, metadata = prog.parts()
    buf = io.BytesIO()
    safetensors_io.write(buf, tensors, metadata, checksum_key="checksum")
    return buf.getvalue()


def test_dynamic_range_is_enforced():
    prog = export(lambda x: x * 2, (eagerc.randn(4, 2),), dynamic_shapes=({0: ("n", 2, 16)},))
    assert prog.input_specs[0]["shape"] == ["n", 2]
    prog(np.zeros((16, 2), np.float32))
    with pytest.raises(ProgramInputError, match=r"outside the exported range \[2, 16\]"):
        prog(np.zeros((17, 2), np.float32))


# ---------------------------------------------------------------- the safetensors layout

def test_files_are_safetensors_files(mlp_file, exported, tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    from safetensors import safe_open
    tensors = st.load_file(mlp_file)
    loaded = eagerc.runtime.load(mlp_file)
    for name, w in loaded.weights.items():
        np.testing.assert_array_equal(tensors[name], w)
    with safe_open(mlp_file, "numpy") as f:
        meta = f.metadata()
    assert meta["format"] == "eagerc.program" and meta["format_version"] == "2"
    assert meta["checksum"] == loaded.checksum and len(meta["checksum"]) == len("sha256:") + 64
    # and a file written by the safetensors package itself loads, as format 1 (no checksum) ...
    t, m = exported["cnn"][1].parts()
    path = str(tmp_path / "by_safetensors.eagerc")
    st.save_file(t, path, metadata=dict(m, format_version="1"))
    old = eagerc.runtime.load(path)
    assert old.format_version == 1 and old.checksum is None
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(old(x), exported["cnn"][1](x))
    # ... but not as format 2, which must carry the checksum where eagerc writes it
    st.save_file(t, path, metadata=m)
    _expect(path, "format version 2 carries a checksum", "has none there")
    st.save_file(t, path, metadata=dict(m, checksum=loaded.checksum))   # a stale one: another header
    _expect(path, "checksum")   # (a mismatch, or not where eagerc writes it: serde orders keys its way)
    header, body = _parts(mlp_file)
    header["__metadata__"] = {"first": "1", **header["__metadata__"]}
    raw = json.dumps(header, separators=(",", ":")).encode()
    open(path, "wb").write(struct.pack("<Q", len(raw)) + raw + body)
    _expect(path, "its checksum ('checksum') is not the first metadata entry")


@pytest.mark.parametrize("sealed", [False, True])
def test_safetensors_io_round_trip_all_dtypes(sealed):
    arrays = {f"t{i}": np.arange(6).reshape(2, 3).astype(dt) for i, dt in
              enumerate(["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
                         "float16", "float32", "float64"])}
    arrays["empty"] = np.zeros((0, 4), np.float32)
    arrays["scalar"] = np.array(3.5)
    arrays["strided"] = np.arange(12.0).reshape(3, 4).T
    arrays["big_endian"] = np.arange(5, dtype=">i4")
    buf = io.BytesIO()
    safetensors_io.write(buf, arrays, {"k": "v"}, checksum_key="ck" if sealed else None)
    data = buf.getvalue()
    f = io.BytesIO(data)
    header = safetensors_io.read_header(f, len(data), checksum_key="ck")
    assert header.data_start % 8 == 0
    if sealed:
        assert list(header.metadata) == ["ck", "k"] and header.metadata["k"] == "v"
        assert header.checksum == "sha256:" + hashlib.sha256(
            data.replace(header.checksum[7:].encode(), b"0" * 64, 1)).hexdigest()
    else:
        assert header.metadata == {"k": "v"} and header.checksum is None
    back = safetensors_io.read_tensors(f, header)
    assert list(back) == list(arrays)
    for k, a in arrays.items():
        assert back[k].dtype == a.dtype.newbyteorder("=") and back[k].shape == a.shape
        np.testing.assert_array_equal(back[k], a)
    if sealed:   # the other tool reads it too, checksum or not
        stn = pytest.importorskip("safetensors.numpy")
        theirs = stn.load(data)
        np.testing.assert_array_equal(theirs["t3"], arrays["t3"])


@pytest.mark.cuda
def test_cupy_inputs_run_on_the_gpu(exported, tmp_path):
    import cupy
    model, prog = exported["mlp"]
    loaded = eagerc.runtime.load(prog.save(tmp_path / "mlp.eagerc"))
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    out = loaded(cupy.asarray(x))
    assert isinstance(out, cupy.ndarray)
    np.testing.assert_allclose(out.get(), _eager(model, x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ProgramInputError, match="mix numpy and cupy"):
        exported["multi"][1](*[cupy.asarray(a) for a in _multi_inputs()[:3]], _multi_inputs()[3])


# ---------------------------------------------------------------- never silently wrong

def test_a_flipped_weight_bit_is_refused(mlp_file):
    """Before: most single-bit flips in a program's weights changed its outputs, no error."""
    data = bytearray(open(mlp_file, "rb").read())
    data[-7] ^= 0x08
    open(mlp_file, "wb").write(bytes(data))
    _expect(mlp_file, "checksum mismatch")


def test_non_regular_files_are_refused_before_open_can_block(tmp_path):
    """Before: eagerc.runtime.load of a FIFO blocked forever in open()."""
    _expect(str(tmp_path), "is a directory, not a regular file")
    if os.path.exists("/dev/zero"):
        with pytest.raises(ProgramLoadError, match="/dev/zero: is a character device, not a regular file"):
            eagerc.runtime.load("/dev/zero")
    if not hasattr(os, "mkfifo"):
        return
    os.mkfifo(tmp_path / "pipe")
    code = f"import eagerc.runtime; eagerc.runtime.load({str(tmp_path / 'pipe')!r})"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 1 and "ProgramLoadError" in r.stderr and "is a FIFO (named pipe)" in r.stderr, r.stderr


@pytest.mark.parametrize("depth", [600, 100_000])
def test_deeply_nested_graph_json_is_a_load_error(mlp_file, depth):
    header, body = _parts(mlp_file)
    g = json.loads(header["__metadata__"]["graph"])
    _node(g, "relu")["attrs"]["x"] = 0
    text = json.dumps(g).replace('"x": 0', '"x": ' + "[" * depth + "]" * depth)
    header["__metadata__"]["graph"] = text
    _expect(_write(mlp_file, header, body), "graph", "nested")
    header["__metadata__"]["graph"] = "[" * depth + "]" * depth
    _expect(_write(mlp_file, header, body), "graph")


def test_duplicate_keys_in_the_graph_are_refused(mlp_file):
    header, body = _parts(mlp_file)
    text = header["__metadata__"]["graph"]
    i = text.index('"attrs": {}')
    header["__metadata__"]["graph"] = text[:i] + '"attrs": {}, "attrs": {"inplace": true}' + text[i + 11:]
    _expect(_write(mlp_file, header, body), "metadata 'graph' repeats the key 'attrs'")
    header, body = _parts(mlp_file)
    header["__metadata__"]["inputs"] = '[{"name": "arg0", "name": "arg1"}]'
    _expect(_write(mlp_file, header, body), "metadata 'inputs' repeats the key 'name'")


@pytest.mark.parametrize("loc,module", [
    ("model.py:12", "fc"),          # the canonical text: the key count alone finds the repeat
    ("a:b:c", "x:y"),               # a ':' where the count does not look (module): the strict parse does
    ("x\\u003ay", "fc"),            # an escaped ':' the count cannot see: the strict parse does
])
def test_a_repeated_key_that_passes_the_schema_is_refused(mlp_file, loc, module):
    """The graph is parsed without the per-object duplicate hook; the loader counts the keys its
    walk reads against the ':' in the text (safetensors_io.unique_keys). A repeat whose last
    value is valid (so every other check passes) is refused all the same."""
    header, body = _parts(mlp_file)
    text = header["__metadata__"]["graph"]
    i = text.index('"loc": ')
    j = text.index(", ", i)
    edited = text[:i] + f'"loc": "{loc}", "module": "{module}", "loc": "main.py:3"' + text[j:]
    header["__metadata__"]["graph"] = edited
    _expect(_write(mlp_file, header, body), "metadata 'graph' repeats the key 'loc'")
    # without the repeat the same text loads (the first loc and module replaced, not repeated)
    k = edited.index('"module": ', edited.index('"loc": "main.py:3"'))
    header["__metadata__"]["graph"] = edited[:edited.index(', "loc": "main.py:3"')] + edited[edited.index(", ", k):]
    prog = eagerc.runtime.load(_write(mlp_file, header, body))
    assert prog.graph.nodes[0].loc == loc.replace("\\u003a", ":") and prog.graph.nodes[0].module == module


def test_format_1_programs_without_checksum_still_load(mlp_file, exported, tmp_path):
    loaded = eagerc.runtime.load(mlp_file)
    tensors, metadata = exported["mlp"][1].parts()
    path = str(tmp_path / "old.eagerc")
    safetensors_io.save_file(path, tensors, dict(metadata, format_version="1"))
    old = eagerc.runtime.load(path)
    assert old.format_version == 1 and old.checksum is None and loaded.checksum.startswith("sha256:")
    x = np.random.default_rng(3).standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_array_equal(old(x), loaded(x))
    safetensors_io.save_file(path, tensors, dict(metadata, format_version="1", checksum=loaded.checksum),
                             checksum_key=None)
    _expect(path, "checksum")   # a stale checksum (not where eagerc writes it) is refused, not ignored


def test_files_with_the_old_empty_meta_key_still_load(mlp_file):
    """Files written before the memory plan became a typed Graph field carry "meta": {}."""
    header, _ = _parts(mlp_file)
    assert "meta" not in json.loads(header["__metadata__"]["graph"])     # new files write none
    x = np.random.default_rng(4).standard_normal((3, 6)).astype(np.float32)
    want = eagerc.runtime.load(mlp_file)(x)
    old = _edit_graph(mlp_file, lambda g: g.update(meta={}))
    np.testing.assert_array_equal(eagerc.runtime.load(old)(x), want)
    _expect(_edit_graph(mlp_file, lambda g: g.update(meta={"memory_plan": {}})), "graph: meta", "not empty")
    _expect(_edit_graph(mlp_file, lambda g: g.update(meta=[])), "graph: meta", "not empty")


def test_the_checkpoint_loader_is_named_for_a_checkpoint(tmp_path):
    eagerc.save({"w": eagerc.ones(2)}, tmp_path / "ck.safetensors")
    with pytest.raises(rp.NotAProgram, match="it is an eagerc checkpoint: load it with eagerc.load"):
        eagerc.runtime.load(tmp_path / "ck.safetensors")
    np.save(tmp_path / "x.npy", np.ones(2))
    with pytest.raises(rp.NotAProgram, match="x.npy: not an eagerc program: it is a numpy .npy file"):
        eagerc.runtime.load(tmp_path / "x.npy")


def test_a_program_without_nodes_loads(tmp_path):
    """A graph whose output is its input: the loader's node walk never runs, the outputs are
    still checked against the inputs."""
    path = str(tmp_path / "identity.eagerc")
    eagerc.export(lambda x: x, (eagerc.ones(2, 3),)).save(path)
    prog = eagerc.runtime.load(path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert prog.graph.nodes == [] and np.array_equal(prog(x), x)


def test_probe_checks_each_distinct_node(tmp_path):
    """The probe checks a node that repeats an earlier one's op, input types, attributes and
    output type once; a repeat whose output size the table gets wrong differs in its output
    type, and is caught. Calls at other sizes still build and run every node."""
    prog = export(lambda x: x.relu().relu().relu() * 2, (eagerc.randn(4, 6),), dynamic_shapes=({0: "batch"},))
    path = str(prog.save(tmp_path / "r.eagerc"))
    x = np.random.default_rng(0).standard_normal((9, 6)).astype(np.float32)
    np.testing.assert_array_equal(eagerc.runtime.load(path)(x), np.maximum(x, 0) * 2)
    header, body = _parts(path)
    g = json.loads(header["__metadata__"]["graph"])
    last = max(i for i, n in enumerate(g["nodes"]) if n["op"] == "relu")
    dyn = json.loads(header["__metadata__"]["dynamic"])
    patch = next(p for p in dyn["patches"] if p[0][:3] == ["nodes", last, "out"])
    patch[1:3] = [-4, 2]   # 2*batch - 4: right at the example size 4, wrong at the probe's 7
    header["__metadata__"]["dynamic"] = json.dumps(dyn)
    _expect(_write(path, header, body), f"size table gives an invalid graph at batch=7: graph: node {last} (relu ",
            "declared f32[10,6] but relu's rule gives float32[7, 6]")
