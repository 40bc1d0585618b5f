"""Tests for eagerc.runtime.random: the stream is Philox4x64-10 as specified, the fast
path equals the reference, and every derived distribution equals its documented
formula computed independently here (with Python ints / math)."""

import math

import numpy as np
import pytest

from eagerc.runtime import random as rnd

MASK = 2**64 - 1


# ------------------------------------------------------------------ independent oracle

def philox_scalar(ctr, key):
    """Philox4x64-10 with plain Python ints: a third implementation, sharing no code
    (and no 32-bit-halves trick) with the module."""
    c, (k0, k1) = list(ctr), key
    for _ in range(10):
        p0, p1 = rnd.M0 * c[0], rnd.M1 * c[2]
        c = [(p1 >> 64) ^ c[1] ^ k0, p1 & MASK, (p0 >> 64) ^ c[3] ^ k1, p0 & MASK]
        k0, k1 = (k0 + rnd.W0) & MASK, (k1 + rnd.W1) & MASK
    return c


def words_scalar(seed, offset, n):
    seed &= MASK
    return [philox_scalar((i // 4, 0, 0, 0), (seed, 0))[i % 4] for i in range(offset, offset + n)]


class NotNumpy:
    """An array module that is not `numpy` itself, so the module takes its generic
    (cupy) path -- exercising that code on machines without a GPU."""
    def __getattr__(self, name):
        return getattr(np, name)


SEEDS = [0, 1, 42, rnd.DEFAULT_SEED, 2**63, 2**63 + 12345, MASK]
RANGES = [(0, 0), (0, 1), (0, 4), (1, 1), (3, 2), (5, 17), (4, 8), (7, 33), (1001, 250),
          (2**40 + 3, 9)]


# ------------------------------------------------------------------ the stream itself

# Random123 kat_vectors, philox4x64 10 rounds: (counter, key, output)
KAT = [
    ((0, 0, 0, 0), (0, 0),
     (0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B)),
    ((MASK,) * 4, (MASK, MASK),
     (0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0)),
    ((0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89),
     (0x452821E638D01377, 0xBE5466CF34E90C6C),
     (0xA528F45403E61D95, 0x38C72DBD566E9788, 0xA5A1610E72FD18B5, 0x57BD43B5E52B7FE6)),
]


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_known_answers(ctr, key, expected):
    lanes = rnd.philox4x64_10([np.array([c], np.uint64) for c in ctr], key)
    assert [int(l[0]) for l in lanes] == list(expected)
    assert philox_scalar(ctr, key) == list(expected)
    # numpy's Philox increments its counter before generating, so start one below
    c = (sum(v << (64 * i) for i, v in enumerate(ctr)) - 1) % 2**256
    bg = np.random.Philox(counter=c, key=key[0] | key[1] << 64)
    assert bg.random_raw(4).tolist() == list(expected)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("offset,n", RANGES)
def test_fast_path_matches_reference(seed, offset, n):
    fast = rnd.philox_words(seed, offset, n)
    ref = rnd.philox_words(seed, offset, n, xp=NotNumpy())
    assert fast.dtype == ref.dtype == np.uint64 and fast.shape == (n,)
    assert fast.tolist() == ref.tolist() == words_scalar(seed, offset, n)


def test_fast_path_matches_reference_large():
    for seed, offset in [(7, 0), (2**63 + 1, 3), (MASK, 2**62 + 1)]:
        fast = rnd.philox_words(seed, offset, 10_001)
        np.testing.assert_array_equal(fast, rnd._reference_words(seed & MASK, offset, 10_001, np))


def test_seed_taken_mod_2_64():
    np.testing.assert_array_equal(rnd.philox_words(-1, 5, 9), rnd.philox_words(MASK, 5, 9))
    np.testing.assert_array_equal(rnd.philox_words(2**64 + 3, 0, 9), rnd.philox_words(3, 0, 9))


def test_bad_range_rejected():
    with pytest.raises(ValueError):
        rnd.philox_words(0, -1, 4)


@pytest.mark.parametrize("split", [0, 1, 3, 4, 5, 50, 99])
def test_split_draw_equals_one_draw(split):
    whole = rnd.philox_words(9, 6, 100)
    parts = np.concatenate([rnd.philox_words(9, 6, split), rnd.philox_words(9, 6 + split, 100 - split)])
    np.testing.assert_array_equal(parts, whole)
    u = rnd.uniform(9, 6, 100, np.float32)
    np.testing.assert_array_equal(
        np.concatenate([rnd.uniform(9, 6, split, np.float32),
                        rnd.uniform(9, 6 + split, 100 - split, np.float32)]), u)


def test_stream_is_pure_function_of_seed_and_offset():
    a = rnd.philox_words(3, 10, 20)
    rnd.philox_words(4, 0, 1000)  # unrelated draws in between change nothing
    np.testing.assert_array_equal(rnd.philox_words(3, 10, 20), a)
    assert not np.array_equal(rnd.philox_words(4, 10, 20), a)


# ------------------------------------------------------------------ distributions

@pytest.mark.parametrize("xp", [np, NotNumpy()], ids=["numpy", "generic"])
def test_uniform_formula(xp):
    seed, off, n = 2**63 + 5, 3, 1000
    w = words_scalar(seed, off, n)
    u64 = rnd.uniform(seed, off, (10, 100), np.float64, xp)
    u32 = rnd.uniform(seed, off, (10, 100), np.float32, xp)
    u16 = rnd.uniform(seed, off, (10, 100), np.float16, xp)
    assert (u64.dtype, u32.dtype, u16.dtype) == (np.float64, np.float32, np.float16)
    assert u64.shape == (10, 100)
    assert u64.ravel().tolist() == [(x >> 11) / 2**53 for x in w]
    assert u32.ravel().tolist() == [(x >> 40) / 2**24 for x in w]
    assert u16.ravel().tolist() == [(x >> 53) / 2**11 for x in w]


def test_uniform_float16_stays_below_one():
    # casting the float32 value would round values >= 1 - 2**-12 up to 1.0
    u = rnd.uniform(0, 0, 200_000, np.float16)
    assert u.max() < 1 and u.min() >= 0


def test_uniform_statistics():
    for dtype in (np.float64, np.float32):
        u = rnd.uniform(11, 0, 200_000, dtype).astype(np.float64)
        assert 0 <= u.min() and u.max() < 1
        se = math.sqrt(1 / 12 / u.size)
        assert abs(u.mean() - 0.5) < 5 * se
        assert abs(u.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / u.size)
        counts = np.bincount((u * 20).astype(int), minlength=20)
        chi2 = ((counts - u.size / 20) ** 2 / (u.size / 20)).sum()
        assert chi2 < 50  # 19 dof: p < 1e-4


def normal_scalar(w1, w2):
    u1 = ((w1 >> 11) + 1) / 2**53
    u2 = (w2 >> 11) / 2**53
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


@pytest.mark.parametrize("xp", [np, NotNumpy()], ids=["numpy", "generic"])
def test_normal_formula(xp):
    seed, off, n = 77, 5, 2000
    w = words_scalar(seed, off, 2 * n)
    ref = np.array([normal_scalar(w[2 * i], w[2 * i + 1]) for i in range(n)])
    z64 = rnd.normal(seed, off, (n,), np.float64, xp)
    z32 = rnd.normal(seed, off, (n,), np.float32, xp)
    assert z64.dtype == np.float64 and z32.dtype == np.float32
    # numpy's SIMD log/cos need not be correctly rounded, nor is libm's: allow an ulp or two
    np.testing.assert_allclose(z64, ref, rtol=1e-14, atol=1e-15)
    np.testing.assert_array_equal(z32, z64.astype(np.float32))
    np.testing.assert_allclose(z32, ref.astype(np.float32), rtol=2e-7, atol=1e-7)


def test_normal_extremes_are_finite():
    # u1 is in (0, 1]: the largest word gives u1 = 1 (z = 0), word 0 gives u1 = 2**-53
    assert normal_scalar(MASK, 0) == 0.0
    assert math.isfinite(normal_scalar(0, 0)) and normal_scalar(0, 0) > 8
    z = rnd.normal(5, 0, 100_000, np.float32)
    assert np.isfinite(z).all()


def test_normal_statistics():
    z = rnd.normal(12, 0, 200_000, np.float64)
    n = z.size
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs((z**3).mean()) < 5 * math.sqrt(15 / n)       # skewness
    assert abs((z**4).mean() - 3) < 5 * math.sqrt(96 / n)    # kurtosis
    assert abs((np.abs(z) < 1.959964).mean() - 0.95) < 5 * math.sqrt(0.95 * 0.05 / n)


def test_words_used():
    assert rnd.words_used("uniform", 7) == rnd.words_used("integers", 7) == 7
    assert rnd.words_used("permutation", 7) == 7 and rnd.words_used("normal", 7) == 14
    with pytest.raises(ValueError):
        rnd.words_used("poisson", 3)
    # a normal draw really consumes 2n words: element i depends on words 2i, 2i+1 only
    a = rnd.normal(1, 0, 6, np.float64)
    b = rnd.normal(1, rnd.words_used("normal", 2), 4, np.float64)
    np.testing.assert_array_equal(a[2:], b)


@pytest.mark.parametrize("xp", [np, NotNumpy()], ids=["numpy", "generic"])
@pytest.mark.parametrize("low,high,dtype", [(0, 10, np.int64), (-5, 3, np.int32),
                                            (0, 2, np.uint8), (2**40, 2**40 + 7, np.int64),
                                            (-2**63, 2**63, np.int64)])
def test_integers_formula(xp, low, high, dtype):
    seed, off, n = 2**63 + 9, 1, 500
    w = words_scalar(seed, off, n)
    r = rnd.integers(seed, off, (5, 100), low, high, dtype, xp)
    assert r.dtype == dtype and r.shape == (5, 100)
    expect = [((low + x % (high - low)) + 2**63) % 2**64 - 2**63 for x in w]
    assert r.ravel().tolist() == expect
    assert low <= r.min() and r.max() < high


def test_integers_cover_range_evenly():
    r = rnd.integers(3, 0, 60_000, -3, 3, np.int64)
    counts = np.bincount(r + 3, minlength=6)
    assert counts.size == 6 and (abs(counts - 10_000) < 500).all()
    with pytest.raises(ValueError):
        rnd.integers(3, 0, 4, 5, 5, np.int64)


@pytest.mark.parametrize("xp", [np, NotNumpy()], ids=["numpy", "generic"])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_permutation(xp, n):
    seed, off = 21, 6
    p = rnd.permutation(seed, off, n, xp)
    w = words_scalar(seed, off, n)
    assert p.tolist() == sorted(range(n), key=lambda i: (w[i], i))
    assert sorted(p.tolist()) == list(range(n))


# ------------------------------------------------------------------ generator state

def test_generator_state_round_trip():
    g = rnd.Generator(seed=2**63 + 7)
    assert g.device == "cpu" and g.initial_seed() == 2**63 + 7 and g.offset == 0
    assert g.next_offset(10) == 0 and g.next_offset(3) == 10 and g.offset == 13
    state = g.get_state()
    assert state.dtype == np.uint64 and state.tolist() == [2**63 + 7, 13]
    first = rnd.uniform(g.initial_seed(), g.next_offset(5), 5, np.float64)
    g.set_state(state)
    assert (g.initial_seed(), g.offset) == (2**63 + 7, 13)
    np.testing.assert_array_equal(rnd.uniform(g.initial_seed(), g.next_offset(5), 5, np.float64), first)
    assert not hasattr(g, "__dict__")


def test_manual_seed_reproducible():
    g = rnd.Generator()
    assert g.initial_seed() == rnd.DEFAULT_SEED == 67280421310721
    assert g.manual_seed(-1) is g and g.initial_seed() == MASK
    g.next_offset(8)
    assert g.manual_seed(123).offset == 0

    def draw():
        return rnd.normal(g.initial_seed(), g.next_offset(rnd.words_used("normal", 4)), 4, np.float64)

    a = [draw(), draw()]
    g.manual_seed(123)
    b = [draw(), draw()]
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], a[1])
    np.testing.assert_array_equal(a[0], rnd.normal(123, 0, 4, np.float64))


def test_default_generator_and_nondeterministic_seed():
    saved = rnd.default_generator.get_state()
    try:
        assert rnd.manual_seed(5) is rnd.default_generator
        assert rnd.default_generator.initial_seed() == 5 and rnd.default_generator.offset == 0
        g = rnd.Generator(device="cuda:0")
        s1, s2 = g.seed(), g.seed()
        assert s1 != s2 and g.initial_seed() == s2 and 0 <= s2 < 2**64 and g.offset == 0
        assert g.device == "cuda:0"
    finally:
        rnd.default_generator.set_state(saved)


# ------------------------------------------------------------------ GPU (cupy)

def _cupy():
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("no CUDA device")
    return cupy


@pytest.mark.cuda
def test_cupy_bit_identical():
    cp = _cupy()
    for seed, off, n in [(0, 0, 9), (2**63 + 1, 3, 10_001)]:
        np.testing.assert_array_equal(cp.asnumpy(rnd.philox_words(seed, off, n, cp)),
                                      rnd.philox_words(seed, off, n))
        for dtype in (np.float64, np.float32, np.float16):
            np.testing.assert_array_equal(cp.asnumpy(rnd.uniform(seed, off, n, dtype, cp)),
                                          rnd.uniform(seed, off, n, dtype))
        np.testing.assert_array_equal(cp.asnumpy(rnd.integers(seed, off, n, -3, 1000, np.int32, cp)),
                                      rnd.integers(seed, off, n, -3, 1000, np.int32))
        np.testing.assert_array_equal(cp.asnumpy(rnd.permutation(seed, off, n, cp)),
                                      rnd.permutation(seed, off, n))
        np.testing.assert_allclose(cp.asnumpy(rnd.normal(seed, off, n, np.float64, cp)),
                                   rnd.normal(seed, off, n, np.float64), rtol=1e-14, atol=1e-15)
