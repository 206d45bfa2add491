"""The diagnose-and-optimise loop.

One iteration (the recipe's phase 3), always against the last kept version ``A``:

1. diagnose ``A`` (its capture + measurements; tried entries demoted) and pick the highest
   ranked automatic entry whose transform applies with parameters not tried on ``A``;
2. apply it (in memory), write the candidate ``B`` into the work tree;
3. guard rail: only the kernel file and its launch wrapper may differ from ``A``'s commit;
4. capture ``B`` ahead of time (it must compile) and diff its IR against ``A``'s;
5. verify ``B``'s correctness — a failure reverts at once;
6. measure ``A`` and ``B`` interleaved on every configuration; the roofline guard checks
   every measurement (a point above the roof is invalid, never a win);
7. decide (``decide``), commit ``B``, record the row and the ledger entry; a revert resets
   the tree to ``A``'s commit (``B`` stays reachable under ``refs/cutile-diag/...``).

"The tree" is always the loop's own worktree (``session.worktree``): the user's checkout is
never written.

A parameter sweep (occupancy, tile sizes, latency values) is one iteration: every point is
verified and screened against ``A`` in one interleaved round, and the fastest goes on to
the full comparison.  Every iteration runs under a time budget (default 10 min); a hang is
killed and recorded as a crash.  Any exception leaves the tree on ``A``'s commit with a
``crash`` row; a process that dies outright leaves a ``begin`` record (the candidates are
saved before it is written) that ``--resume`` turns into a crash row (``loop.recover``).
"""
from __future__ import annotations

import json
import statistics
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from . import decide as decide_mod
from . import proc, stats
from .backends import Backend, CorrectnessFailure, Version, Workspace
from .diagnosis import DiagnoseContext, Diagnoser, EngineDiagnoser, LoopDiagnosis, Rec
from .errors import (BackendError, CandidateCrash, ForbiddenEditError, GitError, LoopError,
                     MeasurementTimeout)
from .integrations import CaptureResult, capture_version, ir_diff
from .ledger import Ledger
from .recover import recover, save_candidates, save_files  # noqa: F401  (recover: re-exported for callers of runner.recover)
from .session import Session

HOOK_POINTS = ("before_apply", "after_apply", "after_verify", "after_measure", "after_commit", "after_record")
MAX_ITERATIONS = decide_mod.MAX_ITERATIONS


@dataclass
class LoopOptions:
    max_iterations: int = MAX_ITERATIONS
    iteration_budget_s: float = 600.0
    rounds: int = 3
    keep_going: bool = False
    max_sweep: int = 4
    screen_rounds: int = 1
    capture: bool = True
    archs: list[str] = field(default_factory=lambda: ["sm_90"])
    capture_args: list[str] = field(default_factory=list)
    only: list[str] = field(default_factory=list)       # playbook ids the loop may try (empty: all)
    skip: list[str] = field(default_factory=list)
    noise_floor: float = stats.DEFAULT_NOISE_FLOOR
    until_roof: float | None = None     # go on past small steps while below this fraction of the roof

    def __post_init__(self):
        if not 1 <= int(self.max_iterations) <= MAX_ITERATIONS:
            raise LoopError(f"--max-iterations must be in 1..{MAX_ITERATIONS} (the recipe's hard stop), "
                            f"not {self.max_iterations}")
        if self.rounds < 1:
            raise LoopError("--rounds must be at least 1")
        if self.iteration_budget_s <= 0:
            raise LoopError("--budget must be a positive number of seconds")
        if self.until_roof is not None and not 0.0 < float(self.until_roof) <= 1.0:
            raise LoopError(f"--until-roof must be a fraction in (0, 1], not {self.until_roof}")
        self.only = [x.upper() for x in self.only]
        self.skip = [x.upper() for x in self.skip]

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None, **over) -> "LoopOptions":
        known = {k: v for k, v in dict(d or {}).items() if k in cls.__dataclass_fields__}
        known.update({k: v for k, v in over.items() if v is not None})
        return cls(**known)


@dataclass
class Candidate:
    version: Version
    result: Any                  # TransformResult
    params: dict


@dataclass
class Choice:
    rec: Rec
    transform: Any
    candidates: list[Candidate]


@dataclass
class LoopResult:
    state_dir: str
    table: str
    ledger: str
    stop_rule: str
    stop_reason: str
    iterations: int
    kept_commit: str | None
    baseline_ms: float | None
    final_ms: float | None
    manual: list[dict] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    classification: dict = field(default_factory=dict)
    roofline_guard: dict = field(default_factory=dict)     # did the above-roof guard run (and why not)
    branch: str = ""                                        # the loop's branch, in ...
    worktree: str = ""                                      # ... the loop's own worktree
    take: list[str] = field(default_factory=list)           # commands that bring the kept result over

    @property
    def speedup(self) -> float | None:
        if self.baseline_ms and self.final_ms:
            return self.baseline_ms / self.final_ms
        return None

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["speedup"] = self.speedup
        return d


def transform_key(name: str, params: Mapping[str, Any]) -> str:
    return name + (json.dumps(dict(params), sort_keys=True, default=str) if params else "")


def _short(text: str, n: int = 110) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= n else t[: n - 1] + "…"


class _Stop(Exception):
    def __init__(self, rule: str, reason: str, manual: list[dict] | None = None):
        super().__init__(reason)
        self.rule, self.reason, self.manual = rule, reason, manual or []


class Runner:
    def __init__(self, session: Session, backend: Backend, ledger: Ledger, *, diagnoser: Diagnoser | None = None,
                 transforms: Mapping[str, Any] | None = None, options: LoopOptions | None = None,
                 hooks: Mapping[str, Callable[[dict], None]] | None = None, echo: Callable[[str], None] | None = None):
        self.s = session
        self.backend = backend
        self.led = ledger
        self.git = session.git()
        self.ws = Workspace(session.worktree, session.state_dir, session.allowed, origin=session.root,
                            kernel_file=session.kernel_file)
        self.diagnoser = diagnoser or EngineDiagnoser()
        self._transforms = transforms
        self.opt = options or LoopOptions()
        bad = sorted(set(hooks or {}) - set(HOOK_POINTS))
        if bad:
            raise LoopError(f"internal: unknown hook point(s) {', '.join(bad)}")
        self.hooks = dict(hooks or {})
        self.echo = echo or (lambda _s: None)
        self.captures: dict[str, CaptureResult] = {}
        self.capture_off_reason: str | None = None if self.opt.capture else "disabled (--no-capture)"
        base = next((r for r in ledger.iterations if r["iteration"] == 0), None)
        cap0 = (base or {}).get("capture") or {}
        if self.capture_off_reason is None and cap0.get("ok") is False:
            # the baseline did not capture (no specs, package-relative imports): do not retry every iteration
            self.capture_off_reason = f"the unchanged kernel does not capture: {cap0.get('error')}"

    # ----------------------------------------------------------------------------------
    # plumbing

    @property
    def transforms(self) -> Mapping[str, Any]:
        if self._transforms is None:
            from .transforms import TRANSFORMS
            self._transforms = TRANSFORMS
        return self._transforms

    def _hook(self, point: str, ctx: dict) -> None:
        fn = self.hooks.get(point)
        if fn is not None:
            fn(ctx)

    def kept_version(self) -> Version:
        rec = self.led.last_kept()
        if rec is None:
            commit, applied = self.s.start_commit, ()
        else:
            commit, applied = rec["commits"]["kept"], tuple(rec.get("applied") or ())
        files = {p: self.git.show(commit, p) for p in self.s.allowed}
        return Version(f"iter-{rec['iteration']}" if rec and rec["iteration"] else "baseline", files, commit, applied)

    def _capture(self, v: Version, deadline: proc.Deadline | None) -> CaptureResult | None:
        if self.capture_off_reason:
            return None
        if v.digest in self.captures:
            return self.captures[v.digest]
        with self.ws.materialize(v):
            res = capture_version(self.s.kernel_path, self.s.kernel, v.digest, self.s.state_dir / "captures",
                                  archs=self.opt.archs, args=self.opt.capture_args, deadline=deadline,
                                  cwd=self.ws.root, env=self.ws.env(v))
        self.captures[v.digest] = res
        return res

    def _points_of(self, rec: dict | None) -> list[dict]:
        if not rec:
            return []
        return [p for p in (rec.get("roofline") or {}).values() if isinstance(p, dict)]

    def _roofline(self, v: Version, runs: Mapping[str, list[stats.RunStat]]) -> tuple[dict, list[str], str | None]:
        """(points at the median, invalid reasons of any run, why there is no roofline)."""
        med = {c: statistics.median(r.median for r in rs) for c, rs in runs.items()}
        fastest = {c: min(r.median for r in rs) for c, rs in runs.items()}
        pts = self.backend.roofline(v, med)
        if isinstance(pts, str):
            return {}, [], pts
        guard = self.backend.roofline(v, fastest)
        invalid = []
        if isinstance(guard, dict):
            for c, p in guard.items():
                if not p.get("valid", True):
                    invalid.append(f"{c}: " + "; ".join(p.get("invalid_reasons") or ["above the roof"]))
        return pts, invalid, None

    @staticmethod
    def _guard_info(pts: Mapping[str, dict], why: str | None, configs) -> dict:
        """Whether the above-roof guard really checked the measurement (the ledger says so either way)."""
        if why or not pts:
            return {"ran": False, "why": why or "no roofline point for any configuration"}
        info: dict[str, Any] = {"ran": True, "checked": sorted(pts)}
        missing = sorted(set(configs) - set(pts))
        if missing:
            info["unchecked"] = missing
            info["why"] = "no FLOP/byte counts for " + ", ".join(missing[:5])
        return info

    def _diagnose(self, v: Version, n: int) -> LoopDiagnosis:
        cap = self._capture(v, proc.Deadline(self.opt.iteration_budget_s))
        kept = self.led.last_kept()
        ctx = DiagnoseContext(path=self.s.kernel_path, kernel=self.s.kernel, source=v.files[self.s.kernel_file],
                              capture=cap.path if cap and cap.ok else None, arch=self.opt.archs[0],
                              tried=dict(self.led.tried()), points=self._points_of(kept),
                              primary=(self.backend.configs() or [None])[0],
                              workload_info=self.backend.workload_info(), iteration=n)
        d = self.diagnoser.diagnose(ctx)
        if cap is not None and not cap.ok:
            d.notes.insert(0, f"capture of the kept version failed: {cap.error}")
        return d

    # ----------------------------------------------------------------------------------
    # choosing

    def choose(self, diag: LoopDiagnosis, a: Version) -> tuple[Choice | None, list[dict], list[str]]:
        """The next automatic step, the manual entries ranked above it, and why entries were skipped."""
        source = a.files[self.s.kernel_file]
        attempted = self.led.attempted()
        manual: list[dict] = []
        skipped: list[str] = []
        for rec in diag.recommendations:
            if self.opt.only and rec.id.upper() not in self.opt.only:
                continue
            if rec.id.upper() in self.opt.skip:
                continue
            if not rec.automatic:
                manual.append(rec.to_json())
                continue
            for tname in dict.fromkeys([rec.transform, *rec.alternatives]):
                t = self.transforms.get(tname)
                if t is None:
                    skipped.append(f"{rec.id}: transform '{tname}' is not available")
                    continue
                if getattr(t, "kind", "source") != "source":
                    continue        # hint-only transforms have a source twin the loop commits
                try:
                    params_list = t.candidates(source, self.s.kernel)
                    if not params_list:             # say why (loop next shows it): e.g. hints a wrapper overrides
                        skipped.append(f"{rec.id}/{tname}: {t.why_no_candidates(source, self.s.kernel) or 'nothing to change'}")
                        continue
                except Exception as e:
                    skipped.append(f"{rec.id}/{tname}: {type(e).__name__}: {e}")
                    continue
                cands: list[Candidate] = []
                for params in params_list:
                    key = (a.digest, tname, json.dumps(params, sort_keys=True, default=str))
                    if key in attempted:
                        continue
                    try:
                        res = t.apply(source, self.s.kernel, **params)
                    except Exception as e:
                        skipped.append(f"{rec.id}/{tname}{params or ''}: {getattr(e, 'reason', None) or e}")
                        continue
                    files = {**a.files, self.s.kernel_file: res.new_source}
                    v = Version("", files, None, a.applied + (transform_key(tname, res.params or params),))
                    if any(c.version.digest == v.digest for c in cands) or v.digest == a.digest:
                        continue
                    cands.append(Candidate(v, res, dict(params)))
                    if len(cands) >= self.opt.max_sweep:
                        break
                if cands:
                    return Choice(rec, t, cands), manual, skipped
                skipped.append(f"{rec.id}/{tname}: no untried parameters apply")
        return None, manual, skipped

    # ----------------------------------------------------------------------------------
    # the loop

    def start(self) -> LoopResult:
        """Iteration 0 (the baseline, no code change), then the loop."""
        if not self.led.iterations:
            self.baseline()
        return self.run()

    def baseline(self) -> dict:
        n = 0
        a = Version("baseline", self.ws.current(), self.s.start_commit, ())
        self.led.append({"type": "begin", "iteration": n, "base_commit": a.commit, "base_digest": a.digest})
        deadline = proc.Deadline(self.opt.iteration_budget_s)
        self.echo("iteration 0: baseline (no code change)")
        try:
            cap = self._capture(a, deadline)
            if cap is not None and not cap.ok:
                self.capture_off_reason = f"the unchanged kernel does not capture: {cap.error}"
                self.echo(f"  capture off: {cap.error}")
            ver = self.backend.verify(a, self.ws, deadline)
            if not ver.passed:
                raise LoopError(f"the unchanged kernel fails its correctness check: {ver.summary}",
                                hint="the loop needs a correct baseline; fix the kernel or the reference first")
            runs = self.backend.measure([a], self.ws, deadline, self.opt.rounds)[a.label]
        except Exception as e:
            # a failure is recorded; an interrupt (Ctrl-C, SIGTERM) leaves the begin pending: --resume redoes it
            self.led.append({"type": "stop", "rule": "baseline-failed",
                             "reason": e.one_line() if isinstance(e, LoopError) else f"{type(e).__name__}: {e}"})
            raise
        pts, invalid, why = self._roofline(a, runs)
        guard = self._guard_info(pts, why, runs)
        if not guard["ran"]:
            self.echo(f"  roofline guard NOT run: {guard['why']}")
        if invalid:
            msg = "the baseline measurement lies above the roof (" + "; ".join(invalid) + ")"
            self.led.append({"type": "stop", "rule": "above-roof", "reason": msg})
            raise LoopError(msg, hint="fix the measurement (timer, byte/FLOP counts, cached outputs) before optimising")
        configs = {c: {"median_ms": statistics.median(r.median for r in rs), "runs": [r.to_json() for r in rs]}
                   for c, rs in runs.items()}
        headline = stats.headline_ms(v["median_ms"] for v in configs.values())
        rec = {"type": "iteration", "iteration": 0, "optimization": "baseline", "latency_ms": headline,
               "correctness": "PASS", "status": "keep", "entry": None, "applied": [],
               "base_commit": a.commit, "base_digest": a.digest, "digest": a.digest,
               "configs": configs, "verification": ver.to_json(), "roofline": pts,
               "roofline_note": why, "roofline_guard": guard, "classification": self._classification(pts),
               "workload_info": self.backend.workload_info(),
               "capture": cap.to_json() if cap else {"skipped": self.capture_off_reason},
               "decision": decide_mod.Decision("keep", "baseline", "iteration 0: the unchanged kernel").to_json(),
               "commits": {"base": a.commit, "candidate": None, "kept": a.commit},
               "seconds": round(deadline.elapsed(), 3)}
        self.led.append(rec)
        self.echo(f"  baseline {headline:.6f} ms over {len(configs)} configuration(s)")
        return rec

    def _classification(self, points: Mapping[str, dict]) -> dict:
        out: dict[str, Any] = {}
        for c, info in self.backend.workload_info().items():
            f, b = info.get("flops"), info.get("bytes")
            if f and b:
                ai = float(f) / float(b)
                from ..roofline.model import recipe_class
                out[c] = {"ai": ai, "recipe_class": recipe_class(ai), "unit": info.get("unit"),
                          "bound": (points.get(c) or {}).get("bound")}
        return out

    def check_stop(self) -> decide_mod.StopCheck:
        """The recipe's stop rules on the ledger so far (the loop and `loop record` share them)."""
        pct, basis = decide_mod.roof_pct_of((self.led.last_kept() or {}).get("roofline"))
        chk = decide_mod.stop_rules(self.led.decisions(), max_iterations=self.opt.max_iterations,
                                    keep_going=self.opt.keep_going, until_roof=self.opt.until_roof,
                                    roof_pct=pct, roof_basis=basis)
        if chk.rule == "until-roof" and not chk.stop:
            # each continuation past a stop rule is a decision the ledger shows
            self.led.append({"type": "continue", "rule": "until-roof", "reason": chk.reason,
                             "iterations": len(self.led.decisions())})
            self.echo(f"continue: {chk.reason}")
        return chk

    def record_stop(self, rule: str, reason: str, manual: list[dict] | None = None) -> None:
        self.led.append({"type": "stop", "rule": rule, "reason": reason, "manual": manual or [],
                         "iterations": len(self.led.decisions())})
        self.echo(f"stop: {reason}")

    def run(self) -> LoopResult:
        manual: list[dict] = []
        try:
            while True:
                chk = self.check_stop()
                if chk.stop:
                    raise _Stop(chk.rule, chk.reason)
                n = self.led.next_iteration()
                a = self.kept_version()
                if self.git.dirty_files():
                    raise LoopError(f"the loop's worktree {self.s.worktree} changed outside the loop: "
                                    + ", ".join(self.git.dirty_files()[:5]),
                                    hint="record a manual edit with `cutile-diag loop record`, or undo it there")
                diag = self._diagnose(a, n)
                if diag.escalate:
                    raise _Stop("escalate", f"the diagnosis says '{diag.bottleneck}': "
                                + ("; ".join(diag.reasons[:2]) or "a person should look")
                                + " — handing over (cutile-diag loop next shows the evidence)",
                                [r.to_json() for r in diag.recommendations if not r.automatic])
                choice, manual, skipped = self.choose(diag, a)
                for sk in skipped:
                    self.echo(f"  skip {sk}")
                if choice is None:
                    extra = (f"; {len(manual)} manual entr{'y' if len(manual) == 1 else 'ies'} left: run "
                             "`cutile-diag loop next`") if manual else ""
                    raise _Stop("exhausted", "no automatic optimisation left to try" + extra, manual)
                self.iterate(n, a, choice, diag)
        except _Stop as st:
            self.record_stop(st.rule, st.reason, st.manual or manual)
            return self.result(st.rule, st.reason, st.manual or manual)

    def result(self, rule: str, reason: str, manual: list[dict] | None = None) -> LoopResult:
        its = self.led.iterations
        base = next((r for r in its if r["iteration"] == 0), None)
        kept = self.led.last_kept()
        return LoopResult(state_dir=str(self.s.state_dir), table=str(self.led.table_path), ledger=str(self.led.path),
                          stop_rule=rule, stop_reason=reason, iterations=len(self.led.decisions()),
                          kept_commit=kept["commits"]["kept"] if kept else None,
                          baseline_ms=base["latency_ms"] if base else None,
                          final_ms=kept["latency_ms"] if kept else None, manual=list(manual or []),
                          rows=self.led.rows(), classification=(base or {}).get("classification") or {},
                          roofline_guard=(base or {}).get("roofline_guard") or {}, branch=self.s.branch,
                          worktree=str(self.s.worktree),
                          take=self.s.take_commands(kept["commits"]["kept"] if kept else None))

    # ----------------------------------------------------------------------------------
    # one iteration

    def iterate(self, n: int, a: Version, choice: Choice, diag: LoopDiagnosis) -> dict:
        rec = choice.rec
        sweep = len(choice.candidates) > 1
        for i, c in enumerate(choice.candidates):
            c.version = c.version.with_label(f"iter-{n}" + (f"/{i + 1}" if sweep else ""))
        tried = [{"transform": choice.transform.name, "params": c.params} for c in choice.candidates]
        meta = {"entry": {"id": rec.id, "name": rec.name, "transform": choice.transform.name, "automatic": True},
                "diagnosis": {**diag.to_json(), "chosen": rec.to_json()},
                "tried": tried}
        first = choice.candidates[0]
        label = f"{rec.id} {choice.transform.name}: {first.result.description}" if not sweep else \
            f"{rec.id} {choice.transform.name} sweep ({len(choice.candidates)} settings)"
        self.echo(f"iteration {n}: {_short(label)}")
        return self.evaluate(n, a, choice.candidates, meta, label)

    def evaluate(self, n: int, a: Version, cands: Sequence[Candidate], meta: dict, label: str) -> dict:
        """Verify, measure, decide, commit or revert, record — for automatic and manual steps."""
        idir = self.s.iteration_dir(n)
        # saved before anything can fail, so that what recover() promises exists
        saved = save_candidates(idir, a.files, [c.version.files for c in cands])
        # the candidates go into the begin record: after a hard kill, recover() marks them tried so
        # --resume does not run the same (possibly hanging) step again
        self.led.append({"type": "begin", "iteration": n, "base_commit": a.commit, "base_digest": a.digest,
                         "entry": meta.get("entry"), "saved": str(saved) if saved else None,
                         "tried": meta.get("tried", [])})
        deadline = proc.Deadline(self.opt.iteration_budget_s)
        record: dict[str, Any] = {"type": "iteration", "iteration": n, "optimization": _short(label),
                                  "latency_ms": None, "correctness": "FAIL", "status": "revert",
                                  "entry": meta.get("entry"), "diagnosis": meta.get("diagnosis"),
                                  "base_commit": a.commit, "base_digest": a.digest, "applied": list(a.applied),
                                  "change": {"tried": meta.get("tried", [])},
                                  "commits": {"base": a.commit, "candidate": None, "kept": a.commit}}
        hctx = {"iteration": n, "runner": self, "record": record, "baseline": a}
        try:
            self._hook("before_apply", hctx)
            b, sweep_info = self._select(n, a, cands, deadline, record, hctx)
            if b is None:
                self.echo(f"  {record['decision']['reason'][:200]} -> {record['status']}")
                return self._finish(record, deadline, a, keep=None)
            record["digest"] = b.version.digest
            record["applied"] = list(b.version.applied)
            record["optimization"] = _short(label if len(cands) == 1 else
                                            f"{label.split(' sweep')[0]}: {b.result.description}")
            record["change"].update(self._change_info(a, b, idir))
            if sweep_info:
                record["correctness"] = "PASS"          # the chosen point passed its verification in the sweep
            self.ws.write(b.version.files)
            self._guard()
            self._hook("after_apply", hctx)
            cap_a = self._capture(a, deadline)
            cap_b = self._capture(b.version, deadline)
            if cap_b is not None:
                record["capture"] = cap_b.to_json()
                if not cap_b.ok:
                    record["decision"] = decide_mod.reject("compile", f"the candidate does not compile: {cap_b.error}"
                                                           ).to_json()
                    return self._finish(record, deadline, a, keep=None)
                record["ir_diff"] = ir_diff(cap_a.path if cap_a and cap_a.ok else None, cap_b.path)
            else:
                record["ir_diff"] = {"skipped": f"capture {self.capture_off_reason}"}
            ver = self.backend.verify(b.version, self.ws, deadline)
            record["verification"] = ver.to_json()
            record["correctness"] = "PASS" if ver.passed else "FAIL"
            # what recover() reports as the correctness of an iteration killed after this point
            self.led.append({"type": "progress", "iteration": n, "step": "verified", "passed": ver.passed})
            self._hook("after_verify", hctx)
            if not ver.passed:
                record["decision"] = decide_mod.reject("correctness", ver.summary).to_json()
                self.echo(f"  correctness FAIL: {_short(ver.summary)} -> revert")
                return self._finish(record, deadline, a, keep=None)
            runs = self.backend.measure([a, b.version], self.ws, deadline, self.opt.rounds)
            self._hook("after_measure", hctx)
            cmp = stats.compare({c: (runs[a.label][c], runs[b.version.label][c]) for c in runs[a.label]},
                                noise_floor=self.opt.noise_floor)
            record["comparison"] = cmp.to_json()
            record["configs"] = {c.config: {"median_ms": c.candidate_ms, "baseline_ms": c.baseline_ms,
                                            "ratio": c.ratio, "ci95": [c.lo, c.hi]} for c in cmp.configs}
            record["latency_ms"] = cmp.candidate_ms
            record["baseline_latency_ms"] = cmp.baseline_ms
            pts, invalid, why = self._roofline(b.version, runs[b.version.label])
            record["roofline"], record["roofline_note"] = pts, why
            record["roofline_guard"] = self._guard_info(pts, why, runs[b.version.label])
            if invalid:
                d = decide_mod.reject("above-roof", "a measurement lies above the roof: " + "; ".join(invalid))
            else:
                cum = decide_mod.cumulative_ratios((r["status"], r.get("comparison")) for r in self.led.iterations
                                                   if r["iteration"] > 0)
                d = decide_mod.decide(cmp, cumulative=cum)
            record["decision"] = d.to_json()
            record["status"] = d.status
            self.echo(f"  {cmp.improvement_pct:+.2f}% ({cmp.baseline_ms:.6f} -> {cmp.candidate_ms:.6f} ms): "
                      f"{d.status} — {_short(d.reason, 90)}")
            commit = self._commit(n, record, d)
            record["commits"]["candidate"] = commit
            self._hook("after_commit", hctx)
            return self._finish(record, deadline, a, keep=b.version if d.status == "keep" else None, commit=commit)
        except ForbiddenEditError as e:
            record["decision"] = decide_mod.reject("forbidden-files", e.one_line()).to_json()
            record["forbidden"] = e.files
            self.echo(f"  refused: {e.one_line()}")
            return self._finish(record, deadline, a, keep=None)
        except CorrectnessFailure as e:
            record["correctness"] = "FAIL"
            record["decision"] = decide_mod.reject("correctness", e.one_line()).to_json()
            self.echo(f"  correctness FAIL after timing: {_short(e.one_line())} -> revert")
            return self._finish(record, deadline, a, keep=None)
        except (MeasurementTimeout, CandidateCrash) as e:
            record["status"] = "crash"
            record["decision"] = decide_mod.reject("crash", e.one_line(), status="crash").to_json()
            self._screened_latency(record)
            self.echo(f"  crash: {_short(e.one_line())} -> revert")
            return self._finish(record, deadline, a, keep=None)
        except (BackendError, GitError):
            self._restore(a)
            raise
        except Exception as e:
            record["status"] = "crash"
            record["decision"] = decide_mod.reject("crash", f"{type(e).__name__}: {e}", status="crash").to_json()
            record["error"] = traceback.format_exc()[-4000:]
            self._screened_latency(record)
            self.echo(f"  crash: {type(e).__name__}: {_short(str(e))} -> revert")
            return self._finish(record, deadline, a, keep=None)
        except BaseException:
            # killed (Ctrl-C, a test's simulated death): leave the tree on A; the begin record stays
            # pending and --resume records the crash
            self._restore(a)
            raise

    @staticmethod
    def _share(deadline: proc.Deadline, parts: int) -> proc.Deadline:
        """An equal share of what is left of the budget: one hung sweep point cannot eat the others'."""
        left = deadline.remaining()
        return proc.Deadline(None if left is None else left / max(1, parts))

    def _screened_latency(self, record: dict) -> None:
        """A row whose full comparison never finished shows the chosen point's screening latency."""
        if record.get("latency_ms") is None:
            chosen = next((r for r in record.get("sweep") or [] if r.get("chosen") and r.get("screen_ms")), None)
            if chosen:
                record["latency_ms"], record["latency_source"] = chosen["screen_ms"], "screening"

    def _select(self, n: int, a: Version, cands: Sequence[Candidate], deadline: proc.Deadline, record: dict,
                hctx: dict) -> tuple[Candidate | None, list[dict] | None]:
        """One candidate: itself.  A sweep: verify each point, screen the passing ones against A,
        keep the fastest.  Each point runs under its share of the budget; a point that hangs,
        crashes or lands above the roof fails on its own and the others go on."""
        if len(cands) == 1:
            return cands[0], None
        info, passing = [], []
        for i, c in enumerate(cands):
            row = {"label": c.version.label, "params": c.params, "description": c.result.description}
            info.append(row)
            self.ws.write(c.version.files)
            self._guard()
            share = self._share(deadline, len(cands) - i + 1)     # + 1: what the full comparison needs
            cap = self._capture(c.version, share)
            if cap is not None and not cap.ok:
                row["result"], row["failure"] = f"does not compile: {cap.error}", "compile"
                continue
            try:
                ver = self.backend.verify(c.version, self.ws, share)
            except (MeasurementTimeout, CandidateCrash) as e:
                row["result"], row["failure"] = f"crash: {e.one_line()}", "crash"
                continue
            row["verification"] = ver.summary
            if not ver.passed:
                row["result"], row["failure"] = "correctness FAIL", "correctness"
                continue
            passing.append(c)
        self.ws.write(a.files)
        if len(passing) > 1:
            screened = []
            for i, c in enumerate(passing):
                row = next(r for r in info if r["label"] == c.version.label)
                share = self._share(deadline, len(passing) - i + 1)
                try:
                    runs = self.backend.measure([a, c.version], self.ws, share, self.opt.screen_rounds)
                except (MeasurementTimeout, CandidateCrash) as e:
                    row["result"], row["failure"] = f"crash in screening: {e.one_line()}", "crash"
                    continue
                except CorrectnessFailure as e:
                    row["result"], row["failure"] = f"correctness FAIL in screening: {e.one_line()}", "correctness"
                    continue
                # the guard applies to screening measurements too: an impossible point never wins
                pts, invalid, _why = self._roofline(c.version, runs[c.version.label])
                if invalid:
                    row["result"], row["failure"] = "above the roof: " + "; ".join(invalid), "above-roof"
                    continue
                cmp = stats.compare({k: (runs[a.label][k], runs[c.version.label][k]) for k in runs[a.label]},
                                    noise_floor=self.opt.noise_floor)
                row["screen_ratio"], row["screen_ms"] = cmp.ratio, cmp.candidate_ms
                screened.append((cmp.ratio, c))
            passing = [c for _, c in sorted(screened, key=lambda x: x[0])]
        record["sweep"] = info
        if not passing:
            kinds = {r.get("failure") for r in info}
            rule = next(k for k in ("crash", "above-roof", "correctness", "compile") if k in kinds)
            d = decide_mod.reject(rule, "no sweep point passed its checks: " + "; ".join(
                f"{r['params']}: {r.get('result')}" for r in info), status="crash" if rule == "crash" else "revert")
            record["decision"], record["status"] = d.to_json(), d.status
            # the row's correctness: every point that ran passed its checks unless one really failed them
            record["correctness"] = "FAIL" if "correctness" in kinds or "compile" in kinds else "PASS"
            return None, info
        best = passing[0]
        for r in info:
            r["chosen"] = r["label"] == best.version.label
        self.backend.retain([a, best.version])
        return best, info

    def _guard(self) -> None:
        changed = self.git.changed_since(self._base_commit())
        forbidden = [f for f in changed if f not in self.s.allowed]
        if forbidden:
            raise ForbiddenEditError(forbidden, self.s.allowed)

    def _base_commit(self) -> str:
        rec = self.led.last_kept()
        return rec["commits"]["kept"] if rec else self.s.start_commit

    def _change_info(self, a: Version, b: Candidate, idir) -> dict:
        files = save_files(idir, a.files, {p: b.version.files.get(p, "") for p in self.s.allowed})
        text = (idir / "candidate.diff").read_text() if files else ""
        res = b.result
        return {"transform": getattr(res, "transform", None), "description": getattr(res, "description", ""),
                "params": getattr(res, "params", b.params), "changed_lines": list(getattr(res, "changed_lines", ())),
                "notes": list(getattr(res, "notes", ())), "files": [p for p in self.s.allowed
                                                                    if a.files.get(p) != b.version.files.get(p)],
                "diff": text[:6000], "diff_path": str(idir / "candidate.diff")}

    def _commit(self, n: int, record: dict, d: decide_mod.Decision) -> str:
        files = [p for p in self.git.changed_since(self._base_commit()) if p in self.s.allowed]
        if not files:
            raise LoopError("internal: the candidate changes no file")
        msg = (f"cutile-perf {self.s.kernel} iteration {n}: {record['optimization']}\n\n"
               f"{d.status}: {d.reason}\nledger: {self.led.path}")
        commit = self.git.commit(files, msg)
        self.git.keep_ref(f"refs/cutile-diag/{self.s.branch}/iter-{n}", commit)
        return commit

    def _restore(self, a: Version) -> None:
        try:
            self._restore_tree(a)
        except Exception:
            pass

    def _restore_tree(self, a: Version) -> None:
        """Reset the loop's worktree to the last kept commit *as the ledger records it* (``a``'s,
        unless the iteration was already recorded as a keep) and delete files the candidate
        created: the worktree was clean when the iteration began, and nobody else writes there."""
        self.git.reset_clean(self._base_commit())

    def _finish(self, record: dict, deadline: proc.Deadline, a: Version, *, keep: Version | None,
                commit: str | None = None) -> dict:
        if keep is not None:
            record["commits"]["kept"] = commit
        else:
            # back to the last kept commit: the candidate (committed or not) leaves the tree
            self._restore_tree(a)
            record["commits"]["kept"] = a.commit
            if record["status"] == "keep":       # pragma: no cover - keep without a version is a bug
                record["status"] = "revert"
        if "decision" not in record:
            record["decision"] = decide_mod.reject("crash", "internal: no decision", status="crash").to_json()
        record["seconds"] = round(deadline.elapsed(), 3)
        self.led.append(record)
        self._hook("after_record", {"iteration": record["iteration"], "runner": self, "record": record})
        try:
            self.backend.retain([keep] if keep is not None else [a])
        except Exception:
            pass
        return record
