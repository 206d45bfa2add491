"""The loop's target: the measured ceiling of this GPU (issue 21, item 5).

``--until-roof`` and every "% of roof" the loop reports are meant against what this GPU really
delivers (``roofline.peaks``: measured once per device + driver and cached).  Before the
baseline the loop makes sure that ceiling exists: a cached one is used; when none is cached it
is measured (seconds: a large copy and a GEMM) in a killable child, and the loop says so.  Only
when it cannot be measured does the loop fall back to the datasheet roof — and says that too,
never silently.

A backend may provide its own ceiling (``backend.ceiling(measure)``: the simulated device's
comes from its spec); otherwise a child process answers (``measure.ceilings_in_child``: the loop
process itself never touches the GPU).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .backends.base import Backend

MEASURE_CAP_S = 180.0       # a copy + two GEMMs take seconds; a wedged GPU must not hold the loop


def _summary(ceilings: dict | None) -> dict:
    if not ceilings:
        return {}
    bw = (ceilings.get("dram_bw") or {}).get("value")
    curve = ceilings.get("curve") or {}
    return {"device": ceilings.get("device_name") or ceilings.get("device_key"),
            "floor_us": round(float(curve["floor_ms"]) * 1e3, 3) if curve.get("floor_ms") else None,
            "dram_tbps": round(float(bw) / 1e12, 4) if bw else None,
            "flops_tflops": {k: round(float(q["value"]) / 1e12, 2) for k, q in (ceilings.get("flops") or {}).items()
                             if q and q.get("value")},
            "measured_at": ceilings.get("measured_at")}


def ensure_ceiling(backend: "Backend", echo: Callable[[str], None], *, timeout: float = MEASURE_CAP_S) -> dict:
    """The measured ceiling the loop targets, measured first when none is cached.  Returns what
    the ledger keeps: ``{"basis", "source": cached|measured|none, "seconds", ...summary}``."""
    t0 = time.monotonic()
    off = backend.roofline_off
    if off:
        return {"basis": None, "source": "none", "why": off, "seconds": 0.0}
    if backend.own_ceiling:
        # a dict: the ceiling; None: none cached (measure it); a string: why there is none
        got, source = backend.ceiling(measure=False), "cached"
        if got is None:
            echo("  ceiling: none cached for this GPU: measuring it before the baseline")
            got, source = backend.ceiling(measure=True), "measured"
        got, why = (got, "") if isinstance(got, dict) else (None, str(got or "no measured ceiling"))
    elif backend.uses_preset:
        got, source, why = None, "none", "the roofline uses an offline device preset (--roof-device)"
    else:
        from ..measure.ceilings import ceilings_in_child      # the loop's process never touches the GPU
        ans, source = ceilings_in_child(measure=False, timeout=timeout), "cached"
        if ans.ceilings is None and ans.why == "no measured ceiling":
            echo("  ceiling: none cached for this GPU: measuring it (copy + GEMM, seconds) before the baseline")
            ans, source = ceilings_in_child(measure=True, timeout=timeout), "measured"
        elif ans.ceilings is not None and not ans.ceilings.get("curve"):
            # cached before the size curve: measuring adds it (< 30 s), so % of roof is of the attainable time
            echo("  ceiling: no size curve cached for this GPU: measuring it (bandwidth by bytes, launch floor)")
            more = ceilings_in_child(measure=True, timeout=timeout)
            if more.ceilings:       # else the cached ceilings, as before the curve existed
                ans, source = more, "measured"
        got, why = ans.ceilings, ans.why
    out: dict[str, Any] = {"seconds": round(time.monotonic() - t0, 3)}
    if got:
        out.update({"basis": "measured ceiling", "source": source, **_summary(got)})
        echo(f"  ceiling: {out['dram_tbps']} TB/s DRAM ({source}{', ' + out['measured_at'] if out.get('measured_at') else ''})"
             " — --until-roof and % of roof use it")
    else:
        out.update({"basis": "datasheet roof", "source": "none", "why": why})
        echo(f"  ceiling: no measured ceiling ({why}): % of roof is of the DATASHEET roof")
    return out
