"""The backward engine: an iterative walk of the graph in topological order.

Iterative (no recursion), so a 100,000-op chain is fine. Each node runs once,
after every node that feeds it a gradient; gradients arriving by several paths are
summed first. Saved values are dropped after use unless retain_graph.

Leaves get their `.grad` after the walk -- or, while some tensor has a post-accumulate
hook (`Tensor.register_post_accumulate_grad_hook`, what DistributedDataParallel uses to
all-reduce gradient buckets while backward still runs), as soon as the last edge into
the leaf has been walked. Counting leaf edges is skipped while no such hook exists, so
ordinary backward pays nothing for the mechanism.
"""
import numpy as np

from ..runtime.dtypes import FLOATING_KINDS
from .. import dispatch
from ..dispatch import Node
from .._tensor import Tensor
from .formulas import G, INPUT, OUT, SHAPE

_FREED = "freed"  # node.saved after the graph was released

# How many tensors hold post-accumulate-grad hooks now; while 0, leaves are accumulated
# after the walk as always (see the module docstring).
POST_ACCUMULATE_HOOKS = [0]

_FREED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")


def _modified_error(node, what, t_shape, t_dtype, vc, expected):
    last = f" by {vc[1]}" if len(vc) > 1 else ""
    return RuntimeError(
        f"one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: {what} of {node.op.name} ({t_shape} {t_dtype}) is at version {vc[0]}{last}; "
        f"expected version {expected} instead. {node.op.name} saved it for its backward, and the "
        f"in-place op{last} changed it afterwards. Use an out-of-place op (or .clone()) instead.")


def _saved_input(node, i):
    t = node.saved[i]
    if isinstance(t, Tensor) and t._vc is not None and t._vc[0] != node.versions[i]:
        raise _modified_error(node, f"input {i}", tuple(t._array.shape), t._array.dtype, t._vc,
                              node.versions[i])
    return t


def _saved_output(node):
    if node.out_vc[0] != 0:
        raise _modified_error(node, "the output", tuple(node.out.shape), node.out.dtype, node.out_vc, 0)
    t = Tensor.__new__(Tensor)
    t._array = node.out
    t._requires_grad = True
    t._grad = None
    t.grad_fn = node
    t._vc = node.out_vc
    return t


def sum_to(g, shape):
    """Sum a broadcast gradient back to `shape` (with Tensor ops, so it is differentiable)."""
    gshape = g._array.shape
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and gshape[i + lead] != 1)
    if axes:
        g = g.sum(dim=axes, keepdim=True)
    if lead or g._array.shape != shape:
        g = g.reshape(shape)
    return g


def node_input_grads(node, g):
    """Gradients for each input of `node` given the gradient of its output."""
    if node.saved is _FREED:
        raise RuntimeError(_FREED_MSG)
    op = node.op
    formulas = op.grads
    if op.grad_params is None:  # one function for the whole node
        return formulas(node, g)
    grads = []
    for i, edge in enumerate(node.next):
        if edge is None or formulas[i] is None:
            grads.append(None)
            continue
        args = []
        for kind, key in op.grad_params[i]:
            if kind == G:
                args.append(g)
            elif kind == INPUT:
                args.append(_saved_input(node, key))
            elif kind == OUT:
                args.append(_saved_output(node))
            elif kind == SHAPE:
                args.append(node.shapes[key])
            else:
                args.append(node.attrs[key])
        gi = formulas[i](*args)
        if op.broadcasts and node.shapes is not None and gi is not None and gi._array.shape != node.shapes[i]:
            gi = sum_to(gi, node.shapes[i])
        grads.append(gi)
    return grads


class Gather(Node):
    """A node whose gradient arrives in parts, kept apart instead of summed: its op's
    `grads(node, parts)` gets {feeding node: that node's gradient} and returns the input
    gradients. A split's pieces feed one Gather that joins their gradients once (one cat or
    stack, as PyTorch's SplitBackward / UnbindBackward do), where each piece scattering into
    a zero tensor of the whole's size for the engine to sum would be quadratic in the pieces."""
    __slots__ = ()


def _release(node):
    if node.saved is not None or node.out is not None:
        node.saved = _FREED
        node.out = None


def _check_anomaly(node, i, gi):
    d = gi._array
    if d.dtype.kind in FLOATING_KINDS and not bool(np.isfinite(d).all() if type(d) is np.ndarray else d.isfinite().all()):
        where = node.created_at or "(creation site not recorded)\n"
        raise RuntimeError(
            f"Function '{node.name()}' returned nan or inf values in its {i}th output "
            f"(gradient for input {i} of {node.op.name}, shape {tuple(d.shape)}). "
            f"The forward op {node.op.name} was created at:\n{where}")


def _collect(roots, leaves_too=False):
    """Count, for every node reachable from `roots`, how many graph edges point at it
    (and at every leaf tensor too, with `leaves_too`)."""
    deps = {}
    seen = set()
    stack = [n for n in roots]
    for n in roots:
        seen.add(n)
    while stack:
        node = stack.pop()
        for e in node.next:
            if e is not None and type(e) is not Tensor and not isinstance(e, Tensor):
                deps[e] = deps.get(e, 0) + 1
                if e not in seen:
                    seen.add(e)
                    stack.append(e)
            elif leaves_too and e is not None:
                deps[e] = deps.get(e, 0) + 1
    return deps


def _leads_to_targets(roots, capture):
    """For autograd.grad: node -> whether some target lies below it, i.e. whether its
    backward has to run. Nodes past the targets are left alone (their saved values too),
    so the rest of the graph can still be used. Iterative post-order: no recursion."""
    need = {}
    stack = [(n, False) for n in dict.fromkeys(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            need[node] = any(e is not None and (e in capture or need.get(e, False)) for e in node.next)
        elif node not in need:
            need[node] = False  # visited; the final value is set once its children are done
            stack.append((node, True))
            for e in node.next:
                if e is not None and not isinstance(e, Tensor) and e not in need:
                    stack.append((e, False))
    return need


def _leaf_hooks(leaf, g):
    hooks = getattr(leaf, "_hooks", None)
    if hooks:
        for h in tuple(hooks):
            r = h(g)
            if r is not None:
                g = r
    return g


def _accumulate_leaf(leaf, g, create_graph, exclusive):
    """Add g into leaf.grad. `exclusive`: g's array is referenced by nothing else (not a
    view, not the user's gradient, not given to another leaf), so it can be kept as is."""
    if g._array.dtype != leaf._array.dtype:
        g = g.to(leaf.dtype)
        exclusive = True
    if not create_graph:
        g = g.detach()
    if leaf._grad is None:
        leaf._grad = g if create_graph or exclusive else g.clone()
    else:
        leaf._grad = leaf._grad + g
    set_grad = getattr(dispatch.active_tracer(), "set_grad", None)
    if set_grad is not None:  # a compiled training step writes .grad back explicitly
        set_grad(leaf, leaf._grad)
    if POST_ACCUMULATE_HOOKS[0]:
        post = getattr(leaf, "_post_hooks", None)
        if post:
            for h in tuple(post):
                h(leaf)


def _finish_leaf(leaf, g, create_graph, shared):
    """Run the leaf's hooks on its total gradient and accumulate it into .grad."""
    g = _leaf_hooks(leaf, g)
    d = g._array
    _accumulate_leaf(leaf, g, create_graph, d.base is None and id(d) not in shared)
    shared.add(id(d))


def run_backward(roots, root_grads, retain_graph=False, create_graph=False, targets=None):
    """Propagate `root_grads` from `roots` (Tensors) through the graph.

    With `targets` (Tensors), gradients w.r.t. them are returned instead of being
    accumulated into `.grad` (that is `autograd.grad`).
    """
    tracer = dispatch.active_tracer()
    if tracer is not None:  # a compiled function that runs backward itself: a training step
        tracer.backward_ran = True
    capture = None
    if targets is not None:
        capture = {}
        for t in targets:
            capture[t.grad_fn if t.grad_fn is not None else t] = None
    buffers = {}
    leaves = {}  # leaf -> its gradient summed over every path; hooks and .grad see the total
    start = []

    def deliver(edge, gi, source=None):
        if isinstance(edge, Tensor):
            if capture is None or edge in capture:
                prev = leaves.get(edge)
                leaves[edge] = gi if prev is None else prev + gi
        else:
            parts = buffers
            if type(edge) is Gather:  # its parts stay apart, keyed by the node that sent each
                parts = buffers.get(edge)
                if parts is None:
                    parts = buffers[edge] = {}
                edge = source
            prev = parts.get(edge)
            parts[edge] = gi if prev is None else prev + gi

    for t, g in zip(roots, root_grads):
        if t.grad_fn is None:
            if not t._requires_grad:
                raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
            deliver(t, g)
        else:
            deliver(t.grad_fn, g)
            start.append(t.grad_fn)

    early = capture is None and POST_ACCUMULATE_HOOKS[0] > 0  # accumulate leaves as soon as complete
    deps = _collect(start, early)
    need = None if capture is None else _leads_to_targets(start, capture)
    ready = [n for n in dict.fromkeys(start) if deps.get(n, 0) == 0]
    shared = {id(g._array) for g in root_grads}  # arrays a .grad must not alias
    prev_mode = dispatch.grad_enabled()
    dispatch.set_grad_enabled(create_graph)  # this thread's mode only: other threads keep theirs
    anomaly = dispatch.anomaly_enabled()
    try:
        while ready:
            node = ready.pop()
            g = buffers.pop(node, None)
            if g is not None:
                if type(node) is not Gather and g._array.dtype != node.out_dtype:  # a Gather's g: its parts
                    g = g.to(node.out_dtype)
                if node.hooks:
                    for h in node.hooks:
                        r = h(g)
                        if r is not None:
                            g = r
                if node.retained is not None:
                    t = node.retained()
                    if t is not None:  # accumulates across backward calls, like a leaf's
                        rg = g if create_graph else g.detach()
                        t._grad = rg.clone() if t._grad is None else t._grad + rg
                if capture is not None:
                    if node in capture:
                        capture[node] = g
                    if not need[node]:
                        continue  # nothing asked for lies below: leave this part of the graph alone
                grads = node_input_grads(node, g)
                for i, (edge, gi) in enumerate(zip(node.next, grads)):
                    if edge is not None and gi is not None:
                        if anomaly:
                            _check_anomaly(node, i, gi)
                        deliver(edge, gi, node)
                if not retain_graph:
                    _release(node)
            for edge in node.next:
                if edge is not None and not isinstance(edge, Tensor):
                    left = deps[edge] - 1
                    deps[edge] = left
                    if left == 0:
                        ready.append(edge)
                elif early and edge is not None:
                    left = deps[edge] - 1
                    deps[edge] = left
                    if left == 0 and edge in leaves:
                        _finish_leaf(edge, leaves.pop(edge), create_graph, shared)
        for leaf, g in leaves.items():
            if capture is not None:
                capture[leaf] = _leaf_hooks(leaf, g)
            else:
                _finish_leaf(leaf, g, create_graph, shared)
    finally:
        dispatch.set_grad_enabled(prev_mode)
    if capture is not None:
        return [capture[t.grad_fn if t.grad_fn is not None else t] for t in targets]
    return None


__all__ = ["run_backward", "sum_to", "node_input_grads", "Node", "Gather"]
