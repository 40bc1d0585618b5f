"""Indexing semantics the op table can't express: views and version counters,
setitem with autograd, error messages, data-dependent shapes, PyTorch-vs-numpy
differences and the index description itself."""
import json

import numpy as np
import pytest

import eagerc
from eagerc import dispatch
from eagerc.runtime.ops import OPS
from eagerc.runtime.ops.meta import Spec
from eagerc.runtime import dtypes


def t64(a, requires_grad=False):
    return eagerc.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def arange(*shape):
    return eagerc.arange(float(np.prod(shape))).reshape(*shape)


# ---------------------------------------------------------------- views


def test_basic_indexing_returns_views_sharing_memory_and_version():
    x = arange(3, 4)
    for v in (x[1], x[:, 1], x[::-1], x[None], x[..., 2], x[1, 2], x[1:3, ::2]):
        assert np.shares_memory(v._array, x._array)
        assert v._vc is x._vc
    y = x[1, 2]  # every dimension gets an int: still a 0-d view, not a copy
    assert y.shape == () and np.shares_memory(y._array, x._array)
    y.add_(100)
    assert x[1, 2].item() == 106


def test_advanced_indexing_returns_copies():
    x = arange(3, 4)
    for v in (x[[0, 2]], x[x > 3], x[:, eagerc.tensor([1, 1])]):
        assert not np.shares_memory(v._array, x._array)
        assert v._vc is None or v._vc is not x._vc
    v = x[[0, 2]]
    v.mul_(0)
    assert x.sum().item() == 66


def test_zero_dim_integer_tensor_key_is_an_int_view_like_pytorch():
    x = arange(3, 4)
    v = x[eagerc.tensor(1)]
    assert v.shape == (4,) and np.shares_memory(v._array, x._array)
    x[eagerc.tensor(2)][0] = -1.0  # chained write through the view reaches x
    assert x[2, 0].item() == -1.0


def test_int_mixed_with_tensor_follows_pytorch_not_numpy():
    x = arange(3, 4, 5)
    assert x[0, :, [0, 1]].shape == (4, 2)           # numpy would give (2, 4)
    np.testing.assert_array_equal(x[0, :, [0, 1]].numpy(), x.numpy()[0][:, [0, 1]])
    assert x[[0, 1], :, [0, 1]].shape == (2, 4)      # separated tensors: broadcast dims first
    assert x[:, [0, 1], [0, 1]].shape == (3, 2)      # adjacent: in place
    assert x[[0, 1], None, [0, 1]].shape == (2, 1, 5)


def test_key_forms():
    x = arange(4, 3)
    n = x.numpy()
    np.testing.assert_array_equal(x[np.int64(1)].numpy(), n[1])
    np.testing.assert_array_equal(x[np.array([0, 3])].numpy(), n[[0, 3]])
    np.testing.assert_array_equal(x[(0, 2)].numpy(), n[0, 2])
    np.testing.assert_array_equal(x[[True, False, True, False]].numpy(), n[[True, False, True, False]])
    np.testing.assert_array_equal(x[eagerc.tensor(1):eagerc.tensor(3)].numpy(), n[1:3])
    assert x[[]].shape == (0, 3)
    assert x[False].shape == (0, 4, 3) and x[True].shape == (1, 4, 3)
    assert x[eagerc.tensor([1, 2], dtype=eagerc.int32)].shape == (2, 3)
    with pytest.warns(UserWarning, match="uint8"):
        assert x[eagerc.tensor([1, 0, 0, 1], dtype=eagerc.uint8)].shape == (2, 3)


# ---------------------------------------------------------------- setitem


def test_setitem_writes_through_to_views_and_bumps_versions():
    x = arange(3, 4)
    row = x[1]
    v0 = x._version
    x[1, 2] = -5.0
    assert row[2].item() == -5.0
    assert x._version == v0 + 1 and row._version == x._version
    row[0] = 7  # writing into a view updates its base, and the shared counter
    assert x[1, 0].item() == 7.0 and x._version == v0 + 2
    x[x > 8] = 0.0
    assert (x.numpy() <= 8).all()
    x[[0, 2], 1:3] = eagerc.tensor([[1.0, 2.0]])
    np.testing.assert_array_equal(x.numpy()[[0, 2], 1:3], [[1, 2], [1, 2]])


def test_setitem_casts_values_and_broadcasts():
    x = eagerc.zeros(3, 4, dtype=eagerc.int64)
    x[0] = 2.7                          # a float into an int tensor truncates, as in PyTorch
    x[1] = eagerc.tensor([1.9, 2.1, 3.5, 4.0])
    x[2, :2] = eagerc.tensor([[9, 8]])  # leading size-1 dimensions are dropped
    assert x.dtype == eagerc.int64
    assert x.tolist() == [[2, 2, 2, 2], [1, 2, 3, 4], [9, 8, 0, 0]]
    with pytest.raises(RuntimeError, match=r"shape mismatch: value tensor of shape \(3\) cannot be broadcast "
                                           r"to indexing result of shape \(4\)"):
        x[0] = eagerc.tensor([1, 2, 3])


def test_setitem_invalidates_saved_tensors():
    w = t64([1.0, 2.0, 3.0], requires_grad=True)
    a = t64([4.0, 5.0, 6.0])
    y = w * a          # mul saves a
    a[0] = 0.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_setitem_on_leaf_requiring_grad_is_refused():
    w = t64([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w[0] = 3.0
    with eagerc.no_grad():
        w[0] = 3.0
    assert w.tolist() == [3.0, 2.0] and w.requires_grad


def test_autograd_through_setitem_on_a_non_leaf():
    x = t64(np.arange(12.0).reshape(3, 4), requires_grad=True)
    y = x * 2
    y[1] = 0.0
    y[:, 3] = 1.0
    assert y.grad_fn is not None
    (y * t64(np.arange(12.0).reshape(3, 4))).sum().backward()
    expected = 2 * np.arange(12.0).reshape(3, 4)
    expected[1] = 0
    expected[:, 3] = 0
    np.testing.assert_allclose(x.grad.numpy(), expected)


def test_setitem_value_requiring_grad_gets_summed_gradient():
    v = t64([1.0, 2.0, 3.0], requires_grad=True)
    s = t64(2.0, requires_grad=True)
    y = eagerc.zeros(4, 3, dtype=eagerc.float64)
    y[1:3] = v          # broadcast over two rows
    y[0, [0, 2]] = s    # a 0-d value written twice
    assert y.requires_grad and y.grad_fn is not None
    g = np.arange(12.0).reshape(4, 3)
    (y * t64(g)).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), g[1] + g[2])
    np.testing.assert_allclose(s.grad.numpy(), g[0, 0] + g[0, 2])


def test_setitem_gradcheck_and_double_backward():
    x = t64(np.random.default_rng(0).standard_normal((4, 3)), requires_grad=True)
    v = t64(np.random.default_rng(1).standard_normal((2, 3)), requires_grad=True)
    i = eagerc.tensor([3, 0])

    def f(x, v):
        y = x * x
        y[i] = v * v
        return y * x
    assert eagerc.autograd.gradcheck(f, [x, v])
    assert eagerc.autograd.gradgradcheck(f, [x, v])


@pytest.mark.parametrize("key", [1, (slice(None), 2), ([0, 2, 0],), (slice(None), [1, 1, 0])])
def test_index_gradgradcheck(key):
    x = t64(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)
    assert eagerc.autograd.gradgradcheck(lambda x: x[key] * x[key], [x])


def test_index_backward_accumulates_repeated_indices():
    x = t64(np.zeros(4), requires_grad=True)
    x[[0, 0, 0, 3, -1]].sum().backward()
    assert x.grad.tolist() == [3.0, 0.0, 0.0, 2.0]
    w = t64(np.zeros((3, 2)), requires_grad=True)
    w.gather(0, eagerc.tensor([[0, 0], [0, 1]])).sum().backward()
    assert w.grad.tolist() == [[2.0, 1.0], [0.0, 1.0], [0.0, 0.0]]
    w.grad = None
    w.index_select(0, eagerc.tensor([2, 2, 2])).sum().backward()
    assert w.grad.tolist() == [[0, 0], [0, 0], [3, 3]]


def test_setitem_without_grad_writes_in_place():
    x = arange(1000)
    data = x._array
    x[10:20] = 1.0
    assert x._array is data and x.grad_fn is None


def test_index_does_not_keep_its_input_alive():
    import gc
    import weakref
    w = t64(np.ones((3, 3)), requires_grad=True)
    h = w * 2
    ref = weakref.ref(h)
    out = h[[0, 2]]
    del h
    gc.collect()
    assert ref() is None  # the derivative only needs the index tensors and h's shape
    out.sum().backward()
    assert w.grad.tolist() == [[2, 2, 2], [0, 0, 0], [2, 2, 2]]


def test_inplace_methods():
    x = eagerc.zeros(3, 4)
    x.masked_fill_(eagerc.tensor([True, False, False, True]), 1.0)
    assert x.sum().item() == 6
    x.index_fill_(0, eagerc.tensor([1]), 2.0)
    assert x[1].tolist() == [2.0] * 4
    x.scatter_(1, eagerc.tensor([[0], [1], [2]]), -1.0)
    assert x[:, :3].numpy().diagonal().tolist() == [-1.0] * 3
    x.scatter_add_(0, eagerc.tensor([[0, 0, 0, 0]]), eagerc.ones(1, 4))
    x.index_add_(1, eagerc.tensor([0, 0]), eagerc.ones(3, 2))
    x.index_put_((eagerc.tensor([2]), eagerc.tensor([3])), eagerc.tensor(9.0))
    assert x.tolist() == [[2.0, 1.0, 1.0, 2.0], [4.0, -1.0, 2.0, 2.0], [3.0, 0.0, -1.0, 9.0]]
    assert x._version == 6


def test_masked_fill_inplace_with_grad_on_non_leaf():
    x = t64([1.0, 2.0, 3.0], requires_grad=True)
    v = t64(5.0, requires_grad=True)
    y = x * 1
    y.masked_fill_(eagerc.tensor([True, False, True]), v)
    assert y.tolist() == [5.0, 2.0, 5.0]
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0] and v.grad.item() == 2.0


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("fn, message", [
    (lambda x: x[5], r"index 5 is out of bounds for dimension 0 with size 3"),
    (lambda x: x[1, -5], r"index -5 is out of bounds for dimension 1 with size 4"),
    (lambda x: x[[0, 7]], r"index 7 is out of bounds for dimension 0 with size 3"),
    (lambda x: x[:, eagerc.tensor([0, 4])], r"index 4 is out of bounds for dimension 1 with size 4"),
    (lambda x: x[1, :, ][eagerc.tensor([-5])], r"index -5 is out of bounds for dimension 0 with size 4"),
    (lambda x: x.gather(1, eagerc.tensor([[0], [4], [1]])), r"gather: index 4 is out of bounds for dimension 1 "
                                                            r"with size 4"),
    (lambda x: x.gather(1, eagerc.tensor([[0], [-1], [1]])), r"gather: index -1 is out of bounds"),
    (lambda x: x.index_select(0, eagerc.tensor([3])), r"index_select: index 3 is out of bounds for dimension 0 "
                                                      r"with size 3"),
    (lambda x: x.scatter(0, eagerc.tensor([[9]]), 1.0), r"scatter: index 9 is out of bounds for dimension 0"),
    (lambda x: x.scatter_add(1, eagerc.tensor([[9]]), eagerc.ones(1, 1)), r"scatter_add: index 9 is out of bounds "
                                                                          r"for dimension 1 with size 4"),
    (lambda x: x.index_add(1, eagerc.tensor([4]), eagerc.ones(3, 1)), r"index_add: index 4 is out of bounds"),
    (lambda x: x.take(eagerc.tensor([12])), r"index 12 is out of bounds for dimension 0 with size 12"),
])
def test_out_of_range_indices_name_the_op_value_dimension_and_size(fn, message):
    with pytest.raises(IndexError, match=message):
        fn(arange(3, 4))


@pytest.mark.parametrize("key", [[0, 3], 3, (slice(None), [4])])
def test_setitem_out_of_range(key):
    x = arange(3, 4)
    with pytest.raises(IndexError, match="out of bounds for dimension"):
        x[key] = 1.0
    w = t64(np.ones((3, 4)), requires_grad=True) * 1
    with pytest.raises(IndexError, match="out of bounds for dimension"):
        w[key] = 1.0


def test_wrong_index_dtypes():
    x = arange(3, 4)
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors, got a "
                                         "tensor of dtype float32"):
        x[eagerc.tensor([0.0, 1.0])]
    with pytest.raises(IndexError, match="valid indices"):
        x[1.5]
    with pytest.raises(TypeError, match=r"gather: expected an integer \(int64\) index tensor, got dtype float32"):
        x.gather(1, eagerc.zeros(3, 1))
    with pytest.raises(TypeError, match="index_select: expected an integer"):
        x.index_select(0, eagerc.tensor([True]))
    with pytest.raises(RuntimeError, match="masked_fill: expected a bool mask, got a mask of dtype int64"):
        x.masked_fill(eagerc.tensor([1, 0, 1, 0]), 0.0)
    with pytest.raises(RuntimeError, match="0-dimensional value tensor"):
        x.masked_fill(x > 2, eagerc.tensor([1.0]))


def test_shape_errors():
    x = arange(3, 4)
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match=r"the shape of the mask \(2\) .* does not match the shape of the indexed "
                                         r"tensor \(3x4\) at dimension 0"):
        x[eagerc.tensor([True, False])]
    with pytest.raises(IndexError, match=r"indexing tensors could not be broadcast together with shapes \(2\), \(3\)"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        x.gather(1, eagerc.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="no larger than the input"):
        x.gather(1, eagerc.zeros(4, 1, dtype=eagerc.int64))
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        x[::0]


# ---------------------------------------------------------------- data-dependent shapes


def test_nonzero_and_masked_select_shapes():
    m = eagerc.tensor([[True, False, True], [False, False, True]])
    assert eagerc.nonzero(m).shape == (3, 2) and eagerc.nonzero(m).dtype == eagerc.int64
    rows, cols = eagerc.nonzero(m, as_tuple=True)
    assert rows.tolist() == [0, 0, 1] and cols.tolist() == [0, 2, 2]
    assert eagerc.nonzero(eagerc.zeros(2, 3)).shape == (0, 2)
    assert eagerc.nonzero(eagerc.tensor(5)).shape == (1, 0)
    assert [t.tolist() for t in eagerc.nonzero(eagerc.tensor(5), as_tuple=True)] == [[0]]
    assert [t.tolist() for t in eagerc.where(m)] == [[0, 0, 1], [0, 2, 2]]
    x = arange(2, 3)
    assert eagerc.masked_select(x, m).tolist() == [0.0, 2.0, 5.0]
    assert eagerc.masked_select(x, eagerc.zeros(3, dtype=eagerc.bool)).shape == (0,)
    assert eagerc.masked_select(arange(3, 1), eagerc.tensor([True, False, True, True])).shape == (9,)
    assert x[m].shape == (3,) and x[eagerc.zeros(2, 3, dtype=eagerc.bool)].shape == (0,)


def test_masks_carry_their_count_so_shape_rules_are_static():
    x = arange(2, 3)
    m = x > 1.5
    seen = []
    concretized = []

    class Rec:
        def record(self, op, args, attrs, out):
            if op.name in ("index", "nonzero"):
                specs = [Spec(tuple(a._array.shape), dtypes.from_np(a._array.dtype)) if isinstance(a, eagerc.Tensor)
                         else a for a in args]
                seen.append((op.name, attrs, tuple(op.meta(*specs, **attrs).shape), tuple(out._array.shape)))

        def concretize(self, t, what, value=None):  # the mask's True count is a data-dependent value
            concretized.append(what)
            return value  # (what the tensor method hands on: breaks.py may hand on a stand-in)

    dispatch.set_tracer(Rec())
    try:
        x[m]
        eagerc.nonzero(m)
    finally:
        dispatch.set_tracer(None)
    assert seen[0][1] == {"index": (("mask", 0, 4),)}
    assert [(s[2], s[3]) for s in seen] == [((4,), (4,)), ((4, 2), (4, 2))]
    assert concretized == ["item()", "item()"]  # a tracer is told: data-dependent sizes


def test_kernel_checks_the_declared_mask_count():
    x = arange(2, 3)
    m = x > 1.5
    with pytest.raises(RuntimeError, match="mask index tensor 0 has 4 True entries, but the index declares 2"):
        dispatch.apply(OPS["index"], (x, m), {"index": (("mask", 0, 2),)})
    with pytest.raises(RuntimeError, match="nonzero: the input has 4 nonzero entries"):
        dispatch.apply(OPS["nonzero"], (m,), {"count": 3})


# ---------------------------------------------------------------- the index description


def test_index_attribute_is_json_plain_and_survives_a_round_trip():
    x = arange(3, 4, 5)
    i = eagerc.tensor([2, 0])
    recorded = []

    class Rec:
        def record(self, op, args, attrs, out):
            recorded.append((op, args, attrs, out))

    dispatch.set_tracer(Rec())
    try:
        y = x[1:, None, ..., i]
        z = x[-1, ::-2]
    finally:
        dispatch.set_tracer(None)
    op, args, attrs, out = recorded[0]
    assert op.name == "index" and args[1] is i
    assert attrs["index"] == (("slice", 1, None, None), ("none",), ("ellipsis",), ("tensor", 0))
    loaded = json.loads(json.dumps(attrs))  # a file gives lists back: kernels and rules take them
    again = OPS["index"].cpu(x._array, i._array, **loaded)
    np.testing.assert_array_equal(again, y._array)
    assert OPS["index"].meta(Spec((3, 4, 5), dtypes.float32), Spec((2,), dtypes.int64), **loaded).shape == (2, 1, 4, 2)
    op, args, attrs, out = recorded[1]
    assert op.name == "getitem" and attrs == {"index": (("int", -1), ("slice", None, None, -2))}
    np.testing.assert_array_equal(OPS["getitem"].cpu(x._array, **json.loads(json.dumps(attrs))), z._array)


@pytest.mark.parametrize("index, message", [
    ((("foo", 1),), "unknown tag"),
    ((("int", 1.5),), "needs one int"),
    ((("tensor", 0),), "is an index tensor, which getitem does not take"),
    ("int", "sequence of items"),
])
def test_getitem_rule_validates_the_description(index, message):
    with pytest.raises((TypeError, ValueError), match=message):
        OPS["getitem"].meta(Spec((3, 4), dtypes.float32), index=index)


def test_index_rule_validates_tensor_items():
    x = Spec((3, 4), dtypes.float32)
    with pytest.raises(IndexError, match="must be long, int, byte or bool"):
        OPS["index"].meta(x, Spec((2,), dtypes.float32), index=(("tensor", 0),))
    with pytest.raises(IndexError, match="must be bool"):
        OPS["index"].meta(x, Spec((3,), dtypes.int64), index=(("mask", 0, 1),))
    with pytest.raises(TypeError, match="got 2 index tensors but the index uses 1"):
        OPS["index"].meta(x, Spec((2,), dtypes.int64), Spec((2,), dtypes.int64), index=(("tensor", 0),))
    with pytest.raises(ValueError, match="cannot hold 5 True entries"):
        OPS["index"].meta(x, Spec((3,), dtypes.bool), index=(("mask", 0, 5),))


def test_index_put_rule():
    x = Spec((3, 4), dtypes.float32)
    i = Spec((2,), dtypes.int64)
    assert OPS["index_put"].meta(x, Spec((1, 2, 4), dtypes.float32), i, index=(("tensor", 0),),
                                 accumulate=True).shape == (3, 4)
    with pytest.raises(RuntimeError, match="cannot be broadcast to indexing result of shape"):
        OPS["index_put"].meta(x, Spec((3, 4), dtypes.float32), i, index=(("tensor", 0),), accumulate=False)
    with pytest.raises(TypeError, match="values of dtype float64"):
        OPS["index_put"].meta(x, Spec((4,), dtypes.float64), i, index=(("tensor", 0),), accumulate=False)


_I = np.array([[0, 2, 2], [1, 0, 0]])


@pytest.mark.parametrize("name, fn", [
    ("gather", lambda x, s: x.gather(1, eagerc.tensor(_I)) * s[:, :3]),
    ("scatter", lambda x, s: x.scatter(1, eagerc.tensor([[0, 2, 1], [2, 1, 0]]), s[:, :3] * s[:, :3])),
    ("scatter_add", lambda x, s: x.scatter_add(1, eagerc.tensor(_I), s * s) * x),
    ("index_select", lambda x, s: x.index_select(1, eagerc.tensor([2, 0, 2])) * s[:, :3]),
    ("index_add", lambda x, s: x.index_add(1, eagerc.tensor([2, 0, 2, 1]), s * s) * x),
    ("masked_select", lambda x, s: eagerc.masked_select(x * s[:, :3], eagerc.tensor([True, False, True]))),
    ("masked_fill", lambda x, s: x.masked_fill(eagerc.tensor([True, False, True]), 0.0) * x),
    ("index_put_accumulate", lambda x, s: eagerc.index_put(x, (eagerc.tensor([0, 0, 1]),), s[0, :3] * x[1],
                                                           accumulate=True) * x),
])
def test_double_backward(name, fn):
    rng = np.random.default_rng(0)
    x = t64(rng.standard_normal((2, 3)), requires_grad=True)
    s = t64(rng.standard_normal((2, 4)), requires_grad=True)
    assert eagerc.autograd.gradcheck(fn, [x, s])
    assert eagerc.autograd.gradgradcheck(fn, [x, s])
