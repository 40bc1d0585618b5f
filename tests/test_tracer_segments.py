"""Tracer.start_segment / end_segment / replay: a taped run of ops replayed on other tensors
records what running the code on them records (the optimizer rules' each_alike uses it;
tests/test_optim.py checks every rule end to end)."""
import numpy as np

import eagerc
from eagerc import dispatch
from eagerc.compiler.tracer import trace


def _body(t, w):
    w.mul_(0.5)
    w.add_(t * 2 - 1)
    return (w.sqrt() + t).sum()


def _finish(wa, wb):
    return wa * wb


def _args(seed):
    rng = np.random.default_rng(seed)
    return [eagerc.tensor(rng.random((3, 4)).astype(np.float32)) for _ in range(4)]


def test_a_replayed_segment_records_what_running_the_code_records():
    def direct(a, wa, b, wb):
        _body(a, wa)
        _body(b, wb)
        return _finish(wa, wb)

    def replayed(a, wa, b, wb):
        tracer = dispatch.active_tracer()
        tracer.start_segment()
        _body(a, wa)
        segment = tracer.end_segment([a, wa])
        assert segment is not None
        tracer.replay(segment, [b, wb])
        return _finish(wa, wb)

    x, y = _args(0), _args(0)
    g_direct, out_direct, _ = trace(direct, x)
    g_replayed, out_replayed, _ = trace(replayed, y)
    assert g_replayed.dumps() == g_direct.dumps()          # nodes, names, inputs, mutations
    assert [n.loc for n in g_replayed.nodes] == [n.loc for n in g_direct.nodes]
    assert g_direct.mutations and len(g_direct.nodes) == 2 * 7 + 1
    np.testing.assert_array_equal(out_replayed.numpy(), out_direct.numpy())
    for u, v in zip(x, y):   # the in-place updates happened, with the same bits
        np.testing.assert_array_equal(u.numpy(), v.numpy())
    ref = _args(0)[1]   # numpy's own arithmetic for wa
    a = _args(0)[0].numpy()
    np.testing.assert_array_equal(x[1].numpy(), ref.numpy() * np.float32(0.5) + (a * 2 - 1))


def test_a_segment_that_reads_a_new_tensor_or_draws_random_numbers_is_not_replayable():
    segments = []

    def fn(a, wa, b, wb):
        tracer = dispatch.active_tracer()
        tracer.start_segment()
        wa.add_(eagerc.tensor(np.ones((3, 4), np.float32)))   # a constant made inside: not one of the roles
        segments.append(tracer.end_segment([a, wa]))
        tracer.start_segment()
        wa.add_(eagerc.rand_like(a))
        segments.append(tracer.end_segment([a, wa]))
        tracer.start_segment()
        wa.add_(a * 3)
        segments.append(tracer.end_segment([a, wa]))
        return wa

    graph, _, _ = trace(fn, _args(1))
    assert graph is not None
    assert segments[0] is None and segments[1] is None
    assert segments[2] is not None and [e[0] for e in segments[2]] == [0, 0, 1]   # mul, add, commit
