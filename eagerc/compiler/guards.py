"""Guards: what a trace read from Python besides its arguments, and the cheap check that
it all still holds before a compiled program runs.

A trace runs the user's Python once and specialises on every Python value it reads. The
argument-derived part (structure, tensor specs, scalar values, grad mode, training flags)
is the cache key in compile.py. The rest is one `Guards` object per compiled entry:

- bindings: globals and closure cells read by the compiled function and by every user
  function it can reach (found by reading their bytecode: LOAD_GLOBAL names, functions
  and classes those names hold, methods of the modules' classes). Python data -- numbers,
  strings, tuples, lists, dicts, sets, simple objects such as a config namespace -- is
  compared by type and value (`SCALE = 3.0`, `CFG["p"] = 0.5`, `cfg.p = 0.5` all
  count); every other object by identity (`act = F.gelu`, `model = Other()`,
  `w = eagerc.randn(3)`, a rebound numpy array).
- modules: `nn.modules.module.state_epoch` moves on every change of any Module's
  attributes, parameters, buffers, submodules or hooks; while it stands still no module
  differs, and when it moved each module the trace could see is compared with its
  snapshot. Module attributes that are mutable Python data are compared every call.
- optimizers that stepped while traced: their param groups' structure and non-numeric
  options. Numeric options (lr, betas, momentum, weight_decay, eps...) are graph inputs
  read at every call (`hyper_inputs`), so a scheduler changing lr costs no retrace; only
  whether each is zero is guarded (the update rule skips a zero weight decay).
- the default dtype, and the compiled function's default arguments.

Side effects: cached calls do not run Python, so a trace that printed, logged, drew
from Python's or numpy's random numbers or the clock, assigned a global or nonlocal,
changed a container or object the guards watch, or set a module attribute is a graph
break (`Watch`): that call and later calls with its key run eagerly, never silently
differently.
"""
import builtins
import dis
import logging
import operator
import os
import sys
import threading
import types
import weakref

import numpy as np

from .._tensor import Tensor
from ..optim.rules import steps_equal
from ..runtime import dtypes as _dtypes
from ..runtime.ownership import PACKAGE_DIR, is_eagerc_file

__all__ = ["Guards", "Watch", "freeze", "describe_value"]

_LIBRARY_DIRS = (PACKAGE_DIR, os.path.dirname(os.path.abspath(np.__file__)) + os.sep,
                 os.path.dirname(os.path.abspath(os.__file__)) + os.sep)   # eagerc, numpy, the stdlib
_MAX_ITEMS = 256     # Python data bigger than this is guarded by identity only
_MAX_CODES = 2000    # user code objects followed from one compiled function
_MAX_ARRAY_BYTES = 65536  # numpy arrays up to this size are compared by value, larger by identity


_USER_FILES = {}


def is_user_file(fn):
    """Is a code object's filename the user's (not eagerc's, the standard library's or numpy's)?"""
    r = _USER_FILES.get(fn)
    if r is None:
        if fn.startswith("<"):
            r = not fn.startswith("<frozen") and not is_eagerc_file(fn)
        else:
            r = not os.path.abspath(fn).startswith(_LIBRARY_DIRS)
        _USER_FILES[fn] = r
    return r


def is_user_code(code):
    return is_user_file(code.co_filename)


# ---------------------------------------------------------------- Python data, frozen

_SCALARS = (int, bool, str, bytes, type(None))
_EAGERC_TYPES = None


def _opaque_types():
    """Types compared by identity even when they have a __dict__: eagerc's own objects (and
    users' subclasses of Module and Optimizer), arrays, types, modules, functions."""
    global _EAGERC_TYPES
    if _EAGERC_TYPES is None:
        from ..nn.modules.module import Module
        _EAGERC_TYPES = (Tensor, Module, np.ndarray, np.generic, type, types.ModuleType,
                         types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                         types.CodeType, weakref.ref)
    optim = sys.modules.get("eagerc.optim.optimizer")  # (an optimizer exists only once it is loaded)
    if optim is not None and optim.Optimizer not in _EAGERC_TYPES:
        _EAGERC_TYPES += (optim.Optimizer,)
    return _EAGERC_TYPES


class _Budget:
    __slots__ = ("left", "mutable")

    def __init__(self):
        self.left = _MAX_ITEMS
        self.mutable = False


def freeze(x, budget=None):
    """A comparable snapshot of Python data: scalars by type and value, containers and
    simple objects by their contents, anything else as ("id", id). Equal snapshots mean
    equal data (floats compare by their bits, so nan equals nan)."""
    b = budget or _Budget()
    return _freeze(x, b, 0)


def _freeze(x, b, depth):
    t = type(x)
    b.left -= 1
    if t is float:
        return (float, x.hex())
    if t in _SCALARS:
        return (t, x)
    if t is complex:
        return (complex, x.real.hex(), x.imag.hex())
    if b.left < 0 or depth > 8:
        return ("id", id(x))
    if t is tuple:
        return ("t",) + tuple([_freeze(v, b, depth + 1) for v in x])
    if t is list:
        b.mutable = True
        return ("l",) + tuple([_freeze(v, b, depth + 1) for v in x])
    if isinstance(x, dict):
        b.mutable = True
        return ("d",) + tuple([(_freeze(k, b, depth + 1), _freeze(v, b, depth + 1)) for k, v in x.items()])
    if t is set or t is frozenset:
        b.mutable = b.mutable or t is set
        return ("s", frozenset(_freeze(v, b, depth + 1) for v in x))
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return ("nt", id(t)) + tuple([_freeze(v, b, depth + 1) for v in x])
    if t is np.ndarray and x.nbytes <= _MAX_ARRAY_BYTES and x.dtype.kind in "biuf":
        b.mutable = True  # a small array is compared by value: an in-place change is seen
        return ("a", id(x), x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, _opaque_types()) or callable(x) or t.__module__.startswith(("eagerc", "builtins")):
        return ("id", id(x))
    d = getattr(x, "__dict__", None)
    if type(d) is dict:  # a simple object (a config, a namespace) if all it holds is data
        items = []
        for k, v in d.items():
            f = _freeze(v, b, depth + 1)
            if f[0] == "id" and not isinstance(v, (Tensor, np.ndarray)):
                return ("id", id(x))  # holds a file, a lock, a model...: not plain data
            items.append((k, f))
        b.mutable = True
        return ("o", id(t)) + tuple(items)
    return ("id", id(x))


def _where(frame):
    return None if frame is None else f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def describe_value(x):
    """A short description of a value for retrace reasons."""
    if isinstance(x, (int, float, bool, str, type(None), complex)):
        r = repr(x)
        return r if len(r) <= 60 else r[:57] + "..."
    if isinstance(x, Tensor):
        return f"tensor {x.dtype.name if hasattr(x.dtype, 'name') else x.dtype}{list(x._array.shape)} at {id(x):#x}"
    if isinstance(x, np.ndarray):
        return f"ndarray {x.dtype}{list(x.shape)} at {id(x):#x}"
    if isinstance(x, (list, tuple, dict, set)):
        r = repr(x)
        return r if len(r) <= 60 else f"<{type(x).__name__} of {len(x)} items>"
    return f"<{type(x).__name__} object at {id(x):#x}>"


# ---------------------------------------------------------------- reading bytecode

class _CodeInfo:
    """What a code object can read and write by name (its bytecode, read once)."""
    __slots__ = ("loads", "global_stores", "cell_stores", "nested", "attr_chains", "__weakref__")


_INFO = weakref.WeakKeyDictionary()
_STORE_GLOBAL = {"STORE_GLOBAL", "DELETE_GLOBAL"}
_STORE_DEREF = {"STORE_DEREF", "DELETE_DEREF"}
_ATTR = {"LOAD_ATTR", "LOAD_METHOD"}


def code_info(code):
    info = _INFO.get(code)
    if info is not None:
        return info
    info = _CodeInfo()
    loads, gstores, cstores, chains = [], [], [], []
    line = code.co_firstlineno
    prev = None  # (global name, line) of a LOAD_GLOBAL just before, for `np.random` chains
    for ins in dis.get_instructions(code):
        if ins.starts_line is not None:
            line = ins.starts_line
        op = ins.opname
        if op == "LOAD_GLOBAL" or op == "LOAD_NAME":
            loads.append(ins.argval)
            prev = (ins.argval, line)
            continue
        if op in _ATTR and prev is not None:
            chains.append((prev[0], ins.argval, line))
        elif op in _STORE_GLOBAL:
            gstores.append((ins.argval, line))
        elif op in _STORE_DEREF and ins.argval in code.co_freevars:
            cstores.append((ins.argval, line))
        prev = None
    info.loads = tuple(dict.fromkeys(loads))
    info.global_stores = tuple(gstores)
    info.cell_stores = tuple(cstores)
    info.attr_chains = tuple(chains)
    info.nested = tuple(c for c in code.co_consts if isinstance(c, types.CodeType))
    _INFO[code] = info
    return info


def _unwrap(fn):
    """The Python function behind a bound method, staticmethod, property or functools.wraps."""
    seen = 0
    while seen < 8:
        seen += 1
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        elif isinstance(fn, types.MethodType):
            fn = fn.__func__
        elif isinstance(fn, property):
            fn = fn.fget
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        else:
            break
    return fn if isinstance(fn, types.FunctionType) else None


class _Reach:
    """The user functions a compiled function can run: followed through the globals and
    closure cells their code names, the classes those hold and the modules' classes."""

    def __init__(self):
        self.functions = {}   # code -> function (for its __globals__ and __closure__)
        self.codes = {}       # code -> globals dict (nested code objects included)
        self.classes = set()
        self._todo = []

    def add_function(self, fn):
        fn = _unwrap(fn)
        if fn is None or fn.__code__ in self.functions or not is_user_code(fn.__code__):
            return
        if len(self.codes) >= _MAX_CODES:
            return
        self.functions[fn.__code__] = fn
        self._todo.append((fn.__code__, fn.__globals__, fn))

    def add_class(self, cls):
        if cls in self.classes or not isinstance(cls, type):
            return
        for klass in cls.__mro__:
            if klass in self.classes or klass is object:
                continue
            self.classes.add(klass)
            mod = sys.modules.get(klass.__module__)
            if mod is not None and getattr(mod, "__file__", None) and not is_user_code_path(mod.__file__):
                continue
            for v in list(vars(klass).values()):
                self.add_function(v)

    def add_code(self, code, globs):
        if code in self.codes or not is_user_code(code) or len(self.codes) >= _MAX_CODES:
            return
        self._todo.append((code, globs, None))

    def run(self):
        while self._todo:
            code, globs, fn = self._todo.pop()
            if code in self.codes:
                continue
            self.codes[code] = globs
            info = code_info(code)
            for c in info.nested:
                self._todo.append((c, globs, None))
            for name in info.loads:
                v = globs.get(name)
                if v is not None:
                    self._follow(v)
            if fn is not None and fn.__closure__:
                for cell in fn.__closure__:
                    try:
                        self._follow(cell.cell_contents)
                    except ValueError:
                        pass
        return self

    def _follow(self, v):
        if isinstance(v, types.FunctionType):
            self.add_function(v)
        elif isinstance(v, type):
            if v.__module__ != "builtins":
                self.add_class(v)
        elif isinstance(v, (staticmethod, classmethod, types.MethodType)):
            self.add_function(v)


is_user_code_path = is_user_file


# ---------------------------------------------------------------- sources of values a graph cannot replay

def _nondeterministic(v):
    """Does v read the clock or a random stream outside eagerc (random, numpy.random, time)?"""
    if isinstance(v, types.ModuleType):
        return v.__name__ in ("random", "time", "secrets", "numpy.random", "uuid")
    mod = getattr(v, "__module__", None)
    if isinstance(mod, str) and (mod in ("random", "time", "secrets", "uuid") or mod.startswith("numpy.random")):
        return callable(v)
    owner = getattr(v, "__self__", None)
    if owner is not None and type(owner).__module__ in ("random", "numpy.random.mtrand", "numpy.random._generator"):
        return True
    return False


def nondeterministic_reads(code, globs):
    """[(what, line)]: names in `code` that read the clock or an outside random stream."""
    info = code_info(code)
    out = []
    builtins_ = globs.get("__builtins__", builtins)
    if isinstance(builtins_, types.ModuleType):
        builtins_ = vars(builtins_)
    chains = {}
    for g, attr, line in info.attr_chains:
        chains.setdefault(g, []).append((attr, line))
    for name in info.loads:
        v = globs.get(name, builtins_.get(name) if isinstance(builtins_, dict) else None)
        if _nondeterministic(v):
            line = next((ln for a, ln in chains.get(name, ())), None)
            out.append((name, line))
        elif isinstance(v, types.ModuleType):
            for attr, line in chains.get(name, ()):
                sub = getattr(v, attr, None) if isinstance(getattr(v, "__dict__", None), dict) and \
                    attr in v.__dict__ else None
                if sub is not None and _nondeterministic(sub):
                    out.append((f"{name}.{attr}", line))
    return out


# ---------------------------------------------------------------- the guards

class _ValuesGuard:
    """The values of some names: in one globals dict, or in a function's closure cells."""
    __slots__ = ("d", "names", "get", "expect", "frozen", "mutable", "what")

    def __init__(self, d, names, what, get):
        self.d = d
        self.names = tuple(names)
        self.what = what
        self.get = get
        self.expect = list(get(d))
        self.frozen = []
        self.mutable = []
        for i, v in enumerate(self.expect):
            b = _Budget()
            f = _freeze(v, b, 0)
            self.frozen.append(f if f[0] != "id" else None)
            if b.mutable:
                self.mutable.append(i)

    @classmethod
    def of_globals(cls, globs, names, what):
        names = tuple(names)
        get = operator.itemgetter(*names) if len(names) > 1 else (lambda dd, n=names[0]: (dd[n],))
        return cls(globs, names, what, get)

    @classmethod
    def of_cells(cls, cells, names, what):
        return cls(tuple(cells), names, what, lambda cs: tuple([c.cell_contents for c in cs]))

    def check(self):
        try:
            cur = self.get(self.d)
        except KeyError as e:
            return f"{self.what} {e.args[0]} was deleted"
        except ValueError:
            return f"{self.what}: a closure cell was emptied"
        exp = self.expect
        if not all(map(operator.is_, cur, exp)):
            for i, (a, b) in enumerate(zip(cur, exp)):
                if a is b:
                    continue
                f = self.frozen[i]
                if f is not None and freeze(a) == f:
                    exp[i] = a  # an equal value in a new object
                    continue
                return f"{self.what} {self.names[i]}: {describe_value(b)} -> {describe_value(a)}"
        for i in self.mutable:
            if freeze(cur[i]) != self.frozen[i]:
                return f"{self.what} {self.names[i]} changed in place: now {describe_value(cur[i])}"
        return None


_MEMBER_KEYS = ("_parameters", "_buffers", "_modules", "_forward_pre_hooks", "_forward_hooks",
                "_state_dict_hooks", "_load_state_dict_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_SKIP_KEYS = frozenset(("training", "_compiled_call"))


def module_snapshot(m):
    """(snapshot, [keys of mutable Python data]) of a module's own state: its members by
    identity, its hooks, every other attribute frozen (Python data by value)."""
    items, mutable = [], []
    for k, v in m.__dict__.items():
        if k in _SKIP_KEYS:
            continue
        if k in _MEMBER_KEYS:
            items.append((k, tuple([(n, id(x)) for n, x in v.items()])))
            continue
        b = _Budget()
        items.append((k, _freeze(v, b, 0)))
        if b.mutable and not k.startswith(("_forward", "_non_persistent", "_state_dict", "_load_state")):
            mutable.append(k)
    return tuple(items), mutable


def _global_hooks_state():
    from ..nn.modules import module as mm
    return (tuple(mm._global_forward_pre_hooks), tuple(mm._global_forward_hooks))


class _ModulesGuard:
    __slots__ = ("epoch", "mods", "hooks", "watch", "names", "counter")

    def __init__(self, modules, names):
        from ..nn.modules import module as mm
        self.counter = mm.state_epoch
        self.epoch = self.counter[0]
        self.mods = []
        self.watch = []   # (module, key, frozen): mutable Python data, compared every call
        self.names = names
        for m in modules:
            snap, mutable = module_snapshot(m)
            self.mods.append((m, snap))
            d = dict(snap)
            for k in mutable:
                self.watch.append((m, k, d[k]))
        self.hooks = _global_hooks_state()

    def check(self):
        for m, k, f in self.watch:
            v = m.__dict__.get(k)
            if freeze(v) != f:
                return f"{self._name(m)}.{k} changed in place: now {describe_value(v)}"
        if self.counter[0] == self.epoch:
            return None
        for m, snap in self.mods:
            now, _ = module_snapshot(m)
            if now != snap:
                return f"{self._name(m)} changed: {_first_difference(snap, now)}"
        if _global_hooks_state() != self.hooks:
            return "global module hooks changed (register_module_forward_hook / ..._pre_hook)"
        self.epoch = self.counter[0]
        return None

    def _name(self, m):
        return self.names.get(id(m)) or type(m).__name__


def _first_difference(old, new):
    a, b = dict(old), dict(new)
    for k in list(a) + [k for k in b if k not in a]:
        if a.get(k) != b.get(k):
            if k in _MEMBER_KEYS:
                ka, kb = dict(a.get(k, ())), dict(b.get(k, ()))
                for n in list(ka) + [n for n in kb if n not in ka]:
                    if ka.get(n) != kb.get(n):
                        what = {"_parameters": "parameter", "_buffers": "buffer", "_modules": "submodule"}.get(
                            k, "hook")
                        if n not in kb:
                            return f"{what} {n!r} removed"
                        if n not in ka:
                            return f"{what} {n!r} added"
                        return f"{what} {n!r} replaced"
                return f"{k} changed"
            if k not in b:
                return f"attribute {k!r} removed"
            if k not in a:
                return f"attribute {k!r} added"
            return f"attribute {k!r} changed"
    return "its state changed"


class _OptimizerGuard:
    """An optimizer that stepped while traced: the same param groups and parameters, the
    same non-numeric options, the same state tensors, each option the rule branched on
    still zero or not, and the step counts a group's update recorded as one (`shared`:
    optim/rules.py TensorOps.step) still all equal. Numeric values themselves are graph
    inputs (entries.readers). Checked per call with identity tests; values are compared
    only when those fail, and for the shared step counts (one float() each)."""
    __slots__ = ("opt", "version", "groups", "zeros", "name", "state", "shared")

    def __init__(self, opt, name, numeric, zeros, state, shared=()):
        self.opt = opt
        self.shared = tuple(shared)
        self.name = name
        self.version = opt.__dict__.get("_version", 0)
        self.zeros = [(i, k, e, nz) for (i, k, e), nz in zeros.items()]
        self.groups = [self._group(g) for g in opt.param_groups]
        by_param = {}
        for p, k, t in state:
            by_param.setdefault(id(p), (p, {}))[1][k] = t
        # one itemgetter per parameter; a key list of one gets a second copy of it so the
        # getter always returns a tuple
        self.state = [(p, operator.itemgetter(*(list(kt) * (2 if len(kt) == 1 else 1))),
                       tuple(kt.values()) * (2 if len(kt) == 1 else 1)) for p, kt in by_param.values()]

    @staticmethod
    def _group(g):
        keys = tuple(k for k in g if k != "params" and not _is_option_number(g[k]))
        return [g, g["params"], len(g["params"]), len(g), _Getter(keys), tuple(g[k] for k in keys),
                _options_frozen(g)]

    def check(self):
        opt = self.opt
        if opt.__dict__.get("_version", 0) != self.version:
            why = self._revalidate()
            if why is not None:
                return why
        is_ = operator.is_
        for i, (g, params, n, nkeys, get, vals, frozen) in enumerate(self.groups):
            if g["params"] is not params or len(params) != n:
                return f"{self.name}: the parameters of param group {i} changed"
            try:
                cur = get(g)
            except KeyError as e:
                return f"{self.name}: param_groups[{i}] lost its option {e.args[0]!r}"
            if len(g) != nkeys or not all(map(is_, cur, vals)):
                if _options_frozen(g) != frozen:
                    return f"{self.name}: a non-numeric option of param group {i} changed"
                self.groups[i] = self._group(g)
        groups = opt.param_groups
        for i, k, e, nonzero in self.zeros:
            v = groups[i][k] if e is None else groups[i][k][e]
            if bool(float(v._array if isinstance(v, Tensor) else v)) != nonzero:
                return f"{self.name}: param_groups[{i}][{k!r}] {'became zero' if nonzero else 'is no longer zero'}"
        st = opt.state
        for p, get, tensors in self.state:
            s = st.get(p)
            try:
                if s is None or not all(map(is_, get(s), tensors)):
                    return f"{self.name}: optimizer state of a parameter was replaced (load_state_dict?)"
            except KeyError:
                return f"{self.name}: optimizer state of a parameter was removed"
        for steps in self.shared:
            if not steps_equal(steps):
                return (f"{self.name}: the step counts of a param group's {len(steps)} parameters are no longer "
                        "all equal (the graph counts them as one)")
        return None

    def _revalidate(self):
        """The optimizer object itself changed (load_state_dict, add_param_group, assignments)."""
        groups = self.opt.param_groups
        if len(groups) != len(self.groups) or any(
                [id(p) for p in g["params"]] != [id(p) for p in old[1]] for g, old in zip(groups, self.groups)):
            return f"{self.name}: its param groups changed (a new group, other parameters, load_state_dict)"
        for g, old in zip(groups, self.groups):
            if _options_frozen(g) != old[6]:
                return f"{self.name}: a non-numeric option of a param group changed"
        self.groups = [self._group(g) for g in groups]
        self.version = self.opt.__dict__.get("_version", 0)
        return None


class _Getter:
    """itemgetter that always returns a tuple (itemgetter of one key returns the item)."""
    __slots__ = ("get", "one")

    def __init__(self, keys):
        self.one = len(keys) == 1
        self.get = operator.itemgetter(*keys) if keys else (lambda d: ())

    def __call__(self, d):
        return (self.get(d),) if self.one else self.get(d)


def _is_option_number(v):
    return _is_number(v) or isinstance(v, (tuple, list)) and bool(v) and all(_is_number(x) for x in v)


def _options_frozen(group):
    """A param group's non-numeric options (numbers are graph inputs, or not read at all)."""
    return freeze({k: v for k, v in group.items() if k != "params" and not _is_option_number(v)})


def _is_number(x):
    return (type(x) in (int, float) or isinstance(x, (np.floating, np.integer))) and type(x) is not bool or \
        (isinstance(x, Tensor) and x._array.ndim == 0)


class Guards:
    """Everything an entry checks before its program runs (see the module docstring)."""
    __slots__ = ("parts", "dtype")

    def __init__(self, parts, dtype):
        self.parts = parts
        self.dtype = dtype

    def check(self):
        """None while every guard holds; else the reason, in words."""
        if _dtypes.get_default_dtype() is not self.dtype:
            return f"default dtype: {self.dtype.name} -> {_dtypes.get_default_dtype().name}"
        for p in self.parts:
            why = p.check()
            if why is not None:
                return why
        return None

    def describe(self):
        """The guards in words (for explain)."""
        out = [f"default dtype == {self.dtype.name}"]
        for p in self.parts:
            if isinstance(p, _ValuesGuard):
                out += [f"{p.what} {n} is {describe_value(v)}" for n, v in zip(p.names, p.expect)]
            elif isinstance(p, _ModulesGuard):
                out.append(f"{len(p.mods)} modules unchanged (attributes, members, hooks)")
            elif isinstance(p, _OptimizerGuard):
                out.append(f"{p.name}: same param groups and non-numeric options")
                out += [f"{p.name}: the step counts of {len(s)} parameters equal" for s in p.shared]
            elif isinstance(p, _DefaultsGuard):
                out.append("the function's default arguments")
        return out


def union(old, new):
    """Guards that hold when both `old` and `new` hold, without checking a thing twice: the
    parts of `old` whose subject (a globals dict's or closure's names, modules, an optimizer, a
    function's defaults) `new` covers are dropped. For traces of one key made while `old` held
    (breaks.py: each path through a graph break adds its trace's guards)."""
    if old is None or new is None:
        return new if old is None else old
    covered = {}
    for p in new.parts:
        key, items = _subject(p)
        covered.setdefault(key, set()).update(items)
    keep = [p for p in old.parts if not _subject(p)[1] <= covered.get(_subject(p)[0], set())]
    return Guards(list(new.parts) + keep, new.dtype)


def _subject(part):
    """(what kind of thing a guard part watches, the set of its items)."""
    if isinstance(part, _ValuesGuard):
        return (_ValuesGuard, id(part.d), part.what), set(part.names)
    if isinstance(part, _ModulesGuard):
        return _ModulesGuard, {id(m) for m, _ in part.mods}
    if isinstance(part, _OptimizerGuard):
        return _OptimizerGuard, {id(part.opt)}
    if isinstance(part, _DefaultsGuard):
        return _DefaultsGuard, {id(part.fn)}
    return id(part), {id(part)}


class _DefaultsGuard:
    __slots__ = ("fn", "defaults", "kwdefaults")

    def __init__(self, fn):
        self.fn = fn
        self.defaults = freeze(fn.__defaults__)
        self.kwdefaults = freeze(fn.__kwdefaults__)

    def check(self):
        if freeze(self.fn.__defaults__) != self.defaults or freeze(self.fn.__kwdefaults__) != self.kwdefaults:
            return f"the default arguments of {self.fn.__qualname__} changed"
        return None


# ---------------------------------------------------------------- watching one trace

class _Stream:
    """Stands in for sys.stdout/sys.stderr while a trace runs: output the tracing thread
    writes (print) is a side effect, since cached calls would not write it. Warnings are
    not: Python shows each once per place anyway."""

    def __init__(self, inner, watch, name):
        self._inner = inner
        self._watch = watch
        self._name = name

    def write(self, s):
        w = self._watch
        if w.active and s and threading.get_ident() == w.thread:
            f = sys._getframe(1)
            if not f.f_code.co_filename.endswith(("warnings.py", "traceback.py")):
                while f is not None and not is_user_file(f.f_code.co_filename):
                    f = f.f_back
                w.effect(f"writing to sys.{self._name} (print)", _where(f))
        return self._inner.write(s)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Watch:
    """One trace of a compiled function, watched for what it reads and what it changes.

    `before()` follows the user functions the compiled function can reach and snapshots
    the Python data they can change; `after(tracer)` reports side effects as graph breaks
    (tracer.side_effect) and `guards(...)` builds the entry's Guards."""

    def __init__(self, fn, args, modules):
        self.fn = fn
        self.args = args
        self.modules = list(modules)
        self.thread = threading.get_ident()
        self.active = False
        self.effects = []
        self.reach = None
        self.before_data = {}     # key -> (globals dict or cell or None for an argument, name, frozen)
        self.before_modules = {}
        self._streams = None
        self._factory = None

    def effect(self, what, where=None, why=None):
        if all(what != w for w, _, _ in self.effects):
            self.effects.append((what, where, why))

    def before(self):
        r = self.reach = _Reach()
        r.add_function(self.fn)
        owner = getattr(self.fn, "__self__", None)
        if owner is not None:
            r.add_class(type(owner))
        for m in self.modules:
            r.add_class(type(m))
        r.run()
        for code, globs in r.codes.items():
            info = code_info(code)
            for name in info.loads + tuple(n for n, _ in info.global_stores):
                if name in globs:
                    key = (id(globs), name)
                    if key not in self.before_data:
                        self.before_data[key] = (globs, name, freeze(globs[name]))
        for code, fn in r.functions.items():
            for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
                try:
                    self.before_data[("cell", id(cell))] = (cell, name, freeze(cell.cell_contents))
                except ValueError:
                    pass
        for i, a in enumerate(self.args):
            if not isinstance(a, Tensor):
                self.before_data[("arg", i)] = (None, i, freeze(a))
        for m in self.modules:
            for _, sub in m.named_modules():
                self.before_modules[id(sub)] = (sub, module_snapshot(sub)[0])
        self._install()

    def _install(self):
        self.active = True
        self._streams = (sys.stdout, sys.stderr)
        if sys.stdout is not None:
            sys.stdout = _Stream(sys.stdout, self, "stdout")
        if sys.stderr is not None:
            sys.stderr = _Stream(sys.stderr, self, "stderr")
        old = self._factory = logging.getLogRecordFactory()
        watch = self

        def factory(name, level, pathname, lineno, *a, **k):
            if watch.active and threading.get_ident() == watch.thread and is_user_code_path(pathname):
                watch.effect(f"logging to {name!r}", f"{os.path.basename(pathname)}:{lineno}")
            return old(name, level, pathname, lineno, *a, **k)
        logging.setLogRecordFactory(factory)

    def uninstall(self):
        self.active = False
        if self._streams is not None:
            out, err = self._streams
            if isinstance(sys.stdout, _Stream) and sys.stdout._watch is self:
                sys.stdout = out
            if isinstance(sys.stderr, _Stream) and sys.stderr._watch is self:
                sys.stderr = err
            self._streams = None
        if self._factory is not None:
            if logging.getLogRecordFactory().__closure__ and self in [
                    c.cell_contents for c in logging.getLogRecordFactory().__closure__]:
                logging.setLogRecordFactory(self._factory)
            self._factory = None

    def after(self, tracer):
        """Report the trace's side effects to the tracer (each a graph break)."""
        self.uninstall()
        r = self.reach
        for m in tracer.modules.values():
            r.add_class(type(m))
        for code, globs in tracer.user_codes.items():
            r.add_code(code, globs)
        r.run()
        for key, (holder, name, frozen) in self.before_data.items():
            if holder is None:
                now, what = self.args[name], f"argument {name}"
            elif key[0] == "cell":
                try:
                    now = holder.cell_contents
                except ValueError:
                    now = None
                what = f"nonlocal {name}"
            else:
                now, what = holder.get(name), f"global {name}"
            if freeze(now) != frozen:
                self.effect(f"changing {what} (now {describe_value(now)})")
        ran = dict(tracer.user_codes)
        fn = _unwrap(self.fn)
        if fn is not None and is_user_code(fn.__code__):
            ran.setdefault(fn.__code__, fn.__globals__)
        for code, globs in ran.items():
            for c in (code,) + code_info(code).nested:
                file = os.path.basename(c.co_filename)
                for name, line in code_info(c).global_stores:
                    if (id(globs), name) not in self.before_data:
                        self.effect(f"assigning global {name}", f"{file}:{line}")
                for what, line in nondeterministic_reads(c, globs):
                    self.effect(f"a value from {what}", f"{file}:{line or c.co_firstlineno}",
                                "the clock and random numbers outside eagerc would be read once, when traced")
        for m, snap in self.before_modules.values():
            now = module_snapshot(m)[0]
            if now != snap:
                self.effect(f"changing {type(m).__name__} ({_first_difference(snap, now)})")
        for what, where, why in self.effects:
            tracer.side_effect(what, deferred=True, where=where, why=why)

    def guards(self, tracer, module_names):
        """The Guards of the graph this trace made."""
        from ..runtime import dtypes
        r = self.reach
        parts = []
        by_dict = {}
        for code, globs in r.codes.items():
            for name in code_info(code).loads:
                if name in globs:
                    by_dict.setdefault(id(globs), (globs, {}))[1][name] = None
        for globs, names in by_dict.values():
            label = "global"
            mod = globs.get("__name__")
            if mod and mod != "__main__":
                label = f"global ({mod})"
            parts.append(_ValuesGuard.of_globals(globs, list(names), label))
        for code, fn in r.functions.items():
            if fn.__closure__:
                parts.append(_ValuesGuard.of_cells(fn.__closure__, code.co_freevars,
                                                   f"closure variable of {fn.__qualname__}"))
            if fn.__defaults__ or fn.__kwdefaults__:
                parts.append(_DefaultsGuard(fn))
        seen = {}
        for m in self.modules:
            seen[id(m)] = m
            for _, sub in m.named_modules():
                seen[id(sub)] = sub
        for m in tracer.modules.values():
            seen.setdefault(id(m), m)
        if seen:
            parts.append(_ModulesGuard(list(seen.values()), module_names))
        for k, (opt, numeric, zeros, state, shared) in enumerate(tracer.optimizers.values()):
            parts.append(_OptimizerGuard(opt, f"{type(opt).__name__} (optimizer{k})", numeric, zeros, state,
                                         shared))
        return Guards(parts, dtypes.get_default_dtype())
