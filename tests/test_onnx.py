"""eagerc.onnx.export: the MLP, CNN and GPT-block graphs (and a spread of single ops) pass
onnx.checker and give onnxruntime outputs that match eagerc's on new inputs; dynamic axes;
Programs; errors for unsupported ops.

onnx and onnxruntime are optional test dependencies: without them these tests skip.
"""
import importlib
import os
import sys

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
import eagerc.onnx
from eagerc import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _optional(name):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.skip(f"{name} is an optional test dependency (pip install {name}; in the dev extra): {e}")


@pytest.fixture(scope="module")
def onnx():
    return _optional("onnx")


@pytest.fixture(scope="module")
def ort(onnx):
    return _optional("onnxruntime")


# ---------------------------------------------------------------- models

def _mlp():
    eagerc.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def _cnn():
    eagerc.manual_seed(1)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 2 * 2, 5))


class GPTBlock(nn.Module):
    """A pre-LayerNorm transformer block: causal self-attention and a GELU MLP, residual adds."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.act, self.out = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.out(self.act(self.fc(self.ln2(x))))


def _block():
    eagerc.manual_seed(2)
    return GPTBlock()


MODELS = {"mlp": (_mlp, (4, 6)), "cnn": (_cnn, (2, 3, 8, 8)), "gpt_block": (_block, (2, 5, 16))}


def _session(ort, model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _eager(fn, *arrays):
    with eagerc.no_grad():
        out = fn(*[eagerc.tensor(a) for a in arrays])
    return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]


def _compare(ort, model, fn, *arrays, rtol=1e-4, atol=1e-5):
    s = _session(ort, model)
    got = s.run(None, {i.name: a for i, a in zip(s.get_inputs(), arrays)})
    want = _eager(fn, *arrays)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}")


def _dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


# ---------------------------------------------------------------- the three models

@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_onnxruntime(name, onnx, ort, tmp_path):
    make, shape = MODELS[name]
    m = make()
    path = str(tmp_path / f"{name}.onnx")
    model = eagerc.onnx.export(m, (eagerc.randn(*shape),), path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    assert model.opset_import[0].version == 17 and model.producer_name == "eagerc"
    inits = {t.name for t in model.graph.initializer}
    assert {n for n, _ in m.named_parameters()} <= inits       # weights are initializers...
    assert [i.name for i in model.graph.input] == ["input" if name != "gpt_block" else "x"]  # ...not inputs
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)  # new values, same shape
    _compare(ort, model, m, x)


@pytest.mark.parametrize("name", list(MODELS))
def test_dynamic_batch(name, onnx, ort):
    make, shape = MODELS[name]
    m = make()
    model = eagerc.onnx.export(m, (eagerc.randn(*shape),), None, input_names=["x"], output_names=["y"],
                               dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    onnx.checker.check_model(model, full_check=True)
    assert _dims(model.graph.input[0]) == ["batch"] + list(shape[1:])
    assert _dims(model.graph.output[0])[0] == "batch"
    rng = np.random.default_rng(3)
    for n in (1, 5):
        _compare(ort, model, m, rng.standard_normal((n,) + shape[1:]).astype(np.float32))


def test_gpt_block_dynamic_sequence_length(onnx, ort):
    m = _block()
    model = eagerc.onnx.export(m, (eagerc.randn(2, 5, 16),), None, dynamic_axes={"x": {0: "B", 1: "T"}})
    onnx.checker.check_model(model, full_check=True)
    assert _dims(model.graph.input[0]) == ["B", "T", 16]
    assert _dims(model.graph.output[0]) == ["B", "T", 16]
    rng = np.random.default_rng(4)
    for b, t in ((1, 3), (3, 9)):
        _compare(ort, model, m, rng.standard_normal((b, t, 16)).astype(np.float32))


def test_sizes_computed_from_dynamic_dimensions(onnx, ort):
    def f(x):
        return (x.sum(1) / x.shape[1], x.reshape(x.shape[0], -1), eagerc.arange(x.shape[1]) * 2,
                x.narrow(1, 1, x.shape[1] - 1), eagerc.zeros(x.shape[0], 3))
    model = eagerc.onnx.export(f, (eagerc.randn(3, 4, 2),), None, input_names=["x"],
                               dynamic_axes={"x": {0: "b", 1: "n"}})
    onnx.checker.check_model(model, full_check=True)
    assert [_dims(o) for o in model.graph.output] == [["b", 2], ["b", "2*n"], ["n"], ["b", "n-1", 2], ["b", 3]]
    used = {i for node in model.graph.node for i in node.input}
    assert all(t.name in used for t in model.graph.initializer)
    _compare(ort, model, f, np.random.default_rng(11).standard_normal((5, 7, 2)).astype(np.float32))


def test_char_gpt_with_embeddings(onnx, ort):
    sys.path.insert(0, ROOT)
    try:
        from examples.char_gpt import GPT
    finally:
        sys.path.remove(ROOT)
    eagerc.manual_seed(0)
    gpt = GPT(vocab_size=20, block_size=16, n_layer=2, n_embd=16, n_head=2)
    rng = np.random.default_rng(5)
    model = eagerc.onnx.export(gpt, (eagerc.tensor(rng.integers(0, 20, (2, 8))),), None,
                               dynamic_axes={"idx": {0: "batch", 1: "seq"}})
    onnx.checker.check_model(model)
    assert "Gather" in {n.op_type for n in model.graph.node}
    _compare(ort, model, gpt, rng.integers(0, 20, (3, 11)))


def test_opset_18_and_newer(onnx, ort):
    m = _block()
    x = np.random.default_rng(6).standard_normal((2, 5, 16)).astype(np.float32)

    def f(x):
        return m(x).amax(-1), x.mean((0, 1)), x.amin(0, keepdim=True)
    for opset in (18, min(20, onnx.defs.onnx_opset_version())):
        model = eagerc.onnx.export(f, (eagerc.tensor(x),), None, opset=opset)
        onnx.checker.check_model(model)
        assert model.opset_import[0].version == opset
        _compare(ort, model, f, x)


# ---------------------------------------------------------------- programs

def test_exported_and_loaded_programs(onnx, ort, tmp_path):
    from eagerc.compiler.export import export
    from eagerc.runtime import load
    m = _cnn()
    prog = export(m, (eagerc.randn(2, 3, 8, 8),), dynamic_shapes=({0: "n"},))
    loaded = load(prog.save(str(tmp_path / "cnn.eagerc")))
    x = np.random.default_rng(8).standard_normal((5, 3, 8, 8)).astype(np.float32)
    for p in (prog, loaded):
        path = str(tmp_path / "cnn.onnx")
        model = eagerc.onnx.export(p, None, path, output_names=["logits"])
        onnx.checker.check_model(path)
        assert _dims(model.graph.input[0]) == ["n", 3, 8, 8] and _dims(model.graph.output[0]) == ["n", 5]
        _compare(ort, model, m, x)


def test_compiled_module_and_function(onnx, ort):
    m = _mlp()
    c = eagerc.compile(m)
    x = np.random.default_rng(9).standard_normal((4, 6)).astype(np.float32)
    _compare(ort, eagerc.onnx.export(c, (eagerc.tensor(x),), None), m, x)

    def two(a, b):
        return m(a) + 1, (a * b).sum(-1)
    b = np.random.default_rng(10).standard_normal((4, 6)).astype(np.float32)
    model = eagerc.onnx.export(two, (eagerc.tensor(x), eagerc.tensor(b)), None, input_names=["a", "b"],
                               output_names=["y", "s"])
    assert [o.name for o in model.graph.output] == ["y", "s"]
    assert "m.0.weight" in {t.name for t in model.graph.initializer}  # a closure module's weights
    _compare(ort, model, two, x, b)


# ---------------------------------------------------------------- single ops

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)


def _elementwise(x):
    return (x + 1, x - 2.5, x * x, x / 3, x ** 2, x.pow(3), 2 ** x, -x, x.exp(), x.abs().log(), x.abs().sqrt(),
            x.tanh(), x.sigmoid(), x.relu(), eagerc.erf(x), x.clamp(-0.5, 0.5), x.clamp(min=0), x.floor(), x.ceil(),
            x.round(), x.trunc(), x.sign(), x.abs().rsqrt(), eagerc.maximum(x, x * 2), eagerc.minimum(x, 0.1 * x),
            eagerc.where(x > 0, x, 0.0), x > 0, x >= 0.1, x < 0, x <= 0, x == 0, x != 0, (x > 0) & (x < 1),
            x.to(eagerc.int64), eagerc.lerp(x, x * 2, 0.3), x // 0.7, x % 0.7, eagerc.isnan(x), x.reciprocal(),
            eagerc.logaddexp(x, x * 3), eagerc.hypot(x, 2 - x))


def _integers(a):
    return a + 1, a * 2, a // 3, a % 3, a.float() / 2, a > 0, a.sum(), a.sum(1), -a, a.max(), a.argmax(1), \
        (a > 0).any(), (a > 0).all(1)


def _reductions(x):
    return (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.mean(-1), x.amax(1), x.amin((0, 1)), x.argmax(),
            x.argmax(1, keepdim=True), x.argmin(2), x.prod(1), x.cumsum(1), x.var(1), x.std(), x.logsumexp(2),
            x.norm(), x.softmax(-1), x.log_softmax(1))


def _shapes(x):
    return (x.reshape(12, 5), x.view(-1), x.permute(2, 0, 1), x.transpose(0, 1), x.unsqueeze(1), x[:, :1].squeeze(1),
            x[0], x[:, 1:3], x[..., ::2], x[1, None, :, -1], x[-1, -2:], x.expand(2, 3, 4, 5),
            x[:, :1].expand(-1, 4, -1), eagerc.cat([x, x * 2], 1), eagerc.stack([x, x], 0), *x.split(2, dim=1),
            x.flip(0), x.roll(1, 2), x.repeat(2, 1, 1), x.tril(), x.triu(1), F.pad(x, (1, 2)), x.flatten(1),
            eagerc.einsum("abc,abd->acd", x, x))


def _indexing(x, i):
    return x[i], x[:, i], eagerc.index_select(x, 2, i), F.embedding(i, x[0])


def _nn_ops(x):
    y = x.reshape(1, 3, 4, 5)
    w = eagerc.tensor(np.linspace(-1, 1, 6 * 3 * 2 * 2, dtype=np.float32).reshape(6, 3, 2, 2))
    return (F.gelu(x), F.gelu(x, approximate="tanh"), F.layer_norm(x, (4, 5)), F.silu(x), F.leaky_relu(x, 0.1),
            F.conv2d(y, w, padding=1, stride=(1, 2)), F.conv2d(y, w, dilation=2, padding=2),
            F.max_pool2d(y, 3, stride=1, padding=1), F.max_pool2d(y, 2, ceil_mode=True), F.avg_pool2d(y, 2),
            F.avg_pool2d(y, 3, 1, 1, count_include_pad=False), F.adaptive_avg_pool2d(y, 1),
            F.adaptive_avg_pool2d(y, (2, 5)), F.conv_transpose2d(y, w.transpose(0, 1), stride=2),
            F.interpolate(y, scale_factor=2), F.scaled_dot_product_attention(x, x, x, is_causal=True))


def _loss(x, t):
    return F.cross_entropy(x, t), F.cross_entropy(x, t, reduction="none"), F.cross_entropy(x, t, reduction="sum")


LSTM_W = tuple(eagerc.tensor(RNG.standard_normal(s).astype(np.float32)) for s in ((16, 5), (16, 4), (16,), (16,)))
GRU_W = tuple(eagerc.tensor(RNG.standard_normal(s).astype(np.float32)) for s in ((12, 5), (12, 4), (12,), (12,)))
_LSTM, _GRU = nn.LSTM(3, 4, bidirectional=True), nn.GRU(3, 4)   # whole layers (LSTM: the lstm_layer op)


OP_CASES = {
    "elementwise": (_elementwise, (X,)),
    "integers": (_integers, (RNG.integers(-5, 5, (3, 4)),)),
    "reductions": (_reductions, (X,)),
    "shapes": (_shapes, (X,)),
    "indexing": (_indexing, (X, np.array([2, 0], np.int64))),
    "nn": (_nn_ops, (X,)),
    "cross_entropy": (_loss, (X[0], np.array([1, 4, -100, 2], np.int64))),
    "float64": (lambda x: ((x @ x.mT).softmax(-1), F.layer_norm(x, (5,))), (X.astype(np.float64),)),
    "recurrent_cells": (lambda x, h: (*eagerc.lstm_cell(x, (h, h), *LSTM_W), eagerc.gru_cell(x, h, *GRU_W)),
                        (X[0], X[0, :, :4] * 0.5)),
    "recurrent_layers": (lambda x: (*_LSTM(x)[0:1], *_LSTM(x)[1], _GRU(x)[0]), (X[:, :, :3] * 0.5,)),
    "bool": (lambda m, x: (eagerc.where(m, x, -x), m.sum(), ~m), (X > 0, X)),
}


@pytest.mark.parametrize("case", list(OP_CASES))
def test_ops_match_onnxruntime(case, onnx, ort):
    fn, arrays = OP_CASES[case]
    model = eagerc.onnx.export(fn, tuple(eagerc.tensor(a) for a in arrays), None)
    onnx.checker.check_model(model, full_check=True)
    _compare(ort, model, fn, *arrays)


# ---------------------------------------------------------------- errors

def test_unsupported_op_names_the_op_and_the_line(onnx):
    def f(x):
        return x.cumprod(0) + 1
    line = f.__code__.co_firstlineno + 1
    with pytest.raises(eagerc.onnx.UnsupportedOpError) as info:
        eagerc.onnx.export(f, (eagerc.randn(3),), None)
    msg = str(info.value)
    assert "'cumprod'" in msg and f"test_onnx.py:{line}" in msg and "supported_ops()" in msg
    assert info.value.op == "cumprod" and isinstance(info.value, NotImplementedError)
    assert "cumprod" not in eagerc.onnx.supported_ops() and "linear" in eagerc.onnx.supported_ops()


def test_unsupported_attributes_and_dynamic_sizes(onnx):
    with pytest.raises(eagerc.onnx.UnsupportedOpError, match="label_smoothing"):
        eagerc.onnx.export(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
                           (eagerc.randn(4, 3), eagerc.tensor([0, 1, 2, 0])), None)
    with pytest.raises(eagerc.onnx.UnsupportedOpError, match="'roll'.*dimension 0 of x, which is dynamic"):
        eagerc.onnx.export(lambda x: x.roll(1, 0), (eagerc.randn(4, 2),), None, input_names=["x"],
                           dynamic_axes={"x": [0]})
    model = eagerc.onnx.export(lambda x: x.roll(1, 1), (eagerc.randn(4, 2),), None, input_names=["x"],
                               dynamic_axes={"x": [0]})  # a static dimension is fine
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "x_dynamic_axes_0"
    with pytest.raises(eagerc.onnx.OnnxExportError, match="tracing failed.*data-dependent"):
        eagerc.onnx.export(lambda x, m: x[m] * 1, (eagerc.randn(4), eagerc.tensor([True, False, True, False])),
                           None)


def test_bad_arguments(onnx):
    m = _mlp()
    x = eagerc.randn(2, 6)
    with pytest.raises(eagerc.onnx.OnnxExportError, match="opset"):
        eagerc.onnx.export(m, (x,), None, opset=13)
    with pytest.raises(eagerc.onnx.OnnxExportError, match="input_names"):
        eagerc.onnx.export(m, (x,), None, input_names=["a", "b"])
    with pytest.raises(eagerc.onnx.OnnxExportError, match="dynamic_axes"):
        eagerc.onnx.export(m, (x,), None, dynamic_axes={"nope": [0]})
    with pytest.raises(eagerc.onnx.OnnxExportError, match="example_args"):
        eagerc.onnx.export(m, None, None)


def test_clear_error_without_onnx(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    with pytest.raises(ImportError, match="pip install onnx"):
        eagerc.onnx.export(_mlp(), (eagerc.randn(2, 6),), None)


def test_import_is_light():
    import subprocess
    code = "import sys, eagerc.onnx; assert 'onnx' not in sys.modules, 'onnx imported eagerly'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def _doc_snippet(heading):
    """The first ```python block after `heading` in docs/profiler_onnx.md."""
    with open(os.path.join(ROOT, "docs", "profiler_onnx.md")) as f:
        text = f.read()
    return text[text.index(heading):].split("```python\n", 1)[1].split("```", 1)[0]


def test_the_documented_export_runs_as_written(ort, tmp_path, monkeypatch):
    # before: a batch-1 example with a dynamic batch axis failed ("use an example of size >= 2")
    monkeypatch.chdir(tmp_path)
    ns = {}
    exec(compile(_doc_snippet("## ONNX export"), "profiler_onnx.md", "exec"), ns)
    model, images, logits = ns["model"], ns["images"], ns["logits"]
    assert images.shape[0] == 16 and logits.shape == (16, 10)
    np.testing.assert_allclose(logits, _eager(model, images)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(MODELS))
def test_dynamic_batch_from_a_batch_of_one(name, onnx, ort):
    make, shape = MODELS[name]
    m = make()
    one = (1,) + shape[1:]
    model = eagerc.onnx.export(m, (eagerc.randn(*one),), None, input_names=["x"], output_names=["y"],
                               dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    onnx.checker.check_model(model, full_check=True)
    assert _dims(model.graph.input[0]) == ["batch"] + list(shape[1:])
    rng = np.random.default_rng(6)
    for n in (1, 3, 8):
        _compare(ort, model, m, rng.standard_normal((n,) + shape[1:]).astype(np.float32))
