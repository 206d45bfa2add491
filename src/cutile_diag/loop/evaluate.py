"""Evaluating candidates against the last kept version ``A``, in the loop's worktree: write the
candidate, guard the allowed files, capture and diff its IR, verify, measure interleaved with
``A`` (a sweep screens every point first), decide, commit, and keep or reset — then record.
The same path serves automatic steps and ``loop record``.

``Evaluation`` decides; what it asks of the loop around it (capture, check, time, roofline,
hooks) is the ``Steps`` it is given.  ``Runner`` is both: it passes itself.  The state an
evaluation reads is declared on the class (the runner's session, backend, ledger, worktree,
options, clock).
"""
from __future__ import annotations

import abc
import os
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from . import budget as budget_mod
from . import decide as decide_mod
from .beam import lineage_cumulative
from . import proc, stats
from .backends import CorrectnessFailure, Version
from .choose import Candidate, sweep_prefix
from .composite import part_records, point_label
from .costs import StepClock
from .errors import BackendError, CandidateCrash, ForbiddenEditError, GitError, LoopError, MeasurementTimeout
from .evidence import changed_outside_kernel, diff_line, no_op, uncredit
from .integrations import ir_diff
from ..ledger import short_text as _short
from .recover import save_candidates, save_files
from .sampling import floor_with_pool, joined, sample_to_ci

if TYPE_CHECKING:
    from ..ledger import Ledger
    from .backends import Backend, Verification, Workspace
    from .git import Git
    from .integrations import CaptureResult
    from .session import Session


_CONFIRM_CUT = "the iteration's time budget ran out while confirming"
OWN_SLACK = 2.0     # a sweep point may run to twice its estimated cost (estimates are rough), not longer


class Steps(abc.ABC):
    """What an evaluation asks of the loop that runs it.  The loop owns the backend, the captures
    and compiles, and the step's clock (each method counts its phase); the evaluation decides."""

    @abc.abstractmethod
    def capture(self, v: Version, deadline: proc.Deadline | None, *, observed: Verification | None = None,
                run: bool = True) -> CaptureResult | None:
        """``v``'s capture (cached by digest): from its compile, from the launch its observed check
        recorded (``observed``), else from a run of its own; None when captures are off, or with
        ``run=False`` when only a run could capture it."""

    @abc.abstractmethod
    def check_first(self, v: Version, deadline: proc.Deadline) -> Verification | None:
        """Where a capture needs ``v``'s check run (command mode), run that check first, observed,
        and return it; None otherwise (the check, if it ran beside a compile, is in ``_verified``)."""

    @abc.abstractmethod
    def verify(self, v: Version, deadline: proc.Deadline, *, observe: bool = False) -> Verification:
        """``v``'s correctness check through the backend (``observe``: record its launches)."""

    @abc.abstractmethod
    def measure(self, versions: Sequence[Version], deadline: proc.Deadline, rounds: int):
        """Time ``versions`` interleaved over ``rounds`` rounds: the backend's ``Runs``."""

    @abc.abstractmethod
    def roofline(self, v: Version, runs: Mapping[str, list[stats.RunStat]]) -> tuple[dict, list[str], str | None]:
        """(roofline points at the runs' median, why any run is above the roof, why there is no roofline)."""

    @abc.abstractmethod
    def precompile(self, a: Version, versions: Sequence[Version], deadline: proc.Deadline | None) -> None:
        """Compile (and so capture) the versions not captured yet at once, with ``a``'s recorded launch."""

    @abc.abstractmethod
    def hook(self, point: str, ctx: dict) -> None:
        """Call the hook registered at ``point`` (``HOOK_POINTS``) with ``ctx``, if any."""


def guard_info(pts: Mapping[str, dict], why: str | None, configs) -> dict:
    """Whether the above-roof guard really checked the measurement (the ledger says so either way)."""
    if why or not pts:
        return {"ran": False, "why": why or "no roofline point for any configuration"}
    info: dict[str, Any] = {"ran": True, "checked": sorted(pts)}
    missing = sorted(set(configs) - set(pts))
    if missing:
        info["unchecked"] = missing
        info["why"] = "no FLOP/byte counts for " + ", ".join(missing[:5])
    return info


class Evaluation:
    """Candidates against the kept version: write, guard, capture, verify, measure, decide, commit or reset, record
    (the part of ``Runner`` that ``loop record`` shares)."""
    measure_no_ops = False          # `loop record --allow-noop`: a no-op edit is measured (never credited)
    # the loop's state an evaluation reads (the runner sets it)
    s: Session
    backend: Backend
    led: Ledger
    git: Git
    ws: Workspace
    opt: Any                        # runner.LoopOptions (runner imports this module)
    echo: Callable[[str], None]
    clock: StepClock
    started: float                  # time.monotonic() at the start of this invocation (--time-limit)
    capture_off_reason: str | None  # why versions are not captured (None: they are)

    def __init__(self, steps: Steps):
        self.steps = steps
        self._compile_ref: Version | None = None            # the kept version a step's compiles reuse
        self._verified: dict[str, Verification] = {}        # this step's checks, by digest (Steps.check_first)

    def noise(self) -> tuple[float, int | None]:
        """The floor a comparison decides with: the loop's (calibrated or the default), raised to the noise
        pooled over this loop's recorded comparisons (``sampling.floor_with_pool``); and the degrees of freedom
        it rests on (None: calibrated on this machine, or rounds too costly to spend on it)."""
        floor, df = floor_with_pool(self.opt.noise_floor, (r.get("comparison") for r in self.led.iterations))
        # a round that costs a run of the user's command (seconds apiece) is not spent on knowing the noise
        known = str(getattr(self.opt, "noise_source", "")).startswith("calibrated") or self._costly
        return floor, None if known else df

    def noise_floor(self) -> float:
        """The floor of ``noise``."""
        return self.noise()[0]

    def costs(self) -> budget_mod.Costs:
        """What a check, a run and a capture cost, as the ledger's iterations measured them."""
        return budget_mod.costs_from_ledger(self.led.iterations,
                                            budget_mod.KEEP_PRIOR_S if self.backend.suite else 0.0)

    def time_left(self) -> float | None:
        """Seconds left of this invocation's --time-limit (None: no limit)."""
        if self.opt.time_limit_s is None:
            return None
        return float(self.opt.time_limit_s) - (time.monotonic() - self.started)

    def budget_s(self) -> float:
        """One iteration's budget: --budget, cut to what --time-limit leaves."""
        left = self.time_left()
        return self.opt.iteration_budget_s if left is None else max(0.0, min(self.opt.iteration_budget_s, left))

    def rounds(self) -> int:
        """The rounds of a comparison: --rounds, else fitted to --budget from the measured run time
        (``budget.fitted_rounds``; the baseline records which and why)."""
        return budget_mod.comparison_rounds(self.opt.rounds, self.costs(), self.opt.iteration_budget_s)

    def max_sweep(self) -> int:
        """The settings a sweep screens: --max-sweep, else fitted to --budget from the measured run
        time (``budget.fitted_sweep``; the baseline records which and why)."""
        if self.opt.max_sweep:
            return int(self.opt.max_sweep)
        return budget_mod.fitted_sweep(self.costs(), self.opt.iteration_budget_s, shared=self._costly)[0]

    def plan(self, n_points: int) -> budget_mod.Plan:
        """What one iteration of ``n_points`` candidates can afford within the budget."""
        # a sweep's points compile at once (loop.compile_pool), and check at once where the backend can
        return budget_mod.plan(n_points, self.costs(), self.budget_s(), rounds=self.rounds(),
                               screen_rounds=self.opt.screen_rounds, compile_workers=os.cpu_count() or 1,
                               check_workers=n_points if self.backend.prepares else 1,
                               screen_shared=self._costly)

    def evaluate(self, n: int, a: Version, cands: Sequence[Candidate], meta: dict, label: str,
                 plan: budget_mod.Plan | None = None, clock: StepClock | None = None) -> dict:
        """Verify, measure, decide, commit or revert, record — for automatic and manual steps.
        A sweep's screened winner that loses its confirmation is dropped and the next-best
        screened point is confirmed, while the budget lasts (a screening round can mislead)."""
        idir = self.s.iteration_dir(n)
        plan = plan or self.plan(len(cands))
        # this step's cost split (from its diagnosis on, when the loop gives its clock); candidates
        # compile (concurrently) against A's recorded launch
        self.clock, self._compile_ref = clock or StepClock(), a
        # saved before anything can fail, so that what recover() promises exists
        saved = save_candidates(idir, a.files, [c.version.files for c in cands])
        # the candidates go into the begin record: after a hard kill, recover() marks them tried so
        # --resume does not run the same (possibly hanging) step again
        self.led.append({"type": "begin", "iteration": n, "base_commit": a.commit, "base_digest": a.digest,
                         "entry": meta.get("entry"), "saved": str(saved) if saved else None,
                         "tried": meta.get("tried", [])})
        deadline = proc.Deadline(self.budget_s())
        record: dict[str, Any] = {"type": "iteration", "iteration": n, "optimization": _short(label),
                                  "latency_ms": None, "correctness": "FAIL", "status": "revert",
                                  "entry": meta.get("entry"), "diagnosis": meta.get("diagnosis"),
                                  "base_commit": a.commit, "base_digest": a.digest, "applied": list(a.applied),
                                  "change": {"tried": meta.get("tried", [])}, "plan": plan.to_json(),
                                  "commits": {"base": a.commit, "candidate": None, "kept": a.commit}}
        for note in plan.notes:
            self.echo(f"  budget: {note}")
        hctx = {"iteration": n, "runner": self, "record": record, "baseline": a}
        self._verified: dict[str, Any] = {}
        try:
            self.steps.hook("before_apply", hctx)
            ranked, sweep_info = self._select(n, a, cands, deadline, record, hctx, plan)
            if not ranked:
                self.echo(f"  {record['decision']['reason'][:200]} -> {record['status']}")
                return self._finish(record, deadline, a, keep=None)
            tried: list[tuple[Candidate, decide_mod.Decision, dict]] = []
            for i, b in enumerate(ranked):
                if i and not self._confirm_fits(deadline, plan, check=b.version.digest not in self._verified):
                    self.echo(f"  no time left to confirm the next screened setting ({b.result.description})")
                    break
                if i:
                    prev = tried[-1][1]
                    why = f"did not gain enough in its confirmation ({prev.rule})" if prev is not None else \
                        f"failed its check ({tried[-1][2]['decision']['rule']})"
                    self.echo(f"  {_short(ranked[i - 1].result.description, 60)} {why}; confirming the next "
                              f"screened setting: {_short(b.result.description, 60)}")
                    self._restore_tree(a)
                    record = self._next_record(record)
                    hctx["record"] = record
                d = self._confirm(n, a, b, deadline, record, hctx, plan, label, sweep_info, idir,
                                  more=i + 1 < len(ranked))
                tried.append((b, d, record))
                # a point screened before its check (command mode) that fails it gives way to the next
                failed_check = d is None and self._costly and \
                    (record.get("decision") or {}).get("rule") in ("correctness", "compile")
                if (d is None and not failed_check) or (d is not None and d.improved) or not sweep_info:
                    break
            b, d, record = _best_confirmation(tried)
            if len(tried) > 1:
                # iterations/<n>/ holds the candidate of the row, not the last one confirmed
                record["change"].update(self._change_info(a, b, idir))
                self.echo(f"  the row takes {_short(b.result.description, 60)}, the best of {len(tried)} "
                          f"confirmed settings -> {d.status if d else record['status']}")
                record["confirmations"] = [{"label": c.version.label, "params": c.params,
                                            "status": dd.status if dd else r["status"],
                                            "rule": dd.rule if dd else r["decision"]["rule"],
                                            "ratio": (r.get("comparison") or {}).get("ratio")} for c, dd, r in tried]
                for r in record.get("sweep") or []:
                    r["chosen"] = r["label"] == b.version.label
            if d is None:           # ended before a decision (compile or correctness failure): recorded as such
                return self._finish(record, deadline, a, keep=None)
            self.ws.write(b.version.files)       # the tree may hold a later confirmation's files
            if d.status == "keep" and not self._suite_confirms(b.version, deadline, record):
                return self._finish(record, deadline, a, keep=None)
            commit = self._commit(n, record, d)
            record["commits"]["candidate"] = commit
            self.steps.hook("after_commit", hctx)
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
            why = self._clock_kill(e, a, record)
            if why is not None:
                # no verdict on the candidate: the clock, not a hang, ended the step
                record["decision"] = decide_mod.reject("budget", f"{why} ({e.one_line()})").to_json()
                if "verification" not in record:
                    record["correctness"] = "-"
                if why == _CONFIRM_CUT:
                    self._screened_latency(record)
                self.echo(f"  {'stopped by --time-limit' if why != _CONFIRM_CUT else 'out of time'}: "
                          f"{_short(e.one_line())} -> revert")
                return self._finish(record, deadline, a, keep=None)
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

    def _clock_kill(self, e: Exception, a: Version, record: dict) -> str | None:
        """Why a timeout is the clock's doing, or None (a hang: a crash).  The run's --time-limit
        ran out; or the killed run belongs to a version that already ran to the end in this
        iteration (A, a screened sweep point) or to none (the budget ran out before it began)."""
        if not isinstance(e, MeasurementTimeout):
            return None
        left = self.time_left()
        if left is not None and left < 1.0:
            return "--time-limit reached during the step"
        if e.label is None or e.label == a.label or any(
                r.get("label") == e.label and r.get("screen_ms") is not None for r in record.get("sweep") or []):
            return _CONFIRM_CUT
        return None

    def _confirm_fits(self, deadline: proc.Deadline, plan: budget_mod.Plan, check: bool = False) -> bool:
        """Time left for one more confirmation (``check``: and the point's check, not run yet)."""
        left = deadline.remaining()
        c = self.costs()
        return left is None or c.confirm_s(plan.confirm_rounds) + (c.verify_s if check else 0.0) \
            <= left * budget_mod.MARGIN

    @property
    def _costly(self) -> bool:
        """Each check and each timed run is a process of the user's command (command mode: seconds
        apiece, mostly start-up, imports and JIT).  Then a sweep screens its points before any
        check, against one run of the kept version per screening round, and checks only the points
        it confirms (``loop.budget``: ``Costs.iteration_s(screen_shared=)``); a comparison that is
        already a clear regression after its first round is not measured further
        (``_clear_regression``); and without --rounds the baseline is timed once (``Runner.baseline``)."""
        return bool(self.backend.costly_runs)

    def _clear_regression(self, cmp: stats.Comparison) -> decide_mod.Decision | None:
        """The recipe's ``regression`` revert (a configuration significantly slower by more than
        2 %), when a comparison's first round already shows it: more rounds only decide keeps, so a
        costly confirmation stops there (and a sweep whose best screened point shows it confirms
        nothing).  Not for a step the lookahead could keep as a frontier (within --lookahead)."""
        d = decide_mod.decide(cmp)
        if d.rule != "regression":
            return None
        lookahead = (self.opt.until_roof is not None or self.opt.keep_going) and self.opt.lookahead > 0
        if lookahead and cmp.ratio <= 1.0 + float(self.opt.lookahead):
            return None
        return d

    def _confirm_runs(self, a: Version, b: Version, deadline: proc.Deadline, rounds: int):
        """The confirmation's interleaved rounds, and how many ran: with costly runs one round
        first, and the rest (B A, A B, ...: the alternation goes on) unless it is a clear regression."""
        if not self._costly or rounds < 2:
            return self.steps.measure([a, b], deadline, rounds), rounds
        runs = self.steps.measure([a, b], deadline, 1)
        first = stats.compare({c: (runs[a.label][c], runs[b.label][c]) for c in runs[a.label]},
                              noise_floor=self.noise_floor())
        if self._clear_regression(first) is not None:
            return runs, 1
        more = self.steps.measure([b, a], deadline, rounds - 1)
        return joined(runs, more), rounds

    @staticmethod
    def _next_record(prev: dict) -> dict:
        """A fresh record for the next confirmation: the iteration's facts stay, the candidate's go."""
        keep = ("type", "iteration", "entry", "diagnosis", "base_commit", "base_digest", "plan", "sweep")
        rec = {k: prev[k] for k in keep if k in prev}
        rec.update({"optimization": prev["optimization"], "latency_ms": None, "correctness": "FAIL",
                    "status": "revert", "applied": list(prev.get("applied") or []),
                    "change": {"tried": prev["change"].get("tried", [])},
                    "commits": {"base": prev["commits"]["base"], "candidate": None, "kept": prev["commits"]["base"]}})
        return rec

    def _suite_confirms(self, v: Version, deadline: proc.Deadline, record: dict) -> bool:
        """Replay backends: the user's test command, once, before a step measured on recordings is kept;
        a failure reverts it as incorrect (``record`` says so)."""
        if not self.backend.suite:
            return True                # only replay backends confirm with the user's command
        with self.clock.phase("confirm"):
            ver = self.backend.confirm_keep(v, self.ws, deadline)
        if ver is None:
            return True
        record["test_cmd"] = ver.to_json()
        if ver.passed:
            self.echo(f"  the test command confirms it: {_short(ver.summary, 80)}")
            return True
        record["correctness"], record["status"] = "FAIL", "revert"
        record["decision"] = decide_mod.reject("correctness", f"the test command failed before the step was kept: "
                                               f"{ver.summary}").to_json()
        self.echo(f"  the test command fails: {_short(ver.summary)} -> revert")
        return False

    def _confirm(self, n: int, a: Version, b: Candidate, deadline: proc.Deadline, record: dict, hctx: dict,
                 plan: budget_mod.Plan, label: str, sweep_info, idir, more: bool = False) -> decide_mod.Decision | None:
        """Check and measure one candidate against ``a``; fills ``record``; None when it ended
        before a decision (its record then carries the rejection).  ``more``: a next screened
        setting may still be confirmed, so a keep without improvement is not final yet."""
        record["digest"] = b.version.digest
        record["applied"] = list(b.version.applied)
        record["optimization"] = _short(label if not sweep_info else point_label(label, b, sweep_prefix))
        record["change"].update(self._change_info(a, b, idir))
        self.ws.write(b.version.files)
        self._guard()
        self.steps.hook("after_apply", hctx)
        cap_a = self.steps.capture(a, deadline)
        # command mode: a candidate whose capture needs a run is checked first, and captured from the
        # launch that check recorded (a failing check needs no capture: it reverts)
        checked = self.steps.check_first(b.version, deadline)
        cap_b = None if checked is not None and not checked.passed else \
            self.steps.capture(b.version, deadline, observed=checked)
        if cap_b is not None:
            record["capture"] = cap_b.to_json()
            if cap_b.timed_out:            # the clock, not the kernel: no compile verdict
                record["decision"] = decide_mod.reject("budget", f"the candidate's capture ran past the time "
                                                       f"budget ({cap_b.error}); not a compile failure").to_json()
                record["correctness"] = "-" if checked is None else checked.correctness
                return None
            if not cap_b.ok and checked is None:
                record["decision"] = decide_mod.reject("compile", f"the candidate does not compile: {cap_b.error}"
                                                       ).to_json()
                return None
            # after a passing check a failed capture is missing evidence, not a compile failure
            record["ir_diff"] = ir_diff(cap_a.path if cap_a and cap_a.ok else None, cap_b.path if cap_b.ok else None)
        elif checked is not None and self.capture_off_reason is None:
            record["ir_diff"] = {"skipped": "the candidate failed its check (taken before its capture)"}
        else:
            record["ir_diff"] = {"skipped": f"capture {self.capture_off_reason}"}
        if b.transform and "+" in b.transform:        # a composite: each step's own diff and IR diff
            record["change"]["frontier"] = b.result.frontier
            # its parts' captures (command mode: from compiles only, an intermediate version never runs)
            record["change"]["parts"] = part_records(a, b, self.s.kernel_file, None if cap_b is None else (
                lambda x, y: ir_diff(*(c.path if c and c.ok else None
                                       for c in (self.steps.capture(x, deadline, run=False),
                                                 self.steps.capture(y, deadline, run=False))))))
        why = None if self.measure_no_ops else no_op(record.get("ir_diff"), outside_changed=changed_outside_kernel(
            a.files, b.version.files, self.s.kernel_file, self.s.function))
        if why:
            # the GPU would run what it runs now: a measured difference could only be noise
            record["decision"] = decide_mod.reject("no-op", f"no-op: {why}; not measured").to_json()
            record["correctness"] = "-" if checked is None else checked.correctness
            self.echo(f"  no-op: {_short(why, 100)} -> revert (not measured)")
            return None
        # a sweep point was checked in the sweep (or first, for its capture): no second check
        ver = self._verified.get(b.version.digest) or self.steps.verify(b.version, deadline)
        self._verified[b.version.digest] = ver
        record["verification"] = ver.to_json()
        record["correctness"] = ver.correctness
        for r in record.get("sweep") or []:         # a point screened unchecked: its check, now
            if r["label"] == b.version.label:
                r["verification"] = ver.summary
        # what recover() reports as the correctness of an iteration killed after this point
        self.led.append({"type": "progress", "iteration": n, "step": "verified", "passed": ver.checked})
        self.steps.hook("after_verify", hctx)
        if not ver.passed:
            record["decision"] = decide_mod.reject("correctness", ver.summary).to_json()
            self.echo(f"  correctness FAIL: {_short(ver.summary)} -> revert")
            return None
        t0 = time.monotonic()
        runs, done = self._confirm_runs(a, b.version, deadline, plan.confirm_rounds)
        sampling, (floor, known_df) = None, self.noise()
        if floor > self.opt.noise_floor:
            record["noise_floor"] = {"used": floor, "pooled_from": "this loop's comparisons", "df": known_df}
        if done == plan.confirm_rounds:         # not cut as a clear regression: sample until the CI is tight
            runs, done, sampling = sample_to_ci(lambda order, k: self.steps.measure(order, deadline, k), a, b.version,
                                                deadline, runs, done, (time.monotonic() - t0) / done,
                                                alternates=self.backend.alternates, noise_floor=floor,
                                                known_df=known_df,
                                                # a round of the user's bench command costs a process (~20 s)
                                                keep_min_rounds=0 if self.backend.costly_runs else None)
            record["sampling"] = sampling
            if done > plan.confirm_rounds:
                self.echo(f"  sampled {done} rounds: the 95% CI is +-{sampling['half_width_pct']:.2f}% "
                          f"({'capped: ' + sampling['stopped'] if sampling['capped'] else 'within the target'})")
        # later iterations plan with the slower of the baseline's and this run time
        record["costs"] = budget_mod.Costs(run_s=(time.monotonic() - t0) / (2 * done)).to_json()
        if done < plan.confirm_rounds:
            record["rounds_measured"] = done
            self.echo(f"  a clear regression after {done} of {plan.confirm_rounds} rounds: not measured further")
        self.steps.hook("after_measure", hctx)
        cmp = stats.compare({c: (runs[a.label][c], runs[b.version.label][c]) for c in runs[a.label]},
                            noise_floor=floor)
        record["comparison"] = cmp.to_json()
        record["configs"] = {c.config: {"median_ms": c.candidate_ms, "baseline_ms": c.baseline_ms,
                                        "ratio": c.ratio, "ci95": [c.lo, c.hi]} for c in cmp.configs}
        record["latency_ms"] = cmp.candidate_ms
        record["baseline_latency_ms"] = cmp.baseline_ms
        pts, invalid, why = self.steps.roofline(b.version, runs[b.version.label])
        record["roofline"], record["roofline_note"] = pts, why
        record["roofline_guard"] = guard_info(pts, why, runs[b.version.label])
        if invalid:
            d = decide_mod.reject("above-roof", "a measurement lies above the roof: " + "; ".join(invalid))
        else:
            cum = lineage_cumulative(self.led.iterations, a.digest) if getattr(self, "beam", None) else \
                decide_mod.cumulative_ratios((r["status"], r.get("comparison")) for r in self.led.iterations
                                             if r["iteration"] > 0)
            d = decide_mod.decide(cmp, cumulative=cum, keep_going=self.opt.keep_going or self.opt.until_roof is not None,
                                  capped=bool(sampling and sampling["capped"]))
        d = uncredit(d, record.get("ir_diff"), outside_changed=changed_outside_kernel(   # empty IR diff: noise
            a.files, b.version.files, self.s.kernel_file, self.s.function))
        record["decision"] = d.to_json()
        record["status"] = d.status
        verdict = "keep unless a later setting does better" if more and d.status == "keep" and not d.improved \
            else d.status
        sim = ", simulated" if self.backend.name == "simulated" else ""
        self.echo(f"  {cmp.improvement_pct:+.2f}% ({cmp.baseline_ms:.6f} -> {cmp.candidate_ms:.6f} ms{sim}): "
                  f"{verdict} — {_short(d.reason, 90)}; {_short(diff_line(record.get('ir_diff')), 90)}")
        return d

    def _share(self, deadline: proc.Deadline, parts: int, after_s: float | None = None,
               own_s: float | None = None) -> proc.Deadline:
        """What one sweep step may use: what is left minus the baseline-timed cost of the work
        after it (``after_s``), at most ``OWN_SLACK`` times the step's own estimated cost
        (``own_s``), and never less than an equal share of it (``parts``).  A hung point cannot
        eat the others' time (the estimates after it carry no margin: with costs of milliseconds
        it would take nearly all), and a slow but working point is not killed at an equal share
        that its capture and check (tens of seconds) never fitted."""
        left = deadline.remaining()
        if left is None:
            return proc.Deadline(None)
        equal = left / max(1, parts)
        if after_s is None:
            return proc.Deadline(equal)
        room = left - after_s if own_s is None else min(left - after_s, OWN_SLACK * own_s)
        return proc.Deadline(max(equal, room))

    def _point_s(self, plan: budget_mod.Plan, *, check: bool) -> float | None:
        """One point's estimated seconds: its capture and check, or its screening (None: no
        baseline costs).  Screened unchecked: the capture alone, and one run per screening round."""
        c = self.costs()
        if not c.known:
            return None
        late = self._costly
        if check:
            return c.candidate_capture_s + (0.0 if late else c.verify_s)
        return (1 if late else 2) * plan.screen_rounds * c.run_s

    def _after_s(self, plan: budget_mod.Plan, checks: int, screens: int) -> float | None:
        """Estimated seconds for ``checks`` more point checks, ``screens`` more screenings and
        the confirmation (None: no baseline costs to estimate with)."""
        c = self.costs()
        if not c.known:
            return None
        late = self._costly
        return (checks * (c.candidate_capture_s + (0.0 if late else c.verify_s))
                + screens * (1 if late else 2) * plan.screen_rounds * c.run_s
                + c.confirm_s(plan.confirm_rounds) + (c.verify_s if late else 0.0))

    def _screened_latency(self, record: dict) -> None:
        """A row whose full comparison never finished shows the chosen point's screening latency."""
        if record.get("latency_ms") is None:
            chosen = next((r for r in record.get("sweep") or [] if r.get("chosen") and r.get("screen_ms")), None)
            if chosen:
                record["latency_ms"], record["latency_source"] = chosen["screen_ms"], "screening"

    def _select(self, n: int, a: Version, cands: Sequence[Candidate], deadline: proc.Deadline, record: dict,
                hctx: dict, plan: budget_mod.Plan) -> tuple[list[Candidate], list[dict] | None]:
        """The candidates to confirm, best first.  One candidate: itself.  A sweep: verify each
        planned point, screen the passing ones against A; the fastest first, then the other
        points that screened faster than A (the fallbacks if the winner loses its confirmation).
        Each point runs under its share of the budget; a point that hangs, crashes or lands
        above the roof fails on its own and the others go on.  Points the plan had no time for
        are recorded as ``skipped (budget)``."""
        if len(cands) == 1:
            return [cands[0]], None
        info, passing = [], []
        todo = [cands[i] for i in plan.screen]
        self.steps.capture(a, deadline)                  # A's capture holds the launch the compiles reuse
        self.steps.precompile(a, [c.version for c in todo], deadline)
        if self.backend.prepares:                   # the points' checks at once, where it can
            with self.clock.phase("check"):
                self.backend.prepare([c.version for c in todo], self.ws, deadline)
        late = self._costly
        for i, c in enumerate(todo):
            row = {"label": c.version.label, "params": c.params, "description": c.result.description}
            info.append(row)
            self.ws.write(c.version.files)
            self._guard()
            # + 1: what the full comparison needs
            share = self._share(deadline, len(todo) - i + 1,
                                self._after_s(plan, len(todo) - i - 1, len(todo) if len(todo) > 1 else 0),
                                self._point_s(plan, check=True))
            try:
                # screened unchecked: its compile verdict only (a capture that needs a run waits for
                # its check, when it is confirmed); else checked now (first, where its capture needs it)
                checked = None if late else self.steps.check_first(c.version, share)
                cap = None if checked is not None and not checked.passed else \
                    self.steps.capture(c.version, share, observed=checked, run=not late)
                if cap is not None and cap.timed_out:
                    row["result"], row["failure"] = f"{budget_mod.SKIPPED}: {cap.error}", "budget"
                    continue
                if cap is not None and not cap.ok and checked is None:
                    row["result"], row["failure"] = f"does not compile: {cap.error}", "compile"
                    continue
                why = self._no_op(a, c.version, cap, deadline)
                if why:
                    row["result"], row["failure"] = f"no-op: {why}", "no-op"
                    continue
                if late:
                    row["verification"] = "checked if confirmed"
                    passing.append(c)
                    continue
                ver = checked or self.steps.verify(c.version, share)
            except MeasurementTimeout as e:
                # killed at its share of the iteration's time: no verdict on the point, not a crash
                row["result"], row["failure"] = f"{budget_mod.SKIPPED}: {e.one_line()}", "budget"
                continue
            except CandidateCrash as e:
                row["result"], row["failure"] = f"crash: {e.one_line()}", "crash"
                continue
            row["verification"] = ver.summary
            if not ver.passed:
                row["result"], row["failure"] = "correctness FAIL", "correctness"
                continue
            self._verified[c.version.digest] = ver
            passing.append(c)
        for i in plan.skipped:
            c = cands[i]
            info.append({"label": c.version.label, "params": c.params, "description": c.result.description,
                         "result": budget_mod.SKIPPED, "failure": "budget"})
        if plan.skipped:
            self.echo("  skipped (budget): " + ", ".join(cands[i].result.description for i in plan.skipped))
        self.ws.write(a.files)
        ranked = list(passing)
        if len(passing) > 1:
            screened = []
            runs_a = None
            if late:        # one run of A per screening round, then each point's own
                share = self._share(deadline, len(passing) + 2, self._after_s(plan, 0, len(passing)),
                                    self._point_s(plan, check=False))
                runs_a = self.steps.measure([a], share, plan.screen_rounds)[a.label]
            for i, c in enumerate(passing):
                row = next(r for r in info if r["label"] == c.version.label)
                share = self._share(deadline, len(passing) - i + 1, self._after_s(plan, 0, len(passing) - i - 1),
                                    self._point_s(plan, check=False))
                try:
                    runs = self.steps.measure([c.version] if late else [a, c.version], share, plan.screen_rounds)
                except MeasurementTimeout as e:
                    row["result"], row["failure"] = f"{budget_mod.SKIPPED} in screening: {e.one_line()}", "budget"
                    continue
                except CandidateCrash as e:
                    row["result"], row["failure"] = f"crash in screening: {e.one_line()}", "crash"
                    continue
                except CorrectnessFailure as e:
                    row["result"], row["failure"] = f"correctness FAIL in screening: {e.one_line()}", "correctness"
                    continue
                # the guard applies to screening measurements too: an impossible point never wins
                pts, invalid, _why = self.steps.roofline(c.version, runs[c.version.label])
                if invalid:
                    row["result"], row["failure"] = "above the roof: " + "; ".join(invalid), "above-roof"
                    continue
                base = runs_a if runs_a is not None else runs[a.label]
                cmp = stats.compare({k: (base[k], runs[c.version.label][k]) for k in base},
                                    noise_floor=self.noise_floor())
                row["screen_ratio"], row["screen_ms"] = cmp.ratio, cmp.candidate_ms
                screened.append((cmp.ratio, c, cmp))
            screened.sort(key=lambda x: x[0])
            # the winner, then only points that screened faster than A: a slower one is no fallback
            ranked = [c for i, (ratio, c, _) in enumerate(screened) if i == 0 or ratio < 1.0]
            clear = self._clear_regression(screened[0][2]) if screened and late else None
            if clear is not None:
                # costly runs: even the best setting is a clear regression against A; its check and
                # confirmation could only revert it too
                best = screened[0][1]
                for r in info:
                    r["chosen"] = r["label"] == best.version.label
                record.update(sweep=info, comparison=screened[0][2].to_json(), correctness="-", status="revert",
                              decision=decide_mod.reject("regression", f"every screened setting is slower than the "
                                                         f"kept version; the best, {best.result.description}: "
                                                         f"{clear.reason} (one screening round; not checked, not "
                                                         "confirmed: a confirmation decides keeps)").to_json())
                self._screened_latency(record)
                return [], info
        record["sweep"] = info
        if not ranked:
            kinds = {r.get("failure") for r in info}
            rule = next(k for k in ("crash", "above-roof", "correctness", "compile", "budget", "no-op") if k in kinds)
            head = ("every sweep point compiles to the kept version's machine code (none timed): " if kinds == {"no-op"}
                    else "no sweep point passed its checks: ")
            d = decide_mod.reject(rule, head + "; ".join(
                f"{r['params']}: {r.get('result')}" for r in info), status="crash" if rule == "crash" else "revert")
            record["decision"], record["status"] = d.to_json(), d.status
            # a check that failed says FAIL; otherwise nothing was established ('-' in the table)
            record["correctness"] = "FAIL" if kinds & {"correctness", "compile"} else "-"
            return [], info
        for r in info:
            r["chosen"] = r["label"] == ranked[0].version.label
        self.backend.retain([a, *(c.version for c in ranked)])
        return ranked, info

    def _no_op(self, a: Version, v: Version, cap, deadline: proc.Deadline) -> str | None:
        """Why sweep point ``v`` is a no-op (its capture's machine code and launch equal the kept
        version's), or None: it is not screened (a screening run costs a run of the bench command)."""
        if self.measure_no_ops or cap is None or not cap.ok:
            return None
        cap_a = self.steps.capture(a, deadline)
        if cap_a is None or not cap_a.ok:
            return None
        return no_op(ir_diff(cap_a.path, cap.path), outside_changed=changed_outside_kernel(
            a.files, v.files, self.s.kernel_file, self.s.function))

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
        mine = {p.replace("/", "__") for p in files} | ({"candidate.diff"} if files else set())
        for f in idir.glob("*"):        # an earlier confirmation's files (the sweep's points stay in point-<i>/)
            if f.is_file() and f.name not in mine:
                f.unlink()
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
        if record["status"] == "crash" and record.get("correctness") != "FAIL":
            record["correctness"] = "-"      # the candidate did not finish: its correctness is not established
        record["seconds"] = round(deadline.elapsed(), 3)
        record["step_costs"] = self.clock.to_json()
        done = [c["s"] for c in self.clock.compiles if c["ok"]]
        if done:                 # later steps plan with a candidate's compile, not the baseline's capture run
            record["costs"] = {**(record.get("costs") or {}), "compile_s": round(max(done), 3)}
        checked = (record["step_costs"].get("check") or {}).get("s")
        if checked and record.get("verification"):     # a step's checks (a sweep's at once): what the next plans with
            record["costs"] = {**(record.get("costs") or {}), "verify_s": round(checked, 3)}
        self.led.append(record)
        self.steps.hook("after_record", {"iteration": record["iteration"], "runner": self, "record": record})
        try:
            self.backend.retain([keep] if keep is not None else [a])
        except Exception:
            pass
        return record


def _best_confirmation(tried: list) -> tuple:
    """Of the confirmed candidates ``(candidate, decision, record)``: the first that improved,
    else the fastest kept one, else the screened winner (its rejection is the row)."""
    for t in tried:
        if t[1] is not None and t[1].improved:
            return t
    kept = [t for t in tried if t[1] is not None and t[1].status == "keep"]
    if kept:
        return min(kept, key=lambda t: t[2]["comparison"]["ratio"])
    return tried[0]

