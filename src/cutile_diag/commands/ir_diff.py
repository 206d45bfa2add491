"""``cutile-diag ir-diff BEFORE AFTER`` -- structural diff of two TileIR programs.

BEFORE / AFTER: TileIR text (``tileirdisasm`` output, ``CUDA_TILE_DUMP_TILEIR`` files),
TileIR bytecode, or capture folders (then the cubin side is compared too).  Exit status as
``diff``: 0 equivalent, 1 different, 2 error.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from ..output import console, err_console, print_json, write_atomic


def register(sub) -> None:
    """Add the ``ir-diff`` subcommand and its flags."""
    p = sub.add_parser(
        "ir-diff", help="structural diff of two TileIR dumps or capture folders",
        description="Match the ops of two TileIR programs independently of SSA names and report what "
                    "changed in kernel-author terms (tile shapes, hints, padding, rounding, TMA vs "
                    "gather, loops, token chains ...), then the attribute and topology deltas in "
                    "canonical names. Two capture folders also get their cubin facts compared.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status: 0 equivalent, 1 different, 2 error")
    p.add_argument("before", help="TileIR file, bytecode, or capture folder")
    p.add_argument("after", help="TileIR file, bytecode, or capture folder")
    p.add_argument("--entry", help="only this entry (Python function name or symbol)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument("--graphml", metavar="FILE",
                   help="also write the diff as a GraphML graph (changed and impacted ops marked) for "
                        "graph viewers such as yEd, Gephi or Cytoscape")
    p.add_argument("--no-cubin", action="store_true", help="with capture folders: skip the cubin side")
    p.add_argument("--limit", type=int, default=200, help="structural deltas shown (default %(default)s)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Diff the two programs and render the result (text, JSON, HTML, GraphML); 0 equivalent, 1 different."""
    from ..diff.core import diff_paths
    from ..diff.export import graphml
    from ..diff.output import render, render_html, to_json
    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must be >= 0")
    for opt in ("html", "graphml"):
        f = getattr(args, opt)
        if f and Path(f).is_dir():
            raise UsageError(f"--{opt} {f}: is a directory")
    result = diff_paths(args.before, args.after, entry=args.entry, cubin=not args.no_cubin)
    for opt, make in (("html", render_html), ("graphml", graphml)):
        f = getattr(args, opt)
        if not f:
            continue
        out = Path(f)
        try:
            write_atomic(out, make(result))
        except OSError as e:
            raise UsageError(f"--{opt} {out}: cannot write: {e.strerror}") from None
        if not args.json:
            err_console.print(f"[dim]wrote {out}[/]")
    if args.json:
        print_json(to_json(result))
    else:
        render(result, console, limit=args.limit)
    return 0 if result.equivalent else 1
