"""Shape/joining ops: errors name the op, the shapes and what was expected; views alias
their input where PyTorch's do (and copies don't)."""
import numpy as np
import pytest

import eagerc
from eagerc.dispatch import apply
from eagerc.runtime import dtypes
from eagerc.runtime.ops import OPS
from eagerc.runtime.ops.meta import Spec


def ones(*shape):
    return eagerc.ones(*shape)


# ---------------------------------------------------------------- joining

def test_cat_shape_mismatch_names_shapes_and_dim():
    with pytest.raises(RuntimeError, match=r"cat: expected all tensors to have the same shape except in "
                                           r"dimension 1; got \(2x3\) and \(4x5\)"):
        eagerc.cat([ones(2, 3), ones(4, 5)], 1)


def test_cat_errors():
    with pytest.raises(RuntimeError, match=r"cat: .*same number of dimensions.*\(2x3\) and \(4\)"):
        eagerc.cat([ones(2, 3), ones(4)], 0)
    with pytest.raises(RuntimeError, match=r"cat: got \(\) float32, \(\) float32; zero-dimensional "
                                           r"tensor \(at position 0\)"):
        eagerc.cat([eagerc.tensor(1.0), eagerc.tensor(2.0)])
    with pytest.raises(RuntimeError, match="cat: expected a non-empty list"):
        eagerc.cat([])
    with pytest.raises(TypeError, match="cat: expected Tensor as element 1"):
        eagerc.cat([ones(2), [1.0, 2.0]])
    with pytest.raises(TypeError, match="cat: expected a sequence of Tensors"):
        eagerc.cat(ones(2, 3))
    with pytest.raises(IndexError, match=r"cat: dimension 2 is out of range for a 2-d tensor"):
        eagerc.cat([ones(2, 3), ones(2, 3)], 2)


def test_stack_errors():
    with pytest.raises(RuntimeError, match=r"stack: .*equal size.*\(2x3\) at entry 0 and \(3x2\) at entry 1"):
        eagerc.stack([ones(2, 3), ones(3, 2)])
    with pytest.raises(IndexError, match="stack: dimension 3"):
        eagerc.stack([ones(2, 3), ones(2, 3)], 3)


def test_variadic_rules_for_the_loader():
    f32, i64 = dtypes.float32, dtypes.int64
    cat = OPS["cat"].meta
    assert cat(Spec((2, 3), f32), Spec((2, 1), f32), dim=1) == Spec((2, 4), f32)
    with pytest.raises(TypeError, match="cat: .*one dtype.*float32 and int64"):
        cat(Spec((2, 3), f32), Spec((2, 1), i64), dim=1)
    assert OPS["stack"].meta(Spec((2,), f32), Spec((2,), f32), dim=1) == Spec((2, 2), f32)


def test_split_chunk_unbind_errors():
    x = ones(5, 2)
    with pytest.raises(RuntimeError, match=r"split: split sizes \[2, 2\] must .*sum exactly to 5.*\(5x2\)"):
        x.split([2, 2])
    with pytest.raises(RuntimeError, match="split: split_size can only be 0"):
        x.split(0)
    with pytest.raises(RuntimeError, match="chunk: expects `chunks` to be greater than 0"):
        x.chunk(0)
    with pytest.raises(IndexError, match="unbind: dimension specified as 0 but the tensor has no dimensions"):
        eagerc.tensor(1.0).unbind()
    with pytest.raises(IndexError, match="split: dimension 2 is out of range"):
        x.split(1, 2)


# ---------------------------------------------------------------- shape ops

def test_reshape_view_expand_errors():
    with pytest.raises(RuntimeError, match=r"reshape: .*invalid for input of size 12"):
        ones(3, 4).reshape(5, -1)
    with pytest.raises(RuntimeError, match=r"view: size \(12\) is not compatible .*\(4x3\).*use \.reshape"):
        ones(3, 4).t().view(12)
    assert ones(3, 4).t().reshape(12).shape == (12,)
    with pytest.raises(RuntimeError, match=r"expand: .*expanded size of the tensor \(4\) must match the "
                                           r"existing size \(3\)"):
        ones(3, 1).expand(4, 2)
    with pytest.raises(RuntimeError, match="expand: .*number of sizes provided"):
        ones(2, 3).expand(3)


def test_dim_errors_name_the_op():
    x = ones(2, 3)
    with pytest.raises(IndexError, match=r"squeeze: dimension 2 is out of range for a 2-d tensor "
                                         r"\(expected to be in range of \[-2, 1\]\)"):
        x.squeeze(2)
    with pytest.raises(IndexError, match="unsqueeze: dimension 3 is out of range"):
        x.unsqueeze(3)
    with pytest.raises(IndexError, match="transpose: dimension -3 is out of range"):
        x.transpose(0, -3)
    with pytest.raises(RuntimeError, match="permute: number of dims 3 doesn't match"):
        x.permute(0, 1, 2)
    with pytest.raises(RuntimeError, match=r"permute: got \(2x3\) float32; dims \(0, 0\) must be a "
                                           r"permutation"):
        x.permute(0, 0)
    with pytest.raises(RuntimeError, match="flatten: start_dim 1 cannot come after end_dim 0"):
        x.flatten(1, 0)
    with pytest.raises(RuntimeError, match=r"unflatten: sizes \(2, 2\) don't multiply up to the size of "
                                           r"dimension 1 \(3\)"):
        x.unflatten(1, (2, 2))
    with pytest.raises(RuntimeError, match="movedim: source .* and destination .* same number"):
        eagerc.movedim(x, (0, 1), 0)
    with pytest.raises(RuntimeError, match="movedim: .*repeats a dimension"):
        eagerc.movedim(x, (0, 0), (0, 1))
    with pytest.raises(RuntimeError, match="flip: .*repeats a dimension"):
        x.flip(0, -2)
    with pytest.raises(RuntimeError, match="roll: shifts and dims must align"):
        x.roll((1, 2), 0)


def test_narrow_and_slice_errors():
    x = ones(5, 2)
    with pytest.raises(RuntimeError, match=r"narrow: start \(3\) \+ length \(4\) exceeds the size \(5\) of "
                                           r"dimension 0 \(shape \(5x2\)\)"):
        x.narrow(0, 3, 4)
    with pytest.raises(IndexError, match=r"narrow: start 6 is out of range .*\[-5, 5\]"):
        x.narrow(0, 6, 0)
    with pytest.raises(RuntimeError, match="narrow: cannot be applied to a 0-dim tensor"):
        eagerc.tensor(1.0).narrow(0, 0, 1)
    with pytest.raises(ValueError, match="slice: .*step must be positive, got -1"):
        apply(OPS["slice"], (x,), {"dim": 0, "start": 0, "stop": 5, "step": -1})
    with pytest.raises(RuntimeError, match=r"slice_scatter: got \(5x2\) float32, \(2x2\) float32; expected "
                                           r"src to have the shape of the slice .*\(3x2\)"):
        eagerc.slice_scatter(x, ones(2, 2), 0, 0, 3)


def test_diagonal_tri_repeat_errors():
    with pytest.raises(RuntimeError, match=r"diagonal: expected a tensor with at least 2 dimensions, got "
                                           r"shape \(3\)"):
        ones(3).diagonal()
    with pytest.raises(RuntimeError, match="diagonal: dim1 and dim2 cannot be the same dimension"):
        ones(3, 3).diagonal(0, 1, -1)
    # tril/triu/repeat are explained by their shape rules when the kernel fails
    with pytest.raises(RuntimeError, match=r"tril: got \(3\) float32; expected a tensor with at least 2 "
                                           r"dimensions"):
        ones(3).tril()
    with pytest.raises(RuntimeError, match=r"repeat: got \(2x3\) float32; the number of repeat sizes .*"
                                           r"can not be smaller than the number of dimensions"):
        ones(2, 3).repeat(2)
    with pytest.raises(RuntimeError, match=r"diagonal_scatter: .*expected src to have the shape of the "
                                           r"diagonal .*\(2\)"):
        eagerc.diagonal_scatter(ones(2, 3), ones(3))


# ---------------------------------------------------------------- views and copies

def test_views_share_memory_and_version_counter():
    x = eagerc.arange(12.0).reshape(3, 4)
    for v in (x.narrow(1, 1, 2), x.diagonal(), x.unflatten(1, (2, 2)), x.movedim(0, 1),
              *x.split(2, 1), *x.chunk(3), *x.unbind(1)):
        assert np.shares_memory(v._array, x._array)
        assert v._vc is x._vc


def test_writes_through_views_reach_the_base():
    x = eagerc.arange(9.0).reshape(3, 3)
    x.diagonal().fill_(0)  # the torch idiom: numpy's diagonals are read-only, ours are not
    np.testing.assert_array_equal(x.numpy(), np.arange(9.0).reshape(3, 3) * (1 - np.eye(3)))
    x.narrow(0, 1, 1).fill_(7)
    assert (x.numpy()[1] == 7).all()
    x.unbind(1)[2].fill_(-1)
    assert (x.numpy()[:, 2] == -1).all()


def test_flip_roll_repeat_are_copies():
    x = eagerc.arange(4.0)
    for y in (x.flip(0), x.roll(1), x.repeat(2), x.reshape(2, 2).tril(), eagerc.cat([x, x])):
        assert not np.shares_memory(y._array, x._array)
        y.fill_(5)
    np.testing.assert_array_equal(x.numpy(), np.arange(4.0))


def test_modified_view_fails_backward_loudly():
    x = eagerc.ones(3, 4, requires_grad=True)
    y = x * 2
    z = y.narrow(1, 0, 2)
    w = (z * z).sum()  # mul saves z
    y.fill_(1.0)  # bumps the version counter y shares with z
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.backward()


def test_cat_grads_flow_only_to_inputs_that_need_them():
    a = eagerc.ones(2, 3, requires_grad=True)
    b = eagerc.ones(2, 2)
    (eagerc.cat([a, b], 1) * eagerc.arange(5.0)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.tile(np.arange(3.0), (2, 1)))
    assert b.grad is None


def test_higher_order_through_slices():
    x = eagerc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x.narrow(0, 1, 2) ** 3).sum()
    (g,) = eagerc.autograd.grad(y, x, create_graph=True)
    (gg,) = eagerc.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), [0.0, 12.0, 18.0])
