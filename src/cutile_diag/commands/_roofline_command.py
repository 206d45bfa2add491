"""``cutile-diag roofline -- COMMAND``: every kernel a command launches, one point per configuration.

The command runs once with every ``ct.launch`` observed (``capture.launch_observer``); each
kernel at each configuration gets calls, total and median device time (measured), FLOPs and
bytes (static estimates from its TileIR at the recorded shapes), TB/s, TFLOP/s, the class,
percent of the roof and the verdict (``roofline.observed``).  ``--ncu`` runs the command a
second time under Nsight Compute for measured DRAM bytes per kernel.  ``--dry-run`` records
the launches without executing any kernel: static counts only, no GPU needed.
"""
from __future__ import annotations

import argparse

from ..errors import UsageError
from ..output import console, err_console, print_json, progress
from ._args import number_arg, positive_arg


def _device(args, gpu):
    from ..roofline.device import live_device, preset
    from ..roofline.peaks import get_ceilings, recorded_ceilings
    if args.device:
        dev = preset(args.device)
        return dev, recorded_ceilings(dev)
    if args.dry_run:
        try:
            dev = live_device(gpu)
        except Exception:           # no GPU: the counts need no device, the bound then stays open
            return None, None
        return dev, None
    dev = live_device(gpu)
    return dev, get_ceilings(dev, measure_if_missing=not args.no_peaks)


def run_command(args: argparse.Namespace, cmd: list[str]) -> int:
    from rich.text import Text
    from ..capture.launch_observer import observe_command
    from ..roofline.observed import attach_ncu, roofline_launches
    timeout = positive_arg("--timeout", args.timeout)
    pad_us = number_arg("--pad-us", args.pad_us, strict=False)
    gpu = number_arg("--gpu", args.gpu, strict=False, integer=True)
    if args.ncu:
        from ..roofline.ncu import ncu_available
        why = ncu_available()
        if why:
            raise UsageError(f"--ncu: {why}", hint="install Nsight Compute or drop --ncu")
        if args.dry_run or args.device:
            raise UsageError("--ncu profiles a real run on a GPU: drop --dry-run / --device")
    if not args.dry_run:
        import torch
        if not torch.cuda.is_available():
            raise UsageError("timing a command's kernels needs a CUDA GPU and none is visible",
                             hint="--dry-run records the launches without executing them (static counts only)")
    dev, ceilings = _device(args, gpu)
    show = not args.json
    echo = (lambda line: err_console.print(Text("│ ", style="dim") + Text(line), highlight=False)) if show else None
    run = observe_command(cmd, execute=not args.dry_run, timeout=timeout, pad_us=pad_us, echo=echo)
    with progress(1, "roofline: static counts", enabled=show) as bar:
        results = roofline_launches(run.records, device=dev, ceilings=ceilings, on_step=lambda m: bar.update(m))
    if args.ncu:
        from ..roofline.ncu import profile_command
        names = sorted({r.group.kernel for r in results})
        attach_ncu(results, profile_command(cmd, names, timeout_s=timeout))
    points = [r.point for r in results if r.point is not None]
    plot_path = None
    if args.plot and points:
        from ..roofline.plot import plot_roofline
        plot_path = plot_roofline(points, dev, ceilings, args.plot, title=f"roofline of {' '.join(cmd)[:60]}")
    elif args.plot:
        err_console.print("no measured points: nothing to plot")
    expected = "no_time" if args.dry_run else "ok"
    bad = [r for r in results if r.status not in (expected, "ok")]
    if args.json:
        print_json({"command": cmd, "returncode": run.returncode, "seconds": round(run.seconds, 3),
                    "executed": run.executed, "launches": len(run.records),
                    "device": dev.to_json() if dev else None, "ceilings": ceilings.to_json() if ceilings else None,
                    "counts_source": "static estimates (TileIR at the recorded shapes)",
                    "time_source": "measured (CUDA events around each launch)" if run.executed else None,
                    "kernels": [r.to_json() for r in results], "warnings": run.warnings,
                    "stdout_tail": run.stdout_tail,
                    "plot": str(plot_path) if plot_path else None})
        return 1 if bad else 0
    _print(results, dev, run)
    if plot_path:
        console.print(f"plot: {plot_path}")
    return 1 if bad else 0


def _fmt(v, spec: str, scale: float = 1.0) -> str:
    return "-" if v is None else format(v / scale, spec)


def _table(results, dev, run):
    """One line per configuration in 100 columns: rows grouped under their kernel's name, the
    shape shortened (``short_label``); grid, counts, class and the full array list go below."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table
    where = f"{dev.name} ({dev.kind})" if dev else "no device model"
    what = "measured times" if run.executed else "not executed (--dry-run)"
    t = Table(title=escape(f"{len(run.records)} launches of {len(results)} kernel configurations on {where}; {what}"),
              box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("kernel · shape", "calls", "ms/call", "TB/s", "TFLOP/s", "AI", "% roof", "verdict"):
        t.add_column(col, justify="left" if col in ("kernel · shape", "verdict") else "right", no_wrap=True)
    short = {}
    for r in results:
        short.setdefault((r.group.kernel, r.group.short_label), []).append(r)
    kernel = None
    for r in results:
        g, st, p = r.group, r.static or {}, r.point
        if g.kernel != kernel:
            kernel = g.kernel
            t.add_row(f"[bold]{escape(kernel)}[/bold]")
        # two configurations alike in their largest array: the full list tells them apart
        label = g.short_label if len(short[(g.kernel, g.short_label)]) == 1 else g.label
        ai = p.ai if p else ((st.get("flops_total") or 0) / st["bytes_compulsory"]
                             if st.get("bytes_compulsory") else None)
        if p is not None:
            pct = p.pct_measured if p.pct_measured is not None else p.pct_datasheet
            level = {"invalid": "[red]INVALID[/red]", "near": "[green]near roof[/green]",
                     "moderate": "[yellow]headroom[/yellow]", "far": "[red]far below[/red]"}.get(p.level, p.level)
            cells = (_fmt(p.achieved_tbps, ".3f"), _fmt(p.achieved_tflops, ".2f"), _fmt(ai, ".1f"),
                     "-" if pct is None else f"{pct:.0f}%", level)
        else:
            cells = ("-", "-", _fmt(ai, ".1f"), "-",
                     "[dim]static only[/dim]" if r.status == "no_time" else f"[red]{r.status}[/red]")
        t.add_row("  " + escape(label), str(g.calls), _fmt(g.to_json()["median_ms"], ".4f"), *cells)
    return t


def _print(results, dev, run) -> None:
    from rich.markup import escape
    from ..roofline.model import recipe_class
    console.print(_table(results, dev, run))
    console.print("[dim]FLOPs and bytes: static estimates (TileIR at the recorded shapes; MB min = issued tile "
                  "traffic capped by the arrays' footprint); ms: measured by CUDA events around each launch "
                  "(median without the JIT-compiling first call); % roof: of the measured ceiling, else the "
                  "datasheet[/dim]")
    points = [r.point for r in results if r.point is not None]
    # a note every configuration carries is said once, after theirs
    common = [n for n in dict.fromkeys(points[0].notes) if all(n in p.notes for p in points)] if len(points) > 1 else []
    for r in results:
        g, st = r.group, r.static or {}
        ai = r.point.ai if r.point else ((st.get("flops_total") or 0) / st["bytes_compulsory"]
                                         if st.get("bytes_compulsory") else None)
        facts = ", ".join(x for x in (
            f"grid {'x'.join(map(str, g.grid))}",
            f"{_fmt(g.to_json()['total_ms'], '.3f')} ms total" if g.to_json()["total_ms"] is not None else "",
            f"{_fmt(st.get('bytes_compulsory'), '.1f', 1e6)} MB min" if st.get("bytes_compulsory") else "",
            f"{_fmt(st.get('flops_total'), '.3g', 1e9)} GFLOP" if st.get("flops_total") else "",
            recipe_class(ai) if ai is not None else "") if x)
        head = f"[bold]{escape(g.kernel)}[/bold] {escape(g.label)} [dim]({escape(facts)})[/dim]"
        if r.point is not None:
            console.print(f"{head}: {escape(r.point.verdict)}")
            for n in dict.fromkeys(r.point.notes):
                if n not in common:
                    console.print(f"  [dim]- {escape(n)}[/dim]")
        elif r.error and r.status != "no_time":
            console.print(f"{head}: [red]{escape(r.error)}[/red]")
        else:
            console.print(head)
    if common:
        console.print("every configuration:")
        for n in common:
            console.print(f"  [dim]- {escape(n)}[/dim]")
    for w in run.warnings + (dev.warnings if dev else []):
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
