"""`eagerc.profiler`: where the time goes, per op (eager) and per kernel (compiled).

    with eagerc.profiler.profile(record_shapes=True) as prof:
        with eagerc.profiler.record_function("forward"):
            loss = model(x).sum()
        loss.backward()
    print(prof.table(sort_by="total", row_limit=10))
    prof.export_chrome_trace("trace.json")          # open in https://ui.perfetto.dev

How it measures: hooks where the work happens, nothing swapped
---------------------------------------------------------------
A running profile is a per-thread mode (`dispatch.Modes.profiler`, set by `start` in the
thread that calls it, cleared by `stop`; a new thread starts unprofiled, like grad mode),
read at the points where work runs:

- `dispatch.apply` and `dispatch.create` hand the kernel call to `profile.op`: one "op"
  event per eager op, forward and backward alike;
- a compiled call (`compiler/entries.run`) and the backward program of a compiled training
  call (`compiler/training`) run through `profile.compiled`: one "compiled" event around
  the program's "kernel" events. A generated program (numpy, c, cuda backends) runs as its
  timed twin: the program's own source compiled again, with each statement on a line of
  `program.line_nodes` (the lines that compute graph nodes, a fused kernel's line naming
  every node it fuses) wrapped in a timer -- built once per program, kept on it
  (`program.timed`), with its own copy of the globals. The program itself never changes,
  and the twin only runs inside `profile.compiled`: a program compiled during a profile
  keeps no instrument;
- the runtime's graph executor (runtime/executor.py: interpreter-backend programs and loaded
  `eagerc.runtime` programs) has the profile as its process-wide observer while it runs;
  the observer times the nodes that the profiled thread runs.

With no profile active, `apply`, `create` and a compiled call test one slot, and the
executor has no observer. `record_function` reads the same slot.

Times are host wall-clock times (`time.perf_counter_ns`). CUDA (cupy) kernels are not
synchronised: they run asynchronously, so their host time is the launch time only.

Events nest by time on each thread (a `record_function` range contains the ops it ran,
a "compiled" call contains its kernels). `total` is an event's own duration, `self` that
minus its direct children: summing self times never counts anything twice.
"""
import ast
import collections
import functools
import json
import os
import threading
import time

from . import dispatch
from .runtime import executor
from .runtime.ir import Value

__all__ = ["profile", "record_function", "Event", "KeyAverage", "KeyAverages", "ProfilerActivity"]

_now = time.perf_counter_ns
_ident = threading.get_ident

_active = None          # the running `profile` (one at a time), or None
_modes = dispatch.modes
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


# ---------------------------------------------------------------- timed twins of generated programs

def _node_args(n):
    d = {"node": n.out.name}
    if n.loc:
        d["loc"] = n.loc
    if n.module:
        d["module"] = n.module
    return d


def _declared_shapes(nodes):
    """The input shapes the graph declares for the nodes of one line (None: a constant)."""
    inner = {n.out.name for n in nodes}
    return tuple(tuple(x.shape) if isinstance(x, Value) else None
                 for n in nodes for x in n.inputs if not (isinstance(x, Value) and x.name in inner))


def _timed_twin(program):
    """The timed twin of a generated program (see the module docstring), built on first use and
    kept on the program; a program without `line_nodes` (an interpreter Plan, observed by the
    executor) runs as it is."""
    twin = getattr(program, "timed", None)
    if twin is None:
        if not getattr(program, "line_nodes", None):
            return program
        twin = program.timed = _build_twin(program)
    return twin


def _build_twin(program):
    nodes = {n.out.name: n for n in program.graph.nodes}
    kernels = {tuple(k.nodes): k.name for k in getattr(program, "kernels", None) or ()}
    events = {}   # line -> (event name, args, declared input shapes)
    for line, names in program.line_nodes.items():
        ns = [nodes[name] for name in names]
        if len(ns) == 1:
            events[line] = (ns[0].op, _node_args(ns[0]), _declared_shapes(ns))
        else:  # a fused kernel: `fused:k0(amax,sub,exp,sum,div)`, the kernel and the ops it computes
            events[line] = (f"fused:{kernels.get(tuple(names), 'kernel')}({','.join(n.op for n in ns)})",
                            {"nodes": list(names)}, _declared_shapes(ns))
    tree = ast.parse(program.source)
    for parent in list(ast.walk(tree)):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(parent, field, None)
            if isinstance(body, list) and any(getattr(s, "lineno", None) in events for s in body):
                setattr(parent, field, [t for s in body for t in (_timed_stmt(s) if s.lineno in events else [s])])
    globs = {**program.__globals__, "_profile_now": _now, "_profile_line": functools.partial(_line_done, events)}
    exec(compile(tree, program.filename, "exec"), globs)   # (same file name and lines: tracebacks read the source)
    return globs["program"]


def _timed_stmt(s):
    """`_profile_t0 = _profile_now()`, then `try: <s> finally: _profile_line(<line>, _profile_t0)`,
    all on the statement's line."""
    start = ast.parse("_profile_t0 = _profile_now()").body[0]
    done = ast.parse(f"_profile_line({s.lineno}, _profile_t0)").body[0]
    for new in (start, done):
        for n in ast.walk(new):
            if "lineno" in n._attributes:
                ast.copy_location(n, s)
    return [start, ast.copy_location(ast.Try(body=[s], handlers=[], orelse=[], finalbody=[done]), s)]


def _line_done(events, line, t0):
    """A twin's line ran: one "kernel" event into the running profile."""
    t1 = _now()
    prof = _active
    if prof is not None:
        name, args, shapes = events[line]
        prof._events.append(Event(name, "kernel", t0, t1, _ident(), shapes if prof.record_shapes else None, args))


# ---------------------------------------------------------------- the profiler

class profile:
    """Record per-op (eager) and per-kernel (compiled) times of this thread while the block runs.

    record_shapes: also record each call's input shapes (shown by
        `key_averages(group_by_input_shape=True)` and in the Chrome trace).
    activities, with_stack, profile_memory: accepted for PyTorch compatibility, ignored.
    enabled: False makes the profiler a no-op.

    One profile may be active at a time; it records the thread that starts it (and contexts
    copied from it, such as asyncio tasks), not other threads. After the block: `events()`, `key_averages()`,
    `table()`, `export_chrome_trace(path)`, `total_time` and `wall_time` (ns).
    """

    def __init__(self, *, record_shapes=False, activities=None, with_stack=False, profile_memory=False,
                 enabled=True):
        self.record_shapes = bool(record_shapes)
        self.enabled = enabled
        self._events = []
        self._start = None
        self._end = None
        self._observer = None    # while running: the executor's previous observer

    # ------------------------------------------------------------ start / stop
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        """Profile this thread from now on (and the executor's runs in it)."""
        global _active
        if not self.enabled:
            return self
        with _lock:
            if _active is not None:
                raise RuntimeError("eagerc.profiler: another profile is already active (profiles do not "
                                   "nest; use record_function for sub-ranges)")
            _active = self
        self._events = []
        self._observer = executor.set_observer(self._observe)
        dispatch.set_profiler(self)
        self._start = _now()
        return self

    def stop(self):
        global _active
        if _active is not self:
            return self
        self._end = _now()
        dispatch.set_profiler(None)
        executor.set_observer(self._observer)
        self._observer = None
        _active = None
        return self

    # ------------------------------------------------------------ hooks
    def op(self, name, kernel, args, attrs):
        """dispatch's hook: kernel(*args, **attrs), recorded as one "op" event."""
        if _active is not self:  # (a context copied from the profiled thread outlived the profile)
            return kernel(*args) if attrs is None else kernel(*args, **attrs)
        t0 = _now()
        try:
            return kernel(*args) if attrs is None else kernel(*args, **attrs)
        finally:
            t1 = _now()
            self._events.append(Event(name, "op", t0, t1, _ident(), _shapes(args) if self.record_shapes else None))

    def compiled(self, name, tensors, call, program, *args):
        """The compiled-call hook: call(program, *args) with the program's timed twin, recorded as
        one "compiled" event `name` (with the shapes of the argument `tensors`, if any)."""
        if _active is not self:
            return call(program, *args)
        twin = _timed_twin(program)
        t0 = _now()
        try:
            return call(twin, *args)
        finally:
            t1 = _now()
            shapes = tuple(tuple(t.shape) for t in tensors) if self.record_shapes and tensors is not None else None
            self._events.append(Event(name, "compiled", t0, t1, _ident(), shapes))

    def _observe(self, node, kernel, args, attrs):
        """The executor's observer: one "kernel" event per node the profiled thread runs
        (interpreter programs, loaded programs)."""
        if _active is not self or _modes().profiler is not self:
            return kernel(*args, **attrs)
        t0 = _now()
        try:
            return kernel(*args, **attrs)
        finally:
            t1 = _now()
            self._events.append(Event(node.op, "kernel", t0, t1, _ident(),
                                      _shapes(args) if self.record_shapes else None, _node_args(node)))

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
    contain the ops they ran. Without a profile active in this thread it does nothing."""
    __slots__ = ("name", "args", "_prof", "_t0")

    def __init__(self, name, args=None):
        self.name = str(name)
        self.args = args
        self._prof = None
        self._t0 = None

    def __enter__(self):
        prof = _modes().profiler
        if prof is not None and prof is _active:
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
