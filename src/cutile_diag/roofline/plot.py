"""Roofline chart (matplotlib, Agg backend: no display needed) as PNG or SVG.

Public API::

    plot_roofline(points, device, ceilings, "roofline.svg") -> Path

Log-log axes: x = arithmetic intensity (FLOP/byte), y = TFLOP/s.  Per compute unit the
points use: a solid line for NVIDIA's datasheet roofs, a dashed line for the measured
ceilings and a thin dotted line for the theoretical roofs (table rate x max clock).  Each
configuration is a dot (invalid points, above a roof, a red x) with a number placed where it
overlaps no other text and no marker; the table under the chart names every number (kernel,
shape, TFLOP/s, % of roof), so 1 or 50 points stay legible.  Points without FLOPs or bytes
cannot sit on log axes: their table rows say "not plotted".
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from ..errors import UsageError
from .device import DeviceModel
from .model import RooflinePoint
from .peaks import Ceilings

_ROW_IN = 0.19          # legend table: inches per row at its 7.5 pt font


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
    import numpy as np

    on_axes = lambda p: p is not None and p.ai and p.ai > 0 and p.achieved_flops > 0   # noqa: E731
    shown = [p for p in points if on_axes(p)]
    moves = [(s, p) for s, p in zip(starts, points) if on_axes(s) and on_axes(p)]
    ais = [p.ai for p in shown] + [s.ai for s, _p in moves]
    bw = device.theoretical_dram_bw()
    units = sorted({(p.compute_dtype, p.compute_unit) for p in points}) or [("bf16", "tensor")]
    ridges = [device.ridge(d, u) for d, u in units]
    lo = min([*ais, *(r for r in ridges if r)] or [1.0]) / 10
    hi = max([*ais, *(r for r in ridges if r)] or [100.0]) * 10
    x = np.logspace(np.log10(lo), np.log10(hi), 256)

    chart_in, table_in = (5.5 if len(shown) <= 20 else 7.5), _ROW_IN * (len(points) + 1) + 0.3
    fig = plt.figure(figsize=(9, chart_in + table_in), dpi=120)
    ax = fig.add_axes((0.09, (table_in + 0.55) / (chart_in + table_in), 0.88, (chart_in - 1.0) / (chart_in + table_in)))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    mb = ceilings.ceiling("dram") if ceilings else None
    slopes = set()                            # a bandwidth-only roof is the same line for every unit: once
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
                if (what, b.value) in slopes:
                    continue
                slopes.add((what, b.value))
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
            ax.plot([p.ai], [y], "o", color="black", ms=5, zorder=3)
        else:
            ax.plot([p.ai], [y], "x", color="red", ms=8, mew=2, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ys = [p.achieved_flops / 1e12 for p in shown]
    if ys:                                  # room around the points for their numbers
        ylo, yhi = ax.get_ylim()
        ax.set_ylim(min(ylo, min(ys) / 4), max(yhi, max(ys) * 4))
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", ls=":", lw=0.5)
    names = sorted({p.workload for p in points})
    head = title or f"{', '.join(names)} on {device.name}"
    ax.set_title(head if len(head) <= 100 else head[:99] + "…", fontsize=10)
    for v in (10.0, 50.0):
        if lo < v < hi:
            ax.axvline(v, color="grey", lw=0.6, ls=":")
    legend = ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    number = {id(p): i + 1 for i, p in enumerate(shown)}
    _place_numbers(fig, ax, [(str(number[id(p)]), p.ai, p.achieved_flops / 1e12, p.valid) for p in shown], legend)
    _legend_table(fig, points, number, any(p.workload not in head for p in points),
                  bottom_in=0.15, height_in=table_in - 0.2)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=fmt)
    except OSError as e:           # an unwritable or missing folder is the user's input, not a bug
        raise UsageError(f"--plot {path}: cannot write: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return path


def _place_numbers(fig, ax, labels, legend) -> None:
    """Put each point's number next to it where it overlaps no placed number, no marker and
    not the line legend: candidates on rings of growing radius around the point.  Close by, it
    must lie nearer its own dot than any other (so it cannot be read as another's); farther
    out a thin leader line ties it to its dot.  Greedy, densest points first."""
    from matplotlib.transforms import Bbox
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    pix = [tuple(ax.transData.transform((x, y))) for _t, x, y, _v in labels]
    r_mark = 4 * fig.dpi / 72
    lead = r_mark + 2 + 8                 # farther than this a leader line ties the number to its dot
    taken = [Bbox.from_bounds(px - r_mark, py - r_mark, 2 * r_mark, 2 * r_mark) for px, py in pix]
    taken.append(legend.get_window_extent(renderer))
    crowd = [sum(1 for q in pix if math.dist(p, q) < 40) for p in pix]
    angles = [math.radians(a) for a in (0, 180, 30, 150, 330, 210, 90, 270, 60, 120, 300, 240)]
    for k in sorted(range(len(labels)), key=lambda k: -crowd[k]):
        text, x, y, valid = labels[k]
        t = ax.annotate(text, (x, y), textcoords="offset pixels", xytext=(0, 0), ha="center", va="center",
                        fontsize=7.5, fontweight="bold", color="black" if valid else "red", zorder=4,
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))
        w, h = (lambda b: (b.width + 3, b.height + 2))(t.get_window_extent(renderer))
        px, py = pix[k]
        best = None
        for ring in range(1, 40):
            r = r_mark + 2 + ring * 4
            for a in angles:
                cx, cy = px + r * math.cos(a), py + r * math.sin(a)
                box = Bbox.from_bounds(cx - w / 2, cy - h / 2, w, h)
                if (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
                        and not any(box.overlaps(o) for o in taken)
                        and (r > lead or all(math.dist((cx, cy), q) >= r or math.dist(q, (px, py)) < 2 for q in pix))):
                    best = (cx - px, cy - py, box)
                    break
            if best:
                break
        if best is None:            # nowhere free inside the axes: beside the dot, still numbered
            best = (w, 0.0, Bbox.from_bounds(px + w / 2, py - h / 2, w, h))
        dx, dy, box = best
        t.set_position((dx, dy))
        if math.hypot(dx, dy) > lead:
            ax.annotate("", (x, y), xytext=(px + dx, py + dy), textcoords="figure pixels", zorder=2,
                        arrowprops=dict(arrowstyle="-", lw=0.5, color="grey", shrinkA=4, shrinkB=2))
        taken.append(box)


def _legend_table(fig, points, number, with_kernel: bool, *, bottom_in: float, height_in: float) -> None:
    """One row per point: its number, kernel, shape, throughput and place under the roof."""
    H = fig.get_figheight()
    tax = fig.add_axes((0.03, bottom_in / H, 0.94, height_in / H))
    tax.axis("off")
    cols = ["#"] + (["kernel"] if with_kernel else []) + ["configuration", "TFLOP/s", "TB/s", "% roof", "verdict"]
    words = {"near": "near roof", "moderate": "headroom", "far": "far below"}
    rows, colors = [], []
    for p in sorted(points, key=lambda p: number.get(id(p), 10 ** 9)):
        n = number.get(id(p))
        pct = p.pct_measured if p.pct_measured is not None else p.pct_datasheet
        note = ("INVALID: " + "; ".join(p.invalid_reasons)[:60] if not p.valid else
                "not plotted (no FLOPs or bytes)" if n is None else words.get(p.level, ""))
        rows.append([str(n) if n else "-"] + ([p.workload] if with_kernel else []) +
                    [p.config, f"{p.achieved_tflops:.3g}", f"{p.achieved_tbps:.3g}", "-" if pct is None else f"{pct:.0f}%",
                     note])
        colors.append("black" if p.valid else "red")
    table = tax.table(cellText=rows, colLabels=cols, loc="upper left", cellLoc="left", colLoc="left",
                      bbox=(0, 0, 1, 1), edges="horizontal")
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    table.auto_set_column_width(list(range(len(cols))))
    for (r, c), cell in table.get_celld().items():
        cell.set_linewidth(0.3)
        cell.get_text().set_color("black" if r == 0 else colors[r - 1])
        if r == 0:
            cell.get_text().set_fontweight("bold")


def plot_curve(curve, path: str | Path, *, title: str | None = None) -> Path:
    """The size curve (``roofline.curve.BandwidthCurve``): TB/s over bytes moved (log x), one line
    per operation, solid with L2 flushed and dashed warm, the launch floor in the caption."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise UsageError(f"--plot {path}: the file must end in .png or .svg")
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    colors = dict(zip(("copy", "read", "write"), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for key, ys in sorted(curve.series.items()):
        op, _, mode = key.partition(":")
        pts = [(x, y / 1e12) for x, y in zip(curve.bytes, ys) if y]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, color=colors.get(op), linestyle="-" if mode == "flushed" else "--",
                    label=f"{op}, {'L2 flushed' if mode == 'flushed' else 'warm L2'}")
    ax.set_xscale("log")
    ax.set_xlabel("bytes moved per launch (reads + writes)")
    ax.set_ylabel("TB/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    floors = [f"{name} {v * 1e3:.2f} µs" for name, v in (("CUDA graphs", curve.floor_ms),
                                                          ("eager", curve.floor_eager_ms)) if v]
    ax.set_title(title or "bandwidth by size", fontsize=10)
    fig.text(0.01, 0.01, ("launch floor: " + ", ".join(floors) if floors else "no launch floor measured")
             + (f"; measured {curve.measured_at}" if curve.measured_at else ""), fontsize=7)
    fig.subplots_adjust(bottom=0.17)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=fmt)
    plt.close(fig)
    return path
