"""Autocast and GradScaler against PyTorch itself (skipped without it): the output dtypes and
values of each listed op under CPU autocast, and GradScaler's skipped steps and scale sequence
step for step (tests/test_amp.py holds the PyTorch-free checks and the helpers used here)."""
import numpy as np
import pytest

import eagerc
import eagerc.nn.functional as F
from eagerc.amp import autocast
from test_amp import LOW, _batches, _model, run_scaler

@pytest.mark.parametrize("low", LOW)
def test_output_dtypes_match_pytorch_cpu_autocast(low):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as TF
    tlow = {"float16": torch.float16, "bfloat16": torch.bfloat16}[low.name]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4)).astype(np.float32)
    t3 = rng.standard_normal((2, 4, 4)).astype(np.float32)
    img, k = rng.standard_normal((1, 2, 5, 5)).astype(np.float32), rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    idx = np.array([0, 1, 2, 3])

    def cases(m, Fm, T, L):
        x, y, z = T(a), T(t3), T(img)
        xl = x.to(L)
        return {
            "matmul": lambda: m.matmul(x, x), "mm": lambda: m.mm(x, x), "bmm": lambda: m.bmm(y, y),
            "einsum": lambda: m.einsum("ij,jk->ik", x, x), "linear": lambda: Fm.linear(x, x, x[0]),
            "addmm": lambda: m.addmm(x, x, x), "conv2d": lambda: Fm.conv2d(z, T(k)),
            "conv_transpose2d": lambda: Fm.conv_transpose2d(z, T(k).transpose(0, 1)),
            "sdpa": lambda: Fm.scaled_dot_product_attention(y, y, y),
            "prod": lambda: xl.prod(), "sum": lambda: xl.sum(), "softmax": lambda: Fm.softmax(xl, -1),
            "layer_norm": lambda: Fm.layer_norm(xl, (4,)), "exp": lambda: xl.exp(),
            "cat": lambda: m.cat([x, xl]), "stack": lambda: m.stack([x, xl]),
            "mse_loss": lambda: Fm.mse_loss(xl, xl), "l1_loss": lambda: Fm.l1_loss(xl, xl),
            "cross_entropy": lambda: Fm.cross_entropy(xl, T(idx)), "nll_loss": lambda: Fm.nll_loss(xl, T(idx)),
            "bce_logits": lambda: Fm.binary_cross_entropy_with_logits(xl, xl.float().sigmoid()),
            "kl_div": lambda: Fm.kl_div(xl, xl.float().softmax(-1), reduction="batchmean"),
            "cdist": lambda: m.cdist(xl, xl), "quantile": lambda: m.quantile(xl.float(), 0.5),
        }
    e = cases(eagerc, F, eagerc.tensor, low)
    with torch.autocast("cpu", dtype=tlow):
        t_out = {n: f() for n, f in cases(torch, TF, lambda v: torch.tensor(v), tlow).items()}
    with autocast("cpu", dtype=low):
        e_out = {n: f() for n, f in e.items()}
    assert {n: v.dtype.name for n, v in e_out.items()} == \
        {n: str(v.dtype).replace("torch.", "") for n, v in t_out.items()}
    for n in e_out:   # and the values, to the low dtype's precision
        np.testing.assert_allclose(e_out[n].detach().float().numpy(), t_out[n].detach().float().numpy(),
                                   rtol=2e-2, atol=2e-2, err_msg=n)


def test_grad_scaler_matches_pytorch_step_for_step():
    torch = pytest.importorskip("torch")
    opts = dict(init_scale=2.0 ** 10, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    overflow_at = {2, 3, 8}
    scales, skipped, params, _ = run_scaler(12, overflow_at, **opts)
    w1, w2 = [torch.tensor(p0.detach().numpy()) for p0 in _model()]
    w1.requires_grad_(), w2.requires_grad_()
    opt = torch.optim.SGD([w1, w2], lr=0.01)
    scaler = torch.amp.GradScaler("cpu", **opts)
    t_scales, t_skipped = [], []
    for i, (x, y) in enumerate(_batches(12, overflow_at)):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss((torch.tensor(x) @ w1).relu() @ w2, torch.tensor(y))
        before = [w1.detach().clone(), w2.detach().clone()]
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if all(torch.equal(b, p.detach()) for b, p in zip(before, (w1, w2))):
            t_skipped.append(i)
        t_scales.append(scaler.get_scale())
    assert skipped == t_skipped and scales == t_scales
    np.testing.assert_allclose(params[0].detach().numpy(), w1.detach().numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(params[1].detach().numpy(), w2.detach().numpy(), rtol=1e-3, atol=1e-4)
