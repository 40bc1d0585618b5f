"""eagerc.alias: a PyTorch program runs unchanged with `torch` aliased to eagerc.

Each check runs in a fresh interpreter: the alias must be installed before a program's first
`import torch`, and this test process may have imported the real PyTorch already.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def test_script_trains_with_torch_aliased(tmp_path):
    """`python -m eagerc.alias script.py args`: a PyTorch-style least-squares fit, checked against numpy's
    own gradient-descent iterates (same data, same learning rate, same number of steps)."""
    (tmp_path / "fit.py").write_text(textwrap.dedent('''
        import sys
        import numpy as np
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.utils.data import TensorDataset, DataLoader
        steps = int(sys.argv[1])
        rng = np.random.default_rng(0)
        X, y = rng.standard_normal((8, 3)), rng.standard_normal((8, 1))
        model = nn.Linear(3, 1, bias=False).double()
        with torch.no_grad():
            model.weight.zero_()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        (xb, yb), = DataLoader(TensorDataset(torch.from_numpy(X), torch.from_numpy(y)), batch_size=8)
        for _ in range(steps):
            opt.zero_grad()
            F.mse_loss(model(xb), yb).backward()
            opt.step()
        print(type(torch).__name__, torch.__name__, nn.__name__, F.__name__)
        print(" ".join(repr(float(v)) for v in model.weight.detach().numpy().ravel()))
    '''))
    rc, out, err = _run(["-m", "eagerc.alias", "fit.py", "5"], tmp_path)
    assert rc == 0, err
    names, weights = out.strip().splitlines()[-2:]
    assert names == "module eagerc eagerc.nn eagerc.nn.functional"  # torch is eagerc's own module objects
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((8, 3)), rng.standard_normal((8, 1))
    w = np.zeros((3, 1))
    for _ in range(5):
        w -= 0.1 * 2 * X.T @ (X @ w - y) / len(X)  # d/dw mean((Xw - y)^2)
    np.testing.assert_allclose([float(v) for v in weights.split()], w.ravel(), rtol=1e-12)


def test_module_paths_are_eagerc_modules_and_missing_ones_say_so(tmp_path):
    code = textwrap.dedent('''
        import eagerc.alias
        eagerc.alias.install()
        import eagerc
        import torch, torch.nn.functional, torch.optim.lr_scheduler, torch.utils.data
        from torch.nn.parallel import DistributedDataParallel
        from torch.utils.data.dataloader import DataLoader
        assert torch is eagerc and torch.nn.functional is eagerc.nn.functional
        assert DataLoader is eagerc.utils.data.DataLoader
        assert torch.nn.functional.__spec__.name == "eagerc.nn.functional"  # eagerc's modules keep their own spec
        try:
            import torch._no_such_module
        except ImportError as e:
            print("MISSING:", e)
    ''')
    rc, out, err = _run(["-c", code], tmp_path)
    assert rc == 0, err
    assert ("MISSING: No module named 'torch._no_such_module': eagerc has no 'eagerc._no_such_module' "
            "(PyTorch's torch._no_such_module is not implemented in eagerc yet") in out


def test_install_after_torch_was_imported_refuses(tmp_path):
    """Aliasing after the program imported a `torch` would leave two different torches in one process."""
    (tmp_path / "torch.py").write_text("X = 1\n")  # some other `torch`, imported first
    code = ("import torch, eagerc.alias\n"
            "try:\n    eagerc.alias.install()\nexcept RuntimeError as e:\n    print('REFUSED:', e)\n")
    rc, out, err = _run(["-c", code], tmp_path)
    assert rc == 0, err
    assert "REFUSED: eagerc.alias.install: 'torch' is already imported" in out


def test_no_script_prints_usage(tmp_path):
    rc, out, err = _run(["-m", "eagerc.alias"], tmp_path)
    assert rc == 2 and "usage: python -m eagerc.alias script.py" in out
