"""Learning-rate schedulers vs the closed forms in PyTorch's documentation."""
import math

import pytest

import eagerc
from eagerc import optim
from eagerc.optim import lr_scheduler as S


def _opt(lr=0.1, groups=1, cls=optim.SGD, **kw):
    params = [{"params": [eagerc.zeros(2, requires_grad=True)], "lr": lr * (i + 1)} for i in range(groups)]
    return cls(params, lr=lr, **kw)


def _lrs(opt, sched, n):
    """lr of group 0..k at epochs 0..n-1 (optimizer.step() before each scheduler.step())."""
    out = []
    for _ in range(n):
        out.append([g["lr"] for g in opt.param_groups])
        assert sched.get_last_lr() == out[-1]
        opt.step()
        sched.step()
    return out


def _check(opt, sched, closed, n=30):
    base = [g["initial_lr"] for g in opt.param_groups]
    got = _lrs(opt, sched, n)
    for e in range(n):
        for i, b in enumerate(base):
            assert got[e][i] == pytest.approx(closed(b, e), rel=1e-9, abs=1e-15), (e, i)


def test_step_lr():
    opt = _opt(groups=2)
    _check(opt, S.StepLR(opt, step_size=4, gamma=0.5), lambda b, e: b * 0.5 ** (e // 4))


def test_multistep_lr_with_repeated_milestone():
    opt = _opt()
    ms = [3, 7, 7, 12]
    _check(opt, S.MultiStepLR(opt, milestones=ms, gamma=0.3),
           lambda b, e: b * 0.3 ** sum(m <= e for m in ms))


def test_exponential_lr():
    opt = _opt(groups=2)
    _check(opt, S.ExponentialLR(opt, gamma=0.9), lambda b, e: b * 0.9 ** e)


@pytest.mark.parametrize("eta_min", [0.0, 0.01])
def test_cosine_annealing_lr_including_past_t_max(eta_min):
    opt = _opt()
    T = 10
    _check(opt, S.CosineAnnealingLR(opt, T_max=T, eta_min=eta_min),
           lambda b, e: eta_min + (b - eta_min) * (1 + math.cos(math.pi * e / T)) / 2, n=35)


def test_lambda_lr_per_group():
    opt = _opt(groups=2)
    fns = [lambda e: 0.95 ** e, lambda e: 1.0 / (1 + e)]
    sched = S.LambdaLR(opt, fns)
    got = _lrs(opt, sched, 20)
    for e in range(20):
        assert got[e][0] == pytest.approx(0.1 * 0.95 ** e)
        assert got[e][1] == pytest.approx(0.2 / (1 + e))


@pytest.mark.parametrize("start,end,total", [(1 / 3, 1.0, 5), (1.0, 0.1, 8), (0.25, 0.75, 3)])
def test_linear_lr(start, end, total):
    opt = _opt()
    _check(opt, S.LinearLR(opt, start_factor=start, end_factor=end, total_iters=total),
           lambda b, e: b * (start + (end - start) * min(e, total) / total), n=15)


def test_constant_and_polynomial_lr():
    opt = _opt()
    _check(opt, S.ConstantLR(opt, factor=0.5, total_iters=4), lambda b, e: b * (0.5 if e < 4 else 1.0), n=10)
    opt = _opt()
    _check(opt, S.PolynomialLR(opt, total_iters=6, power=2.0), lambda b, e: b * (1 - min(e, 6) / 6) ** 2, n=10)


def _one_cycle_ref(step, total, max_lr, pct_start, div, final_div, strategy, three_phase):
    """OneCycleLR as documented: phase boundaries at pct_start*total - 1 (and 2x that - 2)."""
    init = max_lr / div
    low = init / final_div
    anneal = ((lambda a, b, p: b + (a - b) / 2 * (math.cos(math.pi * p) + 1)) if strategy == "cos"
              else (lambda a, b, p: a + (b - a) * p))
    e1 = pct_start * total - 1
    if three_phase:
        e2 = 2 * pct_start * total - 2
        phases = [(0, e1, init, max_lr), (e1, e2, max_lr, init), (e2, total - 1, init, low)]
    else:
        phases = [(0, e1, init, max_lr), (e1, total - 1, max_lr, low)]
    for i, (s, e, a, b) in enumerate(phases):
        if step <= e or i == len(phases) - 1:
            return anneal(a, b, (step - s) / (e - s))


@pytest.mark.parametrize("strategy,three_phase", [("cos", False), ("linear", False), ("cos", True), ("linear", True)])
def test_one_cycle_lr(strategy, three_phase):
    total = 40
    opt = _opt(cls=optim.SGD, momentum=0.9)
    sched = S.OneCycleLR(opt, max_lr=0.5, total_steps=total, pct_start=0.25, anneal_strategy=strategy,
                         div_factor=20.0, final_div_factor=100.0, three_phase=three_phase)
    got = _lrs(opt, sched, total)
    for e in range(total):
        assert got[e][0] == pytest.approx(_one_cycle_ref(e, total, 0.5, 0.25, 20.0, 100.0, strategy, three_phase))
    assert got[0][0] == pytest.approx(0.5 / 20)
    assert got[-1][0] == pytest.approx(0.5 / 20 / 100)
    assert max(g[0] for g in got) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="Tried to step"):
        sched.step()


def test_one_cycle_cycles_momentum_and_adam_beta1():
    opt = _opt(momentum=0.9)
    sched = S.OneCycleLR(opt, max_lr=1.0, epochs=2, steps_per_epoch=10)
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.95)  # max_momentum at the start
    for _ in range(2):
        opt.step()
        sched.step()
    for _ in range(3):  # at the end of the warm-up (step pct_start*total - 1 = 5), base_momentum
        opt.step()
        sched.step()
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.85)
    assert opt.param_groups[0]["lr"] == pytest.approx(1.0)
    opt = _opt(cls=optim.Adam, betas=(0.9, 0.99))
    S.OneCycleLR(opt, max_lr=1.0, total_steps=10, base_momentum=0.8, max_momentum=0.9)
    assert opt.param_groups[0]["betas"] == (0.9, 0.99)
    opt = _opt(cls=optim.Adagrad)
    with pytest.raises(ValueError, match="momentum"):
        S.OneCycleLR(opt, max_lr=1.0, total_steps=10)


def test_sequential_lr_warmup_then_decay():
    opt = _opt()
    warm = S.LinearLR(opt, start_factor=0.1, total_iters=5)
    decay = S.ExponentialLR(opt, gamma=0.8)
    sched = S.SequentialLR(opt, [warm, decay], milestones=[5])

    def closed(b, e):
        return b * (0.1 + 0.9 * e / 5) if e < 5 else b * 0.8 ** (e - 5)
    _check(opt, sched, closed, n=15)


def test_sequential_lr_three_schedulers():
    opt = _opt()
    a = S.ConstantLR(opt, factor=0.5, total_iters=100)
    b = S.StepLR(opt, step_size=2, gamma=0.5)
    c = S.CosineAnnealingLR(opt, T_max=6)
    sched = S.SequentialLR(opt, [a, b, c], milestones=[3, 8])

    def closed(base, e):
        if e < 3:
            return base * 0.5
        if e < 8:
            return base * 0.5 ** ((e - 3) // 2)
        return base * (1 + math.cos(math.pi * (e - 8) / 6)) / 2
    _check(opt, sched, closed, n=14)


def test_sequential_lr_errors():
    opt, other = _opt(), _opt()
    with pytest.raises(ValueError, match="same optimizer"):
        S.SequentialLR(opt, [S.StepLR(opt, 2), S.StepLR(other, 2)], milestones=[3])
    with pytest.raises(ValueError, match="number of milestone"):
        S.SequentialLR(opt, [S.StepLR(opt, 2), S.StepLR(opt, 2)], milestones=[3, 4])


def test_state_dict_resume_mid_schedule(tmp_path):
    pytest.importorskip("safetensors")
    from eagerc.serialization import load, save

    def make():
        opt = _opt(momentum=0.9)
        warm = S.LinearLR(opt, start_factor=0.2, total_iters=4)
        main = S.MultiStepLR(opt, milestones=[6, 9, 9], gamma=0.5)
        return opt, S.SequentialLR(opt, [warm, main], milestones=[4])

    opt, sched = make()
    _lrs(opt, sched, 7)
    save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, tmp_path / "s.safetensors")
    expected = _lrs(opt, sched, 8)

    opt2, sched2 = make()
    ck = load(tmp_path / "s.safetensors")
    opt2.load_state_dict(ck["optimizer"])
    sched2.load_state_dict(ck["scheduler"])
    assert _lrs(opt2, sched2, 8) == expected


def test_one_cycle_state_dict_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    from eagerc.serialization import load, save
    opt = _opt(cls=optim.Adam)
    sched = S.OneCycleLR(opt, max_lr=0.3, total_steps=20)
    _lrs(opt, sched, 5)
    save({"o": opt.state_dict(), "s": sched.state_dict()}, tmp_path / "c.safetensors")
    expected = _lrs(opt, sched, 10)
    opt2 = _opt(cls=optim.Adam)  # the usual order: build both, then load both
    sched2 = S.OneCycleLR(opt2, max_lr=0.3, total_steps=20)
    ck = load(tmp_path / "c.safetensors")
    opt2.load_state_dict(ck["o"])
    sched2.load_state_dict(ck["s"])
    assert _lrs(opt2, sched2, 10) == expected


def test_lambda_lr_state_dict_skips_functions():
    opt = _opt()
    sched = S.LambdaLR(opt, lambda e: 0.5 ** e)
    sd = sched.state_dict()
    assert sd["lr_lambdas"] == [None] and "optimizer" not in sd
    sched.step()
    sched.load_state_dict(sd)
    assert sched.last_epoch == 0


def test_initial_lr_and_resume_requires_it():
    opt = _opt(lr=0.3)
    S.StepLR(opt, 3)
    assert opt.param_groups[0]["initial_lr"] == 0.3
    fresh = _opt()
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(fresh, 3, last_epoch=5)


def test_step_with_epoch_uses_closed_form_and_warns():
    opt = _opt()
    sched = S.StepLR(opt, step_size=2, gamma=0.1)
    with pytest.warns(UserWarning, match="deprecated"):
        sched.step(5)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.1 ** 2)


def test_reduce_lr_on_plateau():
    opt = _opt(lr=1.0)
    sched = S.ReduceLROnPlateau(opt, factor=0.5, patience=2, cooldown=1, min_lr=0.1)
    lrs = []
    for loss in [5, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]:
        sched.step(loss)
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == [1.0] * 4 + [0.5] * 4 + [0.25] * 4 + [0.125] * 2
    assert sched.get_last_lr() == [lrs[-1]]


# ---------------------------------------------------------------- SGDR and cyclical rates

def _sgdr_ref(e, T_0, T_mult):
    """(T_cur, T_i) at epoch e (fractional allowed), by walking the restarts."""
    start, T = 0, T_0
    while e >= start + T:
        start += T
        T *= T_mult
    return e - start, T


def _sgdr_lr(base, e, T_0, T_mult, eta_min):
    t_cur, t_i = _sgdr_ref(e, T_0, T_mult)
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2


@pytest.mark.parametrize("T_0,T_mult,eta_min", [(4, 1, 0.0), (3, 2, 0.01), (2, 3, 0.005)])
def test_cosine_annealing_warm_restarts(T_0, T_mult, eta_min):
    opt = _opt(groups=2)
    sched = S.CosineAnnealingWarmRestarts(opt, T_0=T_0, T_mult=T_mult, eta_min=eta_min)
    _check(opt, sched, lambda b, e: _sgdr_lr(b, e, T_0, T_mult, eta_min), n=40)
    # at each restart the lr is back at base_lr
    restarts = [sum(T_0 * T_mult ** k for k in range(i)) for i in range(1, 4)]
    opt = _opt()
    sched = S.CosineAnnealingWarmRestarts(opt, T_0=T_0, T_mult=T_mult, eta_min=eta_min)
    got = _lrs(opt, sched, restarts[-1] + 1)
    assert all(got[r][0] == pytest.approx(0.1) for r in restarts)


@pytest.mark.parametrize("T_mult", [1, 2])
def test_cosine_annealing_warm_restarts_fractional_epochs(T_mult):
    """step(epoch + i / iters) per batch, the documented usage (no deprecation warning)."""
    import warnings
    opt = _opt(groups=2)
    sched = S.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=T_mult, eta_min=0.001)
    iters = 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for epoch in range(12):
            for i in range(iters):
                e = epoch + i / iters
                sched.step(e)
                for g, base in zip(opt.param_groups, [0.1, 0.2]):
                    assert g["lr"] == pytest.approx(_sgdr_lr(base, e, 3, T_mult, 0.001), rel=1e-12), e
                assert sched.last_epoch == epoch
    # interleaved, as documented: step(26), then step() is epoch 27
    sched.step(26)
    sched.step()
    assert sched.last_epoch == 27
    assert opt.param_groups[0]["lr"] == pytest.approx(_sgdr_lr(0.1, 27, 3, T_mult, 0.001), rel=1e-12)
    with pytest.raises(ValueError, match="non-negative epoch"):
        sched.step(-1)


def test_cosine_annealing_warm_restarts_errors_and_state_dict():
    opt = _opt()
    for kw, what in [(dict(T_0=0), "T_0"), (dict(T_0=2.5), "T_0"), (dict(T_0=2, T_mult=0), "T_mult"),
                     (dict(T_0=2, eta_min="0"), "eta_min")]:
        with pytest.raises(ValueError, match=what):
            S.CosineAnnealingWarmRestarts(opt, **kw)
    sched = S.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2)
    _lrs(opt, sched, 5)
    sd = sched.state_dict()
    assert (sd["T_cur"], sd["T_i"], sd["last_epoch"]) == (3, 4, 5) and "optimizer" not in sd
    expected = _lrs(opt, sched, 6)
    opt2 = _opt()
    sched2 = S.CosineAnnealingWarmRestarts(opt2, T_0=2, T_mult=2)
    sched2.load_state_dict(sd)
    opt2.param_groups[0]["lr"] = expected[0][0]
    assert _lrs(opt2, sched2, 6) == expected


def _cyclic_ref(e, up, down, mode="triangular", gamma=1.0, scale_fn=None, scale_mode="cycle"):
    """(fraction of the way from base to max, amplitude scale) at step e, from the cycle
    position: up for `up` steps, down for `down`."""
    total = up + down
    cycle = e // total + 1
    pos = e - (cycle - 1) * total
    frac = pos / up if pos <= up else 1 - (pos - up) / down
    if scale_fn is not None:
        scale = scale_fn(cycle if scale_mode == "cycle" else e)
    else:
        scale = {"triangular": 1.0, "triangular2": 0.5 ** (cycle - 1), "exp_range": gamma ** e}[mode]
    return frac, scale


CYCLIC = [dict(step_size_up=3), dict(step_size_up=2, step_size_down=5, mode="triangular2"),
          dict(step_size_up=4, mode="exp_range", gamma=0.95),
          dict(step_size_up=3, scale_fn=lambda x: 1 / (1 + x), scale_mode="cycle"),
          dict(step_size_up=3, step_size_down=1, scale_fn=lambda x: 0.9 ** x, scale_mode="iterations")]


@pytest.mark.parametrize("kw", CYCLIC, ids=["triangular", "triangular2", "exp_range", "fn_cycle", "fn_iterations"])
def test_cyclic_lr_and_momentum(kw):
    opt = _opt(groups=2, momentum=0.5)
    sched = S.CyclicLR(opt, base_lr=[0.01, 0.02], max_lr=[0.1, 0.3], base_momentum=0.8, max_momentum=0.95, **kw)
    up = kw["step_size_up"]
    down = kw.get("step_size_down", up)
    ref = {k: v for k, v in kw.items() if k in ("mode", "gamma", "scale_fn", "scale_mode")}
    for e in range(30):
        frac, scale = _cyclic_ref(e, up, down, **ref)
        for g, lo, hi in zip(opt.param_groups, [0.01, 0.02], [0.1, 0.3]):
            assert g["lr"] == pytest.approx(lo + (hi - lo) * frac * scale, rel=1e-12, abs=1e-15), e
            assert g["momentum"] == pytest.approx(0.95 - 0.15 * frac * scale, rel=1e-12), e
        assert sched.get_last_lr() == [g["lr"] for g in opt.param_groups]
        opt.step()
        sched.step()


def test_cyclic_lr_cycles_adam_beta1_or_no_momentum():
    opt = _opt(cls=optim.Adam, betas=(0.9, 0.99))
    S.CyclicLR(opt, base_lr=0.001, max_lr=0.01, step_size_up=2)  # max_momentum=0.9 at the start
    assert opt.param_groups[0]["betas"] == (0.9, 0.99) and opt.param_groups[0]["lr"] == 0.001
    sched = S.CyclicLR(opt, base_lr=0.001, max_lr=0.01, step_size_up=2, base_momentum=0.7, max_momentum=0.85)
    sched.step()
    assert opt.param_groups[0]["betas"] == (pytest.approx(0.775), 0.99)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0055)
    opt = _opt(cls=optim.Adagrad)
    with pytest.raises(ValueError, match="momentum or beta1"):
        S.CyclicLR(opt, base_lr=0.001, max_lr=0.01)
    sched = S.CyclicLR(opt, base_lr=0.001, max_lr=0.01, step_size_up=4, cycle_momentum=False)
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.001 + 0.009 / 4) and "momentum" not in opt.param_groups[0]
    with pytest.raises(ValueError, match="mode is invalid"):
        S.CyclicLR(opt, base_lr=0.001, max_lr=0.01, mode="sawtooth", cycle_momentum=False)
    with pytest.raises(ValueError, match="max_lr"):
        S.CyclicLR(_opt(groups=2), base_lr=0.001, max_lr=[0.1, 0.2, 0.3], cycle_momentum=False)


def test_cyclic_lr_state_dict_keeps_a_callable_objects_attributes(tmp_path):
    pytest.importorskip("safetensors")
    from eagerc.serialization import load, save

    class Decay:
        def __init__(self):
            self.rate = 0.5

        def __call__(self, cycle):
            return self.rate ** (cycle - 1)

    def make():
        opt = _opt(momentum=0.9)
        return opt, S.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=2, scale_fn=Decay())

    opt, sched = make()
    sched._scale_fn_custom.rate = 0.25
    _lrs(opt, sched, 5)
    sd = sched.state_dict()
    assert sd["_scale_fn_custom"] == {"rate": 0.25} and "_scale_fn_ref" not in sd
    save({"o": opt.state_dict(), "s": sd}, tmp_path / "c.safetensors")
    expected = _lrs(opt, sched, 9)
    opt2, sched2 = make()
    ck = load(tmp_path / "c.safetensors")
    opt2.load_state_dict(ck["o"])
    sched2.load_state_dict(ck["s"])
    assert sched2._scale_fn_custom.rate == 0.25
    assert _lrs(opt2, sched2, 9) == expected
    lam = S.CyclicLR(_opt(momentum=0.9), base_lr=0.01, max_lr=0.1, scale_fn=lambda c: 1.0)
    assert lam.state_dict()["_scale_fn_custom"] is None  # a function is not state


def test_new_schedulers_match_torch():
    torch = pytest.importorskip("torch")

    def run(lib, make, n=25, epochs=None):
        groups = [{"params": [lib.zeros(2, requires_grad=True)]},
                  {"params": [lib.zeros(1, requires_grad=True)], "lr": 0.2}]
        opt = lib.optim.SGD(groups, lr=0.1, momentum=0.9)
        sched = make(lib.optim.lr_scheduler, opt)
        out = []
        for i in range(n):
            opt.step()
            sched.step() if epochs is None else sched.step(epochs[i])
            out.append([(g["lr"], g["momentum"]) for g in opt.param_groups])
        return out

    makes = [lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01),
             lambda S, o: S.CyclicLR(o, base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=3, step_size_down=5,
                                     mode="triangular2"),
             lambda S, o: S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4, mode="exp_range", gamma=0.9)]
    for make in makes:
        assert run(eagerc, make) == run(torch, make)
    epochs = [0.3 * i for i in range(25)]
    assert run(eagerc, makes[0], epochs=epochs) == run(torch, makes[0], epochs=epochs)
