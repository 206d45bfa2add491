"""Roofline placement, classification, the above-roof guard and the verdict.

Public API::

    p = analyze("examples:matmul", "4096-f16", latency_ms=0.25, flops=1.37e11, bytes=1.0e8,
                unit=("f16", "tensor"), device=dev, ceilings=c, latency_source="measured",
                grid=(32, 32))
    p.achieved_bw, p.achieved_flops, p.ai, p.recipe_class, p.bound, p.ridge_spec
    p.pct_spec, p.pct_measured        # percent of the bound that applies
    p.valid, p.invalid_reasons, p.verdict, p.level

    recipe_class(ai) -> "memory-bound" (< 10) | "balanced" (10-50) | "compute-bound" (> 50)

The recipe's thresholds set knob priority; the device's ridge point (peak FLOP/s ÷ peak
B/s for the unit the kernel uses) decides which roof applies.  Percent of roof is achieved
bandwidth ÷ bandwidth roof when the point sits left of the ridge, achieved FLOP/s ÷ compute
roof otherwise — against the spec roof (tables x clocks) and against the measured ceiling.

Guard: a point above the measured ceiling by more than ``guard_margin`` (default 3 %, the
ceiling's own run-to-run noise), or above the spec roof at all (2 % slack for clocks above
the NVML maximum), is INVALID — a broken timer, a cached or unwritten output, or a wrong
byte/FLOP count — never a win.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .device import DeviceModel, Quantity
from .peaks import Ceilings

RECIPE_MEMORY_MAX = 10.0
RECIPE_COMPUTE_MIN = 50.0
NEAR_ROOF_PCT = 80.0
MID_ROOF_PCT = 50.0
SPEC_SLACK = 0.02


def recipe_class(ai: float | None) -> str:
    if ai is None:
        return "unknown"
    if ai < RECIPE_MEMORY_MAX:
        return "memory-bound"
    if ai <= RECIPE_COMPUTE_MIN:
        return "balanced"
    return "compute-bound"


@dataclass
class RooflinePoint:
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
    bound: str                           # memory | compute | unknown (by the spec ridge)
    ridge_spec: float | None
    ridge_measured: float | None
    roof_bw_spec: Quantity
    roof_flops_spec: Quantity
    roof_bw_measured: Quantity | None
    roof_flops_measured: Quantity | None
    pct_spec: float | None
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

    @property
    def achieved_tbps(self) -> float:
        return self.achieved_bw / 1e12

    @property
    def achieved_tflops(self) -> float:
        return self.achieved_flops / 1e12

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("roof_bw_spec", "roof_flops_spec", "roof_bw_measured", "roof_flops_measured"):
            d[k] = d[k].to_json() if d[k] is not None else None
        d["achieved_tbps"], d["achieved_tflops"] = self.achieved_tbps, self.achieved_tflops
        d["grid"] = list(self.grid) if self.grid else None
        return d


def _pct(achieved: float, roof: Quantity | None) -> float | None:
    if roof is None or not roof.known or roof.value <= 0:
        return None
    return 100.0 * achieved / roof.value


_MEM_HINTS = ("the memory path: tile loads through TMA instead of per-element gather/scatter (load_ptr_tko in the "
              "TileIR), enough bytes in flight (tile size, occupancy, a persistent grid), latency hints on the "
              "main loads, store allow_tma")
_COMP_HINTS = ("the math path: tensor-core use (f32 operands without a TF32 cast fall back to FMA), the MMA tile "
               "shape, pipelining depth and occupancy, register spills")


def _verdict(p: RooflinePoint, num_sms: int | None) -> None:
    if not p.valid:
        p.level = "invalid"
        p.verdict = ("INVALID: " + "; ".join(p.invalid_reasons) + ". Not a speedup: suspect the timer, a cached or "
                     "unwritten output, or a wrong byte/FLOP count.")
        return
    pct = p.pct_measured if p.pct_measured is not None else p.pct_spec
    against = "measured ceiling" if p.pct_measured is not None else "spec roof"
    if pct is None or p.bound == "unknown":
        p.level = "unknown"
        p.verdict = "no roof for this unit on this device: only the latency can be judged"
        return
    roof = f"{p.bound} roof"
    if pct >= NEAR_ROOF_PCT:
        p.level = "near"
        what = ("move fewer bytes (fusion, lower-precision storage, recompute instead of reload)"
                if p.bound == "memory" else "do fewer FLOPs or use a faster unit (tensor cores, lower precision)")
        p.verdict = (f"near the {roof} ({pct:.0f}% of the {against}): knobs will not move it much; "
                     f"a further speedup needs a structural change — {what}")
    else:
        p.level = "moderate" if pct >= MID_ROOF_PCT else "far"
        hints = _MEM_HINTS if p.bound == "memory" else _COMP_HINTS
        lead = "headroom left" if p.level == "moderate" else "far below the roof"
        p.verdict = f"{pct:.0f}% of the {roof} ({against}): {lead}; look at {hints}"
    extra = []
    if p.grid and num_sms:
        blocks = math.prod(p.grid)
        if blocks < num_sms:
            extra.append(f"the grid has {blocks} blocks for {num_sms} SMs: the GPU is under-filled")
    if p.latency_ms < 0.01:
        extra.append(f"a {p.latency_ms * 1e3:.1f} µs run is launch/latency-bound: its roofline percentage "
                     "says little")
    if extra:
        p.verdict += " (" + "; ".join(extra) + ")"


def analyze(workload: str, config: str, *, latency_ms: float, flops: float, bytes: float,
            unit: tuple[str, str], device: DeviceModel, ceilings: Ceilings | None = None,
            latency_source: str = "measured", grid: tuple[int, ...] | None = None,
            guard_margin: float = 0.03) -> RooflinePoint:
    if not (latency_ms and latency_ms > 0 and math.isfinite(latency_ms)):
        raise ValueError(f"latency must be a positive number of ms, not {latency_ms!r}")
    dtype, u = unit
    t = latency_ms * 1e-3
    bw_ach = float(bytes) / t
    fl_ach = float(flops) / t
    ai = (float(flops) / float(bytes)) if bytes and bytes > 0 else None
    bw_spec, fl_spec = device.peak_dram_bw(), device.peak_flops(dtype, u)
    bw_meas = ceilings.ceiling("dram") if ceilings else None
    fl_meas = ceilings.ceiling(f"{dtype}:{u}") if ceilings else None
    ridge_spec = (fl_spec.value / bw_spec.value) if (fl_spec.known and bw_spec.known and bw_spec.value) else None
    ridge_meas = None
    if bw_meas and bw_meas.known:
        fl_for_ridge = fl_meas if (fl_meas and fl_meas.known) else fl_spec
        if fl_for_ridge.known:
            ridge_meas = fl_for_ridge.value / bw_meas.value

    def bound_for(ridge):
        if ai is None:
            return "memory" if bytes and bytes > 0 else "compute"
        if ridge is None:
            return "unknown" if not bw_spec.known else "memory"
        return "memory" if ai < ridge else "compute"

    bound = bound_for(ridge_spec)
    bound_meas = bound_for(ridge_meas) if ridge_meas is not None else bound
    pct_spec = _pct(bw_ach, bw_spec) if bound == "memory" else _pct(fl_ach, fl_spec) if bound == "compute" else None
    if bound_meas == "memory":
        pct_meas = _pct(bw_ach, bw_meas)
    elif bound_meas == "compute":
        pct_meas = _pct(fl_ach, fl_meas)
    else:
        pct_meas = None
    p = RooflinePoint(workload=workload, config=config, latency_ms=latency_ms, latency_source=latency_source,
                      flops=float(flops), bytes=float(bytes), compute_dtype=dtype, compute_unit=u,
                      device=device.name, achieved_bw=bw_ach, achieved_flops=fl_ach, ai=ai,
                      recipe_class=recipe_class(ai), bound=bound, ridge_spec=ridge_spec, ridge_measured=ridge_meas,
                      roof_bw_spec=bw_spec, roof_flops_spec=fl_spec, roof_bw_measured=bw_meas,
                      roof_flops_measured=fl_meas, pct_spec=pct_spec, pct_measured=pct_meas,
                      grid=tuple(grid) if grid else None)
    # -- the above-roof guard: every roof, not only the one that applies --------------------
    checks = [("bandwidth", bw_ach, bw_meas, "measured copy ceiling"), ("FLOP rate", fl_ach, fl_meas,
                                                                         f"measured {dtype} {u} ceiling")]
    for what, ach, ceil, label in checks:
        if ceil is not None and ceil.known and ceil.value > 0 and ach > ceil.value * (1 + guard_margin):
            p.invalid_reasons.append(f"{what} {ach / 1e12:.3g} T/s is {100 * (ach / ceil.value - 1):.0f}% above "
                                     f"the {label} ({ceil.value / 1e12:.3g} T/s)")
    for what, ach, roof, label in (("bandwidth", bw_ach, bw_spec, "spec bandwidth"),
                                   ("FLOP rate", fl_ach, fl_spec, f"spec {dtype} {u} peak")):
        if roof.known and roof.value > 0 and ach > roof.value * (1 + SPEC_SLACK):
            p.invalid_reasons.append(f"{what} {ach / 1e12:.3g} T/s exceeds the {label} "
                                     f"({roof.value / 1e12:.3g} T/s)")
    p.valid = not p.invalid_reasons
    if not fl_spec.known:
        p.notes.append(f"no {dtype} {u} compute roof for {device.arch}: {fl_spec.source}")
    if ceilings is None and device.kind == "live":
        p.notes.append("no measured ceilings: run `cutile-diag peaks` to add them")
    elif device.kind == "preset":
        p.notes.append(f"offline: device preset {device.name}, recorded latency; no measured ceilings")
    if fl_meas is None and ceilings is not None and flops:
        p.notes.append(f"no measured {dtype} {u} ceiling (peaks measures bf16/f16 tensor GEMMs): the FLOP guard "
                       "uses the spec peak only")
    if p.recipe_class != "unknown" and bound in ("memory", "compute") and ridge_spec is not None:
        rc = p.recipe_class
        if (rc == "compute-bound" and bound == "memory") or (rc == "memory-bound" and bound == "compute"):
            p.notes.append(f"the recipe calls AI {ai:.1f} {rc}, but this device's ridge is {ridge_spec:.0f} "
                           f"FLOP/B for {dtype} {u}, so the {bound} roof applies")
        elif rc == "balanced":
            p.notes.append(f"balanced by the recipe (AI {ai:.1f}); the device ridge is {ridge_spec:.0f} FLOP/B, "
                           f"so the {bound} roof applies")
    _verdict(p, device.sm_count.value if device.sm_count.known else None)
    return p
