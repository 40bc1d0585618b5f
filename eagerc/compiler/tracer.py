"""The tracer: watch one eager run at the dispatch point and write it down as a Graph.

Tracing runs the user's function on the real inputs with a `Tracer` installed as
`eagerc.dispatch.active_tracer()` (per thread), so the first call also returns the real result. Every op
(`apply`) and creation op (`create`) calls `record`; in-place updates call `mutate`;
anything that turns a traced tensor into a Python value calls `concretize`, which
stops the trace with a `GraphBreak` naming the user's file:line (never a silent
specialisation) -- or, when the caller asked for it (`split=True`, @compile), notes a
splittable break (`bool()`, `.item()`: breaks.py) and goes on recording, so the graph
is compiled in pieces with the Python value read between them.

Tensors that the function reads but did not receive as arguments or make itself are
"external" inputs, read by reference at call time: module parameters and buffers are
named by their module path (`layers.0.weight`), other captured tensors `const0`, ...

In-place updates are functionalised. `x.add_(1)` rebinds x to a new value; when the
target is a view (x[0].add_(1), x.view(-1).mul_(2)), the write is carried back to
its base with the view op's scatter (index_put, slice_scatter, reshape...), and every
other view of that base is re-derived from the new value the next time it is read.
An update of an argument or external becomes a mutation output of the graph. A write
the tracer cannot follow (into memory shared some other way) is a graph break.
"""
import contextlib
import os
import sys

import numpy as np

from .. import dispatch
from .._tensor import Tensor
from ..runtime.ir import Graph, Node, Value
from ..runtime.pytree import flatten
from ..ops.inplace import scatter_spec
from ..runtime.ownership import is_eagerc_file
from .guards import is_user_file

__all__ = ["Tracer", "GraphBreak", "trace", "tracing", "user_location", "tensor_leaves"]

_DTYPE_NAMES = {}   # numpy dtype -> its name in the IR (str(dtype))


class _NotReplayable(Exception):
    """A taped segment holds something Tracer.replay cannot repeat."""


class GraphBreak(RuntimeError):
    """The traced function did something a graph cannot hold: needed a concrete tensor value
    (item(), bool(), data-dependent sizes...) or wrote memory the tracer cannot follow."""

    def __init__(self, what, location, why=None, fullgraph=False):
        self.what = what
        self.location = location
        self.fullgraph = fullgraph
        why = why or "the compiled graph cannot depend on tensor values"
        tail = ("fullgraph=True makes every graph break an error" if fullgraph
                else "this call runs eagerly")
        super().__init__(f"{what} at {location}: {why}; {tail}")


def _outside_eagerc(f):
    while f is not None:
        fn = f.f_code.co_filename
        if not is_eagerc_file(fn) and not fn.startswith("<frozen"):
            return f
        f = f.f_back
    return None


def user_location():
    """file:line of the innermost frame outside eagerc's own package."""
    f = _outside_eagerc(sys._getframe(1))
    return None if f is None else f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"


def user_frame_info():
    """(full path, line, stacklevel for warnings.warn from the caller) of the user's frame."""
    f = sys._getframe(1)
    level = 1
    while f is not None:
        fn = f.f_code.co_filename
        if not is_eagerc_file(fn) and not fn.startswith("<frozen"):
            return fn, f.f_lineno, level
        f = f.f_back
        level += 1
    return None, None, 1


def _data_dependent_size():
    """The eagerc function the user called, if a concrete value is being taken to size an
    output (indexing.data_size: boolean masks, nonzero, masked_select, unique, bincount); else None."""
    f = sys._getframe(2)
    seen = False
    api = None
    while f is not None:
        fn = f.f_code.co_filename
        if not is_eagerc_file(fn):
            break
        if f.f_code.co_name == "data_size":
            seen = True
        api = f.f_code.co_name
        f = f.f_back
    if not seen:
        return None
    return {"__getitem__": "boolean-mask indexing", "_tensor_item": "boolean-mask indexing"}.get(api, api)


def tensor_leaves(obj, out):
    """Append the tensors of a (args, kwargs)-like structure to `out`, in the order
    runtime.pytree.flatten uses (tuples, lists, dict values in order); other objects
    are opaque."""
    if isinstance(obj, Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            tensor_leaves(v, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            tensor_leaves(v, out)
    return out


def _buffer_id(a):
    b = getattr(a, "base", None)
    while b is not None and getattr(b, "base", None) is not None:
        b = b.base
    return id(a if b is None else b)


def _shares(a, b):
    if type(a) is np.ndarray and type(b) is np.ndarray:
        return np.may_share_memory(a, b)
    try:
        from ..runtime.device import xp_of
        return bool(xp_of(a).may_share_memory(a, b))
    except Exception:  # pragma: no cover - unknown array type: assume it may
        return True


class Tracer:
    def __init__(self, external_names=None, fullgraph=False):
        self.names = dict(external_names or {})   # id(tensor) -> external name
        self.fullgraph = fullgraph
        self.broken = None    # the first GraphBreak, if the function needed a concrete value
        self.values = {}      # id(tensor) -> Value
        self.by_array = {}    # id(array) -> tensor the trace made around it (autograd re-wraps saved
                              # outputs in new Tensor objects: they read that tensor's value)
        self.keep = []        # every tensor seen: keeps ids unique while tracing (args first)
        self.inputs = []      # (kind, Value)
        self.input_of = {}    # id(tensor) -> input name, for args and externals
        self.externals = {}   # external name -> Tensor
        self.nodes = []
        self.mutations = {}   # input name -> Value (last write wins)
        self.module_stack = []
        self.modules = {}     # id(module) -> module, every module that ran
        self.rng_source = None  # (generator, words) of the random op about to be recorded
        self.rng = {}           # output value name -> (generator, words), in draw order
        self.views = {}       # id(view tensor) -> (parent tensor, op name, attrs, root tensor)
        self.view_ver = {}    # id(view tensor) -> version of its root when its value was made
        self.root_ver = {}    # id(root tensor) -> number of in-place updates so far
        self.buffers = None   # id(memory) -> [tensors]: built at the first in-place update
        self.grads = {}       # input name -> Tensor or None: .grad written (autograd, zero_grad)
        self.retryable = False  # the break asks for the next call to be traced again
        self.made_modules = set()  # ids of Modules constructed while tracing (theirs to set up)
        self.user_codes = {}   # code -> globals of every user function seen running (guards.py)
        self._frame_of = {}    # code -> the last frame of it seen (stops the stack walk early)
        self.base_frame = None  # the frame that called the traced function: the walk ends there
        self.optimizers = {}   # id(optimizer) -> see stepped()
        self.hyper_inputs = {}  # input name -> (optimizer, group index, key, element or None)
        self._hyper = {}       # (id(optimizer), group, key, element) -> Tensor
        self.array_inputs = {}  # input name -> (array, function making the input's array from it)
        self.symbolic = None   # a dynamic.Symbolic while tracing on synthetic sizes
        self.split = False     # bool()/item() are splittable breaks (breaks.Break), not the trace's end
        self.breaks = []       # [breaks.Break] in the order the function took them
        self.tape = None       # while a segment is taped (start_segment): what replay needs
        self.replay_location = None  # while replaying a segment: the location its node had
        self._n = 0
        self._nconst = 0

    # ------------------------------------------------------------ values
    def _new_value(self, t, name=None):
        if name is None:
            name = f"t{self._n}"
            self._n += 1
        d = t._array
        dt = d.dtype
        dtype = _DTYPE_NAMES.get(dt)
        if dtype is None:      # str(dtype) costs ~3 us, on every value of a trace
            dtype = _DTYPE_NAMES[dt] = str(dt)
        return Value(name, d.shape, dtype, "cpu" if type(d) is np.ndarray else t.device)

    def _keep(self, t):
        self.keep.append(t)
        if self.buffers is not None:
            self.buffers.setdefault(_buffer_id(t._array), []).append(t)

    def add_arg(self, t, name):
        v = self._new_value(t, name)
        self.values[id(t)] = v
        self.input_of[id(t)] = name
        self.by_array.setdefault(id(t._array), t)
        self._keep(t)
        self.inputs.append(("arg", v))
        return v

    def value_of(self, t):
        v = self.values.get(id(t))
        if v is None:
            made = self.by_array.get(id(t._array))
            if made is not None and made is not t:
                return self.value_of(made)
            name = self.names.get(id(t))
            if name is None:
                name = f"const{self._nconst}"
                self._nconst += 1
            v = self._new_value(t, name)
            self.values[id(t)] = v
            self.input_of[id(t)] = name
            self.by_array.setdefault(id(t._array), t)
            self._keep(t)
            self.inputs.append(("external", v))
            self.externals[name] = t
        elif self.root_ver and id(t) in self.views:
            v = self._fresh(t, v)
        return v

    def _location(self):
        """The user's file:line of the op being recorded; notes every user function on the
        stack on the way (their globals are guarded, see guards.py)."""
        f = sys._getframe(2)
        loc = None
        frame_of = self._frame_of
        base = self.base_frame
        while f is not None and f is not base:
            code = f.f_code
            if not is_user_file(code.co_filename):
                f = f.f_back
                continue
            if loc is None:
                loc = f"{os.path.basename(code.co_filename)}:{f.f_lineno}"
                if base is None:
                    break
            if frame_of.get(code) is f:
                break  # this frame and its callers were noted by an earlier op
            frame_of[code] = f
            self.user_codes.setdefault(code, f.f_globals)
            f = f.f_back
        return loc

    def _emit(self, op, inputs, attrs, like):
        """Append a node the user's code did not run as such (functionalisation)."""
        v = self._new_value(like)
        self.nodes.append(Node(op, inputs, attrs, v, user_location(),
                               self.module_stack[-1] if self.module_stack else None))
        return v

    def _fresh(self, t, v):
        """The value of view `t`, re-derived from its root if the root was updated since."""
        parent, op, attrs, root = self.views[id(t)]
        ver = self.root_ver.get(id(root), 0)
        if self.view_ver[id(t)] == ver:
            return v
        v = self._emit(op, [self.value_of(parent)], attrs, t)
        self.values[id(t)] = v
        self.view_ver[id(t)] = ver
        return v

    # ------------------------------------------------------------ events from dispatch
    def record(self, op, args, attrs, out):
        ins = [self.value_of(a) if isinstance(a, Tensor) else a for a in args]
        v = self._new_value(out)
        loc = self.replay_location or self._location()
        self.nodes.append(Node(op.name, ins, attrs, v, loc, self.module_stack[-1] if self.module_stack else None))
        if self.tape is not None:
            self.tape.append(("op", op, args, attrs, out, loc, self.rng_source))
        self.values[id(out)] = v
        self.by_array[id(out._array)] = out
        self._keep(out)
        if self.symbolic is not None and type(out) is Tensor:  # its sizes read as SymInts
            out.__class__ = self.symbolic.tensor_class
        if self.rng_source is not None:
            self.rng[v.name] = self.rng_source
            self.rng_source = None
        if op.view and args and isinstance(args[0], Tensor) and _shares(out._array, args[0]._array):
            parent = args[0]
            info = self.views.get(id(parent))
            root = parent if info is None else info[3]
            self.views[id(out)] = (parent, op.name, dict(attrs or {}), root)
            self.view_ver[id(out)] = self.root_ver.get(id(root), 0)

    def rng_draws(self):
        """[(value name, generator, words, seed)] for every random draw, in the order eager mode
        made them (a compiled call advances each generator by all of them, even if a pass dropped
        one); seed is the generator's seed when traced."""
        seeds = {n.out.name: n.attrs.get("seed") for n in self.nodes if n.out.name in self.rng}
        return [(name,) + src + (seeds.get(name),) for name, src in self.rng.items()]

    def mutate(self, target, result):
        """`target` now holds `result`'s value (an in-place op, already done eagerly)."""
        if self.broken is not None:
            return
        if self.tape is not None:  # (inplace.commit calls this right after its _bump named the op)
            vc = target._vc
            self.tape.append(("commit", target, result, vc[1] if vc is not None and len(vc) > 1 else None))
        rv = self.value_of(result)
        if id(target) not in self.values:  # an external tensor overwritten before any read (copy_):
            self.value_of(target)          # an input, or its write would be no mutation output
        td, rd = target._array, result._array
        if rd.dtype != td.dtype:  # commit casts into the target's dtype
            rv = self._emit("cast", [rv], {"dtype": str(td.dtype)}, target)
        if tuple(rd.shape) != tuple(td.shape):  # ... and broadcasts to its shape
            rv = self._emit("expand", [rv], {"shape": tuple(td.shape)}, target)
        # carry the write up the chain of views to the tensor that owns the memory
        cur, cur_val = target, rv
        info = self.views.get(id(target))
        while info is not None:
            parent, op, attrs, _ = info
            pv = self.value_of(parent)
            cur_val = self._scatter(op, attrs, pv, cur_val, parent)
            if cur_val is None:
                return self._break(f"an in-place update through a `{op}` view",
                                   "the write cannot be carried back to the viewed tensor")
            cur = parent
            info = self.views.get(id(cur))
        root = cur
        if self.buffers is None:
            self.buffers = {}
            for t in self.keep:
                self.buffers.setdefault(_buffer_id(t._array), []).append(t)
        for a in self.buffers.get(_buffer_id(td), ()):
            if a is target or a is root or a is result:
                continue
            info = self.views.get(id(a))
            if info is not None and info[3] is root:
                continue  # a view of the same root: re-derived when next read
            if _shares(a._array, td):
                name = self.input_of.get(id(a), "a tensor")
                return self._break(f"an in-place update of memory shared with {name}",
                                   "the tracer cannot follow that sharing (e.g. through .detach() or "
                                   "._array)")
        self.values[id(root)] = cur_val
        self.by_array[id(root._array)] = root
        self.by_array[id(td)] = target
        self.root_ver[id(root)] = self.root_ver.get(id(root), 0) + 1
        if target is not root:
            self.values[id(target)] = rv
            self.view_ver[id(target)] = self.root_ver[id(root)]
        self._keep(target)
        name = self.input_of.get(id(root))
        if name is not None:
            self.mutations[name] = cur_val

    def _scatter(self, op, attrs, base_val, view_val, base):
        """The value of `base` after its `op` view (with `attrs`) was given `view_val`."""
        spec = scatter_spec(op, attrs, base._array.shape)
        if spec is None:
            return None  # expand (and anything new): not invertible
        name, reads_base, attrs = spec
        return self._emit(name, [base_val, view_val] if reads_base else [view_val], attrs, base)

    def set_grad(self, t, g):
        """t.grad was set to g (a Tensor or None) by autograd or an optimizer: a compiled call
        writes it back (mutation target "<name>.grad"; None is listed in Graph.grads_none)."""
        if self.broken is not None:
            return
        self.value_of(t)
        name = self.input_of.get(id(t))
        if name is not None:
            if g is not None:
                self.value_of(g)
            self.grads[name] = g   # (its value is read at the end: grad clipping, unscale_ update it in place)

    def retry(self, why):
        """A break after which the next call should be traced again (e.g. an optimizer creating
        its state on the first step): this call runs eagerly, nothing is remembered for it."""
        if self.broken is None:
            self.broken = GraphBreak(why, user_location(), "the next call is traced again")
            self.retryable = True
        dispatch.set_tracer(None)

    def made_outside(self, tensors):
        """Tensors made while tracing around fresh arrays, not by a recorded op (an optimizer's
        state at its first step): external inputs read by reference at every call, like state
        made before the trace -- never a traced intermediate (their arrays may take the id of
        one the trace saw and that was freed since: `by_array` forgets it) nor a constant."""
        for t in tensors:
            if isinstance(t, Tensor) and id(t) not in self.values:
                self.by_array.pop(id(t._array), None)

    def side_effect(self, what, deferred=False, where=None, why=None):
        """The traced function did something a compiled call would not do again (set a module
        attribute, assign a global, print...) or read a value it could not replay (the clock,
        Python's random numbers): a graph break. `deferred`: found after the function
        returned (guards.Watch), at `where` (file:line) if known."""
        what = what if why else f"a Python side effect ({what})"
        why = why or "cached calls do not run Python code, so it would not happen again"
        if deferred:
            if self.broken is None:
                self.broken = GraphBreak(what, where or "some point of the traced call", why, self.fullgraph)
            return
        self._break(what, why)

    def hyper(self, opt, group, key, element=None):
        """An optimizer option (lr, betas[0], weight_decay...) as a 0-d float64 tensor that is a
        graph input read from opt.param_groups[group][key] at every call, so changing it needs
        no retrace (guards.py guards the rest of the optimizer)."""
        k = (id(opt), group, key, element)
        t = self._hyper.get(k)
        if t is not None:
            return t
        value = opt.param_groups[group][key]
        if element is not None:
            value = value[element]
        if isinstance(value, Tensor):
            value = value._array
        t = dispatch.wrap(np.asarray(float(value), np.float64))
        info = self.stepped(opt)
        info[1].setdefault(group, set()).add(key)
        n = list(self.optimizers).index(id(opt))
        name = f"optimizer{n}.param_groups.{group}.{key}" + ("" if element is None else f".{element}")
        self.names[id(t)] = name
        self.hyper_inputs[name] = (opt, group, key, element)
        self._hyper[k] = t
        return t

    def hyper_nonzero(self, opt, group, key, element=None):
        """Whether an option is nonzero, for a rule that skips a term when it is zero: guarded."""
        self.hyper(opt, group, key, element)
        value = opt.param_groups[group][key]
        if element is not None:
            value = value[element]
        nonzero = bool(float(value._array if isinstance(value, Tensor) else value))
        self.optimizers[id(opt)][2][(group, key, element)] = nonzero
        return nonzero

    def stepped(self, opt):
        """opt.step() ran while tracing: its param groups are guarded (guards.py). Returns
        (optimizer, {group: numeric keys read as inputs}, {(group, key, element): nonzero},
        [(parameter, state key, state tensor)], [step tensors updated as one])."""
        info = self.optimizers.get(id(opt))
        if info is None:
            info = self.optimizers[id(opt)] = (opt, {}, {}, [], [])
        return info

    def shared_steps(self, opt, steps):
        """A param group's step tensors were updated as one count (optim/rules.py TensorOps.step):
        guarded to hold equal values at every call."""
        self.stepped(opt)[4].append(steps)

    def optimizer_state(self, opt, p, key):
        """opt.state[p][key], read by a traced update rule: guarded to stay that very tensor
        (load_state_dict and hand edits replace state tensors)."""
        t = opt.state[p][key]
        self.stepped(opt)[3].append((p, key, t))
        if self.tape is not None:
            self.tape.append(("state", opt, p, key))
        return t

    # ------------------------------------------------------------ segments replayed
    def start_segment(self):
        """Tape what follows (recorded ops, in-place commits, optimizer state reads) until
        end_segment, to replay it later on other tensors (an optimizer's update of one parameter,
        replayed for each parameter alike: optim/rules.py TensorOps.each_alike)."""
        self.tape = []
        self._segment_start = (len(self.inputs), len(self.breaks))

    def end_segment(self, roles):
        """The taped events as a Segment whose holes are `roles` (the tensors that differ from one
        replay to the next); None when replaying could not repeat them exactly: the run broke or
        split, made an input that is not one of `roles` or an optimizer option, drew random
        numbers, or ran a creation op or an op on tensors inside containers."""
        tape, self.tape = self.tape, None
        n_inputs, n_breaks = self._segment_start
        if tape is None or self.broken is not None or len(self.breaks) != n_breaks:
            return None
        allowed = {self.input_of.get(id(t)) for t in roles}
        if any(v.name not in allowed and v.name not in self.hyper_inputs for _, v in self.inputs[n_inputs:]):
            return None
        role_of = {id(t): i for i, t in enumerate(roles)}
        made = {}   # id(op output) -> its index among the segment's op outputs

        def ref(x):
            if isinstance(x, Tensor):
                i = role_of.get(id(x))
                if i is not None:
                    return 0, i
                i = made.get(id(x))
                return (1, i) if i is not None else (2, x)  # (2: a tensor every replay shares)
            if x is None or type(x) in (bool, int, float, str):
                return 2, x
            raise _NotReplayable

        events = []
        try:
            for ev in tape:
                if ev[0] == "op":
                    _, op, args, attrs, out, loc, rng = ev
                    if not args or rng is not None:
                        return None
                    events.append((0, op, tuple(ref(a) for a in args), attrs, loc))
                    made[id(out)] = len(made)
                elif ev[0] == "commit":
                    if ev[3] is None:
                        return None
                    events.append((1, ref(ev[1]), ref(ev[2]), ev[3]))
                else:
                    events.append((2, ev[1], ref(ev[2]), ev[3]))
        except _NotReplayable:
            return None
        return events

    def replay(self, segment, roles):
        """Run a segment again with `roles` in its holes: the same dispatch.apply calls, commits
        and state reads, in order, so the nodes, inputs and mutations recorded (and the eager
        results) are those the code that was taped would make for these tensors; only the Python
        around those calls is skipped. Each node gets the location its taped one had."""
        from ..ops.inplace import commit
        apply = dispatch.apply
        outs = []

        def val(r):
            kind, x = r
            return roles[x] if kind == 0 else outs[x] if kind == 1 else x
        try:
            for ev in segment:
                if ev[0] == 0:
                    self.replay_location = ev[4]
                    outs.append(apply(ev[1], tuple(val(a) for a in ev[2]), ev[3]))  # (Node copies attrs)
                elif ev[0] == 1:
                    commit(val(ev[1]), val(ev[2]), ev[3])
                else:
                    self.optimizer_state(ev[1], val(ev[2]), ev[3])
        finally:
            self.replay_location = None

    def array_input(self, t, array, convert):
        """Tensor t was made from numpy array `array` inside the traced function: a graph input
        that `convert(array)` makes again at every call, so in-place changes of the array are
        seen (and the array object itself is guarded through the global or attribute holding it)."""
        name = f"array{len(self.array_inputs)}"
        self.names[id(t)] = name
        self.array_inputs[name] = (array, convert)

    def concretize(self, t, what, value=None):
        """`t` becomes the Python `value` (None: a list or array). Returns what the caller hands
        on: `value`, or for a splittable break a stand-in that notes how it is compared."""
        api = _data_dependent_size()
        if api is not None:
            self._break(f"a data-dependent size ({api}: its output shape depends on tensor values)",
                        "graph shapes are fixed when tracing")
            return value
        if value is not None and self.split and not self.fullgraph and \
                (self.symbolic is None or self.symbolic.forced is not None):
            from .breaks import note
            return note(self, t, f"{what} on a traced tensor", value)
        self._break(f"{what} on a traced tensor")
        return value

    def raw_write(self, t, opname):
        self._break(f"{opname} (an in-place write outside the recorded ops)",
                    "the tracer cannot see the write")

    def _break(self, what, why=None):
        """Stop recording: note where; under fullgraph raise, otherwise let the eager run go on
        (the function has side effects already; running it again would repeat them)."""
        loc = user_location()
        brk = GraphBreak(what, loc, why, self.fullgraph)
        if self.broken is None:
            self.broken = brk
        dispatch.set_tracer(None)  # the rest of this call runs plainly eagerly
        if self.fullgraph:
            raise brk

    # ------------------------------------------------------------ result
    def graph(self, result):
        leaves, tree = flatten(result, lambda x: isinstance(x, Tensor))
        outputs = [self.value_of(t) for t in leaves]
        mutations = [(name, v) for name, v in self.mutations.items()]
        mutations += [(name + ".grad", self.value_of(g)) for name, g in self.grads.items() if g is not None]
        # outputs that are an argument or external tensor itself (e.g. `return x` after x.add_(1)):
        # the compiled call returns that very tensor, like eager mode
        return Graph(self.inputs, self.nodes, outputs, tree, mutations,
                     grads_none=[name for name, g in self.grads.items() if g is None],
                     output_aliases={i: self.input_of[id(t)] for i, t in enumerate(leaves) if id(t) in self.input_of})


@contextlib.contextmanager
def tracing(tracer, modules=None, watch=None):
    """Install `tracer` at the dispatch point, with module hooks that keep
    tracer.module_stack (module paths from `modules`, id -> path) and tracer.modules.
    `watch` (a guards.Watch) looks for Python side effects of the traced code."""
    if dispatch.active_tracer() is not None:
        raise RuntimeError("eagerc.compile: nested tracing is not supported (a compiled function "
                           "called another while it was being traced)")
    if tracer.base_frame is None:
        tracer.base_frame = sys._getframe(2)  # the caller of `with tracing(...)`
    if watch is not None:
        watch.before()
    handles = _module_hooks(tracer, modules or {})
    dispatch.set_tracer(tracer)
    ok = False
    try:
        yield tracer
        ok = True
    finally:
        dispatch.set_tracer(None)
        for h in handles:
            h.remove()
        tracer._frame_of.clear()
        if watch is not None:
            if ok:
                watch.after(tracer)
            else:
                watch.uninstall()


def _module_hooks(tracer, paths):
    """Global forward hooks that keep tracer.module_stack = the path of the running module."""
    from ..nn.modules.module import register_module_forward_pre_hook, register_module_forward_hook

    def pre(module, args):
        if dispatch.active_tracer() is not tracer:  # the hooks are global: skip other threads' modules
            return
        tracer.modules[id(module)] = module
        tracer.module_stack.append(paths.get(id(module), type(module).__name__))

    def post(module, args, out):
        if dispatch.active_tracer() is tracer and tracer.module_stack:
            tracer.module_stack.pop()
    return [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]


def trace(fn, args, kwargs=None, external_names=None, modules=None, fullgraph=False, watch=None,
          symbolic=None, split=False):
    """Run fn(*args, **kwargs) eagerly while recording; returns (graph or None, result, tracer).

    The graph is None when the function needed a concrete tensor value or had a Python side
    effect `watch` saw (tracer.broken says where); the result is always the real eager
    result. Under fullgraph that raises GraphBreak. With `split`, bool() and item() are noted
    in tracer.breaks instead (breaks.py) and the graph holds the whole call.
    """
    kwargs = kwargs or {}
    tracer = Tracer(external_names, fullgraph)
    tracer.symbolic = symbolic  # (dynamic.Symbolic) sizes read as SymInts: a synthetic trace
    tracer.split = split
    for i, t in enumerate(tensor_leaves((args, kwargs), [])):
        tracer.add_arg(t, f"arg{i}")
    tracer.base_frame = sys._getframe()
    with tracing(tracer, modules, watch):
        result = fn(*args, **kwargs)
    tracer.split = False
    if tracer.broken is None:
        try:
            graph = tracer.graph(result)
        except TypeError as e:  # the return value holds something a graph cannot (an object)
            tracer.broken = GraphBreak(f"returning a value a graph cannot hold ({e})", user_location(),
                                       "outputs must be tensors, numbers, strings, None, tuples, lists "
                                       "or dicts", fullgraph)
    if tracer.broken is not None:
        if fullgraph:
            raise tracer.broken
        return None, result, tracer
    return graph, result, tracer


def root_modules(fn):
    """[(name prefix, Module)]: `fn` itself if it is a Module, the owner of a bound method, or
    the modules a plain function reads from its closure or globals (prefix "var.")."""
    from ..nn.modules.module import Module
    if isinstance(fn, Module):
        return [("", fn)]
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, Module):
        return [("", owner)]
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    found = {}
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, Module):
            found.setdefault(name, value)
    globs = getattr(fn, "__globals__", {})
    for name in code.co_names:
        value = globs.get(name)
        if isinstance(value, Module):
            found.setdefault(name, value)
    return [(f"{name}.", m) for name, m in found.items()]
