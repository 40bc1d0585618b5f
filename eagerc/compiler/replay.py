"""Run a traced graph with eager Tensor ops, so that autograd records it.

A compiled program computes arrays: nothing it does can be differentiated again. When a
gradient must itself be differentiable (`create_graph=True` through a compiled function,
e.g. a gradient penalty), the traced forward graph is replayed here node by
node through `dispatch.apply` -- the same kernels and the same registered derivatives as
eager mode -- and the gradient is taken through that record by eager autograd with
`create_graph=True`, so it carries a history back to the call's inputs and parameters. It is the slow path by design: compiled speed for first-order
training, eager's exactness (and cost) for higher orders.
"""
from .. import dispatch
from .._tensor import Tensor
from ..runtime.device import device
from ..runtime.ir import Value
from ..runtime.ops import OPS

__all__ = ["replay"]


def replay(graph, env):
    """Evaluate `graph`'s nodes on Tensors; `env` (value name -> Tensor) holds its inputs and
    receives every node's value. Each node is the op eager mode ran, so autograd records what
    eager mode recorded. Random ops raise: their numbers were drawn by the compiled call."""
    for n in graph.nodes:
        op = OPS[n.op]
        if "random" in op.effects:
            raise RuntimeError(f"backward with create_graph=True through a compiled function that draws random "
                               f"numbers ({n.op} at {n.loc or '?'}) is not supported: call it uncompiled for "
                               "higher-order gradients")
        ins = [env[x.name] if isinstance(x, Value) else x for x in n.inputs]
        if not any(isinstance(x, Tensor) for x in ins):
            env[n.out.name] = dispatch.create(op, n.attrs, device(n.out.device))
            continue
        env[n.out.name] = dispatch.apply(op, ins, n.attrs or None)
    return env
