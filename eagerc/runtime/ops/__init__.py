"""The op registry: every primitive is declared here exactly once.

A declaration names the op, its tensor inputs, its attributes, its kernel and its
shape/dtype rule (`meta`), and, for a kernel whose temporary buffers can be far larger
than its inputs and output (im2col, padding, window masks), a `scratch` rule: the same
arguments as `meta`, returning those buffers' bytes, so that the file loader can bound
them like values (runtime/program.py, max_value_bytes). The other layers attach their parts to the same
`OpDef` by name: the frontend its derivative (`grads`), the compiler its lowering.

Kernels are xp-generic: `impl(xp)` returns a callable over arrays of module `xp`
(numpy or cupy). The numpy specialisation is built once at declaration time and
stored in `cpu`, so the eager hot path calls it directly.

Kernels do not warn: numpy's floating-point RuntimeWarnings (log(0), 0/0, overflow) are
silenced by one warnings filter installed here, as PyTorch is silent there (see
runtime/ownership.py for why a filter and not `np.errstate` per op).
"""
import numpy as np

from ..ownership import silence_numeric_warnings

__all__ = ["OpDef", "OPS", "declare", "get"]

OPS = {}
silence_numeric_warnings()


class OpDef:
    """One primitive. Plain data: the layers above read and fill these slots."""
    __slots__ = (
        "name", "inputs", "attrs", "impl", "meta", "cpu", "_gpu",
        "differentiable", "broadcasts", "view", "inplace_ok",
        "grads", "save_table", "grad_params", "lowering", "doc", "scratch",
    )

    def __init__(self, name, inputs, attrs, impl, meta, differentiable, broadcasts, view, doc, scratch=None):
        self.name = name
        self.inputs = inputs          # names of tensor inputs, e.g. ("a", "b")
        self.attrs = attrs            # names of attributes, e.g. ("dim", "keepdim")
        self.impl = impl              # xp -> callable(*arrays, **attrs)
        self.meta = meta              # (*specs, **attrs) -> (shape, np.dtype)
        self.cpu = impl(np)
        self._gpu = None
        self.differentiable = differentiable
        self.broadcasts = broadcasts  # elementwise over broadcast inputs: grads are summed back
        self.view = view              # the output may alias the first input's memory
        self.grads = None             # set by the frontend: one formula per input
        self.save_table = None        # needs-mask -> which inputs/output to save
        self.grad_params = None
        self.lowering = None          # set by the compiler
        self.doc = doc
        self.scratch = scratch        # (*specs, **attrs) -> bytes of temporary buffers, or None

    def kernel(self, xp):
        if xp is np:
            return self.cpu
        if self._gpu is None:
            self._gpu = self.impl(xp)
        return self._gpu

    def __repr__(self):
        return f"<op {self.name}({', '.join(self.inputs + self.attrs)})>"


def declare(name, inputs, impl, meta, attrs=(), differentiable=True, broadcasts=False,
            view=False, doc="", scratch=None):
    if name in OPS:
        raise ValueError(f"op {name!r} is declared twice")
    op = OpDef(name, tuple(inputs), tuple(attrs), impl, meta, differentiable, broadcasts, view, doc, scratch)
    OPS[name] = op
    return op


def get(name):
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}") from None


def load_all():
    """Import every op family so the registry is complete."""
    from . import elementwise, creation, reduction, shape, joining, indexing, linalg, nn, conv  # noqa: F401
