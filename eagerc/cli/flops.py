"""A FLOP estimate per op, from the shapes in the graph (at the example sizes).

Each op's formula is a trait of its declaration (`OpDef.flops`, runtime/ops/__init__.py).
A FLOP is one floating-point add or multiply; by category (RULES): matmul, linear, conv2d,
conv_transpose2d and einsum count 2 x multiply-accumulates; elementwise ops the output's
elements; reductions (sum, argmax, cumsum...) the input's; softmax, log_softmax,
layer_norm, batch_norm, gelu and cross_entropy 5 x the input's (max/mean, subtract, exp or
square, sum, scale); pooling the output's elements x the window; shape, indexing, joining
and creation ops 0 (they move or write data).
"""
from ..runtime.ops import flops_of, node_flops

__all__ = ["node_flops", "flops_by_op", "RULES"]

RULES = {"matmul-like": "2 x multiply-accumulates", "elementwise": "numel of the output",
         "reduction": "numel of the input", "normalisation": "5 x numel of the input",
         "pooling": "numel of the output x window", "data movement": "0"}


def flops_by_op(graph):
    """{op name: {"count", "flops", "category"}} in descending FLOPs, and the total."""
    table = {}
    for n in graph.nodes:
        row = table.setdefault(n.op, {"count": 0, "flops": 0, "category": flops_of(n.op).category})
        row["count"] += 1
        row["flops"] += node_flops(n)
    ordered = dict(sorted(table.items(), key=lambda kv: (-kv[1]["flops"], -kv[1]["count"], kv[0])))
    return ordered, sum(r["flops"] for r in table.values())
