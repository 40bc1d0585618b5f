"""eagerc.nn.init: distributions (bounds, mean, std), gains, fans, in-place and no-grad behaviour."""
import math

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn
from eagerc.nn import init


def w(*shape):
    return nn.Parameter(eagerc.empty(*shape))  # requires grad: init must run under no_grad


def stats(t):
    a = t.detach().numpy().astype(np.float64)
    return a, a.mean(), a.std()


def test_calculate_gain():
    assert init.calculate_gain("linear") == 1 and init.calculate_gain("conv2d") == 1
    assert init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01 ** 2)))
    assert init.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    assert init.calculate_gain("selu") == pytest.approx(0.75)
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("swish")


def test_fans():
    assert init._calculate_fan_in_and_fan_out(eagerc.empty(3, 4)) == (4, 3)
    assert init._calculate_fan_in_and_fan_out(eagerc.empty(8, 2, 3, 3)) == (18, 72)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(eagerc.empty(3))


def test_uniform_normal_constant():
    eagerc.manual_seed(0)
    p = w(200, 100)
    assert init.uniform_(p, -2, 3) is p
    a, m, s = stats(p)
    assert a.min() >= -2 and a.max() < 3 and abs(m - 0.5) < 0.05 and abs(s - 5 / math.sqrt(12)) < 0.03
    init.normal_(p, 1.0, 0.5)
    a, m, s = stats(p)
    assert abs(m - 1) < 0.01 and abs(s - 0.5) < 0.01
    init.constant_(p, 0.25)
    assert np.all(p.detach().numpy() == 0.25)
    init.ones_(p)
    assert np.all(p.detach().numpy() == 1)
    init.zeros_(p)
    assert np.all(p.detach().numpy() == 0)
    assert p.requires_grad and p.grad_fn is None


def test_init_uses_the_counter_based_generator():
    g = eagerc.Generator().manual_seed(5)
    a = init.normal_(w(10), generator=g).detach().numpy().copy()
    g.manual_seed(5)
    b = init.normal_(w(10), generator=g).detach().numpy()
    np.testing.assert_array_equal(a, b)
    eagerc.manual_seed(1)
    c = init.uniform_(w(10)).detach().numpy().copy()
    eagerc.manual_seed(1)
    np.testing.assert_array_equal(c, eagerc.rand(10).numpy())


def test_xavier():
    eagerc.manual_seed(0)
    p = w(300, 200)
    init.xavier_uniform_(p, gain=2.0)
    a, m, s = stats(p)
    bound = 2.0 * math.sqrt(6 / 500)
    assert np.abs(a).max() <= bound and np.abs(a).max() > 0.99 * bound
    assert abs(s - bound / math.sqrt(3)) < 0.01 * bound
    init.xavier_normal_(p)
    a, m, s = stats(p)
    assert abs(m) < 0.005 and abs(s - math.sqrt(2 / 500)) / math.sqrt(2 / 500) < 0.02


@pytest.mark.parametrize("mode,fan", [("fan_in", 200), ("fan_out", 300)])
def test_kaiming(mode, fan):
    eagerc.manual_seed(0)
    p = w(300, 200)
    init.kaiming_uniform_(p, mode=mode, nonlinearity="relu")
    a, m, s = stats(p)
    bound = math.sqrt(2) * math.sqrt(3 / fan)
    assert np.abs(a).max() <= bound and np.abs(a).max() > 0.99 * bound
    init.kaiming_normal_(p, a=0.2, mode=mode)
    a, m, s = stats(p)
    std = math.sqrt(2 / (1 + 0.04)) / math.sqrt(fan)
    assert abs(s - std) / std < 0.02 and abs(m) < 0.1 * std
    with pytest.raises(ValueError, match="Mode"):
        init.kaiming_uniform_(p, mode="fan_avg")


def test_kaiming_conv_weight_fan_includes_receptive_field():
    eagerc.manual_seed(0)
    p = w(64, 16, 3, 3)
    init.kaiming_uniform_(p, a=math.sqrt(5))  # Conv2d's default: bound 1/sqrt(16*9)
    assert np.abs(p.detach().numpy()).max() <= 1 / 12 + 1e-7


def test_trunc_normal():
    eagerc.manual_seed(0)
    p = w(100, 100)
    init.trunc_normal_(p, mean=0.5, std=1.0, a=-0.5, b=1.0)
    a, m, s = stats(p)
    assert a.min() >= -0.5 and a.max() <= 1.0
    # mean of N(0.5, 1) truncated to [-0.5, 1]: mu + (phi(alpha) - phi(beta)) / Z
    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))  # noqa: E731
    alpha, beta = -1.0, 0.5
    expected = 0.5 + (phi(alpha) - phi(beta)) / (cdf(beta) - cdf(alpha))
    assert abs(m - expected) < 0.01
    init.trunc_normal_(p, std=0.02)
    a, m, s = stats(p)
    assert np.abs(a).max() <= 2 and abs(s - 0.02) < 0.001


def test_orthogonal():
    eagerc.manual_seed(0)
    for shape in [(6, 4), (4, 6), (5, 2, 3)]:
        p = w(*shape)
        init.orthogonal_(p, gain=2.0)
        flat = p.detach().numpy().reshape(shape[0], -1).astype(np.float64)
        if flat.shape[0] <= flat.shape[1]:
            np.testing.assert_allclose(flat @ flat.T, 4 * np.eye(flat.shape[0]), atol=1e-5)
        else:
            np.testing.assert_allclose(flat.T @ flat, 4 * np.eye(flat.shape[1]), atol=1e-5)
    with pytest.raises(ValueError):
        init.orthogonal_(w(3))


def test_eye_dirac_sparse():
    p = w(3, 4)
    init.eye_(p)
    np.testing.assert_array_equal(p.detach().numpy(), np.eye(3, 4))
    c = w(2, 2, 3)
    init.dirac_(c)
    assert c.detach().numpy()[0, 0, 1] == 1 and c.detach().numpy().sum() == 2
    eagerc.manual_seed(0)
    s = w(10, 4)
    init.sparse_(s, 0.3)
    assert np.all((s.detach().numpy() == 0).sum(0) == 3)


def test_init_inside_no_grad_does_not_record():
    p = w(3, 3)
    init.kaiming_uniform_(p)
    assert p.grad_fn is None and p.is_leaf
    (p * 2).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), np.full((3, 3), 2.0))
