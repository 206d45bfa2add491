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

# Shown first in --help, in pipeline order; any other discovered command follows.
_ORDER = ["demo", "capture", "ir_diff", "peaks", "roofline", "diagnose", "optimize", "loop"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cutile-diag",
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after the first '--' is a command to run (capture run mode, loop commands)
    passthrough: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)
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
