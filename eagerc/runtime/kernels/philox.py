"""The counter-based RNG of eagerc.runtime.random as C and CUDA source for generated kernels.

Why: eager code draws random numbers from numpy's Philox (eagerc.runtime.random), and a
compiled kernel must draw the *same* numbers, or `compile` would change a program's results
(dropout masks, initialisation, sampling).  Because the stream is counter-based, word n of
seed s is a pure function of (s, n), so a kernel needs only the seed and the word offset of
its draw (from `Generator.next_offset`) -- no generator state crosses the boundary.  The
functions below are the module docstring of eagerc.runtime.random written in C / CUDA C:

    uint64_t eagerc_philox_word(uint64_t seed, uint64_t n)     word n of the stream of seed
    void     eagerc_philox_block(uint64_t seed, uint64_t b, uint64_t *w)
                                                               words 4b .. 4b+3 (one block: eager
                                                               draws, kernels/rows.py)
    float    eagerc_uniform_f32(uint64_t w)                    (w >> 40) * 2**-24, exact
    double   eagerc_uniform_f64(uint64_t w)                    (w >> 11) * 2**-53, exact
    float    eagerc_uniform_f16(uint64_t w)                    (w >> 53) * 2**-11, exact (a
                                                               float16 value, held in a float)
    double   eagerc_normal(uint64_t w1, uint64_t w2)           Box-Muller, cosine branch, in
                                                               float64; cast once to the dtype

(CUDA_SOURCE has the same names, `__device__ __forceinline__`, with `unsigned long long`
for uint64_t.)  Element i of a draw starting at word offset o uses word o+i (uniform) or
words o+2i and o+2i+1 (normal); `element_words` and `expr` say so for a renderer.

Raw words and uniforms are bit-identical to numpy on every backend.  Normals use log and
cos, which no libm rounds correctly: they match numpy to a few float64 ulp (see the caveat
in eagerc.runtime.random) and almost always exactly after the cast to float32.  Note for C
renderers: if the translation unit declares `log`/`cos` with `#pragma omp declare simd`
(libmvec) and the compiler vectorises a loop calling eagerc_normal, it would use libmvec's
variants (<= 4 ulp); so eagerc_normal calls them through never-inlined wrappers, which
keeps such loops scalar on glibc's libm. Loops drawing uniforms (dropout) vectorise: the
64x64->128-bit product is written with 32-bit halves, which GCC vectorises (unsigned
__int128 it does not).

Each call of eagerc_philox_word computes a whole Philox block (4 words) and keeps one lane;
that is ~4x the arithmetic of an optimal draw, but keeps every element independent (any
index order, any parallel split, vectorisable) -- the price of the simplest correct kernel.
Word indices are uint64, so a kernel reaches words < 2**64 (random.py allows up to 2**66).
"""

from eagerc.runtime.random import M0, M1, W0, W1

__all__ = ["C_SOURCE", "CUDA_SOURCE", "element_words", "expr", "FUNCTIONS"]

FUNCTIONS = ("eagerc_philox_word", "eagerc_philox_block", "eagerc_uniform_f32", "eagerc_uniform_f64",
             "eagerc_uniform_f16", "eagerc_normal")

# powers of two as decimal literals: shortest round-trip reprs, parsed exactly by any
# correctly rounding compiler (C and CUDA alike; no hex-float literals needed)
_P24, _P53, _P11 = repr(2.0**-24), repr(2.0**-53), repr(2.0**-11)
_TWO_PI = "6.283185307179586"   # exactly the literal random.normal uses


def _source(u64, prefix, mulhi, unroll, scalar_math="", log="log", cos="cos"):
    """The functions, for a 64-bit unsigned type `u64`, a declaration prefix and a
    `mulhi` block defining `eagerc_mulhi64(a, b)` (high 64 bits of the 128-bit product)."""
    rounds = f"""\
    {unroll}
    for (int r = 0; r < 10; r++) {{
        {u64} hi0 = eagerc_mulhi64(0x{M0:016X}ULL, c0), lo0 = 0x{M0:016X}ULL * c0;
        {u64} hi1 = eagerc_mulhi64(0x{M1:016X}ULL, c2), lo1 = 0x{M1:016X}ULL * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x{W0:016X}ULL;
        k1 += 0x{W1:016X}ULL;
    }}"""
    return f"""\
/* eagerc counter-based RNG: Philox4x64-10, see eagerc/runtime/kernels/philox.py */
{mulhi}
{prefix} {u64} eagerc_philox_word({u64} seed, {u64} n) {{
    {u64} c0 = n >> 2, c1 = 0, c2 = 0, c3 = 0, k0 = seed, k1 = 0;
{rounds}
    return (n & 2) ? ((n & 1) ? c3 : c2) : ((n & 1) ? c1 : c0);
}}
{prefix} void eagerc_philox_block({u64} seed, {u64} block, {u64} *w) {{
    {u64} c0 = block, c1 = 0, c2 = 0, c3 = 0, k0 = seed, k1 = 0;
{rounds}
    w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}}
{prefix} float eagerc_uniform_f32({u64} w) {{
    return (float)(long long)(w >> 40) * {_P24}f;
}}
{prefix} double eagerc_uniform_f64({u64} w) {{
    return (double)(long long)(w >> 11) * {_P53};
}}
{prefix} float eagerc_uniform_f16({u64} w) {{
    return (float)(long long)(w >> 53) * {_P11}f;
}}
{scalar_math}
{prefix} double eagerc_normal({u64} w1, {u64} w2) {{
    double u1 = (double)(long long)((w1 >> 11) + 1) * {_P53};
    double u2 = (double)(long long)(w2 >> 11) * {_P53};
    return sqrt(-2.0 * {log}(u1)) * {cos}({_TWO_PI} * u2);
}}
"""


_C_MULHI = """\
/* 32-bit halves rather than unsigned __int128: the same bits, and a loop drawing random
   numbers vectorises (GCC does not vectorise 128-bit products; 2048x2048 dropout: 52 -> 30 ms) */
static inline uint64_t eagerc_mulhi64(uint64_t a, uint64_t b) {
    uint64_t a_lo = a & 0xFFFFFFFFu, a_hi = a >> 32, b_lo = b & 0xFFFFFFFFu, b_hi = b >> 32;
    uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
    uint64_t mid = (ll >> 32) + (lh & 0xFFFFFFFFu) + (hl & 0xFFFFFFFFu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}"""

_CUDA_MULHI = """\
__device__ __forceinline__ unsigned long long eagerc_mulhi64(unsigned long long a, unsigned long long b) {
    return __umul64hi(a, b);
}"""

#: C11, to follow `#include <math.h>` and `#include <stdint.h>`.
# normals call log/cos through functions that are never inlined, so a loop drawing normals
# stays scalar and uses the scalar libm (<= 1 ulp; libmvec's SIMD log/cos, which the C
# renderer declares for other loops, are <= 4 ulp): normals keep within 2 ulp of numpy
_C_SCALAR_MATH = """\
__attribute__((noinline)) static double eagerc_log(double x) { return log(x); }
__attribute__((noinline)) static double eagerc_cos(double x) { return cos(x); }"""

C_SOURCE = _source("uint64_t", "static inline", _C_MULHI, "#pragma GCC unroll 10", _C_SCALAR_MATH,
                   "eagerc_log", "eagerc_cos")

#: CUDA C for NVRTC (no headers; log/cos/sqrt and __umul64hi are builtins).
CUDA_SOURCE = _source("unsigned long long", "__device__ __forceinline__", _CUDA_MULHI, "#pragma unroll")


def _dtype_name(dtype):
    return getattr(dtype, "name", None) or str(dtype)


def element_words(kind, dtype=None):
    """Stream words one element of a `kind` draw consumes ("uniform": 1, "normal": 2, for
    every dtype), so element i of a draw at word offset o starts at word o + i * this."""
    if kind == "uniform":
        return 1
    if kind == "normal":
        return 2
    raise ValueError(f"no kernel RNG for random kind {kind!r}")


def expr(kind, dtype, seed, word):
    """A C / CUDA expression for one element: `seed` and `word` are expressions (uint64)
    for the seed and the element's first word (offset + i * element_words(kind)).

    The value has the compute type: uniform float32 and float16 -> float (the float16 one
    is exact in float16), float64 -> double; normal -> double, to be cast once to dtype."""
    name = _dtype_name(dtype)
    w = f"eagerc_philox_word({seed}, {word})"
    if kind == "uniform":
        fn = {"float32": "eagerc_uniform_f32", "float64": "eagerc_uniform_f64",
              "float16": "eagerc_uniform_f16"}.get(name)
        if fn is None:
            raise TypeError(f"uniform needs float16/32/64, got {name}")
        return f"{fn}({w})"
    if kind == "normal":
        if name not in ("float16", "float32", "float64"):
            raise TypeError(f"normal needs float16/32/64, got {name}")
        return f"eagerc_normal({w}, eagerc_philox_word({seed}, ({word}) + 1))"
    raise ValueError(f"no kernel RNG for random kind {kind!r}")
