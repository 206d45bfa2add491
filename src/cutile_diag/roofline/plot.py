"""Roofline chart (matplotlib, Agg backend: no display needed) as PNG or SVG.

Public API::

    plot_roofline(points, device, ceilings, "roofline.svg") -> Path

Log-log axes: x = arithmetic intensity (FLOP/byte), y = TFLOP/s.  Solid lines are the spec
roofs (bandwidth and each compute unit the points use), dashed lines the measured ceilings;
each configuration is a dot labelled with its name, invalid points (above a roof) a red x.
Points without FLOPs or bytes cannot sit on log axes and are listed in the caption instead.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import UsageError
from .device import DeviceModel
from .model import RooflinePoint
from .peaks import Ceilings


def plot_roofline(points: Sequence[RooflinePoint], device: DeviceModel, ceilings: Ceilings | None,
                  path: str | Path, *, title: str | None = None) -> Path:
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise UsageError(f"--plot {path}: the file must end in .png or .svg")
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    shown = [p for p in points if p.ai and p.ai > 0 and p.achieved_flops > 0]
    hidden = [p for p in points if p not in shown]
    ais = [p.ai for p in shown]
    bw = device.peak_dram_bw()
    units = sorted({(p.compute_dtype, p.compute_unit) for p in points}) or [("bf16", "tensor")]
    ridges = [device.ridge(d, u) for d, u in units]
    lo = min([*ais, *(r for r in ridges if r)] or [1.0]) / 10
    hi = max([*ais, *(r for r in ridges if r)] or [100.0]) * 10
    import numpy as np
    x = np.logspace(np.log10(lo), np.log10(hi), 256)

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (d, u) in enumerate(units):
        c = colors[i % len(colors)]
        fl = device.peak_flops(d, u)
        if bw.known and fl.known:
            ax.plot(x, np.minimum(fl.value, x * bw.value) / 1e12, color=c, lw=2,
                    label=f"spec {d} {u}: {fl.value / 1e12:.0f} TFLOP/s, {bw.value / 1e12:.2f} TB/s")
        mb = ceilings.ceiling("dram") if ceilings else None
        mf = ceilings.ceiling(f"{d}:{u}") if ceilings else None
        if mb is not None and mb.known:
            top = mf.value if (mf is not None and mf.known) else (fl.value if fl.known else None)
            if top:
                lab = f"measured: {mb.value / 1e12:.2f} TB/s" + (f", {top / 1e12:.0f} TFLOP/s {d}" if mf else "")
                ax.plot(x, np.minimum(top, x * mb.value) / 1e12, color=c, lw=1.2, ls="--", label=lab)
    for p in shown:
        y = p.achieved_flops / 1e12
        if p.valid:
            ax.plot([p.ai], [y], "o", color="black", ms=6)
        else:
            ax.plot([p.ai], [y], "x", color="red", ms=9, mew=2)
        ax.annotate(p.config + ("" if p.valid else " (INVALID)"), (p.ai, y), textcoords="offset points",
                    xytext=(6, 4), fontsize=8, color="black" if p.valid else "red")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", ls=":", lw=0.5)
    names = sorted({p.workload for p in points})
    ax.set_title(title or f"{', '.join(names)} on {device.name}", fontsize=10)
    for v in (10.0, 50.0):
        if lo < v < hi:
            ax.axvline(v, color="grey", lw=0.6, ls=":")
    ax.legend(fontsize=7, loc="lower right")
    if hidden:
        fig.text(0.01, 0.01, "not plotted (no FLOPs or bytes): " + ", ".join(p.config for p in hidden), fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=fmt)
    plt.close(fig)
    return path
