"""The one dispatch point: every tensor operation, eager or traced, runs `apply`.

apply unwraps the arrays, runs the op's kernel, wraps the result, and -- when grad
mode is on and an input requires grad -- attaches a backward `Node`; when a tracer
is active it records the call. Define-by-run, autograd and tracing are three
consumers of this one event (a fourth, the profiler, times the kernel call while a
profile is active: one slot test otherwise). This is the hot path of eager mode: no per-call
dictionaries, no *args repacking beyond the inputs tuple, slots everywhere.

Modes are per thread. Grad mode, anomaly mode and the active tracer live in one small
`Modes` object per thread (as in PyTorch, where grad mode is thread-local): two threads
training two models, or a `no_grad` inference thread beside a training thread, must not
see each other's modes -- a process-wide flag silently drops or adds gradients in the
other thread. The object sits in a `contextvars.ContextVar`: `modes()` is one C call
that CPython answers from a per-thread cache, so `apply` pays one lookup per op and
then reads slots. A new thread starts from the defaults (grad on, no anomaly, no
tracer), like PyTorch. Because a `Modes` is never changed once published (a change
publishes a copy), a context copied into another thread (`asyncio.to_thread`,
`contextvars.copy_context().run`) starts from a snapshot and never shares later changes;
asyncio tasks, which run in their own context copies, get their own modes too.

Any new mode state (autocast, a profiler hook...) follows the same rule: add a slot to
`Modes` with its default and a getter/setter pair here (the setter calls `_set_mode`),
and read it through `modes()` -- never a module global, which every thread would share.
"""
import contextvars
import re

import numpy as np

from .runtime.dtypes import FLOATING_KINDS
from .runtime.ops.meta import Spec
from .runtime import dtypes
from .runtime.device import CPU, xp_for
from ._tensor import Tensor, wrap  # noqa: F401  (wrap: dispatch.wrap, for the layers above)
from .runtime.ownership import NUMERIC_WARNING_MESSAGE, user_stack

_ndarray = np.ndarray
_NUMERIC_WARNING = re.compile(NUMERIC_WARNING_MESSAGE)
_new = object.__new__


class Modes:
    """One thread's modes, read on every op. Never changed after `_set_mode` publishes it.

    `grad_enabled`: record backward Nodes; `anomaly`: record creation sites (detect_anomaly);
    `tracer`: the active tracer (eagerc.compiler sets it), None in plain eager mode;
    `profiler`: the active `eagerc.profiler.profile`, which runs and times each kernel
    (`profiler.op(name, kernel, arrays, attrs)`), None when nothing is profiled.
    `autocast`: the thread's `eagerc.amp.AutocastState` (which devices autocast, to which
    dtype), None when no autocast state was set (`apply` then tests nothing else).
    """
    __slots__ = ("grad_enabled", "anomaly", "tracer", "profiler", "autocast", "_derived")

    def __init__(self):
        self.grad_enabled = True
        self.anomaly = False
        self.tracer = None
        self.profiler = None
        self.autocast = None
        self._derived = {}  # (name, bool) -> the Modes that differs only there (see _set_mode)


_modes = contextvars.ContextVar("eagerc.dispatch.modes", default=Modes())
modes = _modes.get  # the calling thread's Modes: one cheap lookup, then read its slots


def _set_mode(name, value):
    """Publish a copy of this thread's Modes with `name` = value (other threads keep theirs).

    A flag flipped back and forth (grad mode around every backward and optimizer step) reuses
    the copies it made: each Modes remembers the ones that differ from it in one bool, both
    ways, so a toggle is a dict lookup. Non-bool slots (a tracer, a profiler) are never cached,
    so nothing keeps them alive."""
    old = modes()
    new = old._derived.get((name, value))
    if new is None:
        new = _new(Modes)
        for f in _STATE:
            setattr(new, f, getattr(old, f))
        setattr(new, name, value)
        new._derived = {}
        if type(value) is bool:
            old._derived[name, value] = new
            new._derived[name, getattr(old, name)] = old
    _modes.set(new)


_STATE = tuple(f for f in Modes.__slots__ if f != "_derived")
# Publish a Modes read earlier with modes() again, undoing every change since (Modes are never
# changed once published): the engine's way back from its grad-mode switch, one C call.
restore_modes = _modes.set


def grad_enabled():
    return modes().grad_enabled


def set_grad_enabled(mode):
    _set_mode("grad_enabled", bool(mode))


def anomaly_enabled():
    return modes().anomaly


def set_anomaly_enabled(mode):
    _set_mode("anomaly", bool(mode))


def active_tracer():
    """The tracer recording this thread's ops, or None (eager mode)."""
    return modes().tracer


def set_tracer(tracer):
    _set_mode("tracer", tracer)


def active_profiler():
    """The profile timing this thread's ops and compiled calls, or None."""
    return modes().profiler


def set_profiler(profile):
    _set_mode("profiler", profile)


def autocast_state():
    """This thread's `eagerc.amp.AutocastState`, or None (no autocast, default dtypes)."""
    return modes().autocast


def set_autocast_state(state):
    _set_mode("autocast", state)


class Node:
    """A backward step: the op that ran, what its derivative needs, and where grads go.

    `next` has one edge per input: the input's grad_fn Node, the input Tensor itself
    when it is a leaf that requires grad (gradients accumulate into it), or None.
    A Node never references its own output tensor, so dropping the outputs frees the
    graph; an output the derivative needs is kept as its array (`out`).
    """
    __slots__ = ("op", "attrs", "next", "saved", "versions", "shapes", "out", "out_vc",
                 "out_dtype", "hooks", "retained", "created_at", "__weakref__")

    def name(self):
        n = self.op.name
        if "_" in n or n.islower():  # declared ops are snake_case; Function classes are CamelCase
            n = "".join(part.capitalize() for part in n.split("_"))
        return n + "Backward0"

    @property
    def next_functions(self):
        return tuple((e, 0) for e in self.next)

    def __repr__(self):
        return f"<{self.name()}>"

    def register_hook(self, fn):
        raise NotImplementedError("register hooks on tensors (Tensor.register_hook), not on grad_fn")


def _fmt_specs(arrays):
    return [Spec(a.shape, dtypes.from_np(a.dtype)) if hasattr(a, "shape") and hasattr(a, "dtype")
            else a for a in arrays]


def explain_failure(op, arrays, attrs, exc):
    """Turn a kernel's exception into an error naming the op, the inputs and the rule."""
    devices = {type(a).__module__.split(".")[0] for a in arrays if hasattr(a, "shape")}
    if len(devices) > 1:
        return RuntimeError(
            f"{op.name}: expected all tensors to be on the same device, but found tensors on "
            f"cpu and cuda ({', '.join(str(getattr(a, 'shape', a)) for a in arrays)}); "
            "move them with .to(device) first")
    try:
        specs = _fmt_specs(arrays)
        op.meta(*specs, **(attrs or {}))
    except (RuntimeError, TypeError, ValueError, IndexError) as rule_error:
        return rule_error
    if str(exc).startswith(op.name + ":"):  # the kernel already explained itself
        return exc
    from .runtime.ops.meta import describe
    return type(exc)(f"{op.name}: failed on inputs {describe(_fmt_specs(arrays))}"
                     f"{' with ' + repr(attrs) if attrs else ''}: {exc}")


def quiet_rerun(exc, fn, *args, **kwargs):
    """fn(*args, **kwargs) again, with numpy's floating-point checks off, when `exc` is only
    numpy's floating-point RuntimeWarning turned into an error by the user's filters
    (`warnings.simplefilter("error")` after `import eagerc`, pytest's `filterwarnings = error`):
    PyTorch is silent there (the result is inf or nan). None for a real failure. `fn` must be
    pure (a kernel; a compiled program without in-place updates), and only this error path
    pays for it (runtime/ownership.py's filter covers the rest)."""
    if not isinstance(exc, RuntimeWarning) or not _NUMERIC_WARNING.search(str(exc)):
        return None
    with np.errstate(all="ignore"):
        return fn(*args, **kwargs)


def apply(op, args, attrs=None):
    """Run `op` on `args` (Tensors and Python scalars) with attributes `attrs`."""
    m = modes()
    if m.autocast is not None and op.autocast is not None:  # the op is on an autocast list
        args = m.autocast.cast_args(op, args)  # casts recorded like any op (eagerc/amp)
    if len(args) == 2:  # unrolled for the common arities: a comprehension is a call of its own
        a, b = args
        arrays = [a._array if isinstance(a, Tensor) else a, b._array if isinstance(b, Tensor) else b]
    elif len(args) == 1:
        a = args[0]
        arrays = [a._array if isinstance(a, Tensor) else a]
    else:
        arrays = [a._array if isinstance(a, Tensor) else a for a in args]
    kernel = op.cpu if type(arrays[0]) is _ndarray else _kernel_for(op, arrays)
    try:
        if m.profiler is None:
            out = kernel(*arrays) if attrs is None else kernel(*arrays, **attrs)
        else:  # a profile is active in this thread: it runs and times the kernel
            out = m.profiler.op(op.name, kernel, arrays, attrs)
    except Exception as e:  # numpy's message names no op: explain it with the op's rule
        out = quiet_rerun(e, kernel, *arrays) if attrs is None else quiet_rerun(e, kernel, *arrays, **attrs)
        if out is None:
            raise explain_failure(op, arrays, attrs, e) from None
    if type(out) is not _ndarray and kernel is op.cpu:  # numpy returns scalars for 0-d results
        out = np.asarray(out)

    t = _new(Tensor)
    t._array = out
    t._grad = None
    t._vc = None
    t._requires_grad = False
    t.grad_fn = None
    if m.grad_enabled and op.differentiable:
        for a in args:
            if isinstance(a, Tensor) and a._requires_grad:
                if out.dtype.kind in FLOATING_KINDS:
                    t._requires_grad = True
                    t.grad_fn = _make_node(op, args, attrs, t, out, m.anomaly)
                break
    if op.view:
        src = args[0]
        vc = src._vc
        if vc is None:
            vc = src._vc = [0]
        t._vc = vc
        t._base = src
        t._view = (op.name, attrs)  # how t views src: an in-place op on t rewrites src's history
    if m.tracer is not None:
        m.tracer.record(op, args, attrs, t)
    return t


def _kernel_for(op, arrays):
    """The kernel for the arrays' module: cupy arrays get the cupy specialisation."""
    for a in arrays:
        if isinstance(a, _ndarray):
            return op.cpu
        if hasattr(a, "__cuda_array_interface__"):
            from .runtime.device import xp_of
            return op.kernel(xp_of(a))
    return op.cpu


SAVE_ALL = "all"  # save_table of a node-level derivative that reads every input
_SHAPES_ONLY = ((), False, True)  # variadic ops (cat, stack, einsum...) need input shapes only


def _make_node(op, args, attrs, out_tensor, out, anomaly):
    node = _new(Node)
    node.op = op
    node.attrs = attrs
    if len(args) == 1:  # the one input requires grad (apply checked): no loop, mask 1
        a = args[0]
        fn = a.grad_fn
        edges = [a if fn is None else fn]
        mask = 1
    else:
        mask = 0
        edges = []
        bit = 1
        for a in args:
            if isinstance(a, Tensor) and a._requires_grad:
                mask |= bit
                fn = a.grad_fn
                edges.append(a if fn is None else fn)
            else:
                edges.append(None)
            bit <<= 1
    node.next = edges
    table = op.save_table
    if table is None:
        save_inputs, save_out, save_shapes = _SHAPES_ONLY
    elif table is SAVE_ALL:
        save_inputs, save_out, save_shapes = range(len(args)), False, True
    else:
        save_inputs, save_out, save_shapes = table[mask]
    if save_inputs:
        saved = [None] * len(args)
        versions = [0] * len(args)
        for i in save_inputs:
            a = args[i]
            saved[i] = a
            if isinstance(a, Tensor) and a._vc is not None:
                versions[i] = a._vc[0]
        node.saved = saved
        node.versions = versions
    else:
        node.saved = None
        node.versions = None
    shapes = None
    if save_shapes:
        shapes = [args[0]._array.shape] if len(args) == 1 else \
            [a._array.shape if isinstance(a, Tensor) else None for a in args]
    elif op.broadcasts:  # only needed when some input was broadcast
        oshape = out.shape
        for a in args:
            if isinstance(a, Tensor) and a._array.shape != oshape:
                shapes = [a._array.shape if isinstance(a, Tensor) else None for a in args]
                break
    node.shapes = shapes
    if save_out:
        node.out = out
        node.out_vc = out_tensor._vc = [0]
    else:
        node.out = None
        node.out_vc = None
    node.out_dtype = out.dtype
    node.hooks = None
    node.retained = None
    node.created_at = user_stack() if anomaly else None  # where the op was made, for anomaly mode
    return node


class CustomOp:
    """Stands in for an OpDef on a custom_node: the engine reads its name and `grads(node, g)`.
    `user_code`: grads runs the user's code (autograd.Function.backward), which may keep the
    gradients it returns, so the engine never stores them as a leaf's .grad without a copy."""
    __slots__ = ("name", "grads", "grad_params", "user_code")

    def __init__(self, name, grads, user_code=False):
        self.name, self.grads, self.grad_params, self.user_code = name, grads, None, user_code


def custom_node(op, attrs, edges, out_dtype, saved=None, versions=None, created_at=None, cls=Node):
    """A Node (of class `cls`: a Gather, engine.py) whose derivative is not a registered op's
    (autograd.Function, a compiled backward, a split's join): `op` is a CustomOp, `attrs`
    whatever its `grads` reads."""
    node = _new(cls)
    node.op, node.attrs, node.next, node.saved, node.versions = op, attrs, edges, saved, versions
    node.shapes = node.out = node.out_vc = node.hooks = node.retained = None
    node.out_dtype, node.created_at = out_dtype, created_at
    return node


def create(op, attrs, dev):
    """Run a creation op (no tensor inputs) on device `dev`; recorded like any op."""
    kernel = op.cpu if dev is CPU or dev.type == "cpu" else op.kernel(xp_for(dev))
    m = modes()
    t = wrap(kernel(**attrs) if m.profiler is None else m.profiler.op(op.name, kernel, (), attrs))
    tracer = m.tracer
    if tracer is not None:
        tracer.record(op, (), attrs, t)
    return t
