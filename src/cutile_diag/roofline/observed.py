"""Roofline points for observed launches: one per kernel and launch configuration.

Public API::

    groups = group_launches(records)                    # LaunchGroup per (kernel, grid, argument specs)
    results = roofline_launches(records, device=dev, ceilings=c, on_step=print)
    for r in results: r.group, r.static (StaticCount json | None), r.point (RooflinePoint | None), r.error
    static_for_launch(rec) -> StaticCount              # AOT export of the kernel at the recorded specs
    compute_unit_of(sc) -> ("f16", "tensor") | ("f32", "cuda") ...

Times are *measured* (CUDA events around each launch, ``measure.observe``); FLOPs
and bytes are *static estimates*: the kernel's TileIR, exported ahead of time at the
recorded argument specs and counted by ``static_cost``; the bytes placed on the roof are the
minimum DRAM traffic (``bytes_compulsory``: issued tile traffic capped by the arrays'
footprint — a tiled GEMM issues several times more, which the caches absorb).  The first launch of each
configuration carries the JIT compile and is left out of the median when there are others.
"""
from __future__ import annotations


import math
import re
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from ..capture.launches import LaunchRecord
from ..errors import CutileDiagError
from .device import DeviceModel
from .model import RooflinePoint, analyze
from .peaks import Ceilings
from ..capture.loader import import_file, kernels_in
from ..workload import CaptureSpec
from .static_cost import static_count

_TENSOR_ELEMS = {"f16", "bf16", "tf32", "f8e4m3fn", "f8e5m2", "f8e4m3", "i8"}


def _less_gap(r: LaunchRecord) -> float | None:
    """A launch's device time less the time its GPU idled between the spin's end and the kernel's enqueue (host
    time past the spin; an over-estimate where the host worked on after the enqueue), None when nothing is left."""
    if not r.extra.get("enqueue_gap"):
        return r.device_ms
    idle_ms = (float(r.extra.get("host_us") or 0.0) - float(r.extra.get("padded_us") or 0.0)) / 1000.0
    t = r.device_ms - idle_ms
    return t if t > 0 else None


@dataclass
class LaunchGroup:
    """Every launch of one kernel at one configuration (grid + argument specs)."""
    kernel: str
    file: str | None
    grid: tuple[int, ...]
    specs: dict[str, str]
    launches: list[LaunchRecord] = field(default_factory=list)

    @property
    def calls(self) -> int:
        """How many launches the group holds."""
        return len(self.launches)

    @property
    def label(self) -> str:
        """The array specs, a repeated one once with its count (``f32[1048576] x3``)."""
        arrays = [v for v in self.specs.values() if "[" in v]
        seen = list(dict.fromkeys(arrays))
        return ", ".join(a + (f" x{arrays.count(a)}" if arrays.count(a) > 1 else "") for a in seen) or "no arrays"

    @property
    def short_label(self) -> str:
        """The largest array's spec and how many arrays more (``bf16[16384,4096] x2 +4``): a table cell."""
        arrays = [v for v in self.specs.values() if "[" in v]
        if not arrays:
            return "no arrays"
        big = max(arrays, key=lambda a: math.prod(int(d) for d in re.findall(r"\d+", a[a.index("["):])))
        n, rest = arrays.count(big), len(arrays) - arrays.count(big)
        return big + (f" x{n}" if n > 1 else "") + (f" +{rest}" if rest else "")

    def times_ms(self) -> list[float]:
        """Device times used for the statistics: without the JIT-compiling first launch when others exist, and
        without the launches whose enqueue outlasted the GPU spin ahead of them (their events also hold the idle
        GPU waiting for the host) when others exist.  Where every launch has such a gap, each time less the host
        time past the spin: on an H100 TileGym's persistent layer norm (a ``replace_hints`` kernel) spent ~23 ms
        in ``ct.launch`` on every call, and its 0.027 ms kernel read 23 ms, ranking it first in a campaign."""
        warm = self._warm()
        if not self.gaps_corrected:
            return [r.device_ms for r in warm if not r.extra.get("enqueue_gap")]
        return [t for t in map(_less_gap, warm) if t is not None]

    def _warm(self) -> list[LaunchRecord]:
        timed = [r for r in self.launches if r.device_ms is not None]
        return [r for r in timed if not r.extra.get("first")] or timed

    @property
    def gaps_corrected(self) -> bool:
        """Every timed launch (past the first) has an enqueue gap: ``times_ms`` takes the host time off each."""
        warm = self._warm()
        return bool(warm) and all(r.extra.get("enqueue_gap") for r in warm)

    def to_json(self) -> dict:
        """The group as JSON: kernel, grid, specs, scalars, calls and their timing summary."""
        t = self.times_ms()
        # the GPU time the launches took: a gap launch counts less its host time (the suite's share must not rank
        # a kernel by its wrapper's host time)
        all_t = [_less_gap(r) or 0.0 for r in self.launches if r.device_ms is not None]
        scalars = {a.name: a.value for a in self.launches[0].args if a.kind == "scalar"} if self.launches else {}
        return {"kernel": self.kernel, "file": self.file, "grid": list(self.grid), "specs": self.specs,
                "scalars": scalars,
                "calls": self.calls, "timed_calls": len(t),
                "total_ms": sum(all_t) if all_t else None,
                "median_ms": statistics.median(t) if t else None,
                "min_ms": min(t) if t else None, "max_ms": max(t) if t else None}


def group_launches(records: Sequence[LaunchRecord]) -> list[LaunchGroup]:
    """Group launch records by kernel file, configuration, integer scalars and aliased arrays,
    in first-seen order."""
    groups: dict[tuple, LaunchGroup] = {}
    for r in records:
        # integer scalars take part: a loop bounded by one changes the counts
        ints = tuple((a.name, a.value) for a in r.args if a.kind == "scalar" and isinstance(a.value, int))
        # so does an array passed twice (its bytes move once)
        key = (r.file, r.shape_key(), ints, tuple(sorted((r.extra.get("same_array") or {}).items())))
        g = groups.get(key)
        if g is None:
            g = groups[key] = LaunchGroup(r.kernel, r.file, tuple(r.grid), {a.name: a.text() for a in r.args})
        g.launches.append(r)
    return list(groups.values())


def compute_unit_of(sc) -> tuple[str, str]:
    """The roof a counted kernel runs against: the tensor core for a low-precision mma, else f32 CUDA cores."""
    elems = [m.operand_elem for m in sc.mma_ops] if sc is not None else []
    for e in elems:
        if e in _TENSOR_ELEMS:
            return ("f8e4m3" if e.startswith("f8") else e, "tensor")
    return ("f32", "cuda")


def static_for_launch(rec: LaunchRecord | LaunchGroup):
    """StaticCount of the kernel at this launch's specs and grid (AOT export, no GPU)."""
    if not rec.file:
        raise CutileDiagError(f"{rec.kernel}: the launch names no source file")
    first = rec if isinstance(rec, LaunchRecord) else rec.launches[0]
    specs = {k: v.text() for k, v in first.specs().items()}
    # the recorded values of integer scalars let loops bounded by them count (grouped by them too)
    scalars = {a.name: a.value for a in first.args if a.kind == "scalar" and isinstance(a.value, int)}
    sc = static_count(CaptureSpec(kernel=f"{rec.file}::{_attr_of(rec.file, rec.kernel)}", args=specs,
                                  grid=tuple(rec.grid), scalars=scalars or None))
    same = first.extra.get("same_array") or {}
    if same and sc.footprint_bytes is not None:
        # launch(a, a, c): the second name is the first's memory, which DRAM moves once
        sizes = {a.name: nbytes_of(a) for a in first.args}
        # a copy: static counts are cached per specs, and another launch at these specs may not alias
        sc = replace(sc, footprint_bytes=sc.footprint_bytes - sum(sizes.get(n) or 0 for n in same),
                                 notes=[*sc.notes, "the same array passed as "
                                        + ", ".join(f"{n} and {o}" for n, o in same.items()) + ": its bytes counted once"])
    return sc


def nbytes_of(arg) -> int | None:
    """The bytes an array argument of a launch record spans (its elements; None: not an array)."""
    spec = arg.spec() if arg.kind == "array" else None
    return spec.nbytes() if spec is not None and hasattr(spec, "nbytes") else None


def _attr_of(file: str, function: str) -> str:
    """The module attribute holding the kernel whose Python function is ``function`` (usually the same
    name; ``fast = ct.kernel(_impl, occupancy=2)`` is not)."""
    from pathlib import Path
    module = import_file(Path(file))
    if function in kernels_in(module):
        return function
    named = [n for n, k in kernels_in(module).items() if getattr(getattr(k, "_pyfunc", None), "__name__", None) == function]
    return named[0] if named else function


@dataclass
class KernelResult:
    """One group's outcome: its static count and roofline point, or the status saying why not."""
    group: LaunchGroup
    status: str = "ok"                    # ok | no_time | no_static | invalid
    error: str | None = None
    static: dict[str, Any] | None = None
    point: RooflinePoint | None = None
    ncu: dict[str, Any] | None = None

    def to_json(self) -> dict:
        """The group's JSON plus status, error, static count, point and ncu metrics."""
        return {**self.group.to_json(), "status": self.status, "error": self.error, "static": self.static,
                "point": self.point.to_json() if self.point else None, "ncu": self.ncu}


def static_summary(sc) -> dict[str, Any]:
    """A static count as JSON without its op lists, with the FLOP total, compute unit and source."""
    d = sc.to_json()
    d.pop("memory_ops", None)
    d.pop("mma_ops", None)
    d["flops_total"] = sc.flops_total
    d["unit"] = list(compute_unit_of(sc))
    d["source"] = "static estimate (TileIR count at the recorded shapes)"
    return d


def roofline_launches(records: Sequence[LaunchRecord], *, device: DeviceModel | None, ceilings: Ceilings | None = None,
                      on_step: Callable[[str], None] | None = None) -> list[KernelResult]:
    """One result per configuration; without a device model (a dry run on a machine without a GPU)
    the static counts only."""
    say = on_step or (lambda _m: None)
    out: list[KernelResult] = []
    for g in group_launches(records):
        res = KernelResult(g)
        out.append(res)
        say(f"{g.kernel}: static count")
        try:
            sc = static_for_launch(g)
        except (CutileDiagError, ValueError, OSError) as e:
            msg = e.one_line() if isinstance(e, CutileDiagError) else str(e)
            res.status, res.error = "no_static", f"static count failed: {msg}"
            continue
        res.static = static_summary(sc)
        if device is None:
            res.status, res.error = "no_time", "not executed (--dry-run)"
            continue
        if sc.bytes_compulsory is None or sc.flops_total is None:
            res.status = "no_static"
            res.error = "static count incomplete: " + ("; ".join(sc.unknown) or "see the memory ops")
            continue
        times = g.times_ms()
        if not times:
            captured = sum(1 for r in g.launches if r.extra.get("graph_capture"))
            gapped = any(r.extra.get("enqueue_gap") for r in g.launches)
            why = (f"{captured} of {g.calls} launches were inside CUDA-graph capture (replays are not observed)"
                   if captured else "every launch's time was host enqueue time (raise CUTILE_DIAG_LAUNCH_PAD_US)"
                   if gapped else next((f"no device time: {r.extra['timing_error']}" for r in g.launches
                                          if r.extra.get("timing_error")),
                                         "launches recorded without a device time (not executed)"))
            res.status, res.error = "no_time", why
            continue
        lat = statistics.median(times)
        if lat <= 0:
            res.status, res.error = "no_time", "device time of 0 ms"
            continue
        p = analyze(g.kernel, g.label, latency_ms=lat, flops=sc.flops_total, bytes=sc.bytes_compulsory,
                    unit=compute_unit_of(sc), device=device, ceilings=ceilings,
                    latency_source="measured (launch events)", grid=g.grid)
        p.static = res.static
        p.counts_source = "static"
        if sc.bytes_total and sc.bytes_compulsory and sc.bytes_total > 1.05 * sc.bytes_compulsory:
            p.notes.append(f"tile traffic issued: {sc.bytes_total / 1e6:.1f} MB, {sc.bytes_total / sc.bytes_compulsory:.1f}x "
                           "the arrays' footprint (re-reads the caches must absorb)")
        p.notes.extend(sc.notes)
        if not sc.exact:
            p.notes.append("static count is an upper bound or partial: " + "; ".join(sc.unknown or ["see notes"]))
        if len(times) < len([r for r in g.launches if r.device_ms is not None]):
            p.notes.append("the first launch (JIT compile inside its events) is left out of the median")
        elif g.calls == 1:
            p.notes.append("a single launch: its time may include the JIT compile")
        gaps = sum(1 for r in g.launches if r.extra.get("enqueue_gap"))
        if gaps:
            how = "each less its host time past the spin (an estimate)" if g.gaps_corrected else \
                "left out of the median"
            p.notes.append(f"{gaps} launch(es) took longer to enqueue than the GPU spin ahead of them (their events "
                           f"hold host time): {how}; raise CUTILE_DIAG_LAUNCH_PAD_US to time them cleanly")
        res.point = p
        if not p.valid:
            res.status = "invalid"
    return out


def attach_ncu(results: Sequence[KernelResult], ncu) -> None:
    """Per-group DRAM bytes from an ``ncu.profile_command`` result: a profiled kernel belongs to the
    group whose kernel name prefixes its name and whose grid has its block count; one that fits
    several groups (same kernel and grid, other shapes) is not attributed."""
    if ncu.error:
        for r in results:
            r.ncu = {"error": ncu.error}
        return
    hits: dict[int, list] = {}
    ambiguous = 0
    for k in ncu.kernels:
        cands = [i for i, r in enumerate(results)
                 if k.name.startswith(r.group.kernel) and (k.grid_size is None or
                                                           int(k.grid_size) == r.group.launches[0].grid_blocks)]
        if len(cands) == 1:
            hits.setdefault(cands[0], []).append(k)
        elif cands:
            ambiguous += 1
    for i, r in enumerate(results):
        ks = hits.get(i)
        if not ks:
            r.ncu = {"error": "no profiled launch matched this kernel and grid"
                     + (f" ({ambiguous} profiled launches fit several configurations)" if ambiguous else "")}
            continue
        dram = [k.dram_bytes for k in ks if k.dram_bytes is not None]
        med = statistics.median(dram) if dram else None
        r.ncu = {"profiled_launches": len(ks), "dram_bytes": med,
                 "duration_ns": statistics.median([k.duration_ns for k in ks if k.duration_ns is not None] or [0]),
                 "spills": any(k.spills for k in ks)}
        p = r.point
        if p is not None:
            p.ncu = r.ncu
            if med is not None and p.bytes > 0:
                ratio = med / p.bytes
                r.ncu["dram_vs_static"] = ratio
                p.notes.append(f"ncu measured {med / 1e6:.1f} MB of DRAM traffic per launch, {ratio:.2f}x the "
                               f"static {p.bytes / 1e6:.1f} MB issued"
                               + (" — caches absorb re-reads" if ratio < 0.85 else ""))
