"""No numpy RuntimeWarning reaches users: PyTorch is silent on log(0), 0/0, overflow, sqrt(-1)
(the results are inf and nan), and so is eagerc -- eagerly, compiled and in the exported-program
runtime. Each check runs a fresh interpreter with `-W error::RuntimeWarning`, as a user would,
because pytest resets warning filters around every test (runtime/ownership.py)."""
import os
import shutil
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# every case returns a tuple of tensors; the reference is numpy's own result, computed quietly
_F = textwrap.dedent('''
    import eagerc
    import eagerc.nn.functional as F

    def f(x):
        big = x * 3e38
        return (x.log(), x / x, (x - 1) / x, big * 10, (x * 100).exp(), (-x).sqrt(), x.rsqrt(),
                x.reciprocal(), x ** -1.0, (-x) ** 0.5, big.sum(), big.mean(), big.sum(1), big.cumsum(1),
                (x * 1e30).prod(), F.layer_norm(big, (3,)), F.softmax(x * float("inf"), dim=1),
                eagerc.einsum("ij,kj->ik", big, big), (x - 1) // 0.0, x % 0.0)
''')
_REFERENCE = textwrap.dedent('''
    import numpy as np

    def reference(x):
        with np.errstate(all="ignore"):
            big = x * np.float32(3e38)
            s = big - big.mean(1, keepdims=True)
            sm = x * np.float32(np.inf)
            e = np.exp(sm - sm.max(1, keepdims=True))
            return (np.log(x), x / x, (x - 1) / x, big * 10, np.exp(x * 100), np.sqrt(-x), 1 / np.sqrt(x),
                    1 / x, x ** -1.0, (-x) ** 0.5, big.sum(), big.mean(), big.sum(1), big.cumsum(1),
                    (x * np.float32(1e30)).prod(), s / np.sqrt((s * s).mean(1, keepdims=True) + 1e-5),
                    e / e.sum(1, keepdims=True), big @ big.T, (x - 1) // 0.0, x % 0.0)

    X = np.array([[0.0, 1.0, 2.0]], np.float32)

    def check(got, where):
        want = reference(X)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            g = g.numpy() if hasattr(g, "numpy") else np.asarray(g)
            np.testing.assert_allclose(g, w, rtol=1e-5, err_msg=f"{where}: output {i}")
''')


def _run(code, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               EAGERC_CACHE_DIR=str(tmp_path / "kernels"))
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_no_runtime_warning_eagerly_or_compiled(tmp_path):
    backends = ["numpy", "interpreter"] + (["c"] if shutil.which(os.environ.get("EAGERC_CC", "cc")) else [])
    code = _REFERENCE + _F + textwrap.dedent(f'''
        x = eagerc.tensor(X)
        check(f(x), "eager")
        for backend in {backends!r}:
            c = eagerc.compile(f, backend=backend)
            check(c(x), backend)
            check(c(x), backend + " (second call)")
        y = eagerc.tensor(X, requires_grad=True)     # backward formulas divide by zero too
        (y.sqrt().sum() + y.log().sum()).backward()
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(y.grad.numpy(), 0.5 / np.sqrt(X) + 1 / X)
        print("ok")
    ''')
    assert _run(code, tmp_path).strip() == "ok"


def test_no_runtime_warning_in_the_exported_program_runtime(tmp_path):
    export = _REFERENCE + _F + textwrap.dedent('''
        eagerc.export(f, (eagerc.tensor(X),)).save("m.eagerc")
    ''')
    _run(export, tmp_path)
    # the deployed side imports only eagerc.runtime, so that is where the filter must come from
    run = _REFERENCE + textwrap.dedent('''
        import sys
        import eagerc.runtime
        out = eagerc.runtime.load("m.eagerc")(X)
        check(out, "runtime")
        assert not [m for m in sys.modules if m.startswith("eagerc.") and not m.startswith("eagerc.runtime")]
        print("ok")
    ''')
    assert _run(run, tmp_path).strip() == "ok"


def test_users_own_numpy_warnings_and_eagercs_deliberate_ones_still_show(tmp_path):
    # the filter names numpy's floating-point messages from eagerc's modules and nothing else
    code = textwrap.dedent('''
        import warnings
        import numpy as np
        import eagerc
        eagerc.tensor([0.0]).log()                 # eagerc's: silent
        try:
            np.log(np.zeros(1))                    # the user's own numpy call still warns
        except RuntimeWarning as e:
            print("user:", e)
        try:                                       # a warning eagerc raises on purpose still shows
            warnings.warn_explicit("eagerc backend 'c': no C compiler found", RuntimeWarning,
                                   "compile.py", 1, module="eagerc.compiler.compile")
        except RuntimeWarning as e:
            print("eagerc:", e)
    ''')
    assert _run(code, tmp_path).splitlines() == [
        "user: divide by zero encountered in log", "eagerc: eagerc backend 'c': no C compiler found"]


def test_silent_eagerly_when_the_user_turns_every_warning_into_an_error_after_import(tmp_path):
    # `warnings.simplefilter("error")` after `import eagerc` (or pytest's `filterwarnings = error`,
    # which resets the filters around each test) puts the user's filter in front of eagerc's: the
    # dispatch point then reruns the pure kernel with numpy's checks off, as PyTorch is silent, and
    # compiled programs likewise (a pure one reruns, one with in-place updates runs with checks off)
    code = _REFERENCE + _F + textwrap.dedent('''
        import warnings
        warnings.simplefilter("error")
        check(f(eagerc.tensor(X)), "eager, all warnings errors")
        for backend in ("numpy", "interpreter"):
            c = eagerc.compile(f, backend=backend)
            check(c(eagerc.tensor(X)), backend)
            check(c(eagerc.tensor(X)), backend + " (second call)")
        w = eagerc.tensor(X.copy(), requires_grad=True)   # a compiled training step: in-place updates
        opt = eagerc.optim.SGD([w], lr=0.5)

        @eagerc.compile
        def step():
            opt.zero_grad()
            loss = (w.log() * 0 + w).sum()   # log(0) in the forward, 1/0 * 0 = nan in the backward
            loss.backward()
            opt.step()

        for _ in range(2):
            step()
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(w.detach().numpy(), X - 2 * 0.5 * (X * 0 + 1 + 0 / X))
        y = eagerc.tensor(X, requires_grad=True)
        (y.sqrt().sum() + y.log().sum()).backward()
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(y.grad.numpy(), 0.5 / np.sqrt(X) + 1 / X)
        try:
            np.log(np.zeros(1))                    # the user's own numpy call still raises
        except RuntimeWarning as e:
            print("user:", e)
        print("ok")
    ''')
    assert _run(code, tmp_path).splitlines() == ["user: divide by zero encountered in log", "ok"]
