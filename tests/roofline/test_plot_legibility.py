"""The roofline chart stays legible at 1, 15 and 50 points: no two texts overlap (window
extents from the renderer that drew the file) and the table under the chart lists every point.

``CUTILE_DIAG_PICTURES=1 pytest tests/roofline/test_plot_legibility.py`` rewrites the committed
picture of the 15-point chart, ``tests/roofline/pictures/roofline_15.png``.
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from cutile_diag.roofline import analyze, preset
from cutile_diag.roofline.peaks import recorded_ceilings
from cutile_diag.roofline.plot import plot_roofline

PICTURES = Path(__file__).parent / "pictures"
_ESIZE = {"f16": 2, "bf16": 2, "f32": 4}


def layer_norm_points(n: int, dev):
    """A TileGym layer-norm run as ``roofline -- pytest …`` sees it: forward and backward
    kernels × shapes × dtypes, each labelled like ``KernelGroup.label``; small shapes are
    launch-bound (~6 µs), large ones run near the bandwidth roof."""
    kernels = [("_layer_norm_fwd_kernel", 8, 2), ("_layer_norm_bwd_dx_kernel", 12, 3),
               ("_layer_norm_bwd_dwdb_kernel", 4, 2), ("_persistent_layer_norm_fwd_kernel", 8, 2)]
    shapes = [(256, 256, "f16"), (256, 256, "f32"), (9, 9, "f16"), (4096, 8192, "bf16"), (16384, 4096, "bf16"),
              (1024, 1024, "f32"), (8192, 8192, "f16"), (2048, 5120, "bf16"), (77, 1000, "f32"),
              (32768, 2048, "f16"), (4096, 4096, "f32"), (512, 12288, "bf16"), (128, 128, "f16")]
    ceil = recorded_ceilings(dev)
    out = []
    for (m, nn, dt), (kernel, flops_per, arrays) in itertools.islice(
            ((s, k) for s in shapes for k in kernels[:3 if n <= 15 else 4]), n):
        e = _ESIZE[dt]
        nbytes = arrays * m * nn * e + 2 * nn * e + 2 * m * 4
        lat = max(0.006, nbytes / 3.6e12 * 1e3 * (1.3 if "bwd" in kernel else 1.05))
        label = f"{dt}[{m},{nn}] x{arrays}, {dt}[{nn}] x2, f32[{m}] x2"
        p = analyze(kernel, label, latency_ms=lat, flops=flops_per * m * nn, bytes=nbytes,
                    unit=(dt, "cuda"), device=dev, ceilings=ceil, grid=(m,))
        out.append(p)
    return out


@pytest.mark.parametrize("n", [1, 15, 50])
def test_chart_numbers_points_without_overlapping_text(tmp_path, monkeypatch, n):
    import matplotlib.pyplot as plt
    from matplotlib.text import Text
    dev = preset("h200")
    points = layer_norm_points(n, dev)
    assert len(points) == n and len({(p.workload, p.config) for p in points}) == n
    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))     # keep the figure to measure it
    out = PICTURES / "roofline_15.png" if n == 15 and os.environ.get("CUTILE_DIAG_PICTURES") else tmp_path / "roof.png"
    plot_roofline(points, dev, recorded_ceilings(dev), out, title="roofline of pytest tests/ops/test_layer_norm_legacy.py")
    (fig,) = figs
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    clashes = [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2) if ba.overlaps(bb)]
    assert clashes == []
    # each point's number is drawn once on the chart and its table row names kernel and shape
    table = fig.axes[1].tables[0]
    rows = {}
    for (r, c), cell in table.get_celld().items():
        rows.setdefault(r, {})[c] = cell.get_text().get_text()
    header = rows.pop(0)
    col = {v: k for k, v in header.items()}
    listed = {(row[col["#"]], row.get(col.get("kernel"), points[0].workload), row[col["configuration"]])
              for row in rows.values()}
    assert listed == {(str(i + 1), p.workload, p.config) for i, p in enumerate(points)}
    numbers = [t.get_text() for t in fig.axes[0].texts if t.get_text()]
    assert sorted(numbers, key=int) == [str(i + 1) for i in range(n)]
    # every number sits inside the chart's frame
    frame = fig.axes[0].get_window_extent(renderer)
    assert all(frame.contains(*t.get_window_extent(renderer).p0) and frame.contains(*t.get_window_extent(renderer).p1)
               for t in fig.axes[0].texts if t.get_text())
    plt.close(fig)
