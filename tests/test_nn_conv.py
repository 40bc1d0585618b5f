"""Convolution, pooling and upsampling layers: modules, argument forms, output sizes,
default initialisation, error messages, and (when installed) agreement with PyTorch.

Values are checked against the loop references in tests/op_cases/conv.py (the op
table runs the generic forward/float32/gradcheck/shape-rule tests on the functionals).
"""
import math

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
import eagerc.nn.functional as F
from eagerc.runtime.ops import OPS
from eagerc.runtime.ops.meta import Spec
from eagerc.runtime import dtypes
from op_cases.conv import (ref_adaptive_avg_pool2d, ref_avg_pool2d, ref_conv2d, ref_conv_transpose2d,
                           ref_max_pool2d, ref_nearest)


def T(a, requires_grad=False):
    return eagerc.tensor(np.asarray(a), requires_grad=requires_grad)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def close(a, b, tol=1e-10):
    a = a.detach().numpy() if isinstance(a, eagerc.Tensor) else np.asarray(a)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# ---------------------------------------------------------------- modules

def test_conv2d_module_matches_reference_and_has_pytorch_shapes():
    m = nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=1, dilation=(1, 2))
    assert tuple(m.weight.shape) == (4, 3, 3, 2) and tuple(m.bias.shape) == (4,)
    assert m.weight.dtype == eagerc.float32
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    x = rand(2, 3, 6, 7)
    y = m(T(x.astype(np.float32)))
    assert y.dtype == eagerc.float32
    ref = ref_conv2d(x, m.weight.detach().numpy().astype(np.float64), m.bias.detach().numpy().astype(np.float64),
                     (2, 1), 1, (1, 2))
    close(y, ref, 1e-5)


def test_conv_modules_double_precision_and_no_bias():
    m = nn.Conv2d(2, 6, 3, groups=2, bias=False, dtype=eagerc.float64)
    assert m.bias is None and tuple(m.weight.shape) == (6, 1, 3, 3)
    x = rand(1, 2, 5, 5)
    close(m(T(x)), ref_conv2d(x, m.weight.detach().numpy(), None, groups=2))
    c1 = nn.Conv1d(3, 5, 3, stride=2, padding=2, dtype=eagerc.float64)
    assert tuple(c1.weight.shape) == (5, 3, 3)
    x1 = rand(2, 3, 9)
    ref = ref_conv2d(x1[:, :, None], c1.weight.detach().numpy()[:, :, None], c1.bias.detach().numpy(), (1, 2), (0, 2))
    close(c1(T(x1)), ref[:, :, 0])


def test_module_reprs_match_pytorch():
    assert repr(nn.Conv2d(1, 16, 3)) == "Conv2d(1, 16, kernel_size=(3, 3), stride=(1, 1))"
    assert repr(nn.Conv2d(2, 4, (3, 5), stride=2, padding=1, dilation=2, groups=2, bias=False,
                          padding_mode="reflect")) == (
        "Conv2d(2, 4, kernel_size=(3, 5), stride=(2, 2), padding=(1, 1), dilation=(2, 2), groups=2, "
        "bias=False, padding_mode=reflect)")
    assert repr(nn.Conv1d(2, 3, 3, padding="same")) == "Conv1d(2, 3, kernel_size=(3,), stride=(1,), padding=same)"
    assert repr(nn.ConvTranspose2d(3, 6, 3, stride=2, output_padding=1, groups=3)) == (
        "ConvTranspose2d(3, 6, kernel_size=(3, 3), stride=(2, 2), output_padding=(1, 1), groups=3)")
    assert repr(nn.MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    assert repr(nn.MaxPool1d(3, 2)) == "MaxPool1d(kernel_size=3, stride=2, padding=0, dilation=1, ceil_mode=False)"
    assert repr(nn.AvgPool2d(3, padding=1)) == "AvgPool2d(kernel_size=3, stride=3, padding=1)"
    assert repr(nn.AdaptiveAvgPool2d((None, 3))) == "AdaptiveAvgPool2d(output_size=(None, 3))"
    assert repr(nn.Upsample(scale_factor=2)) == "Upsample(scale_factor=2.0, mode='nearest')"
    assert repr(nn.Upsample(size=(4, 5))) == "Upsample(size=(4, 5), mode='nearest')"
    seq = nn.Sequential(nn.Conv2d(1, 4, 3), nn.MaxPool2d(2))
    assert repr(seq) == ("Sequential(\n  (0): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1))\n"
                         "  (1): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n)")


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv2d_padding_modes_pad_explicitly(mode):
    m = nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode, dtype=eagerc.float64)
    x = T(rand(1, 2, 4, 5))
    expected = F.conv2d(F.pad(x, (2, 2, 1, 1), mode=mode), m.weight, m.bias)
    close(m(x), expected.detach().numpy())
    assert tuple(m(x).shape) == (1, 3, 4, 7)


def test_modules_state_dict_round_trip_and_gradients():
    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 2, 3),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
    assert list(m.state_dict()) == ["0.weight", "0.bias", "3.weight", "3.bias"]
    x = eagerc.randn(3, 1, 8, 8)
    m(x).sum().backward()
    for p in m.parameters():
        assert p.grad is not None and p.grad.shape == p.shape


# ---------------------------------------------------------------- arguments and output sizes

@pytest.mark.parametrize("k,d", [(1, 1), (3, 1), (2, 1), (4, 1), (3, 2), (2, 3)])
def test_same_padding_keeps_the_size(k, d):
    x = rand(2, 2, 7, 6)
    w = rand(3, 2, k, k + 1)
    y = F.conv2d(T(x), T(w), padding="same", dilation=d)
    assert tuple(y.shape) == (2, 3, 7, 6)
    close(y, ref_conv2d(x, w, None, 1, "same", d))
    y1 = F.conv1d(T(x[:, :, 0]), T(w[:, :, 0]), padding="same", dilation=d)
    assert tuple(y1.shape) == (2, 3, 6)
    m = nn.Conv2d(2, 3, k, padding="same", dilation=d)
    assert tuple(m(eagerc.randn(1, 2, 5, 4)).shape) == (1, 3, 5, 4)


def test_groups_equal_separate_convolutions():
    x, w, b = rand(2, 6, 5, 5), rand(9, 2, 3, 3), rand(9)
    y = F.conv2d(T(x), T(w), T(b), padding=1, groups=3).numpy()
    for g in range(3):
        part = F.conv2d(T(x[:, 2 * g:2 * g + 2]), T(w[3 * g:3 * g + 3]), T(b[3 * g:3 * g + 3]), padding=1)
        close(y[:, 3 * g:3 * g + 3], part.numpy())


@pytest.mark.parametrize("stride,padding,dilation", [(1, 0, 1), (2, 0, 1), (3, 1, 1), ((2, 1), (1, 0), (2, 1)),
                                                     (1, 2, 3), (2, 2, 2)])
def test_conv_output_sizes(stride, padding, dilation):
    x = rand(1, 2, 9, 8)
    w = rand(3, 2, 3, 2)
    y = F.conv2d(T(x), T(w), stride=stride, padding=padding, dilation=dilation)
    s, p, d = [v if isinstance(v, tuple) else (v, v) for v in (stride, padding, dilation)]
    expect = tuple((n + 2 * pi - di * (k - 1) - 1) // si + 1 for n, k, si, pi, di in zip((9, 8), (3, 2), s, p, d))
    assert tuple(y.shape) == (1, 3) + expect
    close(y, ref_conv2d(x, w, None, stride, padding, dilation))


@pytest.mark.parametrize("stride,padding,output_padding,dilation", [
    (1, 0, 0, 1), (2, 0, 0, 1), (2, 1, 1, 1), (3, 1, 2, 1), ((2, 3), (0, 1), (1, 0), (1, 2)), (1, 1, 1, 2)])
def test_conv_transpose_output_sizes(stride, padding, output_padding, dilation):
    x, w, b = rand(2, 3, 4, 3), rand(3, 2, 3, 2), rand(2)
    y = F.conv_transpose2d(T(x), T(w), T(b), stride, padding, output_padding, 1, dilation)
    s, p, op, d = [v if isinstance(v, tuple) else (v, v) for v in (stride, padding, output_padding, dilation)]
    expect = tuple((n - 1) * si - 2 * pi + di * (k - 1) + opi + 1
                   for n, k, si, pi, opi, di in zip((4, 3), (3, 2), s, p, op, d))
    assert tuple(y.shape) == (2, 2) + expect
    close(y, ref_conv_transpose2d(x, w, b, stride, padding, output_padding, 1, dilation))


def test_conv_transpose_is_the_adjoint_of_conv():
    x, w = rand(2, 3, 7, 6), rand(4, 3, 3, 3)
    y = F.conv2d(T(x), T(w), stride=2, padding=1).numpy()
    z = rand(*y.shape, seed=1)
    back = F.conv_transpose2d(T(z), T(w), stride=2, padding=1, output_padding=(0, 1)).numpy()
    assert back.shape == x.shape
    assert np.isclose((y * z).sum(), (x * back).sum())


def test_conv_transpose_module_output_size():
    m = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)
    x = eagerc.randn(1, 3, 4, 4)
    assert tuple(m(x).shape) == (1, 2, 7, 7)
    assert tuple(m(x, output_size=(8, 8)).shape) == (1, 2, 8, 8)
    assert tuple(m(x, output_size=[1, 2, 8, 7]).shape) == (1, 2, 8, 7)
    with pytest.raises(ValueError, match="valid sizes range from 7 to 8"):
        m(x, output_size=(9, 9))
    m1 = nn.ConvTranspose1d(2, 4, 3, stride=2)
    assert tuple(m1.weight.shape) == (2, 4, 3)
    assert tuple(m1(eagerc.randn(3, 2, 5)).shape) == (3, 4, 11)


def test_unbatched_inputs():
    x, w, b = rand(2, 5, 5), rand(3, 2, 3, 3), rand(3)
    close(F.conv2d(T(x), T(w), T(b)), ref_conv2d(x[None], w, b)[0])
    assert tuple(F.conv1d(T(x[:, 0]), T(w[:, :, 0])).shape) == (3, 3)
    assert tuple(F.conv_transpose2d(T(rand(3, 2, 2)), T(rand(3, 1, 2, 2))).shape) == (1, 3, 3)
    assert tuple(F.max_pool2d(T(x), 2).shape) == (2, 2, 2)
    assert tuple(F.avg_pool2d(T(x), 2).shape) == (2, 2, 2)
    assert tuple(F.adaptive_avg_pool2d(T(x), 3).shape) == (2, 3, 3)
    assert tuple(nn.MaxPool1d(2)(T(x[0])).shape) == (5, 2)


# ---------------------------------------------------------------- pooling

@pytest.mark.parametrize("k,s,p,d,ceil", [(2, None, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 1, True),
                                          ((2, 3), (1, 2), (1, 1), (2, 1), True), (3, 3, 1, 1, True)])
def test_max_pool_with_padding_and_ceil_mode(k, s, p, d, ceil):
    x = rand(2, 3, 7, 8)
    y, idx = F.max_pool2d(T(x), k, s, p, d, ceil_mode=ceil, return_indices=True)
    ref, ref_idx = ref_max_pool2d(x, k, s, p, d, ceil)
    close(y, ref)
    assert idx.dtype == eagerc.int64
    np.testing.assert_array_equal(idx.numpy(), ref_idx)
    m = nn.MaxPool2d(k, s, p, d, return_indices=True, ceil_mode=ceil)
    close(m(T(x))[0], ref)


def test_max_pool_ties_route_the_gradient_to_the_first_maximum():
    x = T(np.zeros((1, 1, 4, 4)), requires_grad=True)  # every window is a four-way tie
    F.max_pool2d(x, 2).sum().backward()
    expected = np.zeros((4, 4))
    expected[::2, ::2] = 1
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], expected)
    # overlapping windows: each window's first maximum, accumulated where windows share it
    x = T(np.ones((1, 1, 3, 3)), requires_grad=True)
    F.max_pool2d(x, 2, 1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[1, 1, 0], [1, 1, 0], [0, 0, 0]])
    x = T(np.array([[[[0.0, 0.0, 0.0], [0.0, 2.0, 2.0], [0.0, 2.0, 0.0]]]]), requires_grad=True)
    F.max_pool2d(x, 2, 1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[0, 0, 0], [0, 4, 0], [0, 0, 0]])
    _, idx = F.max_pool2d(x, 2, 1, return_indices=True)
    np.testing.assert_array_equal(idx.numpy()[0, 0], [[4, 4], [4, 4]])


def test_max_pool_relu_zeros_and_nan():
    x = T(np.array([[[[0.0, 0.0], [0.0, 0.0]], [[1.0, np.nan], [2.0, 0.0]]]]), requires_grad=True)
    y = F.max_pool2d(x, 2)
    assert y.detach().numpy()[0, 0, 0, 0] == 0 and np.isnan(y.detach().numpy()[0, 1, 0, 0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 1], [[0, 1], [0, 0]])  # the NaN takes the gradient


def test_max_pool1d_module_and_indices():
    x = rand(2, 3, 9)
    y, idx = nn.MaxPool1d(3, 2, 1, return_indices=True)(T(x))
    ref, ref_idx = ref_max_pool2d(x[:, :, None], (1, 3), (1, 2), (0, 1))
    close(y, ref[:, :, 0])
    np.testing.assert_array_equal(idx.numpy(), ref_idx[:, :, 0])


@pytest.mark.parametrize("k,s,p,ceil,inc", [(2, None, 0, False, True), (3, 2, 1, False, True),
                                            (3, 2, 1, False, False), (3, 2, 1, True, True), (3, 2, 1, True, False),
                                            ((3, 2), (2, 1), (1, 1), True, False)])
def test_avg_pool_padding_modes(k, s, p, ceil, inc):
    x = rand(2, 2, 7, 6)
    close(F.avg_pool2d(T(x), k, s, p, ceil, inc), ref_avg_pool2d(x, k, s, p, ceil, inc))
    close(nn.AvgPool2d(k, s, p, ceil, inc)(T(x)), ref_avg_pool2d(x, k, s, p, ceil, inc))


@pytest.mark.parametrize("size,out", [((7, 7), (3, 3)), ((10, 5), (4, 3)), ((5, 7), (5, 7)), ((3, 4), (5, 6)),
                                      ((6, 6), (1, 1)), ((9, 13), (2, 5))])
def test_adaptive_avg_pool_non_divisible(size, out):
    x = rand(2, 3, *size)
    y = nn.AdaptiveAvgPool2d(out)(T(x))
    close(y, ref_adaptive_avg_pool2d(x, out))
    # gradient: each input receives 1/len of every window containing it
    xt = T(x, requires_grad=True)
    F.adaptive_avg_pool2d(xt, out).sum().backward()
    eps = np.zeros(size)
    for i in range(out[0]):
        for j in range(out[1]):
            h0, h1 = (i * size[0]) // out[0], math.ceil((i + 1) * size[0] / out[0])
            w0, w1 = (j * size[1]) // out[1], math.ceil((j + 1) * size[1] / out[1])
            eps[h0:h1, w0:w1] += 1 / ((h1 - h0) * (w1 - w0))
    close(xt.grad.numpy()[1, 2], eps)


def test_upsample_and_interpolate():
    x = rand(2, 3, 3, 4)
    close(nn.Upsample(scale_factor=2)(T(x)), ref_nearest(x, (6, 8)))
    close(nn.Upsample(size=(5, 3))(T(x)), ref_nearest(x, (5, 3)))
    close(nn.UpsamplingNearest2d(scale_factor=3)(T(x)), ref_nearest(x, (9, 12)))
    close(F.interpolate(T(x), scale_factor=(2, 1)), ref_nearest(x, (6, 4)))
    # integer tensors upsample too (no gradient needed)
    xi = eagerc.arange(6).reshape(1, 1, 2, 3)
    np.testing.assert_array_equal(F.interpolate(xi, scale_factor=2).numpy()[0, 0],
                                  np.repeat(np.repeat(np.arange(6).reshape(2, 3), 2, 0), 2, 1))
    # the gradient of a 2x upsample sums each 2x2 block
    xt = T(x, requires_grad=True)
    F.interpolate(xt, scale_factor=2).sum().backward()
    close(xt.grad, np.full(x.shape, 4.0))


def test_interpolate_scale_factor_uses_pytorch_source_index():
    # PyTorch's source index for a user scale_factor is floor(dst / scale_factor), not dst * in / out
    x = T(np.arange(5.0).reshape(1, 1, 1, 5))
    y = F.interpolate(x, scale_factor=(1, 1.7))  # 8 outputs, source floor(i / 1.7)
    np.testing.assert_array_equal(y.numpy()[0, 0, 0], [0, 0, 1, 1, 2, 2, 3, 4])
    y = F.interpolate(x, scale_factor=(1, 1.7), recompute_scale_factor=True)  # floor(i * 5 / 8)
    np.testing.assert_array_equal(y.numpy()[0, 0, 0], [0, 0, 1, 1, 2, 3, 3, 4])


# ---------------------------------------------------------------- default initialisation

@pytest.mark.parametrize("make,fan_in", [(lambda: nn.Conv2d(16, 32, 3), 16 * 9),
                                         (lambda: nn.Conv2d(8, 32, (3, 5), groups=4), 2 * 15),
                                         (lambda: nn.Conv1d(6, 12, 5), 30),
                                         (lambda: nn.ConvTranspose2d(8, 24, 3, groups=2), 12 * 9)])
def test_default_init_bounds(make, fan_in):
    eagerc.manual_seed(0)
    m = make()
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.9 * bound  # it fills the interval
    assert abs(w.std() - bound / math.sqrt(3)) < 0.15 * bound / math.sqrt(3)
    assert abs(w.mean()) < 0.1 * bound


def test_reset_parameters_redraws():
    m = nn.Conv2d(2, 3, 3)
    before = m.weight.detach().numpy().copy()
    m.reset_parameters()
    assert not np.array_equal(before, m.weight.detach().numpy())


# ---------------------------------------------------------------- errors

def _raises(exc, match, fn, *args, **kw):
    with pytest.raises(exc, match=match) as info:
        fn(*args, **kw)
    return str(info.value)


def test_in_channels_mismatch_names_the_op_and_the_shapes():
    msg = _raises(RuntimeError, "conv2d", F.conv2d, eagerc.randn(2, 3, 8, 8), eagerc.randn(16, 1, 3, 3))
    assert "(16x1x3x3)" in msg and "(2x3x8x8)" in msg and "1 channels" in msg and "3 channels" in msg
    m = nn.Conv2d(4, 8, 3)
    msg = _raises(RuntimeError, "expected input", m, eagerc.randn(1, 3, 5, 5))
    assert "4 channels, but got 3 channels" in msg
    msg = _raises(RuntimeError, "conv_transpose2d", F.conv_transpose2d, eagerc.randn(1, 2, 4, 4),
                  eagerc.randn(3, 2, 3, 3))
    assert "3 channels" in msg and "(1x2x4x4)" in msg
    _raises(RuntimeError, "groups=2", F.conv2d, eagerc.randn(1, 4, 5, 5), eagerc.randn(4, 1, 3, 3), groups=2)


def test_conv_argument_errors():
    x, w = eagerc.randn(1, 2, 5, 5), eagerc.randn(3, 2, 3, 3)
    _raises(RuntimeError, "kernel can't be greater", F.conv2d, x, eagerc.randn(3, 2, 7, 7))
    _raises(RuntimeError, "bias of shape \\(3\\)", F.conv2d, x, w, eagerc.randn(4))
    _raises(RuntimeError, "same dtype", F.conv2d, x, w.double())
    _raises(TypeError, "got bool", F.conv2d, x > 0, w > 0)
    _raises(RuntimeError, "3D \\(unbatched\\) or 4D \\(batched\\)", F.conv2d, eagerc.randn(5, 5), w)
    _raises(RuntimeError, "4-d weight", F.conv2d, x, eagerc.randn(3, 2, 3))
    _raises(ValueError, "not supported for strided", F.conv2d, x, w, padding="same", stride=2)
    _raises(ValueError, "invalid padding string 'full'", F.conv2d, x, w, padding="full")
    _raises(RuntimeError, "negative padding", F.conv2d, x, w, padding=-1)
    _raises(RuntimeError, "stride should be greater than zero", F.conv2d, x, w, stride=0)
    _raises(RuntimeError, "output padding must be smaller", F.conv_transpose2d, x, eagerc.randn(2, 3, 3, 3),
            stride=2, output_padding=2)
    _raises(ValueError, "in_channels must be divisible by groups", nn.Conv2d, 3, 6, 3, groups=2)
    _raises(ValueError, "out_channels must be divisible by groups", nn.Conv2d, 4, 6, 3, groups=4)
    _raises(ValueError, "padding='same' is not supported for strided", nn.Conv2d, 2, 2, 3, stride=2, padding="same")
    _raises(ValueError, "Invalid padding string", nn.Conv1d, 2, 2, 3, padding="full")
    _raises(ValueError, "padding_mode must be one of", nn.Conv2d, 2, 2, 3, padding_mode="mirror")
    _raises(TypeError, "must be a Tensor", F.conv2d, np.zeros((1, 2, 5, 5)), w)


def test_pool_and_interpolate_errors():
    x = eagerc.randn(1, 2, 4, 4)
    _raises(RuntimeError, "pad should be at most half", F.max_pool2d, x, 2, padding=2)
    msg = _raises(RuntimeError, "max_pool2d", F.max_pool2d, eagerc.randn(1, 2, 2, 2), 3)
    assert "too small" in msg
    _raises(RuntimeError, "avg_pool2d.*too small", F.avg_pool2d, eagerc.randn(1, 1, 1, 1), 2)
    _raises(RuntimeError, "divisor must be not zero", F.avg_pool2d, x, 2, divisor_override=0)
    _raises(RuntimeError, "kernel_size should be greater than zero", F.max_pool2d, x, 0)
    _raises(TypeError, "avg_pool2d.*floating-point.*int64", F.avg_pool2d, x.long(), 2)
    _raises(TypeError, "adaptive_avg_pool2d.*floating-point", F.adaptive_avg_pool2d, x.long(), 2)
    _raises(NotImplementedError, "antialias=True is not implemented", F.interpolate, x, scale_factor=2,
            mode="bilinear", antialias=True)
    _raises(ValueError, "only one of size or scale_factor", F.interpolate, x, size=3, scale_factor=2)
    _raises(ValueError, "either size or scale_factor", F.interpolate, x)
    _raises(ValueError, "align_corners option can only be set", F.interpolate, x, scale_factor=2,
            align_corners=True)
    _raises(RuntimeError, "adaptive_avg_pool2d", F.adaptive_avg_pool2d, eagerc.randn(1, 2, 0, 3), 2)


def test_shape_rules_give_the_eager_errors():
    """The meta rules (used by the tracer and the file loader) reject what eager mode rejects."""
    x, w = Spec((2, 3, 8, 8), dtypes.float32), Spec((16, 1, 3, 3), dtypes.float32)
    with pytest.raises(RuntimeError, match="expected input \\(2x3x8x8\\) to have 1 channels, but got 3"):
        OPS["conv2d"].meta(x, w, 0, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
    spec = OPS["conv2d"].meta(x, Spec((4, 3, 3, 3), dtypes.float32), Spec((4,), dtypes.float32), stride=(2, 2),
                              padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    assert spec == Spec((2, 4, 4, 4), dtypes.float32)
    spec = OPS["max_pool2d"].meta(Spec((2, 3, 7, 7), dtypes.float64), kernel_size=(3, 3), stride=(2, 2),
                                  padding=(1, 1), dilation=(1, 1), ceil_mode=True)
    assert spec.shape == (2, 3, 4, 4)


# ---------------------------------------------------------------- behaviour in training

def test_second_derivative_of_a_small_cnn():
    """Gradient-penalty style double backward through conv, relu, max pool and linear."""
    eagerc.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.Tanh(), nn.MaxPool2d(2), nn.Conv2d(3, 2, 2),
                        nn.Flatten(), nn.Linear(2, 1)).double()
    x = eagerc.randn(2, 1, 4, 4, dtype=eagerc.float64, requires_grad=True)
    assert eagerc.autograd.gradcheck(lambda x: eagerc.autograd.grad(net(x).sum(), x, create_graph=True)[0], [x],
                                     eps=1e-6, atol=1e-5, rtol=1e-3)


def test_a_small_cnn_learns():
    eagerc.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1, 8, 8)).astype(np.float32)
    y = (x[:, 0, :4].sum(axis=(1, 2)) > x[:, 0, 4:].sum(axis=(1, 2))).astype(np.int64)  # top half brighter?
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                        nn.ReLU(), nn.AdaptiveAvgPool2d((2, 1)), nn.Flatten(), nn.Linear(16, 2))
    opt = eagerc.optim.Adam(net.parameters(), lr=0.01)
    xt, yt = T(x), eagerc.tensor(y)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = F.cross_entropy(net(xt), yt)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.5 * first
    with eagerc.no_grad():
        acc = (net(xt).argmax(1).numpy() == y).mean()
    assert acc > 0.9


def test_integer_inputs_like_pytorch():
    xi = eagerc.tensor(np.arange(32).reshape(1, 2, 4, 4))
    wi = eagerc.tensor(np.arange(18).reshape(1, 2, 3, 3) % 3 - 1)
    y = F.conv2d(xi, wi, padding=1)
    assert y.dtype == eagerc.int64
    np.testing.assert_array_equal(y.numpy(), ref_conv2d(xi.numpy(), wi.numpy(), None, 1, 1).astype(np.int64))
    p = F.max_pool2d(xi, 2, padding=1)
    assert p.dtype == eagerc.int64
    np.testing.assert_array_equal(p.numpy(), ref_max_pool2d(xi.numpy(), 2, 2, 1)[0])


def test_no_grad_and_views_of_the_input():
    x = eagerc.randn(2, 2, 6, 6, requires_grad=True)
    with eagerc.no_grad():
        y = F.conv2d(x, eagerc.randn(3, 2, 3, 3))
    assert not y.requires_grad and y.grad_fn is None
    # a non-contiguous input (a transposed view) takes the general im2col path and agrees
    xt = x.detach().transpose(2, 3)
    w = eagerc.randn(3, 2, 3, 3)
    close(F.conv2d(xt, w), F.conv2d(xt.contiguous(), w).numpy(), 1e-5)


def test_larger_batch_float32_matches_reference():
    """The row-wrapped stride-1 path and the strided path at batch sizes the CNN uses."""
    x, w, b = rand(16, 4, 9, 10).astype(np.float32), rand(5, 4, 3, 3).astype(np.float32), rand(5).astype(np.float32)
    for stride, padding in [(1, 0), (1, 1), (2, 1)]:
        y = F.conv2d(T(x), T(w), T(b), stride=stride, padding=padding)
        close(y, ref_conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), stride, padding), 1e-4)


# ---------------------------------------------------------------- against PyTorch (when installed)

CONV_CONFIGS = [dict(), dict(stride=2, padding=1), dict(padding="same", dilation=2), dict(groups=2, padding=(1, 0)),
                dict(stride=(1, 3), dilation=(2, 1))]


@pytest.mark.parametrize("cfg", CONV_CONFIGS, ids=str)
def test_conv2d_against_torch(cfg):
    torch = pytest.importorskip("torch")
    x, w, b = rand(2, 4, 7, 8), rand(6, 4 // cfg.get("groups", 1), 3, 2, seed=1), rand(6, seed=2)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, **cfg)
    g = rand(*ty.shape, seed=3)
    ty.backward(torch.tensor(g))
    ex, ew, eb = T(x, True), T(w, True), T(b, True)
    ey = F.conv2d(ex, ew, eb, **cfg)
    ey.backward(T(g))
    close(ey, ty.detach().numpy(), 1e-9)
    for e, t in ((ex, tx), (ew, tw), (eb, tb)):
        close(e.grad, t.grad.numpy(), 1e-9)


@pytest.mark.parametrize("cfg", [dict(stride=2, padding=1, output_padding=1), dict(groups=2, dilation=2),
                                 dict(stride=(2, 1), padding=(0, 1))], ids=str)
def test_conv_transpose2d_against_torch(cfg):
    torch = pytest.importorskip("torch")
    x, w = rand(2, 4, 4, 3), rand(4, 3, 3, 2, seed=1)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv_transpose2d(tx, tw, **cfg)
    g = rand(*ty.shape, seed=3)
    ty.backward(torch.tensor(g))
    ex, ew = T(x, True), T(w, True)
    ey = F.conv_transpose2d(ex, ew, **cfg)
    ey.backward(T(g))
    close(ey, ty.detach().numpy(), 1e-9)
    close(ex.grad, tx.grad.numpy(), 1e-9)
    close(ew.grad, tw.grad.numpy(), 1e-9)


@pytest.mark.parametrize("name,kw", [("max_pool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
                                     ("max_pool2d", dict(kernel_size=2, dilation=2)),
                                     ("avg_pool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                                         count_include_pad=False)),
                                     ("avg_pool2d", dict(kernel_size=(2, 3), stride=1, padding=1, ceil_mode=True)),
                                     ("adaptive_avg_pool2d", dict(output_size=(3, 5))),
                                     ("interpolate", dict(scale_factor=1.7)),
                                     ("interpolate", dict(size=(4, 11))),
                                     ("interpolate", dict(size=(9, 5), mode="nearest-exact"))])
def test_pooling_against_torch(name, kw):
    torch = pytest.importorskip("torch")
    x = np.round(rand(2, 3, 7, 8) * 2) / 2  # ties for max pooling
    tx = torch.tensor(x, requires_grad=True)
    ty = getattr(torch.nn.functional, name)(tx, **kw)
    g = rand(*ty.shape, seed=3)
    ty.backward(torch.tensor(g))
    ex = T(x, True)
    ey = getattr(F, name)(ex, **kw)
    ey.backward(T(g))
    close(ey, ty.detach().numpy(), 1e-12)
    close(ex.grad, tx.grad.numpy(), 1e-12)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv_modules_against_torch(mode):
    torch = pytest.importorskip("torch")
    tm = torch.nn.Conv2d(3, 4, (3, 2), padding=(1, 2), dilation=(1, 2), padding_mode=mode).double()
    em = nn.Conv2d(3, 4, (3, 2), padding=(1, 2), dilation=(1, 2), padding_mode=mode, dtype=eagerc.float64)
    em.load_state_dict({k: T(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = rand(2, 3, 5, 6)
    close(em(T(x)), tm(torch.tensor(x)).detach().numpy(), 1e-12)
    tt = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2).double()
    et = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2, dtype=eagerc.float64)
    et.load_state_dict({k: T(v.detach().numpy()) for k, v in tt.state_dict().items()})
    z = rand(2, 4, 3, 3)
    close(et(T(z), output_size=(6, 6)), tt(torch.tensor(z), output_size=(6, 6)).detach().numpy(), 1e-12)


def test_first_layer_weight_gradient_at_batch_size():
    """A 1-channel first layer at batch 64 takes the blocked weight-gradient GEMM path."""
    from op_cases.conv import ref_conv2d_grads
    x, w = rand(64, 1, 28, 28), rand(4, 1, 3, 3, seed=1)
    gy = rand(64, 4, 28, 28, seed=2)
    xt, wt = T(x, True), T(w, True)
    F.conv2d(xt, wt, padding=1).backward(T(gy))
    dx, dw = ref_conv2d_grads(x, w, gy, 1, 1)
    close(wt.grad, dw, 1e-8)
    close(xt.grad, dx, 1e-8)


# ---------------------------------------------------------------- 3-d convolutions

def test_conv3d_modules_match_the_references_and_pytorch_reprs():
    from op_cases.conv import ref_conv3d, ref_conv_transpose3d
    m = nn.Conv3d(2, 4, (3, 2, 3), stride=(1, 2, 1), padding=1, dtype=eagerc.float64)
    assert repr(m) == "Conv3d(2, 4, kernel_size=(3, 2, 3), stride=(1, 2, 1), padding=(1, 1, 1))"
    assert m.weight.shape == (4, 2, 3, 2, 3)
    x = rand(2, 2, 4, 5, 3)
    close(m(T(x)), ref_conv3d(x, m.weight.detach().numpy(), m.bias.detach().numpy(), (1, 2, 1), 1), 1e-10)
    t = nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1, groups=2, bias=False, dtype=eagerc.float64)
    assert repr(t) == ("ConvTranspose3d(4, 2, kernel_size=(3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1), "
                       "groups=2, bias=False)")
    z = rand(1, 4, 2, 3, 2)
    y = t(T(z), output_size=(4, 6, 4))
    assert y.shape == (1, 2, 4, 6, 4)
    close(y, ref_conv_transpose3d(z, t.weight.detach().numpy(), None, 2, 1, 1, 2), 1e-10)


def test_conv3d_errors_name_the_op():
    _raises(RuntimeError, "conv3d: expected 4D", F.conv3d, T(rand(2, 3, 4)), T(rand(2, 3, 1, 1, 1)))
    _raises(RuntimeError, "expected a 5-d weight", F.conv3d, T(rand(1, 3, 4, 4, 4)), T(rand(2, 3, 1, 1)))
    _raises(RuntimeError, "conv3d.*expected input .* to have 4 channels", F.conv3d, T(rand(1, 3, 4, 4, 4)),
            T(rand(2, 4, 1, 1, 1)))


@pytest.mark.parametrize("cfg", [dict(), dict(stride=2, padding=1), dict(padding="same", dilation=(1, 2, 1)),
                                 dict(groups=2, padding=(1, 0, 2), stride=(1, 1, 2))], ids=str)
def test_conv3d_against_torch(cfg):
    torch = pytest.importorskip("torch")
    x, w, b = rand(2, 4, 5, 6, 5), rand(6, 4 // cfg.get("groups", 1), 3, 2, 3, seed=1), rand(6, seed=2)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv3d(tx, tw, tb, **cfg)
    g = rand(*ty.shape, seed=3)
    ty.backward(torch.tensor(g))
    ex, ew, eb = T(x, True), T(w, True), T(b, True)
    ey = F.conv3d(ex, ew, eb, **cfg)
    ey.backward(T(g))
    close(ey, ty.detach().numpy(), 1e-9)
    for e, t in ((ex, tx), (ew, tw), (eb, tb)):
        close(e.grad, t.grad.numpy(), 1e-9)
    wt = rand(4, 3, 2, 3, 2, seed=4)   # (C_in, C_out/groups, ...)
    ty = torch.nn.functional.conv_transpose3d(tx, torch.tensor(wt), None, stride=2, output_padding=1, groups=2)
    ey = F.conv_transpose3d(ex, T(wt), None, stride=2, output_padding=1, groups=2)
    close(ey, ty.detach().numpy(), 1e-9)


# ---------------------------------------------------------------- 3-d and adaptive max pooling, resampling, folding

def test_new_modules_match_references_and_pytorch_reprs():
    from op_cases.conv import (ref_adaptive_pool, ref_avg_pool3d, ref_interpolate, ref_max_pool3d, ref_unfold,
                               ref_pixel_shuffle, ref_channel_shuffle)
    x5, x4 = rand(2, 2, 4, 5, 6), rand(2, 8, 4, 6)
    cases = [
        (nn.MaxPool3d(3, 2, 1), x5, ref_max_pool3d(x5, 3, 2, 1)[0],
         "MaxPool3d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)"),
        (nn.AvgPool3d((2, 3, 2), ceil_mode=True), x5, ref_avg_pool3d(x5, (2, 3, 2), ceil_mode=True),
         "AvgPool3d(kernel_size=(2, 3, 2), stride=(2, 3, 2), padding=0)"),
        (nn.AdaptiveAvgPool3d((3, None, 2)), x5, ref_adaptive_pool(x5, (3, None, 2), "avg"),
         "AdaptiveAvgPool3d(output_size=(3, None, 2))"),
        (nn.AdaptiveMaxPool2d((3, 4)), x4, ref_adaptive_pool(x4, (3, 4), "max")[0],
         "AdaptiveMaxPool2d(output_size=(3, 4))"),
        (nn.AdaptiveMaxPool3d(2), x5, ref_adaptive_pool(x5, (2, 2, 2), "max")[0], "AdaptiveMaxPool3d(output_size=2)"),
        (nn.Upsample(scale_factor=2, mode="bicubic", align_corners=True), x4,
         ref_interpolate(x4, (8, 12), align_corners=True, cubic=True), "Upsample(scale_factor=2.0, mode='bicubic')"),
        (nn.UpsamplingBilinear2d(size=(5, 3)), x4, ref_interpolate(x4, (5, 3), align_corners=True),
         "UpsamplingBilinear2d(size=(5, 3), mode='bilinear')"),
        (nn.Unfold((2, 3), padding=1), x4, ref_unfold(x4, (2, 3), 1, 1),
         "Unfold(kernel_size=(2, 3), dilation=1, padding=1, stride=1)"),
        (nn.PixelShuffle(2), x4, ref_pixel_shuffle(x4, 2), "PixelShuffle(upscale_factor=2)"),
        (nn.ChannelShuffle(4), x4, ref_channel_shuffle(x4, 4), "ChannelShuffle(groups=4)"),
    ]
    for module, x, want, text in cases:
        assert repr(module) == text
        close(module(T(x)), want, 1e-10)
    y, idx = nn.AdaptiveMaxPool1d(3, return_indices=True)(T(rand(2, 3, 7)))
    assert idx.dtype == eagerc.int64 and idx.shape == (2, 3, 3)
    fold = nn.Fold((4, 5), 2)
    assert repr(fold) == "Fold(output_size=(4, 5), kernel_size=2, dilation=1, padding=0, stride=1)"
    ones = fold(nn.Unfold(2)(T(np.ones((1, 1, 4, 5)))))   # fold(unfold(x)) counts the blocks covering each pixel
    close(ones[0, 0], np.outer([1, 2, 2, 1], [1, 2, 2, 2, 1]))
    z = rand(2, 3, 6, 4)
    close(F.pixel_shuffle(F.pixel_unshuffle(T(z), 2), 2), z)


def test_interpolate_modes_and_ranks_fail_like_pytorch():
    x = T(rand(1, 2, 4, 4))
    _raises(NotImplementedError, "Got 4D input, but linear mode needs 3D input", F.interpolate, x, scale_factor=2,
            mode="linear")
    _raises(NotImplementedError, "Got 4D input, but trilinear mode needs 5D input", F.interpolate, x, size=3,
            mode="trilinear")
    _raises(NotImplementedError, r"Only 3D, 4D and 5D input .*\(got foo\)", F.interpolate, x, size=3, mode="foo")
    _raises(ValueError, "align_corners option can only be set", F.interpolate, x, size=3, align_corners=True)
    _raises(ValueError, "Anti-alias option is restricted", F.interpolate, x, size=3, mode="area", antialias=True)
    _raises(NotImplementedError, "antialias=True is not implemented", F.interpolate, x, size=3, mode="bilinear",
            antialias=True)
    _raises(NotImplementedError, "not implemented for int64", F.interpolate, T(np.ones((1, 1, 2, 2), np.int64)),
            size=3, mode="bilinear")
    _raises(ValueError, "same number of spatial dimensions", F.interpolate, x, size=(2, 3, 4))


def test_shuffle_fold_and_sampling_errors_name_the_op():
    _raises(RuntimeError, "divisible by the square of upscale_factor, but input.size\\(-3\\)=2 is not divisible by 9",
            F.pixel_shuffle, T(rand(1, 2, 3, 3)), 3)
    _raises(RuntimeError, "at least 3 dimensions", F.pixel_shuffle, T(rand(4, 4)), 2)
    _raises(RuntimeError, "pixel_unshuffle expects height to be divisible", F.pixel_unshuffle, T(rand(1, 1, 4, 4)), 3)
    _raises(RuntimeError, "Got 2 channels and 3 groups", F.channel_shuffle, T(rand(1, 2, 3)), 3)
    _raises(RuntimeError, "number of sliding blocks 3 \\* 4 = 12, but got input.size\\(2\\)=10", F.fold,
            T(rand(1, 4, 10)), (4, 5), 2)
    _raises(RuntimeError, "expected grid to have size 2 in last dimension", F.grid_sample, T(rand(1, 1, 3, 3)),
            T(rand(1, 2, 2, 3)))
    _raises(ValueError, "expected mode to be 'bilinear', 'nearest' or 'bicubic'", F.grid_sample,
            T(rand(1, 1, 3, 3)), T(rand(1, 2, 2, 2)), mode="area")
    _raises(RuntimeError, "bicubic interpolation only supports 4D input", F.grid_sample, T(rand(1, 1, 2, 2, 2)),
            T(rand(1, 2, 2, 2, 3)), mode="bicubic")
    _raises(ValueError, "shape Nx2x3", F.affine_grid, T(rand(1, 2, 2)), (1, 1, 3, 3))
    _raises(RuntimeError, "max_pool3d: expected 4D", F.max_pool3d, T(rand(2, 3, 4)), 2)
    _raises(RuntimeError, "avg_pool3d: given input size .* is too small", F.avg_pool3d, T(rand(1, 1, 1, 4, 4)), 2)


def test_grid_sample_identity_grid_and_nearest_grid_gradient():
    """affine_grid of the identity reproduces the input (align_corners either way); in nearest mode the
    output is piecewise constant in the grid: a zero gradient, as PyTorch's."""
    x = rand(2, 3, 5, 4)
    for ac in (False, True):
        grid = F.affine_grid(T(np.tile(np.eye(2, 3), (2, 1, 1))), (2, 3, 5, 4), align_corners=ac)
        for mode in ("bilinear", "nearest", "bicubic"):
            close(F.grid_sample(T(x), grid, mode=mode, align_corners=ac), x, 1e-12)
    g = T(rand(2, 3, 3, 2) * 0.5, True)
    F.grid_sample(T(x), g, mode="nearest", align_corners=False).sum().backward()
    close(g.grad, np.zeros(g.shape))


def test_resampling_compiles_like_eager():
    x = T(rand(2, 3, 6, 5))
    theta = T(np.tile(np.array([[0.8, -0.2, 0.1], [0.3, 0.9, -0.2]]), (2, 1, 1)))

    def f(x, theta):
        y = F.interpolate(x, scale_factor=1.5, mode="bicubic") + F.interpolate(x, size=(9, 7), mode="bilinear")
        y = F.grid_sample(y, F.affine_grid(theta, (2, 3, 4, 4), align_corners=False), align_corners=False)
        return F.pixel_shuffle(F.adaptive_max_pool2d(F.unfold(y, 2).reshape(2, 12, 3, 3), 2), 2)
    c = eagerc.compile(f)
    c(x, theta)                                        # the first call traces: eager's results
    close(c(x, theta), f(x, theta).numpy(), 1e-12)


def _against_torch(name, shapes, kw, seed=0, ints=False):
    torch = pytest.importorskip("torch")
    arrays = [np.round(rand(*s, seed=seed + i) * 2) / 2 for i, s in enumerate(shapes)]   # ties for max pooling
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    es = [T(a, True) for a in arrays]
    ty, ey = getattr(torch.nn.functional, name)(*ts, **kw), getattr(F, name)(*es, **kw)
    if isinstance(ty, tuple):
        np.testing.assert_array_equal(ey[1].numpy(), ty[1].numpy())
        ty, ey = ty[0], ey[0]
    g = rand(*ty.shape, seed=9)
    ty.backward(torch.tensor(g))
    ey.backward(T(g))
    close(ey, ty.detach().numpy(), 1e-9)
    for e, t in zip(es, ts):
        close(e.grad, t.grad.numpy(), 1e-9)


_RESAMPLE_CONFIGS = [(mode, shape, dict(kw, align_corners=ac))
                     for mode, shape in (("linear", (2, 3, 9)), ("bilinear", (2, 3, 7, 8)), ("bicubic", (2, 3, 7, 8)),
                                         ("trilinear", (2, 2, 5, 6, 4)))
                     for ac in (False, True)
                     for kw in (dict(scale_factor=2), dict(scale_factor=1.7), dict(scale_factor=0.6),
                                dict(scale_factor=0.6, recompute_scale_factor=True))] + \
    [(mode, shape, kw) for mode in ("nearest", "nearest-exact", "area")
     for shape in ((2, 3, 9), (2, 3, 7, 8), (2, 2, 5, 6, 4))
     for kw in (dict(scale_factor=1.7), dict(scale_factor=0.6))]


@pytest.mark.parametrize("mode,shape,kw", _RESAMPLE_CONFIGS, ids=str)
def test_interpolate_against_torch(mode, shape, kw):
    _against_torch("interpolate", [shape], dict(kw, mode=mode))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_and_affine_grid_against_torch(mode, padding_mode, align_corners):
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    _against_torch("grid_sample", [(2, 3, 5, 6), (2, 4, 3, 2)], kw)
    if mode != "bicubic":
        _against_torch("grid_sample", [(1, 2, 4, 5, 3), (1, 2, 3, 3, 3)], kw)
    _against_torch("affine_grid", [(2, 2, 3)], dict(size=(2, 3, 5, 4), align_corners=align_corners))
    _against_torch("affine_grid", [(2, 3, 4)], dict(size=(2, 1, 3, 5, 4), align_corners=align_corners))


@pytest.mark.parametrize("name,shape,kw", [
    ("max_pool3d", (2, 2, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, return_indices=True)),
    ("max_pool3d", (2, 5, 6, 7), dict(kernel_size=(2, 3, 2), stride=(1, 2, 1), dilation=(2, 1, 1))),
    ("avg_pool3d", (2, 2, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ("avg_pool3d", (2, 2, 5, 6, 7), dict(kernel_size=(2, 3, 2), stride=1, divisor_override=5)),
    ("adaptive_avg_pool3d", (2, 2, 5, 6, 7), dict(output_size=(2, None, 4))),
    ("adaptive_max_pool1d", (2, 3, 9), dict(output_size=4, return_indices=True)),
    ("adaptive_max_pool2d", (2, 3, 7, 8), dict(output_size=(3, 5), return_indices=True)),
    ("adaptive_max_pool3d", (2, 2, 5, 6, 7), dict(output_size=(2, 4, 3), return_indices=True)),
    ("unfold", (2, 3, 7, 8), dict(kernel_size=(2, 3), stride=(2, 1), padding=1, dilation=(1, 2))),
    ("fold", (2, 12, 24), dict(output_size=(5, 6), kernel_size=(2, 3), padding=1, dilation=(1, 2))),
    ("pixel_shuffle", (2, 8, 3, 4), dict(upscale_factor=2)),
    ("pixel_unshuffle", (2, 2, 6, 4), dict(downscale_factor=2)),
    ("channel_shuffle", (2, 6, 3, 4), dict(groups=3))], ids=str)
def test_pooling_folding_shuffles_against_torch(name, shape, kw):
    _against_torch(name, [shape], kw)


@pytest.mark.parametrize("cubic", [False, True])
def test_interpolate_axis_gathers_and_dense_matrix_agree(monkeypatch, cubic):
    """Long axes gather 2-4 taps (and sum runs in the adjoint); short ones multiply by the dense
    interpolation matrix: both give the loop reference, forward and backward."""
    from eagerc.runtime.ops import conv as kernels
    from op_cases.conv import ref_interpolate
    x, size = rand(2, 3, 5, 7), (9, 4)
    want = ref_interpolate(x, size, cubic=cubic)
    gy = rand(2, 3, *size, seed=5)
    grads = []
    for dense_max in (kernels.DENSE_MAX, 0):
        monkeypatch.setattr(kernels, "DENSE_MAX", dense_max)
        xt = T(x, True)
        y = F.interpolate(xt, size=size, mode="bicubic" if cubic else "bilinear")
        close(y, want, 1e-12)
        y.backward(T(gy))
        grads.append(xt.grad.numpy())
    close(grads[0], grads[1], 1e-12)


def test_with_indices_forms_and_torch_namespace_names():
    from op_cases.conv import ref_adaptive_pool
    x = rand(2, 3, 5, 7)
    for f in (F.max_pool2d_with_indices, lambda x, k: F.max_pool2d(x, k, return_indices=True)):
        y, idx = f(T(x), 2)
        close(y, ref_max_pool2d(x, 2)[0])
        np.testing.assert_array_equal(idx.numpy(), ref_max_pool2d(x, 2)[1])
    y, idx = F.adaptive_max_pool2d_with_indices(T(x), (2, 3))
    np.testing.assert_array_equal(idx.numpy(), ref_adaptive_pool(x, (2, 3), "max")[1])
    assert F.GRID_SAMPLE_PADDING_MODES == {"zeros": 0, "border": 1, "reflection": 2}
    assert eagerc.conv3d is F.conv3d and eagerc.pixel_shuffle is F.pixel_shuffle
    assert F.native_channel_shuffle is F.channel_shuffle
