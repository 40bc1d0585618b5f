"""Names PyTorch scripts touch on a CPU run (torch.backends, torch.accelerator, torch.jit,
set_float32_matmul_precision), and the error a missing name gives."""
import pytest

import eagerc
import eagerc.nn as nn


def test_a_missing_pytorch_name_says_it_is_not_implemented_yet():
    # names PyTorch has (in the snapshot of torch 2.13's API) that eagerc does not
    with pytest.raises(AttributeError, match=r"PyTorch's torch\.fbgemm_linear_fp16_weight is not implemented"):
        eagerc.fbgemm_linear_fp16_weight
    with pytest.raises(AttributeError, match=r"PyTorch's torch\.nn\.functional\.rrelu_ is not implemented"):
        nn.functional.rrelu_
    with pytest.raises(AttributeError, match=r"PyTorch's torch\.Tensor\.as_subclass is not implemented"):
        eagerc.ones(1).as_subclass


def test_a_name_pytorch_lacks_too_says_so():
    with pytest.raises(AttributeError, match=r"eagerc has no attribute 'tensr' \(PyTorch's torch has no 'tensr'"):
        eagerc.tensr
    with pytest.raises(AttributeError, match="eagerc.nn has no attribute 'Lnear'"):
        nn.Lnear
    # a typo on a tensor gets Python's own message: a Tensor.__getattr__ hook would slow every
    # attribute read of every tensor (eagerc/_missing.py)
    with pytest.raises(AttributeError, match="'Tensor' object has no attribute 'sizee'"):
        eagerc.ones(1).sizee
    assert not hasattr(type(eagerc.ones(1)), "__getattr__")
    assert getattr(eagerc.ones(1), "_not_a_slot", "default") == "default"  # internal names: plain miss


def test_backends_flags_are_kept_and_read_back():
    import eagerc.backends.cudnn as cudnn
    old = (cudnn.benchmark, eagerc.backends.cuda.matmul.allow_tf32)
    try:
        cudnn.benchmark = True
        eagerc.backends.cuda.matmul.allow_tf32 = True
        assert eagerc.backends.cudnn.benchmark is True and eagerc.backends.cuda.matmul.allow_tf32 is True
    finally:
        cudnn.benchmark, eagerc.backends.cuda.matmul.allow_tf32 = old
    assert cudnn.is_available() is False and eagerc.backends.mps.is_available() is False
    with eagerc.backends.cuda.sdp_kernel(enable_flash=False):
        assert not eagerc.backends.cuda.flash_sdp_enabled()
    assert eagerc.backends.cuda.flash_sdp_enabled()


def test_float32_matmul_precision():
    assert eagerc.get_float32_matmul_precision() == "highest"
    try:
        eagerc.set_float32_matmul_precision("high")
        assert eagerc.get_float32_matmul_precision() == "high"
        assert eagerc.backends.cuda.matmul.allow_tf32 is True  # as PyTorch couples them
    finally:
        eagerc.set_float32_matmul_precision("highest")
    assert eagerc.backends.cuda.matmul.allow_tf32 is False
    with pytest.raises(RuntimeError, match="invalid precision 'fast'"):
        eagerc.set_float32_matmul_precision("fast")


def test_accelerator_on_a_machine_without_gpu_falls_back():
    if eagerc.cuda.is_available():
        assert eagerc.accelerator.current_accelerator().type == "cuda"
        return
    assert eagerc.accelerator.is_available() is False
    assert eagerc.accelerator.current_accelerator() is None
    assert eagerc.accelerator.device_count() == 0
    dev = eagerc.accelerator.current_accelerator() or eagerc.device("cpu")  # the usual script line
    assert eagerc.ones(2, device=dev).device.type == "cpu"


def test_jit_script_and_trace_give_the_eager_results():
    def f(x):
        return x * 2 if x.shape[0] > 2 else x - 1   # control flow trace would bake in; compile guards it
    s = eagerc.jit.script(f)
    t = eagerc.jit.trace(f, (eagerc.ones(3),))
    for n in (3, 1, 3):
        x = eagerc.ones(n)
        want = f(x).numpy()
        assert (s(x).numpy() == want).all() and (t(x).numpy() == want).all()
    m = eagerc.jit.script(nn.Linear(2, 2))
    x = eagerc.ones(1, 2)
    assert (m(x).detach().numpy() == m._orig_mod(x).detach().numpy()).all()
    assert eagerc.jit.ignore(f) is f and eagerc.jit.is_scripting() is False
    with pytest.raises(RuntimeError, match="eagerc.export"):
        eagerc.jit.save(m, "model.pt")


def test_api_coverage_counts_against_the_snapshot():
    import json
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "tools"))
    try:
        import api_coverage
    finally:
        sys.path.pop(0)
    with open(os.path.join(root, "eagerc", "_torch_api.json")) as f:
        names = json.load(f)["names"]
    rows = {ns: (have, total, missing) for ns, _, have, total, missing in api_coverage.coverage(names)}
    have, total, missing = rows["torch"]
    assert total == len(names["torch"]) and have + len(missing) == total
    assert "zeros" not in missing and "fbgemm_linear_fp16_weight" in missing
    nn_have, nn_total, nn_missing = rows["torch.nn"]
    assert "Linear" not in nn_missing and nn_have == nn_total - len(nn_missing)
    assert "| all |" in api_coverage.table(api_coverage.coverage(names))
