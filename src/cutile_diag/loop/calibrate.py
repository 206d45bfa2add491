"""A/A calibration: how much does the loop's measurement move when nothing changed?

``calibrate(backend, n=20, rounds=3)`` measures one version against an identical copy of
itself — two workers (``A A' A' A`` every round, after a warm-up) or two runs of the user's
command (``A A' A' A ...``), interleaved the way the loop measures a candidate — ``n`` times in one
sitting, and takes each of the ``n`` A/A decisions the way the loop takes one: ``rounds`` rounds
(the loop's ``--rounds``), then more until the 95 % CI is within ±1 % or the loop's cap
(``loop.sampling``; at the cap a decision the rules cannot take is ``inconclusive``).  It reports

* the 95 % CI half-width of the A/A difference (median over the comparisons, in percent):
  the smallest change one decision can tell from noise;
* the spread of the A/A ratios themselves (1.96 x their sd): whether that CI is honest;
* false keeps (the rule would keep an edit that changes nothing, as under ``--continue``), false
  reverts (a "regression" of nothing) and inconclusive decisions out of ``n``, and the rounds each
  decision sampled;
* the per-measurement noise (``sd`` of one round's log ratio / sqrt 2) — the loop's
  ``noise_floor``;
* the same decisions per kernel class (``per_class``: each configuration's arithmetic intensity,
  ``roofline.model.recipe_class``: compute-bound GEMMs drop their clocks under a power cap,
  memory-bound kernels do not) — the configurations of one class decided on their own.

The floor is cached per machine (GPU name + driver) in ``<cache>/noise.json`` (next to the
measured roofline ceilings; ``$CUTILE_DIAG_CACHE_DIR`` overrides the folder) and a new loop on
that machine decides with it (``noise_floor_for``).
"""
from __future__ import annotations

import hashlib
import json
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..output import prog, write_atomic
from . import decide as decide_mod
from . import proc, stats
from .backends import Backend, Version, Workspace
from .sampling import comparison, floor_with_pool, sample_to_ci
from .errors import LoopError, MeasurementTimeout

SCHEMA = "cutile-diag.noise/1"
MIN_FLOOR = 0.0005             # never decide as if the timer were better than 0.05 %
SIMULATED_MACHINE = "simulated"


@dataclass(frozen=True)
class _Copy(Version):
    """The same files under another identity: its own worker and bytecode cache, as a candidate gets."""

    @property
    def digest(self) -> str:
        return "aa" + Version.digest.fget(self)[2:]


@dataclass
class Calibration:
    """One A/A calibration: the noise floor it measured, the CI half-width and spread of an A/A comparison, and the
    false keeps and reverts of the decision rule over ``n`` decisions."""
    machine: str | None                  # "NVIDIA H200|driver 580.95" (None: unknown, nothing cached)
    what: str                            # the workload reference or the benchmark command
    backend: str
    n: int                               # A/A decisions
    rounds: int                          # rounds per decision (the loop's --rounds)
    configs: list[str]
    half_width_pct: float                # median 95 % CI half-width of one A/A comparison
    spread_pct: float                    # 1.96 x sd of the n A/A ratios (what the CI should cover)
    noise_floor: float                   # per-measurement relative noise (the loop's noise_floor)
    false_keeps: int
    false_reverts: int
    inconclusive: int = 0                # decisions sampled to the cap with the CI still wider than +-1 %
    rounds_sampled: list[int] = field(default_factory=list)   # per decision: the rounds it measured
    noise_floor_used: float | None = None   # the floor decisions start from (a loop's here; pooled noise raises it)
    # the copy's offset across the decisions (mean A/A log ratio, %) and its 95 % interval: a bias between the two
    # worker processes, which more rounds per decision never remove, shows as an interval that excludes 0
    offset_pct: float | None = None
    offset_ci_pct: list[float] | None = None
    # the rounds' mean offset (%) by which version started the round ({"A": .., "B": ..}, where the backend alternated):
    # an offset that follows the order is the order's, one that stays is the processes'
    offset_by_first: dict[str, float] = field(default_factory=dict)
    tuning: dict = field(default_factory=dict)   # autotune held equal between A and its copy (measure.tuning)
    decisions: list[dict] = field(default_factory=list)
    rounds_detail: dict[str, list[dict]] = field(default_factory=dict)   # per config: every round, in order
    gpu_s: float = 0.0                   # wall seconds spent measuring
    per_config: dict[str, dict] = field(default_factory=dict)
    per_class: dict[str, dict] = field(default_factory=dict)   # class -> configs, false keeps/reverts, CI
    saved_to: str | None = None

    @property
    def false_keep_rate(self) -> float:
        """The share of A/A decisions the loop would have kept."""
        return self.false_keeps / self.n if self.n else 0.0

    def to_json(self) -> dict:
        """Every field, and ``false_keep_rate``."""
        d = dict(self.__dict__)
        d["false_keep_rate"] = self.false_keep_rate
        return d


def machine_key(backend: Backend) -> str | None:
    """GPU name + driver of the machine the backend measures on (None when not known here)."""
    if backend.name == "simulated":
        return SIMULATED_MACHINE
    try:
        from ..roofline.device import live_device
        dev = live_device(backend.device)
    except Exception:
        return None
    return f"{dev.name}|driver {dev.driver_version or 'unknown'}"


def what_of(desc: Mapping[str, Any]) -> str:
    """What was calibrated, from a backend description: the workload, or the benchmark command."""
    kind = desc.get("backend")
    if kind == "workload":
        return f"workload {desc.get('workload')}"
    if kind in ("command", "replay"):
        return f"{kind} {desc.get('bench_cmd')}"
    if kind == "simulated":
        spec = json.dumps(desc.get("spec"), sort_keys=True, default=str)
        return "simulated " + hashlib.sha256(spec.encode()).hexdigest()[:12]
    return str(kind)


def calibrate(backend: Backend, *, n: int = 20, rounds: int = 3, root: Path | None = None,
              budget_s: float | None = None, noise_floor: float | None = None, check: bool = True,
              progress: Callable[[int, int], None] | None = None) -> Calibration:
    """Measure the current version against itself; see the module doc.  ``budget_s``: stop
    after the last decision that fits (at least 2 are needed); ``noise_floor``: decide with this
    floor (default: the one a new loop on this machine would use, ``noise_floor_for``);
    ``check``: verify correctness first (a command-mode calibration without --test-cmd has
    nothing to check with)."""
    if n < 2 or rounds < 2:
        raise LoopError("calibration needs at least 2 decisions (-n) of at least 2 rounds (--rounds)")
    floor, source = (noise_floor, "given") if noise_floor is not None else noise_floor_for(backend)
    calibrated = source.startswith("calibrated")     # a floor measured on this machine: its noise is known
    a = Version("A", {}, None, ())
    b = _Copy("A'", {}, None, ())
    with tempfile.TemporaryDirectory(prefix="cutile-diag-calibrate-") as tmp:
        ws = Workspace(Path(root or "."), Path(tmp), [])       # no files: nothing in the tree is touched
        deadline = proc.Deadline(budget_s)
        if check:
            ver = backend.verify(a, ws, deadline)
            if not ver.passed:
                raise LoopError(f"the kernel fails its correctness check: {ver.summary}")
        t0 = time.monotonic()
        runs: dict[str, dict[str, list[stats.RunStat]]] = {a.label: {}, b.label: {}}
        spans: list[tuple[int, int, dict]] = []
        pooled: list[dict] = []
        slowest = 0.0
        measure = lambda order, k: backend.measure(order, ws, deadline, k)   # noqa: E731
        for _ in range(n):
            left = deadline.remaining()
            if len(spans) >= 2 and left is not None and left < 1.2 * slowest:
                break                       # the next decision would not fit: report what was measured
            t1 = time.monotonic()
            # as a loop does: the floor raised to the noise pooled over the comparisons before this one
            use, known_df = floor_with_pool(floor, pooled)
            try:
                # one decision per call: progress, and the interleaving restarts A-first each time
                got = measure([a, b], rounds)
                got, done, sampling = sample_to_ci(measure, a, b, deadline, got, rounds,
                                                   (time.monotonic() - t1) / rounds, alternates=backend.alternates,
                                                   noise_floor=use, known_df=None if calibrated else known_df)
            except MeasurementTimeout:
                if len(spans) < 2:
                    raise LoopError(f"the time budget ({budget_s:g} s) ran out before 2 A/A decisions were "
                                    "measured", hint="raise --budget-s or lower --rounds") from None
                break
            slowest = max(slowest, time.monotonic() - t1)
            start = len(next(iter(runs[a.label].values()), []))
            for lab in runs:
                for c, rs in got[lab].items():
                    runs[lab].setdefault(c, []).extend(rs)
            spans.append((start, start + done, {**sampling, "noise_floor": use}))
            pooled.append(comparison(got, a, b, use).to_json())
            if progress:
                progress(len(spans), n)
        gpu_s = time.monotonic() - t0
        tuning = backend.tuning_report()
    cal = summarize(runs[a.label], runs[b.label], n=len(spans), rounds=rounds, machine=machine_key(backend),
                    what=what_of(backend.describe()), backend=backend.name, gpu_s=gpu_s, noise_floor=floor,
                    alternates=backend.alternates, info=backend.workload_info(), spans=spans)
    cal.tuning = tuning
    return cal


def summarize(a_runs: Mapping[str, list[stats.RunStat]], b_runs: Mapping[str, list[stats.RunStat]], *, n: int,
              rounds: int, machine: str | None, what: str, backend: str, gpu_s: float = 0.0,
              noise_floor: float | None = None, alternates: bool = True,
              info: Mapping[str, Mapping] | None = None,
              spans: list[tuple[int, int, dict]] | None = None) -> Calibration:
    """The calibration from the interleaved rounds of A and its copy: decision ``i`` is rounds
    ``spans[i][0]:spans[i][1]``, sampled as ``spans[i][2]`` says (default: ``n`` slices of
    ``rounds``, none capped).  ``noise_floor``: decide with it (default: the measured floor);
    ``alternates``: the backend's round order, for the record of who went first; ``info``: per
    configuration its FLOPs and bytes, ``Backend.workload_info``, for the kernel classes."""
    spans = spans if spans is not None else [(i * rounds, (i + 1) * rounds, {}) for i in range(n)]
    firsts = [k for lo, hi, _ in spans for k in range(hi - lo)]     # a round's place in its decision
    configs = sorted(a_runs)
    per_config, floors, detail = {}, [], {}
    for c in configs:
        # the per-measurement noise in the unit the comparisons use (cycles when a power cap moved the clock)
        unit = (lambda r: r.in_cycles()) if stats.cycles(a_runs[c] + b_runs[c]) else (lambda r: r)
        logs = [math.log(unit(y).median / unit(x).median) for x, y in zip(a_runs[c], b_runs[c])]
        sd = statistics.stdev(logs) if len(logs) > 1 else 0.0
        floors.append(sd / math.sqrt(2.0))
        # every round as measured (who went first: round_order, restarting per decision)
        detail[c] = [{"a_ms": x.median, "b_ms": y.median, "a_mhz": x.clock_mhz, "b_mhz": y.clock_mhz,
                      "first": _first(x, k, alternates), "log_ratio": round(lr, 6)}
                     for k, x, y, lr in zip(firsts, a_runs[c], b_runs[c], logs)]
        per_config[c] = {"round_sd_pct": 100 * sd, "median_ms": statistics.median(x.median for x in a_runs[c]),
                         "rel_std_pct": statistics.median(x.rel_std for x in a_runs[c] if x.rel_std is not None)
                         if any(x.rel_std is not None for x in a_runs[c]) else None}
    floor = max(MIN_FLOOR, max(floors) if floors else 0.0)
    # the decisions the loop would take with this floor (or the one given), n of them
    use = floor if noise_floor is None else noise_floor
    decisions, ratios, halves = [], [], []
    for lo, hi, sampling in spans:
        d = _decided(a_runs, b_runs, configs, slice(lo, hi), sampling.get("noise_floor", use),
                     bool(sampling.get("capped")))
        ratios.append(d["ratio"])
        halves.append(d["half_width_pct"])
        decisions.append({**d, "rounds": hi - lo, **({"sampling": sampling} if sampling else {})})
    per_class = {}
    for cls, members in _classes(configs, info or {}).items():
        got = [_decided(a_runs, b_runs, members, slice(lo, hi), sp.get("noise_floor", use), bool(sp.get("capped")))
               for lo, hi, sp in spans]
        per_class[cls] = {"configs": members, "n": n, "false_keeps": sum(d["status"] == "keep" for d in got),
                          "false_reverts": sum(d["rule"] in ("regression", "cumulative-regression") for d in got),
                          "inconclusive": sum(d["status"] == "inconclusive" for d in got),
                          "half_width_pct": statistics.median(d["half_width_pct"] for d in got),
                          "basis": sorted({d["basis"] for d in got})}
    by_first: dict[str, list[float]] = {}
    for rows in detail.values():
        for row in rows:
            by_first.setdefault(row["first"], []).append(row["log_ratio"])
    offset_by_first = {f: 100 * math.expm1(statistics.fmean(v)) for f, v in sorted(by_first.items())} \
        if len(by_first) == 2 else {}
    spread = 1.96 * statistics.stdev(math.log(r) for r in ratios) * 100 if len(ratios) > 1 else 0.0
    offset = offset_ci = None
    if len(ratios) >= 3:
        logs = [math.log(r) for r in ratios]
        mean, half = statistics.fmean(logs), stats.t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        offset, offset_ci = 100 * math.expm1(mean), [100 * math.expm1(mean - half), 100 * math.expm1(mean + half)]
    return Calibration(machine=machine, what=what, backend=backend, n=n, rounds=rounds, configs=configs,
                       half_width_pct=statistics.median(halves), spread_pct=spread, noise_floor=floor,
                       false_keeps=sum(d["status"] == "keep" for d in decisions),
                       false_reverts=sum(d["rule"] in ("regression", "cumulative-regression") for d in decisions),
                       inconclusive=sum(d["status"] == "inconclusive" for d in decisions),
                       rounds_sampled=[hi - lo for lo, hi, _ in spans], noise_floor_used=use,
                       offset_pct=offset, offset_ci_pct=offset_ci, offset_by_first=offset_by_first, decisions=decisions,
                       rounds_detail=detail, gpu_s=gpu_s, per_config=per_config, per_class=per_class)


def _first(run: stats.RunStat, k: int, alternates: bool) -> str:
    """Which version started round ``k`` of its decision: as the backend recorded it (``went_first``), else by
    the backend's round order (A B / B A where it alternates)."""
    went = (run.record or {}).get("went_first")
    if went is not None:
        return "A" if went else "B"
    return "A" if not alternates or k % 2 == 0 else "B"


def _classes(configs: list[str], info: Mapping[str, Mapping]) -> dict[str, list[str]]:
    """Configurations by kernel class, from their arithmetic intensity (FLOPs / bytes)."""
    from ..roofline.model import recipe_class
    out: dict[str, list[str]] = {}
    for c in configs:
        d = info.get(c) or {}
        f, b = d.get("flops"), d.get("bytes")
        out.setdefault(recipe_class(f / b if f and b else None), []).append(c)
    return out


def _decided(a_runs, b_runs, configs: list[str], sl: slice, floor: float, capped: bool) -> dict:
    """One A/A decision over ``configs`` (the rounds in ``sl``), as the loop would take it (``capped``: its
    sampling stopped at the cap)."""
    cmp = stats.compare({c: (a_runs[c][sl], b_runs[c][sl]) for c in configs}, noise_floor=floor)
    d = decide_mod.decide(cmp, keep_going=True, capped=capped)
    return {"ratio": cmp.ratio, "ci95": [cmp.lo, cmp.hi], "status": d.status, "rule": d.rule,
            "half_width_pct": cmp.half_width_pct,
            "basis": "cycles" if any(c.basis == "cycles" for c in cmp.configs) else "ms"}


# ---------------------------------------------------------------------------------------
# the per-machine cache

def cache_path() -> Path:
    """The per-machine noise cache, ``noise.json`` in the ceilings' cache folder."""
    from ..roofline.peaks import cache_dir
    return cache_dir() / "noise.json"


def _read() -> dict:
    p = cache_path()
    try:
        data = json.loads(p.read_text())
        if data.get("schema") == SCHEMA and isinstance(data.get("machines"), dict):
            return data
    except (OSError, ValueError, AttributeError):
        pass
    return {"schema": SCHEMA, "machines": {}}       # a missing or corrupt cache: no calibration yet


def save(cal: Calibration) -> Path | None:
    """Store the floor under the machine (the latest calibration per measured thing)."""
    if not cal.machine:
        return None
    data = _read()
    m = data["machines"].setdefault(cal.machine, {"by_what": {}})
    entry = {"noise_floor": cal.noise_floor, "half_width_pct": cal.half_width_pct, "false_keeps": cal.false_keeps,
             "n": cal.n, "rounds": cal.rounds, "what": cal.what, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    m["by_what"][cal.what] = entry
    m["latest"] = entry
    write_atomic(cache_path(), json.dumps(data, indent=2))
    cal.saved_to = str(cache_path())
    return cache_path()


def lookup(machine: str | None, what: str | None = None) -> dict | None:
    """The cached calibration of ``machine`` for ``what`` (a workload or command), else its latest; None when there is
    none."""
    if not machine:
        return None
    m = _read()["machines"].get(machine)
    if not m:
        return None
    return (m.get("by_what") or {}).get(what) or m.get("latest")


def noise_floor_for(backend: Backend, default: float = stats.DEFAULT_NOISE_FLOOR) -> tuple[float, str]:
    """The floor a new loop decides with: this machine's calibration (the same workload or command
    first), else the default; and where it came from (recorded in the loop's options)."""
    machine = machine_key(backend)
    hit = lookup(machine, what_of(backend.describe()))
    if hit and isinstance(hit.get("noise_floor"), (int, float)) and hit["noise_floor"] > 0:
        return max(MIN_FLOOR, float(hit["noise_floor"])), f"calibrated on {machine} ({hit.get('what')}, {hit.get('time')})"
    return default, f"default (no calibration for this machine: run `{prog()} calibrate`)"
