"""Training under compile: trace the backward too, split the joint graph, run both compiled.

When a compiled function is called with grad enabled and some input or parameter
requires grad, tracing also watches a backward pass (derivatives are Tensor ops, so
the engine's formulas are recorded like any op). The joint graph is split:

- forward graph: the user's outputs, plus every forward value the backward reads
  ("saved" values), as outputs;
- backward graph: inputs are those saved values, the parameters it reads and one
  gradient per differentiable output; outputs are the gradients of every input and
  parameter that requires grad.

A compiled call runs the forward program and returns outputs carrying one autograd
Node; `backward()` through it runs the backward program. A backward with
`create_graph=True` (double backward, a gradient penalty) instead replays the traced
forward graph with eager ops (replay.py) and differentiates that record eagerly, so the
gradient it returns is itself differentiable.
"""
import sys
from typing import NamedTuple

import numpy as np

from ..runtime.dtypes import FLOATING_KINDS
from .. import dispatch
from .._tensor import Tensor
from ..runtime.ir import Graph
from ..runtime.pytree import flatten
from . import entries
from .tracer import Tracer, tracing

__all__ = ["trace_joint", "split_joint", "Joint", "JointEntry"]


class Joint(NamedTuple):
    """A joint trace split in two (split_joint), with what running the halves needs to know."""
    forward: Graph      # outputs: the user's, then the saved values
    backward: Graph     # inputs: the saved values, the tensors it reads, one gradient per diff output
    n_user: int         # the forward outputs that are the user's
    saved: list         # names of the saved values (the backward graph's inputs of the same names)
    grad_slots: list    # per gradient target: whether the backward outputs one (else it is None)
    n_diff: int         # differentiable outputs (the backward's inputs grad0, grad1, ...)


def trace_joint(fn, args, kwargs, external_names, module_paths, fullgraph=False, watch=None, symbolic=None,
                split=False):
    """Run fn eagerly with grad, then a traced autograd.grad over its differentiable outputs.
    `symbolic`: a dynamic.Symbolic for a trace on synthetic sizes (see tracer.trace).

    Returns (forward graph, Joint, result, tracer); (graph, None, ...) when there is no backward
    to trace (a training step, or nothing requires grad); (None, None, ...) on a graph break.
    The eager result keeps its own autograd graph (retain_graph=True), so the first call
    behaves exactly like eager mode. `split`: the forward may hold splittable breaks (breaks.py).
    """
    from ..autograd import grad as autograd_grad
    tracer = Tracer(external_names, fullgraph)
    tracer.symbolic = symbolic
    from .tracer import tensor_leaves
    leaves = tensor_leaves((args, kwargs), [])
    for i, t in enumerate(leaves):
        tracer.add_arg(t, f"arg{i}")
    tracer.base_frame = sys._getframe()
    tracer.split = split
    with tracing(tracer, module_paths, watch):
        result = fn(*args, **kwargs)
        tracer.split = False  # a value read in the backward ends the trace
        joint = None if tracer.broken is not None else _trace_backward(tracer, leaves, result, autograd_grad)
    if tracer.broken is not None:  # a concrete value, or a Python side effect the watch saw
        return None, None, result, tracer
    if joint is None:  # a training step (backward ran inside) or nothing to differentiate
        return tracer.graph(result), None, result, tracer
    split = split_joint(tracer, *joint)
    return split.forward, split, result, tracer


def _trace_backward(tracer, leaves, result, autograd_grad):
    """Trace autograd.grad of the differentiable outputs; the arguments of split_joint, or
    None when there is no backward to add."""
    if getattr(tracer, "backward_ran", False):  # a training step: nothing left to differentiate
        return None
    n_forward = len(tracer.nodes)
    outs, out_tree = flatten(result, lambda x: isinstance(x, Tensor))
    diff = [i for i, t in enumerate(outs) if t.requires_grad]
    if not diff:  # e.g. the function ran under no_grad: an ordinary graph
        return None
    targets = [t for t in leaves if t.requires_grad] + \
              [t for t in tracer.externals.values() if t.requires_grad]
    gouts = []
    for k, i in enumerate(diff):
        go = dispatch.wrap(np.ones_like(outs[i]._array))
        tracer.add_arg(go, f"grad{k}")
        gouts.append(go)
    grads = autograd_grad([outs[i] for i in diff], targets, gouts, retain_graph=True, allow_unused=True)
    if tracer.broken is not None:
        return None
    forward_values = [tracer.value_of(t) for t in outs]
    grad_values = [None if g is None else tracer.value_of(g) for g in grads]
    return n_forward, forward_values, out_tree, grad_values, len(diff)


def split_joint(tracer, n_forward, out_values, out_tree, grad_values, n_grad_outs):
    nodes = tracer.nodes
    fwd_nodes, bwd_nodes = nodes[:n_forward], nodes[n_forward:]
    fwd_defined = {n.out.name for n in fwd_nodes}
    inputs_by_name = {v.name: (k, v) for k, v in tracer.inputs}
    # forward values the backward reads: become extra forward outputs ("saved")
    saved, seen = [], set()
    bwd_inputs = []
    for n in bwd_nodes:
        for v in n.input_values():
            if v.name in seen:
                continue
            if v.name in fwd_defined:
                saved.append(v)
                seen.add(v.name)
            elif v.name in inputs_by_name:
                bwd_inputs.append(inputs_by_name[v.name])
                seen.add(v.name)
    for v in grad_values:  # a gradient can be a forward value or an input directly
        if v is not None and v.name not in seen:
            if v.name in fwd_defined:
                saved.append(v)
            elif v.name in inputs_by_name:
                bwd_inputs.append(inputs_by_name[v.name])
            seen.add(v.name)
    fwd_inputs = [(k, v) for k, v in tracer.inputs if not v.name.startswith("grad")]
    mutations = list(tracer.mutations.items())
    forward = Graph(fwd_inputs, fwd_nodes, list(out_values) + saved, out_tree, mutations)
    grad_inputs = [(k, v) for k, v in tracer.inputs if v.name.startswith("grad")]
    saved_inputs = [("arg", v) for v in saved]
    b_inputs = saved_inputs + [iv for iv in bwd_inputs if not iv[1].name.startswith("grad")] + grad_inputs
    present = [v for v in grad_values if v is not None]
    backward = Graph(_dedupe(b_inputs), bwd_nodes, present, {"tuple": [{"t": i} for i in range(len(present))]})
    return Joint(forward, backward, len(out_values), [v.name for v in saved], [v is not None for v in grad_values],
                 n_grad_outs)


def _dedupe(inputs):
    out, seen = [], set()
    for k, v in inputs:
        if v.name not in seen:
            seen.add(v.name)
            out.append((k, v))
    return out


class _Ctx:
    """What one compiled call's backward needs: its JointEntry, the backward program for this
    call's sizes (and its per-call attributes), the saved arrays, the (shape, dtype) of each
    differentiable output and which of them this is (`index` among the differentiable ones,
    `out` among the user's), and for a differentiable backward the call's input tensors and
    arrays (`leaves`, `inputs`)."""
    __slots__ = ("joint", "program", "overrides", "env", "like", "index", "out", "leaves", "inputs")

    def __init__(self, joint, program, overrides, env, like, index, out=None, leaves=None, inputs=None):
        self.joint, self.program, self.overrides, self.env, self.like, self.index = \
            joint, program, overrides, env, like, index
        self.out, self.leaves, self.inputs = out, leaves, inputs


def _differentiable_backward(ctx, g):
    """create_graph=True: replay the traced forward with eager ops from the call's own input
    tensors and parameters, then take this output's gradient through that record with eager
    autograd -- a gradient with a history, equal to eager mode's."""
    from ..autograd import grad as autograd_grad
    from .replay import replay
    joint = ctx.joint
    if ctx.leaves is None:
        raise RuntimeError("backward with create_graph=True through this compiled function is not supported: "
                           "call it uncompiled for higher-order gradients")
    env = {}
    for kind, v in joint.traced_forward.inputs:
        name = v.name
        if name.startswith("arg") and name[3:].isdigit():
            env[name] = ctx.leaves[int(name[3:])]
        elif name in joint.externals:
            env[name] = joint.externals[name]
        else:  # an input made at call time (an optimizer option, a numpy array): a constant here
            env[name] = dispatch.wrap(ctx.inputs[name])
    replay(joint.traced_forward, env)
    out = env[joint.traced_forward.outputs[ctx.out].name]
    targets = [ctx.leaves[i] for i in joint.target_args] + [joint.externals[n] for n in joint.target_externals]
    if not out.requires_grad:  # (the output does not depend on anything that requires grad)
        return [None] * len(targets)
    return list(autograd_grad([out], targets, [g], retain_graph=True, create_graph=True, allow_unused=True))


def _run_backward(node, g):
    ctx = node.attrs
    if dispatch.grad_enabled():
        return _differentiable_backward(ctx, g)
    env = dict(ctx.env)
    for k, (shape, dtype) in enumerate(ctx.like):
        if k == ctx.index:
            env[f"grad{k}"] = g._array
        else:  # other outputs' gradients are zero on this path (one node per output)
            env[f"grad{k}"] = np.zeros(shape, dtype=dtype)
    prof = dispatch.modes().profiler
    mutations = ctx.joint.backward.mutations
    if prof is None:
        outs, _ = entries.call(ctx.program, env, ctx.overrides, mutations)
    else:  # a profile is active in this thread: it times the backward program and its nodes
        outs, _ = prof.compiled("compiled_backward", None, entries.call, ctx.program, env, ctx.overrides,
                                mutations)
    it = iter(outs)
    return [dispatch.wrap(np.asarray(next(it))) if present else None for present in ctx.joint.grad_slots]


_OP = dispatch.CustomOp("CompiledFunction", _run_backward)   # the op of a compiled call's output Nodes


def attach_backward(outs, diff_indices, joint, program, overrides, saved_env, edges, leaves=None, inputs=None):
    """Give each differentiable output a Node that runs `joint`'s backward `program` (`leaves`,
    `inputs`: the call's tensors and input arrays, for a differentiable backward)."""
    like = [(outs[i]._array.shape, outs[i]._array.dtype) for i in diff_indices]
    for k, i in enumerate(diff_indices):
        t = outs[i]
        t._requires_grad = True  # (the slot: t may be an aliased non-leaf output)
        t.grad_fn = dispatch.custom_node(_OP, _Ctx(joint, program, overrides, saved_env, like, k, i, leaves, inputs),
                                         list(edges), t._array.dtype, saved=[])  # ([]: freed after use)


class JointEntry:
    """A compiled specialisation for calls that need autograd: forward + backward programs.
    entries.run runs the forward program like any other; `outputs` makes its results.

    `dynamic`: (forward, backward) entries.Dynamic of a symbolic joint graph (dynamic.py);
    the backward program is then the one for each call's sizes. compile_forward=False: the
    forward runs in pieces (breaks.py)."""

    def __init__(self, joint, backend, tracer, n_args, dynamic=None, compile_forward=True):
        from .backends import pipeline
        from .passes import optimize
        self.traced_forward = joint.forward     # replayed for a differentiable backward
        self.traced_backward = joint.backward   # as traced: dynamic.make_dynamic compares with it
        self.dynamic = dynamic
        if dynamic is None:
            self.forward = optimize(joint.forward, pipeline(backend)) if compile_forward else joint.forward
            self.backward = optimize(joint.backward, pipeline(backend))
            self.fwd_program = backend.compile(self.forward) if compile_forward else None
            self.bwd_program = backend.compile(self.backward)
        else:   # symbolic graphs; programs per binding (or one generic program) from the Dynamics
            fwd = dynamic[0]   # (None: a symbolic forward run in pieces, breaks.py)
            self.forward = fwd.graph if fwd is not None else joint.forward
            self.backward = dynamic[1].graph
            self.fwd_program, self.bwd_program = fwd and fwd.generic, dynamic[1].generic
        self.externals = dict(tracer.externals)
        self.n_user, self.saved_names, self.grad_slots, self.n_diff = \
            joint.n_user, joint.saved, joint.grad_slots, joint.n_diff
        saved = set(self.saved_names)
        self.bwd_reads = [v.name for k, v in joint.backward.inputs
                          if v.name not in saved and not v.name.startswith("grad")]
        # the order of gradient targets, as traced: args that require grad, then parameters
        self.target_args = [i for i in range(n_args) if tracer.keep[i].requires_grad]
        self.target_externals = [name for name, t in tracer.externals.items() if t.requires_grad]

    def outputs(self, outs, leaves, env, sizes=None):
        """The user's outputs of one forward run (`outs`: the program's arrays, the saved values
        after the user's), the differentiable ones carrying a Node that runs the backward program
        on the saved values and the inputs it reads (`env`, the forward program's inputs);
        `sizes`: the symbols' binding of this call when the graphs are symbolic."""
        from .entries import tensor_of
        from ..runtime.pytree import unflatten
        user = [tensor_of(a) for a in outs[:self.n_user]]
        bwd_env = dict(zip(self.saved_names, outs[self.n_user:]))
        for name in self.bwd_reads:
            bwd_env[name] = env[name]
        diff = [i for i, t in enumerate(user) if t._array.dtype.kind in FLOATING_KINDS][:self.n_diff]
        edges = [(leaves[i].grad_fn if leaves[i].grad_fn is not None else leaves[i]) for i in self.target_args]
        edges += [self.externals[name] for name in self.target_externals]
        if self.dynamic is None:
            program, overrides = self.bwd_program, None
        else:
            program, overrides = self.dynamic[1].program_for(sizes)
        attach_backward(user, diff, self, program, overrides, bwd_env, edges, leaves, env)
        return unflatten(self.forward.out_tree, user)
