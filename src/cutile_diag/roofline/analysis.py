"""One call from a workload to roofline points: measure (or take recorded latencies), count, place.

Public API::

    results = roofline_workload(wl, cfgs, device=dev, ceilings=c, latencies=None, options=None,
                                check=True, check_seed=None, isolated=True, timeout_s=300, static=True,
                                ncu=False, on_step=print)
    for r in results: r.config, r.status, r.error, r.point (RooflinePoint | None), r.measure

``latencies`` (config name -> ms) switches a configuration to offline placement: no GPU,
no correctness check.  ``check_seed`` None (the default) checks each configuration on fresh
random inputs from a new seed, recorded in the point's ``check``.  Otherwise each configuration is measured through
``bench.measure_isolated`` (a killable subprocess; ``isolated=False`` measures in this
process).  A configuration whose check fails, raises or times out gets no point — a wrong
kernel has no meaningful speed — and its result says why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import CutileDiagError
from ..workload import Workload, WorkloadConfig
from .device import DeviceModel
from .model import RooflinePoint, analyze
from .peaks import Ceilings
from .static_cost import count_workload, cross_check
from .. import bench
from .ncu import profile_workload


@dataclass
class ConfigResult:
    config: str
    status: str                       # ok | mismatch | error | timeout | unavailable | no_gpu
    error: str | None = None
    point: RooflinePoint | None = None
    measure: Any = None               # bench.MeasureResult
    static: dict[str, Any] | None = None
    ncu: dict[str, Any] | None = None

    def to_json(self) -> dict:
        return {"config": self.config, "status": self.status, "error": self.error,
                "point": self.point.to_json() if self.point else None,
                "measure": self.measure.to_json() if self.measure is not None else None,
                "static": self.static, "ncu": self.ncu}


def static_summary(wl: Workload, cfg: WorkloadConfig, device: DeviceModel) -> dict[str, Any] | None:
    """Static count + cross-check for one configuration (None when the workload has no capture spec)."""
    num_sms = device.sm_count.value if device.sm_count.known else 132
    try:
        cap = wl.capture(cfg, num_sms)
        if cap is None:
            return {"available": False, "reason": "the workload gives no AOT capture spec for this configuration"}
        sc = count_workload(wl, cfg, num_sms)
    except CutileDiagError as e:
        return {"available": False, "reason": f"static count failed: {e.one_line()}"}
    if getattr(wl, "counts_source", "declared") == "static":
        ratios, notes = {}, []            # the workload's counts *are* this count: nothing to cross-check
    else:
        ratios, notes = cross_check(sc, wl.flops(cfg), wl.bytes(cfg), wl.compute_unit(cfg))
    d = sc.to_json()
    d.update({"available": True, "ratios": ratios, "cross_check": notes})
    return d


def roofline_workload(wl: Workload, cfgs: Sequence[WorkloadConfig], *, device: DeviceModel,
                      ceilings: Ceilings | None = None, latencies: dict[str, float] | None = None,
                      options=None, check: bool = True, check_seed: int | None = None,
                      isolated: bool = True, timeout_s: float = 300.0,
                      static: bool = True, ncu: bool = False,
                      on_step: Callable[[str], None] | None = None) -> list[ConfigResult]:
    options = options or bench.BenchOptions()
    out: list[ConfigResult] = []
    for cfg in cfgs:
        say = on_step or (lambda _m: None)
        num_sms = device.sm_count.value if device.sm_count.known else 132
        cap = None
        try:
            cap = wl.capture(cfg, num_sms)
        except Exception:
            cap = None
        grid = tuple(cap.grid) if cap is not None else None
        st = None
        if static:
            say(f"{cfg.name}: static count")
            st = static_summary(wl, cfg, device)
        res = ConfigResult(cfg.name, "ok", static=st)
        if latencies is not None and cfg.name in latencies:
            lat, src = float(latencies[cfg.name]), "recorded"
        else:
            say(f"{cfg.name}: check + time")
            if isolated:
                if not wl.ref:
                    raise CutileDiagError(f"workload {wl.name} has no reference string for a subprocess",
                                          hint="load it with load_workload(), or pass isolated=False")
                m = bench.measure_isolated(wl.ref, cfg.name, workload_kwargs=wl.ref_kwargs or None, options=options,
                                     check=check, check_seed=check_seed, timeout_s=timeout_s,
                                     device=device.index if device.kind == "live" else None)
            else:
                m = bench.measure_config(wl, cfg, options, check=check, check_seed=check_seed)
            res.measure = m
            if not m.ok:
                res.status, res.error = m.status, m.error
                out.append(res)
                continue
            lat, src = m.stats.median, "measured"
        p = analyze(wl.name, cfg.name, latency_ms=lat, flops=wl.flops(cfg), bytes=wl.bytes(cfg),
                    unit=wl.compute_unit(cfg), device=device, ceilings=ceilings, latency_source=src, grid=grid)
        p.counts_source = getattr(wl, "counts_source", "declared")
        if p.counts_source == "static":
            p.notes.insert(0, "FLOPs and bytes are static estimates (the TileIR counted at these specs, grid "
                              f"{grid}; bytes: the minimum DRAM traffic, issued tile traffic capped by the arrays' "
                              f"footprint); the latency is {src}"
                              + ("; a bare kernel has no reference, so its output was not checked"
                                 if src == "measured" else ""))
        if res.measure is not None:
            p.stats = res.measure.stats.record()
            p.check = res.measure.check.to_json() if res.measure.check else None
            clocks = (res.measure.measurement or {}).get("observed", {}).get("sm_clock_mhz")
            if clocks and device.sm_clock_max_mhz.known and clocks.get("median"):
                ratio = clocks["median"] / device.sm_clock_max_mhz.value
                if ratio < 0.95:
                    p.notes.append(f"the SM clock ran at a median {clocks['median']:.0f} MHz during timing, "
                                   f"{100 * (1 - ratio):.0f}% below the {device.sm_clock_max_mhz.value:.0f} MHz "
                                   "the compute roof assumes")
        if st and st.get("available"):
            p.static = st
            p.notes.extend(st.get("cross_check", []))
        elif st:
            p.static = st
            p.notes.append(f"static count: {st.get('reason')}")
        if ncu:
            say(f"{cfg.name}: ncu")
            if not wl.ref:
                res.ncu = {"error": "the workload has no reference string for the profiled subprocess"}
            else:
                nr = profile_workload(wl.ref, cfg.name, workload_kwargs=wl.ref_kwargs or None, timeout_s=timeout_s,
                                      device=device.index if device.kind == "live" else None)
                res.ncu = nr.to_json()
                if nr.dram_bytes is not None and p.bytes > 0:
                    r = nr.dram_bytes / p.bytes
                    res.ncu["dram_vs_declared"] = r
                    p.notes.append(f"ncu measured {nr.dram_bytes / 1e6:.1f} MB of DRAM traffic, {r:.2f}x the "
                                   f"declared {p.bytes / 1e6:.1f} MB"
                                   + (" — the byte model under-counts" if r > 1.15 else
                                      " — traffic below the model: L2 hits or a byte model that over-counts"
                                      if r < 0.85 else ""))
            p.ncu = res.ncu
        res.point = p
        out.append(res)
    return out
