"""The kernel RNG (eagerc/runtime/kernels/philox.py) against the eager one (eagerc.runtime.random).

C: a small test library built from C_SOURCE with kernel_cache.load, compared bit for bit
with numpy (raw words, uniform float64/float32/float16) and to a couple of ulp for normals
(log and cos are libm's, not numpy's). Built three ways: scalar loops, OpenMP SIMD loops
with libmvec's log/cos declared (as generated kernels declare them; GCC keeps these loops
scalar anyway, but the results must hold whatever a compiler does), and the portable
32-bit-halves multiply instead of __int128.
CUDA: the same functions compiled by NVRTC (no GPU needed), and run with cupy on a GPU.
"""
import ctypes

import numpy as np
import pytest

from eagerc.runtime.kernels import philox
from eagerc.runtime.kernels.philox import C_SOURCE, CUDA_SOURCE, element_words, expr
from eagerc.runtime import kernel_cache, nvrtc
from eagerc.runtime import random as rnd

SEEDS = [0, 1, 2**64 - 1, rnd.DEFAULT_SEED, 0x5DEECE66D_1234ABCD]
OFFSETS = [0, 1, 2, 3, 5, 4 * 10**6 + 3, 2**40 + 1]
SIZES = [1, 7, 1000]

needs_cc = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(),
                                 reason="NVRTC not installed (pip install nvidia-cuda-nvrtc-cu12)")

# ---------------------------------------------------------------- the C test library

_SIMD_DECLS = """\
#if defined(__x86_64__) && defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)
#pragma omp declare simd notinbranch
double log(double);
#pragma omp declare simd notinbranch
double cos(double);
#endif
"""


def _c_library_source(variant):
    """Test kernels around C_SOURCE. variant: "scalar" (plain loops), "simd" (libmvec log/cos
    declared and `#pragma omp simd` loops, like generated kernels), "no_int128"."""
    head = "#include <math.h>\n#include <stdint.h>\n"
    loop = "for (int64_t i = 0; i < n; i++)"
    if variant == "simd":
        head += _SIMD_DECLS
        loop = "#pragma omp simd\n    " + loop
    if variant == "no_int128":
        head += "#undef __SIZEOF_INT128__\n"
    body = f"""
void fill_words(uint64_t seed, uint64_t off, int64_t n, uint64_t *out) {{
    {loop} out[i] = eagerc_philox_word(seed, off + (uint64_t)i);
}}
void fill_u64(uint64_t seed, uint64_t off, int64_t n, double *out) {{
    {loop} out[i] = eagerc_uniform_f64(eagerc_philox_word(seed, off + (uint64_t)i));
}}
void fill_u32(uint64_t seed, uint64_t off, int64_t n, float *out) {{
    {loop} out[i] = eagerc_uniform_f32(eagerc_philox_word(seed, off + (uint64_t)i));
}}
void fill_u16(uint64_t seed, uint64_t off, int64_t n, float *out) {{
    {loop} out[i] = eagerc_uniform_f16(eagerc_philox_word(seed, off + (uint64_t)i));
}}
void fill_normal64(uint64_t seed, uint64_t off, int64_t n, double *out) {{
    {loop} out[i] = eagerc_normal(eagerc_philox_word(seed, off + 2 * (uint64_t)i),
                                  eagerc_philox_word(seed, off + 2 * (uint64_t)i + 1));
}}
void fill_normal32(uint64_t seed, uint64_t off, int64_t n, float *out) {{
    {loop} out[i] = (float)eagerc_normal(eagerc_philox_word(seed, off + 2 * (uint64_t)i),
                                         eagerc_philox_word(seed, off + 2 * (uint64_t)i + 1));
}}
/* through philox.expr, as a renderer would write it */
void fill_expr_u32(uint64_t seed, uint64_t off, int64_t n, float *out) {{
    {loop} out[i] = {expr("uniform", "float32", "seed", "off + (uint64_t)i")};
}}
void fill_expr_normal64(uint64_t seed, uint64_t off, int64_t n, double *out) {{
    {loop} out[i] = {expr("normal", "float64", "seed", "off + 2 * (uint64_t)i")};
}}
"""
    return head + C_SOURCE + body


_FILLS = {"fill_words": np.uint64, "fill_u64": np.float64, "fill_u32": np.float32,
          "fill_u16": np.float32, "fill_normal64": np.float64, "fill_normal32": np.float32,
          "fill_expr_u32": np.float32, "fill_expr_normal64": np.float64}


class _CLib:
    def __init__(self, variant):
        self.lib = kernel_cache.load(_c_library_source(variant))
        for name in _FILLS:
            getattr(self.lib, name).argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64,
                                                ctypes.c_void_p]
            getattr(self.lib, name).restype = None

    def __call__(self, name, seed, off, n):
        out = np.empty(n, _FILLS[name])
        getattr(self.lib, name)(seed & rnd.MASK64, off, n, kernel_cache.ptr(out))
        return out


_libs = {}


@pytest.fixture(params=["scalar", "simd", "no_int128"])
def clib(request):
    if kernel_cache.find_compiler() is None:
        pytest.skip("no C compiler")
    if request.param not in _libs:
        _libs[request.param] = _CLib(request.param)
    return _libs[request.param]


def _ulps(a, b):
    """Distance in units of the last place between float64 arrays of one sign."""
    assert np.array_equal(np.signbit(a), np.signbit(b))
    return np.abs(a.view(np.int64) - b.view(np.int64))


def _bits_equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


# ---------------------------------------------------------------- C: bit-identical parts

@pytest.mark.parametrize("seed", SEEDS)
def test_c_words_and_uniforms_bit_identical(clib, seed):
    for off in OFFSETS:
        for n in SIZES:
            _bits_equal(clib("fill_words", seed, off, n), rnd.philox_words(seed, off, n))
            _bits_equal(clib("fill_u64", seed, off, n), rnd.uniform(seed, off, n, np.float64))
            _bits_equal(clib("fill_u32", seed, off, n), rnd.uniform(seed, off, n, np.float32))
            _bits_equal(clib("fill_expr_u32", seed, off, n), rnd.uniform(seed, off, n, np.float32))
            _bits_equal(clib("fill_u16", seed, off, n),
                        rnd.uniform(seed, off, n, np.float16).astype(np.float32))


def test_c_words_match_the_reference_philox(clib):
    """Also against the plain reference (not only numpy's C Philox), near 2**64 words."""
    for seed, off in [(7, 2**64 - 13), (2**64 - 1, 2**63 + 2), (rnd.DEFAULT_SEED, 0)]:
        want = rnd._reference_words(seed, off, 13, np)
        _bits_equal(clib("fill_words", seed, off, 13), want)


def test_c_uniform_range_and_float16_below_one(clib):
    seed, n = 3, 200_000
    u16 = clib("fill_u16", seed, 0, n)
    assert u16.min() >= 0 and u16.max() < 1
    assert np.all(u16.astype(np.float16).astype(np.float32) == u16)   # exact float16 values
    u32 = clib("fill_u32", seed, 0, n)
    assert u32.max() < 1 and u32.max() > 1 - 2**-12


# ---------------------------------------------------------------- C: normals

@pytest.mark.parametrize("seed", SEEDS)
def test_c_normal_float64_within_2_ulp(clib, seed):
    for off in OFFSETS:
        for n in SIZES:
            got = clib("fill_normal64", seed, off, n)
            want = rnd.normal(seed, off, n, np.float64)
            assert np.all(np.isfinite(got))
            assert _ulps(got, want).max() <= 2, (seed, off, n)
            assert _ulps(clib("fill_expr_normal64", seed, off, n), want).max() <= 2


def test_c_normal_float32_agreement(clib):
    seed, off, n = rnd.DEFAULT_SEED, 12345, 100_000
    got = clib("fill_normal32", seed, off, n)
    want = rnd.normal(seed, off, n, np.float32)
    same = np.mean(got.view(np.uint32) == want.view(np.uint32))
    assert same >= 0.999, same
    # where they differ, by one float32 ulp (double rounding of a ~1 ulp float64 difference)
    diff = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32))
    assert diff.max() <= 1
    g64, w64 = clib("fill_normal64", seed, off, n), rnd.normal(seed, off, n, np.float64)
    assert _ulps(g64, w64).max() <= 2
    # the float64 values cast once equal the float32 kernel (same single rounding)
    _bits_equal(got, g64.astype(np.float32))


def test_element_words_and_expr():
    assert element_words("uniform", "float32") == 1 and element_words("normal", np.float64) == 2
    assert [element_words(k, None) for k in ("uniform", "normal")] == \
        [rnd.words_used(k, 1) for k in ("uniform", "normal")]
    assert expr("uniform", np.dtype("float16"), "s", "i") == \
        "eagerc_uniform_f16(eagerc_philox_word(s, i))"
    with pytest.raises(ValueError):
        element_words("integers")
    with pytest.raises(TypeError):
        expr("uniform", "int32", "s", "i")
    for name in philox.FUNCTIONS:
        assert name + "(" in C_SOURCE and name + "(" in CUDA_SOURCE
    for const in (rnd.M0, rnd.M1, rnd.W0, rnd.W1):
        assert f"0x{const:016X}ULL" in C_SOURCE and f"0x{const:016X}ULL" in CUDA_SOURCE


# ---------------------------------------------------------------- CUDA

_CUDA_TEST_KERNELS = """
extern "C" __global__ void rng_test(unsigned long long seed, unsigned long long off, long long n,
                                    unsigned long long *words, double *u64, float *u32, float *u16,
                                    double *normal64, float *normal32, float *expr_u32) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long w = eagerc_philox_word(seed, off + (unsigned long long)i);
    words[i] = w;
    u64[i] = eagerc_uniform_f64(w);
    u32[i] = eagerc_uniform_f32(w);
    u16[i] = eagerc_uniform_f16(w);
    double z = eagerc_normal(eagerc_philox_word(seed, off + 2ULL * i),
                             eagerc_philox_word(seed, off + 2ULL * i + 1));
    normal64[i] = z;
    normal32[i] = (float)z;
    expr_u32[i] = %s;
}
""" % expr("uniform", "float32", "seed", "off + (unsigned long long)i")


def _cuda_test_source():
    return CUDA_SOURCE + _CUDA_TEST_KERNELS


@needs_nvrtc
@pytest.mark.parametrize("arch", [None, "compute_70"])
def test_cuda_source_compiles_with_nvrtc(arch):
    ptx = nvrtc.compile_ptx(_cuda_test_source(), name="rng_test.cu", arch=arch)
    assert ".entry rng_test" in ptx
    assert "mul.hi.u64" in ptx          # __umul64hi, not an emulation


@pytest.mark.cuda
def test_cuda_rng_matches_numpy_on_gpu():
    import cupy as cp
    kernel = cp.RawKernel(_cuda_test_source(), "rng_test")
    for seed in SEEDS:
        for off in OFFSETS:
            n = 100_000 if off == 0 else 1000
            outs = [cp.empty(n, dt) for dt in (np.uint64, np.float64, np.float32, np.float32,
                                               np.float64, np.float32, np.float32)]
            kernel(((n + 255) // 256,), (256,),
                   (np.uint64(seed & rnd.MASK64), np.uint64(off), np.int64(n), *outs))
            words, u64, u32, u16, z64, z32, eu32 = (o.get() for o in outs)
            _bits_equal(words, rnd.philox_words(seed, off, n))
            _bits_equal(u64, rnd.uniform(seed, off, n, np.float64))
            _bits_equal(u32, rnd.uniform(seed, off, n, np.float32))
            _bits_equal(eu32, u32)
            _bits_equal(u16, rnd.uniform(seed, off, n, np.float16).astype(np.float32))
            want64 = rnd.normal(seed, off, n, np.float64)
            # CUDA's double log is within 1 ulp and cos within 2 ulp of the true value (its
            # Math API table), numpy's within ~1: a few ulp apart at most
            assert _ulps(z64, want64).max() <= 8, (seed, off)
            same = np.mean(z32.view(np.uint32) == rnd.normal(seed, off, n, np.float32).view(np.uint32))
            assert same >= 0.999, (seed, off, same)

