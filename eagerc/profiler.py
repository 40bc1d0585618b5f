"""`eagerc.profiler`: where the time goes, per op (eager) and per kernel (compiled).

    with eagerc.profiler.profile(record_shapes=True) as prof:
        with eagerc.profiler.record_function("forward"):
            loss = model(x).sum()
        loss.backward()
    print(prof.table(sort_by="total", row_limit=10))
    prof.export_chrome_trace("trace.json")          # open in https://ui.perfetto.dev

How it measures, and why it costs nothing when off
--------------------------------------------------
Nothing in eagerc's hot path knows about the profiler. While a `profile` is active it
swaps instruments in, and puts the originals back when it ends:

- every declared op's numpy kernel (`OpDef.cpu`, the one slot `dispatch.apply` and
  `dispatch.create` call) becomes a timed wrapper: one "op" event per eager call --
  forward and backward ops alike;
- the runtime's graph executor (runtime/executor.py) gets the profile as its observer:
  one "kernel" event per node of every graph it runs -- interpreter-backend programs and
  loaded `eagerc.runtime` programs;
- a compiled function's call (`CompiledFunction._run`) is timed as one "compiled"
  event, containing its program's "kernel" events: the numpy backend's generated
  function gets timed versions of the kernels and ufuncs it reads from its globals (the
  generated line that called tells which graph node ran);
- backends compile with the original kernels (a program compiled while profiling keeps
  no instrument after the profile ends).

With no profile active every one of these is the original object and the executor has no
observer: zero overhead.
`record_function` costs one global read when no profile is active.

Times are host wall-clock times (`time.perf_counter_ns`). CUDA (cupy) kernels are not
instrumented: they run asynchronously, so their host time is the launch time only.

Events nest by time on each thread (a `record_function` range contains the ops it ran,
a "compiled" call contains its kernels). `total` is an event's own duration, `self` that
minus its direct children: summing self times never counts anything twice.
"""
import collections
import functools
import json
import os
import sys
import threading
import time

from .runtime import executor

__all__ = ["profile", "record_function", "Event", "KeyAverage", "KeyAverages", "ProfilerActivity"]

_now = time.perf_counter_ns
_ident = threading.get_ident

_active = None          # the running `profile`, or None
_lock = threading.Lock()


class ProfilerActivity:
    """Accepted for PyTorch compatibility (`activities=[ProfilerActivity.CPU]`); eagerc records
    host (CPU) time only."""
    CPU = "cpu"
    CUDA = "cuda"


# ---------------------------------------------------------------- events

class Event:
    """One timed range. Times are nanoseconds from `time.perf_counter_ns`.

    name:     op name ("matmul"), kernel name of a compiled node, "compiled:<fn>", or the
              name given to record_function
    category: "op" (an eager op's kernel), "kernel" (a node of a compiled program),
              "compiled" (one call of a compiled function), "user" (record_function)
    start, end, tid
    shapes:   input shapes (tuples, None for non-tensors) when record_shapes=True, else None
    args:     extra details: {"node": value name, "loc": "file.py:12", "module": path} for
              compiled kernels
    parent:   the innermost event containing this one on the same thread (set when the
              profile ends), children: the events directly inside it
    """
    __slots__ = ("name", "category", "start", "end", "tid", "shapes", "args", "parent", "children")

    def __init__(self, name, category, start, end, tid, shapes=None, args=None):
        self.name = name
        self.category = category
        self.start = start
        self.end = end
        self.tid = tid
        self.shapes = shapes
        self.args = args
        self.parent = None
        self.children = []

    @property
    def duration(self):
        """Total time in nanoseconds."""
        return self.end - self.start

    @property
    def self_duration(self):
        """Time in nanoseconds not spent in a child event."""
        return self.duration - sum(c.duration for c in self.children)

    @property
    def depth(self):
        d, p = 0, self.parent
        while p is not None:
            d, p = d + 1, p.parent
        return d

    def __repr__(self):
        return f"<Event {self.category}:{self.name} {_fmt_ns(self.duration)}>"


def _shapes(args):
    return tuple(tuple(a.shape) if hasattr(a, "shape") else None for a in args)


def _nest(events):
    """Set parent/children by containment on each thread (events on one thread either nest or
    are disjoint, since each is a Python call that returns before its caller does)."""
    by_tid = collections.defaultdict(list)
    for e in events:
        e.parent = None
        e.children = []
        by_tid[e.tid].append(e)
    for evs in by_tid.values():
        # outer first: earlier start, and for equal starts the longer one
        evs.sort(key=lambda e: (e.start, -e.end))
        stack = []
        for e in evs:
            while stack and stack[-1].end < e.end:
                stack.pop()
            if stack and stack[-1].start <= e.start:
                e.parent = stack[-1]
                stack[-1].children.append(e)
            stack.append(e)


# ---------------------------------------------------------------- instruments

def _timed_kernel(name, kernel, prof):
    """kernel, recording one "op" event per call while `prof` is active (an executor's plan
    bound during the profile keeps this wrapper: afterwards it only calls the kernel)."""
    append = prof._events.append

    if prof.record_shapes:
        def timed(*args, **kwargs):
            if _active is not prof:
                return kernel(*args, **kwargs)
            t0 = _now()
            try:
                return kernel(*args, **kwargs)
            finally:
                t1 = _now()
                append(Event(name, "op", t0, t1, _ident(), _shapes(args)))
    else:
        def timed(*args, **kwargs):
            if _active is not prof:
                return kernel(*args, **kwargs)
            t0 = _now()
            try:
                return kernel(*args, **kwargs)
            finally:
                append(Event(name, "op", t0, _now(), _ident()))
    functools.update_wrapper(timed, kernel)
    timed._eagerc_profiled = kernel
    return timed


def _programs_of(entry):
    """Every program a compiled-function entry may run (plain, dynamic, joint training)."""
    out = [getattr(entry, "program", None)]
    d = getattr(entry, "dynamic", None)
    if d is not None:
        out += [getattr(d, "generic", None)] + list(getattr(d, "programs", {}).values())
    j = getattr(entry, "joint", None)
    if j is not None:
        out += [getattr(j, "fwd_program", None), getattr(j, "bwd_program", None)]
    return [p for p in out if p is not None]


def _node_args(n):
    d = {"node": n.out.name}
    if n.loc:
        d["loc"] = n.loc
    if n.module:
        d["module"] = n.module
    return d


class _TimedNumpy:
    """Stands in for `np` in a generated program's globals: its ufuncs are timed; everything
    else is numpy's own."""

    def __init__(self, np, instr):
        self._np = np
        self._instr = instr
        self._cache = {}

    def __getattr__(self, name):
        f = self._cache.get(name)
        if f is None:
            f = getattr(self._np, name)
            if isinstance(f, self._np.ufunc):
                f = self._instr.timed(f, name)
            self._cache[name] = f
        return f


class _ProgramInstrument:
    """Times the kernels a numpy-backend program calls, by swapping the names it reads from
    its globals (`k_<op>` kernels and `np`); `restore` puts the originals back."""

    def __init__(self, prof, program):
        import numpy as np
        self.prof = prof
        self.globs = program.__globals__
        self.saved = {}
        self.lines = _line_nodes(program)
        self.code = program.__code__
        fused = {k.name: k for k in getattr(program, "kernels", None) or ()}
        for key, value in list(self.globs.items()):
            if key.startswith("k_") and callable(value):
                self.saved[key] = value
                self.globs[key] = self.timed(getattr(value, "_eagerc_profiled", value), key[2:])
            elif key.startswith("K_") and callable(value) and key[2:] in fused:
                # a generated C / CUDA kernel (backends c, cuda): named after the ops it fuses
                self.saved[key] = value
                self.globs[key] = self.timed(getattr(value, "_eagerc_profiled", value),
                                             _fused_name(fused[key[2:]], program))
        if self.globs.get("np") is np:
            self.saved["np"] = np
            self.globs["np"] = _TimedNumpy(np, self)

    def timed(self, fn, fallback):
        events, lines, code, prof = self.prof._events, self.lines, self.code, self.prof
        getframe = sys._getframe

        def timed(*args, **kwargs):
            t0 = _now()
            try:
                return fn(*args, **kwargs)
            finally:
                t1 = _now()
                f = getframe(1)
                n = lines.get(f.f_lineno) if f.f_code is code else None
                events.append(Event(n.op if n is not None else fallback, "kernel", t0, t1, _ident(),
                                    _shapes(args) if prof.record_shapes else None,
                                    _node_args(n) if n is not None else None))
        return timed

    def restore(self):
        for key, value in self.saved.items():
            # (a program compiled while kernels were swapped could hold a profiled one: unwrap)
            self.globs[key] = getattr(value, "_eagerc_profiled", value)


def _fused_name(kernel, program):
    """`fused:<k0>(amax,sub,exp,sum,div)`: the kernel and the graph ops it computes."""
    ops = {n.out.name: n.op for n in getattr(getattr(program, "graph", None), "nodes", ())}
    return f"fused:{kernel.name}({','.join(ops.get(m, '?') for m in kernel.nodes)})"


def _line_nodes(program):
    """{line number in the generated source: graph node} for a numpy-backend program: after the
    `# program` marker, each node is one assignment line, in graph order (`del` lines between)."""
    source = getattr(program, "source", None)
    graph = getattr(program, "graph", None)
    if not source or graph is None:
        return {}
    lines = source.splitlines()
    try:
        start = lines.index("    # program")
    except ValueError:
        return {}
    assigns = []
    for i in range(start + 1, len(lines)):
        s = lines[i].strip()
        if not s or s.startswith(("del ", "#", "POOL.", "return ")) or " = " not in s:
            continue
        assigns.append(i + 1)
    if len(assigns) != len(graph.nodes):  # not the layout this expects: kernel names only
        return {}
    return dict(zip(assigns, graph.nodes))


# ---------------------------------------------------------------- the profiler

class profile:
    """Record per-op (eager) and per-kernel (compiled) times while the block runs.

    record_shapes: also record each call's input shapes (shown by
        `key_averages(group_by_input_shape=True)` and in the Chrome trace).
    activities, with_stack, profile_memory: accepted for PyTorch compatibility, ignored.
    enabled: False makes the profiler a no-op.

    One profile may be active at a time. After the block: `events()`, `key_averages()`,
    `table()`, `export_chrome_trace(path)`, `total_time` and `wall_time` (ns).
    """

    def __init__(self, *, record_shapes=False, activities=None, with_stack=False, profile_memory=False,
                 enabled=True):
        self.record_shapes = bool(record_shapes)
        self.enabled = enabled
        self._events = []
        self._start = None
        self._end = None
        self._restore = []
        self._instruments = {}
        self._observer = False   # while installed: the executor's previous observer

    # ------------------------------------------------------------ start / stop
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        global _active
        if not self.enabled:
            return self
        with _lock:
            if _active is not None:
                raise RuntimeError("eagerc.profiler: another profile is already active (profiles do not "
                                   "nest; use record_function for sub-ranges)")
            _active = self
        self._events = []
        try:
            self._install()
        except BaseException:
            self._uninstall()
            _active = None
            raise
        self._start = _now()
        return self

    def stop(self):
        global _active
        if _active is not self:
            return self
        self._end = _now()
        try:
            self._uninstall()
        finally:
            _active = None
        return self

    def _install(self):
        from .runtime.ops import OPS, load_all
        load_all()
        for op in OPS.values():
            orig = op.cpu
            op.cpu = _timed_kernel(op.name, orig, self)
            self._restore.append((op, "cpu", orig))
        self._observer = executor.set_observer(self._observe)
        try:
            import importlib
            _compile_mod = importlib.import_module("eagerc.compiler.compile")
            from .compiler import backends as _backends
            from .compiler.backends import interpreter as _interp
        except ImportError:  # the runtime alone (a deployed program): eager/runtime ops only
            return
        try:
            from .compiler.backends import numpy_backend  # noqa: F401  (registers itself)
        except ImportError:
            pass
        backends = {_interp.InterpreterBackend} | {c for c in _backends._BACKENDS.values() if isinstance(c, type)}
        for cls in backends:
            if "compile" in cls.__dict__:
                self._patch(cls, "compile", self._untimed_compile(cls.__dict__["compile"]))
        CF = _compile_mod.CompiledFunction
        self._patch(CF, "_run", self._timed_run(CF.__dict__["_run"]))
        try:  # compiled training: the backward program runs from autograd, as this op's `grads`
            from .compiler import training as _training
            op = _training._OP
            self._patch(op, "grads", self._timed_backward(op.grads))
        except (ImportError, AttributeError):
            pass

    def _patch(self, owner, attr, value):
        orig = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        self._restore.append((owner, attr, orig))
        setattr(owner, attr, value)

    def _uninstall(self):
        if self._observer is not False:
            executor.set_observer(self._observer)
            self._observer = False
        for owner, attr, orig in reversed(self._restore):
            setattr(owner, attr, orig)
        self._restore = []
        for inst in self._instruments.values():
            inst.restore()
        self._instruments = {}

    def _untimed_compile(self, compile_fn):
        """Backends compile with the original kernels, so a program keeps no instrument."""
        restore = self._restore

        def compile(backend, graph, *args, **kwargs):
            swapped = [(op, op.cpu, orig) for op, attr, orig in restore if attr == "cpu"]
            for op, _, orig in swapped:
                op.cpu = orig
            try:
                return compile_fn(backend, graph, *args, **kwargs)
            finally:
                for op, wrapped, _ in swapped:
                    op.cpu = wrapped
        return compile

    def _timed_run(self, run):
        prof = self
        events = self._events

        def _run(cf, entry, leaves, env):
            for p in _programs_of(entry):
                prof._instrument(p)
            t0 = _now()
            try:
                return run(cf, entry, leaves, env)
            finally:
                t1 = _now()
                events.append(Event(f"compiled:{getattr(cf, '__name__', 'fn')}", "compiled", t0, t1, _ident(),
                                    tuple(tuple(t.shape) for t in leaves) if prof.record_shapes else None))
        return _run

    def _timed_backward(self, grads):
        prof = self
        events = self._events

        def timed_grads(node, g):
            prof._instrument(getattr(node.attrs, "program", None))
            t0 = _now()
            try:
                return grads(node, g)
            finally:
                events.append(Event("compiled_backward", "compiled", t0, _now(), _ident()))
        return timed_grads

    def _observe(self, node, kernel, args, attrs):
        """The executor's observer: one "kernel" event per node of every graph it runs
        (interpreter programs, loaded programs)."""
        kernel = getattr(kernel, "_eagerc_profiled", kernel)   # (a plan bound while this profile ran)
        t0 = _now()
        try:
            return kernel(*args, **attrs)
        finally:
            self._events.append(Event(node.op, "kernel", t0, _now(), _ident(),
                                      _shapes(args) if self.record_shapes else None, _node_args(node)))

    def _instrument(self, program):
        if program is None or program in self._instruments:
            return
        if hasattr(program, "__globals__") and hasattr(program, "graph"):  # numpy backend
            self._instruments[program] = _ProgramInstrument(self, program)
        # interpreter programs are timed by the executor's observer; other backends'
        # programs: the call event only

    # ------------------------------------------------------------ results
    def events(self):
        """Every recorded Event, in start order, with parent/children set."""
        evs = list(self._events)
        _nest(evs)
        evs.sort(key=lambda e: (e.start, -e.end))
        return evs

    @property
    def wall_time(self):
        """Nanoseconds between the start and the end of the profile (or now, if running)."""
        if self._start is None:
            return 0
        return (self._end if self._end is not None else _now()) - self._start

    @property
    def total_time(self):
        """Sum of the self times of all events (ns): time spent inside any recorded range."""
        return sum(e.self_duration for e in self.events())

    def key_averages(self, group_by_input_shape=False, category=None):
        """Statistics per event name (and input shapes, if asked): a KeyAverages list."""
        evs = self.events()
        if category is not None:
            cats = {category} if isinstance(category, str) else set(category)
            evs = [e for e in evs if e.category in cats]
        groups = {}
        for e in evs:
            key = (e.name, e.shapes) if group_by_input_shape else e.name
            g = groups.get(key)
            if g is None:
                g = groups[key] = KeyAverage(e.name, e.shapes if group_by_input_shape else None)
            g._add(e)
        return KeyAverages(groups.values(), self.wall_time, group_by_input_shape)

    def table(self, sort_by="total", row_limit=None, group_by_input_shape=False, category=None):
        """A text table of key_averages() sorted by `sort_by` ("total", "self", "count", "mean",
        "max", "name"; PyTorch's "cpu_time_total" and "self_cpu_time_total" also work)."""
        return self.key_averages(group_by_input_shape, category).table(sort_by=sort_by, row_limit=row_limit)

    def export_chrome_trace(self, path):
        """Write the events in the Chrome trace event format (JSON; loads in Perfetto and
        chrome://tracing): complete events ("ph": "X") with ts/dur in microseconds."""
        pid = os.getpid()
        t0 = self._start or 0
        trace = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "eagerc"}}]
        tids = {}
        for e in self.events():
            tid = tids.setdefault(e.tid, len(tids))
            d = {"name": e.name, "cat": e.category, "ph": "X", "ts": round((e.start - t0) / 1000, 3),
                 "dur": round(e.duration / 1000, 3), "pid": pid, "tid": tid}
            args = dict(e.args) if e.args else {}
            if e.shapes is not None:
                args["input_shapes"] = [list(s) if s is not None else None for s in e.shapes]
            if args:
                d["args"] = args
            trace.append(d)
        for tid_native, tid in tids.items():
            name = "main" if tid_native == threading.main_thread().ident else f"thread {tid_native}"
            trace.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        data = {"traceEvents": trace, "displayTimeUnit": "ms",
                "otherData": {"producer": "eagerc.profiler", "wall_time_us": self.wall_time / 1000}}
        with open(path, "w") as f:
            json.dump(data, f)
        return path

    def __repr__(self):
        state = "running" if _active is self else f"{len(self._events)} events"
        return f"<eagerc.profiler.profile {state}>"


# ---------------------------------------------------------------- statistics

class KeyAverage:
    """Statistics of the events sharing one name (and input shapes): count, total, self_total,
    mean, min, max (ns), categories."""
    __slots__ = ("key", "input_shapes", "count", "total", "self_total", "min", "max", "categories")

    def __init__(self, key, input_shapes=None):
        self.key = key
        self.input_shapes = input_shapes
        self.count = 0
        self.total = 0
        self.self_total = 0
        self.min = None
        self.max = 0
        self.categories = set()

    def _add(self, e):
        d = e.duration
        self.count += 1
        self.total += d
        self.self_total += e.self_duration
        self.min = d if self.min is None else min(self.min, d)
        self.max = max(self.max, d)
        self.categories.add(e.category)

    @property
    def mean(self):
        return self.total / self.count if self.count else 0.0

    # PyTorch's names
    cpu_time_total = property(lambda self: self.total / 1000)
    self_cpu_time_total = property(lambda self: self.self_total / 1000)
    cpu_time = property(lambda self: self.mean / 1000)

    def __repr__(self):
        return (f"<KeyAverage {self.key} count={self.count} total={_fmt_ns(self.total)} "
                f"self={_fmt_ns(self.self_total)}>")


_SORT_KEYS = {
    "total": lambda a: -a.total, "cpu_time_total": lambda a: -a.total,
    "self": lambda a: -a.self_total, "self_cpu_time_total": lambda a: -a.self_total,
    "count": lambda a: -a.count, "mean": lambda a: -a.mean, "cpu_time": lambda a: -a.mean,
    "max": lambda a: -a.max, "name": lambda a: a.key,
}


class KeyAverages(list):
    """A list of KeyAverage with `table()`; `wall_time` is the profile's (ns)."""

    def __init__(self, items, wall_time, by_shape=False):
        super().__init__(items)
        self.wall_time = wall_time
        self.by_shape = by_shape

    def table(self, sort_by="total", row_limit=None):
        if sort_by not in _SORT_KEYS:
            raise ValueError(f"eagerc.profiler: sort_by must be one of {sorted(_SORT_KEYS)}, got {sort_by!r}")
        rows = sorted(self, key=lambda a: (_SORT_KEYS[sort_by](a), a.key))
        shown = rows if row_limit is None or row_limit < 0 else rows[:row_limit]
        wall = self.wall_time or 1
        head = ["Name", "Count", "Total", "Total %", "Self", "Self %", "Mean", "Max"]
        if self.by_shape:
            head.append("Input shapes")
        body = []
        for a in shown:
            r = [a.key, str(a.count), _fmt_ns(a.total), f"{100 * a.total / wall:.2f}%", _fmt_ns(a.self_total),
                 f"{100 * a.self_total / wall:.2f}%", _fmt_ns(a.mean), _fmt_ns(a.max)]
            if self.by_shape:
                r.append(_fmt_shapes(a.input_shapes))
            body.append(r)
        widths = [max([len(head[i])] + [len(r[i]) for r in body]) for i in range(len(head))]
        widths[0] = min(widths[0], 48)

        def line(cells):
            out = []
            for i, c in enumerate(cells):
                if i == 0:
                    c = c if len(c) <= widths[0] else c[:widths[0] - 3] + "..."
                    out.append(c.ljust(widths[0]))
                elif i == len(head) - 1 and self.by_shape:
                    out.append(c)
                else:
                    out.append(c.rjust(widths[i]))
            return "  ".join(out).rstrip()
        sep = "-" * len(line(head))
        lines = [sep, line(head), sep] + [line(r) for r in body] + [sep]
        self_sum = sum(a.self_total for a in self)
        lines.append(f"Wall time: {_fmt_ns(self.wall_time)}; recorded (self) time: {_fmt_ns(self_sum)} "
                     f"({100 * self_sum / wall:.1f}%)"
                     + (f"; {len(rows) - len(shown)} more rows" if len(shown) < len(rows) else ""))
        return "\n".join(lines)

    def __str__(self):
        return self.table()


def _fmt_ns(ns):
    ns = float(ns)
    if ns < 1e3:
        return f"{ns:.0f}ns"
    if ns < 1e6:
        return f"{ns / 1e3:.3f}us"
    if ns < 1e9:
        return f"{ns / 1e6:.3f}ms"
    return f"{ns / 1e9:.3f}s"


def _fmt_shapes(shapes):
    if shapes is None:
        return ""
    return "[" + ", ".join("-" if s is None else "[" + ", ".join(map(str, s)) + "]" for s in shapes) + "]"


# ---------------------------------------------------------------- user ranges

class record_function:
    """Time a named range of user code (a context manager or a decorator). Ranges nest, and
    contain the ops they ran. Without an active profile it does nothing."""
    __slots__ = ("name", "args", "_prof", "_t0")

    def __init__(self, name, args=None):
        self.name = str(name)
        self.args = args
        self._prof = None
        self._t0 = None

    def __enter__(self):
        prof = _active
        if prof is not None:
            self._prof = prof
            self._t0 = _now()
        return self

    def __exit__(self, *exc):
        prof = self._prof
        if prof is not None:
            self._prof = None
            prof._events.append(Event(self.name, "user", self._t0, _now(), _ident(),
                                      args={"args": self.args} if self.args is not None else None))
        return False

    def __call__(self, fn):
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with record_function(name):
                return fn(*args, **kwargs)
        return wrapper
