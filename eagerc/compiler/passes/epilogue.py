"""Bias epilogues: linear(x, W, b) -> add(linear(x, W), b) where the add fuses with the reader.

A linear's kernel adds its bias in place after the product (`out += bias`): one more walk
over the output, after which the kernel that reads it (a GELU, ReLU, a residual add and
layer_norm) walks it again. Split off, the add is one more elementwise member of that
reader's fused kernel: the bias is added as the value is loaded there, and the separate
pass is gone (what Inductor calls an epilogue; BLAS itself has none to fuse into).

Only where it pays and keeps the bits: the linear's output has no use but its readers
(not returned, not written back), each `fusible` (the backend's predicate: it will sit in a
kernel; a decomposed GELU reads its input three times), float32/float64 (a bfloat16 linear adds in float32 and rounds
once; a separate add would round twice). The add computes what `out += bias` computed:
the same rounding of the same two operands.
"""
from ...runtime.ir import Node, Value
from .util import fresh_names, rewrite

__all__ = ["bias_epilogues"]


def bias_epilogues(graph, fusible):
    readers = {}
    for n in graph.nodes:
        for v in n.inputs:
            if isinstance(v, Value):
                readers.setdefault(v.name, []).append(n)
    escaping = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    fresh = fresh_names(graph)

    def visit(n):
        if n.op != "linear" or len(n.inputs) < 3 or not isinstance(n.inputs[2], Value):
            return None
        out, bias = n.out, n.inputs[2]
        users = readers.get(out.name, [])
        if out.dtype not in ("float32", "float64") or bias.dtype != out.dtype or out.name in escaping \
                or not users or not all(fusible(u) for u in users) or out.device != "cpu":
            return None
        product = Value(fresh(out.name), out.shape, out.dtype, out.device)
        return [n.copy_with(inputs=[n.inputs[0], n.inputs[1], None], out=product),
                Node("add", [product, bias], {}, out, n.loc, n.module)]

    return rewrite(graph, visit)[0]
