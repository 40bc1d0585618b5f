"""Grad mode, anomaly mode and the active tracer are per thread (issue 10, section 2).

Each test forces the interleaving that used to go wrong with barriers and events -- one
thread's forward pass runs *inside* another thread's backward, no_grad block, anomaly
block or trace -- and checks the results bitwise against the same work done in one
thread. With process-wide modes every one of these fails: the forward records no graph
(backward raises or drops gradients), anomaly sites appear in the other thread, and the
other thread's ops land in the traced graph.
"""
import threading

import numpy as np
import pytest

import eagerc
from eagerc import autograd, dispatch, nn

TIMEOUT = 20  # seconds a barrier waits before the test fails instead of hanging


def run_threads(*fns, sync=()):
    """Run each fn in its own thread; re-raise the first exception; return their results.

    A failing thread aborts the barriers (and sets the events) in `sync`, so the other
    thread stops waiting at once instead of after TIMEOUT."""
    results = [None] * len(fns)
    errors = []

    def body(i, fn):
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: B902 -- reported to the test thread below
            errors.append(e)
            for s in sync:
                s.abort() if isinstance(s, threading.Barrier) else s.set()

    threads = [threading.Thread(target=body, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 3)
        assert not t.is_alive(), "a thread hung"
    if errors:
        raise errors[0]
    return results


# ------------------------------------------------------------ two threads, two models
def make_model(seed):
    """A 2-layer MLP with weights from numpy (no random ops in eagerc), data and targets."""
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    with eagerc.no_grad():
        for p in model.parameters():
            p.copy_(eagerc.from_numpy(rng.standard_normal(tuple(p.shape)).astype(np.float32) * 0.5))
    x = eagerc.from_numpy(rng.standard_normal((5, 6)).astype(np.float32))
    y = eagerc.from_numpy(rng.standard_normal((5, 3)).astype(np.float32))
    return model, x, y


class NoSync:
    def before_forward(self, step):
        pass

    def after_forward(self, step):
        pass

    def in_backward(self, step):
        pass


def train(seed, steps, sync=NoSync()):
    """SGD with momentum for `steps` (MSE loss); returns the losses and final parameters.

    `sync` is called before and after each forward pass, and from a gradient hook, i.e.
    while this thread is inside backward() (where the engine turns grad mode off)."""
    model, x, y = make_model(seed)
    opt = eagerc.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
        sync.before_forward(step)
        opt.zero_grad()
        h = model(x)
        h.register_hook(lambda g, s=step: sync.in_backward(s))
        loss = ((h - y) ** 2).mean()
        sync.after_forward(step)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


class Overlap(NoSync):
    """Two threads: each step one of them (the leader; it alternates) holds its backward open
    while the other runs its whole forward pass, so both directions are exercised."""

    def __init__(self, me, barriers):
        self.me = me
        self.in_backward_b, self.forward_done_b = barriers

    def before_forward(self, step):
        if step % 2 != self.me:
            self.in_backward_b.wait()    # the leader is inside backward() now

    def after_forward(self, step):
        if step % 2 != self.me:
            self.forward_done_b.wait()   # our forward ran entirely inside the leader's backward

    def in_backward(self, step):
        if step % 2 == self.me:
            self.in_backward_b.wait()
            self.forward_done_b.wait()


def test_two_threads_training_two_models_match_one_thread_bitwise():
    steps = 6
    ref = [train(1, steps), train(2, steps)]  # one thread, one model after the other
    barriers = threading.Barrier(2, timeout=TIMEOUT), threading.Barrier(2, timeout=TIMEOUT)
    got = run_threads(lambda: train(1, steps, Overlap(0, barriers)),
                      lambda: train(2, steps, Overlap(1, barriers)), sync=barriers)
    for (ref_losses, ref_params), (losses, params) in zip(ref, got):
        assert losses == ref_losses
        for a, b in zip(params, ref_params):
            np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------ no_grad beside training
class InferenceBeside(NoSync):
    """The trainer's side of the protocol: inside each backward, let the inference thread
    run one batch (it sits inside its no_grad block the whole time)."""

    def __init__(self, barriers):
        self.go, self.done = barriers

    def in_backward(self, step):
        self.go.wait()
        self.done.wait()


@pytest.mark.parametrize("mode", [eagerc.no_grad, eagerc.inference_mode,
                                  lambda: eagerc.set_grad_enabled(False)],
                         ids=["no_grad", "inference_mode", "set_grad_enabled"])
def test_no_grad_in_one_thread_never_affects_a_training_thread(mode):
    steps = 4
    ref = train(3, steps)
    entered = threading.Barrier(2, timeout=TIMEOUT)
    go, done = threading.Barrier(2, timeout=TIMEOUT), threading.Barrier(2, timeout=TIMEOUT)
    w = eagerc.tensor(np.arange(6.0), requires_grad=True)
    seen = []

    def infer():
        with mode():
            entered.wait()                       # the trainer starts only once we are in no_grad
            for _ in range(steps):
                go.wait()                        # the trainer is inside its backward now
                r = (w * 2).sum()
                seen.append((eagerc.is_grad_enabled(), r.requires_grad, r.grad_fn, r.item()))
                done.wait()
        return eagerc.is_grad_enabled()          # back to the default after the block

    def trainer():
        entered.wait()
        return train(3, steps, InferenceBeside((go, done)))

    grad_after, got = run_threads(infer, trainer, sync=(entered, go, done))
    assert got[0] == ref[0]
    for a, b in zip(got[1], ref[1]):
        np.testing.assert_array_equal(a, b)
    assert seen == [(False, False, None, 30.0)] * steps
    assert grad_after is True


def test_backward_turns_grad_mode_off_only_in_its_own_thread():
    x = eagerc.tensor([1.0, 2.0], requires_grad=True)
    in_backward, checked = threading.Event(), threading.Event()
    seen = {}

    def backward_thread():
        y = x * 3
        y.register_hook(lambda g: (seen.setdefault("backward", eagerc.is_grad_enabled()),
                                   in_backward.set(), checked.wait(TIMEOUT), None)[-1])
        y.sum().backward()
        return x.grad.tolist()

    def other_thread():
        assert in_backward.wait(TIMEOUT)
        w = eagerc.tensor([1.0], requires_grad=True)
        z = w * 2
        seen["other"] = (eagerc.is_grad_enabled(), z.requires_grad, z.grad_fn is not None)
        checked.set()

    grad, _ = run_threads(backward_thread, other_thread, sync=(in_backward, checked))
    assert seen == {"backward": False, "other": (True, True, True)}
    assert grad == [3.0, 3.0]


def test_a_new_thread_starts_with_the_default_modes():
    """As in PyTorch: grad mode is per thread and a fresh thread starts with it on."""
    def fresh():
        w = eagerc.tensor([1.0], requires_grad=True)
        y = w * 2
        return (eagerc.is_grad_enabled(), dispatch.anomaly_enabled(), dispatch.active_tracer(),
                y.requires_grad, y.grad_fn.created_at)

    with eagerc.no_grad(), autograd.detect_anomaly():
        (got,) = run_threads(fresh)
        assert not eagerc.is_grad_enabled() and dispatch.anomaly_enabled()  # ours are untouched
    assert got == (True, False, None, True, None)


# ------------------------------------------------------------ detect_anomaly
def test_detect_anomaly_in_one_thread_does_not_turn_on_in_another():
    entered, done = threading.Event(), threading.Event()

    def anomalous():
        with autograd.detect_anomaly():
            x = eagerc.tensor([0.0], requires_grad=True)
            y = x.sqrt()                          # d sqrt(x)/dx = inf at 0
            entered.set()
            assert done.wait(TIMEOUT)
            with pytest.raises(RuntimeError, match="returned nan or inf"):
                y.sum().backward()
            return y.grad_fn.created_at is not None

    def plain():
        assert entered.wait(TIMEOUT)             # the other thread is inside detect_anomaly
        x = eagerc.tensor([0.0], requires_grad=True)
        y = x.sqrt()
        y.sum().backward()                       # no anomaly check here: the gradient is inf
        done.set()
        return dispatch.anomaly_enabled(), y.grad_fn.created_at, x.grad.tolist()

    recorded, (on, site, grad) = run_threads(anomalous, plain, sync=(entered, done))
    assert recorded is True
    assert (on, site, grad) == (False, None, [float("inf")])


# ------------------------------------------------------------ tracing beside eager
def _linear(seed):
    rng = np.random.default_rng(seed)
    lin = nn.Linear(4, 3)
    with eagerc.no_grad():
        lin.weight.copy_(eagerc.from_numpy(rng.standard_normal((3, 4)).astype(np.float32)))
        lin.bias.copy_(eagerc.from_numpy(rng.standard_normal(3).astype(np.float32)))
    return lin


def test_tracing_in_one_thread_never_records_another_threads_eager_ops():
    lin_a, lin_b = _linear(4), _linear(5)
    drop_b = nn.Dropout(0.5).eval()              # identity in eval mode: no random draws
    in_trace, eager_done = threading.Event(), threading.Event()
    xa = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    xb = np.linspace(0, 2, 8, dtype=np.float32).reshape(2, 4)

    def body(x):
        return (lin_a(x).relu() * 2).sum()

    def f(x):
        h = lin_a(x)
        if not in_trace.is_set():                # first call, while it is being traced
            in_trace.set()
            assert eager_done.wait(TIMEOUT)      # the other thread runs eager ops meanwhile
        return (h.relu() * 2).sum()

    reference = eagerc.compile(body)
    with eagerc.no_grad():
        reference(eagerc.from_numpy(xa))
    (ref_graph,) = reference.traced_graphs
    compiled = eagerc.compile(f)

    def tracing_thread():
        with eagerc.no_grad():
            first = compiled(eagerc.from_numpy(xa)).item()
            drop_b.train()                       # only modules f ran are guarded: no retrace
            second = compiled(eagerc.from_numpy(xa)).item()
        return first, second

    def eager_thread():
        assert in_trace.wait(TIMEOUT)
        y = drop_b(lin_b(eagerc.from_numpy(xb)))  # Module calls: global hooks must not reach the trace
        z = (y * 3).exp().sum().item()           # .item() would break the other thread's trace
        buf = eagerc.zeros(3)
        buf.add_(1.0)                            # an in-place op: no mutation in the graph
        eager_done.set()
        return z, y.requires_grad, buf.tolist()

    (first, second), (z, y_grad, buf) = run_threads(tracing_thread, eager_thread,
                                                    sync=(in_trace, eager_done))
    assert compiled.traces == 1                  # traced once, not broken, no retrace
    (graph,) = compiled.traced_graphs
    assert [n.op for n in graph.nodes] == [n.op for n in ref_graph.nodes]
    assert len(graph.inputs) == len(ref_graph.inputs)
    assert not graph.mutations
    wa, ba = lin_a.weight.detach().numpy(), lin_a.bias.detach().numpy()
    wb, bb = lin_b.weight.detach().numpy(), lin_b.bias.detach().numpy()
    expect_a = float((np.maximum(xa @ wa.T + ba, 0) * 2).sum(dtype=np.float32))
    assert first == pytest.approx(expect_a, rel=1e-6) and second == pytest.approx(expect_a, rel=1e-6)
    assert z == pytest.approx(float(np.exp((xb @ wb.T + bb) * 3).sum()), rel=1e-6)
    assert y_grad is True and buf == [1.0, 1.0, 1.0]  # the eager thread kept its own grad mode


def test_compile_guard_reads_the_calling_threads_grad_mode():
    """A compiled call keys on grad mode: a thread with grad on beside a no_grad thread must
    get a result that requires grad and the right gradient."""
    w = eagerc.tensor([1.0, -2.0, 3.0], requires_grad=True)
    compiled = eagerc.compile(lambda x: (x * w).sum())
    x = eagerc.tensor([0.5, 0.25, 2.0])
    entered, done = threading.Event(), threading.Event()

    def no_grad_thread():
        with eagerc.no_grad():
            r = compiled(x)                      # traced with grad off
            entered.set()
            assert done.wait(TIMEOUT)
        return r.requires_grad, r.item()

    def grad_thread():
        assert entered.wait(TIMEOUT)
        r = compiled(x)                          # grad on here: a different specialisation
        r.backward()
        done.set()
        return r.requires_grad, r.item(), w.grad.tolist()

    (ng_req, ng_val), (g_req, g_val, grad) = run_threads(no_grad_thread, grad_thread,
                                                         sync=(entered, done))
    assert (ng_req, ng_val) == (False, 0.5 - 0.5 + 6.0)
    assert (g_req, g_val) == (True, 6.0)
    assert grad == [0.5, 0.25, 2.0]
