"""Autocast and GradScaler (eagerc.amp), against numpy references and PyTorch's documented rules.

Autocast is written dtype-generic: float16 runs now; the bfloat16 cases run once eagerc has
`eagerc.bfloat16` (a labelled skip until then). The comparisons with PyTorch itself are in
tests/test_torch_amp.py (a separate file: importing torch makes every later full garbage
collection of the test process slower, which timing tests such as test_data's notice).
"""
import threading

import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
from eagerc.amp import GradScaler, autocast
from eagerc.amp import lists

f16, f32 = eagerc.float16, eagerc.float32
BF16 = getattr(eagerc, "bfloat16", None)
needs_bf16 = pytest.mark.skipif(BF16 is None, reason="eagerc.bfloat16 not merged yet (issue 14, bfloat16 part)")
LOW = [pytest.param(f16, id="float16"), pytest.param(BF16, id="bfloat16", marks=needs_bf16)]


def _np_low(a, low):
    return a.astype(low.np)


def rand(*shape, seed=0, requires_grad=False):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return eagerc.tensor(a, requires_grad=requires_grad)


# ---------------------------------------------------------------- which dtype each op runs in

@pytest.mark.parametrize("low", LOW)
def test_matrix_products_and_convolutions_run_in_the_low_dtype(low):
    a, b = rand(3, 4), rand(4, 5, seed=1)
    w, bias = rand(5, 4, seed=2), rand(5, seed=3)
    img, k = rand(1, 2, 6, 6, seed=4), rand(3, 2, 3, 3, seed=5)
    with autocast("cpu", dtype=low):
        got = {"matmul": a @ b, "mm": eagerc.mm(a, b), "einsum": eagerc.einsum("ij,jk->ik", a, b),
               "linear": F.linear(a, w, bias), "addmm": eagerc.addmm(rand(3, 5, seed=6), a, b),
               "conv2d": F.conv2d(img, k), "conv1d": F.conv1d(rand(1, 2, 6, seed=7), k[:, :, 0])}
    for name, y in got.items():
        assert y.dtype is low, name
    A, B = _np_low(a.detach().numpy(), low), _np_low(b.detach().numpy(), low)
    # the product of the cast inputs, accumulated in float32 and rounded once (as PyTorch's CPU kernels)
    ref = np.matmul(A.astype(np.float32), B.astype(np.float32))
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[low.name]
    for name in ("matmul", "mm", "einsum"):
        np.testing.assert_allclose(got[name].detach().float().numpy(), ref, rtol=eps, atol=eps, err_msg=name)
    ref = np.matmul(A, _np_low(w.detach().numpy(), low).T) + _np_low(bias.detach().numpy(), low)
    np.testing.assert_allclose(got["linear"].detach().numpy().astype(np.float32), ref.astype(np.float32),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("low", LOW)
def test_losses_run_in_float32_and_softmax_layer_norm_keep_the_input_dtype(low):
    x = rand(4, 5)
    t = rand(4, 5, seed=1)
    idx = eagerc.tensor([0, 2, 4, 1])
    with autocast("cpu", dtype=low):
        h = x @ rand(5, 5, seed=2)             # low
        assert h.dtype is low
        for name, loss in {"mse_loss": F.mse_loss(h, t), "l1_loss": F.l1_loss(h, t),
                           "smooth_l1_loss": F.smooth_l1_loss(h, t), "huber_loss": F.huber_loss(h, t),
                           "cross_entropy": F.cross_entropy(h, idx), "nll_loss": F.nll_loss(h, idx),
                           "bce_with_logits": F.binary_cross_entropy_with_logits(h, t.sigmoid()),
                           "kl_div": F.kl_div(h, t.softmax(-1), reduction="batchmean")}.items():
            assert loss.dtype is f32, name
        assert F.softmax(h, -1).dtype is low and F.layer_norm(h, (5,)).dtype is low
        assert h.sum().dtype is low and h.exp().dtype is low   # not on the CPU lists
        assert h.prod().dtype is f32                            # CPU fp32 list
        assert eagerc.cat([x, h]).dtype is f32 and eagerc.cat([h, h]).dtype is low   # promote
        hv = h.float().detach().numpy()
    # mse in float32 of the low-precision product: the reference computed here from its values
    with autocast("cpu", dtype=low):
        mse = F.mse_loss(x @ rand(5, 5, seed=2), t)
    np.testing.assert_allclose(mse.item(), np.mean((hv - t.detach().numpy()) ** 2), rtol=1e-6)


def test_an_op_off_the_lists_and_float64_and_integer_inputs_are_left_alone():
    d = eagerc.tensor(np.ones((2, 2)))               # float64: never autocast (PyTorch's rule)
    i = eagerc.tensor([[1, 2], [3, 4]])
    with autocast("cpu", dtype=f16):
        assert (d @ d).dtype is eagerc.float64
        assert (i @ i).dtype is eagerc.int64
        x = rand(2, 2)
        assert (x + x).dtype is f32 and x.tanh().dtype is f32


def test_gradients_flow_back_to_float32_leaves_exactly_as_with_hand_written_casts():
    x, w = rand(3, 4, requires_grad=True), rand(4, 2, seed=1, requires_grad=True)
    t = rand(3, 2, seed=2)
    with autocast("cpu", dtype=f16):
        loss = F.mse_loss(x @ w, t)
    loss.backward()
    gx, gw = x.grad.detach().numpy().copy(), w.grad.detach().numpy().copy()
    x.grad = w.grad = None
    ref = F.mse_loss((x.half() @ w.half()).float(), t)    # the same casts, written by hand
    ref.backward()
    assert x.grad.dtype is f32 and w.grad.dtype is f32
    np.testing.assert_array_equal(gx, x.grad.detach().numpy())
    np.testing.assert_array_equal(gw, w.grad.detach().numpy())
    np.testing.assert_array_equal(loss.detach().numpy(), ref.detach().numpy())


# ---------------------------------------------------------------- regions: nesting, decorator, state

def test_nesting_enabled_false_and_restoring_the_state():
    a = rand(2, 2)
    assert not eagerc.is_autocast_enabled("cpu")
    with autocast("cpu", dtype=f16):
        assert eagerc.is_autocast_enabled("cpu") and eagerc.get_autocast_dtype("cpu") is f16
        assert eagerc.get_autocast_cpu_dtype() is f16
        with autocast("cpu", enabled=False):
            assert not eagerc.is_autocast_enabled("cpu") and (a @ a).dtype is f32
            with autocast("cpu", dtype=f16):
                assert (a @ a).dtype is f16
        assert (a @ a).dtype is f16
    assert not eagerc.is_autocast_cpu_enabled() and (a @ a).dtype is f32
    assert eagerc.dispatch.autocast_state() is None      # back to the default: apply tests nothing
    with pytest.raises(ValueError):
        with autocast("cpu", dtype=f16):
            raise ValueError("inside")
    assert not eagerc.is_autocast_enabled("cpu")
    assert eagerc.get_autocast_gpu_dtype() is f16 and not eagerc.is_autocast_enabled()


def test_autocast_as_a_decorator_and_the_torch_spellings():
    @autocast("cpu", dtype=f16)
    def f(a):
        return a @ a
    a = rand(2, 2)
    assert f(a).dtype is f16 and (a @ a).dtype is f32

    @autocast("cpu", dtype=f16)
    def nested(n):              # recursion re-enters the same decorator: each call restores its own state
        return (a @ a).dtype if n == 0 else nested(n - 1)
    assert nested(3) is f16 and not eagerc.is_autocast_enabled("cpu")
    scaled = GradScaler("cpu", init_scale=8.0).scale([a, (a, a)])
    assert isinstance(scaled, list) and isinstance(scaled[1], tuple)
    np.testing.assert_array_equal(scaled[1][0].detach().numpy(), a.detach().numpy() * 8)
    assert eagerc.amp.autocast is eagerc.autocast
    with pytest.warns(FutureWarning, match=r"torch.cpu.amp.autocast\(args...\)` is deprecated"):
        ctx = eagerc.cpu.amp.autocast(dtype=f16)
    with ctx:
        assert (a @ a).dtype is f16


def test_set_autocast_functions_and_unsupported_settings():
    a = rand(2, 2)
    try:
        eagerc.set_autocast_dtype("cpu", f16)
        eagerc.set_autocast_enabled("cpu", True)
        assert eagerc.is_autocast_enabled("cpu") and (a @ a).dtype is f16
    finally:
        eagerc.set_autocast_enabled("cpu", False)
        eagerc.set_autocast_cpu_dtype(BF16 if BF16 is not None else f16)
    if BF16 is None:  # the default CPU dtype is still bfloat16's place: back to default is None
        eagerc.dispatch.set_autocast_state(None)
    assert eagerc.dispatch.autocast_state() is None
    with pytest.warns(UserWarning, match="the target dtype float64 is not supported. Disabling autocast"):
        ctx = autocast("cpu", dtype=eagerc.float64)
    with ctx:
        assert (a @ a).dtype is f32
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'tpu'"):
        autocast("tpu")


@pytest.mark.skipif(eagerc.cuda.is_available(), reason="checks the no-GPU fallback")
def test_cuda_autocast_and_scaler_without_a_gpu_disable_themselves_with_a_warning():
    with pytest.warns(UserWarning, match="CUDA is not available. Disabling"):
        ctx = autocast("cuda")
    a = rand(2, 2)
    with ctx:
        assert not eagerc.is_autocast_enabled("cuda") and (a @ a).dtype is f32
    with pytest.warns(UserWarning, match="GradScaler is enabled, but CUDA is not available.  Disabling."):
        s = GradScaler("cuda")
    assert not s.is_enabled() and s.scale(a) is a and s.get_scale() == 1.0
    with pytest.warns(FutureWarning):
        with pytest.warns(UserWarning):
            assert not eagerc.cuda.amp.GradScaler().is_enabled()


def test_each_thread_has_its_own_autocast_state():
    a = rand(2, 2)
    seen = {}
    entered, done = threading.Event(), threading.Event()

    def other():
        entered.wait()
        seen["other"] = ((a @ a).dtype, eagerc.is_autocast_enabled("cpu"))
        done.set()
    t = threading.Thread(target=other)
    t.start()
    with autocast("cpu", dtype=f16):
        entered.set()
        done.wait(30)
        assert (a @ a).dtype is f16
    t.join()
    assert seen["other"] == (f32, False)


def test_weight_casts_are_cached_per_region_and_dropped_after_it():
    from eagerc.amp.autocast_mode import _state
    w = rand(3, 3, requires_grad=True)
    x = rand(3, 3, seed=1)
    with autocast("cpu", dtype=f16):
        y1, y2 = x @ w, x @ w
        cache = _state().cache
        assert len(cache) == 1                           # one cast of w, reused
        (casted,) = [v[2] for v in cache.values()]
        assert casted.dtype is f16 and casted.grad_fn is not None
        with eagerc.no_grad():
            w.mul_(2.0)                                  # an in-place update: the entry is stale
        y3 = x @ w
        np.testing.assert_array_equal(y3.detach().numpy(), np.matmul(x.detach().numpy().astype(np.float16),
                                                            w.detach().numpy().astype(np.float16)))
    assert len(cache) == 0
    with autocast("cpu", dtype=f16, cache_enabled=False):
        x @ w
        assert len(_state().cache) == 0
    (y1.float().sum() + y2.float().sum()).backward()     # both uses reach w through the one cast
    np.testing.assert_allclose(w.grad.detach().numpy(), 2 * x.detach().numpy().sum(0)[:, None].repeat(3, 1), rtol=1e-3)


# ---------------------------------------------------------------- compiled code

def test_compiled_function_retraces_when_the_autocast_state_changes():
    def f(a, b):
        return F.mse_loss(a @ b, a)
    c = eagerc.compile(f)
    a, b = rand(3, 3), rand(3, 3, seed=1)
    plain = c(a, b)
    assert c.traces == 1
    with autocast("cpu", dtype=f16):
        mixed = c(a, b)
        assert c.traces == 2
        want = f(a, b)
        # the cached graph's program (the trace above ran eagerly): its fused float32 mean may
        # round differently from eager's (1 ulp seen)
        np.testing.assert_allclose(c(a, b).item(), want.item(), rtol=1e-6)
        assert c.traces == 2                             # the same state: the cached graph
    assert c(a, b).item() == plain.item() and c.traces == 2   # back outside: the first graph again
    assert mixed.item() == want.item()
    assert mixed.item() != plain.item()                  # the float16 product shows in the loss
    assert any("autocast: off -> cpu to float16" in line for line in c.log), c.log
    first, second = str(c.graphs[0]), str(c.graphs[1])
    assert "cast(" not in first
    assert second.count("= cast(") == 3 and "f16[3,3] = matmul" in second   # a, b down; the product up


# ---------------------------------------------------------------- GradScaler

def _model(seed=0):
    rng = np.random.default_rng(seed)
    w1 = eagerc.tensor(rng.standard_normal((4, 8)).astype(np.float32) * 0.5, requires_grad=True)
    w2 = eagerc.tensor(rng.standard_normal((8, 1)).astype(np.float32) * 0.5, requires_grad=True)
    return [w1, w2]


def _batches(n, overflow_at):
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        x = rng.standard_normal((16, 4)).astype(np.float32)
        if i in overflow_at:
            x[0, 0] = 1e6                                # float16 matmul overflows: inf loss, inf/nan grads
        out.append((x, rng.standard_normal((16, 1)).astype(np.float32)))
    return out


def reference_scaler(n, overflow_at, init_scale, growth_factor, backoff_factor, growth_interval):
    """PyTorch's documented GradScaler algorithm (torch.amp.GradScaler, _amp_update_scale_): the
    scale after each step and which steps were skipped, when exactly `overflow_at` overflow."""
    scale, tracker, scales, skipped = init_scale, 0, [], []
    for i in range(n):
        if i in overflow_at:
            skipped.append(i)
            scale, tracker = scale * backoff_factor, 0
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * growth_factor, 0
        scales.append(scale)
    return scales, skipped, tracker


def run_scaler(n, overflow_at, **opts):
    params = _model()
    opt = eagerc.optim.SGD(params, lr=0.01)
    scaler = GradScaler("cpu", **opts)
    scales, skipped = [], []
    for i, (x, y) in enumerate(_batches(n, overflow_at)):
        opt.zero_grad()
        with autocast("cpu", dtype=f16):
            h = eagerc.tensor(x) @ params[0]
            loss = F.mse_loss(h.relu() @ params[1], eagerc.tensor(y))
        before = [p.detach().numpy().copy() for p in params]
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if all((b == p.detach().numpy()).all() for b, p in zip(before, params)):
            skipped.append(i)
        scales.append(scaler.get_scale())
    return scales, skipped, params, scaler


def test_grad_scaler_recovers_from_injected_overflows_as_pytorch_documents():
    opts = dict(init_scale=2.0 ** 10, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    overflow_at = {2, 3, 8}
    scales, skipped, params, scaler = run_scaler(12, overflow_at, **opts)
    ref_scales, ref_skipped, ref_tracker = reference_scaler(12, overflow_at, **opts)
    assert skipped == ref_skipped == [2, 3, 8]
    assert scales == ref_scales
    assert all(np.isfinite(p.detach().numpy()).all() for p in params)
    assert scaler.state_dict() == {"scale": ref_scales[-1], "growth_factor": 2.0, "backoff_factor": 0.5,
                                   "growth_interval": 3, "_growth_tracker": ref_tracker}
    # by hand: overflows at 2 and 3 halve twice; 3 clean steps (4, 5, 6) double; 8 halves; 9-11 double
    assert ref_scales == [1024.0, 1024.0, 512.0, 256.0, 256.0, 256.0, 512.0, 512.0, 256.0, 256.0, 256.0, 512.0]


def test_unscale_divides_the_gradients_by_the_scale_and_refuses_twice():
    params = _model()
    opt = eagerc.optim.SGD(params, lr=0.1)
    (x, y), = _batches(1, ())
    loss = F.mse_loss(eagerc.tensor(x) @ params[0] @ params[1], eagerc.tensor(y))
    loss.backward()
    plain = [p.grad.detach().numpy().copy() for p in params]
    opt.zero_grad()
    scaler = GradScaler("cpu", init_scale=2.0 ** 8)
    loss = F.mse_loss(eagerc.tensor(x) @ params[0] @ params[1], eagerc.tensor(y))
    scaler.scale(loss).backward()
    np.testing.assert_allclose(params[0].grad.detach().numpy(), plain[0] * 256, rtol=1e-5)
    scaler.unscale_(opt)
    for p, g in zip(params, plain):
        np.testing.assert_allclose(p.grad.detach().numpy(), g, rtol=1e-5)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called on this optimizer"):
        scaler.unscale_(opt)
    scaler.step(opt)                                     # uses the unscaled grads, no second division
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called since the last update"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) is being called after step"):
        scaler.unscale_(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 8                # one clean step of 2000: unchanged


def test_grad_scaler_state_dict_new_scale_and_disabled_passthrough():
    s = GradScaler("cpu", init_scale=4.0, growth_interval=5)
    with pytest.raises(RuntimeError, match="Attempted update but _scale is None"):
        s.update()
    s.scale(rand(2))
    s.update(new_scale=64.0)
    assert s.get_scale() == 64.0
    s.update(new_scale=eagerc.tensor(8.0))
    assert s.get_scale() == 8.0
    t = GradScaler("cpu")
    t.load_state_dict(s.state_dict())
    assert t.state_dict() == s.state_dict() == {"scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                                 "growth_interval": 5, "_growth_tracker": 0}
    with pytest.raises(RuntimeError, match="The source state dict is empty"):
        t.load_state_dict(GradScaler("cpu", enabled=False).state_dict())
    off = GradScaler("cpu", enabled=False)
    x = rand(3)
    assert off.scale(x) is x and off.get_scale() == 1.0 and off.state_dict() == {}
    p = rand(2, requires_grad=True)
    p.grad = eagerc.tensor([float("inf"), 1.0])
    opt = eagerc.optim.SGD([p], lr=1.0)
    off.step(opt)                                        # disabled: a plain step, no inf check
    assert np.isinf(p.detach().numpy()[0])
    with pytest.raises(ValueError, match="growth factor must be > 1.0"):
        GradScaler("cpu", growth_factor=0.5)


def test_the_scaler_refuses_float16_gradients_like_pytorch():
    p = eagerc.tensor(np.ones(2, np.float16), requires_grad=True)
    opt = eagerc.optim.SGD([p], lr=1.0)
    s = GradScaler("cpu")
    s.scale((p * 2).sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients."):
        s.step(opt)


# ---------------------------------------------------------------- bfloat16 (after the merge)

@needs_bf16
def test_cpu_autocast_defaults_to_bfloat16():
    a = rand(2, 2)
    with autocast("cpu"):
        assert eagerc.get_autocast_dtype("cpu") is BF16 and (a @ a).dtype is BF16
        assert F.mse_loss(a @ a, a).dtype is f32


@pytest.mark.skipif(BF16 is not None, reason="eagerc.bfloat16 exists: the default is used")
def test_cpu_autocast_without_bfloat16_asks_for_a_dtype():
    with pytest.raises(RuntimeError, match="no bfloat16 dtype: pass dtype=eagerc.float16"):
        autocast("cpu")


# ---------------------------------------------------------------- the lists

def test_the_cuda_lists_differ_from_the_cpu_lists_as_pytorch_s_do():
    """(tests/test_op_parts.py checks that every listed name is an op or a marked function.)"""
    assert lists.category("cpu", "softmax") is None and lists.category("cuda", "softmax") == "fp32"
    assert lists.category("cpu", "layer_norm") is None and lists.category("cuda", "layer_norm") == "fp32"
    assert lists.category("cpu", "exp") is None and lists.category("cuda", "exp") == "fp32"
    assert lists.category("cpu", "lstm_cell") is None and lists.category("cuda", "lstm_cell") == "lower"
    assert lists.category("cpu", "cat") == "promote" and lists.category("cuda", "cat") is None
    assert lists.category("cpu", "binary_cross_entropy") == "fp32"
    assert lists.category("cuda", "binary_cross_entropy") == "banned"


@pytest.mark.cuda
def test_cuda_lists_on_a_gpu():
    x = rand(4, 4).cuda()
    idx = eagerc.tensor([0, 1, 2, 3]).cuda()
    with autocast("cuda"):
        h = x @ x
        assert h.dtype is f16 and eagerc.get_autocast_gpu_dtype() is f16
        assert F.softmax(h, -1).dtype is f32 and F.layer_norm(h, (4,)).dtype is f32   # CUDA: fp32 list
        assert h.exp().dtype is f32 and h.sum().dtype is f32
        assert F.cross_entropy(h, idx).dtype is f32
        with pytest.raises(RuntimeError, match="binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast"):
            F.binary_cross_entropy(h.float().sigmoid(), h.float().sigmoid())
        assert (rand(4, 4) @ rand(4, 4)).dtype is f32           # CPU tensors: CPU autocast is off
    w = rand(4, 1, requires_grad=True)
    wg = w.detach().cuda().requires_grad_()
    opt = eagerc.optim.SGD([wg], lr=0.1)
    s = GradScaler("cuda", init_scale=4.0)
    with autocast("cuda"):
        loss = F.mse_loss(x @ wg, x[:, :1])
    s.scale(loss).backward()
    s.step(opt)
    s.update()
    assert s.get_scale() == 4.0 and wg.grad.dtype is f32


def scaled_step(model, opt, **scaler_options):
    """(a training step through a new GradScaler, the scaler): scale(loss).backward(), step, update."""
    scaler = GradScaler("cpu", **scaler_options)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach()
    return step, scaler


def test_a_compiled_step_updates_the_scale_its_first_call_made():
    """GradScaler makes its scale on the first scale(): inside a compiled step that call is traced,
    and later compiled calls must read and update that very tensor (not a constant of the graph)."""
    import copy
    import warnings
    eagerc.manual_seed(0)
    eager = eagerc.nn.Linear(6, 4)
    model = copy.deepcopy(eager)

    def make(m):   # the scale doubles every clean step
        return scaled_step(m, eagerc.optim.SGD(m.parameters(), lr=1e-2), init_scale=4.0, growth_interval=1)
    (step_e, scaler_e), (step_c, scaler_c) = make(eager), make(model)
    c = eagerc.compile(step_c, backend="numpy")
    rng = np.random.default_rng(0)
    for i in range(5):
        x, y = eagerc.tensor(rng.standard_normal((3, 6)).astype(np.float32)), eagerc.tensor(rng.integers(0, 4, 3))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # (the inf check's item() splits the graph)
            got = c(x, y)
        np.testing.assert_array_equal(got.numpy(), step_e(x, y).numpy())
        assert scaler_c.get_scale() == scaler_e.get_scale() == 4.0 * 2 ** (i + 1)
        for p, q in zip(eager.parameters(), model.parameters()):
            np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
    assert c.traces == 1
