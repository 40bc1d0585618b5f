"""Decomposition of composite ops into primitives, for backends that fuse.

The fused nn ops (linear, softmax, log_softmax, layer_norm, batch_norm, cross_entropy,
gelu, embedding) and the backward kernels a traced training step records (softmax_backward,
log_softmax_backward, gelu_backward, layer_norm_backward, layer_norm_weight_backward,
cross_entropy_backward) each have a decomposition written with Tensor ops next to their
fast path (`eagerc.ops.nn.*_decomposed`), attached to the op by the frontend
(`OpDef.decomposition`, `defdecomp`). This pass re-traces that function with
the tracer on placeholder tensors of the node's input types and splices the recorded
primitives in place of the node; the last one defines the node's own output value, so
users, outputs and mutations need no renaming.

The decompositions follow the fused kernels' order of operations (results agree to
rounding) and keep the per-row work fusable: elementwise ops and reductions over the last
dim. layer_norm's normalised dims are flattened into one; cross_entropy's class dim is
moved last for (N, C, d...) inputs and the target class is picked by a one-hot compare
against arange(C), not a gather; sums over the leading dims (a weight gradient, a mean's
denominator) come last or apart.

Templates are cached per (op, input types, attributes): a transformer's twelve
layer_norms are traced once. A decomposition whose type differs from the node's, or
which reads a tensor it did not receive, is not applied (the node stays fused).

Not in the default numpy pipeline (one fused numpy kernel beats five primitive ones):
backends that fuse elementwise code run it first (backend c's prepare).
Mind that the fused kernels check their inputs at run time (cross_entropy and its backward
raise on an out-of-range class index); the decomposed form computes without that check (such
a target matches no column of the one-hot compare: its row gets a meaningless value, no error).
"""
import numpy as np

from ...runtime import dtypes
from ...runtime.ir import Node, Value
from ...runtime.ops import OPS
from .util import attrs_key, const_key, fresh_names, is_random, numel, rewrite

__all__ = ["decompose", "decomposable", "DECOMPOSITIONS"]


def _table():
    from ...nn import functional  # noqa: F401  (attaches the decompositions: defdecomp)
    return {n: op.decomposition for n, op in OPS.items() if op.decomposition is not None}


DECOMPOSITIONS = {}     # op name -> fn(*inputs, **attrs) over Tensors; filled on first use
_TEMPLATES = {}         # cache key -> traced Graph, or None when the op does not decompose
MAX_TEMPLATES = 512


def decompose(graph, ops=None):
    """Replace each node of a decomposable op (all in DECOMPOSITIONS, or those named in `ops`)
    by its primitives."""
    if not DECOMPOSITIONS:
        DECOMPOSITIONS.update(_table())
    wanted = DECOMPOSITIONS if ops is None else {k: DECOMPOSITIONS[k] for k in ops}
    fresh = fresh_names(graph)

    def visit(n):
        if n.op not in wanted or n.out.device != "cpu":
            return None
        if n.out.dtype == "bfloat16" and OPS[n.op].opmath:
            return None   # its kernel computes in float32 and rounds once; primitives would round each step
        if numel(n.out.shape) is None or any(numel(v.shape) is None for v in n.input_values()):
            return None
        template = _template(n, wanted[n.op])
        if template is None:
            return None
        return _splice(n, template, fresh)

    return rewrite(graph, visit)[0]


def _key(n):
    ins = tuple((tuple(x.shape), x.dtype) if isinstance(x, Value) else const_key(x) for x in n.inputs)
    return (n.op, ins, attrs_key(n.attrs))


def _template(n, fn):
    key = _key(n)
    if key not in _TEMPLATES:
        if len(_TEMPLATES) >= MAX_TEMPLATES:   # many shapes (dynamic sizes): start over
            _TEMPLATES.clear()
        _TEMPLATES[key] = _trace_template(n, fn)
    return _TEMPLATES[key]


def _trace_template(n, fn):
    """Trace fn on zero-filled placeholders of the node's input types; None if unusable."""
    from ... import dispatch
    from ...autograd.grad_mode import no_grad
    from ..tracer import trace
    if dispatch.active_tracer() is not None:   # called while another trace runs: nested tracing is refused
        return None
    tensors = [dispatch.wrap(np.zeros(tuple(x.shape), dtypes.as_dtype(x.dtype).np))
               for x in n.inputs if isinstance(x, Value)]

    def call(*ts):
        it = iter(ts)
        args = [next(it) if isinstance(x, Value) else x for x in n.inputs]
        return fn(*args, **n.attrs)
    try:   # zero placeholders: a mean's 0 / 0 is expected here, not worth a warning
        with no_grad(), np.errstate(all="ignore"):
            g, result, tracer = trace(call, tuple(tensors))
    except Exception:
        return None
    if g is None or g.externals() or g.mutations or len(g.outputs) != 1:
        return None
    out = g.outputs[0]
    if out.name not in {t.out.name for t in g.nodes} or any(is_random(t) for t in g.nodes):
        return None
    if tuple(out.shape) != tuple(n.out.shape) or out.dtype != n.out.dtype:
        return None
    return g


def _splice(n, template, fresh):
    """Copy the template's nodes with the node's inputs for its arguments; the value it returns
    becomes the node's output value."""
    args = [x for x in n.inputs if isinstance(x, Value)]
    env = {v.name: a for v, a in zip(template.args(), args)}
    result = template.outputs[0]
    nodes = []
    for t in template.nodes:
        if t.out.name == result.name:
            out = n.out
        else:
            out = Value(fresh(n.out.name), t.out.shape, t.out.dtype, n.out.device)
        ins = [env[x.name] if isinstance(x, Value) else x for x in t.inputs]
        nodes.append(Node(t.op, ins, t.attrs, out, n.loc, n.module))
        env[t.out.name] = out
    return nodes


def decomposable():
    """The names of the ops this pass can decompose."""
    if not DECOMPOSITIONS:
        DECOMPOSITIONS.update(_table())
    return frozenset(DECOMPOSITIONS)
