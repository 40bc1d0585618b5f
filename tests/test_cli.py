"""The `eagerc` command, run as users run it (subprocesses): viz, inspect, run, bench, their
help, exit codes (0 ok, 1 failure, 2 bad usage) and one-line errors."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import eagerc
from eagerc import viz
from eagerc.compiler.export import export
from eagerc.runtime import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_dot = pytest.mark.skipif(viz.dot_program() is None,
                               reason="graphviz's `dot` program is not installed (apt-get install graphviz)")

MODELS = textwrap.dedent('''
    import eagerc
    from eagerc import nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                          nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
            self.head = nn.Linear(16 * 4 * 4, 10)

        def forward(self, x):
            return self.head(self.features(x).flatten(1))

    class Block(nn.Module):
        def __init__(self, d=16):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.fc = nn.Linear(d, 2 * d)
            self.out = nn.Linear(2 * d, d)

        def forward(self, x):
            q, k, v = self.qkv(self.ln(x)).split(x.shape[-1], dim=-1)
            att = (q @ k.transpose(-1, -2) * 0.25).softmax(-1)
            x = x + self.proj(att @ v)
            return x + self.out(self.fc(x).relu())

    class Stack(nn.Module):
        def __init__(self, n=125, d=16):
            super().__init__()
            self.inp = nn.Linear(d, d)
            self.layers = nn.ModuleList([Block(d) for _ in range(n)])

        def forward(self, x):
            x = self.inp(x)
            for layer in self.layers:
                x = layer(x)
            return x

    def make_cnn():
        eagerc.manual_seed(0)
        return CNN()

    cnn = make_cnn()

    def two_outputs(x, y):
        return {"prod": (x * y).sum(1), "exp": x.exp()}

    def broken(x):
        raise ValueError("this model is broken\\nsecond line")
''')


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A directory with models.py, an exported CNN (dynamic batch), inputs and a 2,000-op program."""
    d = tmp_path_factory.mktemp("cli")
    (d / "models.py").write_text(MODELS)
    sys.path.insert(0, str(d))
    try:
        import models
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("models", None)
    eagerc.manual_seed(0)
    prog = export(models.make_cnn(), (eagerc.randn(2, 3, 8, 8),), dynamic_shapes=({0: "batch"},))
    prog.save(d / "cnn.eagerc")
    big = export(models.Stack(125), (eagerc.randn(2, 4, 16),))
    big.save(d / "big.eagerc")
    rng = np.random.default_rng(0)
    np.save(d / "x.npy", rng.standard_normal((3, 3, 8, 8)).astype(np.float32))
    np.save(d / "x64.npy", rng.standard_normal((3, 3, 8, 8)))
    np.save(d / "xbad.npy", rng.standard_normal((3, 4, 8, 8)).astype(np.float32))
    (d / "junk.eagerc").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    return d


def cli(work, *args, env=None, timeout=120):
    """Run `python -m eagerc ARGS` in `work`; returns (exit code, stdout, stderr)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    r = subprocess.run([sys.executable, "-m", "eagerc", *map(str, args)], cwd=work, env=e,
                       capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def assert_one_line_error(rc, err, code, *words):
    assert rc == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("eagerc"), err
    for w in words:
        assert w in err, (w, err)


# ---------------------------------------------------------------- the command itself

@pytest.mark.parametrize("cmd", [[], ["viz"], ["inspect"], ["run"], ["bench"]])
def test_help_on_every_subcommand(work, cmd):
    rc, out, err = cli(work, *cmd, "--help")
    assert rc == 0 and out.startswith("usage: eagerc") and not err
    if cmd == ["viz"]:
        for opt in ("--input-shape", "--stage", "--depth", "--profile", "--repeats"):
            assert opt in out


def test_bad_usage_exits_2_in_one_line(work):
    assert_one_line_error(*cli(work)[::2], 2, "COMMAND")
    assert_one_line_error(*cli(work, "frobnicate")[::2], 2, "invalid choice")
    assert_one_line_error(*cli(work, "inspect")[::2], 2, "file")


def test_console_script_when_installed(work):
    exe = shutil.which("eagerc")
    if exe is None:
        pytest.skip("the eagerc console script is not installed (pip install -e .)")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("eagerc ")


# ---------------------------------------------------------------- inspect

def test_inspect_text(work):
    rc, out, err = cli(work, "inspect", "cnn.eagerc")
    assert rc == 0, err
    assert "eagerc program, format 2, written by eagerc " + eagerc.__version__ in out
    assert re.search(r"checksum: sha256:[0-9a-f]{16}\.\.\. verified", out)
    assert re.search(r"x\s+f32\[batch,3,8,8\]", out)
    assert "dynamic size batch: 1..inf (exported at 2)" in out
    assert re.search(r"output\s+f32\[batch,10\]", out)
    assert "FLOPs per call" in out and "conv2d" in out
    assert "program:" in out and "= conv2d(arg0, features.0.weight" in out


def test_inspect_json(work):
    rc, out, err = cli(work, "inspect", "cnn.eagerc", "--json")
    assert rc == 0, err
    info = json.loads(out)
    prog = load(work / "cnn.eagerc")
    assert info["format_version"] == 2 and info["eagerc_version"] == eagerc.__version__
    assert info["checksum"] == prog.checksum and re.fullmatch(r"sha256:[0-9a-f]{64}", info["checksum"])
    assert info["inputs"][0]["shape"] == ["batch", 3, 8, 8]
    assert info["outputs"] == [{"path": "output", "name": prog.graph.outputs[0].name, "shape": ["batch", 10],
                                "dtype": "float32"}]
    w = prog.weights
    assert info["parameters"]["tensors"] == len(w)
    assert info["parameters"]["values"] == sum(a.size for a in w.values())
    assert info["parameters"]["bytes"] == sum(a.nbytes for a in w.values())
    by_op = info["flops"]["by_op"]
    # conv: 2 x MACs = 2 x out numel x (Cin x 3 x 3); linear: 2 x out numel x in features
    assert by_op["conv2d"]["flops"] == 2 * (2 * 8 * 8 * 8) * (3 * 9) + 2 * (2 * 16 * 4 * 4) * (8 * 9)
    assert by_op["linear"]["flops"] == 2 * (2 * 10) * 256
    assert by_op["relu"]["flops"] == 2 * 8 * 8 * 8 + 2 * 16 * 4 * 4 and by_op["reshape"]["flops"] == 0
    assert info["flops"]["total"] == sum(r["flops"] for r in by_op.values())
    assert info["flops"]["at"] == {"batch": 2} and "graph(" in info["program"]


def test_inspect_errors(work):
    assert_one_line_error(*cli(work, "inspect", "missing.eagerc")[::2], 1, "missing.eagerc: no such file")
    assert_one_line_error(*cli(work, "inspect", "junk.eagerc")[::2], 1, "not a valid eagerc program")
    # before: "header length 379676406402707 exceeds the limit of 100000000 bytes"
    assert_one_line_error(*cli(work, "inspect", "x.npy")[::2], 1,
                          "x.npy: not an eagerc program: it is a numpy .npy file, not a safetensors file")
    data = bytearray((work / "cnn.eagerc").read_bytes())
    data[-5] ^= 0x10   # one bit of a weight
    (work / "flipped.eagerc").write_bytes(bytes(data))
    assert_one_line_error(*cli(work, "inspect", "flipped.eagerc")[::2], 1, "flipped.eagerc: checksum mismatch")
    rc, _, err = cli(work, "inspect", "junk.eagerc", "--debug")
    assert rc == 1 and "Traceback" in err


# ---------------------------------------------------------------- run and bench

def test_run_writes_npz_matching_the_runtime(work):
    rc, out, err = cli(work, "run", "cnn.eagerc", "--input", "x.npy", "--output", "out.npz")
    assert rc == 0, err
    assert out.strip() == "wrote out.npz: output f32[3,10]"
    want = load(work / "cnn.eagerc")(np.load(work / "x.npy"))
    with np.load(work / "out.npz") as got:
        assert list(got) == ["output"]
        np.testing.assert_array_equal(got["output"], want)
    rc, out, err = cli(work, "run", "cnn.eagerc", "-i", "x.npy", "-o", "out.npy")
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(work / "out.npy"), want)
    rc, out, err = cli(work, "run", "cnn.eagerc", "-i", "x.npy")
    assert rc == 0 and out.startswith("output: f32[3,10] [")


def test_run_several_outputs(work, tmp_path):
    prog = export(lambda x, y: {"prod": (x * y).sum(1), "exp": x.exp()},
                  (eagerc.randn(2, 3), eagerc.randn(2, 3)))
    prog.save(tmp_path / "two.eagerc")
    for i in (0, 1):
        np.save(tmp_path / f"a{i}.npy", np.full((2, 3), i + 1, np.float32))
    rc, out, err = cli(tmp_path, "run", "two.eagerc", "-i", "a0.npy", "-i", "a1.npy", "-o", "o.npz")
    assert rc == 0, err
    with np.load(tmp_path / "o.npz") as got:
        assert sorted(got) == ["output.exp", "output.prod"]
        np.testing.assert_allclose(got["output.prod"], [6, 6])
    assert_one_line_error(*cli(tmp_path, "run", "two.eagerc", "-i", "a0.npy", "-i", "a1.npy", "-o", "o.npy")[::2],
                          2, "2 outputs")


RUN_ERRORS = [   # (arguments, exit code, words the one-line error must contain)
    (["run", "cnn.eagerc"], 2, ["takes 1 input (x: f32[batch,3,8,8])", "got 0 --input"]),
    (["run", "cnn.eagerc", "-i", "x.npy", "-i", "x.npy"], 2, ["got 2"]),
    (["run", "cnn.eagerc", "-i", "nope.npy"], 1, ["nope.npy: no such file"]),
    (["run", "cnn.eagerc", "-i", "x64.npy"], 1, ["dtype float64", "float32"]),
    (["run", "cnn.eagerc", "-i", "xbad.npy"], 1, ["shape [3, 4, 8, 8]"]),
    (["run", "cnn.eagerc", "-i", "cnn.eagerc"], 1, ["not a readable .npy"]),
    (["run", "cnn.eagerc", "-i", "x.npy", "-o", "o.txt"], 2, [".npz"]),
    (["run", "nope.eagerc", "-i", "x.npy"], 1, ["no such file"]),
    (["run", "cnn.eagerc", "-i", "x.npy", "--backend", "tpu"], 2, ["invalid choice"]),
    (["bench", "cnn.eagerc", "--repeat", "0"], 2, ["--repeat"]),
    (["bench", "cnn.eagerc", "--repeat", "x"], 2, ["invalid int"]),
    (["bench", "junk.eagerc"], 1, ["not a valid eagerc program"]),
]


def _check_errors(work, cases):
    """Run the cases concurrently (each is a fresh interpreter) and check every error."""
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: cli(work, *c[0]), cases))
    for (args, code, words), (rc, _, err) in zip(cases, results):
        assert_one_line_error(rc, err, code, *words)


def test_run_and_bench_errors(work):
    cases = list(RUN_ERRORS)
    for backend in ("c", "cuda"):
        if not _has_backend(backend):
            cases.append((["run", "cnn.eagerc", "-i", "x.npy", "--backend", backend], 1,
                          [f"the {backend!r} backend does not exist yet"]))
    _check_errors(work, cases)


def _has_backend(name):
    from eagerc.compiler.backends import get_backend
    try:
        get_backend(name)
        return True
    except ValueError:
        return False


@pytest.mark.parametrize("backend", ["c", "cuda"], ids=["c_backend", "gpu_backend"])
def test_run_other_backends_when_they_exist(work, backend, tmp_path):
    if not _has_backend(backend):
        pytest.skip(f"eagerc has no {backend!r} backend yet (test_run_and_bench_errors checks the message)")
    if backend == "cuda" and not eagerc.cuda.is_available():
        rc, out, err = cli(work, "run", "cnn.eagerc", "-i", "x.npy", "--backend", "cuda")
        assert rc == 1 and "cupy" in err and "Traceback" not in err, err  # says what is missing
        return
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)   # the exported sizes
    np.save(tmp_path / "x2.npy", x)
    rc, out, err = cli(work, "run", "cnn.eagerc", "-i", tmp_path / "x2.npy", "-o", tmp_path / "o.npz",
                       "--backend", backend)
    assert rc == 0, err
    with np.load(tmp_path / "o.npz") as got:
        np.testing.assert_allclose(got["output"], load(work / "cnn.eagerc")(x), rtol=1e-4, atol=1e-5)
    # other dynamic sizes: the compiled graph is the exported one, so that is an error, not a wrong answer
    assert_one_line_error(*cli(work, "run", "cnn.eagerc", "-i", "x.npy", "--backend", backend)[::2], 1,
                          "exported sizes only (batch = 2, got 3)")


def test_bench(work):
    rc, out, err = cli(work, "bench", "cnn.eagerc", "--warmup", "1", "--repeat", "4", "--json")
    assert rc == 0, err
    r = json.loads(out)
    s = r["seconds"]
    assert len(r["times"]) == 4 and r["inputs"] == "random" and r["input_shapes"] == [[2, 3, 8, 8]]
    assert 0 < s["min"] <= s["median"] <= s["max"] and s["min"] <= s["mean"] <= s["max"]
    rc, out, err = cli(work, "bench", "cnn.eagerc", "-i", "x.npy", "--repeat", "3")
    assert rc == 0, err
    assert "inputs (x: f32[3,3,8,8]) from --input" in out
    assert re.search(r"3 calls after 3 warm-up: min [\d.]+ ms  median [\d.]+ ms  mean [\d.]+ ms", out)


def test_inspect_run_bench_need_only_the_runtime(work):
    """Like the loader: a deployment machine can use them without the frontend or compiler."""
    code = textwrap.dedent("""
        import sys
        from eagerc.cli import main
        for args in (["inspect", "cnn.eagerc"], ["run", "cnn.eagerc", "-i", "x.npy", "-o", "o.npz"],
                     ["bench", "cnn.eagerc", "--repeat", "2"]):
            assert main(args) == 0, args
        bad = [m for m in sys.modules if m.startswith("eagerc.") and m.split(".")[1] not in ("runtime", "cli", "viz")]
        assert not bad, bad
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- viz

def test_viz_file_to_dot(work):
    rc, out, err = cli(work, "viz", "cnn.eagerc", "-o", "cnn.dot")
    assert rc == 0, err
    assert out.startswith("wrote cnn.dot: 17 ops as")
    src = (work / "cnn.dot").read_text()
    assert '"cluster_m:features"' in src and '"cluster_m:features.1"' in src
    assert 'label="f32[batch,8,8,8]"' in src and 'label="x\\nf32[batch,3,8,8]"' in src
    rc, out, err = cli(work, "viz", "cnn.eagerc", "-o", "-", "--depth", "0")
    assert rc == 0 and out.startswith("digraph") and "cluster_m:" not in out
    assert re.search(r'label="features\\n[^"]*conv2d', out) and 'label="f32[batch,16,4,4]"' in out


@needs_dot
def test_viz_file_to_svg_png_pdf(work):
    for ext, magic in (("svg", b"<?xml"), ("png", b"\x89PNG"), ("pdf", b"%PDF")):
        rc, out, err = cli(work, "viz", "cnn.eagerc", "-o", f"cnn.{ext}")
        assert rc == 0, err
        assert (work / f"cnn.{ext}").read_bytes().startswith(magic)
    svg = (work / "cnn.svg").read_text()
    assert "features.1" in svg and "conv2d 3→8 k3×3" in svg and "f32[batch,8,8,8]" in svg


def test_viz_callable_stages(work):
    rc, out, err = cli(work, "viz", "models:CNN", "--input-shape", "2,3,8,8", "--stage", "traced", "-o", "t.dot")
    assert rc == 0, err
    traced = (work / "t.dot").read_text()
    assert "(BatchNorm2d)" in traced and 'label="CNN (traced) · ' in traced
    rc, out, err = cli(work, "viz", "models:make_cnn", "--input-shape", "2x3x8x8", "--stage", "fused",
                       "-o", "f.dot")
    assert rc == 0, err
    assert "fusion groups" in out
    fused = (work / "f.dot").read_text()
    assert "subgraph cluster_f0" in fused and re.search(r'label="fusion0 \(\d+ ops\)"', fused)
    # a module instance and a plain function with two inputs of their own dtypes
    assert cli(work, "viz", "models:cnn", "--input-shape", "1,3,8,8", "-o", "i.dot")[0] == 0
    rc, out, err = cli(work, "viz", "models:two_outputs", "--input-shape", "2,3", "--input-shape", "2,3",
                       "--dtype", "float64", "-o", "-")
    assert rc == 0, err
    assert 'label="x\\nf64[2,3]"' in out and 'label="y\\nf64[2,3]"' in out
    assert "output['prod']" in out and "output['exp']" in out


def test_viz_profile(work):
    rc, out, err = cli(work, "viz", "cnn.eagerc", "--profile", "--profile-repeat", "2", "-o", "-")
    assert rc == 0, err
    assert re.search(r'label="conv2d 3→8 k3×3\\npadding=1\\n[\d.]+ (µs|ms) · \d+%"', out)
    assert "per call (sum over ops)" in out


VIZ_ERRORS = [
    (["models:CNN", "--input-shape", "1,a,8"], 2, ["--input-shape '1,a,8'", "1,3,32,32"]),
    (["models:CNN"], 2, ["--input-shape"]),
    (["models:CNN", "--input-shape", "1,3,8,8", "--stage", "lowered"], 2, ["invalid choice"]),
    (["cnn.eagerc", "--stage", "traced"], 2, ["--stage traced needs a module:callable"]),
    (["cnn.eagerc", "--input-shape", "1,3,8,8"], 2, ["--input-shape"]),
    (["cnn.eagerc", "-o", "g.jpg"], 2, [".svg, .png, .pdf or .dot"]),
    (["cnn.eagerc", "--depth", "-1"], 2, ["--depth"]),
    (["models:CNN", "--input-shape", "1,3,8,8", "--dtype", "float99"], 2, ["float99"]),
    (["missing.eagerc"], 1, ["missing.eagerc: no such file"]),
    (["junk.eagerc"], 1, ["not a valid eagerc program"]),
    (["models:Nope", "--input-shape", "1,3"], 1, ["no attribute 'Nope'"]),
    (["nomodule:CNN", "--input-shape", "1,3"], 1, ["cannot import 'nomodule'"]),
    (["models:CNN", "--input-shape", "1,3"], 1, ["failed on inputs of shapes [1, 3]", "conv2d"]),
    (["models:broken", "--input-shape", "2"], 1, ["ValueError: this model is broken"]),
]


def test_viz_errors(work):
    _check_errors(work, [(["viz", *args], code, words) for args, code, words in VIZ_ERRORS])
    rc, _, err = cli(work, "viz", "models:broken", "--input-shape", "2", "--debug")
    assert rc == 1 and "Traceback" in err


def test_viz_without_dot_writes_the_dot_file(work):
    rc, out, err = cli(work, "viz", "cnn.eagerc", "-o", "nodot.svg", env={"EAGERC_DOT": ""})
    assert_one_line_error(rc, err, 1, "wrote nodot.dot instead of nodot.svg", "apt-get install graphviz",
                          "brew install graphviz")
    assert (work / "nodot.dot").read_text().startswith("digraph") and not (work / "nodot.svg").exists()


@needs_dot
def test_viz_2000_ops_renders_in_seconds(work):
    t0 = time.perf_counter()
    rc, out, err = cli(work, "viz", "big.eagerc", "-o", "big.svg", timeout=300)
    elapsed = time.perf_counter() - t0
    assert rc == 0, err
    n = int(re.match(r"wrote big.svg: (\d+) ops", out).group(1))
    assert n >= 2000 and "repeated blocks drawn once: layers.0 x125" in out
    assert elapsed < 30, f"{n} ops: {elapsed:.1f} s"
    svg = (work / "big.svg").read_text()
    assert re.search(r"layers\.0 … 124(\s|&#160;)+×125", svg)


# ---------------------------------------------------------------- files: formats, checksums, hostile strings

def test_inspect_a_format_1_program_says_it_has_no_checksum(work, tmp_path):
    from eagerc.runtime import safetensors_io
    prog = load(work / "cnn.eagerc")
    f = open(work / "cnn.eagerc", "rb")
    header = safetensors_io.read_header(f, os.path.getsize(work / "cnn.eagerc"), checksum_key="checksum")
    meta = {k: v for k, v in header.metadata.items() if k != "checksum"}
    meta["format_version"] = "1"
    safetensors_io.save_file(tmp_path / "v1.eagerc", safetensors_io.read_tensors(f, header), meta)
    f.close()
    rc, out, err = cli(tmp_path, "inspect", "v1.eagerc", "--no-program")
    assert rc == 0, err
    assert "eagerc program, format 1" in out and "checksum: no checksum (a format-1 file" in out
    rc, out, err = cli(tmp_path, "inspect", "v1.eagerc", "--json")
    assert json.loads(out)["checksum"] is None and json.loads(out)["format_version"] == 1
    np.testing.assert_array_equal(load(tmp_path / "v1.eagerc")(np.ones((2, 3, 8, 8), np.float32)),
                                  prog(np.ones((2, 3, 8, 8), np.float32)))


def test_inspect_a_checkpoint(work, tmp_path):
    eagerc.save({"model": {"w": eagerc.ones(2, 3), "b": eagerc.zeros(3, dtype=eagerc.float64)}, "epoch": 4},
                tmp_path / "ck.safetensors")
    rc, out, err = cli(tmp_path, "inspect", "ck.safetensors")
    assert rc == 0, err
    lines = out.splitlines()
    assert re.fullmatch(r"ck.safetensors: eagerc checkpoint, format 2, sha256:[0-9a-f]{16}\.\.\. verified",
                        lines[0])
    assert lines[1].startswith("tensors: 2 (9 values, 48 B;")   # 6 x 4 bytes + 3 x 8 bytes
    assert re.fullmatch(r"  model\.w\s+f32\[2,3\]", lines[2]) and re.fullmatch(r"  model\.b\s+f64\[3\]", lines[3])
    assert lines[4] == "keys: model, epoch"
    info = json.loads(cli(tmp_path, "inspect", "ck.safetensors", "--json")[1])
    assert info["format"] == "eagerc.checkpoint" and info["checksum"].startswith("sha256:")
    assert [t["name"] for t in info["tensors"]] == ["model.w", "model.b"]
    data = bytearray((tmp_path / "ck.safetensors").read_bytes())
    data[-1] ^= 1
    (tmp_path / "ck.safetensors").write_bytes(bytes(data))
    assert_one_line_error(*cli(tmp_path, "inspect", "ck.safetensors")[::2], 1, "checksum mismatch")


def _hostile_program(path):
    """A valid, sealed program whose strings carry terminal escape sequences and newlines."""
    from eagerc.runtime import safetensors_io
    prog = export(lambda x: {"k\x1b[31m": x * 2.0}, (eagerc.randn(2, 3),))
    tensors, meta = prog.parts()
    g = json.loads(meta["graph"])
    g["nodes"][0]["loc"] = "\x1b]0;owned\x07"
    g["nodes"][0]["module"] = "evil\x1b[2J\nFAKE LINE"
    meta["graph"] = json.dumps(g, sort_keys=True)
    meta["eagerc_version"] = "0.1\x1b[5m"
    safetensors_io.save_file(path, tensors, meta, checksum_key="checksum")
    return path


def test_no_control_character_from_a_file_reaches_the_terminal(work, tmp_path):
    """Before: a node location of "\\x1b]0;owned\\x07" reached the terminal raw (it retitles it)."""
    _hostile_program(tmp_path / "evil.eagerc")
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    for args in (["inspect", "evil.eagerc"], ["inspect", "evil.eagerc", "--json"],
                 ["run", "evil.eagerc", "-i", "x.npy"], ["run", "evil.eagerc", "-i", "x.npy", "-o", "o.npz"],
                 ["bench", "evil.eagerc", "--repeat", "1", "--warmup", "0"], ["viz", "evil.eagerc", "-o", "-"]):
        rc, out, err = cli(tmp_path, *args)
        assert rc == 0, (args, err)
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", out + err), (args, out)
        assert not any(line.startswith("FAKE") for line in out.splitlines()), args   # no faked line
    rc, out, err = cli(tmp_path, "viz", "evil.eagerc", "-o", "evil.dot")
    dot = (tmp_path / "evil.dot").read_text()
    assert rc == 0 and "\x1b" not in dot and "\\x1b]0;owned" in dot
    rc, out, err = cli(tmp_path, "inspect", "evil.eagerc")
    assert "# \\x1b]0;owned\\x07 (evil\\x1b[2J\\x0aFAKE LINE)" in out
    assert "written by eagerc 0.1\\x1b[5m" in out
    rc, out, err = cli(tmp_path, "run", "evil.eagerc", "-i", "x.npy")
    assert out.startswith("output.k\\x1b[31m: f32[2,3] [2., 2.")
    # an error message quoting the file's strings is escaped too
    (tmp_path / "bad\x1b[2J.eagerc").write_bytes(b"garbage")
    rc, out, err = cli(tmp_path, "inspect", "bad\x1b[2J.eagerc")
    assert rc == 1 and "bad\\x1b[2J.eagerc" in err and "\x1b" not in err


def test_printable_escapes_every_control_character():
    from eagerc.cli.common import printable
    for c in [chr(i) for i in range(32)] + ["\x7f", "\x9b", "\u202e", "\u2066"]:
        assert printable("a" + c + "b") == "a" + (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}") + "b"
    assert printable("tab\tand\nline", lines=True) == "tab\tand\nline"
    assert printable("é ü 中 ✓") == "é ü 中 ✓"   # printable text is left alone


def test_fifo_is_refused_without_blocking(work, tmp_path):
    """Before: `eagerc inspect fifo` (and both loaders) blocked forever in open()."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    os.mkfifo(tmp_path / "pipe.eagerc")
    assert_one_line_error(*cli(tmp_path, "inspect", "pipe.eagerc", timeout=60)[::2], 1,
                          "pipe.eagerc: is a FIFO (named pipe), not a regular file")
    assert_one_line_error(*cli(tmp_path, "inspect", "/dev/null", timeout=60)[::2], 1,
                          "/dev/null: is a character device, not a regular file")
