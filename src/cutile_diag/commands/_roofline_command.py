"""``cutile-diag roofline -- COMMAND``: every kernel a command launches, one point per configuration.

The command runs once with every ``ct.launch`` observed (``measure.observe``); each
kernel at each configuration gets calls, total and median device time (measured), FLOPs and
bytes (static estimates from its TileIR at the recorded shapes), TB/s, TFLOP/s, the class,
percent of the roof and the verdict (``roofline.observed``).  ``--ncu`` runs the command a
second time under Nsight Compute for measured DRAM bytes per kernel.  ``--dry-run`` records
the launches without executing any kernel: static counts only, no GPU needed.
"""
from __future__ import annotations

import argparse

from ..output import console, err_console, print_json
from ._args import number_arg, positive_arg


def level_cell(p) -> str:
    """A point's level as a table cell (rich markup): launch-bound points say so, not "far below"."""
    if p.bound == "launch" and p.valid:
        return "[cyan]launch[/cyan]"
    return {"invalid": "[red]INVALID[/red]", "near": "[green]near roof[/green]",
            "moderate": "[yellow]headroom[/yellow]", "far": "[red]far below[/red]"}.get(p.level, p.level)


def run_command(args: argparse.Namespace, cmd: list[str]) -> int:
    """``roofline -- COMMAND``: place every kernel the command launches; 1 when a kernel did not come out as expected,
    else 0."""
    from rich.text import Text

    from ..measure.roofline import CommandRequest
    from ..measure.roofline import run_command as roofline_command
    timeout = positive_arg("--timeout", args.timeout)
    pad_us = number_arg("--pad-us", args.pad_us, strict=False)
    gpu = number_arg("--gpu", args.gpu, strict=False, integer=True)
    req = CommandRequest(command=cmd, dry_run=args.dry_run, device=args.device, gpu=gpu,
                         measure_peaks=not args.no_peaks, ncu=args.ncu, timeout_s=timeout, pad_us=pad_us,
                         plot=args.plot)
    show = not args.json
    echo = (lambda line: err_console.print(Text("│ ", style="dim") + Text(line), highlight=False)) if show else None
    r = roofline_command(req, echo=echo, show=show)
    if r.plot_note:
        err_console.print(r.plot_note)
    if args.json:
        print_json(r.to_json())
        return 1 if r.failed else 0
    _print(r.results, r.device, r.observed)
    if r.plot:
        console.print(f"plot: {r.plot}")
    return 1 if r.failed else 0


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
    for col in ("kernel · shape", "calls", "ms/call", "TB/s", "TFLOP/s", "% roof", "%att.", "verdict"):
        t.add_column(col, justify="left" if col in ("kernel · shape", "verdict") else "right", no_wrap=True)
    short = {}
    for r in results:
        short.setdefault((r.group.kernel, r.group.short_label), []).append(r)
    kernel = None
    for r in results:
        g, p = r.group, r.point
        if g.kernel != kernel:
            kernel = g.kernel
            t.add_row(f"[bold]{escape(kernel)}[/bold]")
        # two configurations alike in their largest array: the full list tells them apart
        label = g.short_label if len(short[(g.kernel, g.short_label)]) == 1 else g.label
        if p is not None:
            pct = p.pct_measured if p.pct_measured is not None else p.pct_datasheet
            cells = (_fmt(p.achieved_tbps, ".3f"), _fmt(p.achieved_tflops, ".2f"),
                     "-" if pct is None else f"{pct:.0f}%",
                     "-" if p.pct_attainable is None else f"{p.pct_attainable:.0f}%", level_cell(p))
        else:
            cells = ("-", "-", "-", "-",
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
                  "datasheet; %att.: of what is attainable at the kernel's size (launch floor, copy bandwidth at "
                  "its bytes, compute ceiling)[/dim]")
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
            f"AI {ai:.1f}, {recipe_class(ai)}" if ai is not None else "") if x)
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
