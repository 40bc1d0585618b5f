"""Kernel scratch rules: what a kernel allocates beyond its inputs and output, from shapes.

The file loader bounds each node's temporary buffers by max_value_bytes with these rules
(eagerc/runtime/program.py), so each rule must be an upper bound of what the kernel really
allocates -- measured here with tracemalloc, which sees numpy's allocations -- and not so
loose that ordinary programs are refused (within a few times the measurement).
"""
import os
import tracemalloc

import numpy as np
import pytest

import eagerc
from eagerc import nn
from eagerc.compiler.export import export
from eagerc.runtime import OPS
from eagerc.runtime.ops.meta import Spec
from eagerc.runtime.program import ProgramLoadError, load
from eagerc.runtime import dtypes
from eagerc.runtime.kernels import eager as c_rows

SLACK = 64 << 10   # numpy's own small allocations (shape tuples, iterators)


def _measure(op, arrays, attrs):
    """(peak bytes the kernel allocated beyond its output, the output)."""
    kernel = OPS[op].cpu
    kernel(*arrays, **attrs)  # warm: lazily built tables are not the kernel's scratch
    tracemalloc.start()
    try:
        out = kernel(*arrays, **attrs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    owned = out.nbytes if out.base is None else 0   # a view of a scratch buffer is counted as scratch
    return peak - owned, out


def _spec(a):
    return Spec(a.shape, dtypes.as_dtype(a.dtype.name)) if isinstance(a, np.ndarray) else a


CASES = [
    ("conv2d", [(2, 3, 17, 13), (4, 3, 3, 3), (4,)], dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
                                                          groups=1)),
    ("conv2d", [(1, 1, 40, 40), (1, 1, 15, 15), 0], dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1),
                                                         groups=1)),
    ("conv2d", [(2, 4, 20, 20), (6, 2, 3, 3), 0], dict(stride=(2, 3), padding=((2, 1), (0, 3)), dilation=(2, 1),
                                                       groups=2)),
    ("conv2d", [(1, 2, 4, 4), (2, 2, 1, 1), 0], dict(stride=(50, 50), padding=((60, 60), (60, 60)),
                                                     dilation=(1, 1), groups=1)),
    ("conv_transpose2d", [(2, 4, 9, 7), (4, 3, 3, 3), 0], dict(stride=(2, 2), padding=((1, 1), (1, 1)),
                                                               output_padding=(1, 0), dilation=(1, 1), groups=1)),
    ("conv_transpose2d", [(1, 2, 5, 5), (2, 1, 4, 4), 0], dict(stride=(1, 1), padding=((20, 20), (20, 20)),
                                                               output_padding=(0, 0), dilation=(12, 12), groups=2)),
    ("conv2d_weight", [(2, 3, 16, 16), (2, 5, 14, 14)], dict(kernel_size=(3, 3), stride=(1, 1),
                                                             padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)),
    ("max_pool2d", [(2, 3, 21, 19)], dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                                          ceil_mode=True)),
    ("max_pool2d", [(1, 1, 2, 2)], dict(kernel_size=(301, 301), stride=(1, 1), padding=(150, 150),
                                        dilation=(1, 1), ceil_mode=False)),
    ("max_pool2d_backward", [(2, 3, 11, 10), (2, 3, 21, 19)], dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1),
                                                                  dilation=(1, 1), ceil_mode=True)),
    ("max_pool2d_select", [(2, 3, 21, 19), (2, 3, 21, 19)], dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1),
                                                                 dilation=(1, 1), ceil_mode=True)),
    ("max_pool2d_indices", [(2, 3, 21, 19)], dict(kernel_size=(5, 5), stride=(1, 1), padding=(2, 2),
                                                  dilation=(1, 1), ceil_mode=False)),
    ("avg_pool2d", [(2, 3, 21, 19)], dict(kernel_size=(5, 5), stride=(2, 2), padding=(2, 2), ceil_mode=False,
                                          count_include_pad=False, divisor_override=None)),
    ("avg_pool2d_backward", [(2, 3, 11, 10)], dict(input_size=(21, 19), kernel_size=(5, 5), stride=(2, 2),
                                                 padding=(2, 2), ceil_mode=False, count_include_pad=True,
                                                 divisor_override=None)),
    ("adaptive_avg_pool2d", [(1, 1, 3000, 2)], dict(output_size=(3000, 7))),
    ("adaptive_avg_pool2d_backward", [(1, 1, 3000, 7)], dict(input_size=(3000, 2))),
    ("upsample_nearest2d", [(1, 1, 2, 3000)], dict(output_size=(3000, 2), scales=(None, None), exact=False)),
    ("upsample_nearest2d_backward", [(1, 1, 3000, 2)], dict(input_size=(2, 3000), output_size=(3000, 2),
                                                            scales=(None, None), exact=False)),
    ("einsum", [(30, 40), (40, 50), (50, 20)], dict(equation="ij,jk,kl->il")),
    ("adaptive_max_pool_indices", [(2, 3, 40, 30)], dict(output_size=(7, 9))),
    ("im2col", [(2, 3, 20, 17)], dict(kernel_size=(3, 2), dilation=(1, 2), padding=(1, 1), stride=(2, 1))),
    ("col2im", [(2, 18, 170)], dict(output_size=(20, 17), kernel_size=(3, 2), dilation=(1, 2), padding=(1, 1),
                                    stride=(2, 1))),
    ("interpolate_axis", [(2, 3, 40, 30)], dict(dim=3, output_size=50, scale=None, align_corners=False, cubic=True)),
    ("interpolate_axis", [(2, 3, 400, 30)], dict(dim=2, output_size=700, scale=None, align_corners=True,
                                                 cubic=False)),
    ("interpolate_axis_backward", [(2, 3, 40, 30)], dict(dim=2, input_size=25, scale=None, align_corners=False,
                                                         cubic=False)),
    ("interpolate_axis_backward", [(2, 3, 40, 700)], dict(dim=3, input_size=300, scale=2.5, align_corners=False,
                                                          cubic=True)),
    ("adaptive_max_pool_indices", [(1, 2, 9, 10, 11)], dict(output_size=(4, 3, 5))),
    ("conv3d", [(2, 3, 9, 8, 7), (4, 3, 3, 2, 3), (4,)], dict(stride=(1, 1, 1), padding=((1, 1), (0, 1), (2, 0)),
                                                            dilation=(1, 2, 1), groups=1)),
    ("conv3d", [(1, 4, 6, 7, 8), (4, 2, 2, 2, 2), 0], dict(stride=(2, 1, 3), padding=((0, 0), (1, 1), (1, 1)),
                                                         dilation=(1, 1, 1), groups=2)),
    ("conv_transpose3d", [(2, 4, 4, 3, 5), (4, 3, 3, 3, 2), 0], dict(stride=(2, 1, 2), padding=((1, 1), (0, 0), (1, 1)),
                                                                   output_padding=(1, 0, 0), dilation=(1, 1, 1),
                                                                   groups=1)),
    ("conv3d_weight", [(2, 3, 6, 7, 8), (2, 5, 4, 5, 6)], dict(kernel_size=(3, 3, 3), stride=(1, 1, 1),
                                                              padding=((0, 0), (0, 0), (0, 0)), dilation=(1, 1, 1),
                                                              groups=1)),
]


@pytest.mark.parametrize("op,shapes,attrs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_scratch_rule_bounds_what_the_kernel_allocates(op, shapes, attrs):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) if isinstance(s, tuple) else s for s in shapes]
    measured, out = _measure(op, arrays, attrs)
    # the rule bounds the numpy kernel (the path without a C compiler, the most any path
    # allocates); an eager C kernel (runtime/kernels: e.g. max_pool2d_backward) may need less
    old = c_rows.set_enabled(False)
    try:
        numpy_measured, _ = _measure(op, arrays, attrs)
    finally:
        c_rows.set_enabled(old)
    rule = OPS[op].scratch(*[_spec(a) for a in arrays], **attrs)
    assert OPS[op].meta(*[_spec(a) for a in arrays], **attrs).shape == out.shape
    for m in (measured, numpy_measured):
        assert m <= rule + SLACK, f"{op}: the kernel allocated {m} bytes, the rule says {rule}"
    assert rule <= 4 * numpy_measured + SLACK, \
        f"{op}: the rule says {rule} bytes, the numpy kernel allocated only {numpy_measured}"


def test_ops_without_rule_allocate_about_their_output():
    """Ops without a scratch rule: temporaries within a few times inputs + output."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 300)).astype(np.float32)
    for op, args, attrs in [("softmax", [x], dict(dim=-1)), ("layer_norm", [x, None, None],
                                                              dict(normalized_shape=(300,), eps=1e-5)),
                            ("matmul", [x, x.T.copy()], {}), ("einsum", [x, x], dict(equation="ij,kj->ik"))]:
        assert OPS[op].scratch is None or OPS[op].scratch(*[_spec(a) for a in args], **attrs) == 0
        measured, out = _measure(op, args, attrs)
        assert measured <= 4 * (sum(a.nbytes for a in args if a is not None) + out.nbytes) + SLACK, op


@pytest.fixture(scope="module")
def conv_file(tmp_path_factory):
    """The case from the issue: a 38 kB program (one 96x96 conv2d) that peaked at 735 MiB under a
    1 MiB limit: its im2col columns are 9216 x 20905 floats."""
    eagerc.manual_seed(0)
    path = str(tmp_path_factory.mktemp("conv") / "conv.eagerc")
    export(nn.Conv2d(1, 1, 96, bias=False), (eagerc.randn(1, 1, 200, 200),)).save(path)
    return path


def test_im2col_of_a_small_program_is_bounded_by_max_value_bytes(conv_file):
    assert os.path.getsize(conv_file) < 40_000
    with pytest.raises(ProgramLoadError, match=r"conv2d -> \S+ .*needs 770725540 bytes of temporary buffers, "
                                               r"more than the limit of 1048576 bytes"):
        load(conv_file, max_value_bytes=1 << 20)
    prog = load(conv_file, max_value_bytes=800 << 20)   # the limit raised: it loads and runs
    x = np.random.default_rng(0).standard_normal((1, 1, 200, 200)).astype(np.float32)
    w = prog.weights["weight"][0, 0]
    want = np.lib.stride_tricks.sliding_window_view(x[0, 0], (96, 96)).reshape(105, 105, -1) @ w.reshape(-1)
    np.testing.assert_allclose(prog(x)[0, 0], want, rtol=1e-4, atol=1e-3)


def test_dynamic_sizes_are_bounded_too(tmp_path):
    """A dynamic program specialised at a new size checks its kernels' scratch for that size."""
    conv = nn.Conv2d(1, 1, 9, bias=False)
    prog = export(conv, (eagerc.randn(1, 1, 20, 20),), dynamic_shapes=({2: "h", 3: "w"},))
    path = prog.save(tmp_path / "dyn.eagerc")
    limit = 1 << 20
    loaded = load(path, max_value_bytes=limit)
    loaded(np.zeros((1, 1, 30, 30), np.float32))
    from eagerc.runtime.program import ProgramInputError
    with pytest.raises(ProgramInputError, match="temporary buffers"):   # 81 x ~190k floats of columns
        loaded(np.zeros((1, 1, 200, 200), np.float32) + 0)
