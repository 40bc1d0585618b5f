"""Attach the frontend's parts to declared ops, written with Tensor ops: derivatives and
decompositions.

`defgrad("mul", lambda g, b: g * b, lambda g, a: g * a)` gives one formula per
input. A formula's parameter names say what it needs, which is also what the
forward pass saves (so nothing else is kept alive):

- `g`             the gradient of the output
- an input name   that input (as saved at forward time), e.g. `a`, `x`
- `out`           the op's output
- `<input>_shape` the shape of an input, e.g. `x_shape`
- an attribute    that attribute's value, e.g. `dim`, `keepdim`

An op whose derivative is easier as one function for all inputs (variadic ops like
cat) uses `defgrad_node(name, fn, saves_inputs=False, saves_output=False)`: fn(node, g)
returns a sequence with one gradient (or None) per input.

A composite op (softmax, layer_norm, ...) gets its decomposition into primitives with
`defdecomp(name, fn)`: fn(*inputs, **attrs) computes the op with other ops; the compiler
traces it to fuse the primitives (compiler/passes/decompose.py).
"""
import inspect

from ..dispatch import SAVE_ALL
from ..runtime.ops import get

__all__ = ["defgrad", "defgrad_node", "defdecomp"]

# parameter kinds, resolved by the engine
G, INPUT, OUT, SHAPE, ATTR = range(5)


class GradOnly(tuple):
    """The kinds of a formula f(g): the engine calls it without reading the kinds."""
    __slots__ = ()


class GradAndInput(tuple):
    """The kinds of a formula f(g, <input>) -- mul's, matmul's, div's first...: the engine
    passes the saved input (version-checked) without walking the kinds."""
    __slots__ = ()


def _param_kinds(op, fn):
    kinds = []
    for p in inspect.signature(fn).parameters:
        if p == "g":
            kinds.append((G, None))
        elif p in op.inputs:
            kinds.append((INPUT, op.inputs.index(p)))
        elif p == "out":
            kinds.append((OUT, None))
        elif p.endswith("_shape") and p[:-6] in op.inputs:
            kinds.append((SHAPE, op.inputs.index(p[:-6])))
        elif p in op.attrs:
            kinds.append((ATTR, p))
        else:
            raise TypeError(f"derivative of {op.name}: parameter {p!r} is not g, out, an input "
                            f"{op.inputs}, an input's _shape or an attribute {op.attrs}")
    if [k for k, _ in kinds] == [G]:
        return GradOnly(kinds)
    if [k for k, _ in kinds] == [G, INPUT]:
        return GradAndInput(kinds)
    return tuple(kinds)


def defgrad(name, *formulas):
    """One formula per input (None for inputs that get no gradient)."""
    op = get(name)
    if len(formulas) != len(op.inputs):
        raise TypeError(f"derivative of {name}: {len(op.inputs)} inputs {op.inputs} "
                        f"but {len(formulas)} formulas")
    params = tuple(None if f is None else _param_kinds(op, f) for f in formulas)
    n = len(op.inputs)
    table = []
    for mask in range(1 << n):
        inputs, out, shapes = set(), False, False
        for i in range(n):
            if mask >> i & 1 and params[i] is not None:
                for kind, key in params[i]:
                    if kind == INPUT:
                        inputs.add(key)
                    elif kind == OUT:
                        out = True
                    elif kind == SHAPE:
                        shapes = True
        table.append((tuple(sorted(inputs)), out, shapes))
    op.grads = formulas
    op.grad_params = params
    op.save_table = table
    return op


def defgrad_node(name, fn, saves_inputs=False, saves_output=False):
    """One function for the whole node: fn(node, g) -> per-input gradients. `saves_inputs`: True
    for every input, or the names of the inputs fn reads (the others are freed with the forward's
    last use, e.g. a recurrence's input projections); with `saves_output` the node keeps its
    output as well (read with engine._saved_output), e.g. a recurrence's states."""
    op = get(name)
    names = op.inputs if saves_inputs is True else tuple(saves_inputs or ())
    unknown = [p for p in names if p not in op.inputs]
    if unknown:
        raise TypeError(f"derivative of {name}: saves_inputs names {unknown}, not its inputs {op.inputs}")
    op.grads = fn
    op.grad_params = None
    if saves_inputs is True and not saves_output:
        op.save_table = SAVE_ALL
    elif names or saves_output:
        op.save_table = [(tuple(op.inputs.index(p) for p in names), bool(saves_output), True)] * (1 << len(op.inputs))
    else:
        op.save_table = None
    return op


def defdecomp(name, fn):
    """fn(*inputs, **attrs) -> the op's result, computed with other ops (Tensor ops)."""
    op = get(name)
    try:
        inspect.signature(fn).bind(*op.inputs, **dict.fromkeys(op.attrs))
    except TypeError as e:
        raise TypeError(f"decomposition of {name}: it must take the inputs {op.inputs} and the "
                        f"attributes {op.attrs} of the op ({e})") from None
    op.decomposition = fn
    return op
