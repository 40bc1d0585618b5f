"""Generic op tests, driven by the op table (tests/optable.py, tests/op_cases/)."""
import numpy as np
import pytest

import eagerc
from eagerc import dispatch
from eagerc.runtime.ops import OPS
from eagerc.runtime.ops.meta import Spec
from eagerc.runtime import dtypes
from optable import all_cases

CASES = all_cases()
VARIANTS = [(c, v) for c in CASES for v in range(len(c.shapes))]


def _ids(cv):
    c, v = cv
    return f"{c.name}-{v}"


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _run(case, arrays, requires_grad=False, device="cpu"):
    ts = [eagerc.tensor(a, device=device, requires_grad=requires_grad and a.dtype.kind == "f")
          for a in arrays]
    return ts, _as_tuple(case.fn(*ts))


def _host(t):
    return np.asarray(t.detach().cpu().numpy()) if isinstance(t, eagerc.Tensor) else np.asarray(t)


def _compare(case, outs, refs, rtol, atol, what):
    assert len(outs) == len(refs), f"{case.name}: {len(outs)} outputs, reference has {len(refs)}"
    for k, (o, r) in enumerate(zip(outs, refs)):
        o, r = _host(o), np.asarray(r)
        assert o.shape == r.shape, f"{case.name} {what} output {k}: shape {o.shape} != reference {r.shape}"
        if r.dtype.kind == "f" or o.dtype.kind in dtypes.FLOATING_KINDS:
            np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{case.name} {what} output {k}")
        else:
            np.testing.assert_array_equal(o, r, err_msg=f"{case.name} {what} output {k}")


@pytest.mark.parametrize("cv", VARIANTS, ids=_ids)
def test_forward_float64(cv):
    case, v = cv
    arrays = case.arrays(v)
    _, outs = _run(case, arrays)
    _compare(case, outs, _as_tuple(case.ref(*[a.copy() for a in arrays])), case.rtol, case.atol, "float64")


@pytest.mark.parametrize("cv", VARIANTS, ids=_ids)
def test_forward_float32(cv):
    case, v = cv
    if not case.float32:
        pytest.skip(f"{case.name}: float32 comparison disabled in its table entry")
    arrays64 = case.arrays(v)
    arrays32 = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays64]
    _, outs = _run(case, arrays32)
    # reference in float64 on the same (float32-rounded) values
    refs = _as_tuple(case.ref(*[a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays32]))
    _compare(case, outs, refs, case.rtol32, case.atol32, "float32")
    for o, r in zip(outs, refs):
        if not isinstance(o, eagerc.Tensor):
            continue
        if case.out_dtype is not None:
            expected = case.out_dtype
        else:
            r = np.asarray(r)
            expected = {"f": "float32", "b": "bool"}.get(r.dtype.kind, "int64")
            if r.dtype.kind == "f" and not any(a.dtype.kind == "f" for a in arrays32):
                expected = "float32"
        assert o.dtype.name == expected, f"{case.name}: float32 inputs gave {o.dtype}, expected {expected}"


@pytest.mark.parametrize("cv", VARIANTS, ids=_ids)
def test_forward_bfloat16(cv):
    # bfloat16 inputs against the float64 reference of the same (bfloat16-rounded) values,
    # within bfloat16's precision; the output has bfloat16 where float32 inputs give float32
    case, v = cv
    if not (case.float32 and case.bfloat16):
        pytest.skip(f"{case.name}: bfloat16 comparison disabled in its table entry")
    bf16 = eagerc.bfloat16.np
    arrays = [a.astype(bf16) if a.dtype.kind == "f" else a for a in case.arrays(v)]
    if "quantile" in case.name:   # PyTorch's quantile takes float32 and float64 only
        with pytest.raises(RuntimeError, match="quantile\\(\\) input tensor must be either float or double"):
            _run(case, arrays)
        return
    _, outs = _run(case, arrays)
    refs = _as_tuple(case.ref(*[a.astype(np.float64) if a.dtype == bf16 else a for a in arrays]))
    _compare(case, outs, refs, case.rtol16, case.atol16, "bfloat16")
    for o, r in zip(outs, refs):
        if isinstance(o, eagerc.Tensor):
            r = np.asarray(r)
            expected = case.out_dtype or {"f": "float32", "b": "bool"}.get(r.dtype.kind, "int64")
            if expected == "float32" and any(a.dtype == bf16 for a in arrays):
                expected = "bfloat16"
            expected = case.out16 or expected
            assert o.dtype.name == expected, f"{case.name}: bfloat16 inputs gave {o.dtype}, expected {expected}"


GRAD_VARIANTS = [(c, v) for c in CASES if c.grad for v in range(min(c.grad_variants, len(c.shapes)))]


@pytest.mark.parametrize("cv", GRAD_VARIANTS, ids=_ids)
def test_gradcheck(cv):
    case, v = cv
    arrays = case.arrays(v)
    ts = [eagerc.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    if not any(t.requires_grad for t in ts):
        pytest.skip("no float inputs")

    def f(*xs):
        outs = [o for o in _as_tuple(case.fn(*xs)) if isinstance(o, eagerc.Tensor) and o.dtype.is_floating_point]
        return tuple(outs)
    assert eagerc.autograd.gradcheck(f, ts, eps=1e-6, atol=1e-5, rtol=1e-3)


class _Recorder:
    """Stands in for a tracer: checks each op's shape rule against what the kernel made."""

    def __init__(self):
        self.seen = set()

    def concretize(self, t, what, value=None):  # data-dependent sizes (masks, nonzero) read a count
        return value

    def raw_write(self, t, opname):
        pass

    def mutate(self, t, result):
        pass

    def array_input(self, t, array, convert):
        pass

    def record(self, op, args, attrs, out):
        self.seen.add(op.name)
        specs = [Spec(tuple(a._array.shape), dtypes.from_np(a._array.dtype)) if isinstance(a, eagerc.Tensor) else a
                 for a in args]
        spec = op.meta(*specs, **(attrs or {}))
        assert tuple(spec.shape) == tuple(out._array.shape), \
            f"{op.name}: shape rule says {spec.shape}, kernel made {out._array.shape} from {specs} {attrs}"
        assert spec.dtype.np == out._array.dtype, \
            f"{op.name}: dtype rule says {spec.dtype}, kernel made {out._array.dtype} from {specs} {attrs}"


def _record_all(cases):
    rec = _Recorder()
    dispatch.set_tracer(rec)
    try:
        for case in cases:
            for v in range(len(case.shapes)):
                arrays = case.arrays(v)
                ts, outs = _run(case, arrays, requires_grad=bool(case.grad))
                if case.grad:
                    fl = [o for o in outs if isinstance(o, eagerc.Tensor) and o.requires_grad]
                    if fl:
                        sum(o.sum() for o in fl).backward()
    finally:
        dispatch.set_tracer(None)
    return rec.seen


_SEEN = []


def _seen_ops():
    if not _SEEN:
        _SEEN.append(_record_all(CASES))
    return _SEEN[0]


def test_shape_rules_match_kernels():
    assert _seen_ops()  # _Recorder.record asserts each rule against its kernel's output


def test_every_op_has_a_case():
    missing = sorted(set(OPS) - _seen_ops())
    assert not missing, f"declared ops that no op-table case exercises: {missing}"


@pytest.mark.cuda
@pytest.mark.parametrize("cv", VARIANTS, ids=_ids)
def test_forward_cuda(cv):
    case, v = cv
    arrays = case.arrays(v)
    _, outs = _run(case, arrays, device="cuda")
    _compare(case, outs, _as_tuple(case.ref(*[a.copy() for a in arrays])), 1e-6, 1e-8, "cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("cv", [(c, 0) for c in CASES if c.grad], ids=_ids)
def test_gradients_cuda_match_cpu(cv):
    case, v = cv
    arrays = case.arrays(v)
    grads = []
    for device in ("cpu", "cuda"):
        ts, outs = _run(case, arrays, requires_grad=True, device=device)
        fl = [o for o in outs if isinstance(o, eagerc.Tensor) and o.requires_grad]
        sum((o * o).sum() for o in fl).backward()
        grads.append([_host(t.grad) for t in ts if t.requires_grad])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
