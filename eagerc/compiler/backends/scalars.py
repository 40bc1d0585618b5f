"""0-d float64 arithmetic of the numpy backend's programs as Python floats (speed only).

An optimizer step computes its bias corrections (1 - beta ** step, sqrt, lr / bias...)
as chains of 0-d nodes; as Python float arithmetic they cost ~20x less than 0-d ufunc
calls. `scalar_nodes` picks them (by the ufunc a node renders as -- the ops' declared
`ufunc` trait -- never by op names), `scalar_expr` renders one, `GLOBALS` are the helpers
the lines call. Python float +, -, *, / are IEEE double like numpy's; the cases where
Python raises or differs (division by zero, sqrt of a negative, pow overflow or complex
results) go to numpy, so values, infs and nans agree bit for bit.
"""
import math

import numpy as np
from ...runtime.dtypes import FLOATING_KINDS

__all__ = ["scalar_nodes", "scalar_expr", "GLOBALS"]

CAST = "cast"   # the op converting a value to its `dtype` attribute
# the ufuncs computed with Python floats: binary operator, or None (a helper call)
ARITHMETIC = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "power": None, "negative": None,
              "sqrt": None}


def _scalar_const(x):
    return (type(x) is float) or (type(x) is int and abs(x) < 2 ** 53)


def scalar_nodes(graph, direct, per_call):
    """0-d float64 arithmetic computed with Python floats instead of 0-d ufunc calls.

    Optimizer bias corrections (1 - beta ** step, sqrt, lr / bias...) are chains of 0-d
    nodes; a ufunc call on a 0-d array costs ~0.6 us, Python float arithmetic ~0.03 us
    (an Adam step over six parameters has ~50 of them: ~5% of a small MLP's step). Not
    needed for bit parity (optim/rules.py writes each rule once), only for speed.
    A node is a scalar node when its value is 0-d and
      "f":   float64 arithmetic (a direct node whose ufunc is one of ARITHMETIC: add, subtract,
             multiply, divide, power, negative, sqrt -- the ops' declared ufunc trait) whose tensor inputs are
             all "f" values (other inputs: Python int/float constants), or a cast to
             float64 of a 0-d float array (`float(x)`, exact) or of an "f" value;
      "f32": a cast to float32 of an "f" value (`np.float32(x)`, rounded like astype),
             read only by direct ufunc nodes (a numpy scalar there acts like a 0-d array).
    An "f" value is read only by scalar nodes; neither kind is returned or written back.
    0-d float64 graph inputs (an optimizer's lr, betas... read at every call) read only by
    scalar nodes are "f" values too: the program binds them with float().
    Python float +, -, *, / are IEEE double like numpy's; division by zero, sqrt of a
    negative number and pow overflow / complex results go to numpy (helpers fdiv, fsqrt,
    fpow), so results and infs/nans agree. pow is C pow() as in Python (`beta ** step`,
    the eager optimizers' arithmetic), where numpy's array loop may use a SIMD pow.
    Returns ({node index: kind}, {names of the inputs that are "f" values})."""
    f64, f32 = np.dtype(np.float64), np.dtype(np.float32)
    kept = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    index = {}
    cand = {v.name: ("f", None) for _, v in graph.inputs
            if not v.shape and v.dtype == "float64" and v.name not in kept}
    for i, n in enumerate(graph.nodes):
        out = n.out
        index[out.name] = i
        if out.shape or out.name in per_call or out.name in kept:
            continue
        try:
            odt = np.dtype(out.dtype)
        except TypeError:
            continue
        if n.op == CAST:
            if len(n.inputs) != 1 or set(n.attrs) != {"dtype"} or not hasattr(n.inputs[0], "name"):
                continue
            x = n.inputs[0]
            if x.shape:
                continue
            if odt == f64:
                if x.name in cand and cand[x.name][0] == "f":
                    cand[out.name] = ("f", i)
                elif np.dtype(x.dtype).kind in FLOATING_KINDS:
                    cand[out.name] = ("f", i)
            elif odt == f32 and x.name in cand and cand[x.name][0] == "f":
                cand[out.name] = ("f32", i)
            continue
        if direct.get(i) not in ARITHMETIC or odt != f64 or n.attrs:
            continue
        vals = [x for x in n.inputs if hasattr(x, "name")]
        if not vals or any(cand.get(x.name, ("",))[0] != "f" for x in vals):
            continue
        if any(not hasattr(x, "name") and not _scalar_const(x) for x in n.inputs):
            continue
        cand[out.name] = ("f", i)
    readers = {}
    for i, n in enumerate(graph.nodes):
        for x in n.input_values():
            readers.setdefault(x.name, []).append(i)
    changed = True
    while changed:
        changed = False
        nodes = {i for _, i in cand.values()}
        for name, (kind, i) in list(cand.items()):
            rs = readers.get(name, ())
            if kind == "f":
                ok = all(j in nodes for j in rs)
            else:
                ok = all(j in direct and j not in nodes for j in rs)
            if ok and kind == "f" and i is not None:
                n = graph.nodes[i]
                ok = n.op == CAST or all(x.name in cand for x in n.input_values())
            if not ok:
                del cand[name]
                changed = True
    return ({i: kind for kind, i in cand.values() if i is not None},
            {name for name, (_, i) in cand.items() if i is None})


def _src(x, names):
    if hasattr(x, "name"):
        return names[x.name]
    lit = repr(float(x)) if type(x) is float else repr(x)
    return f"({lit})" if lit.startswith("-") or lit.startswith("float") else lit


def scalar_expr(n, kind, uf, names, scalar_values):
    """Python source of a scalar node (see scalar_nodes); `uf` its ufunc."""
    if n.op == CAST:
        x = n.inputs[0]
        a = names[x.name]
        if kind == "f32":
            return f"np.float32({a})"
        return a if x.name in scalar_values else f"float({a})"
    args = [_src(x, names) for x in n.inputs]
    if uf == "negative":
        return f"-{args[0]}"
    if uf == "sqrt":
        return f"(msqrt({args[0]}) if {args[0]} >= 0.0 else fsqrt({args[0]}))"
    if uf == "power":
        return f"fpow({args[0]}, {args[1]})"
    a, b = args
    if uf == "divide":
        y = n.inputs[1]
        if not hasattr(y, "name") and y != 0:
            return f"{a} / {b}"
        return f"({a} / {b} if {b} else fdiv({a}, {b}))"
    return f"{a} {ARITHMETIC[uf]} {b}"


def _fpow(a, b):
    try:
        r = a ** b
    except (ArithmeticError, ValueError):  # 0.0 ** -1, overflow: numpy's inf and warning
        return float(np.power(np.float64(a), b))
    return r if r.__class__ is float else float(np.power(np.float64(a), b))  # complex: nan


def _fsqrt(a):
    return float(np.sqrt(np.float64(a)))


def _fdiv(a, b):
    return float(np.divide(np.float64(a), b))


GLOBALS = {"msqrt": math.sqrt, "fsqrt": _fsqrt, "fpow": _fpow, "fdiv": _fdiv}
