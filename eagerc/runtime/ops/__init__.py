"""The op registry: every primitive is declared here exactly once, with its traits.

A declaration names the op, its tensor inputs, its attributes, its kernel and its
shape/dtype rule (`meta`), and, for a kernel whose temporary buffers can be far larger
than its inputs and output (im2col, padding, window masks), a `scratch` rule: the same
arguments as `meta`, returning those buffers' bytes, so that the file loader can bound
them like values (runtime/program.py, max_value_bytes).

It also states the op's traits -- what the other layers need to know about it, so that
none keeps its own list of op names (the passes' op classes, the backends' ufunc tables,
the FLOP estimates, the frontend's elementwise functions are read from here):

- `kind`: one of KINDS below.
- `ufunc`: the numpy ufunc the op is (np.add for add). A declaration without a kernel
  gets that ufunc as its kernel (then `op.cpu is np.add`, and a backend may call the
  ufunc itself). Ops whose kernel wraps their ufunc (a result cast, a special case, a
  zero check) name it too.
- `promotion` (elementwise ops): how operand dtypes combine -- "float" (integers
  become the default float, then one dtype), "float_only" (floating-point tensors only,
  as PyTorch's logaddexp), "same" (one common dtype), "bool" (compared in the common
  dtype, bool result), "integral" (integers and bools only).
- `aliases`: "view" (the output is a view of the first input: shares its memory and
  its version counter) or "may" (the kernel may hand back its input or a view of it:
  contiguous, to_device, einsum); None for a fresh result.
- `effects`: ("random",) for ops that draw from a generator -- their `seed`/`offset`
  attributes are the draw's identity (compile.Entry.rng sets them every call), so
  passes never merge, fold or rename them.
- `flops`: a `Flops` formula (category and count), by default from the kind.
- `neutral` (binary ops): (value, side) -- the identity element and where it may
  stand ("both" for x + 0 and 0 + x, "right" for x - 0).
- `pointwise`: one output element from the same-index input elements (broadcast),
  nothing else read: true for elementwise ops, and for clone and gelu.
- `differentiable`, `broadcasts` (elementwise over broadcast inputs: gradients are
  summed back to each input's shape).
- `opmath`: bfloat16 inputs are computed in float32 and the results rounded once to
  bfloat16, as PyTorch's softmax, norms, losses and scans do (`opmath_kernel`); a
  bfloat16 sum of exponentials would stop growing at 256 terms. The kernel decides by its
  first input's dtype (x, or the gradient g of a backward op), so other dtypes pay one test.

The other layers attach their parts to the same `OpDef` by name: the frontend its
derivative (`grads`, autograd/formulas.py) and, for composites, its decomposition into
primitives (`decomposition`) and its autocast category per device (`autocast`, from the
one table eagerc/amp/lists.py); the compiler its lowering to fused kernels (`lowering`,
compiler/kernels/lower.py). A layer that has no part for an op says why in
`why_not[part]`, and tests/test_op_parts.py checks that every op has each part or a
reason, so nothing is half-registered.

Kernels are xp-generic: `impl(xp)` returns a callable over arrays of module `xp`
(numpy or cupy). The numpy specialisation is built once at declaration time and stored
in `cpu` (and `view` = aliases == "view"), so the eager hot path reads one slot each.

Kernels do not warn: numpy's floating-point RuntimeWarnings (log(0), 0/0, overflow) are
silenced by one warnings filter installed here, as PyTorch is silent there (see
runtime/ownership.py for why a filter and not `np.errstate` per op).
"""
import math
from collections import namedtuple

import numpy as np

from ..ownership import silence_numeric_warnings

__all__ = ["OpDef", "OPS", "KINDS", "Flops", "declare", "get", "no_part"]

OPS = {}
silence_numeric_warnings()

# what an op does, in the words the other layers classify ops by
KINDS = ("elementwise",      # one output element per (broadcast) input element: math, comparisons, casts
         "reduction",        # sum, mean, prod, amax, amin, all, any over dimensions
         "index_reduction",  # argmax, argmin: the index of each reduced dimension's extreme value
         "scan",             # cumsum, cumprod
         "reshape", "view",  # the same elements in the same order under another shape; other views
         "copy",             # one input's elements rearranged, repeated or moved into new memory
         "shape",            # rearrangements that also write other values: tril, triu, pad, cat, stack
         "indexing",         # reads or writes at positions given by index tensors or attributes
         "creation",         # no tensor inputs: constants, ranges, random draws
         "linalg", "conv",   # matrix products; convolutions and their weight gradient
         "window",           # pooling and upsampling over spatial windows, and their gradients
         "composite")        # fused nn ops (softmax, layer_norm, ...) and their backward kernels


# A FLOP formula: count(out_shape, in_shapes, attrs) -> int (a FLOP is one floating-point add or
# multiply; a Python scalar input has shape ()), and the category `eagerc inspect` reports it under.
Flops = namedtuple("Flops", ["category", "count"])
PER_OUTPUT = Flops("elementwise", lambda out, ins, attrs: math.prod(out))
PER_INPUT = Flops("reduction", lambda out, ins, attrs: math.prod(ins[0]))
NORMALISATION = Flops("normalisation", lambda out, ins, attrs: 5 * math.prod(ins[0]))
DATA_MOVEMENT = Flops("data movement", lambda out, ins, attrs: 0)


def flops_of(op):
    """Op `op`'s FLOP formula (its `flops` trait); an undeclared name moves data only."""
    d = OPS.get(op)
    return DATA_MOVEMENT if d is None else d.flops


def node_flops(node):
    """Estimated FLOPs of one graph node (an int; a symbolic size raises TypeError/ValueError)."""
    ins = [tuple(x.shape) if hasattr(x, "shape") else () for x in node.inputs]
    return flops_of(node.op).count(tuple(node.out.shape), ins, node.attrs)


class OpDef:
    """One primitive. Plain data: the layers above read and fill these slots."""
    __slots__ = (
        "name", "inputs", "attrs", "impl", "meta", "scratch",                # the declaration
        "kind", "ufunc", "promotion", "aliases", "effects",                  # traits
        "flops", "neutral", "pointwise", "differentiable", "broadcasts",
        "cpu", "_gpu", "view",                                               # derived, for apply
        "grads", "save_table", "grad_params", "decomposition", "lowering",   # the layers' parts
        "autocast", "why_not", "opmath",
    )

    def kernel(self, xp):
        if xp is np:
            return self.cpu
        if self._gpu is None:
            self._gpu = self.impl(xp)
        return self._gpu

    def __repr__(self):
        return f"<op {self.name}({', '.join(self.inputs + self.attrs)})>"


def opmath_kernel(impl):
    """impl (xp -> kernel) computing bfloat16 in float32: bfloat16 arrays among the arguments
    are widened, float32 results rounded once to bfloat16 (the `opmath` trait)."""
    def make(xp):
        kernel = impl(xp)

        def widen(x):
            return x.astype(np.float32) if getattr(x, "dtype", None) is not None and x.dtype.kind == "V" else x

        def narrow(y, dtype):
            return y.astype(dtype) if getattr(y, "dtype", None) == np.float32 else y

        def opmath(*args, **attrs):
            if args[0].dtype.kind != "V":
                return kernel(*args, **attrs)
            out = kernel(*map(widen, args), **attrs)
            dtype = args[0].dtype
            return tuple(narrow(y, dtype) for y in out) if isinstance(out, tuple) else narrow(out, dtype)
        opmath.inner = kernel   # the kernel of every other dtype (runtime/bind.py binds it directly)
        return opmath
    return make


def declare(name, inputs, impl, meta, attrs=(), *, kind, ufunc=None, promotion=None, aliases=None,
            effects=(), flops=None, neutral=None, pointwise=None, differentiable=True, broadcasts=False,
            scratch=None, opmath=False):
    """Declare op `name` (see the module docstring for each trait). `impl` None: the kernel
    is numpy's / cupy's `ufunc` itself."""
    if name in OPS:
        raise ValueError(f"op {name!r} is declared twice")
    if kind not in KINDS:
        raise ValueError(f"op {name!r}: kind {kind!r} is not one of {KINDS}")
    if aliases not in (None, "view", "may"):
        raise ValueError(f"op {name!r}: aliases must be None, 'view' or 'may', got {aliases!r}")
    if ("random" in effects) != ("seed" in attrs and "offset" in attrs):
        raise ValueError(f"op {name!r}: an op draws random numbers exactly when it has seed and offset "
                         "attributes (the draw's identity)")
    if impl is None:
        if ufunc is None:
            raise ValueError(f"op {name!r}: give a kernel or the numpy ufunc it is")
        impl = lambda xp: getattr(xp, ufunc)  # noqa: E731
    if opmath:
        impl = opmath_kernel(impl)
    op = OpDef()
    op.opmath = opmath
    op.name, op.inputs, op.attrs, op.impl, op.meta, op.scratch = name, tuple(inputs), tuple(attrs), impl, meta, scratch
    op.kind, op.ufunc, op.promotion, op.aliases, op.effects = kind, ufunc, promotion, aliases, tuple(effects)
    op.neutral, op.differentiable, op.broadcasts = neutral, differentiable, broadcasts
    op.pointwise = kind == "elementwise" if pointwise is None else pointwise
    op.flops = flops or (PER_OUTPUT if op.pointwise else PER_INPUT if kind in ("reduction", "index_reduction", "scan")
                         else DATA_MOVEMENT)
    op.cpu, op._gpu, op.view = impl(np), None, aliases == "view"
    op.grads = op.save_table = op.grad_params = op.decomposition = None   # the frontend's parts
    op.lowering = None                                                    # the compiler's part
    op.autocast = None      # the frontend's autocast lists: {device: category} (eagerc/amp/lists.py)
    op.why_not = {}                                                       # part -> why this op has none
    OPS[name] = op
    return op


def no_part(part, reason, names):
    """Record that the layer owning `part` has none for each op in `names`, and why."""
    for n in names:
        get(n).why_not[part] = reason


def get(name):
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}") from None


def load_all():
    """Import every op family so the registry is complete."""
    from . import elementwise, creation, reduction, shape, joining, indexing, linalg, nn, conv, sorting  # noqa: F401
