"""The `eagerc` command: viz, inspect, run, bench (docs/cli.md).

Exit codes: 0 success, 1 the command failed, 2 the command line is wrong. Errors are one
line on stderr, `eagerc <command>: error: ...`; --debug shows the traceback instead.
Everything printed goes through common.printable: control characters from a file (a node
location of "\x1b]0;...\x07", say) are shown escaped, never sent to the terminal.
Each subcommand lives in its own module (viz.py, inspect.py, run.py) with its arguments
and its help text; this file only wires them up.
"""
import argparse
import os
import sys
import traceback

from .common import CommandError, PrintableStream, UsageError, one_line, printable

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors in one line (and exit code 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _formatter(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def build_parser():
    from . import inspect as inspect_cmd, run as run_cmd, viz as viz_cmd
    from .. import __version__
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the full traceback of an error")
    parser = _Parser(prog="eagerc", formatter_class=_formatter,
                     description="Look at, run and time eagerc programs. `eagerc COMMAND --help` for each command.",
                     epilog="Exit codes: 0 success, 1 failure, 2 bad usage. Docs: docs/cli.md")
    parser.add_argument("--version", action="version", version=f"eagerc {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    commands = [("viz", viz_cmd.HELP, viz_cmd.DESCRIPTION, viz_cmd.add_arguments, viz_cmd.run),
                ("inspect", inspect_cmd.HELP, inspect_cmd.DESCRIPTION, inspect_cmd.add_arguments, inspect_cmd.run),
                ("run", run_cmd.RUN_HELP, run_cmd.RUN_DESCRIPTION, run_cmd.add_run_arguments, run_cmd.run),
                ("bench", run_cmd.BENCH_HELP, run_cmd.BENCH_DESCRIPTION, run_cmd.add_bench_arguments, run_cmd.bench)]
    for name, help_, description, add, fn in commands:
        p = sub.add_parser(name, help=help_, description=description, parents=[debug], formatter_class=_formatter)
        add(p)
        p.set_defaults(func=fn)
    return parser


def main(argv=None):
    """Entry point of `eagerc` and `python -m eagerc`; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = f"eagerc {args.command}"
    try:
        return args.func(args, PrintableStream(sys.stdout)) or 0
    except (UsageError, CommandError) as e:
        if args.debug:
            traceback.print_exc()
        usage = isinstance(e, UsageError)
        print(f"{prog}: error: {printable(e)}" + (f" (see {prog} --help)" if usage else ""), file=sys.stderr)
        return 2 if usage else 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:      # `eagerc inspect m.eagerc | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as e:       # a bug, or an error from the user's code: one line unless --debug
        if args.debug:
            traceback.print_exc()
        else:
            print(f"{prog}: error: {type(e).__name__}: {one_line(e)} (--debug shows the traceback)",
                  file=sys.stderr)
        return 1
