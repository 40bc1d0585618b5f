"""eagerc.set_num_threads / get_num_threads and the threading defaults (issue 15, section 5).

The C kernels' OpenMP pool and numpy's BLAS pool are set together; kernels compute the same
bits on 1 and 2 threads; an idle OpenMP pool sleeps unless the user chose otherwise; compiled
C programs with small matrix products keep BLAS on the calling thread and restore its count.
Environment defaults are checked in fresh processes (libgomp and OpenBLAS read them once).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import eagerc
from eagerc.runtime import kernel_cache, threads

needs_cc = pytest.mark.skipif(kernel_cache.find_compiler() is None, reason="no C compiler")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def restore_threads():
    n, blas = eagerc.get_num_threads(), threads.blas_threads()
    yield
    eagerc.set_num_threads(n)
    if blas is not None:
        threads._set_blas(blas)


def test_set_num_threads_round_trips_and_sets_blas(restore_threads):
    for n in (1, 2, 3, 1):
        eagerc.set_num_threads(n)
        assert eagerc.get_num_threads() == n
        if threads.blas_threads() is not None:
            assert threads.blas_threads() == n


def test_interop_threads_round_trip():
    before = threads._interop
    try:
        eagerc.set_num_interop_threads(3)
        assert eagerc.get_num_interop_threads() == 3
    finally:
        threads._interop = before


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_thread_counts_name_the_function(bad):
    with pytest.raises(ValueError, match=r"set_num_threads: expected a positive int"):
        eagerc.set_num_threads(bad)
    with pytest.raises(ValueError, match=r"set_num_interop_threads: expected a positive int"):
        eagerc.set_num_interop_threads(bad)


def _compiled_run(fn, n, *arrays):
    """fn compiled on backend c with `n` threads: (its outputs' arrays from the second call --
    the first traces and returns eager results --, the program)."""
    eagerc.set_num_threads(n)
    compiled = eagerc.compile(fn, backend="c")
    with eagerc.no_grad():
        compiled(*map(eagerc.tensor, arrays))
        out = compiled(*map(eagerc.tensor, arrays))
    (entry,) = compiled.entries.values()
    return [o.numpy() for o in out], entry.program


@needs_cc
def test_kernels_give_the_same_bits_on_one_and_two_threads(restore_threads):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 512))          # 262144 elements: >= PARALLEL_MIN, teams of up to 4
    v = rng.standard_normal(1 << 18)

    def fn(a, b):
        gelu = 0.5 * a * (1 + eagerc.tanh(0.7978845608 * (a + 0.044715 * a ** 3)))
        e = (a - a.amax(-1, keepdim=True)).exp()
        return gelu, e / e.sum(-1, keepdim=True), b.sum(), b.amax(), (b * b).mean()

    one, program = _compiled_run(fn, 1, x, v)
    two, _ = _compiled_run(fn, 2, x, v)
    assert "num_threads(eagerc_team(262144, 512))" in program.c_source     # the kernels do run parallel loops
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    e = np.exp(x - x.max(-1, keepdims=True))
    want = [0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3))), e / e.sum(-1, keepdims=True),
            v.sum(), v.max(), (v * v).mean()]
    for a, w in zip(one, want):
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-12)


@needs_cc
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sums_over_leading_dims_split_columns_between_threads_same_bits(restore_threads, dtype):
    # a GELU backward with its bias-gradient sum: the elementwise gradient and its sum over the
    # leading dims in one kernel; from PARALLEL_MIN elements threads take blocks of columns, each
    # adding its columns' rows in order -- the bits of one thread's row walk
    rng = np.random.default_rng(1)
    c = rng.standard_normal((8, 64, 520)).astype(dtype)     # 520 = 8 blocks of 64 and 8 columns
    d = rng.standard_normal((8, 64, 520)).astype(dtype)

    def fn(a, b):
        g = a * b + 1
        return g, g.sum((0, 1)), g.mean(0)

    one, program = _compiled_run(fn, 1, c, d)
    two, _ = _compiled_run(fn, 2, c, d)
    assert all(k.reduction is not None and k.reduction.axis == "lead" for k in program.kernels)
    assert "jb += 64" in program.c_source
    assert "#pragma omp parallel for num_threads(eagerc_team(266240, 9))" in program.c_source
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    g = c * d + 1                       # rounded as the kernel rounds it (-ffp-contract=off)
    np.testing.assert_array_equal(one[0], g)
    g64 = np.abs(g.astype(np.float64))
    eps = np.finfo(dtype).eps           # a sum's error bound: a few eps of the sum of magnitudes
    for a, w, bound in zip(one[1:], [g.astype(np.float64).sum((0, 1)), g.astype(np.float64).mean(0)],
                           [g64.sum((0, 1)), g64.mean(0)]):
        assert np.all(np.abs(a - w) <= eps * bound)


@needs_cc
def test_a_loaded_library_follows_set_num_threads(restore_threads):
    src = ("void eagerc_set_num_threads(int n);\nstatic int seen;\n"
           "void eagerc_set_num_threads(int n) { seen = n; }\nint eagerc_seen(void) { return seen; }\n")
    eagerc.set_num_threads(3)
    lib = kernel_cache.load(src)
    assert lib.eagerc_seen() == 3
    eagerc.set_num_threads(2)
    assert lib.eagerc_seen() == 2


def test_one_blas_thread_pins_and_restores(restore_threads):
    ctx = threads.one_blas_thread()
    if ctx is None:
        pytest.skip("numpy's BLAS is not OpenBLAS")
    threads._set_blas(2)
    with ctx:
        assert threads.blas_threads() == 1
    assert threads.blas_threads() == 2


def test_one_blas_thread_nested_from_two_threads_restores_the_count(restore_threads):
    # two programs running at once in two Python threads: the last one out restores
    import threading
    ctx = threads.one_blas_thread()
    if ctx is None:
        pytest.skip("numpy's BLAS is not OpenBLAS")
    threads._set_blas(2)
    inside, release = threading.Event(), threading.Event()

    def other():
        with ctx:
            inside.set()
            release.wait(20)
    t = threading.Thread(target=other)
    t.start()
    inside.wait(20)
    with ctx:
        assert threads.blas_threads() == 1
    assert threads.blas_threads() == 1      # the other thread's program still runs
    release.set()
    t.join(20)
    assert threads.blas_threads() == 2


@pytest.mark.parametrize("backend", ["numpy", pytest.param("c", marks=needs_cc)])
def test_compiled_cpu_programs_pin_blas_only_for_products_openblas_would_split(backend):
    if threads.one_blas_thread() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS")
    rng = np.random.default_rng(1)
    # 2*8^3 FLOPs: OpenBLAS never splits it; 2*64^3 = 2^19: it would; 2*512^3 = 2^28 >= BLAS_PARALLEL_MIN
    for n, small in ((8, False), (64, True), (512, False)):
        a = rng.standard_normal((n, n)).astype(np.float32)
        compiled = eagerc.compile(lambda p, q: (p @ q).relu() + 1, backend=backend)
        got = compiled(eagerc.tensor(a), eagerc.tensor(a))
        np.testing.assert_allclose(got.numpy(), np.maximum(a @ a, 0) + 1, rtol=1e-4, atol=1e-4)
        (entry,) = compiled.entries.values()
        assert (entry.program.__dict__.get("blas_context") is not None) == small


PROBE = """
import json, os
import eagerc
from eagerc.runtime import kernel_cache, threads
kernel_cache.load("int eagerc_probe(void) { return 1; }\\n")
print(json.dumps({"wait": os.environ.get("OMP_WAIT_POLICY"), "threads": eagerc.get_num_threads(),
                  "blas": threads.blas_threads(), "cpus": len(os.sched_getaffinity(0))}))
"""


def _probe(**env):
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OMP_", "GOMP_", "OPENBLAS_")) and k not in ("PYTHONPATH",)}
    base["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_cc
def test_defaults_without_thread_variables():
    got = _probe()
    assert got["wait"] == "PASSIVE"        # set before the kernel library loaded libgomp
    assert got["threads"] == got["cpus"]


@needs_cc
def test_the_users_own_thread_variables_are_respected():
    got = _probe(OMP_WAIT_POLICY="ACTIVE", OMP_NUM_THREADS="3", OPENBLAS_NUM_THREADS="1")
    assert got["wait"] == "ACTIVE"
    assert got["threads"] == 3
    if got["blas"] is not None:
        assert got["blas"] == 1            # eagerc leaves BLAS alone until set_num_threads
    assert _probe(GOMP_SPINCOUNT="1000")["wait"] is None   # a spin count chosen: no wait policy added
