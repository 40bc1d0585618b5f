"""Lowering: a fusion group of graph nodes -> one Kernel (kernels/ir.py), or Unsupported.

A group (passes/fusion.py) is elementwise nodes over one index space, reductions over
its trailing dims whose results (keepdim or not) feed later members -- a row kernel:
they become row_sum/row_mean/row_max/row_min instructions and members of the row shape
become per-row instructions, so softmax, log_softmax, layer_norm, rms_norm, logsumexp
and the cross-entropy forward and backward are one kernel each -- and at most one final
reduction: over everything, or a sum/mean over leading dims (bias gradients). Each node
becomes instructions over loads (values made outside the group), constants (Python
scalars, in the dtype numpy would use) and earlier members. A member's value is stored
when something outside the group reads it.

Dtypes follow the eager kernels exactly, or the group is not lowered: every instruction's
dtype is derived here and compared with the node's recorded dtype. What is lowered:

- float math:    exp exp2 log log2 log1p expm1 sqrt rsqrt sin cos tan tanh sigmoid erf
                 reciprocal (float16/32/64)
- same-dtype:    neg abs square relu sign (floats and ints), floor ceil round trunc (floats)
- binary:        add sub mul maximum minimum (same dtype), div, pow (floats; a constant
                 exponent 2 or 3 becomes multiplications), lerp
- comparisons:   eq ne lt le gt ge -> bool; logical_and/or/xor/not; isnan isinf isfinite
- bitwise:       and or xor not (ints, bool)
- where, cast (between the IR dtypes), clamp, clone
- reductions:    sum, mean, amax, amin of float values over trailing dims (row
                 reductions), over everything, or (sum, mean) over leading dims
- random:        uniform, normal (float32/float64) over the whole index space: instructions
                 drawing element i at the node's per-call seed and offset (kernel params)

Everything else (int reductions, reductions over middle axes, symbolic shapes,
floor_divide, remainder, nan_to_num, ...) raises Unsupported and runs as before.
"""
import math

import numpy as np

from .ir import DTYPES, FLOATS, Buffer, Kernel, Reduction, broadcast_strides

__all__ = ["Unsupported", "lower_group", "LOWERABLE", "REDUCIBLE", "RANDOM", "index_space"]


class Unsupported(Exception):
    pass


FLOAT_MATH = {"exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
              "tanh", "sigmoid", "erf", "reciprocal"}
SAME_NUM = {"neg", "abs", "square", "relu", "sign"}
SAME_FLOAT = {"floor", "ceil", "round", "trunc"}
ARITH = {"add", "sub", "mul", "maximum", "minimum"}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
LOGICAL = {"logical_and", "logical_or", "logical_xor"}
BOOL_TEST = {"isnan", "isinf", "isfinite"}
BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor"}
LOWERABLE = (FLOAT_MATH | SAME_NUM | SAME_FLOAT | ARITH | COMPARE | LOGICAL | BOOL_TEST | BITWISE
             | {"div", "pow", "lerp", "where", "cast", "clamp", "clone", "logical_not", "bitwise_not"})
REDUCIBLE = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min"}
ROW_OP = {"sum": "row_sum", "mean": "row_mean", "amax": "row_max", "amin": "row_min"}


def _static(shape):
    return all(type(s) is int for s in shape)


def index_space(nodes):
    """The group's full shape: the largest of its members' shapes and reduction inputs."""
    shapes = [tuple(n.inputs[0].shape) if n.op in REDUCIBLE else tuple(n.out.shape) for n in nodes]
    for sh in shapes:
        if not _static(sh):
            return sh
    return max(shapes, key=math.prod)


def _reduce_dims(node, ndim):
    """The sorted dimensions a reduction node reduces."""
    dim = node.attrs.get("dim")
    if dim is None or ndim == 0:
        return list(range(ndim))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    try:
        return sorted({int(d) % ndim for d in dims})
    except (TypeError, ValueError):
        raise Unsupported(f"reduction dims {dim!r}")


def _row_dims(nodes, shape):
    """(k, final): how many trailing dimensions the group's row reductions reduce (they
    must agree), and the final reduction over all elements (a node) or None."""
    n = len(shape)
    reds = [x for x in nodes if x.op in REDUCIBLE]
    final = None
    if len(reds) == 1 and reds[0] is nodes[-1] and tuple(reds[0].inputs[0].shape) == shape:
        dims = _reduce_dims(reds[0], n)
        if (dims == list(range(n)) and not reds[0].attrs.get("keepdim")) or \
                (dims and dims == list(range(len(dims))) and len(dims) < n and reds[0].op in ("sum", "mean")):
            final = reds.pop()      # over everything, or over leading dims (a bias gradient)
    ks = set()
    for r in reds:
        dims = _reduce_dims(r, n)
        if tuple(r.inputs[0].shape) != shape or not dims or dims != list(range(n - len(dims), n)):
            raise Unsupported(f"{r.op} over dims {r.attrs.get('dim')!r} of {r.inputs[0].shape} "
                              f"(only trailing dims of the index space {shape})")
        ks.add(len(dims))
    if len(ks) > 1:
        raise Unsupported(f"row reductions over different numbers of trailing dims {sorted(ks)}")
    return (ks.pop() if ks else 0), final


RANDOM = {"uniform": "rand_uniform", "normal": "rand_normal"}    # graph op -> instruction


def _lower_random(k, n):
    """The instruction drawing random node `n` (no inputs) at each element of the index
    space: its seed and offset become kernel params, read by the driver per call."""
    if n.out.dtype not in FLOATS:
        raise Unsupported(f"{n.op} of {n.out.dtype}")
    if tuple(n.out.shape) != tuple(k.shape):
        raise Unsupported(f"{n.op} of shape {n.out.shape} in index space {k.shape}")
    if set(n.attrs) - {"shape", "dtype", "seed", "offset"} or not {"seed", "offset"} <= set(n.attrs):
        raise Unsupported(f"{n.op} attributes {sorted(n.attrs)}")
    seed, offset = k.param(n.out.name, "seed"), k.param(n.out.name, "offset")
    return k.add(RANDOM[n.op], (seed, offset, k.index()), n.out.dtype)


def _check_reduction(n):
    x = n.inputs[0]
    if not hasattr(x, "name") or x.dtype not in FLOATS or n.out.dtype != x.dtype:
        raise Unsupported(f"{n.op} of {getattr(x, 'dtype', x)}")
    if set(n.attrs) - {"dim", "keepdim"}:
        raise Unsupported(f"{n.op} attributes {sorted(n.attrs)}")
    if not _static(n.out.shape):
        raise Unsupported("symbolic shape")


def lower_group(nodes, needed, name="k0"):
    """The Kernel computing `nodes` (a fusion group, in graph order). `needed`: names of the
    members' values read outside the group (stored)."""
    shape = index_space(nodes)
    if not _static(shape):
        raise Unsupported("symbolic shape")
    row_dims, final = _row_dims(nodes, shape)
    row_shape = shape[:len(shape) - row_dims] + (1,) * row_dims     # a per-row value, keepdim
    row_flat = shape[:len(shape) - row_dims]                          # ... and without
    k = Kernel(name, shape, nodes=[n.out.name for n in nodes], row_dims=row_dims)
    rows = k.rows_cols()[0]
    ref = {}    # member value name -> instruction index
    user = [shape]   # the output shape of the node being lowered

    def arg(x, dtype=None):
        """The instruction for node input `x`: a member, a load, or a constant of `dtype`."""
        if hasattr(x, "name"):
            if x.dtype not in DTYPES:
                raise Unsupported(f"dtype {x.dtype}")
            if x.name in ref:
                xs = tuple(x.shape)
                if xs != user[0] and not (user[0] == shape and xs == row_shape):
                    raise Unsupported(f"{x.name} {xs} read at shape {user[0]} (index space {shape})")
                return ref[x.name]
            if not _static(x.shape):
                raise Unsupported("symbolic shape")
            try:
                strides = broadcast_strides(x.shape, user[0])
                if row_dims and user[0] == row_flat:      # per-row work without keepdim
                    strides += (0,) * row_dims
                return k.load(x.name, x.dtype, x.shape, strides)
            except ValueError as e:
                raise Unsupported(str(e))
        if dtype is None:
            raise Unsupported("constant without a dtype")
        return const(x, dtype)

    def const(value, dtype):
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, (int, float)):
            raise Unsupported(f"constant {value!r}")
        if dtype in FLOATS:
            value = float(np.dtype(dtype).type(value))
        elif dtype == "bool":
            value = int(bool(value))
        else:
            info = np.iinfo(dtype)
            if not isinstance(value, int) or not info.min <= value <= info.max:
                raise Unsupported(f"constant {value!r} for {dtype}")
        return k.add("const", (value,), dtype)

    def dtype_of(x):
        return x.dtype if hasattr(x, "name") else None

    def cast(i, dtype):
        return i if k.instrs[i].dtype == dtype else k.add("cast", (i,), dtype)

    def common(xs):
        """The dtype numpy computes a mix of tensors and weak Python scalars in (NEP 50)."""
        ts = {x.dtype for x in xs if hasattr(x, "name")}
        if len(ts) != 1:
            raise Unsupported(f"mixed operand dtypes {sorted(ts)}")
        d = ts.pop()
        for x in xs:
            if hasattr(x, "name"):
                continue
            if isinstance(x, bool):
                continue
            if isinstance(x, int):
                if d == "bool":
                    raise Unsupported("bool tensor with int scalar")
            elif isinstance(x, float):
                if d not in FLOATS:
                    d = "float64"
            else:
                raise Unsupported(f"constant {x!r}")
        return d

    body = nodes[:-1] if final is not None else nodes
    for n in body:
        op, out, xs = n.op, n.out.dtype, n.inputs
        if op not in LOWERABLE and op not in ROW_OP and op not in RANDOM:
            raise Unsupported(f"op {op}")
        if out not in DTYPES:
            raise Unsupported(f"dtype {out}")
        user[0] = shape if op in ROW_OP else tuple(n.out.shape)
        if row_dims and user[0] == row_flat and any(hasattr(x, "name") and x.name in ref and
                                                    tuple(x.shape) != row_flat for x in xs):
            raise Unsupported(f"{n.out.name}: mixes per-row values with and without kept dims")
        if op in ROW_OP:
            _check_reduction(n)
            i = arg(xs[0])
            if k.row_level()[i]:
                raise Unsupported(f"{op} of a value that is constant along the row")
            i = k.add(ROW_OP[op], (i,), out)
        elif op == "clone":
            i = arg(xs[0])
        elif op == "cast":
            i = k.add("cast", (arg(xs[0]),), out)
        elif op in FLOAT_MATH or op in SAME_FLOAT:
            if out not in FLOATS or dtype_of(xs[0]) != out:
                raise Unsupported(f"{op} on {dtype_of(xs[0])}")
            i = k.add(op, (arg(xs[0]),), out)
        elif op in SAME_NUM:
            if dtype_of(xs[0]) != out or out == "bool" or (out.startswith("uint") and op in ("neg", "abs")):
                raise Unsupported(f"{op} on {out}")
            i = k.add(op, (arg(xs[0]),), out)
        elif op in ARITH or op == "div":
            d = common(xs)
            if d != out or out == "bool" or (op == "div" and out not in FLOATS):
                raise Unsupported(f"{op} -> {out}")
            i = k.add(op, tuple(cast(arg(x, d), d) for x in xs), out)
        elif op == "pow":
            d = common(xs)
            if d != out or out not in FLOATS:
                raise Unsupported(f"pow -> {out}")
            base, e = xs
            if not hasattr(e, "name") and hasattr(base, "name") and e in (2, 2.0):
                i = k.add("square", (arg(base),), out)
            elif not hasattr(e, "name") and hasattr(base, "name") and e in (3, 3.0):
                b = arg(base)
                i = k.add("mul", (k.add("square", (b,), out), b), out)
            else:
                i = k.add("pow", (cast(arg(base, d), d), cast(arg(e, d), d)), out)
        elif op == "lerp":
            d = common(xs)
            if d != out or out not in FLOATS:
                raise Unsupported(f"lerp -> {out}")
            a, b, w = (cast(arg(x, d), d) for x in xs)
            i = k.add("add", (a, k.add("mul", (w, k.add("sub", (b, a), d)), d)), d)
        elif op in COMPARE:
            if out != "bool":
                raise Unsupported(f"{op} -> {out}")
            d = common(xs)
            i = k.add(op, tuple(cast(arg(x, d), d) for x in xs), "bool")
        elif op in LOGICAL:
            if out != "bool":
                raise Unsupported(f"{op} -> {out}")
            i = k.add(op, tuple(arg(x, "bool") for x in xs), "bool")
        elif op == "logical_not":
            i = k.add("logical_not", (arg(xs[0]),), "bool")
        elif op in BOOL_TEST:
            if out != "bool" or dtype_of(xs[0]) not in FLOATS:
                raise Unsupported(f"{op} on {dtype_of(xs[0])}")
            i = k.add(op, (arg(xs[0]),), "bool")
        elif op in BITWISE:
            d = common(xs)
            if d != out or d in FLOATS:
                raise Unsupported(f"{op} -> {out}")
            i = k.add(op, tuple(cast(arg(x, d), d) for x in xs), out)
        elif op == "bitwise_not":
            if dtype_of(xs[0]) != out or out in FLOATS:
                raise Unsupported(f"bitwise_not on {out}")
            i = k.add("logical_not" if out == "bool" else "bitwise_not", (arg(xs[0]),), out)
        elif op == "where":
            cond, a, b = xs
            if dtype_of(cond) != "bool":
                raise Unsupported("where with a non-bool condition")
            d = common([a, b]) if (hasattr(a, "name") or hasattr(b, "name")) else None
            if d != out:
                raise Unsupported(f"where -> {out}")
            i = k.add("where", (arg(cond), cast(arg(a, d), d), cast(arg(b, d), d)), out)
        elif op == "clamp":
            lo, hi = n.attrs.get("min"), n.attrs.get("max")
            if set(n.attrs) - {"min", "max"} or dtype_of(xs[0]) != out or out == "bool":
                raise Unsupported("clamp")
            d = common([xs[0]] + [b for b in (lo, hi) if b is not None])
            if d != out:
                raise Unsupported(f"clamp -> {out}")
            i = arg(xs[0])
            if lo is not None:
                i = k.add("maximum", (i, const(lo, d)), d)
            if hi is not None:
                i = k.add("minimum", (i, const(hi, d)), d)
        elif op in RANDOM:
            i = _lower_random(k, n)
        else:   # pragma: no cover - LOWERABLE and the branches above agree
            raise Unsupported(f"op {op}")
        if k.instrs[i].dtype != out:
            raise Unsupported(f"{op}: computed {k.instrs[i].dtype}, recorded {out}")
        row_value = op in ROW_OP or (row_dims > 0 and tuple(n.out.shape) in (row_shape, row_flat))
        if tuple(n.out.shape) != shape and not row_value:
            raise Unsupported(f"{n.out.name}: shape {n.out.shape} is neither the index space {shape} "
                              f"nor its row shape {row_shape}")
        if row_value and not k.row_level()[i]:
            raise Unsupported(f"{n.out.name}: a row-shaped value that varies along the row")
        ref[n.out.name] = i
        if n.out.name in needed:
            if math.prod(n.out.shape) != (rows if k.row_level()[i] and row_dims else math.prod(shape)):
                raise Unsupported(f"{n.out.name}: cannot store {n.out.shape}")
            k.store(i, n.out.name, out, n.out.shape)

    if final is not None:
        _check_reduction(final)
        user[0] = shape
        src = arg(final.inputs[0])
        k.outputs.append(Buffer(final.out.name, final.out.dtype, tuple(final.out.shape)))
        lead = len(_reduce_dims(final, len(shape)))
        axis = "all" if lead == len(shape) else "lead"
        k.reduction = Reduction(REDUCIBLE[final.op], src, axis, len(k.outputs) - 1, final.out.dtype,
                                lead if axis == "lead" else 0)
    if not k.outputs:
        raise Unsupported("nothing to store")
    return k
