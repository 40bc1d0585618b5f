"""Which code is eagerc's own: frames by the package's real directory, warnings by module.

A user's project may itself sit in a folder named `eagerc/` (git's default name for a
clone of this repository), so the user's line in a traceback is found by comparing a
frame's file with where this package really is -- never by a substring of the path.

numpy reports floating-point trouble (log(0), 0/0, overflow, sqrt(-1)) as RuntimeWarnings;
PyTorch is silent there (the result is inf or nan). numpy attributes such a warning to the
innermost Python frame -- an eagerc kernel, the dispatch point, or a compiled program
(whose globals say `__name__ = "eagerc_compiled..."`) -- so one warnings filter, installed
when the kernels are imported, silences exactly those and costs nothing on the hot path
(an `np.errstate` per op would cost about 1 us). Warnings eagerc raises on purpose (a
missing C compiler, graph breaks) have other messages and still show.

Its limit: a filter the user adds later goes in front of it (`warnings.simplefilter("error")`
after `import eagerc`), and `warnings.catch_warnings()` restores the filter list it found, so
a filter added while such a block is open is gone when it closes -- pytest opens one around
collection and each test. So the callers also catch what gets through: when a kernel's
floating-point warning reaches `dispatch.apply` as an error, apply reruns the pure kernel with
numpy's checks off (only that error path pays), and a compiled call does the same
(`compiler.entries.call`; a program with in-place updates runs with the checks off). The
exported-program runtime runs with them off. Under pytest, `NUMERIC_WARNINGS_FILTER` in the
`filterwarnings` ini option spares those reruns (this project's tests/conftest.py has it).
"""
import os
import traceback
import warnings

__all__ = ["PACKAGE_DIR", "is_eagerc_file", "user_stack", "NUMERIC_WARNING_MESSAGE",
           "NUMERIC_WARNING_MODULE", "NUMERIC_WARNINGS_FILTER", "silence_numeric_warnings"]

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

# numpy's floating-point error messages ("divide by zero encountered in log", ...)
NUMERIC_WARNING_MESSAGE = r"(divide by zero|invalid value|overflow|underflow) encountered in "
# eagerc's modules and the programs its backends generate (eagerc_compiled, _c, _cuda)
NUMERIC_WARNING_MODULE = r"eagerc(\.|_compiled|$)"
# the same filter in pytest's `filterwarnings` syntax
NUMERIC_WARNINGS_FILTER = f"ignore:{NUMERIC_WARNING_MESSAGE}:RuntimeWarning:{NUMERIC_WARNING_MODULE}"


def is_eagerc_file(filename):
    """True for a file of this package and for code it generated (`<eagerc-compiled-3>`)."""
    return filename.startswith("<eagerc") or os.path.abspath(filename).startswith(PACKAGE_DIR)


def user_stack(limit=8):
    """The current traceback without eagerc's own frames, formatted, innermost `limit` frames."""
    frames = [f for f in traceback.extract_stack() if not is_eagerc_file(f.filename)]
    return "".join(traceback.format_list(frames[-limit:]))


def silence_numeric_warnings():
    """Install the filter that keeps numpy's floating-point RuntimeWarnings from eagerc's
    code away from users (idempotent: the filter moves to the front, as warnings does)."""
    warnings.filterwarnings("ignore", message=NUMERIC_WARNING_MESSAGE, category=RuntimeWarning,
                            module=NUMERIC_WARNING_MODULE)
