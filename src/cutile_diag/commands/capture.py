"""``cutile-diag capture`` — IR dumps of cuTile kernels (AOT, from a run, or from a cache)."""
from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from rich.text import Text

from ..errors import UsageError
from ..output import console, err_console, print_json, progress
from ._args import positive_arg


def register(sub) -> None:
    """Add the ``capture`` subcommand and its flags (AOT, run and cache modes)."""
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
    p.add_argument("--workload", help="AOT without specs: take the arguments from this workload's launch "
                                      "(its run on a GPU; on a CPU its inputs built there, ct.launch intercepted)")
    p.add_argument("--workload-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument for --workload (repeatable; JSON values)")
    p.add_argument("--config", help="with --workload: the configuration to launch (default: the costliest)")
    p.add_argument("--from-command", metavar="CMD",
                   help="AOT without specs, GPU: run CMD (e.g. the kernel's tests) in run mode and keep this kernel")
    p.add_argument("--hint", action="append", default=[], metavar="KEY=VALUE",
                   help="kernel hint via replace_hints: num_ctas, occupancy, num_worker_warps, opt_level")
    p.add_argument("--name", help="capture folder name (default: the kernel name)")
    p.add_argument("--out", default="cutile-diag-out/capture", help="output folder (default %(default)s)")
    p.add_argument("--from-cache", nargs="?", const="", default=None, metavar="CACHE",
                   help="mine a cuTile disk cache (folder or cache.db; default: the user's cache)")
    p.add_argument("--kernel", help="with --from-cache: only this kernel (Python name or symbol)")
    p.add_argument("--limit", help="with --from-cache: at most N newest entries")
    p.add_argument("--timeout", default=None,
                   help="run mode: kill the command after S seconds; AOT: limit on each per-arch "
                        "tileiras compile (default 600)")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="exit 0 even when a capture lacks required artifacts (a tool failed); "
                        "the manifest still lists them under 'incomplete'")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def parse_hints(items: list[str]) -> dict:
    """``--hint KEY=VALUE`` items as a dict of integers; anything else is a usage error."""
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


# options that only mean something in some modes: rejected elsewhere rather than ignored
_OPTION_MODES = {"arg": ("aot",), "hint": ("aot",), "name": ("aot",), "workload": ("aot",),
                 "workload_arg": ("aot",), "config": ("aot",), "from_command": ("aot",), "kernel": ("cache",),
                 "limit": ("cache",), "arch": ("aot", "run"), "timeout": ("aot", "run")}
_MODE_NAMES = {"aot": "FILE.py::KERNEL", "run": "-- COMMAND", "cache": "--from-cache"}


def _check_mode_options(args, mode: str) -> None:
    for opt, modes in _OPTION_MODES.items():
        if mode not in modes and getattr(args, opt) not in (None, []):
            raise UsageError(f"--{opt.replace('_', '-')} applies only to {' or '.join(_MODE_NAMES[m] for m in modes)} captures")


@contextlib.contextmanager
def _steps(enabled: bool):
    """A live status line on stderr for multi-kernel work; None (no output) when disabled
    (--json, or stderr not a terminal)."""
    if not enabled or not err_console.is_terminal:
        yield None
        return
    with err_console.status("capturing") as st:
        yield lambda msg: st.update(msg)


def run(args) -> int:
    """Capture in the one mode the arguments select (AOT, run or cache) and print the summary; 0, or a usage error for
    flags that do not fit the mode."""
    from ..capture.artifacts import incomplete_error
    from ..capture.render import detail_lines, summary_table
    from ..capture.run_mode import NothingCapturedError
    from ..capture.summary import summarize_capture
    from ..capture.spec import parse_assignments
    cmd = getattr(args, "passthrough", [])
    out = Path(args.out)
    modes = [m for m, on in (("aot", args.ref), ("run", cmd), ("cache", args.from_cache is not None)) if on]
    if not modes:
        raise UsageError("nothing to capture", hint="give FILE.py::KERNEL, --from-cache, or -- COMMAND")
    if len(modes) > 1:
        raise UsageError("choose one mode: FILE.py::KERNEL, --from-cache, or -- COMMAND")
    mode = modes[0]
    _check_mode_options(args, mode)
    timeout = positive_arg("--timeout", args.timeout)
    limit = positive_arg("--limit", args.limit, integer=True)
    # --name and --out are checked by each capture_* before any work
    captures, extra = [], {}
    show = not args.json
    if mode == "aot":
        from ..capture.aot import capture_aot
        from ..capture.artifacts import DEFAULT_TIMEOUT
        archs = args.arch or ["sm_90"]
        specs = parse_assignments(args.arg) if args.arg else None
        hints = parse_hints(args.hint)
        if args.workload or args.from_command:
            if hints:
                raise UsageError("--hint needs argument specs (--arg), not --workload/--from-command")
            from ..measure.capture import capture_auto
            from ..loop.factory import parse_kv
            with progress(3, f"capturing {args.ref}", enabled=show) as bar:
                auto = capture_auto(args.ref, specs, workload=args.workload,
                                    workload_kwargs=parse_kv(args.workload_arg, "--workload-arg"),
                                    config=args.config, command=args.from_command, archs=archs, out_dir=out,
                                    name=args.name, timeout=timeout,
                                    on_step=lambda s: bar.advance(description=s))
            captures.append(auto.folder)
            launch = auto.folder.manifest.get("launch")
            extra = {"source": auto.source, "tried": auto.tried, "launch": launch,
                     "notes": [f"arguments from {auto.source}" + (
                         f": grid {tuple(launch['grid'])} on {launch.get('sm_count')} SMs"
                         f" ({launch.get('sm_source')})" if launch else "")] + auto.tried}
        else:
            with progress(2, f"capturing {args.ref}", enabled=show) as bar:
                captures.append(capture_aot(args.ref, specs, archs=archs, out_dir=out, hints=hints or None,
                                            name=args.name, on_step=lambda s: bar.advance(description=s),
                                            timeout=timeout or DEFAULT_TIMEOUT,
                                            specs_alternative=" (or --workload REF: the arguments of its launch)"))
    elif mode == "run":
        from ..capture.run_mode import capture_run
        # Text, not markup: the child's output is printed verbatim
        echo = (lambda line: err_console.print(Text("│ ", style="dim") + Text(line), highlight=False)) \
            if show else None
        with _steps(show) as on_step:
            rc = capture_run(cmd, out_dir=out, timeout=timeout, archs=args.arch, echo=echo, on_step=on_step)
        captures = rc.captures
        extra = {"command": cmd, "returncode": rc.returncode, "seconds": round(rc.seconds, 3), "notes": rc.notes}
        if not captures:
            raise NothingCapturedError("no kernels captured: " + "; ".join(rc.notes or ["nothing was dumped"]))
    else:
        from ..capture.run_mode import capture_from_cache
        with _steps(show) as on_step:
            captures = capture_from_cache(args.from_cache or None, out_dir=out, kernel=args.kernel,
                                          limit=limit, on_step=on_step)
    summaries = [summarize_capture(c) for c in captures]
    per_arch = {c.path: {a: summarize_capture(c, a) for a in c.targets} for c in captures}
    incomplete = [c for c in captures if c.manifest.get("incomplete")]
    if args.json:
        print_json({"out": str(out), **extra, "complete": not incomplete,
                    "captures": [{"path": str(c.path), "name": c.name, "kernel": s.kernel, "symbol": c.symbol,
                                  "targets": c.targets,
                                  "incomplete": c.manifest.get("incomplete", []),
                                  "unavailable": c.manifest.get("unavailable", {}),
                                  "summary": s,
                                  "per_arch": {a: x.target_facts() for a, x in per_arch[c.path].items()}}
                                 for c, s in zip(captures, summaries)]})
    else:
        console.print(summary_table([x for c in captures for x in per_arch[c.path].values()],
                                    title=f"Captured into {out}"))
        for c, s in zip(captures, summaries):
            console.print(f"[bold]{s.name}[/] [dim]{c.path}[/]")
            for line in detail_lines(s):
                console.print(line)
            if c.manifest.get("incomplete") and args.allow_incomplete:
                console.print(f"  [yellow]accepted incomplete:[/] {', '.join(c.manifest['incomplete'])}")
        for n in extra.get("notes", []):
            console.print(f"[dim]note: {n}[/]")
    if incomplete and not args.allow_incomplete:
        raise incomplete_error(incomplete)       # after the output: the summary shows what is there
    return 0
