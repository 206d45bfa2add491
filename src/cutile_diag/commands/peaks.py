"""``cutile-diag peaks``: the device model and its measured ceilings.

    cutile-diag peaks [--json] [--refresh] [--gpu N]     # live GPU: NVML + CUDA props, measured once, cached
    cutile-diag peaks --device h200 [--json]             # offline preset (+ the project's recorded ceilings)
    cutile-diag peaks --plot curve.svg                   # also draw the size curve (TB/s by bytes moved)

Three kinds of figure, labelled apart: *datasheet* (NVIDIA's, for this exact variant),
*theoretical* (arch table rate x NVML max clock: above the datasheet on H100/H200, whose
figures are quoted at a lower boost clock) and *measured* (this GPU, or for an offline
preset the measurement this project committed, where there is one).  The measured part
includes the size curve (``roofline.curve``): copy / read / write bandwidth by bytes moved,
L2 flushed and warm, and the launch floor — what every "% of attainable" is read against.
"""
from __future__ import annotations

import argparse

from ..output import console, err_console, print_json, prog
from ._args import number_arg


def register(subparsers) -> None:
    """Add the ``peaks`` subcommand and its flags."""
    p = subparsers.add_parser(
        "peaks", help="device model (NVML/CUDA/presets) and measured bandwidth/GEMM ceilings",
        description="Show the device model with the source of every number, and the measured ceilings "
                    "(device-to-device copy, large GEMM), measured once per device + driver and cached.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--refresh", action="store_true", help="measure again even when cached")
    p.add_argument("--device", metavar="PRESET", help="offline preset instead of the live GPU (a100, h100, h200, b200)")
    p.add_argument("--gpu", metavar="N", help="CUDA device index (default: current)")
    p.add_argument("--no-measure", action="store_true", help="show cached ceilings only; never measure")
    p.add_argument("--plot", metavar="FILE", help="draw the size curve (TB/s by bytes moved) to FILE (.png or .svg)")
    p.set_defaults(func=run)


def _fmt(q, scale=1.0, unit="", digits=3) -> str:
    if q is None or not q.known:
        return "-"
    v = q.value
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float)):
        return f"{v / scale:.{digits}g}{(' ' + unit) if unit else ''}"
    return str(v)


def _of(q, dev, key: str) -> str:
    """' = 88% of datasheet' (the theoretical figure when there is no datasheet one)."""
    if q is None or not q.known:
        return ""
    for label, ref in (("datasheet", dev.datasheet_peak(key)), ("theoretical", dev.theoretical_peak(key))):
        if ref.known and ref.value:
            return f" = {100 * q.value / ref.value:.0f}% of {label}"
    return ""


def run(args: argparse.Namespace) -> int:
    """Show the device model and its ceilings (measured once and cached; ``--no-measure``: cached only), with the
    size-curve plot when asked; 0."""
    from ..errors import NoGPUError
    from ..roofline.device import device_model, preset_names
    from ..measure.ceilings import device_ceilings
    from ..roofline.peaks import cache_path
    try:
        dev = device_model(args.device, number_arg("--gpu", args.gpu, strict=False, integer=True))
    except NoGPUError as e:
        raise NoGPUError(e.message, hint=f"offline, a preset: {prog()} peaks --device h200 "
                                         f"(presets: {', '.join(preset_names())})") from None
    if args.plot:
        from .roofline import _check_plot_path
        _check_plot_path(args.plot)
    if dev.kind == "live" and not args.json:
        err_console.print("[dim]measuring ceilings (copy + GEMM) and the size curve (bandwidth by bytes, launch "
                          "floor; < 30 s) if not cached…[/dim]")
    ceilings = device_ceilings(dev, measure=not args.no_measure, refresh=args.refresh)
    curve = ceilings.curve if ceilings else None
    plot = None
    if args.plot and curve is not None:
        from ..roofline.plot import plot_curve
        plot = plot_curve(curve, args.plot, title=f"bandwidth by size: {dev.name}")
    elif args.plot:
        err_console.print("no size curve for this device: nothing to plot")
    if args.json:
        print_json({"device": dev.to_json(), "ceilings": ceilings.to_json() if ceilings else None,
                    "cache": str(cache_path()) if dev.kind == "live" else None, "plot": str(plot) if plot else None})
        return 0
    from rich.table import Table
    t = Table(title=f"{dev.name} ({dev.arch}, {dev.kind})", show_lines=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("source (long ones below)")
    rows = [("SMs", _fmt(dev.sm_count), dev.sm_count.source),
            ("SM clock max", _fmt(dev.sm_clock_max_mhz, unit="MHz", digits=4), dev.sm_clock_max_mhz.source),
            ("memory clock max", _fmt(dev.mem_clock_max_mhz, unit="MHz", digits=4), dev.mem_clock_max_mhz.source),
            ("memory bus", _fmt(dev.bus_width_bits, unit="bit", digits=5), dev.bus_width_bits.source),
            ("L2", _fmt(dev.l2_bytes, 1 << 20, "MiB"), dev.l2_bytes.source),
            ("smem / SM", _fmt(dev.smem_per_sm_bytes, 1 << 10, "KiB"), dev.smem_per_sm_bytes.source),
            ("power limit", _fmt(dev.power_limit_w, unit="W"), dev.power_limit_w.source),
            ("MIG", _fmt(dev.mig_mode), dev.mig_mode.source)]
    if dev.sm_clock_current_mhz is not None and dev.sm_clock_current_mhz.known:
        rows.append(("SM clock now", _fmt(dev.sm_clock_current_mhz, unit="MHz", digits=4),
                     dev.sm_clock_current_mhz.source + " (idle-low; not used for roofs)"))
    bw = dev.theoretical_dram_bw()
    rows.append(("DRAM bandwidth (theoretical)", _fmt(bw, 1e12, "TB/s"), bw.source))
    for name, q in dev.datasheet.items():
        rows.append((f"{name} (datasheet)", _fmt(q, 1e12, "TB/s" if name == "dram_bw" else "TFLOP/s"), q.source))
    if not dev.datasheet:
        rows.append(("datasheet", "-", "unknown for this device (see the warning)"))
    for k, q in dev.theoretical_peaks().items():
        rows.append((f"{k} (theoretical, max clock)", _fmt(q, 1e12, "TFLOP/s"), q.source))
    if ceilings is not None:
        when = f" (cached {ceilings.measured_at})" if ceilings.cached else ""
        rows.append(("DRAM bandwidth (measured)", _fmt(ceilings.dram_bw, 1e12, "TB/s") + _of(ceilings.dram_bw, dev,
                                                                                              "dram_bw"),
                     ceilings.dram_bw.source + when))
        for k, q in ceilings.flops.items():
            rows.append((f"{k} (measured)", _fmt(q, 1e12, "TFLOP/s") + _of(q, dev, k), q.source))
    from rich.markup import escape
    from ..output import Footnotes
    notes = Footnotes()
    for name, value, src in rows:
        t.add_row(escape(name), escape(value), escape(notes.cell(src)))
    console.print(t)
    notes.print(console)
    for w in dev.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
    if dev.kind == "live" and ceilings is None:
        console.print("no measured ceilings (run without --no-measure to measure them)")
    elif ceilings is None:
        console.print(f"no measured ceilings for the {dev.name} preset: this project has not measured one; "
                      "offline, only the theoretical roof guards against impossible results")
    if curve is not None:
        _print_curve(curve)
    if plot:
        console.print(f"plot: {plot}")
    if dev.kind == "live":
        console.print(f"[dim]cache: {cache_path()}[/dim]")
    return 0


def _size(n: float) -> str:
    """Decimal units for figures quoted in MB, binary ones for the measured powers of two."""
    if n % 100_000:
        for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if n >= scale and n % scale == 0:
                return f"{n / scale:g} {unit}"
    return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB"


def _print_curve(curve) -> None:
    """The size curve: one row per byte count, one column per operation and L2 mode (TB/s)."""
    from rich.markup import escape
    from rich.table import Table
    from ..roofline.curve import OPS, series_key
    cols = [(op, f) for op in OPS for f in (True, False) if series_key(op, f) in curve.series]
    t = Table(title="bandwidth by bytes moved (TB/s; reads + writes)", box=None, header_style="bold")
    t.add_column("bytes moved", justify="right")
    for op, f in cols:
        t.add_column(f"{op} {'flushed' if f else 'warm'}", justify="right")
    for i, n in enumerate(curve.bytes):
        vals = [curve.series[series_key(op, f)][i] for op, f in cols]
        t.add_row(_size(n), *("-" if v is None else f"{v / 1e12:.2f}" for v in vals))
    console.print(t)
    floors = [f"{v * 1e3:.2f} µs {name}" for name, v in (("with CUDA graphs", curve.floor_ms),
                                                           ("eager (one event pair per launch)", curve.floor_eager_ms))
              if v]
    console.print("launch floor: " + (", ".join(floors) if floors else "not measured"))
    took = f" in {curve.seconds:.1f} s" if curve.seconds else ""
    console.print(f"[dim]curve{took}: {escape(curve.source)}[/dim]")
