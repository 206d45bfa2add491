"""Simulated backend for CI: deterministic fake latencies per version, from the transforms
applied and markers in the source, with configurable noise and planted behaviours (a wrong
transform, a regression on one configuration, a crash, a hang, an impossible speedup above
the roof), and a GPU clock that a power cap moves and thermal slowdowns cut (``clock_mhz``,
``throttle``), read with every run as NVML would."""
from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import proc
from ...nvml import POWER_CAP
from ..errors import BackendError, CandidateCrash, MeasurementTimeout
from ..stats import RunStat
from ..recipe import recipe
from .base import Backend, Runs, Verification, Version, Workspace, check_deadline, round_order


@dataclass
class SimSpec:
    """What the simulated GPU does.  Keys of ``effects`` and the planted lists are transform
    names (``latency_hints``), transform keys with parameters (``kernel_hints{"occupancy": 2}``),
    or text markers that a manual edit may put in the source (``marker:PLANTED_FAST``)."""
    configs: dict[str, float]                              # config -> baseline latency (ms)
    effects: dict[str, Any] = field(default_factory=dict)  # key -> factor, or {config: factor}
    # "key1+key2" -> factor, or {config: factor}: applies (on top of the effects) when every key applies
    interactions: dict[str, Any] = field(default_factory=dict)
    incorrect: list[str] = field(default_factory=list)
    crash: list[str] = field(default_factory=list)
    hang: list[str] = field(default_factory=list)
    hang_in: str = "measure"                               # measure | verify
    noise: float = 0.004                                   # relative std of one sample
    run_noise: float = 0.002                               # relative std of a run's offset
    samples: int = 25
    flops: dict[str, float] = field(default_factory=dict)  # config -> FLOPs (roofline guard)
    bytes: dict[str, float] = field(default_factory=dict)
    unit: tuple[str, str] = ("f32", "cuda")
    device: str = "h200"
    seed: int = 0
    # the SM clock read with each run (MHz; None: not read, as without NVML).  A power cap holds it below
    # the boost: each run's clock is clock_mhz x (1 - clock_drift x run index) x (1 - clock_noise x |N(0, 1)|),
    # and the run's milliseconds scale by clock_mhz / that clock (the cycles do not).  clock_read_noise: the
    # reading's own error, x (1 + clock_read_noise x N(0, 1)) (an H100's NVML clock lags a GEMM's power steps)
    clock_mhz: float | None = None
    clock_drift: float = 0.0
    clock_noise: float = 0.0
    clock_read_noise: float = 0.0
    # a worker process's own offset (relative std), drawn once per version: on an H100 a GEMM's A/A copy measured
    # 0.8 % faster in 11 of 12 decisions of one sitting, and no number of rounds averages that out
    placement_noise: float = 0.0
    throttle: float = 0.0                                  # probability a run is under a thermal slowdown
    throttle_slowdown: float = 0.3                         # ... which makes it this much slower, unseen in its clock
    # the simulated GPU's measured ceiling: {"dram_tbps": 4.24, "flops_tflops": {"f32:cuda": 60},
    # "cached": false (the loop measures it before the baseline), "measure_s": 0.1, "curve": true (the
    # preset's size curve: % of attainable)}; None: it has none, and "% of roof" is of the datasheet
    # roof (the loop says so)
    ceiling: dict | None = None
    # wall seconds a check and one version's run take (slept): a time limit, the loop's step planning and a
    # campaign's time shares then act as on a GPU, where a step costs 15-20 s
    verify_s: float = 0.0
    run_s: float = 0.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SimSpec":
        """The spec from its JSON; an unknown key or missing ``configs`` is a ``BackendError`` that names the spec's
        keys."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise BackendError(f"simulation spec: unknown key(s) {', '.join(unknown)}",
                               hint="its keys, explained in docs/simulate.md: " + ", ".join(cls.__dataclass_fields__))
        if not isinstance(known.get("configs"), dict) or not known["configs"]:
            raise BackendError("simulation spec needs 'configs': {name: baseline latency in ms}",
                               hint="an example: docs/simulate.json")
        for name, ms in known["configs"].items():
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 < ms < float("inf"):
                raise BackendError(f"simulation spec: configs.{name}: a baseline latency must be a positive number "
                                   f"of ms, not {ms!r}")
        for what in ("effects", "interactions"):
            for key, f in dict(known.get(what) or {}).items():
                for cfg, v in (f.items() if isinstance(f, dict) else [(None, f)]):
                    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                        raise BackendError(f"simulation spec: {what}.{key}{'.' + cfg if cfg else ''}: a latency "
                                           f"factor must be a positive number, not {v!r}")
            if what == "interactions" and any("+" not in k for k in known.get(what) or {}):
                raise BackendError("simulation spec: an interactions key names two or more keys joined by '+' "
                                   "(persistent_grid+kernel_hints)")
        for key in ("clock_drift", "clock_noise", "clock_read_noise", "placement_noise", "throttle",
                    "throttle_slowdown", "verify_s", "run_s"):
            v = known.get(key, 0.0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < (1 if key == "throttle" else 10):
                raise BackendError(f"simulation spec: {key} must be a number >= 0{' and < 1' * (key == 'throttle')}, "
                                   f"not {v!r}")
        if known.get("clock_mhz") is not None and not (isinstance(known["clock_mhz"], (int, float))
                                                       and known["clock_mhz"] > 0):
            raise BackendError(f"simulation spec: clock_mhz must be a positive number of MHz, not {known['clock_mhz']!r}")
        if "unit" in known:
            known["unit"] = tuple(known["unit"])
        return cls(**known)

    @classmethod
    def load(cls, path: str | Path) -> "SimSpec":
        """The spec in the JSON file ``path``; a ``BackendError`` when it cannot be read."""
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as e:
            raise BackendError(f"{path}: cannot read the simulation spec: {e}") from None

    def to_json(self) -> dict:
        """The spec as JSON (the ledger's setup record)."""
        d = dict(self.__dict__)
        d["unit"] = list(self.unit)
        return d


HW_SLOWDOWN = 0x8                       # nvmlClocksEventReasonHwSlowdown


def _matches(key: str, v: Version) -> bool:
    """A planted key applies to a version: a marker when its text is in the source; a transform
    key when the version's *set* holds it (``loop.recipe``: each transform's last setting, so a
    hint set to 8, then 2, then 8 again counts once, as the source it leaves does)."""
    if key.startswith("marker:"):
        marker = key[len("marker:"):]
        return any(marker in text for text in v.files.values())
    name = key.split("{", 1)[0]
    return any(a == key or ("{" not in key and a.split("{", 1)[0] == name) for a in recipe(v.applied))


class SimulatedBackend(Backend):
    """Deterministic fake latencies from the spec: the baseline's per configuration, scaled by the effects of the
    transforms a version applied; planted failures, crashes and hangs for the loop's error paths."""
    name = "simulated"
    own_ceiling = True      # the spec's ceiling (loop.ceiling)
    alternates = True

    def __init__(self, spec: SimSpec | Mapping[str, Any]):
        self.spec = spec if isinstance(spec, SimSpec) else SimSpec.from_json(spec)
        self.calls: list[tuple[str, str]] = []           # (op, label): what ran, for tests
        self._sittings: dict[tuple, int] = {}             # version set -> times measured (A/A calibration)
        self._ceiling_measured = False

    def describe(self) -> dict:
        """The spec, for the ledger's setup record."""
        return {"backend": self.name, "spec": self.spec.to_json()}

    def configs(self) -> list[str] | None:
        """The spec's configurations."""
        return list(self.spec.configs)

    def workload_info(self) -> dict[str, dict]:
        """The spec's FLOPs and bytes per configuration."""
        return {c: {"flops": self.spec.flops.get(c), "bytes": self.spec.bytes.get(c), "unit": list(self.spec.unit)}
                for c in self.spec.configs if c in self.spec.flops or c in self.spec.bytes}

    def _planted(self, kind: str, v: Version) -> str | None:
        for key in getattr(self.spec, kind):
            if _matches(key, v):
                return key
        return None

    def latency(self, v: Version, config: str) -> float:
        """``v``'s noiseless latency on ``config``: the baseline's, times each effect and interaction its transforms
        match."""
        t = float(self.spec.configs[config])
        for key, eff in self.spec.effects.items():
            if _matches(key, v):
                t *= float(eff.get(config, 1.0) if isinstance(eff, Mapping) else eff)
        for keys, eff in self.spec.interactions.items():
            if all(_matches(k, v) for k in keys.split("+")):
                t *= float(eff.get(config, 1.0) if isinstance(eff, Mapping) else eff)
        return t

    def _hang(self, v: Version, deadline: proc.Deadline, what: str) -> None:
        # a real child that never finishes, killed at the budget like any hung kernel
        res = proc.run([sys.executable, "-c", "import time; time.sleep(3600)"], timeout=deadline.timeout(3600))
        if res.timed_out:
            raise MeasurementTimeout(f"{v.label}: {what} hung and was killed at the time budget", label=v.label)
        raise CandidateCrash(f"{v.label}: the simulated hang ended by itself")  # pragma: no cover

    @staticmethod
    def _spend(seconds: float, deadline: proc.Deadline) -> None:
        """The spec's wall time of a check or a run, cut at the deadline (which the caller then meets)."""
        if seconds > 0:
            time.sleep(max(0.0, deadline.timeout(seconds)))

    def verify(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> Verification:
        """PASS (simulated, so "not checked"), or the planted failure or hang."""
        self.calls.append(("verify", v.label))
        check_deadline(deadline, "verification")
        self._spend(self.spec.verify_s, deadline)
        if self.spec.hang_in == "verify" and self._planted("hang", v):
            self._hang(v, deadline, "the correctness check")
        bad = self._planted("incorrect", v)
        if bad:
            cfg = next(iter(self.spec.configs))
            return Verification(False, f"FAIL on {cfg}: 1024 of 1048576 elements outside tolerance "
                                       f"(simulated: {bad})", {cfg: {"passed": False}})
        return Verification(True, f"not checked (simulated): no correctness test ran on {len(self.spec.configs)} "
                                  "configurations", {c: {"passed": None} for c in self.spec.configs}, simulated=True)

    def measure(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline, rounds: int) -> Runs:
        """Seeded noisy samples around each version's latency (new noise for a repeated sitting); planted crashes and
        hangs raise."""
        out: Runs = {v.label: {} for v in versions}
        # the same versions measured again get new noise (a repeated sitting is not a replay)
        key = tuple(v.digest for v in versions)
        sitting = self._sittings[key] = self._sittings.get(key, -1) + 1
        for v in versions:
            self.calls.append(("measure", v.label))
            if self._planted("crash", v):
                raise CandidateCrash(f"{v.label}: the measurement worker died (exit -11: simulated segfault)")
            if self.spec.hang_in == "measure" and self._planted("hang", v):
                self._hang(v, deadline, "the benchmark")
        sp = self.spec
        for r in range(rounds):
            for i, v in enumerate(round_order(versions, r)):
                check_deadline(deadline, f"measuring {v.label}")
                self._spend(sp.run_s, deadline)
                for c in sp.configs:
                    t = self.latency(v, c)
                    tag = f"{sp.seed}|{v.digest}|{c}|{r}" + (f"|{sitting}" if sitting else "")
                    seed = int(hashlib.sha256(tag.encode()).hexdigest()[:12], 16)
                    rng = random.Random(seed)
                    offset = 1.0 + sp.run_noise * rng.gauss(0, 1)
                    if sp.placement_noise:
                        where = f"{sp.seed}|{v.digest}|{c}|placement"
                        place = random.Random(int(hashlib.sha256(where.encode()).hexdigest()[:12], 16))
                        offset *= max(0.3, 1.0 + sp.placement_noise * place.gauss(0, 1))
                    clock = events = None
                    if sp.clock_mhz:
                        # a power cap: the clock falls over the sitting and wanders; the time follows it
                        run = r * len(versions) + i
                        clock = round(sp.clock_mhz * max(0.3, (1 - sp.clock_drift * run) *
                                                         (1 - sp.clock_noise * abs(rng.gauss(0, 1)))), 1)
                        offset *= sp.clock_mhz / clock
                        events = POWER_CAP if clock < sp.clock_mhz else 0
                        if sp.clock_read_noise:
                            clock = round(clock * max(0.3, 1 + sp.clock_read_noise * rng.gauss(0, 1)), 1)
                    if sp.throttle and rng.random() < sp.throttle:
                        offset *= 1 + sp.throttle_slowdown        # part of the run at a cut clock
                        events = (events or 0) | HW_SLOWDOWN
                    xs = [max(1e-6, t * offset * (1.0 + sp.noise * rng.gauss(0, 1))) for _ in range(sp.samples)]
                    run_stat = RunStat.from_samples(xs)
                    run_stat.clock_mhz, run_stat.clock_events = clock, events
                    out[v.label].setdefault(c, []).append(run_stat)
        return out

    def roofline(self, v: Version, latencies: Mapping[str, float]) -> dict[str, dict] | str:
        """Points on the spec's device preset from its counts, or why there are none."""
        if not self.spec.bytes and not self.spec.flops:
            return "the simulation spec has no FLOP/byte counts"
        from ...roofline.device import preset
        from ...roofline.model import analyze
        from .worker import point_json
        dev = preset(self.spec.device)
        out = {}
        for c, ms in latencies.items():
            if c not in self.spec.bytes and c not in self.spec.flops:
                continue
            p = analyze("simulated", c, latency_ms=float(ms), flops=float(self.spec.flops.get(c, 0.0)),
                        bytes=float(self.spec.bytes.get(c, 0.0)), unit=tuple(self.spec.unit), device=dev,
                        ceilings=self._ceilings() if self.spec.ceiling else None, latency_source="recorded")
            out[c] = point_json(p)
        return out

    def ceiling(self, measure: bool = False) -> dict | str | None:
        """``loop.ceiling``'s question: the ceilings json (``roofline.peaks.Ceilings``), None when
        none is cached yet (``measure`` then "measures" it: sleeps ``measure_s``), or why none."""
        spec = self.spec.ceiling
        if not spec:
            return "the simulation spec gives no 'ceiling'"
        if not (spec.get("cached") or self._ceiling_measured):
            if not measure:
                return None
            self.calls.append(("measure-ceiling", ""))
            time.sleep(float(spec.get("measure_s", 0.0)))
            self._ceiling_measured = True
        return self._ceilings().to_json()

    def _ceilings(self):
        from ...roofline.device import Quantity, preset
        from ...measure.ceilings import device_ceilings
        from ...roofline.peaks import Ceilings
        spec = self.spec.ceiling or {}
        src = "simulated: the simulation spec's ceiling"
        # "curve": true borrows the preset's committed size curve (launch floor, bandwidth by bytes)
        curve = device_ceilings(preset(self.spec.device)) if spec.get("curve") else None
        return Ceilings(device_key=f"simulated {self.spec.device}", device_name=f"simulated {self.spec.device}",
                        dram_bw=Quantity(float(spec["dram_tbps"]) * 1e12, "B/s", src) if spec.get("dram_tbps") else None,
                        flops={k: Quantity(float(v) * 1e12, "FLOP/s", src)
                               for k, v in (spec.get("flops_tflops") or {}).items()},
                        details={"recorded_from": "the simulation spec"}, curve=curve.curve if curve else None)

    def retain(self, versions: Sequence[Version]) -> None:
        """Remember the retained digests (tests check what the loop keeps)."""
        # the workload backend keys its workers by digest: take the same argument it does
        self.retained = {v.digest for v in versions}

    def close(self) -> None:
        """Nothing to release."""
        pass
