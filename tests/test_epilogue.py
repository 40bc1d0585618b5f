"""passes/epilogue.py: a linear's bias add moved into the kernel that reads its output.

Which linears split (readers all fusible, output not returned, float32/64), and backend c's
results with the split against eager mode (bit for bit where the kernel computes what numpy
computes) and against numpy formulas, forward and backward.
"""
import contextlib

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.compiler.backends.fused import fusible
from eagerc.compiler.passes import CLEANUP, optimize
from eagerc.compiler.passes.epilogue import bias_epilogues
from eagerc.compiler.tracer import trace
from eagerc.runtime import kernel_cache, threads


def _graph(fn, *arrays):
    graph, _, _ = trace(fn, tuple(eagerc.tensor(a) for a in arrays))
    return optimize(graph, CLEANUP)


def _linears(graph):
    return [n for n in graph.nodes if n.op == "linear"]


def test_bias_moves_to_an_add_read_by_fusible_nodes_only():
    rng = np.random.default_rng(0)
    w1, b1 = eagerc.tensor(rng.standard_normal((6, 4))), eagerc.tensor(rng.standard_normal(6))
    w2, b2 = eagerc.tensor(rng.standard_normal((3, 6))), eagerc.tensor(rng.standard_normal(3))
    w3, b3 = eagerc.tensor(rng.standard_normal((6, 6))), eagerc.tensor(rng.standard_normal(6))

    def fn(x):
        h = F.relu(F.linear(x, w1, b1))            # read by relu: split
        m = F.linear(h, w3, b3) @ w3               # read by a matmul (not fusible): kept
        return F.linear(m, w2, b2)                 # returned: kept
    graph = _graph(fn, rng.standard_normal((5, 4)))
    out = bias_epilogues(graph, fusible)
    lin = _linears(out)
    assert [len(n.inputs) > 2 and n.inputs[2] is not None for n in lin] == [False, True, True]
    first = lin[0]
    (add,) = [n for n in out.nodes if n.op == "add" and first.out in n.inputs]
    assert add.inputs[1].name == _linears(graph)[0].inputs[2].name      # the bias
    (relu,) = [n for n in out.nodes if n.op == "relu"]
    assert relu.inputs[0] is add.out
    assert len(out.nodes) == len(graph.nodes) + 1


def test_bfloat16_linear_keeps_its_bias():
    rng = np.random.default_rng(1)
    w, b = (eagerc.tensor(rng.standard_normal(s)).to(eagerc.bfloat16) for s in ((4, 3), (4,)))
    graph = _graph(lambda x: F.relu(F.linear(x.to(eagerc.bfloat16), w, b)), rng.standard_normal((2, 3)))
    out = bias_epilogues(graph, fusible)
    assert all(n.inputs[2] is not None for n in _linears(out))


needs_cc = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")


@needs_cc
@pytest.mark.parametrize("rows, blas", [(8, "default"), (200, "one"), (200, "default")])
def test_linear_relu_compiled_gives_eagers_bits(rows, blas, kernel_cache_dir, request):
    # 8 rows: linear's few-rows orientation, 200: the plain one. The program's products are small,
    # so it runs them on one BLAS thread (threads.blas_context_for); "one" computes eager's on one
    # thread too, "default" on OpenBLAS's own count
    one = threads.one_blas_thread()
    if blas == "one" and one is None:
        pytest.skip("numpy's OpenBLAS not reachable: nothing pins BLAS to one thread")
    if rows == 200 and blas == "default" and (threads.blas_threads() or 1) > 1:
        # OpenBLAS's sgemm bits depend on its thread count: split between threads, 200 rows take
        # other edge tiles than on one thread (from row 48 on, ~4.5% of the elements 1 ulp apart,
        # the same product x @ weight.T on both sides). Eager keeps numpy's threading; pinning it
        # per product would cost ~1.3 us (an 8-row linear takes ~2.7), unpinning the program
        # brings back issue 15's slowdowns: a policy decision, not an epilogue bug
        request.applymarker(pytest.mark.xfail(strict=True, reason="OpenBLAS on several threads vs the "
                                              "compiled program's one BLAS thread: 1 ulp"))
    rng = np.random.default_rng(2)
    layer = nn.Linear(64, 96)
    x = eagerc.tensor(rng.standard_normal((rows, 64)).astype(np.float32))

    def fn(a):
        return F.relu(layer(a)) * 2.0
    compiled = eagerc.compile(fn, backend="c")
    with eagerc.no_grad():
        compiled(x)                                    # the first call traces: eager's results
        got = compiled(x).numpy()
        with one if blas == "one" else contextlib.nullcontext():
            want = fn(x).numpy()
    np.testing.assert_array_equal(got, want)
    (entry,) = compiled.entries.values()
    assert entry.program.blas_context is one           # its products on one BLAS thread
    (k,) = entry.program.kernels
    assert "layer.bias" in [b.name for b in k.inputs]      # the bias is added inside the relu kernel
    assert "k_linear(arg0, layer_weight, None)" in entry.program.source
    ref = np.maximum(x.numpy().astype(np.float64) @ layer.weight.detach().numpy().T.astype(np.float64)
                     + layer.bias.detach().numpy(), 0) * 2
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@needs_cc
def test_training_step_with_split_biases_matches_numpy_gradients(kernel_cache_dir):
    # gelu(linear) -> linear -> residual: forward and backward through the split biases
    rng = np.random.default_rng(3)
    fc, out = nn.Linear(16, 32).to(eagerc.float64), nn.Linear(32, 16).to(eagerc.float64)
    x = rng.standard_normal((10, 16))

    def step(a):
        a = a.detach().requires_grad_()
        y = a + out(F.gelu(fc(a), approximate="tanh"))
        loss = (y * y).sum()
        grads = eagerc.autograd.grad(loss, (a, fc.weight, fc.bias, out.weight, out.bias))
        return (loss.detach(),) + grads
    compiled = eagerc.compile(step, backend="c")
    compiled(eagerc.tensor(x))                         # the first call traces: eager's results
    got = [t.numpy() for t in compiled(eagerc.tensor(x))]
    graph = next(iter(compiled.entries.values())).graph
    assert any(n.op == "linear" and n.inputs[2] is None and n.inputs[1].name == "fc.weight" for n in graph.nodes)

    W1, b1 = fc.weight.detach().numpy(), fc.bias.detach().numpy()
    W2, b2 = out.weight.detach().numpy(), out.bias.detach().numpy()
    h = x @ W1.T + b1
    c = 0.7978845608028654
    t = np.tanh(c * (h + 0.044715 * h ** 3))
    gl = 0.5 * h * (1 + t)
    y = x + gl @ W2.T + b2
    gy = 2 * y
    ggl = gy @ W2
    gh = ggl * (0.5 * (1 + t) + 0.5 * h * (1 - t * t) * c * (1 + 3 * 0.044715 * h * h))
    want = [np.array((y * y).sum()), gy + gh @ W1, gh.T @ x, gh.sum(0), gy.T @ gl, gy.sum(0)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)
