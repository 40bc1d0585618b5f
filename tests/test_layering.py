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


def test_eager_training_imports_no_compiler_module():
    """Eager mode is the frontend layer: a whole training loop (model, loss, backward, optimizer,
    scheduler, data loader, checkpoint) never imports eagerc.compiler; compile/export load it."""
    code = """
import os, sys, tempfile
import eagerc, eagerc.nn as nn, eagerc.nn.functional as F
from eagerc.utils.data import DataLoader, TensorDataset
m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3), nn.LayerNorm(3))
opt = eagerc.optim.AdamW(m.parameters())
sched = eagerc.optim.lr_scheduler.StepLR(opt, 2)
data = DataLoader(TensorDataset(eagerc.randn(6, 1, 6, 6), eagerc.randint(0, 3, (6,))), batch_size=3)
for x, y in data:
    loss = F.cross_entropy(m(x), y)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
eagerc.save({"model": m.state_dict()}, os.path.join(tempfile.mkdtemp(), "ck.eagerc"))
bad = sorted(k for k in sys.modules if k.startswith("eagerc.compiler"))
assert not bad, bad
c = eagerc.compile(m)   # the compiler loads on first use
assert "eagerc.compiler.compile" in sys.modules
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
