import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def pytest_configure(config):
    # eager composites compile C kernels into $EAGERC_CACHE_DIR (runtime/kernels/eager.py): one
    # directory for the session (and its subprocesses), so ~/.cache is left alone
    if "EAGERC_CACHE_DIR" not in os.environ:
        import tempfile
        os.environ["EAGERC_CACHE_DIR"] = tempfile.mkdtemp(prefix="eagerc-test-kernels-")
    # what eagerc does for its users at import (numpy's floating-point warnings from its code are
    # silent, like PyTorch), pytest would undo: it resets warning filters around every test
    from eagerc.runtime.ownership import NUMERIC_WARNINGS_FILTER
    config.addinivalue_line("filterwarnings", NUMERIC_WARNINGS_FILTER)


def _cuda():
    try:
        import eagerc
        return eagerc.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs cupy and an NVIDIA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def kernel_cache_dir(tmp_path_factory):
    """A fresh on-disk kernel cache ($EAGERC_CACHE_DIR) for one test module: compiles and
    cache hits the module counts are its own, and ~/.cache is left alone."""
    old = os.environ.get("EAGERC_CACHE_DIR")
    os.environ["EAGERC_CACHE_DIR"] = str(tmp_path_factory.mktemp("kernels"))
    yield os.environ["EAGERC_CACHE_DIR"]
    if old is None:
        os.environ.pop("EAGERC_CACHE_DIR", None)
    else:
        os.environ["EAGERC_CACHE_DIR"] = old


@pytest.fixture
def failing_cc(tmp_path, monkeypatch):
    """$EAGERC_CC set to a compiler on PATH that rejects eagerc's flags (as one without OpenMP
    does), with a fresh kernel cache: what the fallback to numpy must survive."""
    cc = tmp_path / "badcc"
    cc.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo badcc 1.0; exit 0; fi\n"
                  "echo 'kernels.c:1:1: error: unsupported option -fopenmp' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("EAGERC_CC", str(cc))
    monkeypatch.setenv("EAGERC_CACHE_DIR", str(tmp_path / "cache"))
    return cc
