"""eagerc graph -> ONNX graph, one node at a time.

`Builder` walks the program's graph in order; each node's op has a converter in
`CONVERTERS` (`fn(b, node, inputs) -> ONNX value name`) that emits ONNX nodes through the
builder's small API:

    b.op("MatMul", [a, w])               one ONNX node, returns its output name
    b.val(x, "float32")                  the ONNX name of an input (a Value or a Python
                                         constant), cast to a dtype when asked
    b.const(array) / b.ints([..])        an initializer
    b.int_vector(attr, values)           an int64 vector from an integer attribute whose
                                         entries may depend on dynamic sizes (then computed
                                         from the inputs' shapes at run time)

Dtypes follow the node's declared output dtype (eagerc promotes like PyTorch; ONNX does
not promote at all), so converters cast their inputs to it where ONNX needs one type.
Nothing here imports `onnx` at module level: the onnx module is handed to the Builder.
"""
import math

import numpy as np

from ..runtime.ops import OPS, load_all, no_part

__all__ = ["Builder", "CONVERTERS", "OnnxExportError", "UnsupportedOpError", "supported_ops"]

INT64_MAX = 2 ** 63 - 1
INT64_MIN = -2 ** 63


class OnnxExportError(RuntimeError):
    """The model cannot be exported to ONNX (the message says why)."""


class UnsupportedOpError(OnnxExportError, NotImplementedError):
    """A graph node applies an op (or an op with attributes) that has no ONNX conversion."""

    def __init__(self, msg, op=None, node=None):
        super().__init__(msg)
        self.op = op
        self.node = node


def supported_ops():
    """The eagerc ops eagerc.onnx.export converts (some only for some attribute values)."""
    return sorted(CONVERTERS)


def _where(n):
    parts = [f"node {n.out.name}"]
    if n.loc:
        parts.append(f"at {n.loc}")
    if n.module:
        parts.append(f"in module {n.module}")
    return " ".join(parts)


def unsupported(n, why=None):
    if why is None:
        op = OPS.get(n.op)
        reason = op.why_not.get("onnx") if op is not None else None
        msg = (f"eagerc.onnx.export: op {n.op!r} ({_where(n)}) has no ONNX conversion"
               f"{': ' + reason if reason else ''} "
               f"(eagerc.onnx.supported_ops() lists the {len(supported_ops())} ops that have one)")
    else:
        msg = f"eagerc.onnx.export: op {n.op!r} ({_where(n)}) cannot be exported to ONNX: {why}"
    return UnsupportedOpError(msg, n.op, n)


def _is_value(x):
    return hasattr(x, "name") and hasattr(x, "shape") and hasattr(x, "dtype")


class _DynConst:
    """A scalar constant input whose value depends on dynamic sizes (an int64 ONNX scalar)."""
    __slots__ = ("name", "shape", "dtype", "onnx")

    def __init__(self, onnx_name):
        self.name = f"<dynamic {onnx_name}>"
        self.shape = ()
        self.dtype = "int64"
        self.onnx = onnx_name


# ================================================================ the builder

class Builder:
    def __init__(self, onnx, graph, opset, weights, specs, input_names, dims, patches):
        self.onnx = onnx
        self.helper = onnx.helper
        self.graph = graph
        self.opset = opset
        self.weights = weights
        self.specs = specs
        self.input_names = input_names
        self.dims = dims or {}
        self.nodes = []
        self.initializers = []
        self.names = {}            # eagerc value name -> ONNX name
        self.used = set()
        self._consts = {}
        self._casts = {}
        self._dim_cache = {}
        self.node = None           # the eagerc node being converted
        self.index = None
        self._handled = set()
        # patches: (path, SizeExpr) pairs; node index -> {path below the node (tuple): SizeExpr}
        self.node_patches = {}
        self.value_dims = {}       # ("inputs", i) / ("nodes", i) -> {axis: SizeExpr}
        for path, expr in patches:
            if path[0] == "nodes":
                self.node_patches.setdefault(path[1], {})[path[2:]] = expr
                if path[2:4] == ("out", "shape"):
                    self.value_dims.setdefault(("nodes", path[1]), {})[path[4]] = expr
            elif path[0] == "inputs" and path[2] == "shape":
                self.value_dims.setdefault(("inputs", path[1]), {})[path[3]] = expr
        # where each dynamic dimension can be read at run time: (ONNX input name, axis)
        self._where_value = {}
        self.dim_source = {}
        for name, spec in zip(input_names, specs):
            for ax, s in enumerate(spec["shape"]):
                if isinstance(s, str):
                    self.dim_source.setdefault(s, (name, ax))

    # ------------------------------------------------------------ names and nodes
    def fresh(self, base):
        base = base or "v"
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name

    def op(self, op_type, inputs, outputs=1, **attrs):
        """Emit one ONNX node; returns its output name (or a list of names for outputs > 1)."""
        base = self.node.out.name if self.node is not None else "aux"
        outs = [self.fresh(f"{base}_{op_type.lower()}") for _ in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        doc = None
        if self.node is not None:
            doc = f"eagerc {self.node.op}" + (f" at {self.node.loc}" if self.node.loc else "") + \
                (f" ({self.node.module})" if self.node.module else "")
        self.nodes.append(self.helper.make_node(op_type, list(inputs), outs, name=self.fresh(f"{base}/{op_type}"),
                                                doc_string=doc, **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, value, dtype=None, name=None):
        """An initializer holding `value` (deduplicated); returns its name."""
        a = np.asarray(value, dtype=dtype)
        if a.dtype == np.float64 and dtype is None and not isinstance(value, np.ndarray):
            a = a.astype(np.float32)
        key = (a.dtype.str, a.shape, a.tobytes()) if a.size <= 64 else None
        if key is not None and key in self._consts:
            return self._consts[key]
        name = self.fresh(name or "const")
        self.initializers.append(self.onnx.numpy_helper.from_array(np.array(a, order="C"), name))
        if key is not None:
            self._consts[key] = name
        return name

    def ints(self, values):
        return self.const(np.asarray(list(values), dtype=np.int64))

    def dtype_of(self, x):
        if _is_value(x):
            return x.dtype
        if isinstance(x, bool):
            return "bool"
        if isinstance(x, int):
            return "int64"
        return "float32"

    def val(self, x, dtype=None):
        """ONNX name for input x (a Value, a _DynConst or a Python scalar), as `dtype` if given."""
        if isinstance(x, _DynConst):
            return self.cast(x.onnx, "int64", dtype) if dtype else x.onnx
        if _is_value(x):
            name = self.names[x.name]
            return self.cast(name, x.dtype, dtype) if dtype else name
        if x is None:
            raise OnnxExportError("eagerc.onnx.export: internal error: a None input reached val()")
        if dtype is None:
            dtype = self.dtype_of(x)
        return self.const(np.asarray(x, dtype=np.dtype(dtype)))

    def cast(self, name, src, dst):
        if dst is None or src == dst:
            return name
        key = (name, dst)
        if key not in self._casts:
            self._casts[key] = self.op("Cast", [name], to=self.tensor_type(dst))
        return self._casts[key]

    def tensor_type(self, dtype):
        return self.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    # ------------------------------------------------------------ dynamic sizes
    def patch(self, *path):
        """The SizeExpr of the current node's entry at `path` if it depends on dynamic sizes."""
        p = self.node_patches.get(self.index)
        return None if p is None else p.get(tuple(path))

    def size(self, x, axis):
        """The static size of axis `axis` of input value x; an error if it is a dynamic size."""
        if self.value_dims.get(self._where_value.get(x.name), {}).get(axis % max(len(x.shape), 1)) is not None:
            raise unsupported(self.node, f"it needs the size of dimension {axis} of {self.names.get(x.name, x.name)}, which is dynamic; "
                                         "make that dimension static")
        return x.shape[axis]

    def handled(self, attr):
        self._handled.add(attr)

    def static_attr(self, attr):
        """The attribute must not depend on dynamic sizes."""
        p = self.node_patches.get(self.index, {})
        if any(k[0] == "attrs" and k[1] == attr for k in p):
            raise unsupported(self.node, f"its attribute {attr!r} depends on a dynamic size; make that "
                                         "dimension static")

    def dim_expr(self, expr):
        """An int64 [1] tensor: the SizeExpr's value, each term read from the inputs' shapes."""
        if expr in self._dim_cache:
            return self._dim_cache[expr]
        save, self.node = self.node, None
        try:
            total = None
            for coef, syms in expr.terms:
                term = None
                for s in syms:
                    if s not in self.dim_source:
                        raise OnnxExportError(f"eagerc.onnx.export: dynamic dimension {s!r} is no input's size")
                    inp, ax = self.dim_source[s]
                    d = self.op("Shape", [inp], start=ax, end=ax + 1)
                    term = d if term is None else self.op("Mul", [term, d])
                if term is None:
                    term = self.ints([coef])
                elif coef != 1:
                    term = self.op("Mul", [term, self.ints([coef])])
                total = term if total is None else self.op("Add", [total, term])
        finally:
            self.node = save
        self._dim_cache[expr] = total
        return total

    def int_vector(self, attr, values, sub=()):
        """An int64 vector of attribute `attr` (entries at path attrs/attr/*sub/j), with entries
        that depend on dynamic sizes computed at run time."""
        self.handled(attr)
        values = list(values)
        pieces, static = [], []
        for j, v in enumerate(values):
            p = self.patch("attrs", attr, *sub, j)
            if p is None:
                static.append(v)
                continue
            if static:
                pieces.append(self.ints(static))
                static = []
            pieces.append(self.dim_expr(p))
        if not pieces:
            return self.ints(values)
        if static:
            pieces.append(self.ints(static))
        return pieces[0] if len(pieces) == 1 else self.op("Concat", pieces, axis=0)

    def int_scalar(self, attr, value, sub=()):
        """The ONNX name of an int64 [1] tensor holding integer attribute `attr` (computed at run
        time when it depends on dynamic sizes)."""
        self.handled(attr)
        p = self.patch("attrs", attr, *sub)
        return self.ints([value]) if p is None else self.dim_expr(p)

    # ------------------------------------------------------------ building
    def _value_info(self, name, value, dims_of, axis_names=None):
        shape = []
        for ax, n in enumerate(value.shape):
            if axis_names and ax in axis_names:
                shape.append(axis_names[ax])
            elif dims_of and ax in dims_of:
                shape.append(str(dims_of[ax]))
            elif isinstance(n, str):
                shape.append(n)
            else:
                shape.append(int(n))
        return self.helper.make_tensor_value_info(name, self.tensor_type(value.dtype), shape)

    def build(self, output_names, output_axes=None):
        g = self.graph
        helper = self.helper
        if g.mutations:
            targets = ", ".join(t for t, _ in g.mutations)
            raise OnnxExportError(f"eagerc.onnx.export: the program updates {targets} in place (a module in "
                                  "training mode?); ONNX graphs have no state: export in eval mode")
        self.used.update(self.input_names)
        self.used.update(output_names)
        producers = {n.out.name: i for i, n in enumerate(g.nodes)}
        self._where_value = {v.name: ("inputs", i) for i, (_, v) in enumerate(g.inputs)}
        self._where_value.update({name: ("nodes", i) for name, i in producers.items()})
        inputs = []
        arg_i = 0
        for idx, (kind, v) in enumerate(g.inputs):
            if kind == "arg":
                name = self.input_names[arg_i]
                arg_i += 1
                self.names[v.name] = name
                inputs.append(self._value_info(name, v, self.value_dims.get(("inputs", idx))))
            else:
                self.used.add(v.name)
                self.names[v.name] = v.name
                w = self.weights.get(v.name)
                if w is None:
                    raise OnnxExportError(f"eagerc.onnx.export: no weight for external input {v.name!r}")
                self.initializers.append(self.onnx.numpy_helper.from_array(np.array(w, order="C", copy=None),
                                                                           v.name))
        for i, n in enumerate(g.nodes):
            self.node, self.index = n, i
            self._handled = set()
            conv = CONVERTERS.get(n.op)
            if conv is None:
                raise unsupported(n)
            ins = list(n.inputs)
            for j, x in enumerate(ins):  # constants computed from dynamic sizes
                if not _is_value(x):
                    p = self.patch("inputs", j, "const")
                    if p is not None:
                        ins[j] = _DynConst(self.op("Squeeze", [self.dim_expr(p)]))
            out = conv(self, n, ins)
            for key in self.node_patches.get(i, {}):
                if key[0] == "attrs" and key[1] not in self._handled:
                    self.static_attr(key[1])
            self.names[n.out.name] = out
        self.node, self.index = None, None
        outputs = []
        for j, (v, name) in enumerate(zip(g.outputs, output_names)):
            self.nodes.append(helper.make_node("Identity", [self.names[v.name]], [name], name=self.fresh(f"{name}/Identity")))
            where = ("nodes", producers[v.name]) if v.name in producers else \
                ("inputs", next(i for i, (_, u) in enumerate(g.inputs) if u.name == v.name))
            outputs.append(self._value_info(name, v, self.value_dims.get(where), (output_axes or {}).get(j)))
        return helper.make_graph(self.nodes, "eagerc_graph", inputs, outputs, self.initializers)


# ================================================================ converters

CONVERTERS = {}


def converts(*names):
    def deco(fn):
        for n in names:
            CONVERTERS[n] = fn
        return fn
    return deco


def _promote(ins):
    """PyTorch-style result dtype of the inputs (tensors, then Python scalars)."""
    from ..runtime import dtypes
    dims = [dtypes.as_dtype(x.dtype) for x in ins if _is_value(x) and len(x.shape)]
    zero = [dtypes.as_dtype(x.dtype) for x in ins if _is_value(x) and not len(x.shape)]
    scal = [x for x in ins if not _is_value(x) and x is not None]
    return dtypes.result_type(dims, zero, scal).name


_FLOATS = ("float16", "float32", "float64")


# ---------------------------------------------------------------- elementwise

_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
           "maximum": "Max", "minimum": "Min"}


@converts(*_BINARY)
def _binary(b, n, ins):
    dt = n.out.dtype
    if dt == "bool":
        if n.op in ("add", "maximum"):
            return b.op("Or", [b.val(ins[0], "bool"), b.val(ins[1], "bool")])
        if n.op in ("mul", "minimum"):
            return b.op("And", [b.val(ins[0], "bool"), b.val(ins[1], "bool")])
        raise unsupported(n, "on bool tensors")
    if n.op == "pow" and not _is_value(ins[1]) and dt in _FLOATS:
        e = ins[1]
        x = b.val(ins[0], dt)
        if e == 2:
            return b.op("Mul", [x, x])
        if e == 0.5:
            return b.op("Sqrt", [x])
    return b.op(_BINARY[n.op], [b.val(ins[0], dt), b.val(ins[1], dt)])


@converts("floor_divide", "remainder")
def _floor_divide_remainder(b, n, ins):
    """floor(a / b) and a - b * floor(a / b): Python's sign convention (integers: Mod with fmod=0)."""
    dt = n.out.dtype
    a, c = b.val(ins[0], dt), b.val(ins[1], dt)
    if dt not in _FLOATS:
        mod = b.op("Mod", [a, c], fmod=0)
        return b.op("Div", [b.op("Sub", [a, mod]), c]) if n.op == "floor_divide" else mod
    quotient = b.op("Floor", [b.op("Div", [a, c])])
    return quotient if n.op == "floor_divide" else b.op("Sub", [a, b.op("Mul", [c, quotient])])


@converts("logaddexp", "hypot")
def _float_binary(b, n, ins):
    dt = n.out.dtype
    a, c = b.val(ins[0], dt), b.val(ins[1], dt)
    if n.op == "hypot":
        return b.op("Sqrt", [b.op("Add", [b.op("Mul", [a, a]), b.op("Mul", [c, c])])])
    # max(a, b) + log(1 + exp(-|a - b|)): no overflow
    d = b.op("Neg", [b.op("Abs", [b.op("Sub", [a, c])])])
    return b.op("Add", [b.op("Max", [a, c]), b.op("Log", [b.op("Add", [b.op("Exp", [d]), b.val(1.0, dt)])])])


_UNARY = {"exp": "Exp", "log": "Log", "sqrt": "Sqrt", "sin": "Sin", "cos": "Cos", "tan": "Tan",
          "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf", "reciprocal": "Reciprocal",
          "neg": "Neg", "abs": "Abs", "sign": "Sign", "relu": "Relu", "floor": "Floor", "ceil": "Ceil",
          "round": "Round"}


@converts(*_UNARY)
def _unary(b, n, ins):
    dt = n.out.dtype
    if n.op in ("floor", "ceil", "round") and dt not in _FLOATS:
        return b.op("Identity", [b.val(ins[0], dt)])
    return b.op(_UNARY[n.op], [b.val(ins[0], dt)])


_UNARY_COMPOSITE = {   # op -> fn(builder, x, dtype): the op written with ONNX ops
    "rsqrt": lambda b, x, dt: b.op("Reciprocal", [b.op("Sqrt", [x])]),
    "exp2": lambda b, x, dt: b.op("Pow", [b.val(2.0, dt), x]),
    "log2": lambda b, x, dt: b.op("Div", [b.op("Log", [x]), b.val(math.log(2.0), dt)]),
    "log1p": lambda b, x, dt: b.op("Log", [b.op("Add", [x, b.val(1.0, dt)])]),
    "expm1": lambda b, x, dt: b.op("Sub", [b.op("Exp", [x]), b.val(1.0, dt)]),
    "square": lambda b, x, dt: b.op("Mul", [x, x]),
    "trunc": lambda b, x, dt: b.op("Where", [b.op("Less", [x, b.val(0.0, dt)]), b.op("Ceil", [x]), b.op("Floor", [x])]),
}


@converts(*_UNARY_COMPOSITE)
def _unary_composite(b, n, ins):
    dt = n.out.dtype
    x = b.val(ins[0], dt)
    if n.op == "trunc" and dt not in _FLOATS:  # integers are whole already
        return b.op("Identity", [x])
    return _UNARY_COMPOSITE[n.op](b, x, dt)


@converts("isnan", "isinf", "isfinite", "logical_not")
def _bool_unary(b, n, ins):
    x = ins[0]
    if n.op == "logical_not":
        return b.op("Not", [b.val(x, "bool")])
    if x.dtype not in _FLOATS:  # integers are finite
        return b.op("Expand", [b.val(n.op == "isfinite", "bool"), b.op("Shape", [b.val(x)])])
    xv = b.val(x)
    if n.op == "isnan":
        return b.op("IsNaN", [xv])
    if n.op == "isinf":
        return b.op("IsInf", [xv])
    return b.op("Not", [b.op("Or", [b.op("IsNaN", [xv]), b.op("IsInf", [xv])])])


_COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual"}


@converts("eq", "ne", "lt", "le", "gt", "ge")
def _compare(b, n, ins):
    dt = _promote(ins)
    a, c = b.val(ins[0], dt), b.val(ins[1], dt)
    if dt == "bool" and n.op not in ("eq", "ne"):
        a, c = b.cast(a, "bool", "int32"), b.cast(c, "bool", "int32")
    if n.op == "ne":
        return b.op("Not", [b.op("Equal", [a, c])])
    return b.op(_COMPARE[n.op], [a, c])


@converts("logical_and", "logical_or", "logical_xor")
def _logical(b, n, ins):
    onnx_op = {"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}[n.op]
    return b.op(onnx_op, [_truthy(b, ins[0]), _truthy(b, ins[1])])


def _truthy(b, x):
    dt = b.dtype_of(x)
    if dt == "bool":
        return b.val(x)
    return b.op("Not", [b.op("Equal", [b.val(x), b.val(0, dt)])])


@converts("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not")
def _bitwise(b, n, ins):
    """BitwiseAnd / Or / Xor / Not; on bool tensors the logical And / Or / Xor / Not."""
    dt = n.out.dtype
    kind = n.op.split("_")[1].capitalize()
    return b.op(kind if dt == "bool" else "Bitwise" + kind, [b.val(x, dt) for x in ins])


@converts("where")
def _where_op(b, n, ins):
    dt = n.out.dtype
    return b.op("Where", [b.val(ins[0], "bool"), b.val(ins[1], dt), b.val(ins[2], dt)])


@converts("clamp")
def _clamp(b, n, ins):
    dt = n.out.dtype
    lo, hi = n.attrs.get("min"), n.attrs.get("max")
    x = b.val(ins[0], dt)
    return b.op("Clip", [x, "" if lo is None else b.val(lo, dt), "" if hi is None else b.val(hi, dt)])


@converts("lerp")
def _lerp(b, n, ins):
    dt = n.out.dtype
    a, c, w = (b.val(x, dt) for x in ins)
    return b.op("Add", [a, b.op("Mul", [w, b.op("Sub", [c, a])])])


@converts("cast")
def _cast(b, n, ins):
    x = ins[0]
    src = b.dtype_of(x)
    dst = n.out.dtype
    if src == dst:
        return b.op("Identity", [b.val(x)])
    if dst == "bool":  # nonzero is True (ONNX Cast agrees; spelled out for clarity)
        return _truthy(b, x)
    return b.op("Cast", [b.val(x)], to=b.tensor_type(dst))


@converts("clone", "contiguous")
def _identity(b, n, ins):
    return b.op("Identity", [b.val(ins[0])])


@converts("nan_to_num")
def _nan_to_num(b, n, ins):
    dt = n.out.dtype
    x = b.val(ins[0], dt)
    if dt not in _FLOATS:
        return b.op("Identity", [x])
    info = np.finfo(np.dtype(dt))
    nan, pos, neg = n.attrs.get("nan", 0.0), n.attrs.get("posinf"), n.attrs.get("neginf")
    pos = info.max if pos is None else pos
    neg = info.min if neg is None else neg
    x = b.op("Where", [b.op("IsNaN", [x]), b.val(nan if nan is not None else 0.0, dt), x])
    x = b.op("Where", [b.op("IsInf", [x], detect_negative=0), b.val(pos, dt), x])
    return b.op("Where", [b.op("IsInf", [x], detect_positive=0), b.val(neg, dt), x])


# ---------------------------------------------------------------- reductions

def _axes(n, ndim):
    dim = n.attrs.get("dim")
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return None
    return sorted({d % ndim if ndim else 0 for d in dims})


def _reduce(b, onnx_op, x, axes, keepdims):
    """Reduce*(x) over axes (None: all): axes as an input from opset 18 (13 for ReduceSum)."""
    if axes is None:
        return b.op(onnx_op, [x], keepdims=int(keepdims))
    if onnx_op == "ReduceSum" or b.opset >= 18:
        return b.op(onnx_op, [x, b.ints(axes)], keepdims=int(keepdims))
    return b.op(onnx_op, [x], axes=list(axes), keepdims=int(keepdims))


_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "prod": "ReduceProd", "amax": "ReduceMax",
           "amin": "ReduceMin", "all": "ReduceMin", "any": "ReduceMax"}


@converts(*_REDUCE)
def _reduction(b, n, ins):
    x = ins[0]
    nd = len(x.shape)
    keep = bool(n.attrs.get("keepdim", False))
    dt = n.out.dtype
    if n.op in ("all", "any"):
        v = b.cast(_truthy(b, x), "bool", "int32")
        if nd == 0:
            return b.op("Identity", [b.val(x, "bool")])
        return b.cast(_reduce(b, _REDUCE[n.op], v, _axes(n, nd), keep), "int32", "bool")
    if n.op in ("amax", "amin") and x.dtype == "bool":
        v = b.val(x, "int32")
        return b.cast(_reduce(b, _REDUCE[n.op], v, _axes(n, nd), keep), "int32", "bool")
    v = b.val(x, dt)
    if nd == 0:
        return b.op("Identity", [v])
    return _reduce(b, _REDUCE[n.op], v, _axes(n, nd), keep)


@converts("argmax", "argmin")
def _argreduce(b, n, ins):
    x = ins[0]
    onnx_op = "ArgMax" if n.op == "argmax" else "ArgMin"
    keep = bool(n.attrs.get("keepdim", False))
    dim = n.attrs.get("dim")
    v = b.val(x, "int32" if x.dtype == "bool" else None)
    nd = len(x.shape)
    if dim is None or nd == 0:
        flat = b.op("Reshape", [v, b.ints([-1])])
        r = b.op(onnx_op, [flat], axis=0, keepdims=0, select_last_index=0)
        if keep and nd:
            r = b.op("Reshape", [r, b.ints([1] * nd)])
        return r
    return b.op(onnx_op, [v], axis=dim % nd, keepdims=int(keep), select_last_index=0)


@converts("cumsum")
def _cumsum(b, n, ins):
    x = ins[0]
    nd = len(x.shape)
    v = b.val(x, n.out.dtype)
    if nd == 0:
        return b.op("Identity", [v])
    return b.op("CumSum", [v, b.const(np.int64(n.attrs["dim"] % nd))])


# ---------------------------------------------------------------- shapes

@converts("reshape")
def _reshape(b, n, ins):
    shape = list(n.attrs["shape"])
    allowzero = 1 if 0 in shape else None
    return b.op("Reshape", [b.val(ins[0]), b.int_vector("shape", shape)], allowzero=allowzero)


@converts("expand")
def _expand(b, n, ins):
    shape = [1 if s == -1 else s for s in n.attrs["shape"]]  # 1 broadcasts: keeps that size
    return b.op("Expand", [b.val(ins[0]), b.int_vector("shape", shape)])


@converts("permute")
def _permute(b, n, ins):
    nd = len(ins[0].shape)
    return b.op("Transpose", [b.val(ins[0])], perm=[d % nd for d in n.attrs["dims"]] if nd else [])


@converts("squeeze")
def _squeeze(b, n, ins):
    x = ins[0]
    shape = list(x.shape)
    nd = len(shape)
    dim = n.attrs.get("dim")
    if dim is None:
        axes = [i for i, s in enumerate(shape) if s == 1]
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        axes = sorted({d % nd for d in dims if nd and shape[d % nd] == 1})
    if not axes:
        return b.op("Identity", [b.val(x)])
    return b.op("Squeeze", [b.val(x), b.ints(axes)])


@converts("unsqueeze")
def _unsqueeze(b, n, ins):
    nd = len(ins[0].shape) + 1
    return b.op("Unsqueeze", [b.val(ins[0]), b.ints([n.attrs["dim"] % nd])])


@converts("slice")
def _slice(b, n, ins):
    x = ins[0]
    a = n.attrs
    step = a.get("step") or 1

    def bound(attr, default):   # an omitted start / stop: the end of the axis the step starts / stops at
        b.handled(attr)
        return b.ints([default]) if a.get(attr) is None else b.int_scalar(attr, a[attr])
    starts = bound("start", 0 if step > 0 else INT64_MAX)
    ends = bound("stop", INT64_MAX if step > 0 else INT64_MIN)
    return b.op("Slice", [b.val(x), starts, ends, b.ints([a["dim"] % len(x.shape)]), b.ints([step])])


def _slice_nodes(b, x, shape, index):
    """ONNX nodes for basic indexing x[index] (ints, slices, None, Ellipsis)."""
    nd = len(shape)
    used = sum(1 for it in index if it[0] in ("int", "slice"))
    items = []
    for it in index:
        if it[0] == "ellipsis":
            items += [("slice", None, None, None)] * (nd - used)
        else:
            items.append(it)
    if not any(it[0] == "ellipsis" for it in index):
        items += [("slice", None, None, None)] * (nd - used)
    starts, ends, axes, steps, squeeze, unsq = [], [], [], [], [], []
    ax = 0
    pos = 0  # position in the output
    for it in items:
        kind = it[0]
        if kind == "int":
            i = it[1]
            starts.append(i)
            ends.append(i + 1 if i != -1 else INT64_MAX)
            axes.append(ax)
            steps.append(1)
            squeeze.append(ax)
            ax += 1
        elif kind == "slice":
            start, stop, step = it[1], it[2], it[3]
            step = 1 if step is None else step
            if not (start in (None, 0) and stop is None and step == 1):
                starts.append((0 if step > 0 else INT64_MAX) if start is None else start)
                ends.append((INT64_MAX if step > 0 else INT64_MIN) if stop is None else stop)
                axes.append(ax)
                steps.append(step)
            ax += 1
            pos += 1
        elif kind == "none":
            unsq.append(pos)
            pos += 1
        else:
            return None
    if starts:
        x = b.op("Slice", [x, b.ints(starts), b.ints(ends), b.ints(axes), b.ints(steps)])
    if squeeze:
        x = b.op("Squeeze", [x, b.ints(squeeze)])
    if unsq:
        x = b.op("Unsqueeze", [x, b.ints(unsq)])
    if not (starts or squeeze or unsq):
        x = b.op("Identity", [x])
    return x


@converts("getitem")
def _getitem(b, n, ins):
    b.static_attr("index")
    out = _slice_nodes(b, b.val(ins[0]), ins[0].shape, n.attrs["index"])
    if out is None:
        raise unsupported(n, f"index {n.attrs['index']!r}")
    return out


@converts("index")
def _index(b, n, ins):
    """x[..., idx, ...] with one integer index tensor after full slices: Gather."""
    b.static_attr("index")
    index = n.attrs["index"]
    x, tensors = ins[0], ins[1:]
    full = lambda it: it[0] == "slice" and it[1] in (None, 0) and it[2] is None and it[3] in (None, 1)  # noqa
    where = [i for i, it in enumerate(index) if it[0] in ("tensor", "mask")]
    pos = where[0] if len(where) == 1 else None
    ok = (pos is not None and index[pos][0] == "tensor" and len(tensors) == 1 and tensors[0].dtype != "bool"
          and all(full(it) for it in index[:pos]) and all(full(it) or it[0] == "ellipsis" for it in index[pos + 1:]))
    if not ok:
        raise unsupported(n, "only x[idx] / x[:, idx] with one integer index tensor is supported (boolean "
                             "masks give data-dependent shapes)")
    return b.op("Gather", [b.val(x), b.val(tensors[0], "int64")], axis=pos)


@converts("index_select", "gather", "embedding")
def _gather(b, n, ins):
    """index_select and embedding (a table's rows) are ONNX Gather; gather is GatherElements."""
    axis = 0 if n.op == "embedding" else n.attrs["dim"] % max(len(ins[0].shape), 1)
    return b.op("GatherElements" if n.op == "gather" else "Gather", [b.val(ins[0]), b.val(ins[1], "int64")],
                axis=axis)


@converts("cat")
def _cat(b, n, ins):
    dt = n.out.dtype
    nd = len(n.out.shape)
    parts = [b.val(x, dt) for x in ins if _is_value(x) and not (len(x.shape) == 1 and x.shape[0] == 0 and nd > 1)]
    if len(parts) == 1:
        return b.op("Identity", parts)
    return b.op("Concat", parts, axis=n.attrs["dim"] % nd)


@converts("stack")
def _stack(b, n, ins):
    dt = n.out.dtype
    nd = len(n.out.shape)
    d = n.attrs["dim"] % nd
    axes = b.ints([d])
    parts = [b.op("Unsqueeze", [b.val(x, dt), axes]) for x in ins]
    return parts[0] if len(parts) == 1 else b.op("Concat", parts, axis=d)


@converts("flip")
def _flip(b, n, ins):
    x = ins[0]
    nd = len(x.shape)
    dims = sorted({d % nd for d in n.attrs["dims"]})
    if not dims:
        return b.op("Identity", [b.val(x)])
    k = len(dims)
    return b.op("Slice", [b.val(x), b.ints([-1] * k), b.ints([INT64_MIN] * k), b.ints(dims), b.ints([-1] * k)])


@converts("roll")
def _roll(b, n, ins):
    x = ins[0]
    shifts, dims = n.attrs["shifts"], n.attrs["dims"]
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    v = b.val(x)
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        size = int(np.prod([b.size(x, d) for d in range(len(x.shape))]))
        flat = b.op("Reshape", [v, b.ints([-1])])
        r = _roll_axis(b, flat, size, shifts[0], 0)
        return b.op("Reshape", [r, b.ints(list(x.shape))])
    dims = [dims] if isinstance(dims, int) else list(dims)
    b.static_attr("shifts")
    for s, d in zip(shifts, dims):
        d %= len(x.shape)
        v = _roll_axis(b, v, b.size(x, d), s, d)
    return v


def _roll_axis(b, v, size, shift, axis):
    if size == 0 or shift % size == 0:
        return b.op("Identity", [v])
    s = shift % size
    a = b.op("Slice", [v, b.ints([size - s]), b.ints([INT64_MAX]), b.ints([axis])])
    c = b.op("Slice", [v, b.ints([0]), b.ints([size - s]), b.ints([axis])])
    return b.op("Concat", [a, c], axis=axis)


@converts("repeat")
def _repeat(b, n, ins):
    x = ins[0]
    b.static_attr("sizes")
    sizes = list(n.attrs["sizes"])
    v = b.val(x)
    extra = len(sizes) - len(x.shape)
    if extra > 0:
        v = b.op("Unsqueeze", [v, b.ints(list(range(extra)))])
    return b.op("Tile", [v, b.ints(sizes)])


@converts("tril", "triu")
def _tri(b, n, ins):
    return b.op("Trilu", [b.val(ins[0]), b.const(np.int64(n.attrs.get("diagonal", 0)))],
                upper=int(n.op == "triu"))


@converts("pad")
def _pad(b, n, ins):
    x = ins[0]
    b.static_attr("pad")
    nd = len(x.shape)
    pad = list(n.attrs["pad"])
    begins, ends = [0] * nd, [0] * nd
    for i in range(len(pad) // 2):
        d = nd - 1 - i
        begins[d], ends[d] = pad[2 * i], pad[2 * i + 1]
    value = n.attrs.get("value", 0.0)
    dt = n.out.dtype
    return b.op("Pad", [b.val(x, dt), b.ints(begins + ends), b.val(0 if value is None else value, dt)],
                mode="constant")


# ---------------------------------------------------------------- creation

@converts("arange", "full", "eye", "linspace")
def _creation(b, n, ins):
    """Static creation ops become initializers (computed by eagerc's own kernel); sizes that
    depend on dynamic dimensions are computed at run time (Range, ConstantOfShape)."""
    a = n.attrs
    p = b.node_patches.get(b.index, {})
    if not any(k[0] == "attrs" for k in p):
        from ..runtime.ops import OPS
        return b.const(np.asarray(OPS[n.op].cpu(**a)), name=n.out.name)
    dt = n.out.dtype
    if n.op == "arange":
        def scalar(attr):
            if b.patch("attrs", attr) is None:
                return b.val(a[attr], dt)
            return b.cast(b.op("Squeeze", [b.int_scalar(attr, a[attr])]), "int64", dt)
        return b.op("Range", [scalar("start"), scalar("end"), scalar("step")])
    if n.op == "full":
        shape = b.int_vector("shape", a["shape"])
        b.handled("value")
        value = b.onnx.numpy_helper.from_array(np.asarray([a["value"]], dtype=np.dtype(dt)), "value")
        return b.op("ConstantOfShape", [shape], value=value)
    raise unsupported(n, "its size depends on a dynamic dimension")


# ---------------------------------------------------------------- linear algebra

@converts("matmul")
def _matmul(b, n, ins):
    dt = n.out.dtype
    return b.op("MatMul", [b.val(ins[0], dt), b.val(ins[1], dt)])


@converts("linear")
def _linear(b, n, ins):
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    dt = n.out.dtype
    xv, wv = b.val(x, dt), b.val(w, dt)
    if len(x.shape) == 2 and (bias is None or (_is_value(bias) and len(bias.shape) == 1)):
        return b.op("Gemm", [xv, wv] + ([b.val(bias, dt)] if bias is not None else []), transB=1)
    y = b.op("MatMul", [xv, b.op("Transpose", [wv], perm=[1, 0])])
    if bias is None or (not _is_value(bias) and bias == 0):
        return y
    return b.op("Add", [y, b.val(bias, dt)])


@converts("einsum")
def _einsum(b, n, ins):
    dt = n.out.dtype
    return b.op("Einsum", [b.val(x, dt) for x in ins], equation=n.attrs["equation"])


# ---------------------------------------------------------------- neural-network ops

@converts("softmax", "log_softmax")
def _softmax(b, n, ins):
    x = ins[0]
    nd = len(x.shape)
    v = b.val(x, n.out.dtype)
    if nd == 0:
        return b.val(1.0 if n.op == "softmax" else 0.0, n.out.dtype)
    return b.op("Softmax" if n.op == "softmax" else "LogSoftmax", [v], axis=n.attrs["dim"] % nd)


@converts("layer_norm")
def _layer_norm(b, n, ins):
    x, w, bias = ins[0], ins[1], ins[2]
    dt = n.out.dtype
    ns = list(n.attrs["normalized_shape"])
    scale = b.val(w, dt) if w is not None else b.const(np.ones(ns, np.dtype(dt)))
    inputs = [b.val(x, dt), scale] + ([b.val(bias, dt)] if bias is not None else [])
    return b.op("LayerNormalization", inputs, axis=-len(ns), epsilon=float(n.attrs["eps"]))


@converts("rms_norm")
def _rms_norm(b, n, ins):
    """x * 1 / sqrt(ReduceMean(x * x) + eps) * weight (ONNX has RMSNormalization from opset 23 only)."""
    x, w = ins[0], ins[1]
    dt = n.out.dtype
    k = len(n.attrs["normalized_shape"])
    v = b.val(x, dt)
    ms = _reduce(b, "ReduceMean", b.op("Mul", [v, v]), list(range(len(x.shape) - k, len(x.shape))), True)
    rstd = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [ms, b.val(float(n.attrs["eps"]), dt)])])])
    y = b.op("Mul", [v, rstd])
    return y if w is None else b.op("Mul", [y, b.val(w, dt)])


@converts("gelu")
def _gelu(b, n, ins):
    dt = n.out.dtype
    x = b.val(ins[0], dt)
    half = b.op("Mul", [x, b.val(0.5, dt)])
    if n.attrs.get("approximate", "none") == "tanh":
        inner = b.op("Mul", [b.op("Add", [x, b.op("Mul", [b.op("Mul", [b.op("Mul", [x, x]), x]),
                                                          b.val(0.044715, dt)])]),
                             b.val(math.sqrt(2.0 / math.pi), dt)])
        return b.op("Mul", [half, b.op("Add", [b.op("Tanh", [inner]), b.val(1.0, dt)])])
    erf = b.op("Erf", [b.op("Mul", [x, b.val(1.0 / math.sqrt(2.0), dt)])])
    return b.op("Mul", [half, b.op("Add", [erf, b.val(1.0, dt)])])


@converts("lstm_cell")
def _lstm_cell(b, n, ins):
    """[h', c'] stacked: c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c')."""
    dt = n.out.dtype
    xg, hg, c = (b.val(v, dt) for v in ins)
    i, f, g, o = b.op("Split", [b.op("Add", [xg, hg]), b.ints([ins[2].shape[-1]] * 4)], outputs=4, axis=-1)
    c1 = b.op("Add", [b.op("Mul", [b.op("Sigmoid", [f]), c]), b.op("Mul", [b.op("Sigmoid", [i]), b.op("Tanh", [g])])])
    h1 = b.op("Mul", [b.op("Sigmoid", [o]), b.op("Tanh", [c1])])
    return b.op("Concat", [b.op("Unsqueeze", [h1, b.ints([0])]), b.op("Unsqueeze", [c1, b.ints([0])])], axis=0)


@converts("lstm_layer")
def _lstm_layer(b, n, ins):
    """Every step's [h, c, i, f, g, o] stacked (6, T, B, H): the recurrence unrolled over its
    (traced, fixed) length, one MatMul by W_hh^T per step and lstm_cell's gate math."""
    dt = n.out.dtype
    xg, h, c, w = (b.val(v, dt) for v in ins)
    H = ins[1].shape[-1]
    wt = b.op("Transpose", [w], perm=[1, 0])
    rows = [[] for _ in range(6)]
    for t in range(ins[0].shape[0]):
        x = b.op("Gather", [xg, b.const(np.int64(t))], axis=0)
        i, f, g, o = b.op("Split", [b.op("Add", [x, b.op("MatMul", [h, wt])]), b.ints([H] * 4)], outputs=4, axis=-1)
        i, f, g, o = b.op("Sigmoid", [i]), b.op("Sigmoid", [f]), b.op("Tanh", [g]), b.op("Sigmoid", [o])
        c = b.op("Add", [b.op("Mul", [f, c]), b.op("Mul", [i, g])])
        h = b.op("Mul", [o, b.op("Tanh", [c])])
        for row, v in zip(rows, (h, c, i, f, g, o)):
            row.append(b.op("Unsqueeze", [v, b.ints([0])]))
    return b.op("Concat", [b.op("Unsqueeze", [b.op("Concat", row, axis=0), b.ints([0])]) for row in rows], axis=0)


@converts("gru_cell")
def _gru_cell(b, n, ins):
    """h' = n + z (h - n), n = tanh(x_n + r h_n), r and z sigmoids of x + h (PyTorch's GRU)."""
    dt = n.out.dtype
    xg, hg, h = (b.val(v, dt) for v in ins)
    sizes = b.ints([ins[2].shape[-1]] * 3)
    xr, xz, xn = b.op("Split", [xg, sizes], outputs=3, axis=-1)
    hr, hz, hn = b.op("Split", [hg, sizes], outputs=3, axis=-1)
    r, z = b.op("Sigmoid", [b.op("Add", [xr, hr])]), b.op("Sigmoid", [b.op("Add", [xz, hz])])
    new = b.op("Tanh", [b.op("Add", [xn, b.op("Mul", [r, hn])])])
    return b.op("Add", [new, b.op("Mul", [z, b.op("Sub", [h, new])])])


def _pairs(v, n=2):
    """An int, (a, b) or ((lo, hi), (lo, hi)) -> ([begins], [ends]) for n spatial dims."""
    if isinstance(v, int):
        v = (v,) * n
    v = list(v)
    begins = [p[0] if isinstance(p, (list, tuple)) else p for p in v]
    ends = [p[1] if isinstance(p, (list, tuple)) else p for p in v]
    return begins, ends


def _two(v):
    return [v, v] if isinstance(v, int) else list(v)


@converts("conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d")
def _conv(b, n, ins):
    x, w, bias = ins
    a = n.attrs
    pad = a.get("padding", 0)
    if isinstance(pad, str):
        raise unsupported(n, f"padding={pad!r}")
    begins, ends = _pairs(pad)
    dt = n.out.dtype
    inputs = [b.val(x, dt), b.val(w, dt)]
    add = None
    if _is_value(bias) and len(bias.shape) == 1:
        inputs.append(b.val(bias, dt))
    elif bias is not None and (_is_value(bias) or bias != 0):
        add = bias
    attrs = dict(strides=_two(a.get("stride", 1)), pads=begins + ends, dilations=_two(a.get("dilation", 1)),
                 group=int(a.get("groups", 1)))
    if n.op.startswith("conv_transpose"):
        y = b.op("ConvTranspose", inputs, output_padding=_two(a.get("output_padding", 0)), **attrs)
    else:
        y = b.op("Conv", inputs, **attrs)
    return y if add is None else b.op("Add", [y, b.val(add, dt)])


def _pool_window(a):
    """(kernel_shape, strides, pads) of a 2-d pooling node's attributes (stride defaults to the kernel)."""
    begins, ends = _pairs(a.get("padding", 0))
    ks = _two(a["kernel_size"])
    stride = a.get("stride")
    return ks, _two(stride) if stride else ks, begins + ends


@converts("max_pool2d")
def _max_pool2d(b, n, ins):
    a = n.attrs
    ks, strides, pads = _pool_window(a)
    return b.op("MaxPool", [b.val(ins[0])], kernel_shape=ks, strides=strides, pads=pads,
                dilations=_two(a.get("dilation", 1)), ceil_mode=int(bool(a.get("ceil_mode"))))


@converts("avg_pool2d")
def _avg_pool2d(b, n, ins):
    a = n.attrs
    ks, strides, pads = _pool_window(a)
    div = a.get("divisor_override")
    ceil = bool(a.get("ceil_mode"))
    if div is not None and ceil:
        raise unsupported(n, "divisor_override with ceil_mode=True")
    y = b.op("AveragePool", [b.val(ins[0])], kernel_shape=ks, strides=strides, pads=pads, ceil_mode=int(ceil),
             count_include_pad=int(bool(a.get("count_include_pad", True)) or div is not None))
    if div is not None:
        y = b.op("Mul", [y, b.val(ks[0] * ks[1] / div, n.out.dtype)])
    return y


@converts("adaptive_avg_pool2d")
def _adaptive_avg_pool2d(b, n, ins):
    x = ins[0]
    oh, ow = n.out.shape[-2:]
    if (oh, ow) == (1, 1):
        return b.op("GlobalAveragePool", [b.val(x)])
    h, w = b.size(x, -2), b.size(x, -1)
    if h % oh or w % ow:
        raise unsupported(n, f"output size {(oh, ow)} does not divide the input size {(h, w)} (only "
                             "1x1 and evenly dividing sizes are exported)")
    k = [h // oh, w // ow]
    return b.op("AveragePool", [b.val(x)], kernel_shape=k, strides=k)


@converts("upsample_nearest2d")
def _upsample_nearest2d(b, n, ins):
    x = ins[0]
    h, w = b.size(x, -2), b.size(x, -1)
    oh, ow = n.out.shape[-2:]
    scales = n.attrs.get("scales")
    if scales is None or any(s is None for s in scales):
        scales = (oh / h, ow / w)
    exact = bool(n.attrs.get("exact"))
    sc = b.const(np.asarray([1.0, 1.0, float(scales[0]), float(scales[1])], np.float32))
    return b.op("Resize", [b.val(x), "", sc], mode="nearest",
                coordinate_transformation_mode="half_pixel" if exact else "asymmetric",
                nearest_mode="round_prefer_ceil" if exact else "floor")


@converts("cross_entropy")
def _cross_entropy(b, n, ins):
    x, target, weight = ins
    a = n.attrs
    if a.get("label_smoothing", 0.0):
        raise unsupported(n, "label_smoothing != 0")
    dt = n.out.dtype
    xv, tv = b.val(x, dt), b.val(target, "int64")
    one_d = len(x.shape) == 1
    if one_d:
        xv = b.op("Unsqueeze", [xv, b.ints([0])])
        tv = b.op("Unsqueeze", [tv, b.ints([0])])
    inputs = [xv, tv] + ([b.val(weight, dt)] if weight is not None else [])
    ii = a.get("ignore_index")
    y = b.op("SoftmaxCrossEntropyLoss", inputs, reduction=a.get("reduction", "mean"),
             ignore_index=None if ii is None else int(ii))
    if one_d and a.get("reduction") == "none":
        y = b.op("Squeeze", [y, b.ints([0])])
    return y


# ---------------------------------------------------------------- ops without a conversion, and why

load_all()
for _why, _names in [
        ("random ops are not exported (their numbers would differ from eagerc's); export in eval mode, where dropout "
         "is off", "uniform normal randint randperm"),
        ("a training-step kernel (a derivative); export inference graphs",
         "softmax_backward log_softmax_backward layer_norm_backward layer_norm_weight_backward batch_norm_backward "
         "rms_norm_backward rms_norm_weight_backward "
         "batch_norm_weight_backward batch_norm_stats gelu_backward cross_entropy_backward embedding_backward "
         "conv2d_weight conv3d_weight interpolate_axis_backward col2im max_pool2d_backward max_pool2d_select avg_pool2d_backward adaptive_avg_pool2d_backward "
         "upsample_nearest2d_backward lstm_cell_backward gru_cell_backward lstm_layer_backward"),
        ("batch statistics of training mode; export in eval mode (running statistics)", "batch_norm"),
        ("ONNX has CumSum but no CumProd", "cumprod"),
        ("not converted yet (ONNX ScatterND / ScatterElements could express it)",
         "index_put index_add scatter scatter_add slice_scatter diagonal_scatter"),
        ("not converted yet (a gather of the diagonal)", "diagonal"),
        ("not converted yet (ONNX MaxPool's indices count over N, C, H and W, eagerc's over H and W)",
         "max_pool2d_indices"),
        ("ONNX has no adaptive max pooling (its windows vary in size)", "adaptive_max_pool_indices"),
        ("not converted yet (ONNX Resize, one axis at a time, could express it)", "interpolate_axis"),
        ("not converted yet (ONNX has Col2Im but no Im2Col; a Conv with an identity kernel could express it)",
         "im2col"),
        ("its result's size depends on the data (eagerc records the count as a constant)", "nonzero"),
        ("not converted yet (ONNX TopK sorts, but does not promise a stable order for ties)", "argsort argtopk argmode"),
        ("not converted yet (ONNX has no sorted search or histogram op; a Less/Sum composition could express it)",
         "searchsorted histc"),
        ("random ops are not exported (their numbers would differ from eagerc's)", "multinomial"),
        ("an exported program runs on the device of its inputs", "to_device"),
        ("ONNX has no such operator (Atan2, Erfinv, a cumulative LogSumExp, a set lookup); not converted yet",
         "atan2 erfinv logcumsumexp isin")]:
    no_part("onnx", _why, _names.split())
