"""Imports follow the layers (ARCHITECTURE.md): the runtime loads without the frontend or the
compiler, eager use never imports the compiler, nn builds on the op families, not the public
namespace."""
import ast
import importlib.util
import pathlib
import subprocess
import sys

import eagerc.nn


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


def _imports(path, package):
    """The absolute names of the modules `path` (a module of `package`) imports from."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            # `from .. import _api` imports a module; `from .. import zeros` the package root's name
            out.update(f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base for a in node.names)
    return out


def _is_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, AttributeError):   # a name inside a plain module
        return False


def test_nn_imports_the_op_families_not_the_public_namespace():
    """nn/ is built on eagerc.ops (functions, Tensor methods, derivatives), never on eagerc._api
    or the package root that reaches it: the public namespace is assembled on top of nn."""
    root = pathlib.Path(eagerc.nn.__file__).parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent.parent).with_suffix("")
        package = ".".join(rel.parts[:-1] if path.name != "__init__.py" else rel.parts[:-1])
        for name in _imports(path, package):
            if name in ("eagerc", "eagerc._api") or name.startswith(("eagerc._api.", "eagerc.compiler")):
                bad.append(f"{rel}: {name}")
    assert not bad, bad
