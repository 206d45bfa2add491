"""Bottleneck classes and the rules that pick one from the evidence.

Static evidence only (a TileIR file or a capture folder): the tile arithmetic intensity
from the IR, the kernel's structure (mma present, FMA fallback), spills, and the grid
estimate from the captured argument shapes.  With GPU evidence: the roofline class and the
percent of the roof reached decide, refined by host overhead, grid size against the SM
count, the tail wave, spills and shape-to-shape variation.

Every candidate class carries a score in [0, 1] and the facts behind it; the highest score
wins and the runners-up are kept as alternatives.  ``scheduling`` and ``unknown`` are the
classes the recipe escalates to a person instead of guessing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .evidence import Evidence


@dataclass(frozen=True)
class BottleneckClass:
    """A bottleneck class; ``escalate`` marks a class the playbook cannot fix by tuning."""
    id: str
    title: str
    description: str
    escalate: bool = False


CLASSES: dict[str, BottleneckClass] = {c.id: c for c in (
    BottleneckClass("memory-bound", "memory-bound",
                    "time is set by global-memory traffic; fewer or better-shaped transactions help"),
    BottleneckClass("compute-bound", "compute-bound",
                    "time is set by arithmetic throughput; tensor cores, tile shape and math shortcuts help"),
    BottleneckClass("latency-bound", "latency / occupancy-bound",
                    "neither roof is reached: too little work in flight to hide memory or pipeline latency"),
    BottleneckClass("register-pressure", "register pressure",
                    "the register budget is exhausted: spills to local memory or a serialised MMA pipeline"),
    BottleneckClass("host-overhead", "host / launch overhead",
                    "host time (launches, allocations, syncs) dominates the device time"),
    BottleneckClass("low-sm-utilisation", "low SM utilisation",
                    "the grid has fewer programs than the GPU has SMs"),
    BottleneckClass("tail-effect", "tail effect",
                    "the last wave of programs is partial and leaves many SMs idle"),
    BottleneckClass("shape-heterogeneity", "shape heterogeneity",
                    "configurations behave differently (class or win/loss changes with the shape)"),
    BottleneckClass("scheduling", "scheduling",
                    "far from the roof with no playbook entry left: the compiler's schedule is the likely "
                    "limiter — a person should look (ncu source view, SASS)", escalate=True),
    BottleneckClass("unknown", "unknown",
                    "the evidence does not support a class — a person should look", escalate=True),
)}

# Recipe thresholds (FLOP/byte) for static classification; with a measurement the device's
# ridge point decides instead (the roofline stage's ``bound``).
AI_MEMORY_BOUND = 10.0
AI_COMPUTE_BOUND = 50.0


@dataclass
class Candidate:
    """One rule's vote for a class: its score (0..0.99), the reason and the facts it read."""
    cls: str
    score: float
    reason: str
    keys: list[str] = field(default_factory=list)


@dataclass
class Classification:
    """The winning class with its confidence, reasons and facts, and the runners-up."""
    bottleneck: str
    confidence: str                   # high | medium | low
    score: float
    reasons: list[str]
    keys: list[str]                   # facts behind the choice
    alternatives: list[dict] = field(default_factory=list)   # {class, score, reason}

    @property
    def escalate(self) -> bool:
        """Whether the class asks for more than tuning (see ``BottleneckClass``)."""
        return CLASSES[self.bottleneck].escalate


def confidence_label(score: float) -> str:
    """high from 0.75, medium from 0.5, else low."""
    return "high" if score >= 0.75 else "medium" if score >= 0.5 else "low"


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def candidates(ev: Evidence) -> list[Candidate]:
    """Every class rule that fires on the evidence, in rule order (specific first); measured
    facts (roofline class, % of roof) outweigh the static ones."""
    v = ev.values()
    out: list[Candidate] = []

    def add(cls: str, score: float, reason: str, *keys: str) -> None:
        out.append(Candidate(cls, round(min(max(score, 0.0), 0.99), 3), reason, [k for k in keys if k in v]))

    measured = "gpu.roofline_class" in v or "gpu.pct_of_roof" in v
    if v.get("gpu.above_roof") is True:
        add("unknown", 0.95, "a measurement lies above the measured ceiling: fix the measurement "
            "(timer, cached output, byte count) before optimising", "gpu.above_roof")
        return out

    mem_ops = sum(int(v.get(k, 0) or 0) for k in ("ir.loads", "ir.stores", "ir.atomics"))
    has_mma = int(v.get("ir.mma_ops", 0) or 0) > 0
    if "ir.loads" in v and mem_ops == 0 and not has_mma and not measured:
        add("unknown", 0.8, "the kernel moves no global memory and has no mma: there is nothing the "
            "playbook can act on", "ir.loads", "ir.stores", "ir.mma_ops")
        return out

    persistent = v.get("ir.persistent_loop") is True
    ratio = _num(v.get("gpu.host_overhead_ratio"))
    if ratio is not None and ratio >= 2.0:
        add("host-overhead", 0.6 + 0.08 * min(ratio, 4.0),
            f"wall time is {ratio:.1f}x the kernel time", "gpu.host_overhead_ratio", "gpu.wall_ms", "gpu.kernel_ms")

    spill = max(int(v.get("cubin.spill_bytes", 0) or 0), int(v.get("ncu.spill_bytes", 0) or 0))
    if spill > 0:
        add("register-pressure", 0.7 if measured else 0.55,
            f"{spill} bytes of register spills", "cubin.spill_bytes", "ncu.spill_bytes", "cubin.registers")
    if v.get("cubin.wgmma_serialized") is True:
        add("register-pressure", 0.65 if measured else 0.5,
            "ptxas serialised the wgmma pipeline for lack of registers (C7511)", "cubin.wgmma_serialized")

    sms = _num(v.get("device.sm_count"))
    grid = _num(v.get("gpu.grid_blocks"))
    grid_key = "gpu.grid_blocks"
    if grid is None:     # an observed launch is as good as the measured one
        grid, grid_key = _num(v.get("launch.grid_blocks")), "launch.grid_blocks"
    if grid is None and not persistent:
        grid, grid_key = _num(v.get("static.output_tiles")), "static.output_tiles"
    if grid is not None and sms and grid < sms:
        add("low-sm-utilisation", 0.75 if measured else 0.5,
            f"{grid:.0f} programs for {sms:.0f} SMs", grid_key, "device.sm_count")

    waves = _num(v.get("gpu.waves")) if "gpu.waves" in v else (None if persistent else _num(v.get("static.waves")))
    tail = _num(v.get("gpu.tail_idle")) if "gpu.tail_idle" in v else (None if persistent else _num(v.get("static.tail_idle")))
    if waves is not None and tail is not None and 1.0 <= waves < 8.0 and tail >= 0.2:
        add("tail-effect", 0.6 if measured else 0.4,
            f"{waves:.2f} waves: {tail:.0%} of SM slots idle in the partial last wave",
            "gpu.waves" if "gpu.waves" in v else "static.waves",
            "gpu.tail_idle" if "gpu.tail_idle" in v else "static.tail_idle")

    if v.get("gpu.sign_flips") is True:
        # one configuration's roofline class cannot describe a change that wins here and loses there
        add("shape-heterogeneity", 0.88, "against the baseline some configurations got faster and others slower",
            "gpu.sign_flips")
    elif v.get("gpu.class_varies") is True:
        add("shape-heterogeneity", 0.55, "configurations fall into different roofline classes", "gpu.class_varies")

    ridge = _num(v.get("device.ridge_intensity"))
    if measured:
        cls = v.get("gpu.roofline_class")
        pct = _num(v.get("gpu.pct_of_roof"))
        ai = _num(v.get("gpu.arithmetic_intensity"))
        if cls == "balanced" or cls not in ("memory-bound", "compute-bound"):
            if ai is not None and ridge:
                cls = "compute-bound" if ai >= ridge else "memory-bound"
            else:
                cls = "compute-bound" if has_mma else "memory-bound"
        occ = _num(v.get("ncu.achieved_occupancy_pct"))
        if pct is not None and pct < 25.0:
            score = 0.72 if (occ is not None and occ < 25.0) else 0.62
            add("latency-bound", score, f"reaches {pct:.0f}% of the {cls.replace('-bound', '')} roof — "
                "neither resource is saturated", "gpu.pct_of_roof", "gpu.roofline_class",
                "ncu.achieved_occupancy_pct")
        pct_eff = pct if pct is not None else 50.0
        add(cls, 0.5 + 0.45 * min(pct_eff, 100.0) / 100.0,
            f"roofline: {cls}" + (f" at {pct:.0f}% of the roof" if pct is not None else ""),
            "gpu.roofline_class", "gpu.pct_of_roof", "gpu.arithmetic_intensity")
        return out

    # static only
    fma = int(v.get("remarks.fma_fallback", 0) or 0) > 0 or int(v.get("ir.mma_f32_operands", 0) or 0) > 0
    if fma:
        add("compute-bound", 0.7, "the mma runs on CUDA cores (FMA fallback): arithmetic is the limiter",
            "remarks.fma_fallback", "ir.mma_f32_operands")
    # the recipe's thresholds, not the device ridge: the tile intensity ignores L2 reuse
    # across programs, so it sits well below the kernel's real DRAM intensity
    ai = _num(v.get("ir.tile_intensity"))
    lo, hi = AI_MEMORY_BOUND, AI_COMPUTE_BOUND
    if ai is not None:
        if ai < lo:
            add("memory-bound", 0.6, f"tile arithmetic intensity {ai:.2f} FLOP/B < {lo:g}", "ir.tile_intensity")
        elif ai > hi:
            add("compute-bound", 0.6, f"tile arithmetic intensity {ai:.1f} FLOP/B > {hi:g}", "ir.tile_intensity")
        else:
            cls = "compute-bound" if has_mma else "memory-bound"
            add(cls, 0.45, f"tile arithmetic intensity {ai:.1f} FLOP/B is between {lo:g} and {hi:g}; "
                + ("mma present" if has_mma else "no mma"), "ir.tile_intensity", "ir.mma_ops")
    elif mem_ops or has_mma:
        add("compute-bound" if has_mma else "memory-bound", 0.3,
            "no intensity estimate; " + ("mma present" if has_mma else "no mma"), "ir.mma_ops")
    return out


def classify(ev: Evidence) -> Classification:
    """The best-scoring candidate, its class's reasons and facts merged; ``unknown`` without evidence."""
    cands = candidates(ev)
    if not cands:
        return Classification("unknown", "low", 0.0, ["no evidence to classify the kernel"], [])
    # stable: on equal scores the earlier rule (the more specific one) wins
    best = max(cands, key=lambda c: c.score)
    reasons = [best.reason] + [c.reason for c in cands if c is not best and c.cls == best.cls]
    keys = list(dict.fromkeys(k for c in cands if c.cls == best.cls for k in c.keys))
    alts, seen = [], {best.cls}
    for c in sorted(cands, key=lambda c: -c.score):
        if c.cls not in seen:
            seen.add(c.cls)
            alts.append({"class": c.cls, "score": c.score, "reason": c.reason})
    return Classification(best.cls, confidence_label(best.score), best.score, reasons, keys, alts)
