"""Constant folding: nodes computable from attributes alone, kept as `full` nodes.

Constants are the deterministic creation ops (full, arange, linspace, eye -- never the
random ones) and pure ops whose tensor inputs are all constants. The IR holds no tensor
literals, so a folded result is kept only when it is *uniform* (every element equal):
the node becomes `full(shape, value, dtype)` with the same output value. Non-uniform
constants (an arange) stay as they are, but their arrays feed further folding.

Values are computed with the runtime's own kernels, so a fold gives exactly what eager
mode computes. Two ways, both cheap:

- uniform inputs through an elementwise op (or a shape op such as expand/reshape) fold
  on one element, whatever the shape: `expand(full((), 2.0), (4096, 4096))` costs nothing;
- anything else (a reduction, a matmul, an arange-based expression) is evaluated on the
  real arrays, only while inputs and result stay small (FOLD_LIMIT elements).

Results that are not finite (inf, nan) are left alone: `full` keeps its value as a JSON
number.
"""
import math

import numpy as np

from ...runtime.dtypes import FLOATING_KINDS
from ...runtime.ir import Node, Value
from ...runtime.ops import OPS
from .util import ELEMENTWISE, is_random, may_alias, numel, rewrite

__all__ = ["fold", "FOLD_LIMIT"]

FOLD_LIMIT = 4096
# deterministic creation ops (random ones are never folded)
_CREATION = frozenset(n for n, op in OPS.items() if op.kind == "creation" and not op.effects)
# ops whose output elements are input elements rearranged: a uniform input gives a uniform output
_SHAPE_OPS = frozenset(n for n, op in OPS.items() if op.kind in ("reshape", "view", "copy"))


def _uniform_value(arr):
    """The common element of a non-empty uniform array, as a finite Python scalar; else None."""
    if arr.size == 0:
        return None
    flat = arr.reshape(-1)
    first = flat[0]
    if flat.size > 1 and not (flat == first).all():
        return None
    if arr.dtype.kind in FLOATING_KINDS and first == 0 and flat.size > 1 and len(set(np.signbit(flat).tolist())) > 1:
        return None   # +0.0 and -0.0 mixed: equal, but not one value
    v = first.item()
    if isinstance(v, complex) or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return v


def fold(graph):
    const = {}    # value name -> np.ndarray; a 0-d stand-in for uniform values
    uniform = {}  # value name -> the Python scalar of a uniform constant

    def note(n, arr):
        """Remember a computed constant; True if it is uniform."""
        if arr is None or arr.dtype.name != n.out.dtype or numel(n.out.shape) == 0:
            return False
        value = _uniform_value(arr)
        if value is None:
            if arr.shape == tuple(n.out.shape):
                const[n.out.name] = arr
            return False
        uniform[n.out.name] = value
        const[n.out.name] = np.asarray(arr.reshape(-1)[:1].reshape(()))
        return True

    def as_full(n):
        return [Node("full", [], {"shape": tuple(n.out.shape), "value": uniform[n.out.name],
                                  "dtype": n.out.dtype}, n.out, n.loc, n.module)]

    def visit(n):
        for x in n.inputs:      # most nodes read a non-constant: out before anything is computed
            if isinstance(x, Value) and x.name not in const:
                return None
        size = numel(n.out.shape)
        if size is None or n.out.device != "cpu" or is_random(n):
            return None
        vals = n.input_values()
        op = OPS[n.op]
        if n.op in _CREATION:
            if size <= FOLD_LIMIT or n.op == "full":
                ins = {**n.attrs, "shape": ()} if n.op == "full" else n.attrs
                note(n, _run(op, [], ins))
            return None
        if not vals:
            return None
        if all(v.name in uniform for v in vals) and (n.op in _SHAPE_OPS or n.op in ELEMENTWISE):
            if n.op in _SHAPE_OPS:   # same elements, rearranged; a view stays a (cheap) view
                note(n, const[vals[0].name])
                return None
            ins = [const[x.name] if hasattr(x, "name") else x for x in n.inputs]
            return as_full(n) if note(n, _run(op, ins, n.attrs)) else None
        if size > FOLD_LIMIT or any(numel(v.shape) > FOLD_LIMIT for v in vals):
            return None
        ins = [_materialize(const[x.name], x) if hasattr(x, "name") else x for x in n.inputs]
        arr = _run(op, ins, n.attrs)
        if arr is None or arr.shape != tuple(n.out.shape):
            return None
        return as_full(n) if note(n, arr) and not may_alias(n) else None

    return rewrite(graph, visit)[0]


def _materialize(arr, v):
    return np.broadcast_to(arr, tuple(v.shape)).copy() if arr.shape != tuple(v.shape) else arr


def _run(op, ins, attrs):
    try:
        with np.errstate(all="ignore"):
            out = op.cpu(*ins, **attrs)
    except Exception:   # a kernel that rejects the constants: leave the node to fail at run time
        return None
    return out if type(out) is np.ndarray else np.asarray(out)
