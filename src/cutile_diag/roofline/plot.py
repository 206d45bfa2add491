"""Roofline chart (matplotlib, Agg backend: no display needed) as PNG or SVG.

Public API::

    plot_roofline(points, device, ceilings, "roofline.svg") -> Path

Log-log axes: x = arithmetic intensity (FLOP/byte), y = TFLOP/s.  Per compute unit the
points use: a solid line for NVIDIA's datasheet roofs, a dashed line for the measured
ceilings and a thin dotted line for the theoretical roofs (table rate x max clock); each
configuration is a dot labelled with its name, invalid points (above a roof) a red x.
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
                  path: str | Path, *, title: str | None = None,
                  starts: Sequence[RooflinePoint | None] = ()) -> Path:
    """``starts[i]``, when given, is where ``points[i]`` came from: drawn hollow with an arrow to it."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise UsageError(f"--plot {path}: the file must end in .png or .svg")
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    on_axes = lambda p: p is not None and p.ai and p.ai > 0 and p.achieved_flops > 0   # noqa: E731
    shown = [p for p in points if on_axes(p)]
    hidden = [p for p in points if p not in shown]
    moves = [(s, p) for s, p in zip(starts, points) if on_axes(s) and on_axes(p)]
    ais = [p.ai for p in shown] + [s.ai for s, _p in moves]
    bw = device.theoretical_dram_bw()
    units = sorted({(p.compute_dtype, p.compute_unit) for p in points}) or [("bf16", "tensor")]
    ridges = [device.ridge(d, u) for d, u in units]
    lo = min([*ais, *(r for r in ridges if r)] or [1.0]) / 10
    hi = max([*ais, *(r for r in ridges if r)] or [100.0]) * 10
    import numpy as np
    x = np.logspace(np.log10(lo), np.log10(hi), 256)

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    mb = ceilings.ceiling("dram") if ceilings else None
    for i, (d, u) in enumerate(units):
        c = colors[i % len(colors)]
        for what, b, f, style in (("datasheet", device.datasheet_peak("dram_bw"), device.datasheet_peak(f"{d}:{u}"),
                                   dict(lw=2)),
                                  ("measured", mb, ceilings.ceiling(f"{d}:{u}") if ceilings else None,
                                   dict(lw=1.2, ls="--")),
                                  ("theoretical (max clock)", bw, device.theoretical_flops(d, u),
                                   dict(lw=0.8, ls=":"))):
            if b is None or not b.known:
                continue
            if f is None or not f.known:      # bandwidth slope only: no compute figure of this kind
                ax.plot(x, x * b.value / 1e12, color=c, label=f"{what}: {b.value / 1e12:.2f} TB/s", **style)
                continue
            ax.plot(x, np.minimum(f.value, x * b.value) / 1e12, color=c,
                    label=f"{what} {d} {u}: {f.value / 1e12:.0f} TFLOP/s, {b.value / 1e12:.2f} TB/s", **style)
    for s, p in moves:
        ax.plot([s.ai], [s.achieved_flops / 1e12], "o", mfc="none", color="grey", ms=6)
        ax.annotate("", xy=(p.ai, p.achieved_flops / 1e12), xytext=(s.ai, s.achieved_flops / 1e12),
                    arrowprops=dict(arrowstyle="->", color="grey", lw=1))
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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=fmt)
    except OSError as e:           # an unwritable or missing folder is the user's input, not a bug
        raise UsageError(f"--plot {path}: cannot write: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return path
