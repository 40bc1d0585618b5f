"""eagerc.bfloat16: ml_dtypes' numpy bfloat16 as an eagerc dtype.

Every op is also checked in bfloat16 by the op table (tests/test_ops.py, test_forward_bfloat16);
this file checks what is particular to the dtype: PyTorch's promotion rows, creation, casts and
their rounding, printing, float32 accumulation (hand-computed answers), autograd, checkpoint and
exported-program files, the compiler's numpy backend, and the clear error without ml_dtypes.
Rows marked "PyTorch" are PyTorch's answers; the torch-comparing tests skip without it.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import eagerc as E
from eagerc.runtime import dtypes

BF = E.bfloat16
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bits(values):
    """bfloat16 values from their 16-bit patterns (the top half of a float32)."""
    return (np.asarray(values, np.uint32) << 16).view(np.float32)


def vec(dtype):
    return E.tensor([1, 1], dtype=dtype)


def zd(dtype):
    return E.tensor(1, dtype=dtype)


# (left, right, PyTorch's dtype of left + right), checked in both orders
PROMOTION = [
    (lambda: vec(BF), lambda: vec(E.float16), E.float32),   # no common 16-bit type
    (lambda: vec(BF), lambda: vec(E.float32), E.float32),
    (lambda: vec(BF), lambda: vec(E.float64), E.float64),
    (lambda: vec(BF), lambda: vec(E.int64), BF),            # a higher category wins outright
    (lambda: vec(BF), lambda: vec(E.bool), BF),
    (lambda: vec(BF), lambda: 2.5, BF),                     # scalars do not promote within a category
    (lambda: vec(BF), lambda: 7, BF),
    (lambda: vec(BF), lambda: zd(E.float64), BF),           # nor do 0-d tensors
    (lambda: vec(E.int32), lambda: zd(BF), BF),             # ... unless of a higher category
    (lambda: vec(E.float16), lambda: zd(BF), E.float16),
    (lambda: zd(BF), lambda: zd(E.float16), E.float32),
]


@pytest.mark.parametrize("row", range(len(PROMOTION)))
def test_promotion_follows_pytorch(row):
    a, b, want = PROMOTION[row]
    assert (a() + b()).dtype is want and (b() + a()).dtype is want
    if not isinstance(b(), (int, float)):
        assert E.promote_types(a().dtype, b().dtype) is (want if a().ndim and b().ndim else
                                                        E.promote_types(a().dtype, b().dtype))


def test_promotion_table_against_torch():
    torch = pytest.importorskip("torch")
    names = list(dtypes.NAMES)
    for x in names:
        for y in names:
            want = torch.promote_types(getattr(torch, x), getattr(torch, y))
            assert E.promote_types(dtypes.as_dtype(x), dtypes.as_dtype(y)).name == str(want).split(".")[1], (x, y)


def test_the_dtype_object():
    assert BF is dtypes.as_dtype("bfloat16") is dtypes.as_dtype("torch.bfloat16") is dtypes.from_np(BF.np)
    assert BF.is_floating_point and BF.is_signed and BF.itemsize == 2 and repr(BF) == "eagerc.bfloat16"
    assert BF.np.name == "bfloat16" and BF in dtypes.ALL
    f = E.finfo(BF)   # PyTorch: finfo(resolution=0.01, min=-3.38953e+38, ..., eps=0.0078125, tiny=1.17549e-38)
    assert (f.bits, f.eps, f.resolution, f.tiny) == (16, 2.0 ** -7, 0.01, 2.0 ** -126)
    assert f.max == float(bits(0x7F7F)) and f.min == -f.max


def test_creation():
    assert E.tensor([1.5, -2.0], dtype=BF).tolist() == [1.5, -2.0]
    for t in (E.zeros(2, 3, dtype=BF), E.ones(4, dtype=BF), E.full((2,), 3.0, dtype=BF), E.empty(3, dtype=BF),
              E.arange(5, dtype=BF), E.linspace(0, 1, 5, dtype=BF), E.eye(3, dtype=BF), E.rand(50, dtype=BF),
              E.randn(50, dtype=BF), E.zeros_like(E.ones(2), dtype=BF)):
        assert t.dtype is BF and t.numpy().dtype == BF.np
    assert E.arange(5, dtype=BF).tolist() == [0, 1, 2, 3, 4]
    assert E.linspace(0, 1, 5, dtype=BF).tolist() == [0, 0.25, 0.5, 0.75, 1]
    u = E.rand(1000, dtype=BF).float().numpy()
    # uniform bfloat16 draws are k * 2**-8 (8 significant bits), in [0, 1)
    assert u.min() >= 0 and u.max() < 1 and np.all(u * 256 == np.round(u * 256)) and len(set(u.tolist())) > 100
    assert E.tensor(np.array([1, 2], BF.np)).dtype is BF        # an ml_dtypes array keeps its dtype


def test_casts_round_to_nearest_even():
    # between 1 and 1 + 2**-7: 1 + 2**-8 ties to even (1), 1 + 3 * 2**-8 ties up (1 + 2**-6),
    # and 1 + 2**-8 + 2**-20 is past the tie
    x = E.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, 3.3, -1e39])
    want = [1.0, 1 + 2 ** -6, 1 + 2 ** -7, 3.296875, -np.inf]
    for y in (x.to(BF), x.bfloat16(), x.type(BF), x.type("torch.BFloat16Tensor"), x.to(dtype=BF)):
        assert y.dtype is BF and y.float().tolist() == want
    assert x.bfloat16().type() == "eagerc.BFloat16Tensor"
    assert x.bfloat16().float().dtype is E.float32 and x.bfloat16().double().dtype is E.float64
    assert E.tensor([2.7, -2.7], dtype=BF).long().tolist() == [2, -2]
    model = E.nn.Linear(3, 2).bfloat16()
    assert model.weight.dtype is BF and model(E.ones(1, 3, dtype=BF)).dtype is BF


def test_printing_like_pytorch():
    # PyTorch: tensor([1.5000, 2.2500, 3.2969], dtype=torch.bfloat16)
    assert repr(E.tensor([1.5, 2.25, 3.3], dtype=BF)) == "tensor([1.5000, 2.2500, 3.2969], dtype=eagerc.bfloat16)"
    assert repr(E.ones(2, dtype=BF)) == "tensor([1., 1.], dtype=eagerc.bfloat16)"


def test_reductions_accumulate_in_float32():
    # bfloat16 holds every integer to 256, then every other one: accumulated in bfloat16,
    # 1000 ones would stop at 256. PyTorch accumulates in float32 and rounds once.
    ones = E.ones(1000, dtype=BF)
    assert ones.sum().item() == 1000 and ones.mean().item() == 1 and ones.cumsum(0)[-1].item() == 1000
    assert (E.ones(1, 1000, dtype=BF) @ E.ones(1000, 1, dtype=BF)).item() == 1000
    assert E.einsum("i,i->", ones, ones).item() == 1000
    assert E.nn.functional.linear(E.ones(1, 1000, dtype=BF), E.ones(2, 1000, dtype=BF)).tolist() == [[1000, 1000]]
    assert ones.softmax(0)[0].item() == float(np.float32(1 / 1000).astype(BF.np))
    ce = E.nn.functional.cross_entropy(E.zeros(2, 1000, dtype=BF), E.tensor([0, 1]))
    assert ce.dtype is BF and ce.item() == float(np.float32(np.log(1000)).astype(BF.np))   # 6.90625
    x = E.arange(300, dtype=BF)
    ln = E.nn.functional.layer_norm(x, (300,))
    xf = x.float().numpy().astype(np.float64)
    want = ((xf - xf.mean()) / np.sqrt(xf.var() + 1e-5)).astype(np.float32).astype(BF.np).astype(np.float64)
    assert ln.dtype is BF and np.max(np.abs(ln.float().numpy() - want)) <= 2 ** -7


def test_ops_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a32 = rng.standard_normal((64, 300)).astype(np.float32)
    b32 = rng.standard_normal((300, 40)).astype(np.float32)
    ea, eb = E.tensor(a32).bfloat16(), E.tensor(b32).bfloat16()
    ta, tb = torch.tensor(a32).bfloat16(), torch.tensor(b32).bfloat16()
    pairs = [
        (ea @ eb, ta @ tb), (ea.sum(1), ta.sum(1)), (ea.mean(0), ta.mean(0)), (ea.softmax(-1), ta.softmax(-1)),
        (ea.log_softmax(-1), ta.log_softmax(-1)), (ea.exp(), ta.exp()), (ea.tanh() * 3 + ea, ta.tanh() * 3 + ta),
        (ea.cumsum(1), ta.cumsum(1)), (ea.amax(1), ta.amax(1)),
        (E.nn.functional.layer_norm(ea, (300,)), torch.nn.functional.layer_norm(ta, (300,))),
        (E.nn.functional.gelu(ea), torch.nn.functional.gelu(ta)),
    ]
    for i, (got, want) in enumerate(pairs):
        assert got.dtype is BF and want.dtype == torch.bfloat16
        g, w = got.float().numpy(), want.float().numpy()
        # one bfloat16 rounding apart at most (float32 libm and summation order differ)
        np.testing.assert_allclose(g, w, rtol=2 ** -7, atol=1e-2 if i == 7 else 1e-3, err_msg=str(i))


def test_autograd_gives_bfloat16_gradients():
    rng = np.random.default_rng(1)
    w32 = rng.standard_normal((5, 4)).astype(np.float32)
    x32 = rng.standard_normal((3, 4)).astype(np.float32)
    w = E.tensor(w32, dtype=BF, requires_grad=True)
    x = E.tensor(x32, dtype=BF)
    loss = (x @ w.t()).tanh().sum()
    loss.backward()
    assert loss.dtype is BF and w.grad.dtype is BF
    xr, wr = x.float().numpy().astype(np.float64), w.detach().float().numpy().astype(np.float64)
    want = (1 - np.tanh(xr @ wr.T) ** 2).T @ xr     # d/dw sum(tanh(x w^T))
    np.testing.assert_allclose(w.grad.float().numpy(), want, rtol=3e-2, atol=3e-2)


def test_checkpoints_round_trip_and_name_bf16(tmp_path):
    t = E.tensor(bits([0x3FC0, 0xC040, 0x7F80, 0x0001]), dtype=BF)    # 1.5, -3, inf, a subnormal
    E.save({"w": t, "f": E.ones(2)}, tmp_path / "ck.safetensors")
    raw = (tmp_path / "ck.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert json.loads(raw[8:8 + n])["w"]["dtype"] == "BF16"
    got = E.load(tmp_path / "ck.safetensors")["w"]
    assert got.dtype is BF and got.numpy().view(np.uint16).tolist() == [0x3FC0, 0xC040, 0x7F80, 0x0001]


def test_safetensors_files_from_the_safetensors_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    a = np.array([1.5, -3.0, 0.1], BF.np)
    st.save_file({"a": a}, str(tmp_path / "x.safetensors"))
    assert E.load(tmp_path / "x.safetensors")["a"].numpy().tobytes() == a.tobytes()


def _program(tmp_path):
    model = E.nn.Sequential(E.nn.Linear(6, 8), E.nn.GELU(), E.nn.Linear(8, 3)).bfloat16()
    prog = E.export(model, (E.randn(4, 6, dtype=BF),))
    return model, prog.save(tmp_path / "bf16.eagerc")


def test_export_and_the_runtime_loader(tmp_path):
    model, path = _program(tmp_path)
    loaded = E.runtime.load(path)
    x = np.random.default_rng(2).standard_normal((4, 6)).astype(BF.np)
    got = loaded(x)
    with E.no_grad():
        want = model(E.tensor(x)).numpy()
    assert got.dtype == BF.np and got.tobytes() == want.tobytes()
    assert loaded.input_specs[0]["dtype"] == "bfloat16"


@pytest.mark.parametrize("backend", ["numpy", "interpreter", "c"])
def test_compiled_matches_eager(backend):
    def f(x, w):
        h = (x @ w).relu() * 0.5 + x.sum(-1, keepdim=True)
        for _ in range(4):    # temporaries enough for planned buffers (views of one bfloat16 arena)
            h = (h * 0.75 + x).tanh() @ w
        return h.softmax(-1), h.mean()
    rng = np.random.default_rng(3)
    x = E.tensor(rng.standard_normal((16, 32)), dtype=BF)
    w = E.tensor(rng.standard_normal((32, 32)), dtype=BF)
    c = E.compile(f, backend=backend)
    c(x, w)                                            # the first call traces: eager's results
    got = c(x, w)
    want = f(x, w)
    for g, e in zip(got, want):
        assert g.dtype is BF and g.numpy().tobytes() == e.numpy().tobytes()


_NO_ML_DTYPES = "import sys; sys.modules['ml_dtypes'] = None\n"   # an import of it then fails


def _python(code):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_only_bfloat16_imports_ml_dtypes():
    out = _python("import sys, eagerc, eagerc.runtime\n"
                  "x = eagerc.ones(3) * 2; x.sum(); print('ml_dtypes' in sys.modules)\n"
                  "eagerc.bfloat16; print('ml_dtypes' in sys.modules)")
    assert out.split() == ["False", "True"]
    # an ml_dtypes array handed to eagerc before anything named bfloat16 keeps its dtype
    out = _python("import numpy, ml_dtypes, eagerc\n"
                  "print(eagerc.tensor(numpy.ones(2, ml_dtypes.bfloat16)).dtype, "
                  "eagerc.from_numpy(numpy.ones(2, ml_dtypes.bfloat16)).dtype)")
    assert out.split() == ["eagerc.bfloat16", "eagerc.bfloat16"]


def test_without_ml_dtypes_bfloat16_names_the_extra(tmp_path):
    _, path = _program(tmp_path)
    head = b'{"w":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}'
    (tmp_path / "w.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"\0\0")
    out = _python(_NO_ML_DTYPES + f"""
import eagerc
print(eagerc.ones(2).sum().item())
for what in ("eagerc.bfloat16", "eagerc.ones(2).bfloat16()", "eagerc.zeros(2, dtype='bfloat16')",
             "eagerc.load({str(tmp_path / 'w.safetensors')!r})", "eagerc.runtime.load({str(path)!r})"):
    try:
        eval(what)
        print("no error:", what)
    except Exception as e:
        print(type(e).__name__, "|", 'pip install "eagerc[bf16]"' in str(e) and "ml_dtypes" in str(e))
""")
    lines = out.strip().splitlines()
    assert lines[0] == "2.0"
    assert [x.split(" | ")[1] for x in lines[1:]] == ["True"] * 5, out
    assert [x.split(" | ")[0] for x in lines[1:]] == ["ImportError", "ImportError", "ImportError",
                                                       "CheckpointError", "ProgramLoadError"], out
