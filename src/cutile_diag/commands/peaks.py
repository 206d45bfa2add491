"""``cutile-diag peaks``: the device model and its measured ceilings.

    cutile-diag peaks [--json] [--refresh] [--gpu N]     # live GPU: NVML + CUDA props, measured once, cached
    cutile-diag peaks --device h200 [--json]             # offline preset (no GPU, no measured ceilings)
"""
from __future__ import annotations

import argparse

from ..output import console, err_console, print_json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "peaks", help="device model (NVML/CUDA/presets) and measured bandwidth/GEMM ceilings",
        description="Show the device model with the source of every number, and the measured ceilings "
                    "(device-to-device copy, large GEMM), measured once per device + driver and cached.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--refresh", action="store_true", help="measure again even when cached")
    p.add_argument("--device", metavar="PRESET", help="offline preset instead of the live GPU (a100, h100, h200, b200)")
    p.add_argument("--gpu", type=int, default=None, metavar="N", help="CUDA device index (default: current)")
    p.add_argument("--no-measure", action="store_true", help="show cached ceilings only; never measure")
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


def run(args: argparse.Namespace) -> int:
    from ..roofline.device import device_model
    from ..roofline.peaks import cache_path, get_ceilings
    dev = device_model(args.device, args.gpu)
    ceilings = None
    if dev.kind == "live":
        if not args.json:
            err_console.print("[dim]measuring ceilings (copy + GEMM) if not cached…[/dim]")
        ceilings = get_ceilings(dev, refresh=args.refresh, measure_if_missing=not args.no_measure)
    if args.json:
        print_json({"device": dev.to_json(), "ceilings": ceilings.to_json() if ceilings else None,
                    "cache": str(cache_path()) if dev.kind == "live" else None})
        return 0
    from rich.table import Table
    t = Table(title=f"{dev.name} ({dev.arch}, {dev.kind})", show_lines=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("source", overflow="fold")
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
    bw = dev.peak_dram_bw()
    rows.append(("DRAM bandwidth (spec)", _fmt(bw, 1e12, "TB/s"), bw.source))
    for name, q in dev.datasheet.items():
        rows.append((f"datasheet {name}", _fmt(q, 1e12, "T/s"), q.source))
    for k, q in dev.spec_peaks().items():
        rows.append((f"{k} (spec)", _fmt(q, 1e12, "TFLOP/s"), q.source))
    if ceilings is not None:
        rows.append(("DRAM bandwidth (measured)", _fmt(ceilings.dram_bw, 1e12, "TB/s"), ceilings.dram_bw.source
                     + (f" [cached {ceilings.measured_at}]" if ceilings.cached else "")))
        for k, q in ceilings.flops.items():
            spec = dev.peak_flops(*k.split(":"))
            pct = f" = {100 * q.value / spec.value:.0f}% of spec" if spec.known else ""
            rows.append((f"{k} (measured)", _fmt(q, 1e12, "TFLOP/s") + pct, q.source))
        if bw.known and ceilings.dram_bw and ceilings.dram_bw.known:
            rows.append(("measured / spec bandwidth", f"{100 * ceilings.dram_bw.value / bw.value:.0f}%", ""))
    from rich.markup import escape
    seen: set[str] = set()
    for name, value, src in rows:
        shown = "same as above" if (src in seen and len(src) > 60) else src
        seen.add(src)
        t.add_row(escape(name), escape(value), escape(shown))
    console.print(t)
    for w in dev.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
    if dev.kind == "live" and ceilings is None:
        console.print("no measured ceilings (run without --no-measure to measure them)")
    if dev.kind == "live":
        console.print(f"[dim]cache: {cache_path()}[/dim]")
    return 0
