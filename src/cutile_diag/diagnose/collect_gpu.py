"""Evidence from GPU measurements: roofline points across configurations, host vs kernel time,
a baseline for win/loss flips, Nsight Compute metrics.

Inputs are the roofline's ``RooflinePoint`` objects (or their ``to_json()`` dicts), so saved
results diagnose as well as fresh ones::

    collect_gpu(ev, points=[p1, p2], primary="4096-f16", device=dev,
                baseline=[q1, q2], host_ms=0.012, ncu={...})
    collect_gpu(ev, records=[{"config": "a", "median": 0.2}, ...], baseline=[...])   # no roofline

The first point (or ``primary``) is the configuration the single-valued facts describe;
cross-configuration facts (class changes, spread, sign flips) use all valid points.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from .evidence import Evidence, Site
from ..output import prog
from .residency import Waves, resident

# significance threshold for a win/loss against the baseline (run-to-run noise is 1-2 %)
FLIP_THRESHOLD = 0.02

# Nsight Compute: our key -> metric names / section labels that carry it
NCU_ALIASES: dict[str, tuple[str, ...]] = {
    "ncu.sm_throughput_pct": ("sm_throughput_pct", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                              "Compute (SM) Throughput"),
    "ncu.dram_throughput_pct": ("dram_throughput_pct", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                                "dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM Throughput",
                                "Memory Throughput"),
    "ncu.achieved_occupancy_pct": ("achieved_occupancy_pct", "sm__warps_active.avg.pct_of_peak_sustained_active",
                                   "Achieved Occupancy"),
    "ncu.registers": ("registers", "registers_per_thread", "launch__registers_per_thread", "Registers Per Thread"),
    "ncu.spill_bytes": ("spill_bytes", "local_spill_bytes"),
    "ncu.dram_bytes": ("dram_bytes", "dram__bytes.sum", "dram__bytes_read.sum+dram__bytes_write.sum"),
    "ncu.l2_hit_pct": ("l2_hit_pct", "lts__t_sector_hit_rate.pct", "L2 Hit Rate"),
}


def _get(obj: Any, key: str, default=None):
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _num(v) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, Mapping) and "value" in v:       # a Quantity's JSON
        v = v["value"]
    elif hasattr(v, "value") and hasattr(v, "unit"):   # a roofline Quantity
        v = v.value
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _pct(p) -> tuple[float | None, str]:
    # 'pct_spec' / 'ridge_spec': the name in roofline JSON saved before the datasheet split
    meas = _num(_get(p, "pct_measured"))
    if meas is not None:
        return meas, "measured ceiling"
    ds = _num(_get(p, "pct_datasheet"))
    return (ds if ds is not None else _num(_get(p, "pct_spec"))), "datasheet roof"


def _class(p) -> str:
    bound = _get(p, "bound")
    if bound in ("memory", "compute"):
        return f"{bound}-bound"
    rc = _get(p, "recipe_class")
    return rc if rc in ("memory-bound", "compute-bound", "balanced") else "balanced"


def _grid_blocks(p) -> int | None:
    g = _get(p, "grid")
    if not g:
        return None
    try:
        return int(math.prod(int(x) for x in g))
    except (TypeError, ValueError):
        return None


def _record_latency(r) -> float | None:
    """Latency (ms) of a harness record: a roofline point, a MeasureResult-like, or a TileGym
    record dict ({'median': ms, ...} possibly under 'forward')."""
    for key in ("latency_ms", "median_ms", "median"):
        v = _num(_get(r, key))
        if v is not None:
            return v
    for key in ("stats", "forward"):
        sub = _get(r, key)
        if sub is not None and _num(_get(sub, "median")) is not None:
            return _num(_get(sub, "median"))
    return None


def collect_records(ev: Evidence, records: Sequence[Any], baseline: Sequence[Any] = (),
                    variant_of: Mapping[str, str] | None = None) -> Evidence:
    """Timing records without FLOP/byte counts (e.g. parsed from TileGym's --print-record):
    latency, noise and win/loss flips against a baseline — no roofline class."""
    recs = [r for r in records if _record_latency(r) is not None]
    if not recs:
        return ev
    src = "measurement: harness records"
    ev.add("gpu.configs", len(recs), src, ", ".join(str(_get(r, "config")) for r in recs))
    ev.add("gpu.latency_ms", _record_latency(recs[0]), src, f"median of {_get(recs[0], 'config')}")
    rs = _num(_get(_get(recs[0], "stats") or recs[0], "rel_std"))
    if rs is not None:
        ev.add("gpu.rel_std", rs, src, "rel_std of the first configuration")
    if baseline:
        _sign_flips(ev, recs, baseline)
    if len(recs) > 1:
        collect_variants(ev, recs, str(_get(recs[0], "config")), variant_of)
    ev.missing("roofline class and % of roof", "timing records carry no FLOP/byte counts",
               "diagnose the workload (it declares flops/bytes)")
    return ev


def _sign_flips(ev: Evidence, now: Sequence[Any], baseline: Sequence[Any]) -> None:
    base = {_get(b, "config"): _record_latency(b) for b in baseline}
    faster, slower = [], []
    for x in now:
        b, t = base.get(_get(x, "config")), _record_latency(x)
        if not b or not t:
            continue
        gain = b / t - 1.0
        if gain > FLIP_THRESHOLD:
            faster.append(f"{_get(x, 'config')} {gain:+.1%}")
        elif gain < -FLIP_THRESHOLD:
            slower.append(f"{_get(x, 'config')} {gain:+.1%}")
    ev.add("gpu.sign_flips", bool(faster and slower), "measurement: against the baseline",
           f"faster: {', '.join(faster) or 'none'}; slower: {', '.join(slower) or 'none'}")


def variant_groups(configs: Sequence[Any]) -> dict[str, str]:
    """{config name: group key} for configurations that run the same problem through different
    kernels: equal shape parameters (numbers and the dtype) and differing only in switches
    (booleans, mode strings) such as ``use_tma`` or ``mode``.  Only groups of two or more."""
    groups: dict[str, list[str]] = {}
    for c in configs:
        params = dict(_get(c, "params") or {})
        shape = {k: v for k, v in params.items()
                 if k == "dtype" or (isinstance(v, (int, float)) and not isinstance(v, bool))}
        switches = {k for k in params if k not in shape}
        if not switches:
            continue
        key = repr(sorted((k, str(v)) for k, v in shape.items()))
        groups.setdefault(key, []).append(str(_get(c, "name")))
    return {n: k for k, names in groups.items() if len(names) > 1 for n in names}


def _same_cost_groups(pts: Sequence[Any]) -> dict[str, str]:
    """Saved points without configurations: equal declared FLOPs and bytes = one problem."""
    groups: dict[tuple, list[str]] = {}
    for p in pts:
        f, b = _num(_get(p, "flops")), _num(_get(p, "bytes"))
        if f is not None and b is not None:
            groups.setdefault((f, b), []).append(str(_get(p, "config")))
    return {n: repr(k) for k, names in groups.items() if len(names) > 1 for n in names}


def collect_variants(ev: Evidence, pts: Sequence[Any], primary: str | None,
                     variant_of: Mapping[str, str] | None = None) -> None:
    """gpu.variant_gain / gpu.variant_spread / gpu.variants: kernel variants of one op timed at
    the same shape in the same run, with both measurements."""
    groups = dict(variant_of) if variant_of is not None else _same_cost_groups(pts)
    lat = {str(_get(p, "config")): _record_latency(p) for p in pts}
    by_group: dict[str, list[str]] = {}
    for name, key in groups.items():
        if lat.get(name):
            by_group.setdefault(key, []).append(name)
    lines, spread, gain = [], None, None
    for key, names in by_group.items():
        if len(names) < 2:
            continue
        names.sort(key=lambda n: lat[n])
        fast = names[0]
        for n in names[1:]:
            lines.append(f"{fast} is {lat[n] / lat[fast] - 1:.1%} faster than {n} at the same shape "
                         f"({lat[fast]:.4g} ms vs {lat[n]:.4g} ms, measured in the same run)")
        s = lat[names[-1]] / lat[fast] - 1.0
        spread = s if spread is None else max(spread, s)
        if primary in names:
            gain = lat[primary] / lat[fast] - 1.0
    src = "measurement: configurations of one op at one shape"
    if not lines:
        ev.add("gpu.variant_spread", 0.0, src, "no two measured configurations run one shape through different kernels")
        ev.add("gpu.variant_gain", 0.0, src, "no variant of the primary configuration was measured")
        return
    ev.add("gpu.variants", lines, src, f"{len(lines)} comparison(s)")
    ev.add("gpu.variant_spread", round(spread, 4), src, "slowest / fastest variant - 1")
    if gain is not None:
        ev.add("gpu.variant_gain", round(gain, 4), src,
               f"{primary} vs the fastest variant of its shape" + (" (it is the fastest)" if gain == 0 else ""))


def collect_gpu(ev: Evidence, *, points: Sequence[Any] = (), primary: str | None = None, device: Any = None,
                baseline: Sequence[Any] = (), host_ms: float | None = None, kernel_ms: float | None = None,
                ncu: Mapping[str, Any] | None = None, ctas_per_sm: int | None = None,
                records: Sequence[Any] = (), variant_of: Mapping[str, str] | None = None) -> Evidence:
    """Add measured facts to ``ev``: the roofline points (the ``primary`` configuration's first),
    variants, host overhead and ncu metrics; without points, observed launch records."""
    pts = list(points)
    if not pts:
        if records:
            return collect_records(ev, records, baseline, variant_of)
        ev.missing("roofline class and % of roof", "no GPU measurement", "diagnose a workload on a GPU")
        return ev
    p = next((x for x in pts if _get(x, "config") == primary), pts[0])
    cfg = _get(p, "config") or "?"
    wl = _get(p, "workload") or ev.kernel or "?"
    src = f"measurement: roofline ({wl} {cfg})"
    ev.collected.append(f"gpu: {len(pts)} configuration(s) of {wl}")
    ev.resolve("roofline")

    valid = [x for x in pts if _get(x, "valid", True)]
    invalid = [x for x in pts if not _get(x, "valid", True)]
    ev.add("gpu.configs", len(pts), src, ", ".join(str(_get(x, "config")) for x in pts))
    ev.add("gpu.above_roof", bool(invalid), src,
           ("; ".join(f"{_get(x, 'config')}: " + "; ".join(_get(x, "invalid_reasons") or []) for x in invalid))
           if invalid else "every point is under its measured ceiling",
           [Site(f"measurement: {_get(x, 'config')}", r) for x in invalid for r in (_get(x, "invalid_reasons") or [])])

    lat = _num(_get(p, "latency_ms"))
    if lat is not None:
        ev.add("gpu.latency_ms", lat, src, f"median of the timed repetitions ({_get(p, 'latency_source') or 'measured'})")
    cls = _class(p)
    pct, against = _pct(p)
    ai = _num(_get(p, "ai"))
    verdict = _get(p, "verdict") or ""
    ev.add("gpu.roofline_class", cls, src,
           f"{_get(p, 'bound')} roof applies (AI {ai:.3g} FLOP/B; recipe: {_get(p, 'recipe_class')})"
           if ai is not None else f"{_get(p, 'bound')} roof applies",
           [Site(src, verdict)] if verdict else [])
    if pct is not None:
        ev.add("gpu.pct_of_roof", round(pct, 2), src, f"{pct:.1f}% of the {cls.replace('-bound', '')} roof ({against})")
    pm = _num(_get(p, "pct_measured"))
    if pm is not None:
        ev.add("gpu.pct_of_ceiling", round(pm, 2), src, f"against the measured ceiling ({prog()} peaks)")
    pa = _num(_get(p, "pct_attainable"))
    if pa is not None and _get(p, "floor_ms") is not None:
        ev.add("gpu.pct_attainable", round(pa, 2), src, f"against the time attainable at its size "
               f"({_get(p, 'attainable_basis')}; {prog()} peaks measures the size curve)")
    bw, fl = _num(_get(p, "achieved_bw")), _num(_get(p, "achieved_flops"))
    if bw is not None:
        ev.add("gpu.achieved_tbps", bw / 1e12, src, f"{_num(_get(p, 'bytes')) or 0:.3g} B / {lat} ms")
    if fl is not None:
        ev.add("gpu.achieved_tflops", fl / 1e12, src, f"{_num(_get(p, 'flops')) or 0:.3g} FLOP / {lat} ms")
    if ai is not None:
        ev.add("gpu.arithmetic_intensity", ai, src, "declared FLOPs / declared bytes of the workload")
    stats = _get(p, "stats") or {}
    rs = _num(_get(stats, "rel_std"))
    if rs is not None:
        ev.add("gpu.rel_std", rs, src, f"rel_std over {_get(stats, 'nrep')} repetitions")

    # device (the measured one replaces an arch preset)
    if device is not None:
        sc = _get(device, "sm_count")
        sms = _num(sc)
        if sms:
            ev.add("device.sm_count", int(sms), f"device: {_get(device, 'name')}",
                   str(_get(sc, "source") or ""))
        if _get(device, "name"):
            ev.add("device.name", str(_get(device, "name")), f"device: {_get(device, 'kind') or 'live'}")
    ridge = next((r for r in (_num(_get(p, k)) for k in ("ridge_measured", "ridge_datasheet", "ridge_spec"))
                  if r is not None), None)
    if ridge:
        ev.add("device.ridge_intensity", ridge, src,
               f"{_get(p, 'compute_dtype')} {_get(p, 'compute_unit')} roof / DRAM roof")

    # grid, waves, tail
    blocks = _grid_blocks(p)
    if blocks:
        ev.add("gpu.grid_blocks", blocks, src, f"grid {list(_get(p, 'grid'))}")
        sms = ev.value("device.sm_count")
        per_sm = ctas_per_sm
        if per_sm is None and "cubin.threads_per_cta" in ev and ev.value("capture.arch"):
            per_sm, _ = resident(ev, ev.value("capture.arch"))
        if sms and per_sm:
            w = Waves.of(blocks, sms, per_sm)
            ev.add("gpu.waves", round(w.waves, 3), src, f"{blocks} programs / ({sms} SMs x {per_sm} resident per SM)")
            ev.add("gpu.tail_idle", round(w.tail_idle, 3), src, w.last_wave_text())
        else:
            ev.missing("waves / tail effect", "resident programs per SM unknown (no cubin facts)")

    # host vs kernel time
    k = kernel_ms if kernel_ms is not None else lat
    if host_ms is not None and k:
        ev.add("gpu.wall_ms", float(host_ms), src, "host time to issue one call")
        ev.add("gpu.kernel_ms", float(k), src, "device time of one call")
        ev.add("gpu.host_overhead_ratio", round(max(float(host_ms), float(k)) / float(k), 3), src,
               f"max(host {host_ms:.4g} ms, device {k:.4g} ms) / device")
    else:
        ev.missing("host / launch overhead", "no host-side time per call")

    # across configurations
    if len(valid) > 1:
        classes = {_get(x, "config"): _class(x) for x in valid}
        ev.add("gpu.class_varies", len(set(classes.values())) > 1, src,
               ", ".join(f"{c}: {k_}" for c, k_ in classes.items()))
        pcts = [v for v in (_pct(x)[0] for x in valid) if v]
        if len(pcts) > 1:
            ev.add("gpu.pct_spread", round(max(pcts) / min(pcts), 3), src,
                   f"percent of roof from {min(pcts):.0f}% to {max(pcts):.0f}%")
    if baseline:
        _sign_flips(ev, valid, baseline)
    if len(valid) > 1:
        collect_variants(ev, valid, cfg, variant_of)

    # Nsight Compute
    nc = ncu or (_get(p, "ncu") if isinstance(_get(p, "ncu"), Mapping) else None)
    if nc:
        collect_ncu(ev, nc)
    else:
        ev.missing("Nsight Compute metrics", "not collected", "run with --ncu where ncu is installed")
    return ev


def collect_ncu(ev: Evidence, ncu: Mapping[str, Any], origin: str = "") -> Evidence:
    """Nsight Compute metrics: a flat {metric: value} dict, or the roofline's ncu result
    ({kernels: [...]}, as `cutile-diag roofline --ncu --json` writes it: the longest kernel counts)."""
    nc = dict(ncu)
    kernels = [k for k in nc.get("kernels") or [] if isinstance(k, Mapping)]
    if kernels:
        top = max(kernels, key=lambda k: _num(k.get("duration_ns")) or 0.0)
        nc.update(top)
        origin = origin or f"kernel {top.get('name', '?')}"
    found = 0
    for key, names in NCU_ALIASES.items():
        for n in names:
            v = _num(nc.get(n))
            if v is not None:
                ev.add(key, int(v) if key in ("ncu.registers", "ncu.spill_bytes") else v,
                       f"ncu: {n}", f"{n} = {nc.get(n)}" + (f" ({origin})" if origin else ""))
                found += 1
                break
    if not found:
        why = f"ncu failed: {nc['error']}" if nc.get("error") else "the ncu result has none of the known metrics"
        ev.missing("Nsight Compute metrics", why)
    return ev
