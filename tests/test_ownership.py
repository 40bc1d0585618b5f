"""eagerc finds its own frames by the package's real directory: user code in a folder that
happens to be named `eagerc/` (a git clone's default name) keeps its lines in tracebacks."""
import os
import subprocess
import sys
import textwrap

import eagerc
from eagerc.runtime.ownership import PACKAGE_DIR, is_eagerc_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_package_dir_is_where_eagerc_really_is():
    assert PACKAGE_DIR == os.path.dirname(os.path.abspath(eagerc.__file__)) + os.sep
    assert is_eagerc_file(eagerc.dispatch.__file__)
    assert is_eagerc_file("<eagerc-compiled-3>")               # code eagerc generated
    assert not is_eagerc_file(__file__)                         # this repository's tests are user code
    assert not is_eagerc_file(os.path.join(os.sep, "home", "me", "eagerc", "train.py"))
    assert not is_eagerc_file(PACKAGE_DIR.rstrip(os.sep) + "_extras.py")   # a sibling, not inside


def test_anomaly_mode_names_user_code_in_a_folder_named_eagerc(tmp_path):
    user = tmp_path / "eagerc" / "train.py"
    user.parent.mkdir()
    source = textwrap.dedent('''
        import numpy as np
        import eagerc
        from eagerc import autograd

        class Twice(autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * float("nan")

        with autograd.detect_anomaly():
            x = eagerc.tensor([0.0, 1.0], requires_grad=True)
            y = x.sqrt()
            try:
                y.sum().backward()
            except RuntimeError as e:
                print(e)
            try:
                Twice.apply(x).sum().backward()
            except RuntimeError as e:
                print(e)
    ''')
    user.write_text(source)
    line = {text.strip(): i for i, text in enumerate(source.splitlines(), 1)}
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(user)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f'{user}", line {line["y = x.sqrt()"]}' in r.stdout                          # where sqrt was made
    assert f'{user}", line {line["Twice.apply(x).sum().backward()"]}' in r.stdout       # where apply ran
