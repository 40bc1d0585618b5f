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
from ..dispatch import CustomOp, Node
from .._tensor import Tensor
from .formulas import ATTR, G, INPUT, SHAPE, GradAndInput, GradOnly

_FREED = "freed"  # node.saved after the graph was released

# How many tensors hold post-accumulate-grad hooks now; while 0, leaves are accumulated
# after the walk as always (see the module docstring).
POST_ACCUMULATE_HOOKS = [0]
# How many hooks live on leaf tensors (Tensor.register_hook); while 0 the engine does not look
# for them (reading an unset slot costs an AttributeError, 0.5 us per leaf).
LEAF_HOOKS = [0]

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
    kept = tuple(i + lead for i, n in enumerate(shape) if n == 1 and gshape[i + lead] != 1)
    if not kept:  # only leading dimensions were added (a bias): one sum gives the shape
        return g.sum(dim=tuple(range(lead)))
    g = g.sum(dim=tuple(range(lead)) + kept, keepdim=True)
    return g.reshape(shape) if lead else g


def node_input_grads(node, g):
    """Gradients for each input of `node` given the gradient of its output."""
    saved = node.saved
    if saved is _FREED:
        raise RuntimeError(_FREED_MSG)
    op = node.op
    params = op.grad_params
    if params is None:  # one function for the whole node
        return op.grads(node, g)
    shapes = node.shapes if op.broadcasts else None  # set only when some input was broadcast
    grads = []
    i = 0
    for edge, f, kinds in zip(node.next, op.grads, params):
        if edge is None or f is None:
            grads.append(None)
            i += 1
            continue
        form = type(kinds)
        if form is GradOnly:
            gi = f(g)
        elif form is GradAndInput:
            key = kinds[1][1]
            t = saved[key]  # _saved_input, inlined
            if isinstance(t, Tensor) and t._vc is not None and t._vc[0] != node.versions[key]:
                _saved_input(node, key)  # raises the error naming the op and the versions
            gi = f(g, t)
        else:
            args = []
            for kind, key in kinds:
                if kind == G:
                    args.append(g)
                elif kind == INPUT:
                    t = saved[key]
                    if isinstance(t, Tensor) and t._vc is not None and t._vc[0] != node.versions[key]:
                        _saved_input(node, key)
                    args.append(t)
                elif kind == ATTR:
                    args.append(node.attrs[key])
                elif kind == SHAPE:
                    args.append(node.shapes[key])
                else:
                    args.append(_saved_output(node))
            gi = f(*args)
        if shapes is not None and gi is not None and gi._array.shape != shapes[i]:
            gi = sum_to(gi, shapes[i])
        grads.append(gi)
        i += 1
    return grads


class Gather(Node):
    """A node whose gradient arrives in parts, kept apart instead of summed: its op's
    `grads(node, parts)` gets {feeding node: that node's gradient} and returns the input
    gradients. A split's pieces feed one Gather that joins their gradients once (one cat or
    stack, as PyTorch's SplitBackward / UnbindBackward do), where each piece scattering into
    a zero tensor of the whole's size for the engine to sum would be quadratic in the pieces."""
    __slots__ = ()


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
    (and at every leaf tensor too, with `leaves_too`). A node is seen once it has a count."""
    deps = dict.fromkeys(roots, 0)
    stack = list(deps)
    while stack:
        for e in stack.pop().next:
            if e is None:
                continue
            if isinstance(e, Node):
                n = deps.get(e)
                if n is None:
                    deps[e] = 1
                    stack.append(e)
                else:
                    deps[e] = n + 1
            elif leaves_too:
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


def _leaf_hooks(leaf, g, shared=None):
    """Run the leaf's tensor hooks on its total gradient. A hook may keep the tensor it was
    given (or the one it returns), so with `shared` their arrays are marked: .grad must not
    alias them (PyTorch's AccumulateGrad copies a gradient someone else holds)."""
    hooks = getattr(leaf, "_hooks", None) if LEAF_HOOKS[0] else None
    if hooks:
        for h in tuple(hooks):
            if shared is not None:
                shared.add(id(g._array))
            r = h(g)
            if r is not None:
                g = r
        if shared is not None:
            shared.add(id(g._array))
    return g


def _add_into(grad, g):
    """grad += g in place, as PyTorch's AccumulateGrad does without create_graph: no new
    tensor per backward, and a reference to `.grad` sees the sum. Only a plain writable numpy
    gradient of g's shape and dtype, without history, is updated so; False: add out of place.
    Never while traced (the caller adds out of place then, so the tracer sees the add)."""
    d = grad._array
    gd = g._array
    if type(d) is not np.ndarray or d.shape != gd.shape or d.dtype is not gd.dtype \
            or grad.grad_fn is not None or grad._requires_grad or not d.flags.writeable:
        return False
    np.add(d, gd, out=d)
    _bump(grad, "add_")  # whoever saved this .grad finds it changed (bump_version; no tracer here)
    return True


def _accumulate_leaf(leaf, g, create_graph, exclusive, tracer):
    """Add g into leaf.grad. `exclusive`: g's array is referenced by nothing else (not a
    view, not the user's gradient, not seen by a hook, not given to another leaf), so the
    first gradient is kept as is, without a copy, as PyTorch's AccumulateGrad steals a
    gradient nobody else holds. `tracer`: the thread's active tracer (None in eager mode)."""
    dtype = leaf._array.dtype
    if g._array.dtype is not dtype and g._array.dtype != dtype:
        g = g.to(leaf.dtype)
        exclusive = True
    old = leaf._grad
    if create_graph:
        leaf._grad = g if old is None else old + g
    else:
        if g._requires_grad or g._vc is not None:  # a fresh formula result needs no new Tensor
            g = g.detach()
        if old is None:
            leaf._grad = g if exclusive else g.clone()
        elif tracer is not None or not _add_into(old, g):  # traced: the tracer sees the add
            leaf._grad = old + g
    if tracer is not None:
        set_grad = getattr(tracer, "set_grad", None)
        if set_grad is not None:  # a compiled training step writes .grad back explicitly
            set_grad(leaf, leaf._grad)
    if POST_ACCUMULATE_HOOKS[0]:
        post = getattr(leaf, "_post_hooks", None)
        if post:
            for h in tuple(post):
                h(leaf)


def _finish_leaf(leaf, g, create_graph, shared, tracer):
    """Run the leaf's hooks on its total gradient and accumulate it into .grad."""
    if LEAF_HOOKS[0]:
        g = _leaf_hooks(leaf, g, shared)
    d = g._array
    _accumulate_leaf(leaf, g, create_graph, d.base is None and id(d) not in shared, tracer)
    shared.add(id(d))


def _deliver(buffers, leaves, capture, edge, gi, source):
    """Add gradient `gi` into what `edge` (a node or a leaf) receives. The engine's loop
    inlines the common case (a plain Node); leaves and Gather nodes come here."""
    if isinstance(edge, Tensor):
        if capture is None or edge in capture:
            prev = leaves.get(edge)
            leaves[edge] = gi if prev is None else prev + gi
        return
    parts = buffers
    if type(edge) is Gather:  # its parts stay apart, keyed by the node that sent each
        parts = buffers.get(edge)
        if parts is None:
            parts = buffers[edge] = {}
        edge = source
    prev = parts.get(edge)
    parts[edge] = gi if prev is None else prev + gi


def run_backward(roots, root_grads, retain_graph=False, create_graph=False, targets=None):
    """Propagate `root_grads` from `roots` (Tensors) through the graph.

    With `targets` (Tensors), gradients w.r.t. them are returned instead of being
    accumulated into `.grad` (that is `autograd.grad`).

    Per node this is the engine's whole cost, so the loop is written for it: one pass over a
    node's edges both delivers its input gradients and counts down its children's
    dependencies, a plain Node's gradient is summed inline, and hooks, retained grads,
    targets and anomaly checks are one slot or local test each when unused.
    """
    m = dispatch.modes()
    tracer = m.tracer
    if tracer is not None:  # a compiled function that runs backward itself: a training step
        tracer.backward_ran = True
    capture = None
    if targets is not None:
        capture = {}
        for t in targets:
            capture[t.grad_fn if t.grad_fn is not None else t] = None
    buffers = {}  # node -> its gradient summed over every path (a Gather: {source: part})
    leaves = {}  # leaf -> its gradient summed over every path; hooks and .grad see the total
    start = []
    shared = set()  # arrays a .grad must not alias: the caller's, hooks', then each one a leaf kept
    for t, g in zip(roots, root_grads):
        shared.add(id(g._array))
        fn = t.grad_fn
        if fn is None:
            if not t._requires_grad:
                raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
            _deliver(buffers, leaves, capture, t, g, None)
        else:
            _deliver(buffers, leaves, capture, fn, g, None)
            start.append(fn)

    early = capture is None and POST_ACCUMULATE_HOOKS[0] > 0  # accumulate leaves as soon as complete
    deps = _collect(start, early)
    need = None if capture is None else _leads_to_targets(start, capture)
    # one root has no edge into it; several may feed each other
    ready = start if len(start) < 2 else [n for n in dict.fromkeys(start) if deps[n] == 0]
    anomaly = m.anomaly
    if m.grad_enabled is not create_graph:  # this thread's mode only: other threads keep theirs
        dispatch.set_grad_enabled(create_graph)
    inner = dispatch.modes()
    try:
        while ready:
            node = ready.pop()
            g = buffers.pop(node, None)
            edges = node.next
            if g is None:  # no gradient reached this node: only count down its children
                grads = (None,) * len(edges)
            else:
                dtype = node.out_dtype
                if type(node) is not Gather and g._array.dtype is not dtype and g._array.dtype != dtype:
                    g = g.to(dtype)  # (a Gather's g is its parts)
                if node.hooks:
                    for h in node.hooks:
                        shared.add(id(g._array))  # the hook may keep g: no .grad may alias it
                        r = h(g)
                        if r is not None:
                            g = r
                            shared.add(id(g._array))
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
                op = node.op
                if op.grad_params is None:  # a node-level derivative (formulas give one per edge)
                    if len(grads) != len(edges):  # it may omit trailing Nones
                        grads = [*grads[:len(edges)], *(None,) * (len(edges) - len(grads))]
                    if type(op) is CustomOp and op.user_code:  # autograd.Function: the user's code
                        shared.update(id(gi._array) for gi in grads if gi is not None)  # may keep them
            i = 0
            for edge, gi in zip(edges, grads):
                if edge is not None:
                    if type(edge) is Node:
                        if gi is not None:
                            if anomaly:
                                _check_anomaly(node, i, gi)
                            prev = buffers.get(edge)
                            buffers[edge] = gi if prev is None else prev + gi
                        left = deps[edge] - 1
                        deps[edge] = left
                        if left == 0:
                            ready.append(edge)
                    elif isinstance(edge, Tensor):  # a leaf (_deliver, inlined)
                        if gi is not None:
                            if anomaly:
                                _check_anomaly(node, i, gi)
                            if capture is None or edge in capture:
                                prev = leaves.get(edge)
                                leaves[edge] = gi if prev is None else prev + gi
                        if early:
                            left = deps[edge] - 1
                            deps[edge] = left
                            if left == 0 and edge in leaves:
                                _finish_leaf(edge, leaves.pop(edge), create_graph, shared, tracer)
                    else:  # a Gather
                        if gi is not None:
                            if anomaly:
                                _check_anomaly(node, i, gi)
                            _deliver(buffers, leaves, capture, edge, gi, node)
                        left = deps[edge] - 1
                        deps[edge] = left
                        if left == 0:
                            ready.append(edge)
                i += 1
            if g is not None and not retain_graph and (node.saved is not None or node.out is not None):
                node.saved = _FREED  # the saved values go; a second backward raises _FREED_MSG
                node.out = None
        for leaf, g in leaves.items():
            if capture is not None:
                capture[leaf] = _leaf_hooks(leaf, g)
            else:
                _finish_leaf(leaf, g, create_graph, shared, tracer)
    finally:
        if dispatch.modes() is inner:
            if inner is not m:
                dispatch.restore_modes(m)  # nothing else changed meanwhile: the Modes from before
        else:  # a hook changed a mode: keep that, put grad mode back
            dispatch.set_grad_enabled(m.grad_enabled)
    if capture is not None:
        return [capture[t.grad_fn if t.grad_fn is not None else t] for t in targets]
    return None


# Last: the op families import this module (for _saved_input, sum_to) while the ops package loads.
from ..ops.inplace import _bump  # noqa: E402

__all__ = ["run_backward", "sum_to", "node_input_grads", "Node", "Gather"]
