"""The op test table: one `Case` per behaviour of an op drives every generic test.

A case says how to call eagerc (`fn`), how to compute the same thing with numpy
(`ref`, the independent reference), and what inputs to feed (`shapes`, with
`make` choosing each input's values). tests/test_ops.py turns every case into
forward (float64 and float32), gradient (finite differences, float64), dtype and
shape-rule checks; later layers (tracing, compiling) reuse the same cases.

Add a case to tests/op_cases/<family>.py when you add an op: the coverage test
fails for any declared op that no case exercises.
"""
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

import eagerc


def normal(rng, shape):
    return rng.standard_normal(shape)


def positive(rng, shape):
    return np.abs(rng.standard_normal(shape)) + 0.5


def unit(rng, shape):  # inside (-1, 1), for asin-like domains and pow bases
    return rng.uniform(-0.9, 0.9, shape)


def away_from_zero(rng, shape):  # kinks at 0 (abs, relu) make finite differences lie
    x = rng.standard_normal(shape)
    return np.where(np.abs(x) < 0.1, x + np.sign(x + 1e-12) * 0.2, x)


def distinct(rng, shape):  # well-separated values: max/min/sort ties make gradients ambiguous
    n = int(np.prod(shape)) if shape else 1
    return (rng.permutation(n).astype(np.float64) * 0.37 - n * 0.15).reshape(shape)


def integers(lo=-5, hi=6):
    def make(rng, shape):
        return rng.integers(lo, hi, shape).astype(np.int64)
    make.kind = "i"
    return make


def booleans(rng, shape):
    return rng.random(shape) < 0.5


booleans.kind = "b"


def grad2(fn):
    """d(sum(fn(x) ** 3))/dx with create_graph, as an op-table `fn`: the gradient check of such
    a case checks fn's second derivatives."""
    def f(x):
        if not x.requires_grad:  # the forward-only tests pass plain tensors
            x = x.detach().requires_grad_()
        return eagerc.autograd.grad((fn(x) ** 3).sum(), x, create_graph=True)[0]
    return f


@dataclass
class Case:
    name: str                               # a readable id, usually the op's name
    fn: Callable                            # eagerc: fn(*tensors) -> Tensor (or tuple)
    ref: Callable                           # numpy: ref(*arrays) -> array (or tuple)
    shapes: Sequence[tuple]                 # input shapes, one tuple of shapes per variant
    make: Sequence[Callable] = ()           # value generator per input (default: normal)
    grad: Optional[bool] = True             # run gradcheck on the float inputs
    grad_variants: int = 2                  # how many shape variants to gradcheck
    rtol32: float = 1e-4                    # float32 tolerance against the float64 reference
    atol32: float = 1e-5
    rtol: float = 1e-7                      # float64 tolerance
    atol: float = 1e-9
    float32: bool = True                    # run the float32 comparison
    bfloat16: bool = True                   # run the bfloat16 comparison (float16's axis: same rule)
    rtol16: float = 2e-2                    # bfloat16 tolerance against the float64 reference of the
    atol16: float = 2e-2                    # bfloat16-rounded inputs (8 significant bits: eps 2**-7)
    out_dtype: Optional[Callable] = None    # expected eagerc dtype name for float32 inputs
    out16: Optional[str] = None             # ... for bfloat16 inputs (default: bfloat16 where float32 gives float32)
    tags: tuple = field(default_factory=tuple)

    def maker(self, i):
        return self.make[i] if i < len(self.make) and self.make[i] is not None else normal

    def arrays(self, variant, dtype=np.float64, seed=0):
        rng = np.random.default_rng(seed)
        out = []
        for i, shape in enumerate(self.shapes[variant]):
            a = np.asarray(self.maker(i)(rng, shape))
            if a.dtype.kind == "f":
                a = a.astype(dtype)
            out.append(a)
        return out

    def float_inputs(self, variant=0):
        return [i for i, a in enumerate(self.arrays(variant)) if a.dtype.kind == "f"]


def all_cases():
    import importlib
    import pkgutil
    import op_cases
    cases = []
    for mod in pkgutil.iter_modules(op_cases.__path__):
        cases.extend(importlib.import_module(f"op_cases.{mod.name}").CASES)
    return cases
