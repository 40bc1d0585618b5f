"""Layouts for BLAS and fewer copies: three rewrites around the matrix products of a model.

    matmul(a[B..., M, K], b[K, N])        -> reshape(matmul(reshape(a, [B*M, K]), b), [B..., M, N])
    cat([reshape(x_i, S_i)], dim=d)       -> reshape(cat([x_i], dim=d), S)
                                             (each reshape merging x_i's dims d.. d+r into dim d,
                                             the merged inner sizes equal across the pieces)
    reshape(x, S2) after reshape(x, S1)   -> reshape(reshape(x, S1), S2)
    sum(reshape(x[A..., C...], [prod(A), C...]), dim=0) -> sum(x, dim=(0, .., len(A)-1))

Why: numpy's matmul of a batch by one matrix calls GEMM once per batch element (a GPT's
logits, [8, 64, 128] @ [128, 256]: 8 GEMMs of 64 rows at ~135 GFLOP/s against one of 512
rows at ~165); as one product it is what `linear` computes for a 3-d input already. And
attention's backward joins dq, dk, dv with a cat of reshaped head-major views, each
reshape a copy (a permuted array cannot be viewed merged): joining the views themselves
copies each once, into the cat. A permuted value reshaped twice (attention's output: for
the projection, and again, flat, for its weight gradient) is copied twice; reshaping the
first copy is a view. A bias gradient is the sum over the rows of a flattened gradient:
summed through the reshape (an op that fusion does not cross) it is a kernel of its own,
one more walk over the gradient; summed over x's leading dims it closes the kernel that
computes x (the GELU backward's product), which reads each element once for both.

Values: the reshape of `a` is a view when `a` is contiguous (a copy otherwise, as the
batched matmul would have read it anyway); the cat puts the same elements in the same
places; the sum adds the same elements in the same order (a leading-dims sum walks the
rows in order). Only when the rewritten nodes' outputs have no other reader (a reshape feeding the
cat and something else is a copy either way).
"""
import math

from ...runtime.ir import Node, Value
from .util import fresh_names, rewrite

__all__ = ["layout"]


def layout(graph):
    producer = {n.out.name: n for n in graph.nodes}
    readers = {}
    for n in graph.nodes:
        for v in n.inputs:
            if isinstance(v, Value):
                readers[v.name] = readers.get(v.name, 0) + 1
    escaping = {v.name for v in graph.outputs} | {v.name for _, v in graph.mutations}
    name = fresh_names(graph)

    def fresh(base, shape, dtype, device):
        return Value(name(base), shape, dtype, device)

    def static(v):
        return all(type(s) is int for s in v.shape)

    def matmul(n):
        a, b = n.inputs
        if not (isinstance(a, Value) and isinstance(b, Value)) or len(b.shape) != 2 or len(a.shape) < 3 \
                or not static(a) or not static(b) or a.dtype != b.dtype:
            return None
        rows = math.prod(a.shape[:-1])
        flat = fresh(a.name, (rows, a.shape[-1]), a.dtype, a.device)
        prod = fresh(n.out.name, (rows, b.shape[1]), n.out.dtype, n.out.device)
        return [Node("reshape", [a], {"shape": flat.shape}, flat, n.loc, n.module),
                Node("matmul", [flat, b], {}, prod, n.loc, n.module),
                Node("reshape", [prod], {"shape": tuple(n.out.shape)}, n.out, n.loc, n.module)]

    def cat(n):
        d = n.attrs.get("dim")
        pieces = [producer.get(x.name) if isinstance(x, Value) else None for x in n.inputs]
        if type(d) is not int or not pieces or not static(n.out) or set(n.attrs) != {"dim"}:
            return None
        d %= len(n.out.shape)
        sources, inner = [], None
        for x, p in zip(n.inputs, pieces):
            if p is None or p.op != "reshape" or readers.get(x.name) != 1 or x.name in escaping:
                return None
            src = p.inputs[0]
            xs, ss = tuple(src.shape), tuple(x.shape)
            r = len(xs) - len(ss)          # how many more dims the source has: merged into dim d
            if not isinstance(src, Value) or not static(src) or r < 1 or xs[:d] != ss[:d] \
                    or xs[d + r + 1:] != ss[d + 1:] or math.prod(xs[d:d + r + 1]) != ss[d]:
                return None
            if inner is None:
                inner = xs[d + 1:d + r + 1]
            elif xs[d + 1:d + r + 1] != inner:
                return None
            sources.append(src)
        first = tuple(sources[0].shape)
        shape = first[:d] + (sum(s.shape[d] for s in sources),) + first[d + 1:]
        joined = fresh(n.out.name, shape, n.out.dtype, n.out.device)
        return [Node("cat", sources, {"dim": d}, joined, n.loc, n.module),
                Node("reshape", [joined], {"shape": tuple(n.out.shape)}, n.out, n.loc, n.module)]

    first_reshape = {}    # value name -> the output of the first reshape of it

    def reshape(n):
        x = n.inputs[0]
        if not isinstance(x, Value) or n.out.name in escaping:
            return None
        first = first_reshape.setdefault(x.name, n.out)
        if first is n.out or first.name in escaping or not static(first) or not static(n.out):
            return None
        return [n.copy_with(inputs=[first])]

    def row_sum(n):
        """sum over dim 0 of a reshape merging x's leading dims: the sum over those dims of x."""
        x = n.inputs[0]
        p = producer.get(x.name) if isinstance(x, Value) else None
        if p is None or p.op != "reshape" or n.attrs.get("keepdim") or n.attrs.get("dim") not in (0, (0,)) \
                or set(n.attrs) - {"dim", "keepdim", "dtype"} or n.attrs.get("dtype") is not None:
            return None
        src = p.inputs[0]
        if not isinstance(src, Value) or not static(src) or not static(x) or src.dtype != x.dtype:
            return None
        xs, rest = tuple(src.shape), tuple(x.shape[1:])
        lead = len(xs) - len(rest)
        if lead < 2 or xs[lead:] != rest or math.prod(xs[:lead]) != x.shape[0]:
            return None
        return [n.copy_with(inputs=[src], attrs={**n.attrs, "dim": tuple(range(lead))})]

    def visit(n):
        if n.out.device != "cpu":
            return None
        if n.op == "sum":
            return row_sum(n)
        if n.op == "matmul":
            return matmul(n)
        if n.op == "cat":
            return cat(n)
        if n.op == "reshape":
            return reshape(n)
        return None

    return rewrite(graph, visit)[0]
