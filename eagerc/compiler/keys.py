"""The key of a compiled call: what a call's arguments and modes say about which
specialisation it needs, as one hashable tuple looked up in a dict per call.

    (argument structure and Python values, one (shape, dtype, device, requires_grad) per
     tensor, grad mode, the training flag of each guarded module, argument aliasing,
     the Python scalars the function reads from its own globals and closure, the autocast
     state: which devices autocast to which dtype -- a trace holds autocast's casts)

Everything else a trace read from Python is checked by guards.py after the lookup.
Dynamic sizes appear as None in the key (`dyn` says which); `describe` turns two keys
into the retrace reason users read in `compiled.log`.
"""
import operator

import numpy as np

from .. import dispatch
from .._tensor import Tensor

__all__ = ["CallKeys", "spec", "fmt_struct", "fmt_shape", "fmt_spec", "fmt_autocast", "KEY_PARTS", "bind", "full_mask",
           "mask", "masks_to", "scalar_reads"]

_ndarray = np.ndarray
_training = operator.attrgetter("training")
_SCALARS = (int, float, bool, str, type(None), complex)


def spec(x, leaves):
    """A hashable description of one argument; tensors are appended to `leaves` (None marks one)."""
    t = type(x)
    if t is Tensor or isinstance(x, Tensor):
        leaves.append(x)
        return None
    if t in _SCALARS:
        return (t, x)
    if t is tuple or t is list:
        return (t,) + tuple([spec(v, leaves) for v in x])
    if t is dict:
        return (dict,) + tuple([(k, spec(v, leaves)) for k, v in x.items()])
    if isinstance(x, tuple):  # namedtuple
        return (t,) + tuple([spec(v, leaves) for v in x])
    if isinstance(x, np.generic):
        return (t, x.item())
    return (t, "id", id(x))  # anything else: the very same object


def fmt_struct(s):
    if s is None:
        return "T"
    if type(s) is int:  # n tensor arguments, nothing else
        return "(" + ", ".join(["T"] * s) + ("," if s == 1 else "") + ")"
    t = s[0]
    if t is tuple or t is list or (isinstance(t, type) and issubclass(t, tuple)):
        inner = ", ".join(fmt_struct(v) for v in s[1:])
        return f"({inner}{',' if len(s) == 2 else ''})" if t is not list else f"[{inner}]"
    if t is dict:
        return "{" + ", ".join(f"{k!r}: {fmt_struct(v)}" for k, v in s[1:]) + "}"
    if len(s) == 3 and s[1] == "id":
        return f"<{t.__name__} object>"
    return repr(s[1])


def fmt_shape(shape):
    return "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"


def fmt_autocast(k):
    """An autocast key part (AutocastState.key) in words: "off" or "cpu to float16"."""
    return "off" if k is None else ", ".join(f"{d} to {t}" for d, t in k)


def fmt_spec(s):
    shape, dt, dev, rg = s
    return f"{np.dtype(dt).name}{fmt_shape(shape)} on {dev}{' requires_grad' if rg else ''}"


KEY_PARTS = ("argument structure / Python values", "tensor", "grad mode", "module training flags",
              "argument aliasing", "global/closure values", "autocast")


_AGNOSTIC = None


def _agnostic():
    """eagerc.nn classes whose forward never reads `training` (exact classes: a subclass may)."""
    global _AGNOSTIC
    if _AGNOSTIC is None:
        from .. import nn
        names = ("ReLU ReLU6 SiLU Mish SELU Hardsigmoid Hardswish LeakyReLU GELU ELU CELU Softplus "
                 "Hardtanh Tanh Sigmoid Softsign LogSigmoid Tanhshrink Softmax Softmin LogSoftmax GLU "
                 "Sequential ModuleList ModuleDict Conv2d Conv1d ConvTranspose2d ConvTranspose1d Flatten "
                 "Unflatten Identity Linear Bilinear CrossEntropyLoss NLLLoss MSELoss L1Loss SmoothL1Loss "
                 "HuberLoss BCELoss BCEWithLogitsLoss KLDivLoss LayerNorm GroupNorm RMSNorm MaxPool1d "
                 "MaxPool2d AvgPool1d AvgPool2d AdaptiveAvgPool1d AdaptiveAvgPool2d Upsample "
                 "UpsamplingNearest2d Embedding").split()
        _AGNOSTIC = frozenset(getattr(nn, n) for n in names if isinstance(getattr(nn, n, None), type))
    return _AGNOSTIC


def scalar_reads(fn):
    """Globals and closure cells the function reads that hold Python scalars (guarded by value)."""
    code = getattr(fn, "__code__", None)
    if code is None or getattr(fn, "__self__", None) is not None:
        return [], []
    g = getattr(fn, "__globals__", {})
    globs = [n for n in code.co_names if type(g.get(n)) in _SCALARS and g.get(n) is not None]
    cells = []
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            if type(cell.cell_contents) in _SCALARS:
                cells.append((name, cell))
        except ValueError:
            pass
    return globs, cells


class CallKeys:
    """The keying state of one compiled function: which modules' training flags, which of its
    globals and closure scalars, and which sizes are dynamic."""

    def __init__(self, fn):
        self.modules = []         # modules whose training flag is part of the key
        self.names = []           # their paths, for retrace reasons
        self.globs, self.cells = [], []  # scalar globals / closure cells read (set at the first trace:
        self.scanned = False              # globals defined after the decorator exist by then)
        self.g = getattr(fn, "__globals__", {})
        self.dyn = None           # {leaf index: ((dim, symbol), ...)}: sizes that are symbols
        self.dyn_dims = {}        # {(leaf, dim): symbol}

    def scan(self, fn):
        if not self.scanned:
            self.scanned = True
            self.globs, self.cells = scalar_reads(fn)

    def add_module(self, m, name):
        """Guard m's training flag too (unless m's forward never reads it); True if new."""
        if any(g is m for g in self.modules) or type(m) in _agnostic():
            return False
        self.modules.append(m)
        self.names.append(name)
        return True

    def of(self, args, kwargs, masked=True):
        """(key, tensor leaves, symbol bindings or None)."""
        if not kwargs and all([type(a) is Tensor for a in args]):
            leaves = list(args)     # the common case: plain tensor arguments
            struct = len(args)
        else:
            leaves = []
            struct = spec(args, leaves) if not kwargs else (spec(args, leaves), spec(kwargs, leaves))
        dynd = self.dyn if masked else None
        env = None
        if dynd is None:
            specs = tuple([(d.shape, d.dtype, "cpu" if type(d) is _ndarray else str(t.device), t._requires_grad)
                           for t, d in [(t, t._array) for t in leaves]])
        else:
            specs = []
            for i, t in enumerate(leaves):
                d = t._array
                shape = d.shape
                dims = dynd.get(i)
                if dims is not None:
                    if env is None:
                        env = {}
                    shape, env = mask(shape, dims, env)
                    if env is False:  # symbols bound inconsistently: this call can only be static
                        return self.of(args, kwargs, masked=False)
                specs.append((shape, d.dtype, "cpu" if type(d) is _ndarray else str(t.device), t._requires_grad))
            specs = tuple(specs)
        alias = ()
        if len(leaves) > 1:
            ids = [id(t) for t in leaves]
            if len(set(ids)) != len(ids):
                alias = tuple([ids.index(i) for i in ids])
        scal = ()
        if self.globs or self.cells:
            g = self.g
            scal = tuple([(type(v), v) for v in [g.get(n) for n in self.globs] +
                          [c.cell_contents for _, c in self.cells]])
        mods = self.modules
        m = dispatch.modes()
        ac = m.autocast
        key = (struct, specs, m.grad_enabled, tuple(map(_training, mods)) if mods else (), alias, scal,
               None if ac is None else ac.key)
        return key, leaves, env

    def describe(self, old, new):
        """The guards that differ between two keys, in words (old -> new)."""
        out = []
        for part, a, b in zip(KEY_PARTS, old, new):
            if a == b:
                continue
            if part == "tensor":
                if len(a) != len(b):
                    out.append(f"number of tensor arguments: {len(a)} -> {len(b)}")
                    continue
                for i, (x, y) in enumerate(zip(a, b)):
                    if x == y:
                        continue
                    for what, u, v in zip(("shape", "dtype", "device", "requires_grad"), x, y):
                        if what == "shape":
                            if len(u) == len(v) and all(p is None or p == q for p, q in zip(u, v)):
                                small = [d for d, (p, q) in enumerate(zip(u, v)) if p is None and q < 2]
                                if small:
                                    out.append(f"tensor argument {i} shape {fmt_shape(v)}: size "
                                               f"{v[small[0]]} of dim {small[0]} is specialised (sizes 0 and "
                                               f"1 are never symbolic)")
                                continue
                            u, v = fmt_shape(u), fmt_shape(v)
                        elif what == "dtype":
                            u, v = np.dtype(u).name, np.dtype(v).name
                        if u != v:
                            out.append(f"tensor argument {i} {what}: {u} -> {v}")
            elif part == "argument structure / Python values":
                out.append(f"{part}: {fmt_struct(a)} -> {fmt_struct(b)}")
            elif part == "module training flags":
                names = self.names
                diffs = [f"{names[i]}.training {x} -> {y}" for i, (x, y) in enumerate(zip(a, b)) if x != y]
                if len(diffs) > 4:
                    diffs = diffs[:3] + [f"and {len(diffs) - 3} more"]
                out.append("module training flags: " + (", ".join(diffs) or f"{a} -> {b}"))
            elif part == "autocast":
                out.append(f"autocast: {fmt_autocast(a)} -> {fmt_autocast(b)}")
            elif part == "global/closure values":
                names = self.globs + [n for n, _ in self.cells]
                out.append("; ".join(f"global/closure value {n}: {x[1]!r} -> {y[1]!r}"
                                     for n, x, y in zip(names, a, b) if x != y))
            else:
                out.append(f"{part}: {a!r} -> {b!r}")
        return "; ".join(x for x in out if x) or "no guard differs"

    def closest(self, entries, key):
        """The entry whose key differs least from `key` (to say what changed)."""
        best, score = None, None
        for e in entries.values():
            s = sum(1 for a, b in zip(e.key, key) if a != b)
            if len(e.key[1]) == len(key[1]):
                s += sum(1 for x, y in zip(e.key[1], key[1]) if x != y) / (1 + len(key[1]))
            if score is None or s < score:
                best, score = e, s
        return best

    def rekey(self, entries):
        """New modules joined the training-flag guard: old keys lack their flags, and held
        whatever value those flags have now (those modules did not run in their traces)."""
        added = tuple(map(_training, self.modules))
        old = list(entries.items())
        entries.clear()
        for k, head in old:
            nk = k[:3] + (k[3] + added[len(k[3]):],) + k[4:]
            e = head
            while e is not None:
                e.key = nk
                d = getattr(e, "dynamic", None)
                e = d.next if d is not None else None
            entries[nk] = head

    def size_change(self, old, new):
        """{(leaf, dim): (old size, new size)} if the keys differ only in sizes (new ones >= 2)."""
        if old[0] != new[0] or old[2:] != new[2:] or len(old[1]) != len(new[1]):
            return None
        dims = {}
        for i, (a, b) in enumerate(zip(old[1], new[1])):
            if a[1:] != b[1:] or len(a[0]) != len(b[0]):
                return None
            for d, (x, y) in enumerate(zip(a[0], b[0])):
                if x is None:  # already symbolic in `old`
                    if y is not None and y < 2:
                        return None
                elif x != y:
                    if y is None or y < 2:
                        return None
                    dims[(i, d)] = (x, y)
        return dims or None

    def set_dims(self, dims):
        """Make these {(leaf, dim): symbol} the dynamic sizes of every key."""
        self.dyn_dims = dict(dims)
        m = {}
        for (i, d), s in sorted(dims.items()):
            m.setdefault(i, []).append((d, s))
        self.dyn = {i: tuple(v) for i, v in m.items()} if m else None

    def fmt_dims(self, dims, primes=None):
        parts = []
        for (i, d), s in sorted(dims.items()):
            parts.append(f"arg {i} dim {d}" + (f"={primes[s]}" if primes else f" ({s})"))
        return ", ".join(parts)


def bind(masked_key, key, dims):
    """Bindings of the symbols from an unmasked key, at the positions masked in masked_key."""
    env = {}
    for (i, d), sym in dims.items():
        try:
            if masked_key[1][i][0][d] is None:
                env[sym] = key[1][i][0][d]
        except (IndexError, TypeError):
            return None
    return env


def full_mask(key, dims):
    """key with every size in dims ({(leaf, dim): symbol}) as None."""
    specs = [list(sp[0]) for sp in key[1]]
    for (i, d) in dims:
        specs[i][d] = None
    return (key[0], tuple((tuple(sh),) + tuple(sp[1:]) for sh, sp in zip(specs, key[1]))) + key[2:]


def mask(shape, dims, env):
    """shape with dynamic dims (>= 2) as None, binding their symbols in env (False if inconsistent)."""
    s = list(shape)
    for d, sym in dims:
        if d >= len(s):
            continue
        n = s[d]
        if n < 2:
            continue
        b = env.get(sym)
        if b is None:
            env[sym] = n
        elif b != n:
            return shape, False
        s[d] = None
    return tuple(s), env


def masks_to(key, dynd):
    if dynd is None:
        return key
    specs = []
    for i, sp in enumerate(key[1]):
        dims = dynd.get(i)
        shape = sp[0]
        if dims is not None and None not in shape:
            shape, ok = mask(shape, dims, {})
            if ok is False:
                return None
        specs.append((shape,) + tuple(sp[1:]))
    return (key[0], tuple(specs)) + key[2:]
