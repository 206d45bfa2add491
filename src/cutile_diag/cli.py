"""The ``cutile-diag`` command line: a thin layer over the Python API.

Each subcommand lives in ``cutile_diag/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``func(args) -> int`` (the exit code).  Modules are discovered, so stages can add
commands without touching this file.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from . import __version__
from .errors import CutileDiagError
from .output import prog

# Shown first in --help, in pipeline order; any other discovered command follows.
_ORDER = ["demo", "capture", "ir_diff", "peaks", "roofline", "diagnose", "optimize", "loop"]


class _Parser(argparse.ArgumentParser):
    """argparse with the product's error form: one ``cutile-diag: error: …`` line (argparse's own
    is a usage block and ``PROG: error:``), pointing at the --help of the command concerned."""

    def error(self, message: str):
        self.exit(2, f"cutile-diag: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``cutile-diag`` parser: one subcommand per module of ``commands/``."""
    parser = _Parser(
        prog=prog(),        # usage lines read as the user runs it (./dev, or the console script)
        description="Capture, diff, roofline, diagnose and optimise cuTile kernels.")
    parser.add_argument("--version", action="version", version=f"cutile-diag {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import commands
    names = [m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")]
    names.sort(key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))
    for name in names:
        mod = importlib.import_module(f"{commands.__name__}.{name}")
        mod.register(sub)
    return parser


def _chosen(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The innermost (sub)command parser the arguments chose (``loop next``'s, not ``loop``'s)."""
    while parser._subparsers is not None:
        action = parser._subparsers._group_actions[0]
        name = getattr(args, action.dest, None)
        if name not in action.choices:
            break
        parser = action.choices[name]
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (after ``--``: the command to run) and return the exit code; a
    CutileDiagError is one line on stderr, never a traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after the first '--' is a command to run (capture run mode, loop commands)
    passthrough: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1:]
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:       # named against the (sub)command, whose --help lists what it takes
        _chosen(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    args.passthrough = passthrough
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CutileDiagError as e:
        print(f"cutile-diag: error: {e.one_line()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("cutile-diag: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `cutile-diag ... | head`: not an error worth a traceback
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
