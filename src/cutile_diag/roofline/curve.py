"""The roof at every size: measured bandwidth by bytes moved, and the launch floor.

Public API::

    curve = measure_curve(dev)                   # read / write / copy over ~256 KiB .. 4 GiB, L2 flushed and
                                                 # warm, and the launch floor (CUDA graphs and eager); < 30 s
    curve.bandwidth(33.6e6, flushed=True)        # B/s a device copy moving that many bytes reaches
    curve.floor_ms                               # the shortest kernel (a one-element add, CUDA-graph replays)
    a = attainable(bytes, flops, curve=curve, bw=ceiling_bw, flops_peak=peak, flushed=True)
    a.ms, a.floor_ms, a.bw, a.limit               # limit: launch | memory | compute
    preset_curve("NVIDIA H200")                  # the committed curve of an offline preset (curves/*.json)
    write_preset(curve, path)                    # the file a GPU run writes for that preset

Bandwidth depends on how many bytes a kernel moves (Hockney's t0 + n/r∞; LBNL's Empirical
Roofline Tool): a 1 MB copy on an H200 reaches a fifth of what a 4 GB one does, so a single
"DRAM ceiling" calls every small kernel slow.  The curve is a measured table, not a formula
(its regimes: L2-resident, a ramp, a dip where the arrays outgrow L2, DRAM), read by
interpolating log(bandwidth) over log(bytes); outside the table the nearest point holds.
The attainable time of a kernel is the larger of the launch floor, its bytes at the copy
curve's bandwidth for that many bytes (L2 flushed or not, as it was timed) and its FLOPs at
the compute ceiling: what a plain copy of the same bytes, or a GEMM of the same FLOPs, takes.

Every point is timed by ``harness.timing.measure`` (the harness kernels are timed with: short
ones batched in CUDA graphs, flush inside and subtracted); bytes moved = reads + writes (a
copy of n bytes moves 2n).
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..harness.timing import BenchOptions, measure
from ..output import write_atomic

SCHEMA = "cutile-diag.roof-curve/1"
OPS = ("read", "write", "copy")
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
# bytes moved per point: powers of two from 256 KiB to 4 GiB, and 48 MiB (H200: the dip past its 60 MiB L2
# starts near 44 MB)
DEFAULT_SIZES = tuple(sorted({256 * KIB << k for k in range(15)} | {48 * MIB}))
PRESETS_DIR = Path(__file__).with_name("curves")


def series_key(op: str, flushed: bool) -> str:
    """The key of a series in ``BandwidthCurve.series`` (``copy:flushed``, ``read:warm``...)."""
    return f"{op}:{'flushed' if flushed else 'warm'}"


@dataclass
class BandwidthCurve:
    """Measured bandwidth (B/s) by bytes moved, per operation and L2 mode, and the launch floor."""
    bytes: list[float]                                   # bytes moved per point (reads + writes), ascending
    series: dict[str, list[float | None]]                # "copy:flushed" -> B/s per point (None: not measured)
    floor_ms: float | None                               # a one-element add per launch, CUDA-graph replays
    floor_eager_ms: float | None = None                  # the same, one event pair per eager launch
    source: str = ""                                     # where the numbers come from
    measured_at: str = ""
    seconds: float | None = None                         # how long the measurement took
    details: dict[str, Any] = field(default_factory=dict)

    def bandwidth(self, nbytes: float, *, flushed: bool = True, op: str = "copy") -> float | None:
        """B/s at ``nbytes`` moved, log-log interpolated; a warm (unflushed) lookup without a warm
        series reads the flushed one."""
        ys = self.series.get(series_key(op, flushed)) or self.series.get(series_key(op, True))
        pts = [(x, y) for x, y in zip(self.bytes, ys or []) if y and x > 0]
        if not pts or not nbytes or nbytes <= 0:
            return None
        if nbytes <= pts[0][0]:
            return pts[0][1]
        if nbytes >= pts[-1][0]:
            return pts[-1][1]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if x0 <= nbytes <= x1:
                f = (math.log(nbytes) - math.log(x0)) / (math.log(x1) - math.log(x0))
                return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
        return pts[-1][1]

    def to_json(self) -> dict:
        """The curve as JSON under its schema (the form cached and committed for presets)."""
        return {"schema": SCHEMA, "bytes": list(self.bytes), "series": {k: list(v) for k, v in self.series.items()},
                "floor_ms": self.floor_ms, "floor_eager_ms": self.floor_eager_ms, "source": self.source,
                "measured_at": self.measured_at, "seconds": self.seconds, "details": self.details}

    @classmethod
    def from_json(cls, d: dict) -> "BandwidthCurve":
        """The curve ``to_json`` wrote."""
        return cls(bytes=[float(x) for x in d["bytes"]], series={k: list(v) for k, v in d["series"].items()},
                   floor_ms=d.get("floor_ms"), floor_eager_ms=d.get("floor_eager_ms"), source=d.get("source", ""),
                   measured_at=d.get("measured_at", ""), seconds=d.get("seconds"), details=d.get("details") or {})


@dataclass
class Attainable:
    """The shortest time a kernel moving ``bytes`` and doing ``flops`` can take on this device."""
    ms: float | None
    floor_ms: float | None
    bw: float | None                 # B/s a copy of the same bytes reaches (curve), else the flat ceiling
    limit: str                       # launch | memory | compute | unknown: which term sets ``ms``
    basis: str                       # in words, for notes and tables

    @property
    def tbps(self) -> float | None:
        """The bandwidth in TB/s, or None."""
        return self.bw / 1e12 if self.bw else None


def attainable(nbytes: float, flops: float, *, curve: BandwidthCurve | None, bw: float | None,
               flops_peak: float | None, flushed: bool = True) -> Attainable:
    """max(launch floor, bytes / bandwidth at that size, FLOPs / compute ceiling).  Without a curve
    the flat ``bw`` (the measured ceiling, else the datasheet) stands in and there is no floor."""
    at = curve.bandwidth(nbytes, flushed=flushed) if curve is not None else None
    floor = curve.floor_ms if curve is not None else None
    if at is not None:
        basis = f"copy curve at {nbytes / 1e6:.3g} MB ({'L2 flushed' if flushed else 'warm L2'})"
    else:
        at = bw
        basis = "flat bandwidth ceiling (no size curve measured)"
    terms = {"launch": floor or 0.0,
             "memory": 1e3 * nbytes / at if at and nbytes else 0.0,
             "compute": 1e3 * flops / flops_peak if flops_peak and flops else 0.0}
    limit = max(terms, key=lambda k: terms[k])
    if terms[limit] <= 0:
        return Attainable(None, floor, at, "unknown", basis)
    return Attainable(terms[limit], floor, at, limit, basis)


# ---------------------------------------------------------------------------------------
# presets

def _preset_file(device_name: str) -> Path:
    return PRESETS_DIR / (device_name.lower().replace(" ", "-") + ".json")


def preset_curve(device_name: str) -> BandwidthCurve | None:
    """The committed curve of an offline preset (``curves/<device name>.json``), None without one."""
    p = _preset_file(device_name)
    if not p.is_file():
        return None
    return BandwidthCurve.from_json(json.loads(p.read_text())["curve"])


def write_preset(curve: BandwidthCurve, device_name: str, path: Path | None = None) -> Path:
    """The preset file for ``device_name`` (default: its place in the package)."""
    path = Path(path) if path else _preset_file(device_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"schema": SCHEMA, "device_name": device_name, "curve": curve.to_json()},
                                  indent=1) + "\n")
    return path


# ---------------------------------------------------------------------------------------
# measurement

def _ops(buf, nbytes: int) -> dict[str, Callable[[], Any]]:
    """Kernels that move ``nbytes`` (reads + writes) out of ``buf``: a sum (reads), a fill (writes),
    a device copy of half into the other half."""
    import torch
    x = buf[: nbytes // 4 * 4].view(torch.float32)
    r = torch.empty((), dtype=torch.float32, device=buf.device)
    half = nbytes // 2 // 4 * 4
    src, dst = buf[:half], buf[half:2 * half]
    return {"read": lambda: torch.sum(x, 0, out=r),
            "write": lambda: x.fill_(1.0),
            "copy": lambda: dst.copy_(src)}


def measure_curve(dev, *, sizes=DEFAULT_SIZES, flush_modes=(True, False), ops=OPS,
                  on_step: Callable[[str], None] | None = None) -> BandwidthCurve:
    """Time every op at every size in both L2 modes, and the launch floor (seconds on an H200)."""
    import torch
    say = on_step or (lambda _m: None)
    t0 = time.monotonic()
    device = torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    # small budgets: ~0.1 s a point; a flush of 2 x L2 (not the harness's 256 MiB) keeps small points cheap
    base = dict(warmup_ms=2.0, rep_ms=5.0, min_rep=7, max_rep=200, batch_sample_ms=0.25, sample_clocks=False,
                flush_bytes=max(2 * l2, 8 * MIB))
    series: dict[str, list[float | None]] = {series_key(o, f): [] for o in ops for f in flush_modes}
    with torch.cuda.device(device):
        buf = torch.ones(max(sizes) // 4, dtype=torch.float32, device=device).view(torch.uint8)
        for n in sizes:
            say(f"curve: {n / MIB:g} MiB")
            fns = _ops(buf, int(n))
            for op in ops:
                for flushed in flush_modes:
                    m = measure(fns[op], BenchOptions(flush_l2=flushed, **base))
                    series[series_key(op, flushed)].append(n / (m.stats.median * 1e-3) if m.stats.median > 0 else None)
        del buf, fns
        a, b, c = (torch.ones(1, device=device) for _ in range(3))
        add = lambda: torch.add(a, b, out=c)          # noqa: E731
        say("curve: launch floor")
        graph = measure(add, BenchOptions(flush_l2=False, batch="auto", **{**base, "rep_ms": 2.0}))
        eager = measure(add, BenchOptions(flush_l2=False, batch=None, **{**base, "rep_ms": 2.0}))
        torch.cuda.empty_cache()
    secs = time.monotonic() - t0
    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return BandwidthCurve(
        bytes=[float(n) for n in sizes], series=series, floor_ms=graph.stats.median,
        floor_eager_ms=eager.stats.median,
        source=(f"measured: {dev.name}, torch {torch.__version__} (sum / fill / device copy per size, harness.timing: "
                "median per point, short points batched in CUDA graphs with the L2 flush subtracted; floor: a "
                "one-element add)"),
        measured_at=when, seconds=round(secs, 2),
        details={"l2_bytes": l2, "flush_bytes": base["flush_bytes"],
                 "floor_graph_samples": len(graph.samples_ms), "floor_eager_samples": len(eager.samples_ms),
                 "floor_graph_min_ms": min(graph.samples_ms), "floor_eager_min_ms": min(eager.samples_ms)})


def compare(curve: BandwidthCurve, reference: dict[float, float], *, op: str = "copy",
            flushed: bool = True) -> list[dict]:
    """Per reference point (bytes -> B/s): the curve's figure there and the ratio (a GPU run against
    figures measured before)."""
    out = []
    for n, ref in sorted(reference.items()):
        got = curve.bandwidth(n, flushed=flushed, op=op)
        out.append({"bytes": n, "reference_tbps": ref / 1e12, "tbps": got / 1e12 if got else None,
                    "ratio": got / ref if got else None})
    return out
