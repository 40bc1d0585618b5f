"""Algebraic simplification: identities that drop a node or merge two.

    x * 1, 1 * x, x + 0, 0 + x, x - 0, x / 1, x ** 1     -> x
    permute(permute(x, p), q)                            -> permute(x, p∘q), or x if identity
    permute(x, identity)                                 -> x
    reshape|squeeze|unsqueeze(reshape|squeeze|unsqueeze(x)) -> reshape(x, s), or x
    reshape / squeeze / unsqueeze / expand to x's shape  -> x
    cast(x, x's dtype)                                   -> x

Every rewrite keeps the types: an identity applies only when the result's shape and
dtype equal x's (so `int_tensor * 1.0`, which promotes, and `x + zeros(bigger)`, which
broadcasts, stay). The neutral element is a Python scalar or a `full` node holding it.

Signed zeros: `x + 0` -> x gives -0.0 where eager mode gives +0.0 for x = -0.0 (XLA
and Inductor simplify it the same way); the values compare equal.

Escaping values (see util.Escape): replacing a fresh result the user receives by x
would alias x's memory (an input, another output) into it, so arithmetic identities
and reshape-of-reshape are skipped for outputs unless x is a private intermediate.
Pure view identities (same-shape reshape, identity permute...) are always fine: eager
mode's result was a view of x already.
"""
from ...runtime.ir import Node
from ...runtime.ops import OPS
from .util import Escape, rewrite

_NEUTRAL = {n: op.neutral for n, op in OPS.items() if op.neutral}        # op -> (identity element, side)
_RESHAPES = frozenset(n for n, op in OPS.items() if op.kind == "reshape")


def _same_type(a, b):
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype


def simplify(graph):
    producer = {}
    esc = Escape(graph)

    def neutral(x, value):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            if hasattr(x, "name"):
                p = producer.get(x.name)
                return p is not None and p.op == "full" and p.attrs.get("value") == value \
                    and not isinstance(p.attrs.get("value"), bool)
            return False
        return x == value

    def replace(n, x, view):
        if not _same_type(n.out, x) or not esc.allows(n.out, x, view):
            return None
        esc.replaced(n.out, x)
        return x

    def new_node(n, op, inputs, attrs):
        m = Node(op, inputs, attrs, n.out, n.loc, n.module)
        esc.defined(m)
        return [m]

    def visit(n):
        r = _visit(n)
        if r is None:
            producer[n.out.name] = n
        elif isinstance(r, list):
            producer[n.out.name] = r[-1]
        return r

    def _visit(n):
        op, ins = n.op, n.inputs
        if op in _NEUTRAL and len(ins) == 2:
            value, side = _NEUTRAL[op]
            a, b = ins
            if hasattr(a, "name") and neutral(b, value):
                return replace(n, a, False)
            if side == "both" and hasattr(b, "name") and neutral(a, value):
                return replace(n, b, False)
            return None
        if op == "cast":
            x = ins[0]
            return replace(n, x, False) if x.dtype == n.out.dtype else None
        if op == "permute":
            x = ins[0]
            outer = _dims(n.attrs["dims"], len(n.out.shape))
            if outer == list(range(len(outer))):
                return replace(n, x, True)
            p = producer.get(x.name)
            if p is not None and p.op == "permute":
                inner = _dims(p.attrs["dims"], len(p.out.shape))
                dims = [inner[d] for d in outer]
                if dims == list(range(len(dims))):
                    return replace(n, p.inputs[0], True)
                return new_node(n, "permute", [p.inputs[0]], {"dims": tuple(dims)})
            return None
        if op in _RESHAPES or op == "expand":   # shape-only ops: same shape means identity
            x = ins[0]
            if _same_type(n.out, x):
                return replace(n, x, True)
            p = producer.get(x.name)
            if op in _RESHAPES and p is not None and p.op in _RESHAPES:
                src = p.inputs[0]   # a chain of reshapes is one reshape of its source
                if not esc.allows(n.out, src):
                    return None
                if _same_type(n.out, src):
                    return replace(n, src, False)
                if op == "reshape":   # its own shape attribute (possibly symbolic) stays
                    return new_node(n, "reshape", [src], dict(n.attrs))
                if all(isinstance(d, int) for d in n.out.shape):
                    return new_node(n, "reshape", [src], {"shape": tuple(n.out.shape)})
        return None

    return rewrite(graph, visit)[0]


def _dims(dims, ndim):
    return [d % ndim if ndim else 0 for d in dims]
