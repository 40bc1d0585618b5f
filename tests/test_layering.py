"""The runtime layer must load without the frontend or the compiler (ARCHITECTURE.md)."""
import subprocess
import sys


def test_runtime_imports_no_frontend_or_compiler():
    code = ("import sys, eagerc.runtime; "
            "bad = [m for m in sys.modules if m.startswith('eagerc.') and not m.startswith('eagerc.runtime')]; "
            "print(bad); assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_op_family_is_registered():
    from eagerc.runtime import OPS
    for name in ("add", "sum", "reshape", "cat", "getitem", "matmul", "conv2d"):
        assert name in OPS, name
