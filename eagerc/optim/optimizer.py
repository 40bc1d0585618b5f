"""The Optimizer base: parameter groups, per-parameter state, state_dict round trips.

Subclasses name their update rule (optim/rules.py), written once: eagerly it runs on
the raw arrays with in-place ufuncs (`out=`) into shared scratch buffers, which is
several times faster than building Tensor temporaries through the dispatcher (an Adam
step is a dozen numpy calls per parameter and allocates nothing); while a compiled
training step is traced it runs as recorded Tensor ops. Updates write into the
parameter's array itself, so views and other references see them, and each update bumps
the parameter's version counter like any in-place op.

The state is PyTorch's: `state[p]` is a dict of Tensors (and `step` is a float32
0-d Tensor), and `state_dict()` / `load_state_dict()` use PyTorch's layout:

    {"state": {0: {"step": tensor(3.), "exp_avg": ..., ...}, ...},
     "param_groups": [{"lr": 0.001, ..., "params": [0, 1, 2]}, ...]}

where parameters are numbered in the order they appear across the groups.
"""
import copy
from collections import defaultdict
from itertools import chain

import numpy as np

from ..runtime.dtypes import FLOATING_KINDS
from ..autograd.grad_mode import enable_grad, no_grad
from ..dispatch import wrap
from .. import dispatch
from ..ops.inplace import bump_version
from ..runtime.device import xp_of
from .._tensor import Tensor
from .rules import ArrayOps, AutogradOps, EagerOptions, TensorOps, TracedOptions, new_step

__all__ = ["Optimizer", "required"]


class _Required:
    """The default of an argument every parameter group must give (e.g. an old SGD's lr)."""

    def __repr__(self):
        return "<required parameter>"


required = _Required()


def array_module(a):
    """numpy for numpy arrays, cupy otherwise (cheap: one type check on the CPU path)."""
    return np if type(a) is np.ndarray else xp_of(a)


class Optimizer:
    """Base class of all optimizers.

    params: an iterable of Tensors, or of dicts (parameter groups) each with a
    "params" entry and any per-group options overriding `defaults`.
    """

    def __init__(self, params, defaults):
        self.__dict__["_version"] = 0
        self.defaults = defaults
        self.state = defaultdict(dict)
        self.param_groups = []
        self._scratch_cache = {}
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors "
                            f"or dicts, but got {type(params).__name__}")
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def __setattr__(self, name, value):
        # compiled training steps guard on this count (eagerc/compiler/guards.py): replacing
        # param_groups or state (load_state_dict does) retraces them
        self.__dict__["_version"] = self.__dict__.get("_version", 0) + 1
        object.__setattr__(self, name, value)

    # ------------------------------------------------------------ groups
    def add_param_group(self, param_group):
        """Add a group of parameters (a dict with "params") with its own options."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but "
                            "the ordering of tensors in sets will change between runs. Please use a "
                            "list instead.")
        else:
            params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is "
                                f"{type(p).__name__}")
            if p.grad_fn is not None and not self.defaults.get("differentiable") and not p.retains_grad:
                raise ValueError("can't optimize a non-leaf Tensor")
        if len({id(p) for p in params}) != len(params):
            raise ValueError("optimizer contains a parameter group with duplicate parameters")
        group = dict(param_group)
        group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization "
                                 f"parameter {name}")
            group.setdefault(name, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        if dispatch.active_tracer() is not None:
            dispatch.active_tracer().side_effect(f"{type(self).__name__}.add_param_group")
        self.param_groups.append(group)
        self.__dict__["_version"] = self.__dict__.get("_version", 0) + 1

    # ------------------------------------------------------------ gradients
    def zero_grad(self, set_to_none=True):
        """Reset the gradients of all optimized tensors (to None by default, like PyTorch)."""
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if set_to_none:
                    p.grad = None
                    if dispatch.active_tracer() is not None:
                        dispatch.active_tracer().set_grad(p, None)
                elif dispatch.active_tracer() is not None:
                    g.zero_()  # recorded, so a compiled step zeroes it too
                else:
                    if g.grad_fn is not None:
                        g.grad_fn = None
                    g.requires_grad = False
                    if type(g._array) is np.ndarray and not g._array.flags.writeable:
                        g._array = np.zeros_like(g._array)
                    g._array.fill(0)
                    bump_version(g, "zero_")

    # ------------------------------------------------------------ the update
    # A subclass names its rule (optim/rules.py: written once, run eagerly on raw arrays and
    # traced as Tensor ops), the state it creates before a first step (`_init_state`), the
    # state a traced step needs, and the state its rule makes from the gradient at a first
    # step (`_first_step_state`: SGD's momentum buffer). A traced first step creates all of it
    # and is traced: see _traced_step.
    _bump = "add_"      # the in-place op a step counts as, for version counters
    _scratch_buffers = 2  # work arrays per parameter shape the eager rule writes into
    _state_shaped_like_params = True  # load_state_dict checks state tensors' shapes (not LBFGS)

    def _rule(self, ops, o, params):
        raise NotImplementedError(f"{type(self).__name__} has no update rule: override step() or _rule()")

    def _init_state(self, p, group):
        """Create the zero-initialised state the rule reads (at a first step, eager or traced)."""

    def _traced_state(self, group):
        """The state keys a traced step of this group needs."""
        return ()

    def _first_step_state(self, group):
        """The state keys this group's rule makes from the gradient at a first step (eagerly
        `ops.new_state`), which a traced first step makes zero before the rule; the rule, traced
        as the general one, then sets its first-step value in that call with `ops.first_step`."""
        return ()

    def _new_state(self, p, *zeros):
        """A first step's state for p: a step counter (CPU float32, as PyTorch keeps it) and
        a zero tensor shaped like p for each name in `zeros`."""
        state = self.state[p]
        state["step"] = new_step()
        return self._zero_state(p, zeros)

    def _zero_state(self, p, keys):
        """state[p][key] = a zero tensor shaped like p, for each key; returns state[p]."""
        d = p._array
        xp = array_module(d)
        state = self.state[p]
        for key in keys:
            state[key] = wrap(xp.zeros_like(d))
        return state

    def step(self, closure=None):
        """One update of every parameter that has a gradient (its rule, optim/rules.py)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            if group.get("capturable"):
                self._check_capturable(group)
        tracer = dispatch.active_tracer()
        if self.defaults.get("differentiable"):
            if tracer is not None:
                tracer.side_effect(f"{type(self).__name__}.step with differentiable=True",
                                   why="a differentiable step runs eagerly, under autograd")
            return self._differentiable_step(loss)
        if tracer is not None and self._traced_step(tracer):
            return loss
        ops = ArrayOps(self)
        for group in self.param_groups:
            ops.group = group
            self._rule(ops, EagerOptions(group), group["params"])
        return loss

    def _differentiable_step(self, loss):
        """differentiable=True (as in PyTorch): the rule as Tensor ops with grad mode on, so
        autograd records the update (parameters may then be non-leaf tensors)."""
        ops = AutogradOps(self)
        with enable_grad():
            for group in self.param_groups:
                ops.group = group
                self._rule(ops, EagerOptions(group), group["params"])
        return loss

    def _check_capturable(self, group):
        """capturable=True keeps the step count on the parameters' device for CUDA graphs;
        PyTorch refuses it for CPU parameters, and so does eagerc (on CUDA it changes
        nothing: eagerc's compiled steps already read the count as a graph input)."""
        for p in group["params"]:
            if p._grad is not None and p.device.type == "cpu":
                raise RuntimeError(f"{type(self).__name__}: capturable=True needs the parameters on a CUDA "
                                   f"device (as in PyTorch), but one of shape {tuple(p.shape)} is on the "
                                   "cpu; leave capturable=False")

    def _traced_step(self, tracer):
        """The step as recorded Tensor ops, or False when this step runs eagerly.

        A first step (a parameter with a gradient and no state yet) creates its state here as
        the eager first step does, before the rule (`_init_state`: zeros, Rprop's step sizes
        and ASGD's eta = lr...), and the rule is then the general one: the tracer reads the new
        tensors by reference from this call on, exactly like state made before the trace, so
        the first call is already a traced call whose graph holds for every later one.

        State the eager rule makes from the gradient at its first step (`_first_step_state`:
        SGD's momentum buffer is a copy of the gradient, not momentum * 0 + (1 - dampening) *
        g) is made zero here too, and the rule, recorded as the general one, then gives it its
        first-step value in this call only (`ops.first_step`): the graph is what every later
        call runs -- a compiled call never is a first step, since its guards hold the state
        this step made -- and this call's values are the eager first step's, bit for bit. A
        key the traced rule needs that neither makes (a hand-edited state dict) runs this step
        eagerly and asks for the next call to be traced again (`tracer.retry`)."""
        state = self.state
        first = []   # (parameter, the first-step state keys this step makes for it)
        for group in self.param_groups:
            keys = self._traced_state(group)
            if not keys:
                continue
            made = self._first_step_state(group)
            for p in group["params"]:
                if p._grad is None:
                    continue
                s = state[p]
                if not s:  # as ArrayOps.each does before the rule, eagerly
                    self._init_state(p, group)
                    tracer.made_outside(s.values())
                new = [k for k in made if k not in s]
                if new:
                    first.append((p, new))
                if any(k not in s and k not in new for k in keys):
                    tracer.retry(f"{type(self).__name__}.step creates its state on the first step")
                    return False
        for p, new in first:
            tracer.made_outside([self._zero_state(p, new)[k] for k in new])
        tracer.stepped(self)
        ops = TensorOps(tracer, self, frozenset(id(p) for p, _ in first))
        with no_grad():
            for i, group in enumerate(self.param_groups):
                ops.begin_group()
                self._rule(ops, TracedOptions(tracer, self, i), group["params"])
        return True

    @staticmethod
    def _closure_loss(closure):
        if closure is None:
            return None
        with enable_grad():
            return closure()

    def _scratch(self, a, n):
        """n reusable work arrays shaped like `a` (shared by all params of one shape)."""
        if type(a) is np.ndarray:
            key = (a.shape, a.dtype)
        else:
            key = (a.shape, a.dtype, a.device.id)
        bufs = self._scratch_cache.get(key)
        if bufs is None or len(bufs) < n:
            xp = array_module(a)
            bufs = self._scratch_cache[key] = [xp.empty_like(a) for _ in range(n)]
        return bufs

    # ------------------------------------------------------------ state dicts
    def state_dict(self):
        """{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}.

        The state's tensors are the optimizer's own (not copies), as in PyTorch:
        save or clone them before the next step if you need a snapshot."""
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                if id(p) not in index:
                    index[id(p)] = len(index)
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {}
        for p, s in self.state.items():
            if isinstance(p, Tensor) and id(p) in index:
                state[index[id(p)]] = dict(s)
        state = dict(sorted(state.items()))
        for k, s in self.state.items():  # entries not keyed by a parameter (rare) go last
            if not isinstance(k, Tensor):
                state[k] = s
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore from `state_dict()` output; state tensors are copied onto each
        parameter's device (and float state to its dtype), never shared with the dict."""
        if not isinstance(state_dict, dict) or "param_groups" not in state_dict or "state" not in state_dict:
            raise ValueError("optimizer state_dict must be a dict with 'state' and 'param_groups' keys")
        groups = self.param_groups
        saved_groups = state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError(f"loaded state dict has a different number of parameter groups "
                             f"({len(saved_groups)}) than the optimizer ({len(groups)})")
        for i, (g, sg) in enumerate(zip(groups, saved_groups)):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError(f"loaded state dict contains a parameter group that doesn't match the "
                                 f"size of optimizer's group: group {i} has {len(sg['params'])} params "
                                 f"in the state dict and {len(g['params'])} in the optimizer")
        id_map = {}
        for old, p in zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)):
            id_map[_int_key(old)] = p

        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            k = _int_key(k)
            if k in id_map:
                p = id_map[k]
                state[p] = {name: _cast_state(p, k, name, value, self._state_shaped_like_params)
                            for name, value in v.items()}
            else:
                state[k] = copy.deepcopy(v)
        new_groups = []
        for g, sg in zip(groups, saved_groups):
            ng = {k: copy.deepcopy(v) for k, v in sg.items() if k != "params"}
            for k, v in self.defaults.items():  # options the saving version did not have
                ng.setdefault(k, v)
            ng["params"] = g["params"]
            new_groups.append(ng)
        self.state = state
        self.param_groups = new_groups

    # ------------------------------------------------------------ misc
    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("_scratch_cache", {})
        self.__dict__.setdefault("_version", 0)

    def __repr__(self):
        lines = [self.__class__.__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(group):
                if key != "params":
                    lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)


def _int_key(k):
    """State dict keys are ints; accept their string form too (e.g. from a JSON file)."""
    if isinstance(k, str) and k.lstrip("-").isdigit():
        return int(k)
    return k


def _cast_state(p, index, name, value, check_shape=True):
    """A copy of one state value, on p's device; float tensors in p's dtype (not step)."""
    if isinstance(value, Tensor):
        data = value._array
        if name != "step":
            if check_shape and data.ndim and tuple(data.shape) != tuple(p._array.shape):
                raise ValueError(f"loaded state dict has state[{index}][{name!r}] of shape "
                                 f"{tuple(data.shape)}, but the parameter it belongs to has shape "
                                 f"{tuple(p._array.shape)}")
            xp = array_module(p._array)
            if data.dtype.kind in FLOATING_KINDS and p._array.dtype.kind in FLOATING_KINDS and data.dtype != p._array.dtype:
                data = data.astype(p._array.dtype)
            if xp is np:
                data = np.array(data if type(data) is np.ndarray else data.get(), copy=True)
            else:
                data = xp.array(data, copy=True)
        else:  # step stays a CPU tensor
            data = np.array(data if type(data) is np.ndarray else data.get(), copy=True)
        return wrap(data)
    if isinstance(value, dict):
        return {k: _cast_state(p, index, k, v, check_shape) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_state(p, index, name, v, check_shape) for v in value)
    return copy.deepcopy(value)
