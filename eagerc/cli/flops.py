"""A FLOP estimate per op, from the shapes in the graph (at the example sizes).

Rules, one table (a FLOP is one floating-point add or multiply):

    matmul, linear, conv2d, conv_transpose2d, einsum   2 x multiply-accumulates
    elementwise ops (add, exp, relu, where, cast...)  numel of the output
    reductions (sum, mean, amax, argmax, cumsum...)   numel of the input
    softmax, log_softmax, layer_norm, batch_norm,     5 x numel of the input (max/mean,
      gelu, cross_entropy                               subtract, exp or square, sum, scale)
    pooling                                           numel of the output x window size
    shape, indexing, joining, creation ops            0 (they move or write data)
"""
import math

from ..runtime.ops import OPS
from ..runtime.ops.elementwise import BOOL_UNARY, FLOAT_UNARY, SAME_UNARY

__all__ = ["node_flops", "flops_by_op", "RULES"]

REDUCTIONS = {"sum", "mean", "prod", "amax", "amin", "all", "any", "argmax", "argmin", "cumsum", "cumprod"}
NORMALISATIONS = {"softmax", "log_softmax", "layer_norm", "batch_norm", "gelu", "cross_entropy"}
ELEMENTWISE = set(FLOAT_UNARY) | set(SAME_UNARY) | set(BOOL_UNARY) | {
    "cast", "clamp", "nan_to_num", "bitwise_not", "clone", "where", "lerp", "pow"}
RULES = {"matmul-like": "2 x multiply-accumulates", "elementwise": "numel of the output",
         "reduction": "numel of the input", "normalisation": "5 x numel of the input",
         "pooling": "numel of the output x window", "data movement": "0"}


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _shape(x):
    return tuple(x.shape) if hasattr(x, "shape") else ()


def category(op):
    if op in ("matmul", "linear", "conv2d", "conv_transpose2d", "einsum"):
        return "matmul-like"
    if op in REDUCTIONS:
        return "reduction"
    if op in NORMALISATIONS:
        return "normalisation"
    if op in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"):
        return "pooling"
    d = OPS.get(op)
    if op in ELEMENTWISE or (d is not None and d.broadcasts):
        return "elementwise"
    return "data movement"


def node_flops(node):
    """Estimated FLOPs of one graph node (an int)."""
    op = node.op
    ins = node.inputs
    out = _numel(node.out.shape)
    cat = category(op)
    if op == "matmul":
        a = _shape(ins[0])
        k = a[-1] if a else 1
        return 2 * out * k
    if op == "linear":
        return 2 * out * (_shape(ins[1])[-1] if len(_shape(ins[1])) else 1)
    if op == "conv2d":
        w = _shape(ins[1])
        return 2 * out * _numel(w[1:])
    if op == "conv_transpose2d":
        w = _shape(ins[1])
        return 2 * _numel(_shape(ins[0])) * _numel(w[1:])
    if op == "einsum":
        return _einsum_flops(node)
    if cat == "reduction":
        return _numel(_shape(ins[0]))
    if cat == "normalisation":
        return 5 * _numel(_shape(ins[0]))
    if cat == "pooling":
        if op == "adaptive_avg_pool2d":
            return _numel(_shape(ins[0]))
        k = node.attrs.get("kernel_size", 1)
        k = k if isinstance(k, (list, tuple)) else (k, k)
        return out * math.prod(k)
    if cat == "elementwise":
        return out
    return 0


def _einsum_flops(node):
    """2 x the product of every index's size (each output element sums over the others)."""
    eq = node.attrs.get("equation", "")
    lhs = eq.split("->")[0].replace(" ", "")
    if "..." in lhs:
        return 2 * _numel(node.out.shape)
    sizes = {}
    for term, x in zip(lhs.split(","), [x for x in node.inputs if hasattr(x, "shape")]):
        for letter, n in zip(term, x.shape):
            sizes[letter] = n
    return 2 * math.prod(sizes.values())


def flops_by_op(graph):
    """{op name: {"count", "flops", "category"}} in descending FLOPs, and the total."""
    table = {}
    for n in graph.nodes:
        row = table.setdefault(n.op, {"count": 0, "flops": 0, "category": category(n.op)})
        row["count"] += 1
        row["flops"] += node_flops(n)
    ordered = dict(sorted(table.items(), key=lambda kv: (-kv[1]["flops"], -kv[1]["count"], kv[0])))
    return ordered, sum(r["flops"] for r in table.values())
