"""@compile: guards and retracing, the specialisation limit, dynamic shapes, graph breaks and
fullgraph, functionalised in-place updates, random streams, explain -- every compiled
result checked against the same call run eagerly."""
import copy
import logging
import os
import warnings

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
from eagerc.compiler import GraphBreak, explain

HERE = os.path.basename(__file__)


def _same(a, b, rtol=1e-6):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y, rtol)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k], rtol)
    elif isinstance(a, eagerc.Tensor):
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(b.numpy(force=True), a.numpy(force=True), rtol=rtol, atol=rtol * 1e-2)
    else:
        assert a == b


def _mlp(seed=0, d_in=16, hidden=32, d_out=4):
    eagerc.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, d_out)).eval()


@pytest.fixture(params=["numpy", "interpreter"])
def backend(request):
    return request.param


@pytest.fixture(autouse=True)
def _no_grad():
    with eagerc.no_grad():
        yield


# ---------------------------------------------------------------- cache and guards

def test_cached_call_does_not_retrace(backend):
    m = _mlp()
    c = eagerc.compile(m, backend=backend)
    x = eagerc.randn(8, 16)
    for _ in range(4):
        _same(m(x), c(x))
    cf = c._compiled
    assert cf.traces == 1
    (entry,) = cf.entries.values()
    assert entry.calls == 3 and not entry.eager
    assert "linear" in str(cf.graphs[0]) and cf.code()
    assert c.traces == 1 and c.log == cf.log and c.graphs and c.code()  # the module wrapper shows them


def test_garbage_collector_pauses_while_tracing_and_compiling():
    """A trace and its compile make many objects; the collector waits, then runs as before."""
    import gc
    runs = []

    def count(phase, info):
        if phase == "start":
            runs.append(info["generation"])

    def f(x):
        junk = [[] for _ in range(5000)]    # containers enough to set off a collection
        for j in junk:
            j.append(j)
        return (x * 2).sum()

    x = eagerc.randn(4, 3)
    gc.callbacks.append(count)
    try:
        f(x)
        assert runs, "the eager call collects"
        runs.clear()
        c = eagerc.compile(f)
        np.testing.assert_allclose(c(x).numpy(), (x.numpy() * 2).sum(), rtol=1e-6)
        assert runs == [] and gc.isenabled()            # traced and compiled without a collection
        gc.disable()
        try:                                            # a caller's own pause stays as it was
            eagerc.compile(f)(x)
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(count)


def _retrace_log(caplog, fn, calls, **opts):
    c = eagerc.compile(fn, dynamic=False, **opts)
    with caplog.at_level(logging.INFO, logger="eagerc.compile"):
        for args in calls:
            _same(fn(*args), c(*args))
    return c, [r.getMessage() for r in caplog.records if "retrace" in r.getMessage()]


def test_shape_guard_retraces_and_logs_why_and_where(caplog):
    c, msgs = _retrace_log(caplog, lambda x: x * 2, [(eagerc.ones(2, 3),), (eagerc.ones(4, 3),)])
    assert c.traces == 2
    assert len(msgs) == 1 and "tensor argument 0 shape: [2, 3] -> [4, 3]" in msgs[0]
    where = msgs[0].split("retrace at ")[1].split(":")[0]  # the user's file, whatever its folder's name
    assert f"{HERE}:" in msgs[0] and os.path.samefile(where, __file__)
    assert any("[2, 3] -> [4, 3]" in line and HERE in line for line in c.log)


def test_dtype_guard(caplog):
    c, msgs = _retrace_log(caplog, lambda x: x + 1, [(eagerc.ones(3),), (eagerc.ones(3, dtype=eagerc.float64),)])
    assert c.traces == 2 and "dtype: float32 -> float64" in msgs[0]


def test_requires_grad_guard(caplog):
    c, msgs = _retrace_log(caplog, lambda x: x * 3, [(eagerc.ones(3),), (eagerc.ones(3, requires_grad=True),)])
    assert c.traces == 2 and "requires_grad: False -> True" in msgs[0]


def test_grad_mode_guard(caplog):
    f = lambda x: x * 3  # noqa: E731
    c = eagerc.compile(f)
    x = eagerc.ones(3)
    with caplog.at_level(logging.INFO, logger="eagerc.compile"):
        c(x)
        with eagerc.enable_grad():
            c(x)
    assert c.traces == 2
    assert any("grad mode: False -> True" in r.getMessage() for r in caplog.records)


def test_structure_guards(caplog):
    x, y = eagerc.ones(2), eagerc.full((2,), 2.0)
    f = lambda a: sum(a.values()) if isinstance(a, dict) else a[0] * a[1]  # noqa: E731
    c, msgs = _retrace_log(caplog, f, [((x, y),), ([x, y],), ({"a": x, "b": y},), ((x, y, x),)])
    assert c.traces == 4
    assert all("argument structure" in m for m in msgs)
    assert "((T, T),) -> ([T, T],)" in msgs[0]


def test_python_scalar_value_guard(caplog):
    f = lambda x, k: x * k  # noqa: E731
    x = eagerc.ones(3)
    c, msgs = _retrace_log(caplog, f, [(x, 2.0), (x, 2.0), (x, 3.0), (x, 3), (x, True)])
    assert c.traces == 4
    assert "(T, 2.0) -> (T, 3.0)" in msgs[0]
    _same(c(x, 3.0), x * 3.0)


def test_kwargs_and_none_structure():
    f = lambda x, scale=None, bias=None: x * (1.0 if scale is None else scale) + (0 if bias is None else bias)  # noqa
    c = eagerc.compile(f)
    x, b = eagerc.randn(4), eagerc.randn(4)
    for kw in [{}, {"scale": 2.0}, {"bias": b}, {"scale": 2.0, "bias": b}, {}]:
        _same(f(x, **kw), c(x, **kw))
    assert c.traces == 4


def test_global_and_closure_scalars_are_guarded():
    global SCALE
    SCALE = 2.0
    shift = [1.0]

    def make(s):
        def f(x):
            return x * SCALE + s
        return f
    f = make(shift[0])
    c = eagerc.compile(f)
    x = eagerc.ones(3)
    for scale in (2.0, 5.0):
        SCALE = scale
        c(x)                                           # (re)traces: eager's results
        _same(f(x), c(x))                              # the program traced at this value
    assert c.traces == 2 and "global/closure value SCALE: 2.0 -> 5.0" in c.log[-1]


def test_module_training_flag_guard(caplog):
    eagerc.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    c = eagerc.compile(m)
    x = eagerc.randn(4, 8)
    c(x)
    m.eval()
    with caplog.at_level(logging.INFO, logger="eagerc.compile"):
        _same(m(x), c(x))
    assert c._compiled.traces == 2
    assert any("1.training True -> False" in r.getMessage() for r in caplog.records)
    m.train()
    c(x)  # back to the first specialisation: cached
    assert c._compiled.traces == 2


def test_training_flag_of_a_module_used_by_a_plain_function():
    eagerc.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))

    @eagerc.compile
    def f(x):
        return model(x) * 2

    x = eagerc.randn(3, 4)
    f(x)
    model.eval()
    _same(model(x) * 2, f(x))  # dropout off: must not reuse the training graph
    assert f.traces == 2
    assert "model.weight" not in str(f.graphs[0]) and "model.0.weight" in str(f.graphs[0])


def test_aliased_arguments_are_guarded():
    def f(a, b):
        a.add_(1)
        return b * 2

    c = eagerc.compile(f)
    for alias in [False, True, False, True]:
        xe = eagerc.ones(3)
        ye = xe if alias else eagerc.ones(3)
        xc = eagerc.ones(3)
        yc = xc if alias else eagerc.ones(3)
        _same(f(xe, ye), c(xc, yc))
        _same(xe, xc)
    assert c.traces == 2


def test_parameter_changes_are_seen():
    m = _mlp()
    c = eagerc.compile(m)
    x = eagerc.randn(4, 16)
    c(x)
    m[0].weight.mul_(2.0)  # in place: the graph reads parameters by reference
    _same(m(x), c(x))
    assert c._compiled.traces == 1
    m[2].weight = nn.Parameter(eagerc.randn(32, 32))  # replaced: retrace
    _same(m(x), c(x))
    assert c._compiled.traces == 2 and "2.weight was replaced" in c._compiled.log[-1]
    m.double()
    x64 = x.double()
    _same(m(x64), c(x64))


def test_device_is_part_of_the_key():
    c = eagerc.compile(lambda x: x + 1)
    key = c.keys.of((eagerc.ones(2),), {})[0]
    assert key[1][0][2] == "cpu"


@pytest.mark.cuda
def test_device_guard_retraces_on_cuda():
    c = eagerc.compile(lambda x: x * 2, dynamic=False)
    x = eagerc.ones(3)
    _same(x * 2, c(x))
    xg = x.cuda()
    np.testing.assert_allclose(c(xg).cpu().numpy(), (x * 2).numpy())
    assert c.traces == 2 and "device" in c.log[-1]


def test_max_graphs_then_eager_with_a_warning(caplog):
    f = lambda x: x * 2 + 1  # noqa: E731
    c = eagerc.compile(f, dynamic=False, max_graphs=3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(2, 8):
            _same(f(eagerc.ones(n)), c(eagerc.ones(n)))
        _same(f(eagerc.ones(2)), c(eagerc.ones(2)))  # a cached key still runs compiled
    assert c.traces == 3
    msgs = [str(x.message) for x in w if "max_graphs" in str(x.message)]
    assert len(msgs) == 1 and x_file(w, "max_graphs") == HERE
    assert any("max_graphs" in line for line in c.log)


def x_file(w, text):
    return next(os.path.basename(x.filename) for x in w if text in str(x.message))


def test_compile_a_module_class():
    @eagerc.compile
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(x).relu()

    net = Net()
    x = eagerc.randn(5, 3)
    net(x)                                             # the first call traces: eager's results
    _same(nn.Module.__call__(net, x), net(x))
    assert net._compiled_call.traces == 1


# ---------------------------------------------------------------- dynamic shapes

def test_batch_sweep_1_to_64_traces_at_most_twice(backend):
    m = _mlp()
    c = eagerc.compile(m, backend=backend)
    for b in range(1, 65):
        x = eagerc.randn(b, 16)
        _same(m(x), c(x), rtol=1e-5)
    cf = c._compiled
    assert cf.traces <= 2, cf.log
    sym = [g for g in cf.graphs if "s0" in str(g)]
    assert sym and "f32[s0,16]" in str(sym[0])


def test_dynamic_true_from_the_first_call():
    m = _mlp()
    c = eagerc.compile(m, dynamic=True)
    for b in [8, 3, 17, 64, 1, 2]:
        x = eagerc.randn(b, 16)
        _same(m(x), c(x), rtol=1e-5)
    assert c._compiled.traces == 3  # the first call, the synthetic trace, size 1 (specialised)
    assert "symbolic" in c._compiled.log[1]


def test_dynamic_false_never_generalises():
    c = eagerc.compile(lambda x: x * 2, dynamic=False)
    for b in range(2, 6):
        c(eagerc.ones(b))
    assert c.traces == 4


class TinyGPT(nn.Module):
    def __init__(self, vocab=30, c=16, block=24):
        super().__init__()
        self.block = block
        self.tok, self.pos = nn.Embedding(vocab, c), nn.Embedding(block, c)
        self.ln, self.qkv, self.head = nn.LayerNorm(c), nn.Linear(c, 3 * c), nn.Linear(c, vocab)

    def forward(self, idx):
        B, T = idx.shape
        assert T <= self.block
        x = self.tok(idx) + self.pos(eagerc.arange(T))
        q, k, v = self.qkv(self.ln(x)).split(x.shape[-1], dim=2)
        att = (q @ k.transpose(1, 2)) * 0.25
        att = att.masked_fill(eagerc.tril(eagerc.ones(T, T)) == 0, float("-inf")).softmax(-1)
        y = (att @ v).reshape(B * T, -1)
        return self.head(y).reshape(B, T, -1)


def test_batch_and_sequence_sizes_become_symbols():
    eagerc.manual_seed(0)
    m = TinyGPT().eval()
    c = eagerc.compile(m)
    for B, T in [(2, 8), (3, 8), (4, 9), (5, 12), (2, 24), (7, 3), (1, 5), (6, 2)]:
        idx = eagerc.randint(0, 30, (B, T))
        _same(m(idx), c(idx), rtol=1e-5)
    cf = c._compiled
    assert cf.traces <= 5, cf.log  # 2x8, synthetic B, synthetic B+T, the specialised B=1
    g = next(e.graph for e in cf.entries.values() if e.dynamic is not None)
    text = str(g)
    assert "arg0: i64[s0,s1]" in text and "'s0*s1'" in text and "end='s1'" in text
    d = next(e.dynamic for e in cf.entries.values() if e.dynamic is not None)
    assert ("s1", "__le__", 24, False, True) in d.guards  # the assert on T became a guard


def test_size_used_as_a_python_number_stays_static():
    f = lambda x: x.sum(0) * (1.0 / x.shape[0])  # noqa: E731  (a float computed from a size)
    c = eagerc.compile(f)
    for b in range(2, 7):
        x = eagerc.randn(b, 3)
        c(x)                                           # a new size traces: eager's results
        _same(f(x), c(x))                              # this size's program
    assert c.traces == 6  # 5 sizes + the synthetic trace that found the number
    assert any("stays static" in line and "computed from a size" in line for line in c.log)


def test_a_size_as_the_operand_of_a_tensor_op_is_symbolic():
    """`x.sum(0) / x.shape[0]`: the integer becomes a 0-d size scalar of the symbolic graph."""
    f = lambda x: x.sum(0) / x.shape[0] - x.shape[0]  # noqa: E731
    c = eagerc.compile(f)
    for b in range(2, 9):
        x = eagerc.randn(b, 3)
        np.testing.assert_array_equal(c(x).numpy(), x.numpy().sum(0) / b - b)
    assert c.traces == 2, c.log
    g = next(e.graph for e in c.entries.values() if e.dynamic is not None)
    assert "value='s0'" in str(g)


def test_branch_on_a_size_is_a_guard_of_the_symbolic_graph():
    def f(x):
        if x.shape[0] > 10:
            return x * 2
        return x * 3
    c = eagerc.compile(f)
    for b in [4, 5, 6, 11, 12, 13, 7, 30, 2]:
        x = eagerc.ones(b, 3)
        _same(f(x), c(x))
    assert c.traces == 4, c.log
    assert any("where not (s0 > 10)" in line for line in c.log)
    assert any("where s0 > 10" in line for line in c.log)


def test_functions_that_update_tensors_become_dynamic():
    """An updated buffer keeps its static shape, an updated argument takes the symbolic one; the
    trace at a synthetic size and the checks leave no update behind (a sum per call, below)."""
    def f(x, buf):
        buf.add_(x.sum(0))
        x.mul_(2)
        return x * 2
    c = eagerc.compile(f)
    be, bc = eagerc.zeros(3), eagerc.zeros(3)
    total = np.zeros(3, np.float32)
    for b in [2, 3, 4, 7, 2, 9]:
        x = eagerc.randn(b, 3)
        xe, xc = x.clone(), x.clone()
        total += x.numpy().sum(0)
        _same(f(xe, be), c(xc, bc))
        _same(be, bc)
        _same(xe, xc)
        np.testing.assert_allclose(bc.numpy(), total, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(xc.numpy(), x.numpy() * 2)
    assert c.traces == 2 and any("now treats arg 0 dim 0 (s0) as symbolic" in line for line in c.log), c.log


def test_dynamic_shapes_with_dropout_keep_the_random_stream():
    eagerc.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    c = eagerc.compile(copy.deepcopy(m))
    sizes = [3, 3, 4, 5, 6, 6, 2, 9]
    eagerc.manual_seed(1)
    eager = [m(eagerc.ones(b, 4)) for b in sizes]
    eagerc.manual_seed(1)
    comp = [c(eagerc.ones(b, 4)) for b in sizes]
    for a, b in zip(eager, comp):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert c._compiled.traces == 2


# ---------------------------------------------------------------- graph breaks and fullgraph

def f_bool(x):
    if x.sum() > 0:
        return x * 2
    return x


def f_item(x):
    return x * x.max().item()


def f_tolist(x):
    return x * len([v for v in x.tolist() if v > 0])


def f_numpy(x):
    return x * float(x.numpy().sum())


def f_nonzero(x):
    return x.nonzero() * 2


def f_masked_select(x):
    return eagerc.masked_select(x, x > 0).sum()


def f_mask_index(x):
    return x[x > 0] * 2


BREAKS = [(f_bool, "bool()"), (f_item, "item()"), (f_tolist, "tolist()"), (f_numpy, "numpy()"),
          (f_nonzero, "data-dependent size (nonzero"), (f_masked_select, "data-dependent size (masked_select"),
          (f_mask_index, "data-dependent size (boolean-mask indexing")]


def _line_of(fn, text):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


SPLIT = {"f_bool", "f_item"}  # bool() and item() split the graph (tests/test_graph_breaks.py)


@pytest.mark.parametrize("fn,what", BREAKS, ids=[f.__name__ for f, _ in BREAKS])
def test_graph_break_runs_eagerly_and_names_the_user_line(fn, what):
    c = eagerc.compile(fn)
    x = eagerc.tensor([1.0, -2.0, 3.0])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r1 = c(x)
        r2 = c(x)  # remembered as eager (or split): no second warning
    _same(fn(x), r1)
    _same(fn(x), r2)
    msgs = [x for x in w if "graph break" in str(x.message)]
    assert len(msgs) == 1
    msg = str(msgs[0].message)
    body = {"f_bool": "x.sum() > 0", "f_item": "item()", "f_tolist": "tolist()", "f_numpy": "numpy()",
            "f_nonzero": "nonzero()", "f_masked_select": "eagerc.masked_select", "f_mask_index": "x[x > 0]"}
    assert what in msg and f"{HERE}:{_line_of(fn, body[fn.__name__])}" in msg
    assert os.path.basename(msgs[0].filename) == HERE  # the warning points at the call
    if fn.__name__ in SPLIT:  # compiled in pieces around the break
        assert "the graph is split there" in msg
        assert c.traces == 1 and c.entries and all(e.split is not None and not e.eager for e in c.entries.values())
        assert all(e.calls == 1 for e in c.entries.values())  # the second call ran the pieces
    else:
        assert c.traces == 1 and c.entries and all(e.eager for e in c.entries.values())


@pytest.mark.parametrize("fn,what", BREAKS, ids=[f.__name__ for f, _ in BREAKS])
def test_fullgraph_makes_a_break_an_error(fn, what):
    c = eagerc.compile(fn, fullgraph=True)
    with pytest.raises(GraphBreak, match="fullgraph=True") as e:
        c(eagerc.tensor([1.0, -2.0, 3.0]))
    assert what in str(e.value) and HERE in str(e.value)


def test_fullgraph_error_cannot_be_swallowed():
    def f(x):
        try:
            k = x.sum().item()
        except RuntimeError:
            k = 1.0
        return x * k
    with pytest.raises(GraphBreak):
        eagerc.compile(f, fullgraph=True)(eagerc.ones(2))


def test_untraceable_write_is_a_break_not_a_silent_difference():
    def f(x):
        x.detach().add_(1)  # shares x's memory behind the tracer's back
        return x * 1
    c = eagerc.compile(f)
    xe, xc = eagerc.ones(3), eagerc.ones(3)
    with pytest.warns(UserWarning, match="shared with arg0"):
        _same(f(xe), c(xc))
    _same(f(xe), c(xc))
    _same(xe, xc)


# ---------------------------------------------------------------- in-place updates and views

def _grid():
    return eagerc.arange(12.0).reshape(3, 4)


def add_(x):
    x.add_(1)
    return x * 2


def setitem(x):
    x[0] = 5.0
    x[1, 2] = -1.0
    return x.sum()


def row_mul_(x):
    x[0].mul_(2)
    return x + 0


def flat_view(x):
    v = x.view(-1)
    v[3:5].add_(10)
    return v * 1


def transposed(x):
    x.t()[1].fill_(7.0)
    return x.t().sum(0)


def stale_view(x):
    v = x[1]
    x.mul_(3)
    return v + 0


def several(x):
    x.add_(1)
    x.mul_(2)
    x.sub_(3)
    return x


def slice_iadd(x):
    x[:, 1:3] += 1
    return x


def copy_into(x):
    x.copy_(x * 2)


def nested_views(x):
    x[1:][0][1:3].add_(100)
    return x.clone()


def diagonal_write(x):
    x[:3, :3].diagonal().zero_()
    return x


INPLACE = [add_, setitem, row_mul_, flat_view, transposed, stale_view, several, slice_iadd, copy_into,
           nested_views, diagonal_write]


@pytest.mark.parametrize("fn", INPLACE, ids=[f.__name__ for f in INPLACE])
def test_inplace_updates_of_arguments_match_eager_after_n_calls(fn, backend):
    c = eagerc.compile(fn, backend=backend)
    xe, xc = _grid(), _grid()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no graph break
        for _ in range(4):
            _same(fn(xe), c(xc))
            _same(xe, xc)
    assert c.traces == 1 and c.graphs[0].mutations


def test_returning_the_updated_argument_returns_that_tensor():
    c = eagerc.compile(add_)
    x = eagerc.ones(3)
    c(x)
    c2 = eagerc.compile(lambda t: t.add_(1))
    y = eagerc.ones(2)
    c2(y)
    assert c2(y) is y and y.tolist() == [3.0, 3.0]


class Running(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("avg", eagerc.ones(4))
        self.register_buffer("count", eagerc.zeros((), dtype=eagerc.int64))

    def forward(self, x):
        with eagerc.no_grad():
            self.avg.mul_(0.9)
            self.avg.add_(x.mean(0) * 0.1)
            self.count += 1
        return self.fc(x) * self.avg


def test_buffer_updates_after_n_calls_equal_n_eager_calls(backend):
    me = Running()
    mc = copy.deepcopy(me)
    c = eagerc.compile(mc, backend=backend)
    for i in range(6):
        x = eagerc.randn(3, 4)
        _same(me(x), c(x))
    _same(me.avg, mc.avg)
    assert mc.count.item() == 6
    assert c._compiled.traces == 1
    assert {t for t, _ in c._compiled.graphs[0].mutations} == {"avg", "count"}


def test_batchnorm_running_stats_under_compile():
    eagerc.manual_seed(0)
    me = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6))
    mc = copy.deepcopy(me)
    c = eagerc.compile(mc)
    for _ in range(5):
        x = eagerc.randn(8, 5)
        _same(me(x), c(x), rtol=1e-5)
    _same(me[1].running_mean, mc[1].running_mean, rtol=1e-5)
    _same(me[1].running_var, mc[1].running_var, rtol=1e-5)
    assert mc[1].num_batches_tracked.item() == 5


# ---------------------------------------------------------------- random numbers

def test_random_ops_give_the_eager_numbers_for_the_same_seed(backend):
    def f(x):
        eagerc.rand(3)  # unused (dropped by passes) but it moves the stream in eager mode
        noise = eagerc.randn(x.shape[0], 4)
        return x + noise * 0.1 + eagerc.rand(4)

    c = eagerc.compile(f, backend=backend)
    for seed in (5, 6):
        eagerc.manual_seed(seed)
        eager = [f(eagerc.ones(2, 4)) for _ in range(4)]
        eagerc.manual_seed(seed)
        comp = [c(eagerc.ones(2, 4)) for _ in range(4)]
        for a, b in zip(eager, comp):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert not np.array_equal(comp[0].numpy(), comp[1].numpy())  # fresh numbers per call
    assert c.traces == 1  # reseeding rebuilds the program with the new seed, no retrace
    assert any(line.startswith("reseeded") for line in c.log)


def test_dropout_in_train_mode_under_no_grad(backend):
    eagerc.manual_seed(0)
    me = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.3), nn.ReLU(), nn.Linear(16, 3)).train()
    mc = copy.deepcopy(me)
    c = eagerc.compile(mc, backend=backend)
    eagerc.manual_seed(42)
    eager = [me(eagerc.ones(4, 6)) for _ in range(5)]
    eagerc.manual_seed(42)
    comp = [c(eagerc.ones(4, 6)) for _ in range(5)]
    for a, b in zip(eager, comp):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert c._compiled.traces == 1


def test_explicit_generator():
    g = eagerc.Generator().manual_seed(3) if hasattr(eagerc, "Generator") else None
    if g is None:
        pytest.skip("no Generator")
    f = lambda x: x + eagerc.rand(3, generator=g)  # noqa: E731
    c = eagerc.compile(f)
    g.manual_seed(3)
    eager = [f(eagerc.zeros(3)) for _ in range(3)]
    g.manual_seed(3)
    comp = [c(eagerc.zeros(3)) for _ in range(3)]
    for a, b in zip(eager, comp):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# ---------------------------------------------------------------- explain

def test_explain_reports_graph_and_guards():
    m = _mlp()
    report = explain(m, eagerc.randn(2, 16))
    assert report.graph_count == 1 and report.break_count == 0 and report.ops == 5
    assert "linear(arg0, 0.weight, 0.bias)" in report
    assert "tensor argument 0: float32[2, 16] on cpu" in report.guards
    assert "grad mode: False" in report.guards
    assert any(g.startswith("0.weight is the same tensor") for g in report.guards)


def test_explain_reports_breaks():
    report = explain(f_item, eagerc.ones(3))
    assert report.graph_count == 0 and report.break_count == 1
    assert "item()" in report and f"{HERE}:{_line_of(f_item, 'item()')}" in report


def test_explain_module_training_flags():
    m = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1))
    report = explain(eagerc.compile(m), eagerc.ones(1, 2))
    assert "1.training == True" in report.guards


def test_module_defined_after_the_decorator_and_compiled_methods():
    @eagerc.compile
    def f(x):
        return late(x)

    global late
    late = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    x = eagerc.randn(2, 3)
    f(x)
    late.eval()
    _same(late(x), f(x))
    assert f.traces == 2 and "late.0.weight" in str(f.graphs[-1])

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        @eagerc.compile
        def forward(self, x):
            return self.fc(x) * 2

    a, b = Net(), Net()
    _same(a.fc(x) * 2, a(x))
    _same(b.fc(x) * 2, b(x))  # another instance: another key (identity), its own weights
    _same(a.fc(x) * 2, a(x))
    assert Net.forward.traces == 2 and "fc.weight" in str(Net.forward.graphs[0])


# ---------------------------------------------------------------- the default backend

_needs_cc = pytest.mark.skipif(not __import__("shutil").which(os.environ.get("EAGERC_CC") or "cc"),
                               reason="no C compiler")


@_needs_cc
def test_default_backend_is_c_when_a_compiler_works():
    x = np.random.default_rng(0).standard_normal((64, 1100)).astype(np.float32)
    comp = eagerc.compile(lambda a: (a * 2).exp() / (a * 2).exp().sum(-1, keepdim=True))
    assert comp.backend_name is None            # chosen at the first trace, from the call's tensors
    with eagerc.no_grad():
        got = comp(eagerc.tensor(x)).numpy()
        got2 = comp(eagerc.tensor(x)).numpy()
    e = np.exp(x.astype(np.float64) * 2)
    for y in (got, got2):       # traced (an eager run), then the compiled program
        np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=2e-5, atol=1e-9)
    (entry,) = comp.entries.values()
    assert comp.backend_name == "c" and entry.program.kernels and "void k_" in entry.program.c_source
    # an explicit backend is kept
    comp = eagerc.compile(lambda a: a * 2 + 1, backend="numpy")
    with eagerc.no_grad():
        np.testing.assert_array_equal(comp(eagerc.tensor(x)).numpy(), x * 2 + 1)
    assert comp.backend_name == "numpy" and comp.code().startswith("# Constructed by numpy_backend")


@pytest.mark.parametrize("compiler", ["missing", "failing"])
def test_default_backend_without_a_working_compiler_is_numpy_with_one_notice(compiler, monkeypatch, tmp_path,
                                                                             request):
    from eagerc.compiler import backends
    if compiler == "missing":
        monkeypatch.setenv("EAGERC_CC", str(tmp_path / "no-such-cc"))
    else:   # on PATH, but rejects eagerc's flags (a compiler without OpenMP)
        request.getfixturevalue("failing_cc")
    monkeypatch.setattr(backends, "_noticed", [])
    x = np.random.default_rng(1).standard_normal((8, 5))
    with pytest.warns(RuntimeWarning, match="eagerc compile: .*; using the numpy backend") as rec:
        f, g = eagerc.compile(lambda a: a.exp() + 1), eagerc.compile(lambda a: a * 3)
        with eagerc.no_grad():
            got_f, got_g = f(eagerc.tensor(x)).numpy(), g(eagerc.tensor(x)).numpy()
    assert len([r for r in rec if "eagerc compile" in str(r.message)]) == 1     # once per process
    assert "\n" not in str(rec[0].message) and rec[0].filename == __file__
    assert f.backend_name == g.backend_name == "numpy"
    np.testing.assert_allclose(got_f, np.exp(x) + 1, rtol=1e-12)
    np.testing.assert_array_equal(got_g, x * 3)


def test_default_backend_of_cupy_arrays_is_cuda():
    # decided from the call's arrays (cupy's ndarray type is cupy.ndarray); numpy arrays: "c" or "numpy"
    from eagerc.compiler.backends import default_backend
    from eagerc.runtime import kernel_cache
    cupy_array = type("ndarray", (), {"__module__": "cupy"})()
    assert default_backend([np.zeros(3), cupy_array]) == "cuda"
    assert default_backend([np.zeros(3)]) == ("c" if kernel_cache.works() else "numpy")


@pytest.mark.skipif(not eagerc.cuda.is_available(), reason="needs a GPU")
def test_default_backend_on_gpu_tensors_is_cuda():
    x = np.random.default_rng(2).standard_normal((16, 300)).astype(np.float32)
    comp = eagerc.compile(lambda a: (a * 2).tanh() + 1)
    with eagerc.no_grad():
        got = comp(eagerc.tensor(x, device="cuda")).cpu().numpy()
    assert comp.backend_name == "cuda"
    np.testing.assert_allclose(got, np.tanh(x * 2) + 1, rtol=1e-5, atol=1e-6)
