"""Roofline placement, classification, the above-roof guard and the verdict.

Public API::

    p = analyze("examples:matmul", "4096-f16", latency_ms=0.25, flops=1.37e11, bytes=1.0e8,
                unit=("f16", "tensor"), device=dev, ceilings=c, latency_source="measured",
                grid=(32, 32))
    p.achieved_bw, p.achieved_flops, p.ai, p.recipe_class, p.bound, p.ridge_theoretical
    p.pct_datasheet, p.pct_measured, p.pct_theoretical   # percent of the attainable roof
    p.attainable_ms, p.attainable_tbps, p.floor_ms, p.pct_attainable   # the roof at this size (roofline.curve)
    p.valid, p.invalid_reasons, p.verdict, p.level
    a = attainable_time(bytes, flops, unit, device, ceilings, l2_flushed=True)   # without a latency (plans)

    recipe_class(ai) -> "memory-bound" (< 10) | "balanced" (10-50) | "compute-bound" (> 50)

Three sets of roofs, each a bandwidth and a compute peak for the unit the kernel uses:
*datasheet* (NVIDIA's figures for the variant), *measured* (``cutile-diag peaks``, or the
committed measurement of an offline preset) and *theoretical* (arch table x NVML max
clock, always above the datasheet on H100/H200).  Percent of roof is achieved over
attainable under each set: bandwidth when the point sits left of that set's ridge, FLOP/s
otherwise.  ``bound`` (and the recipe note) use the theoretical ridge, the one every arch
has; the verdict cites the measured ceiling, else the datasheet, else the theoretical roof.

Attainable at this size: max(launch floor, bytes at the measured copy bandwidth for that many
bytes, FLOPs at the measured compute ceiling) — ``roofline.curve``; without a measured curve
the flat ceiling stands in and there is no floor.  ``pct_attainable`` = attainable time over
the latency; a point whose attainable time is the launch floor is ``bound = "launch"`` (no
kernel of any size runs faster: what is left to gain is the latency minus the floor), and the
verdict and level then judge it by ``pct_attainable``, as they do every point with a curve.

Guard: a point more than ``guard_margin`` above a measured ceiling, or above the theoretical
roof at all (2 % slack for clocks above the NVML maximum), is INVALID — a broken timer, a
cached or unwritten output, or a wrong byte/FLOP count — never a win.  The 3 % default
margin is the measured noise, not slack: in the committed H200 ceilings the best repetition
beats the median by 1.7 % (streaming add) and 0.9-1.3 % (cuBLAS GEMMs), plus the harness's
1 % rel_std target for the kernel itself.  Datasheet figures do not guard: a device at its
max clock legitimately beats them (they are quoted at a lower boost clock).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .curve import Attainable, attainable
from .device import DeviceModel, Quantity
from .peaks import Ceilings
from ..output import prog

RECIPE_MEMORY_MAX = 10.0
RECIPE_COMPUTE_MIN = 50.0
NEAR_ROOF_PCT = 80.0
MID_ROOF_PCT = 50.0
THEORETICAL_SLACK = 0.02


def recipe_class(ai: float | None) -> str:
    """The recipe's class by arithmetic intensity: memory-bound below 10 FLOP/B, compute-bound
    above 50, balanced between."""
    if ai is None:
        return "unknown"
    if ai < RECIPE_MEMORY_MAX:
        return "memory-bound"
    if ai <= RECIPE_COMPUTE_MIN:
        return "balanced"
    return "compute-bound"


@dataclass
class RooflinePoint:
    """One configuration on the roofline: achieved rates, the roofs (theoretical, datasheet,
    measured) with % of each, the attainable time, and whether the point is valid."""
    workload: str
    config: str
    latency_ms: float
    latency_source: str                  # measured | recorded
    flops: float
    bytes: float
    compute_dtype: str
    compute_unit: str
    device: str
    achieved_bw: float                   # B/s (declared bytes / latency)
    achieved_flops: float                # FLOP/s
    ai: float | None                     # FLOP/byte
    recipe_class: str
    bound: str                           # memory | compute | unknown (by the theoretical ridge) | launch (at the floor)
    ridge_theoretical: float | None
    ridge_datasheet: float | None
    ridge_measured: float | None
    roof_bw_theoretical: Quantity
    roof_flops_theoretical: Quantity
    roof_bw_datasheet: Quantity
    roof_flops_datasheet: Quantity
    roof_bw_measured: Quantity | None
    roof_flops_measured: Quantity | None
    pct_theoretical: float | None
    pct_datasheet: float | None
    pct_measured: float | None
    valid: bool = True
    invalid_reasons: list[str] = field(default_factory=list)
    level: str = "unknown"               # invalid | near | moderate | far | unknown
    verdict: str = ""
    notes: list[str] = field(default_factory=list)
    grid: tuple[int, ...] | None = None
    stats: dict[str, Any] | None = None
    check: dict[str, Any] | None = None
    static: dict[str, Any] | None = None
    ncu: dict[str, Any] | None = None
    counts_source: str = "declared"      # where flops/bytes come from: declared (workload) | static (TileIR count)
    attainable_ms: float | None = None   # max(floor, bytes / curve bandwidth at this size, FLOPs / compute ceiling)
    attainable_tbps: float | None = None  # the bandwidth a copy of the same bytes reaches (the curve)
    floor_ms: float | None = None        # the launch floor (None: no curve measured)
    pct_attainable: float | None = None  # 100 x attainable_ms / latency_ms
    attainable_basis: str = ""           # what the attainable time was read from

    @property
    def achieved_tbps(self) -> float:
        """Achieved bandwidth in TB/s."""
        return self.achieved_bw / 1e12

    @property
    def achieved_tflops(self) -> float:
        """Achieved TFLOP/s."""
        return self.achieved_flops / 1e12

    def to_json(self) -> dict:
        """Every field as JSON, the roofs as quantities, plus TB/s and TFLOP/s."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in [k for k in d if k.startswith("roof_")]:
            d[k] = d[k].to_json() if d[k] is not None else None
        d["achieved_tbps"], d["achieved_tflops"] = self.achieved_tbps, self.achieved_tflops
        d["grid"] = list(self.grid) if self.grid else None
        return d


def _pct(achieved: float, roof: Quantity | None) -> float | None:
    if roof is None or not roof.known or roof.value <= 0:
        return None
    return 100.0 * achieved / roof.value


def _place(bw_ach: float, fl_ach: float, ai: float | None, bw: Quantity | None, fl: Quantity | None,
           fallback_bound: str) -> tuple[float | None, str, float | None]:
    """(ridge, bound, percent of the attainable roof) under one set of roofs."""
    ridge = fl.value / bw.value if (bw and bw.known and bw.value > 0 and fl and fl.known) else None
    bound = fallback_bound if (ridge is None or ai is None) else ("memory" if ai < ridge else "compute")
    pct = _pct(bw_ach, bw) if bound == "memory" else _pct(fl_ach, fl) if bound == "compute" else None
    return ridge, bound, pct


_MEM_HINTS = ("the memory path: tile loads through TMA instead of per-element gather/scatter (load_ptr_tko in the "
              "TileIR), enough bytes in flight (tile size, occupancy, a persistent grid), latency hints on the "
              "main loads, store allow_tma")
_COMP_HINTS = ("the math path: tensor-core use (f32 operands without a TF32 cast fall back to FMA), the MMA tile "
               "shape, pipelining depth and occupancy, register spills")


def _level(pct: float) -> str:
    return "near" if pct >= NEAR_ROOF_PCT else "moderate" if pct >= MID_ROOF_PCT else "far"


def _verdict(p: RooflinePoint, num_sms: int | None, pct: float | None, bound: str, against: str) -> None:
    if not p.valid:
        p.level = "invalid"
        p.verdict = ("INVALID: " + "; ".join(p.invalid_reasons) + ". Not a speedup: suspect the timer, a cached or "
                     "unwritten output, or a wrong byte/FLOP count")
        if any("measured" in r for r in p.invalid_reasons):
            p.verdict += f" (or a low ceiling: re-measure with `{prog()} peaks --refresh` on the GPU)"
        p.verdict += "."
        return
    if p.bound == "launch":
        p.level = _level(p.pct_attainable)
        gain = max(0.0, p.latency_ms - p.floor_ms) * 1e3
        p.verdict = (f"launch-bound: {p.latency_ms * 1e3:.2f} µs against a launch floor of {p.floor_ms * 1e3:.2f} µs "
                     f"(no kernel runs faster; {p.pct_attainable:.0f}% of attainable, at most {gain:.2f} µs to gain "
                     "per launch): fewer launches (fusion with a neighbour, CUDA graphs) pay, not the kernel's body")
        return
    if pct is None or bound == "unknown":
        p.level = "unknown"
        p.verdict = "no roof for this unit on this device: only the latency can be judged"
        return
    roof = f"{bound} roof"
    att = p.pct_attainable if p.floor_ms is not None else None       # a size-aware roof: judged by it
    sized = f"{att:.0f}% of attainable at {p.bytes / 1e6:.3g} MB, " if att is not None else ""
    p.level = _level(att if att is not None else pct)
    if p.level == "near":
        what = ("move fewer bytes (fusion, lower-precision storage, recompute instead of reload)"
                if bound == "memory" else "do fewer FLOPs or use a faster unit (tensor cores, lower precision)")
        p.verdict = (f"near the {roof} ({sized}{pct:.0f}% of the {against}): knobs will not move it much; "
                     f"a further speedup needs a structural change — {what}")
    else:
        hints = _MEM_HINTS if bound == "memory" else _COMP_HINTS
        lead = "headroom left" if p.level == "moderate" else "far below the roof"
        p.verdict = f"{sized}{pct:.0f}% of the {roof} ({against}): {lead}; look at {hints}"
    extra = []
    if p.grid and num_sms:
        blocks = math.prod(p.grid)
        if blocks < num_sms:
            extra.append(f"the grid has {blocks} blocks for {num_sms} SMs: the GPU is under-filled")
    if p.latency_ms < 0.01 and p.floor_ms is None:
        extra.append(f"a {p.latency_ms * 1e3:.1f} µs run is launch/latency-bound: its roofline percentage "
                     "says little")
    if extra:
        p.verdict += " (" + "; ".join(extra) + ")"


def _best(*qs: Quantity | None) -> float | None:
    return next((q.value for q in qs if q is not None and q.known and q.value and q.value > 0), None)


def attainable_time(bytes: float, flops: float, unit: tuple[str, str], device: DeviceModel,
                    ceilings: Ceilings | None, *, l2_flushed: bool = True, sized: bool = True) -> Attainable:
    """The roof at this size (``roofline.curve.attainable``) with this device's best-known figures:
    the measured curve and ceilings, else the datasheet (else the theoretical FLOP peak).
    ``sized=False``: the flat roof (no curve, no floor)."""
    key = f"{unit[0]}:{unit[1]}"
    bw = _best(ceilings.ceiling("dram") if ceilings else None, device.datasheet_peak("dram_bw"))
    fl = _best(ceilings.ceiling(key) if ceilings else None, device.datasheet_peak(key),
               device.theoretical_flops(*unit))
    return attainable(float(bytes or 0.0), float(flops or 0.0), curve=ceilings.curve if ceilings and sized else None,
                      bw=bw, flops_peak=fl, flushed=l2_flushed)


def analyze(workload: str, config: str, *, latency_ms: float, flops: float, bytes: float,
            unit: tuple[str, str], device: DeviceModel, ceilings: Ceilings | None = None,
            latency_source: str = "measured", grid: tuple[int, ...] | None = None,
            guard_margin: float = 0.03, l2_flushed: bool = True) -> RooflinePoint:
    """Place a latency on the roofline of ``device`` (and its measured ``ceilings``): achieved
    rates, bound, % of each roof and of the attainable time; a point above any roof by more
    than ``guard_margin`` is marked invalid with the reason."""
    if not (latency_ms and latency_ms > 0 and math.isfinite(latency_ms)):
        raise ValueError(f"latency must be a positive number of ms, not {latency_ms!r}")
    dtype, u = unit
    t = latency_ms * 1e-3
    bw_ach = float(bytes) / t
    fl_ach = float(flops) / t
    ai = (float(flops) / float(bytes)) if bytes and bytes > 0 else None
    bw_th, fl_th = device.theoretical_dram_bw(), device.theoretical_flops(dtype, u)
    bw_ds, fl_ds = device.datasheet_peak("dram_bw"), device.datasheet_peak(f"{dtype}:{u}")
    bw_meas = ceilings.ceiling("dram") if ceilings else None
    fl_meas = ceilings.ceiling(f"{dtype}:{u}") if ceilings else None
    if ai is None:
        base = "memory" if bytes and bytes > 0 else "compute"
    else:
        base = "unknown" if not bw_th.known else "memory"     # no compute roof: only bandwidth can judge it
    ridge_th, bound, pct_th = _place(bw_ach, fl_ach, ai, bw_th, fl_th, base)
    # a set without its own compute figure still places the point by the theoretical ridge
    ridge_ds, bound_ds, pct_ds = _place(bw_ach, fl_ach, ai, bw_ds, fl_ds, bound)
    ridge_meas, bound_meas, pct_meas = _place(bw_ach, fl_ach, ai, bw_meas, fl_meas, bound)
    p = RooflinePoint(workload=workload, config=config, latency_ms=latency_ms, latency_source=latency_source,
                      flops=float(flops), bytes=float(bytes), compute_dtype=dtype, compute_unit=u,
                      device=device.name, achieved_bw=bw_ach, achieved_flops=fl_ach, ai=ai,
                      recipe_class=recipe_class(ai), bound=bound, ridge_theoretical=ridge_th,
                      ridge_datasheet=ridge_ds, ridge_measured=ridge_meas, roof_bw_theoretical=bw_th,
                      roof_flops_theoretical=fl_th, roof_bw_datasheet=bw_ds, roof_flops_datasheet=fl_ds,
                      roof_bw_measured=bw_meas, roof_flops_measured=fl_meas, pct_theoretical=pct_th,
                      pct_datasheet=pct_ds, pct_measured=pct_meas, grid=tuple(grid) if grid else None)
    # -- the above-roof guard: every roof, not only the one that applies --------------------
    recorded = ", recorded for this preset" if ceilings and ceilings.recorded_from else ""
    for what, ach, ceil, label in (("bandwidth", bw_ach, bw_meas, "measured DRAM ceiling"),
                                   ("FLOP rate", fl_ach, fl_meas, f"measured {dtype} {u} ceiling")):
        if ceil is not None and ceil.known and ceil.value > 0 and ach > ceil.value * (1 + guard_margin):
            p.invalid_reasons.append(f"{what} {ach / 1e12:.3g} T/s is {100 * (ach / ceil.value - 1):.0f}% above "
                                     f"the {label} ({ceil.value / 1e12:.3g} T/s{recorded}; noise margin "
                                     f"{100 * guard_margin:g}%)")
    for what, ach, roof, label in (("bandwidth", bw_ach, bw_th, "theoretical bandwidth"),
                                   ("FLOP rate", fl_ach, fl_th, f"theoretical {dtype} {u} peak at max clock")):
        if roof.known and roof.value > 0 and ach > roof.value * (1 + THEORETICAL_SLACK):
            p.invalid_reasons.append(f"{what} {ach / 1e12:.3g} T/s exceeds the {label} "
                                     f"({roof.value / 1e12:.3g} T/s)")
    p.valid = not p.invalid_reasons
    a = attainable_time(bytes, flops, unit, device, ceilings, l2_flushed=l2_flushed)
    if a.ms:
        p.attainable_ms, p.floor_ms, p.attainable_tbps = a.ms, a.floor_ms, a.tbps
        p.pct_attainable = 100.0 * a.ms / latency_ms
        p.attainable_basis = f"{a.limit}: " + ("the launch floor" if a.limit == "launch" else
                                              a.basis if a.limit == "memory" else "FLOPs at the compute ceiling")
        if a.limit == "launch" and p.valid:
            p.bound = "launch"
        if p.pct_attainable > 100.0 * (1 + guard_margin) and p.valid:
            p.notes.append(f"{p.pct_attainable:.0f}% of attainable: faster than a device copy of the same bytes "
                           f"({a.basis}) — warm caches, or a byte count above what moved")
    if not fl_th.known:
        p.notes.append(f"no {dtype} {u} compute roof for {device.arch}: {fl_th.source}")
    if ceilings is None:
        p.notes.append(f"offline: device preset {device.name}, recorded latency; this preset has no measured "
                       "ceilings, so only the theoretical roof guards against impossible results"
                       if device.kind == "preset" else f"no measured ceilings: run `{prog()} peaks` to add them")
    elif device.kind == "preset":
        when = f" measured {ceilings.measured_at[:10]}" if ceilings.measured_at else ""
        p.notes.append(f"offline: device preset {device.name}, recorded latency; ceilings{when} from "
                       f"{ceilings.recorded_from or 'the caller'}")
    if fl_meas is None and ceilings is not None and flops:
        p.notes.append(f"no measured {dtype} {u} ceiling (peaks measures bf16/f16 tensor GEMMs): the FLOP guard "
                       "uses the theoretical peak only")
    if not fl_ds.known and flops and bound == "compute":
        p.notes.append(f"% of datasheet unknown: {fl_ds.source}")
    if p.recipe_class != "unknown" and bound in ("memory", "compute") and ridge_th is not None:
        rc = p.recipe_class
        if (rc == "compute-bound" and bound == "memory") or (rc == "memory-bound" and bound == "compute"):
            p.notes.append(f"the recipe calls AI {ai:.1f} {rc}, but this device's ridge is {ridge_th:.0f} "
                           f"FLOP/B for {dtype} {u}, so the {bound} roof applies")
        elif rc == "balanced":
            p.notes.append(f"balanced by the recipe (AI {ai:.1f}); the device ridge is {ridge_th:.0f} FLOP/B, "
                           f"so the {bound} roof applies")
    cited = next(((pc, b, what) for pc, b, what in ((pct_meas, bound_meas, "measured ceiling"),
                                                    (pct_ds, bound_ds, "datasheet"),
                                                    (pct_th, bound, "theoretical roof at max clock"))
                  if pc is not None), (None, bound, ""))
    _verdict(p, device.sm_count.value if device.sm_count.known else None, *cited)
    return p
