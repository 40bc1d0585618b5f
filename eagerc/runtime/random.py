"""Counter-based random numbers: one stream per seed, shared by every backend.

Why counter-based: the n-th number of a stream is a pure function of (seed, n), so
eager numpy code, generated C kernels and CUDA kernels can all draw the *same*
numbers without sharing any mutable generator state -- a kernel only needs the seed
and the offset at which its draw starts.  A draw of N words at offset o consumes
words o .. o+N-1; the caller (see `Generator.next_offset`) advances the offset.

The stream
----------
For a seed s (any Python int, taken mod 2**64) the stream is the 64-bit words
w[0], w[1], ... where, for block k = 0, 1, ...

    (w[4k], w[4k+1], w[4k+2], w[4k+3]) = Philox4x64-10(counter=(k, 0, 0, 0), key=(s, 0))

with the standard Random123 constants (multipliers M0 = 0xD2E7470EE14C6C93,
M1 = 0xCA5A826395121157; key increments W0 = 0x9E3779B97F4A7C15,
W1 = 0xBB67AE8584CAA73B) and 10 rounds.  Offsets are word offsets and need
offset + n <= 2**66 (the block index lives in counter lane 0 only).

Derived distributions (element i of a draw starting at word offset o; all integer
arithmetic is on uint64, `*` by a power of two is exact):

    uniform float64   (w[o+i] >> 11) * 2**-53                      n words, [0, 1)
    uniform float32   (float)(w[o+i] >> 40) * 2**-24f              n words, [0, 1)
    uniform float16   (half)(w[o+i] >> 53) * 2**-11                n words, [0, 1)
        i.e. (w >> (64 - p)) * 2**-p with p = mantissa bits + 1, computed in the
        target dtype.  Exact for every dtype.  float16 does NOT cast the float32
        value: round-to-nearest would turn values >= 1 - 2**-12 into 1.0 (about one
        element in 4096), breaking the [0, 1) contract.
    normal            u1 = ((w[o+2i] >> 11) + 1) * 2**-53          2n words
                      u2 = (w[o+2i+1] >> 11) * 2**-53
                      z  = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)
        computed in float64 (u1 is in (0, 1], so log is finite), then cast once
        (a single rounding) to the requested dtype.  Box-Muller, cosine branch only,
        so element i depends on words 2i and 2i+1 alone.  Caveat: log and cos are
        not correctly rounded in any libm; numpy's SIMD log differs from glibc's in
        the last float64 bit for a fraction of a percent of inputs.  So normals are
        the same formula everywhere but may differ by ~1 ulp in float64 between
        backends; after the cast to float32 they almost always agree exactly.
    integers          low + (w[o+i] % (high - low))                n words
        (mod 2**64 arithmetic, reinterpreted as int64, then cast to dtype).  Has the
        usual modulo bias, below (high - low) / 2**64 -- negligible for tensor sizes.
    permutation       stable argsort of w[o : o+n]                 n words
        (ties, probability ~ n**2 / 2**65, are broken by index).

Implementations: on numpy, `philox_words` drives numpy's own C `np.random.Philox`
(fast); `philox4x64_10` is a plain vectorised xp-generic reference used by the tests
to prove the fast path equals the specification, and for non-numpy array modules
(cupy has no Philox bit generator).
"""

import math
import os
import threading

import numpy as np
from .dtypes import FLOATING_KINDS

__all__ = [
    "philox4x64_10", "philox_words", "uniform", "normal", "integers", "permutation",
    "words_used", "Generator", "default_generator", "manual_seed", "DEFAULT_SEED",
]

M0, M1 = 0xD2E7470EE14C6C93, 0xCA5A826395121157
W0, W1 = 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B
MASK64 = 2**64 - 1
DEFAULT_SEED = 67280421310721  # PyTorch's default seed


# ---------------------------------------------------------------- reference Philox

def _mulhilo(a, b, xp):
    """(high, low) 64-bit halves of the 128-bit product of the constant a and the
    uint64 array b, using only uint64 arithmetic (32-bit halves, so nothing
    overflows) -- the same trick a C compiler without __int128 would use."""
    m32, s32 = xp.uint64(0xFFFFFFFF), xp.uint64(32)
    a_lo, a_hi = xp.uint64(a & 0xFFFFFFFF), xp.uint64(a >> 32)
    b_lo, b_hi = b & m32, b >> s32
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (ll >> s32) + (lh & m32) + (hl & m32)  # < 3 * 2**32
    hi = hh + (lh >> s32) + (hl >> s32) + (mid >> s32)
    return hi, b * xp.uint64(a)  # uint64 multiply wraps: the low half


def philox4x64_10(counter, key, xp=np):
    """Philox4x64-10 of a batch of counters: `counter` is four uint64 arrays (lanes
    0..3), `key` two ints.  Returns the four output lanes.  Follows Random123's
    philox4x64round: round r uses key + r * (W0, W1)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key[0] & MASK64, key[1] & MASK64
    for _ in range(10):
        hi0, lo0 = _mulhilo(M0, c0, xp)
        hi1, lo1 = _mulhilo(M1, c2, xp)
        c0, c1, c2, c3 = hi1 ^ c1 ^ xp.uint64(k0), lo1, hi0 ^ c3 ^ xp.uint64(k1), lo0
        k0, k1 = (k0 + W0) & MASK64, (k1 + W1) & MASK64
    return c0, c1, c2, c3


def _reference_words(seed, offset, n, xp):
    first, skip = divmod(offset, 4)
    nblocks = (skip + n + 3) // 4
    k = xp.arange(nblocks, dtype=xp.uint64) + xp.uint64(first)
    zero = xp.zeros_like(k)
    lanes = philox4x64_10((k, zero, zero, zero), (seed, 0), xp)
    return xp.stack(lanes, axis=1).reshape(-1)[skip:skip + n]


# ---------------------------------------------------------------- numpy fast path

_local = threading.local()  # one np.random.Philox per thread: setting state is not atomic


def _numpy_words(seed, offset, n):
    """w[offset : offset+n] from numpy's C Philox.

    numpy's Philox semantics (checked empirically, numpy 2.4, and matching its
    philox.h): the state is (counter, key, buffer, buffer_pos).  When buffer_pos < 4
    the next word is buffer[buffer_pos++]; otherwise it FIRST increments the 256-bit
    counter (carrying through all four lanes, so 2**256 - 1 wraps to 0), then
    computes the block for the new counter into the buffer and returns lane 0.
    A fresh Philox(counter=0) therefore starts with block 1, not block 0.  So to
    start at block k we set counter = k - 1 (mod 2**256) and buffer_pos = 4, then
    throw away the first offset % 4 words.
    """
    bg = getattr(_local, "philox", None)
    if bg is None:
        bg = _local.philox = np.random.Philox(key=0, counter=0)
    block, skip = divmod(offset, 4)
    ctr = (block - 1) % 2**256
    bg.state = {
        "bit_generator": "Philox",
        "state": {"counter": np.array([(ctr >> s) & MASK64 for s in (0, 64, 128, 192)], np.uint64),
                  "key": np.array([seed, 0], np.uint64)},
        "buffer": np.zeros(4, np.uint64), "buffer_pos": 4, "has_uint32": 0, "uinteger": 0,
    }
    if skip:
        bg.random_raw(skip)
    return bg.random_raw(n)


def philox_words(seed, offset, n, xp=np):
    """The raw 64-bit words w[offset : offset+n] of the stream for `seed`, as a
    uint64 array of module xp (numpy: numpy's C Philox; others: the reference)."""
    seed, offset, n = int(seed) & MASK64, int(offset), int(n)
    if offset < 0 or n < 0 or offset + n > 2**66:
        raise ValueError(f"bad word range: offset={offset}, n={n}")
    if xp is np:
        return _numpy_words(seed, offset, n)
    return _reference_words(seed, offset, n, xp)


# ---------------------------------------------------------------- distributions

def _shape(shape):
    shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    return shape, math.prod(shape)


def words_used(kind, numel):
    """How many stream words a draw of `numel` elements consumes."""
    if kind == "normal":
        return 2 * numel
    if kind in ("uniform", "integers", "permutation"):
        return numel
    raise ValueError(f"unknown random kind {kind!r}")


def _unit(w, dtype, xp):
    """(w >> (64 - p)) * 2**-p in dtype, p = its mantissa bits + 1: exact, in [0, 1).
    The shifted value is < 2**63, so viewing it as int64 is exact (and converts
    faster than uint64)."""
    p = np.finfo(dtype).nmant + 1
    bits = (w >> xp.uint64(64 - p)).view(xp.int64)
    return bits.astype(dtype) * dtype.type(2.0**-p)


def uniform(seed, offset, shape, dtype, xp=np):
    """Uniform floats in [0, 1); consumes numel words."""
    shape, numel = _shape(shape)
    dtype = np.dtype(dtype)
    if dtype.kind not in FLOATING_KINDS:
        raise TypeError(f"uniform needs a float dtype, got {dtype}")
    return _unit(philox_words(seed, offset, numel, xp), dtype, xp).reshape(shape)


def normal(seed, offset, shape, dtype, xp=np):
    """Standard normals by Box-Muller (cosine branch) in float64, cast to dtype;
    consumes 2 * numel words."""
    shape, numel = _shape(shape)
    dtype = np.dtype(dtype)
    if dtype.kind not in FLOATING_KINDS:
        raise TypeError(f"normal needs a float dtype, got {dtype}")
    w = philox_words(seed, offset, 2 * numel, xp)
    s11 = xp.uint64(11)
    u1 = ((w[0::2] >> s11) + xp.uint64(1)).view(xp.int64).astype(xp.float64) * 2.0**-53
    u2 = (w[1::2] >> s11).view(xp.int64).astype(xp.float64) * 2.0**-53
    z = xp.sqrt(-2.0 * xp.log(u1)) * xp.cos(6.283185307179586 * u2)
    return z.astype(dtype, copy=False).reshape(shape)


def integers(seed, offset, shape, low, high, dtype, xp=np):
    """Integers in [low, high): low + w % (high - low); consumes numel words."""
    shape, numel = _shape(shape)
    span = int(high) - int(low)
    if not 0 < span <= 2**64:
        raise ValueError(f"need low < high, got [{low}, {high})")
    w = philox_words(seed, offset, numel, xp)
    if span < 2**64:
        w = w % xp.uint64(span)
    r = (w + xp.uint64(int(low) & MASK64)).view(xp.int64)  # wraps mod 2**64
    return r.astype(dtype, copy=False).reshape(shape)


def permutation(seed, offset, n, xp=np):
    """A random permutation of range(n) (int64): stable argsort of n words."""
    w = philox_words(seed, offset, n, xp)
    # cupy's argsort is always stable and older versions reject a `kind` argument
    return np.argsort(w, kind="stable") if xp is np else xp.argsort(w)


# ---------------------------------------------------------------- generator state

class Generator:
    """A stream position: (seed, offset) plus the device it draws for.

    It holds no RNG state beyond two ints -- every draw is a pure function of
    (seed, offset), so capturing, restoring or handing the position to a compiled
    kernel is trivial.  The seed is read with `initial_seed()` (a slot named `seed`
    would clash with the PyTorch-style `seed()` method)."""

    __slots__ = ("_seed", "offset", "device")

    def __init__(self, device="cpu", seed=DEFAULT_SEED):
        self.device = device
        self.manual_seed(seed)

    def manual_seed(self, seed):
        self._seed = int(seed) & MASK64
        self.offset = 0
        return self

    def initial_seed(self):
        return self._seed

    def seed(self):
        """Reseed from OS entropy (nondeterministic); returns the new seed."""
        self.manual_seed(int.from_bytes(os.urandom(8), "little"))
        return self._seed

    def get_state(self):
        return np.array([self._seed, self.offset], dtype=np.uint64)

    def set_state(self, state):
        seed, offset = (int(v) for v in state)
        self._seed, self.offset = seed & MASK64, offset
        return self

    def next_offset(self, nwords):
        """Reserve `nwords` words: returns the offset where they start."""
        start = self.offset
        self.offset = start + int(nwords)
        return start

    def __repr__(self):
        return f"Generator(device={self.device!r}, seed={self._seed}, offset={self.offset})"


default_generator = Generator()


def manual_seed(seed):
    """Seed the default generator (offset back to 0); returns it."""
    return default_generator.manual_seed(seed)
