"""End-to-end: the main demo trains on real data (scikit-learn's digits) and its
checkpoint reloads to the same accuracy."""
import pytest


def test_train_digits_reaches_95_percent(tmp_path):
    pytest.importorskip("sklearn")
    from examples.train_digits import main
    acc = main(["--epochs", "5", "--quiet", "--checkpoint", str(tmp_path / "digits.safetensors")])
    assert acc >= 0.95
    assert (tmp_path / "digits.safetensors").exists()
