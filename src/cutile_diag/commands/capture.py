"""``cutile-diag capture`` — IR dumps of cuTile kernels (AOT, from a run, or from a cache)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from ..output import console, err_console, print_json, progress


def register(sub) -> None:
    p = sub.add_parser(
        "capture", help="capture TileIR, cubin, SASS, remarks and resources of kernels",
        description="Three modes. Ahead of time (no GPU):  capture FILE.py::KERNEL --arch sm_90 "
                    "[--arg NAME=SPEC ...] --out DIR.  From a real run:  capture --out DIR -- python "
                    "script.py ...  (or a pytest selection).  From a cuTile cache:  capture --from-cache "
                    "[CACHE_DIR] --out DIR.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="SPEC: arrays f16[M,K] or f32[4096] (options :index=i64,align=8,layout=F), "
               "scalars f32/i32, constants 128/true.  Without --arg, the module's CAPTURE_SPECS are used.")
    p.add_argument("ref", nargs="?", help="FILE.py::KERNEL (AOT mode)")
    p.add_argument("--arch", action="append", default=None, help="target arch (repeatable; default sm_90)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=SPEC", help="argument spec (repeatable)")
    p.add_argument("--hint", action="append", default=[], metavar="KEY=VALUE",
                   help="kernel hint via replace_hints: num_ctas, occupancy, num_worker_warps, opt_level")
    p.add_argument("--name", help="capture folder name (default: the kernel name)")
    p.add_argument("--out", default="cutile-diag-out/capture", help="output folder (default %(default)s)")
    p.add_argument("--from-cache", nargs="?", const="", default=None, metavar="CACHE",
                   help="mine a cuTile disk cache (folder or cache.db; default: the user's cache)")
    p.add_argument("--kernel", help="with --from-cache: only this kernel (Python name or symbol)")
    p.add_argument("--limit", type=int, help="with --from-cache: at most N newest entries")
    p.add_argument("--timeout", type=float, default=None, help="run mode: kill the command after S seconds")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def parse_hints(items: list[str]) -> dict:
    out = {}
    for it in items:
        if "=" not in it:
            raise UsageError(f"--hint '{it}' must look like KEY=VALUE (e.g. occupancy=2)")
        k, v = (x.strip() for x in it.split("=", 1))
        try:
            out[k] = int(v)
        except ValueError:
            raise UsageError(f"--hint {k}: value must be an integer, not '{v}'") from None
    return out


def run(args) -> int:
    from ..capture.render import detail_lines, summary_table
    from ..capture.summary import summarize_capture
    from ..capture.spec import parse_assignments
    cmd = getattr(args, "passthrough", [])
    out = Path(args.out)
    modes = sum(bool(x) for x in (args.ref, cmd, args.from_cache is not None))
    if modes == 0:
        raise UsageError("nothing to capture", hint="give FILE.py::KERNEL, --from-cache, or -- COMMAND")
    if modes > 1:
        raise UsageError("choose one mode: FILE.py::KERNEL, --from-cache, or -- COMMAND")
    captures, extra = [], {}
    show = not args.json
    if args.ref:
        archs = args.arch or ["sm_90"]
        specs = parse_assignments(args.arg) if args.arg else None
        hints = parse_hints(args.hint)
        with progress(2, f"capturing {args.ref}", enabled=show) as bar:
            from ..capture.aot import capture_aot
            captures.append(capture_aot(args.ref, specs, archs=archs, out_dir=out, hints=hints or None,
                                        name=args.name, on_step=lambda s: bar.advance(description=s)))
    elif cmd:
        from ..capture.run_mode import capture_run
        echo = (lambda line: err_console.print(f"[dim]│[/] {line}", markup=False, highlight=False)) if show else None
        rc = capture_run(cmd, out_dir=out, timeout=args.timeout, archs=args.arch, echo=echo)
        captures = rc.captures
        extra = {"command": cmd, "returncode": rc.returncode, "seconds": round(rc.seconds, 3), "notes": rc.notes}
    else:
        from ..capture.run_mode import capture_from_cache
        captures = capture_from_cache(args.from_cache or None, out_dir=out, kernel=args.kernel, limit=args.limit)
    summaries = [summarize_capture(c) for c in captures]
    per_arch = [summarize_capture(c, a) for c in captures for a in (c.targets or [None])]
    if args.json:
        print_json({"out": str(out), **extra,
                    "captures": [{"path": str(c.path), "name": c.name, "symbol": c.symbol,
                                  "targets": c.targets, "summary": s} for c, s in zip(captures, summaries)]})
        return 0
    if not captures:
        console.print("[yellow]no kernels were captured[/]" + (f": {'; '.join(extra.get('notes', []))}" if extra else ""))
        return 1
    console.print(summary_table(per_arch, title=f"Captured into {out}"))
    for c, s in zip(captures, summaries):
        console.print(f"[bold]{s.name}[/] [dim]{c.path}[/]")
        for line in detail_lines(s):
            console.print(line)
    for n in extra.get("notes", []):
        console.print(f"[dim]note: {n}[/]")
    return 0
