"""What the subcommands share: errors, loading programs, shapes and dtypes, input arrays,
and `printable`: every string that reaches the terminal has its control characters escaped.

Two error types decide the exit code: `UsageError` (2: the command line is wrong) and
`CommandError` (1: the command could not do its work). Both carry a one-line message.
"""
import os
import re

import numpy as np
from ..runtime.dtypes import FLOATING_KINDS

__all__ = ["UsageError", "CommandError", "load_program", "parse_shape", "parse_dtype",
           "example_shape", "random_inputs", "read_inputs", "output_leaves", "spec_type", "one_line",
           "fmt_bytes", "fmt_count", "printable", "PrintableStream"]


# ---------------------------------------------------------------- terminal safety

# C0 and C1 control characters, DEL, and the invisible reordering marks ("Trojan source")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e"
                                "\u2066-\u2069]")


def _escape(m):
    o = ord(m.group())
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def printable(text, lines=False):
    """`text` with its control characters written as escapes (ESC as \\x1b, a newline as
    \\n): a string from a file -- a node location, a name, metadata -- can then neither
    drive the terminal (colours, titles, clearing the screen) nor fake lines of output.
    lines=True keeps newlines and tabs, for text that eagerc itself laid out."""
    return (_CONTROL_BUT_LINES if lines else _CONTROL).sub(_escape, str(text))


class PrintableStream:
    """A text stream that escapes control characters (newlines and tabs kept) on the way out:
    the `out` every subcommand writes to, so nothing escapes raw even where a command
    forgets to call `printable` on a string from a file."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        return self.stream.write(printable(text, lines=True))

    def flush(self):
        self.stream.flush()


class UsageError(Exception):
    """The command line is wrong (exit code 2)."""


class CommandError(Exception):
    """The command could not do its work (exit code 1)."""


# ---------------------------------------------------------------- program files

def load_program(path):
    """A validated LoadedProgram (the runtime's loader: every check, nothing executed)."""
    from ..runtime.program import NotAProgram, ProgramLoadError, load
    if not os.path.exists(path):
        hint = " (for a Python callable, write package.module:callable)" if ":" not in path and \
            not path.endswith(".eagerc") else ""
        raise CommandError(f"{path}: no such file{hint}")
    if os.path.isdir(path):
        raise CommandError(f"{path}: is a directory, not a program file")
    try:
        return load(path)
    except NotAProgram as e:
        raise CommandError(str(e)) from None
    except ProgramLoadError as e:
        raise CommandError(f"not a valid eagerc program: {e}") from None


def example_shape(spec, dynamic_dims):
    """The concrete shape of an input spec, dynamic sizes at their example values."""
    return tuple(dynamic_dims[s]["example"] if isinstance(s, str) else s for s in spec["shape"])


# ---------------------------------------------------------------- shapes, dtypes, arrays

def parse_shape(text, option="--input-shape"):
    """'1,3,32,32' (or 1x3x32x32, or '' / 'scalar' for a 0-d input) -> (1, 3, 32, 32)."""
    t = text.strip().strip("()[]")
    if t in ("", "scalar"):
        return ()
    parts = [p.strip() for p in t.replace("x", ",").replace("×", ",").split(",")]
    if parts and parts[-1] == "":
        parts.pop()
    try:
        sizes = tuple(int(p) for p in parts)
    except ValueError:
        sizes = None
    if not sizes or any(s < 0 for s in sizes):
        raise UsageError(f"{option} {text!r}: expected non-negative integer sizes separated by commas, "
                         f"e.g. {option} 1,3,32,32")
    return sizes


def parse_dtype(text, option="--dtype"):
    from ..runtime import dtypes
    try:
        return dtypes.as_dtype(text).name
    except (TypeError, ValueError):
        names = ", ".join(d.name for d in dtypes.ALL)
        raise UsageError(f"{option} {text!r}: unknown dtype (one of {names})") from None


def random_inputs(shapes, dtypes_, seed=0):
    """Example arrays: standard normal floats, integers in {0, 1}, random booleans."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, dt in zip(shapes, dtypes_):
        dt = np.dtype(dt)
        if dt.kind in FLOATING_KINDS:
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.random(shape) < 0.5)
        else:
            out.append(rng.integers(0, 2, shape).astype(dt))
    return out


def read_inputs(files, specs, dynamic_dims):
    """Arrays from .npy files, checked against the program's input specs (naming the file)."""
    if len(files) != len(specs):
        sig = ", ".join(f"{s['path']}: {spec_type(s)}" for s in specs)
        raise UsageError(f"the program takes {len(specs)} input{'s' if len(specs) != 1 else ''} ({sig}); "
                         f"got {len(files)} --input file{'s' if len(files) != 1 else ''}")
    arrays = []
    binding = {}
    for f, spec in zip(files, specs):
        try:
            a = np.load(f, allow_pickle=False)
        except FileNotFoundError:
            raise CommandError(f"--input {f}: no such file") from None
        except (OSError, ValueError, EOFError) as e:
            raise CommandError(f"--input {f}: not a readable .npy file ({one_line(e)})") from None
        if not isinstance(a, np.ndarray):
            raise CommandError(f"--input {f}: holds several arrays (an .npz); save each input with np.save")
        want = np.dtype(spec["dtype"])
        if a.dtype != want:
            raise CommandError(f"--input {f}: dtype {a.dtype}, but input {spec['path']!r} is {spec['dtype']} "
                               f"(convert it with .astype(np.{spec['dtype']}))")
        shape = spec["shape"]
        ok = len(a.shape) == len(shape)
        for n, s in zip(a.shape, shape) if ok else ():
            if isinstance(s, str):
                ok = ok and binding.setdefault(s, n) == n
            else:
                ok = ok and n == s
        if not ok:
            raise CommandError(f"--input {f}: shape {list(a.shape)}, but input {spec['path']!r} is "
                               f"{spec_type(spec)}")
        arrays.append(a)
    return arrays


def spec_type(spec):
    """'f32[batch,3,32,32]' for an input spec."""
    from ..runtime.ir import short_dtype
    return f"{short_dtype(spec['dtype'])}[{','.join(str(s) for s in spec['shape'])}]"


def output_leaves(values):
    """[(key, value)] for the leaves of a program's output structure: 'output' for a single
    result, 'output.0', 'output.logits', ... for tuples, lists and dicts."""
    out = []

    def walk(v, key):
        if isinstance(v, (tuple, list)):
            for i, x in enumerate(v):
                walk(x, f"{key}.{i}")
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{key}.{k}")
        else:
            out.append((key, v))
    walk(values, "output")
    return out


def one_line(e):
    """The first line of an exception's message (or its type name), control characters escaped."""
    text = str(e).strip().splitlines()
    return printable(text[0]) if text else type(e).__name__


def fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def fmt_count(n):
    """1234567 -> '1.23 M' (FLOPs, parameters)."""
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f} "
