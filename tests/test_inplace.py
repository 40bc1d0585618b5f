"""In-place ops: values (against numpy), aliasing, dtype rules, autograd through
in-place updates, and the version-counter / leaf checks.
"""
import numpy as np
import pytest

import eagerc


def t64(a, requires_grad=False):
    return eagerc.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


@pytest.mark.parametrize("name,other,ref", [
    ("add_", 2.5, lambda a, b: a + b),
    ("sub_", [1.0, -1.0, 0.5], lambda a, b: a - b),
    ("mul_", [[2.0], [3.0]], lambda a, b: a * b),
    ("div_", 4.0, lambda a, b: a / b),
    ("pow_", 2, lambda a, b: a ** b),
    ("maximum_", [0.0, 0.0, 0.0], np.maximum),
    ("clamp_", None, lambda a, b: np.clip(a, -0.5, 0.75)),
])
def test_in_place_binary_values_match_numpy(name, other, ref):
    av = np.array([[0.5, -1.5, 2.0], [1.0, 0.25, -0.75]])
    a = t64(av)
    ptr = a.data_ptr()
    if name == "clamp_":
        out = a.clamp_(-0.5, 0.75)
    else:
        out = getattr(a, name)(t64(other) if isinstance(other, list) else other)
    assert out is a and a.data_ptr() == ptr
    np.testing.assert_allclose(a.numpy(), ref(av, np.asarray(other) if other is not None else None))


def test_augmented_assignment_operators_are_in_place():
    a = t64([1.0, 2.0])
    ref = a
    a += 1
    a *= t64([2.0, 3.0])
    a -= 0.5
    a /= 2
    assert a is ref
    np.testing.assert_allclose(a.numpy(), [((1 + 1) * 2 - 0.5) / 2, ((2 + 1) * 3 - 0.5) / 2])
    i = eagerc.tensor([7, 8])
    i //= 2
    i %= 3
    assert i.tolist() == [(7 // 2) % 3, (8 // 2) % 3]


def test_zero_fill_copy():
    a = eagerc.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert a.zero_() is a and a.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert a.fill_(2.5) is a and a.tolist() == [[2.5, 2.5], [2.5, 2.5]]
    a.fill_(eagerc.tensor(7.0))
    assert a.tolist() == [[7.0, 7.0], [7.0, 7.0]]
    a.copy_(eagerc.tensor([1, 2]))                      # broadcast and cast int64 -> float32
    assert a.dtype == eagerc.float32 and a.tolist() == [[1.0, 2.0], [1.0, 2.0]]
    i = eagerc.tensor([0, 0])
    i.copy_(eagerc.tensor([1.9, -2.9]))                 # copy_ casts (truncates) like PyTorch
    assert i.dtype == eagerc.int64 and i.tolist() == [1, -2]
    i.fill_(3)
    assert i.tolist() == [3, 3]


def test_in_place_is_seen_by_views_and_numpy_aliases():
    a = eagerc.zeros(2, 3)
    n = a.numpy()
    v = a.reshape(6)
    v.add_(1)
    np.testing.assert_array_equal(a.numpy(), np.ones((2, 3)))
    a.mul_(3)
    np.testing.assert_array_equal(v.numpy(), np.full(6, 3.0))
    np.testing.assert_array_equal(n, np.full((2, 3), 3.0))
    assert v._version == a._version == 2


def test_in_place_keeps_the_target_dtype():
    f = eagerc.tensor([1.0, 2.0])
    f.add_(eagerc.tensor([0.5, 0.5], dtype=eagerc.float64))
    assert f.dtype == eagerc.float32 and f.tolist() == [1.5, 2.5]
    h = eagerc.tensor([1.0], dtype=eagerc.float16)
    h *= 3.0
    assert h.dtype == eagerc.float16 and h.tolist() == [3.0]
    i = eagerc.tensor([1, 2], dtype=eagerc.int32)
    i += eagerc.tensor([10, 20])                         # int64 operand, int32 target
    assert i.dtype == eagerc.int32 and i.tolist() == [11, 22]
    u = eagerc.tensor([250], dtype=eagerc.uint8)
    u.add_(10)
    assert u.dtype == eagerc.uint8 and u.tolist() == [4]  # wraps like C (260 mod 256)


@pytest.mark.parametrize("op,name", [
    (lambda t: t.add_(1.5), "add_"),
    (lambda t: t.mul_(eagerc.tensor([2.0, 2.0])), "mul_"),
    (lambda t: t.div_(2), "div_"),
    (lambda t: t.sub_(eagerc.tensor(0.5, dtype=eagerc.float64)), "sub_"),
    (lambda t: t.sqrt_(), "sqrt_"),
])
def test_float_results_are_refused_into_integer_tensors(op, name):
    t = eagerc.tensor([4, 9])
    with pytest.raises(RuntimeError, match=f"{name}.*float.*can't be cast.*int64"):
        op(t)
    assert t.tolist() == [4, 9] and t._version == 0


def test_non_bool_results_are_refused_into_bool_tensors():
    b = eagerc.tensor([True, False])
    with pytest.raises(RuntimeError, match="can't be cast.*bool"):
        b.add_(1)
    b |= eagerc.tensor([False, True])
    assert b.dtype == eagerc.bool and b.tolist() == [True, True]


def test_in_place_cannot_broadcast_the_target():
    a = eagerc.zeros(3)
    with pytest.raises(RuntimeError, match=r"add_.*\(3,\).*\(2, 3\)"):
        a.add_(eagerc.ones(2, 3))
    assert a.tolist() == [0.0, 0.0, 0.0] and a._version == 0


# ------------------------------------------------------------------ autograd

def test_gradient_through_in_place_chain_on_non_leaf():
    xv = np.array([0.5, -1.0, 2.0])
    x = t64(xv, requires_grad=True)
    y = x * 1
    y.mul_(x)        # y = x^2
    y.add_(3)        # y = x^2 + 3
    y.mul_(y)        # y = (x^2 + 3)^2  -> dy/dx = 4x (x^2 + 3)
    assert not y.is_leaf and y._version == 3
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * xv * (xv ** 2 + 3))


def test_in_place_with_a_grad_requiring_operand_on_plain_tensor():
    w = t64([2.0, 3.0], requires_grad=True)
    acc = eagerc.zeros(2, dtype=eagerc.float64)
    acc.add_(w * w)                   # acc now depends on w
    acc.mul_(w)
    assert acc.requires_grad and acc.grad_fn is not None
    acc.sum().backward()              # d/dw (w^3) = 3 w^2
    np.testing.assert_allclose(w.grad.numpy(), [12.0, 27.0])


def test_fill_and_zero_on_non_leaf_stop_the_gradient():
    xv = np.array([1.0, 2.0])
    x = t64(xv, requires_grad=True)
    y = x * 2
    y.fill_(3.0)
    (y * x).sum().backward()           # y is constant 3 now: dL/dx = 3
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])
    x.grad = None
    y = x.exp()
    z = x * 1
    z.zero_()
    (z + y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(xv))


def test_copy_from_grad_requiring_source_routes_gradient():
    src = t64([1.0, 2.0, 3.0], requires_grad=True)
    dst = eagerc.zeros(2, 3, dtype=eagerc.float64)
    dst.copy_(src * 2)                # broadcast over rows
    (dst * t64([[1.0], [10.0]])).sum().backward()
    np.testing.assert_allclose(src.grad.numpy(), [22.0, 22.0, 22.0])


def test_copy_keeps_signed_zeros_and_nans_with_grad_and_traced():
    """copy_ is a copy, as in PyTorch: -0.0 stays -0.0 (an `x + 0` would make it +0.0) when it
    records a gradient and in a compiled function, its tracing call and the compiled calls."""
    v = np.array([-0.0, 0.0, np.nan, -np.inf, -2.5])

    def signs(a):
        a = np.asarray(a)
        return np.signbit(a).tolist(), np.isnan(a).tolist(), np.where(np.isnan(a), 0, a).tolist()
    src = t64(v.tolist(), requires_grad=True)
    dst = eagerc.zeros(5, dtype=eagerc.float64)
    dst.copy_(src)
    assert signs(dst.detach().numpy()) == signs(v)
    dst.sum().backward()
    np.testing.assert_array_equal(src.grad.numpy(), np.ones(5))

    def f(d, s):
        d.copy_(s)
        return d
    cf = eagerc.compile(f, backend="numpy")
    for i in range(3):
        d = eagerc.zeros(5, dtype=eagerc.float64)
        cf(d, t64(v.tolist()))
        assert signs(d.numpy()) == signs(v), i
    assert cf.traces == 1, cf.log


def test_in_place_on_saved_tensor_errors_but_clone_is_safe():
    x = t64([1.0, 2.0], requires_grad=True)
    a = x * 1
    b = a.sigmoid()                   # saves its output b
    c = b.clone()
    c.mul_(2)                         # modifying a clone is fine
    b2 = a.sigmoid()
    b2.mul_(2)
    with pytest.raises(RuntimeError, match="sigmoid.*mul_"):
        b2.sum().backward()
    (b + c).sum().backward()
    s = 1 / (1 + np.exp(-x._array))
    np.testing.assert_allclose(x.grad.numpy(), 3 * s * (1 - s))


def test_in_place_under_no_grad_on_non_leaf_keeps_its_history():
    x = t64([1.0, 2.0], requires_grad=True)
    y = x * 3
    with eagerc.no_grad():
        y.add_(100)                   # like PyTorch: the graph still treats y as 3x
    assert y.grad_fn is not None and y.tolist() == [103.0, 106.0]
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_leaf_in_place_rules():
    x = t64([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="add_: a leaf Variable that requires grad"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x += 1
    with eagerc.no_grad():
        x.sub_(0.5)
        x.clamp_(max=1.0)
    assert x.tolist() == [0.5, 1.0] and x.is_leaf and x.requires_grad
    plain = eagerc.tensor([1.0])                     # leaves without grad are free to change
    plain.add_(1)
    assert plain.tolist() == [2.0]


# ---------------------------------------------------------------- in-place writes through views

def _fd(f, wv, eps=1e-6):
    return np.array([(f(wv + eps * e) - f(wv - eps * e)) / (2 * eps) for e in np.eye(len(wv))])


def test_in_place_through_views_rewrites_the_base_history_like_pytorch():
    """x does not require grad; writing a grad-carrying value through its views makes x's
    gradient reach w (PyTorch's CopySlices), for getitem, select, reshape and slice views."""
    w = eagerc.tensor([1.0, 2.0, 3.0], dtype=eagerc.float64, requires_grad=True)
    x = eagerc.zeros(4, 3, dtype=eagerc.float64)
    x[1].add_(w)
    x[:, 0].mul_(w[0])
    x.reshape(12)[5:9].mul_(2 * w[1])
    x.t().diagonal().add_(w[2])
    weights = np.arange(12.0).reshape(4, 3)
    (x * eagerc.tensor(weights)).sum().backward()
    assert x.grad_fn is not None and x.requires_grad

    def f(wv):
        X = np.zeros((4, 3))
        X[1] += wv
        X[:, 0] *= wv[0]
        X.reshape(12)[5:9] *= 2 * wv[1]
        i = np.arange(3)
        X.T[i, i] += wv[2]  # (numpy's diagonal() is read-only)
        return (X * weights).sum()
    np.testing.assert_allclose(w.grad.numpy(), _fd(f, np.array([1.0, 2.0, 3.0])), rtol=1e-6)


def test_in_place_through_a_view_of_a_non_leaf_keeps_both_paths():
    a = eagerc.tensor([1.0, 2.0, 3.0, 4.0], dtype=eagerc.float64, requires_grad=True)
    b = eagerc.tensor([10.0, 20.0], dtype=eagerc.float64, requires_grad=True)
    y = a * 2          # a non-leaf; its slice is overwritten with a product of b
    y[1:3].mul_(b)
    (y * eagerc.tensor([1.0, 2.0, 3.0, 4.0], dtype=eagerc.float64)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 2 * 2 * 10, 3 * 2 * 20, 8.0])
    np.testing.assert_allclose(b.grad.numpy(), [2 * 2 * 2.0, 3 * 2 * 3.0])


def test_in_place_through_views_of_leaves_and_expanded_views_raise():
    w = eagerc.tensor([1.0, 2.0], requires_grad=True)
    leaf = eagerc.zeros(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        leaf[:2].add_(w)
    e = eagerc.zeros(1, 2).expand(3, 2)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        e.add_(w)


def test_copy_into_a_tensor_with_history_gives_the_old_history_a_zero_gradient():
    """PyTorch: y = x.clone().copy_(src) -> x.grad is zeros (CopyBackwards), not None."""
    x = eagerc.ones(3, requires_grad=True)
    y = x.clone().copy_(eagerc.tensor([4.0, 5.0, 6.0]))
    assert y.requires_grad
    np.testing.assert_array_equal(y.detach().numpy(), [4.0, 5.0, 6.0])
    (y * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])
    s = eagerc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.grad = None
    z = (x * 3).copy_(s)
    (z * 5).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(s.grad.numpy(), [5.0, 5.0, 5.0])
