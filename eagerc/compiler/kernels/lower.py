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
dtype is derived here and compared with the node's recorded dtype.

Each op's lowering is one rule below, registered by name with `@lowers(...)` and attached
to the op's declaration (`OPS[name].lowering`): elementwise math, comparisons, logic,
where, cast, clamp, clone (each rule names the dtypes it accepts); the float reductions
sum, mean, amax, amin over trailing dims (row reductions), over everything, or (sum, mean)
over leading dims; the random draws uniform and normal (float32/float64), drawing element
i at the node's per-call seed and offset (kernel params). Row composites (softmax,
layer_norm, cross-entropy, gelu and their backward ops) are lowered through their
decomposition (DECOMPOSED; backend c decomposes them before fusion). Every other op says
why it has no lowering (`why_not["lowering"]`, checked by tests/test_op_parts.py); a node
that does not lower raises Unsupported and runs as before. A lowered kernel finally has its
elementwise work moved inside selects with a uniform branch (selects.py: a masked softmax's
exp never sees the mask's -inf).
"""
import math

import numpy as np

from ...runtime.ops import OPS, load_all
from ...runtime.kernels.ir import DTYPES, FLOATS, Buffer, Kernel, Param, Reduction, broadcast_strides
from ..passes.util import attrs_key
from .selects import push_into_selects

__all__ = ["Unsupported", "lower_group", "walk_group", "lowers", "LOWERINGS", "LOWERABLE", "REDUCIBLE", "RANDOM", "DECOMPOSED",
           "index_space"]


class Unsupported(Exception):
    pass


# op name -> rule(g, node) -> the instruction computing the node in kernel `g.k`: each op's
# lowering, attached to the declaration as OPS[name].lowering (see the bottom of this file)
LOWERINGS = {}


def lowers(*names):
    def deco(rule):
        for n in names:
            LOWERINGS[n] = rule
        return rule
    return deco


REDUCIBLE = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min"}   # reduction -> Reduction kind
ROW_OP = {op: "row_" + kind for op, kind in REDUCIBLE.items()}           # ... and row instruction


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


@lowers("uniform", "normal")
def _random(g, n):
    """The instruction drawing random node `n` (no inputs) at each element of the index
    space: its seed and offset become kernel params, read by the driver per call."""
    k = g.k
    if n.out.dtype not in FLOATS:
        raise Unsupported(f"{n.op} of {n.out.dtype}")
    if tuple(n.out.shape) != tuple(k.shape):
        raise Unsupported(f"{n.op} of shape {n.out.shape} in index space {k.shape}")
    if set(n.attrs) - {"shape", "dtype", "seed", "offset"} or not {"seed", "offset"} <= set(n.attrs):
        raise Unsupported(f"{n.op} attributes {sorted(n.attrs)}")
    seed, offset = k.param(n.out.name, "seed"), k.param(n.out.name, "offset")
    return k.add("rand_" + n.op, (seed, offset, k.index()), n.out.dtype)


def _check_reduction(n):
    x = n.inputs[0]
    if not hasattr(x, "name") or x.dtype not in FLOATS or n.out.dtype != x.dtype:
        raise Unsupported(f"{n.op} of {getattr(x, 'dtype', x)}")
    if set(n.attrs) - {"dim", "keepdim"}:
        raise Unsupported(f"{n.op} attributes {sorted(n.attrs)}")
    if not _static(n.out.shape):
        raise Unsupported("symbolic shape")


class _Group:
    """What a lowering rule builds with: the kernel `k` and the node's operands as instructions."""

    def __init__(self, k, shape, row_shape, row_flat):
        self.k, self.shape, self.row_shape, self.row_flat = k, shape, row_shape, row_flat
        self.ref = {}          # member value name -> instruction index
        self.user = shape      # the output shape of the node being lowered

    def arg(self, x, dtype=None):
        """The instruction for node input `x`: a member, a load, or a constant of `dtype`."""
        k = self.k
        if hasattr(x, "name"):
            if x.dtype not in DTYPES:
                raise Unsupported(f"dtype {x.dtype}")
            if x.name in self.ref:
                xs = tuple(x.shape)
                if xs != self.user and not (self.user == self.shape and xs == self.row_shape):
                    raise Unsupported(f"{x.name} {xs} read at shape {self.user} (index space {self.shape})")
                return self.ref[x.name]
            if not _static(x.shape):
                raise Unsupported("symbolic shape")
            try:
                strides = broadcast_strides(x.shape, self.user)
                if k.row_dims and self.user == self.row_flat:      # per-row work without keepdim
                    strides += (0,) * k.row_dims
                return k.load(x.name, x.dtype, x.shape, strides)
            except ValueError as e:
                raise Unsupported(str(e))
        if dtype is None:
            raise Unsupported("constant without a dtype")
        return self.const(x, dtype)

    def const(self, value, dtype):
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
        return self.k.add("const", (value,), dtype)

    def cast(self, i, dtype):
        return i if self.k.instrs[i].dtype == dtype else self.k.add("cast", (i,), dtype)

    def args(self, xs, dtype):
        """Every operand as an instruction of `dtype`."""
        return tuple(self.cast(self.arg(x, dtype), dtype) for x in xs)

    def common(self, xs):
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


def _dtype(x):
    return x.dtype if hasattr(x, "name") else None


# ---------------------------------------------------------------- the lowering rules

@lowers("sum", "mean", "amax", "amin")
def _row_reduce(g, n):
    _check_reduction(n)
    i = g.arg(n.inputs[0])
    if g.k.row_level()[i]:
        raise Unsupported(f"{n.op} of a value that is constant along the row")
    return g.k.add(ROW_OP[n.op], (i,), n.out.dtype)


lowers("clone")(lambda g, n: g.arg(n.inputs[0]))
lowers("cast")(lambda g, n: g.k.add("cast", (g.arg(n.inputs[0]),), n.out.dtype))


def _unary(computes):
    """The rule of unary ops that are one instruction of their name, for the operand dtype `x`
    and result dtype `out` where `computes(op, x, out)` (numpy computes those the same way)."""
    def rule(g, n):
        x, out = _dtype(n.inputs[0]), n.out.dtype
        if not computes(n.op, x, out):
            raise Unsupported(f"{n.op} of {x} -> {out}")
        return g.k.add(n.op, (g.arg(n.inputs[0]),), out)
    return rule


lowers("exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "erf",
       "reciprocal", "floor", "ceil", "round", "trunc")(_unary(lambda op, x, out: out in FLOATS and x == out))
lowers("neg", "abs", "square", "relu", "sign")(_unary(
    lambda op, x, out: x == out != "bool" and not (out.startswith("uint") and op in ("neg", "abs"))))
lowers("isnan", "isinf", "isfinite")(_unary(lambda op, x, out: out == "bool" and x in FLOATS))
lowers("logical_not")(_unary(lambda op, x, out: out == "bool"))
_RESULTS = {"same": lambda out: out != "bool", "integral": lambda out: out not in FLOATS,
            "float": lambda out: out in FLOATS, "float_only": lambda out: out in FLOATS}


@lowers("add", "sub", "mul", "maximum", "minimum", "div", "logaddexp", "hypot", "atan2", "bitwise_and",
        "bitwise_or", "bitwise_xor")
def _binary(g, n):
    """One instruction of the op's name over operands of the result dtype, which must be one
    the op's promotion allows (no bool arithmetic, float division, integer bitwise ops)."""
    d, out = g.common(n.inputs), n.out.dtype
    if d != out or not _RESULTS[OPS[n.op].promotion](out):
        raise Unsupported(f"{n.op} -> {out}")
    return g.k.add(n.op, g.args(n.inputs, d), out)


@lowers("pow")
def _pow(g, n):
    d, out = g.common(n.inputs), n.out.dtype
    if d != out or out not in FLOATS:
        raise Unsupported(f"pow -> {out}")
    base, e = n.inputs
    k = g.k
    if not hasattr(e, "name") and hasattr(base, "name") and e in (2, 2.0):
        return k.add("square", (g.arg(base),), out)
    if not hasattr(e, "name") and hasattr(base, "name") and e in (3, 3.0):
        b = g.arg(base)
        return k.add("mul", (k.add("square", (b,), out), b), out)
    return k.add("pow", g.args(n.inputs, d), out)


@lowers("lerp")
def _lerp(g, n):
    d, out = g.common(n.inputs), n.out.dtype
    if d != out or out not in FLOATS:
        raise Unsupported(f"lerp -> {out}")
    a, b, w = g.args(n.inputs, d)
    k = g.k
    return k.add("add", (a, k.add("mul", (w, k.add("sub", (b, a), d)), d)), d)


@lowers("eq", "ne", "lt", "le", "gt", "ge")
def _compare(g, n):
    if n.out.dtype != "bool":
        raise Unsupported(f"{n.op} -> {n.out.dtype}")
    return g.k.add(n.op, g.args(n.inputs, g.common(n.inputs)), "bool")


@lowers("logical_and", "logical_or", "logical_xor")
def _logical(g, n):
    if n.out.dtype != "bool":
        raise Unsupported(f"{n.op} -> {n.out.dtype}")
    return g.k.add(n.op, tuple(g.arg(x, "bool") for x in n.inputs), "bool")


@lowers("bitwise_not")
def _bitwise_not(g, n):
    out = n.out.dtype
    if _dtype(n.inputs[0]) != out or out in FLOATS:
        raise Unsupported(f"bitwise_not on {out}")
    return g.k.add("logical_not" if out == "bool" else "bitwise_not", (g.arg(n.inputs[0]),), out)


@lowers("where")
def _where(g, n):
    cond, a, b = n.inputs
    if _dtype(cond) != "bool":
        raise Unsupported("where with a non-bool condition")
    d = g.common([a, b]) if (hasattr(a, "name") or hasattr(b, "name")) else None
    if d != n.out.dtype:
        raise Unsupported(f"where -> {n.out.dtype}")
    return g.k.add("where", (g.arg(cond), g.cast(g.arg(a, d), d), g.cast(g.arg(b, d), d)), d)


@lowers("clamp")
def _clamp(g, n):
    x, out = n.inputs[0], n.out.dtype
    lo, hi = n.attrs.get("min"), n.attrs.get("max")
    if set(n.attrs) - {"min", "max"} or _dtype(x) != out or out == "bool":
        raise Unsupported("clamp")
    d = g.common([x] + [b for b in (lo, hi) if b is not None])
    if d != out:
        raise Unsupported(f"clamp -> {out}")
    i = g.arg(x)
    if lo is not None:
        i = g.k.add("maximum", (i, g.const(lo, d)), d)
    if hi is not None:
        i = g.k.add("minimum", (i, g.const(hi, d)), d)
    return i


def lower_group(nodes, needed, name="k0", walk=None):
    """The Kernel computing `nodes` (a fusion group, in graph order). `needed`: names of the
    members' values read outside the group (stored). `walk`: `walk_group(group)` of a group that
    `nodes` begins, when the caller tries its prefixes (plan_kernels): one walk serves them all.

    Memoised by the group's structure (`signature`: ops, attributes, shapes, dtypes, constants
    and who reads whom, without the values' names): the 32 identical layers of a transformer
    lower each of their groups once, and the others get a copy of that Kernel with their own
    value names (`stats["lowered"]` / `stats["shared"]` count them). A refusal is remembered
    too (`stats["refused"]`: plan_kernels tries each layer's groups and their prefixes, and the
    same structure is refused for the same reason), raised again with the first group's reason."""
    sig, names = signature(nodes, needed, walk)
    hit = _memo.get(sig)
    if hit is not None:
        template, template_names = hit
        if template is None:
            stats["refused"] += 1
            raise Unsupported(template_names)
        stats["shared"] += 1
        return _renamed(template, dict(zip(template_names, names)), name)
    if len(_memo) >= _MEMO_MAX:
        _memo.clear()
    try:
        k = _lower(nodes, needed, name)
    except Unsupported as e:
        _memo[sig] = (None, str(e))
        raise
    stats["lowered"] += 1
    _memo[sig] = (_renamed(k, {}, name), names)     # a private copy: callers may set k.inplace
    return k


stats = {"lowered": 0, "shared": 0, "refused": 0}   # groups lowered / from the memo / refused from it
_memo = {}          # signature -> (Kernel, the value names it was lowered with) or (None, why not)
_MEMO_MAX = 1 << 14


def signature(nodes, needed, walk=None):
    """(key, names): what lowering `nodes` depends on, with every graph value replaced by its
    place -- a member by its position, a value read from outside by its order of first read
    (with its shape and dtype) -- and the value names in that order (outside values, then
    members), to rename a Kernel lowered from another group with the same key. A random
    node's seed and offset are left out: the kernel reads them per call (params by node name).
    `walk`: `walk_group` of a group `nodes` begins, else walked here."""
    parts, outside, reads = walk if walk is not None else walk_group(nodes)
    key = tuple([part + (n.out.name in needed,) for part, n in zip(parts, nodes)])
    return key, outside[:reads[len(nodes) - 1]] + [n.out.name for n in nodes]


def walk_group(nodes):
    """(parts, outside, reads): each node's part of `signature` but whether it is needed, the
    values read from outside in order of first read, and how many of them nodes[:i + 1] read --
    the same for every prefix of `nodes`, so one walk gives every prefix's signature."""
    place, outside, parts, reads = {}, [], [], []
    for i, n in enumerate(nodes):
        ins = []
        for x in n.inputs:
            if hasattr(x, "name"):
                p = place.get(x.name)
                if p is None:
                    p = place[x.name] = ("x", len(outside))
                    outside.append(x.name)
                    ins.append((p, tuple(x.shape), x.dtype))
                else:
                    ins.append(p)
            else:
                ins.append((type(x).__name__, repr(x)))
        attrs = n.attrs
        if n.op in RANDOM:
            attrs = {a: v for a, v in attrs.items() if a not in ("seed", "offset")}
        parts.append((n.op, tuple(ins), attrs_key(attrs), tuple(n.out.shape), n.out.dtype))
        reads.append(len(outside))
        place[n.out.name] = ("m", i)
    return parts, outside, reads


def _renamed(k, names, name):
    """A copy of Kernel `k` named `name`, its graph value and node names mapped by `names`."""
    rn = names.get     # (the constructors directly: dataclasses.replace costs ~4x as much)
    return Kernel(name, k.shape, [Buffer(rn(b.name, b.name), b.dtype, b.shape, b.strides) for b in k.inputs],
                  [Buffer(rn(b.name, b.name), b.dtype, b.shape, b.strides) for b in k.outputs], list(k.instrs),
                  list(k.stores), k.reduction, [rn(m, m) for m in k.nodes], k.row_dims, dict(k.inplace),
                  [Param(rn(p.node, p.node), p.attr, p.dtype) for p in k.params])


def _lower(nodes, needed, name):
    shape = index_space(nodes)
    if not _static(shape):
        raise Unsupported("symbolic shape")
    row_dims, final = _row_dims(nodes, shape)
    row_shape = shape[:len(shape) - row_dims] + (1,) * row_dims     # a per-row value, keepdim
    row_flat = shape[:len(shape) - row_dims]                          # ... and without
    k = Kernel(name, shape, nodes=[n.out.name for n in nodes], row_dims=row_dims)
    rows = k.rows_cols()[0]
    g = _Group(k, shape, row_shape, row_flat)
    ref = g.ref

    body = nodes[:-1] if final is not None else nodes
    for n in body:
        op, out, xs = n.op, n.out.dtype, n.inputs
        rule = LOWERINGS.get(op)
        if rule is None:
            raise Unsupported(f"op {op}")
        if out not in DTYPES:
            raise Unsupported(f"dtype {out}")
        g.user = shape if op in ROW_OP else tuple(n.out.shape)
        if row_dims and g.user == row_flat and any(hasattr(x, "name") and x.name in ref and
                                                   tuple(x.shape) != row_flat for x in xs):
            raise Unsupported(f"{n.out.name}: mixes per-row values with and without kept dims")
        i = rule(g, n)
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
        g.user = shape
        src = g.arg(final.inputs[0])
        k.outputs.append(Buffer(final.out.name, final.out.dtype, tuple(final.out.shape)))
        lead = len(_reduce_dims(final, len(shape)))
        axis = "all" if lead == len(shape) else "lead"
        k.reduction = Reduction(REDUCIBLE[final.op], src, axis, len(k.outputs) - 1, final.out.dtype,
                                lead if axis == "lead" else 0)
    if not k.outputs:
        raise Unsupported("nothing to store")
    return push_into_selects(k)


# ---------------------------------------------------------------- attached to the declarations

# composites lowered through their decomposition (the frontend's part): backend c decomposes them
# before fusion, so each becomes one row kernel together with the elementwise work around it
DECOMPOSED = "decomposed into a row kernel"
LOWERINGS.update(dict.fromkeys(("softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "layer_norm",
                                "layer_norm_backward", "layer_norm_weight_backward", "gelu", "gelu_backward",
                                "cross_entropy", "cross_entropy_backward", "rms_norm", "rms_norm_backward",
                                "rms_norm_weight_backward"), DECOMPOSED))

LOWERABLE = frozenset(n for n, rule in LOWERINGS.items() if rule not in (_row_reduce, _random, DECOMPOSED))
RANDOM = {n: "rand_" + n for n, rule in LOWERINGS.items() if rule is _random}    # graph op -> instruction

# why the others have no lowering: op by op, else by kind
_NOT_LOWERED = {
    **dict.fromkeys(("floor_divide", "remainder"), "an integer divisor of 0 must raise, and a kernel cannot"),
    **dict.fromkeys(("prod", "all", "any"), "kernels reduce floats with sum, mean, max and min only"),
    "nan_to_num": "not lowered: numpy's nan_to_num",
    "erfinv": "C's math library has no erfinv: scipy's (or eagerc's own) numpy kernel", "linear": "stays a library call (BLAS through numpy)",
    "embedding": "a gather by index: a numpy kernel", "embedding_backward": "a scatter-add by index: a numpy kernel",
    **dict.fromkeys(("argsort", "argtopk", "argmode", "searchsorted", "histc", "multinomial"),
                    "sorts, searches and sampling stay numpy kernels")}
_NOT_BY_KIND = {
    **dict.fromkeys(("reshape", "view", "copy", "shape"), "data movement: numpy's views and copies compute nothing"),
    **dict.fromkeys(("linalg", "conv"), "stays a library call (BLAS through numpy)"),
    "indexing": "gathers and scatters by index stay numpy kernels", "scan": "kernels have no scans",
    "creation": "made by numpy once (kernels draw uniform and normal floats only)",
    "index_reduction": "kernels reduce to values, not indices", "window": "window loops stay numpy kernels",
    "composite": "stays one numpy kernel: its decomposition is not a row kernel"}


def _attach():
    load_all()
    for name, op in OPS.items():
        if name in LOWERINGS:
            op.lowering = LOWERINGS[name]
        else:
            op.why_not["lowering"] = _NOT_LOWERED.get(name) or _NOT_BY_KIND.get(op.kind)


_attach()
