"""The diagnose-and-optimise loop: the baseline, then diagnose -> choose (``loop.choose``) ->
evaluate (``loop.evaluate``) -> decide (``loop.decide``) until a stop rule fires; an
interrupted iteration is closed by ``loop.recover``.

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
the full comparison; if it loses there, the next point that screened faster than ``A`` is
confirmed while time remains.  Every iteration runs under a time budget (default 10 min),
planned ahead (``loop.budget``, from what the baseline's check and runs cost): points that do
not fit are ``skipped (budget)``, and a step that cannot fit at all stops the loop (rule
``budget``) instead of crashing; a hang is killed and recorded as a crash.  Any exception leaves the tree on ``A``'s commit with a
``crash`` row; a process that dies outright leaves a ``begin`` record (the candidates are
saved before it is written) that ``--resume`` turns into a crash row (``loop.recover``).
"""
from __future__ import annotations

import concurrent.futures as cf
import math
import re
import statistics
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from . import budget as budget_mod
from . import decide as decide_mod
from . import proc, stats
from .backends import Backend, Verification, Version, Workspace
# Candidate, Choice, transform_key: re-exported for callers of runner.*
from .choose import Candidate, Choice, choose, row_label, transform_key  # noqa: F401
from .diagnosis import DiagnoseContext, Diagnoser, EngineDiagnoser, LoopDiagnosis, committed_ledgers, loop_calibration
from .errors import LoopError
from .evaluate import Evaluation, Steps, guard_info
from . import compile_pool
from . import spares as spares_mod
from .ceiling import ensure_ceiling
from .costs import StepClock
from .evidence import capture_sources, changed_launch_host, changed_outside_kernel
from .beam import UNPROMISING, Beam, promising
from .frontier import DEFAULT_LOOKAHEAD, lookahead_choice
from .integrations import CaptureResult, capture_version
from ..ledger import Ledger
from ..ledger import short_text as _short
from .recover import recover  # noqa: F401  (re-exported: runner.recover)
from .session import Session
from ..output import prog

HOOK_POINTS = ("before_apply", "after_apply", "after_verify", "after_measure", "after_commit", "after_record")
MAX_ITERATIONS = decide_mod.MAX_ITERATIONS
DEFAULT_BEAM = 3              # frontier width when the loop goes on past small steps (loop.beam)
BASELINE_CAP_S = 1800.0     # the baseline's hang guard (its time is checked against --budget after it)


@dataclass
class LoopOptions:
    """The loop's settings (stop rules, budget, rounds, sweep, beam, capture ...), stored in the ledger's setup record
    and validated on construction."""
    max_iterations: int = MAX_ITERATIONS
    iteration_budget_s: float = 600.0
    rounds: int | None = None           # None: fitted to --budget from the measured run time (budget.fitted_rounds)
    keep_going: bool = False
    max_sweep: int | None = None        # None: fitted to --budget from the measured run time (budget.fitted_sweep)
    screen_rounds: int = 1
    capture: bool = True
    archs: list[str] = field(default_factory=lambda: ["sm_90"])
    capture_args: list[str] = field(default_factory=list)
    capture_workload: str | None = None                 # arguments for captures from this workload (i15)
    only: list[str] = field(default_factory=list)       # playbook ids the loop may try (empty: all)
    skip: list[str] = field(default_factory=list)
    noise_floor: float = stats.DEFAULT_NOISE_FLOOR
    noise_source: str = "default"                      # where noise_floor came from (loop.calibrate)

    # given for one invocation only: a later plain --resume does not inherit them silently
    PER_RUN = ("keep_going", "time_limit_s", "yield_flat")
    until_roof: float | None = None     # go on past small steps while below this fraction of the roof
    beam: int | None = None             # frontier width (loop.beam); None: 3 under --until-roof/--continue, else 1
    lookahead: float = DEFAULT_LOOKAHEAD  # a structural step at most this much slower stays a frontier (loop.frontier)
    time_limit_s: float | None = None   # this invocation's wall time: no step starts that would not fit
    yield_flat: bool = False            # stop (rule unpromising) when no move is expected to beat the best member:
    #                                     a campaign's other kernels get the time first (this invocation only)

    def __post_init__(self):
        if not 1 <= int(self.max_iterations) <= MAX_ITERATIONS:
            raise LoopError(f"--max-iterations must be in 1..{MAX_ITERATIONS} (the recipe's hard stop), "
                            f"not {self.max_iterations}")
        if self.rounds is not None and self.rounds < 1:
            raise LoopError("--rounds must be at least 1")
        if not float(self.iteration_budget_s) > 0:          # nan too
            raise LoopError("--budget must be a positive number of seconds")
        if self.time_limit_s is not None and not float(self.time_limit_s) > 0:
            raise LoopError(f"--time-limit must be a positive number of seconds, not {self.time_limit_s}")
        if not 0.0 <= float(self.lookahead) < 1.0:
            raise LoopError(f"--lookahead must be a fraction in [0, 1) (0: off), not {self.lookahead}")
        if self.beam is not None and not 1 <= int(self.beam) <= 16:
            raise LoopError(f"--beam must be a width in 1..16 (1: the greedy walk), not {self.beam}")
        if self.until_roof is not None and not 0.0 < float(self.until_roof) <= 1.0:
            raise LoopError(f"--until-roof must be a fraction in (0, 1], not {self.until_roof}")
        self.only = [x.upper() for x in self.only]
        self.skip = [x.upper() for x in self.skip]

    @property
    def beam_width(self) -> int:
        """The frontier width: ``--beam`` when given, else DEFAULT_BEAM under ``--until-roof`` / ``--continue``, else
        1 (the greedy walk)."""
        if self.beam is not None:
            return int(self.beam)
        return DEFAULT_BEAM if self.until_roof is not None or self.keep_going else 1

    def to_json(self) -> dict:
        """Every field, as the ledger's setup record stores it."""
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None, **over) -> "LoopOptions":
        """Options from a ledger's stored fields (unknown keys and the per-run ones dropped), with ``over``'s non-None
        values on top."""
        known = {k: v for k, v in dict(d or {}).items() if k in cls.__dataclass_fields__ and k not in cls.PER_RUN}
        known.update({k: v for k, v in over.items() if v is not None})
        return cls(**known)


@dataclass
class LoopResult:
    """How a loop ended: its stop rule and reason, the kept commit, baseline and final latency, the table rows, and
    where its branch and worktree are."""
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
    simulated: bool = False                                 # latencies from a simulation spec, not a GPU
    paired_ratio: float | None = None                       # final / baseline as the kept steps' paired ratios

    @property
    def speedup(self) -> float | None:
        """Baseline over final latency as the kept steps' paired comparisons give it (``Ledger.paired_ratio``), else
        as the two sittings measured them; None without either."""
        if self.paired_ratio:
            return 1.0 / self.paired_ratio
        return self.sittings_speedup

    @property
    def sittings_speedup(self) -> float | None:
        """Baseline over final latency, each from its own sitting; None without both."""
        if self.baseline_ms and self.final_ms:
            return self.baseline_ms / self.final_ms
        return None

    def to_json(self) -> dict:
        """The result as JSON; a simulated ratio goes under ``simulated_speedup`` and ``speedup`` is None."""
        d = dict(self.__dict__)
        # a simulated ratio is the spec's number: never under the key an agent reports as a gain
        d["speedup" if not self.simulated else "simulated_speedup"] = self.speedup
        d["sittings_speedup"] = None if self.simulated else self.sittings_speedup
        if self.simulated:
            d["speedup"] = None
        return d


class _Stop(Exception):
    def __init__(self, rule: str, reason: str, manual: list[dict] | None = None):
        super().__init__(reason)
        self.rule, self.reason, self.manual = rule, reason, manual or []


# a module that defines (or imports) CAPTURE_SPECS: its compile may need no recorded launch
_SPECS = re.compile(r"^\s*CAPTURE_SPECS\s*[:=]|^\s*(from|import)\b.*\bCAPTURE_SPECS\b", re.M)


def _baseline_fails(ver: Verification) -> LoopError:
    return LoopError(f"the unchanged kernel fails its correctness check: {ver.summary}",
                     hint="the loop needs a correct baseline; fix the kernel or the reference first")


class Runner(Evaluation, Steps):
    """The loop: the baseline, the stop rules, the iteration cycle; the ``Steps`` an ``Evaluation``
    asks for (it owns the backend, the captures and compiles, the step's clock)."""

    def __init__(self, session: Session, backend: Backend, ledger: Ledger, *, diagnoser: Diagnoser | None = None,
                 transforms: Mapping[str, Any] | None = None, options: LoopOptions | None = None,
                 hooks: Mapping[str, Callable[[dict], None]] | None = None, echo: Callable[[str], None] | None = None):
        Evaluation.__init__(self, self)
        self.s = session
        self.backend = backend
        self.led = ledger
        self.git = session.git()
        self.ws = Workspace(session.worktree, session.state_dir, session.allowed, origin=session.root,
                            kernel_file=session.kernel_file)
        self.diagnoser = diagnoser or EngineDiagnoser()
        self._transforms = transforms
        self.opt = options or LoopOptions()
        self.beam = Beam(self, self.opt.beam_width) if self.opt.beam_width > 1 else None
        bad = sorted(set(hooks or {}) - set(HOOK_POINTS))
        if bad:
            raise LoopError(f"internal: unknown hook point(s) {', '.join(bad)}")
        self.hooks = dict(hooks or {})
        self.echo = echo or (lambda _s: None)
        self.started = time.monotonic()         # --time-limit counts from here (this invocation)
        self.captures: dict[str, CaptureResult] = {}
        self.clock = StepClock()                # the current step's cost split (loop.costs)
        self._compile_cut: dict[str, CaptureResult] = {}   # compiles the clock killed (loop.compile_pool)
        self._compile_spares: spares_mod.Spares | None = None   # compile children started ahead (start)
        self._needs_run: dict[str, str] = {}               # digest -> why its compile could not capture it
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
        """The transforms the loop may apply: those given, else the registry (imported on first use)."""
        if self._transforms is None:
            from ..transforms import TRANSFORMS
            self._transforms = TRANSFORMS
        return self._transforms

    def hook(self, point: str, ctx: dict) -> None:
        """Call the user's hook for ``point`` (``Steps.hook``), if one is set."""
        fn = self.hooks.get(point)
        if fn is not None:
            fn(ctx)

    def kept_version(self) -> Version:
        """The version of the last kept iteration."""
        return self.version_of(self.led.last_kept())

    def version_of(self, rec: dict | None) -> Version:
        """The kept version a record names (None: the start commit)."""
        if rec is None:
            commit, applied = self.s.start_commit, ()
        else:
            commit, applied = rec["commits"]["kept"], tuple(rec.get("applied") or ())
        files = {p: self.git.show(commit, p) for p in self.s.allowed}
        return Version(f"iter-{rec['iteration']}" if rec and rec["iteration"] else "baseline", files, commit, applied)

    @property
    def observing(self) -> bool:
        """The backend can record the launches of its check run (command mode): a version whose
        capture needs a run of the test command gets it from its check, never from a second run.
        Not with --capture-workload (the user named where the arguments come from)."""
        return (bool(self.backend.observes) and self.capture_off_reason is None
                and not self.opt.capture_workload)

    def capture(self, v: Version, deadline: proc.Deadline | None, *,
                 observed: Verification | None = None, run: bool = True) -> CaptureResult | None:
        """``v``'s capture: from its compile (a candidate of the step, against the kept version's
        recorded launch: ``precompile``), from the launch its observed check recorded (``observed``),
        else from a run of its own (``capture_version``: specs, a workload, or the test command in
        run mode; ``run=False``: None instead, in command mode)."""
        if self.capture_off_reason:
            return None
        ref = self._compile_ref
        if v.digest not in self.captures and ref is not None and v.digest != ref.digest \
                and v.digest not in self._compile_cut and v.digest not in self._needs_run:
            self.precompile(ref, [v], deadline)
        if v.digest in self._compile_cut:       # cut short by the clock: no verdict, tried again later
            return self._compile_cut.pop(v.digest)
        if v.digest in self.captures:
            return self.captures[v.digest]
        if not run and self.observing and observed is None:
            return None
        tried = []
        if observed is not None:
            res, why = self._capture_from_check(v, observed, deadline)
            if res is not None:
                return res
            tried.append(why)
        sources = capture_sources(self.s.backend, self.opt.capture_workload, kernel_file=self.s.kernel_path)
        if observed is not None and observed.observed.get("importers") and "command" in sources:
            # the observed check imported cuTile and never launched the kernel: a run-mode capture of
            # the same command would not compile it either
            sources.pop("command")
        with self.ws.materialize(v), self.clock.phase("capture"):
            res = capture_version(self.s.kernel_path, self.s.kernel, v.digest, self.s.state_dir / "captures",
                                  archs=self.opt.archs, args=self.opt.capture_args, deadline=deadline,
                                  cwd=self.ws.root, env=self.ws.env(v), sources=self.ws.remap(sources))
        res.tried = tried + list(res.tried)
        if not res.timed_out:             # a capture cut short by the clock is tried again
            self.captures[v.digest] = res
        return res

    def _capture_from_check(self, v: Version, ver: Verification,
                            deadline: proc.Deadline | None) -> tuple[CaptureResult | None, str]:
        """Compile ``v`` ahead of time with the arguments of the launch its observed check recorded
        (``CaptureResult.source`` ``check-run``); (None, why) when the check recorded none."""
        block, why = self.backend.launch_block(ver, self.s.function)
        if block is None:
            return None, why
        specs = {a["name"]: a["spec"] for a in block["args"] if a.get("spec")}
        self._compile([(v, self._job(v, specs, block))], deadline, source="check-run")
        if v.digest in self._compile_cut:
            return self._compile_cut.pop(v.digest), ""
        res = self.captures.get(v.digest)
        if res is not None and res.ok:
            return res, ""
        # the version ran its check, so its kernel compiles: a failed AOT compile from the recorded launch
        # (or none: it crashed) says nothing against it, and the run-based capture is tried
        self.captures.pop(v.digest, None)
        return None, ("the compile from the check run's launch failed: "
                      + (res.error if res is not None else self._needs_run.get(v.digest, "no verdict")))

    def check_first(self, v: Version, deadline: proc.Deadline) -> Verification | None:
        """Command mode: when ``v``'s capture needs a run of the test command (its compile cannot
        reuse the kept version's launch: none recorded, or a change outside the kernel), its check
        runs first, observed, and the capture takes its launch (``capture(observed=)``); returns
        that check.  When the compile needs no run, the check runs while it compiles (the check on
        the GPU, the compile in a CPU child; ``_verified`` holds the check) and None is returned,
        as when the check already ran."""
        if not self.observing or v.digest in self._verified:
            return None
        ref = self._compile_ref
        todo = ref is not None and v.digest != ref.digest and v.digest not in self._needs_run \
            and v.digest not in self.captures and v.digest not in self._compile_cut
        if todo and (self.opt.capture_args or self._recorded_launch(ref, v)[0] is not None):
            self._verified[v.digest] = self._verify_while(lambda: self.precompile(ref, [v], deadline), v, deadline)
            return None
        if todo:
            self.precompile(ref, [v], deadline)
        if v.digest in self.captures or v.digest in self._compile_cut:
            return None
        ver = self.verify(v, deadline, observe=True)
        self._verified[v.digest] = ver
        return ver

    def _verify_while(self, work: Callable[[], None], v: Version, deadline: proc.Deadline) -> Verification:
        """``v``'s check, with ``work`` (its compile) running beside it in a thread."""
        ex = cf.ThreadPoolExecutor(1)
        fut = ex.submit(work)
        try:
            ver = self.verify(v, deadline)
        except Exception:
            cf.wait([fut])          # the step records this failure next: the compile's verdict lands first
            raise
        finally:
            ex.shutdown(wait=False)  # an interrupt does not wait for it
        fut.result()
        return ver

    def _recorded_launch(self, a: Version, v: Version) -> tuple[dict | None, dict | None]:
        """(specs, launch) ``v``'s compile takes from the launch ``a``'s capture recorded; (None,
        None) when none was recorded, --capture-arg gives the specs, or ``v`` changed code outside
        the kernel function (its launch may differ)."""
        cap_a = self.captures.get(a.digest)
        base = cap_a.path if cap_a is not None and cap_a.ok else None
        specs = None if self.opt.capture_args else compile_pool.recorded_specs(base)
        if specs is None or changed_outside_kernel(a.files, v.files, self.s.kernel_file, self.s.function):
            return None, None
        return specs, compile_pool.launch_block(base)

    def _job(self, v: Version, specs: dict | None, launch: dict | None) -> dict:
        return compile_pool.job_json(
            root=self.ws.root, kernel_file=self.s.kernel_file, kernel=self.s.kernel, files=v.files,
            name=v.digest[:16], out_dir=self.s.state_dir / "captures", archs=self.opt.archs,
            args=self.opt.capture_args, specs=specs, launch=launch,
            env=self.ws.env(None), cwd=self.ws.root)     # the version's files come as overrides

    def precompile(self, a: Version, versions, deadline: proc.Deadline | None) -> None:
        """Compile the versions not captured yet, concurrently, in child processes
        (``loop.compile_pool``): their captures (and so their IR diffs) come from that compile,
        with the launch ``a``'s run recorded where the change stays inside the kernel function.
        What the compile cannot capture (no recorded launch, no specs) is left to a run: in
        command mode the version's observed check (``check_first``), else ``capture``'s own."""
        todo = [v for v in versions if v.digest not in self.captures and v.digest not in self._needs_run]
        if self.capture_off_reason or not todo:
            return
        jobs = []
        for v in todo:
            specs, launch = self._recorded_launch(a, v)
            if specs is None and not self.opt.capture_args and not _SPECS.search(v.files.get(self.s.kernel_file, "")):
                # nothing to compile it with: no child is started to find that out
                self._needs_run[v.digest] = "no recorded launch of the kept version applies, and no CAPTURE_SPECS"
                continue
            jobs.append((v, self._job(v, specs, launch)))
        self._compile(jobs, deadline)

    def _compile(self, jobs: list[tuple[Version, dict]], deadline: proc.Deadline | None,
                 source: str | None = None) -> None:
        """Run the compile jobs at once.  A verdict (either way) lands in ``captures``; a compile
        the clock cut in ``_compile_cut`` (no verdict, tried again later); one without specs to
        compile with in ``_needs_run`` (a run captures it).  ``source``: what a success records."""
        by_name = {job["name"]: v for v, job in jobs}
        for job, reply, t0, t1 in compile_pool.compile_versions([job for _, job in jobs], deadline=deadline,
                                                                 pool=self._compile_spares):
            v = by_name[job["name"]]
            self.clock.add("compile", t0, t1)
            ok = bool(reply.get("ok"))
            res = CaptureResult(ok, Path(reply["path"]) if reply.get("path") else None,
                                error=reply.get("error") or "", seconds=t1 - t0,
                                source=(source if ok and source else reply.get("source")) or "",
                                timed_out=reply.get("kind") == "timeout")
            fallback = "" if ok or reply.get("kind") in ("compile", "timeout") else (reply.get("error") or "")
            c = compile_pool.Compiled(v.label, v.digest, res, t0, t1, fallback=fallback, warm=reply.get("warm") or {},
                                      spare=bool(reply.get("spare")))
            self.clock.compiles.append(c.to_json())
            if res.timed_out:
                self._compile_cut[v.digest] = res
            elif fallback:
                self._needs_run[v.digest] = fallback
            else:
                self.captures[v.digest] = res

    def verify(self, v: Version, deadline: proc.Deadline, *, observe: bool = False):
        """The backend's correctness check of ``v``, timed as the step's ``check`` phase (``Steps.verify``)."""
        with self.clock.phase("check"):
            if observe:
                return self.backend.verify(v, self.ws, deadline, observe=True)
            return self.backend.verify(v, self.ws, deadline)

    def measure(self, versions, deadline: proc.Deadline, rounds: int):
        """Interleaved timing of ``versions`` by the backend, its cost split on the step's clock (``Steps.measure``)."""
        reqs = self.backend.requests
        n0 = len(reqs) if reqs is not None else 0
        try:
            with self.clock.phase("time", runs=len(versions) * rounds):
                return self.backend.measure(versions, self.ws, deadline, rounds)
        finally:
            if reqs is not None:       # where the timing's wall time goes: the requests, the worker's share
                self.clock.count("time", requests=len(reqs) - n0, worker_s=sum(w for _, w in reqs[n0:]))

    def _points_of(self, rec: dict | None) -> list[dict]:
        if not rec:
            return []
        return [p for p in (rec.get("roofline") or {}).values() if isinstance(p, dict)]

    def roofline(self, v: Version, runs: Mapping[str, list[stats.RunStat]]) -> tuple[dict, list[str], str | None]:
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

    def _calibration(self):
        """This ledger's measured steps and the repository's committed ledgers (read once)."""
        if not hasattr(self, "_committed"):
            own = self.led.path.resolve()
            self._committed = [p for p in committed_ledgers(self.s.root) if p.resolve() != own]
        return loop_calibration(self.led, self._committed)

    def _kept_record(self, digest: str | None = None) -> dict | None:
        """The kept record the loop stands on: the one measured for ``digest`` (a beam member is
        diagnosed with its own roofline points, not the last keep's), else the beam's best member,
        else the last keep (the greedy walk's tip)."""
        keeps = [r for r in self.led.iterations if r.get("status") == "keep"]
        if digest is not None:
            mine = [r for r in keeps if r.get("digest") == digest]
            if mine:
                return mine[-1]
        if self.beam is not None and keeps:
            return self.beam.best().record
        return self.led.last_kept()

    def _diagnose(self, v: Version, n: int) -> LoopDiagnosis:
        cap = self.capture(v, proc.Deadline(self.budget_s()))
        kept = self._kept_record(v.digest)
        ctx = DiagnoseContext(path=self.s.kernel_path, kernel=self.s.kernel, source=v.files[self.s.kernel_file],
                              capture=cap.path if cap and cap.ok else None, arch=self.opt.archs[0],
                              tried=dict(self.led.tried()), points=self._points_of(kept),
                              primary=(self.backend.configs() or [None])[0],
                              workload_info=self.backend.workload_info(), iteration=n,
                              calibration=self._calibration())
        d = self.diagnoser.diagnose(ctx)
        if cap is not None and not cap.ok:
            d.notes.insert(0, f"capture of the kept version failed: {cap.error}")
        return d

    # ----------------------------------------------------------------------------------
    # choosing

    def choose(self, diag: LoopDiagnosis, a: Version) -> tuple[Choice | None, list[dict], list[str]]:
        """The next automatic step (``loop.choose``), against the ledger's tried candidates."""
        return choose(diag, a, kernel_file=self.s.kernel_file, kernel=self.s.kernel, transforms=self.transforms,
                      attempted=self.led.attempted(), only=self.opt.only, skip=self.opt.skip,
                      max_sweep=self.max_sweep(), untimed=self.untimed)

    def untimed(self, a_files: Mapping[str, str], b_files: Mapping[str, str]) -> str | None:
        """Why the backend would not time the change from ``a_files`` to ``b_files``: a change outside the kernel
        where the backend replays bare launches (``Backend.host_untimed``); None when it would."""
        why = self.backend.host_untimed()
        if why and changed_launch_host(a_files, b_files, self.s.kernel_file, self.s.kernel):
            return why
        return None

    # ----------------------------------------------------------------------------------
    # the loop

    def start(self) -> LoopResult:
        """Iteration 0 (the baseline, no code change), then the loop."""
        # compile children started now have done their imports by the first step (loop.spares)
        width = (self.opt.max_sweep or budget_mod.DEFAULT_SWEEP) + 1     # a sweep and its kept version
        n = spares_mod.wanted(width) if self.capture_off_reason is None else 0
        if n:
            self._compile_spares = compile_pool.spares(self.ws.env(None), self.ws.root, n)
        self.backend.keep_spares(self.ws, spares_mod.wanted(width))
        try:
            if not self.led.iterations:
                self.baseline()
            else:
                self.backend.resume(self.led)
            return self.run()
        finally:
            if self._compile_spares is not None:
                self._compile_spares.close()
                self._compile_spares = None

    def baseline(self) -> dict:
        """Iteration 0: capture, check and time the unchanged kernel (whole, not cut by the iteration budget), fit
        rounds and sweep width to its costs, and record it."""
        n = 0
        a = Version("baseline", self.ws.current(), self.s.start_commit, ())
        self.led.append({"type": "begin", "iteration": n, "base_commit": a.commit, "base_digest": a.digest})
        # the baseline is measured whole, never cut by the iteration budget: what it costs is what
        # the budget is then checked against (``run`` refuses a budget too small for one step)
        deadline = proc.Deadline(max(self.opt.iteration_budget_s, BASELINE_CAP_S))
        self.clock, self._compile_ref = StepClock(), None
        self.echo("iteration 0: baseline (no code change)")
        try:
            ceiling = ensure_ceiling(self.backend, self.echo)     # the target, before the baseline
            # command mode: one run of the test command checks the kernel and records its launch,
            # which the capture compiles from (no second run); else the capture, then the check
            observe = self.observing
            t0 = time.monotonic()
            ver = self.verify(a, deadline, observe=True) if observe else None
            t1 = time.monotonic()
            if ver is not None and not ver.passed:
                raise _baseline_fails(ver)
            cap = self.capture(a, deadline, observed=ver)
            t2 = time.monotonic()
            if cap is not None and not cap.ok:
                self.capture_off_reason = f"the unchanged kernel does not capture: {cap.error}"
                self.echo(f"  capture off: {cap.error} — diagnosing from the source only, no IR diffs")
            elif cap is not None:
                self.echo(f"  capture: {cap.source or 'ok'}" + (f" ({'; '.join(cap.tried)})" if cap.tried else ""))
            if ver is None:
                ver = self.verify(a, deadline)
                if not ver.passed:
                    raise _baseline_fails(ver)
            verify_s = (t1 - t0) if observe else time.monotonic() - t2
            # a replay backend's baseline check also ran the user's commands once: a candidate's check costs its own
            verify_s = self.backend.check_cost_s or verify_s
            t3 = time.monotonic()
            # without --rounds: one round first, whose run time fits the comparisons' rounds
            # (budget.fitted_rounds); the baseline itself then takes as many, or (costly runs: command
            # mode) stays at one: no decision uses its runs, every comparison times the kept version again
            first = self.opt.rounds or 1
            runs = self.measure([a], deadline, first)[a.label]
            run_s = (time.monotonic() - t3) / first
            rounds, rounds_why = (self.opt.rounds, "") if self.opt.rounds else \
                budget_mod.fitted_rounds(budget_mod.Costs(run_s=run_s), self.opt.iteration_budget_s)
            timed = first if self.opt.rounds or self._costly else rounds
            if timed > first:
                more = self.measure([a], deadline, timed - first)[a.label]
                runs = {c: rs + more.get(c, []) for c, rs in runs.items()}
            sweep, sweep_why = (self.opt.max_sweep, "") if self.opt.max_sweep else budget_mod.fitted_sweep(
                budget_mod.Costs(run_s=run_s), self.opt.iteration_budget_s, shared=self._costly)
            for why in (rounds_why, sweep_why):
                if why:
                    self.echo(f"  fitted to the budget: {why}")
            # what the budget planner plans every later iteration with (the user's commands, timed)
            costs = budget_mod.Costs(verify_s=verify_s, run_s=(time.monotonic() - t3) / timed,
                                     capture_s=(t2 - t1) if cap is not None else 0.0)
        except Exception as e:
            # a failure is recorded; an interrupt (Ctrl-C, SIGTERM) leaves the begin pending: --resume redoes it
            self.led.append({"type": "stop", "rule": "baseline-failed",
                             "reason": e.one_line() if isinstance(e, LoopError) else f"{type(e).__name__}: {e}"})
            raise
        pts, invalid, why = self.roofline(a, runs)
        guard = guard_info(pts, why, runs)
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
               "correctness": ver.correctness, "status": "keep", "entry": None, "applied": [],
               "base_commit": a.commit, "base_digest": a.digest, "digest": a.digest,
               "configs": configs, "verification": ver.to_json(), "roofline": pts,
               "roofline_note": why, "roofline_guard": guard, "classification": self._classification(pts),
               "workload_info": self.backend.workload_info(),
               "capture": cap.to_json() if cap else {"skipped": self.capture_off_reason},
               "costs": costs.to_json(), "step_costs": self.clock.to_json(), "ceiling": ceiling,
               "rounds": {"n": rounds, "baseline": timed, "given": bool(self.opt.rounds),
                          **({"why": rounds_why} if rounds_why else {})},
               "sweep": {"n": sweep, "given": bool(self.opt.max_sweep), **({"why": sweep_why} if sweep_why else {})},
               "decision": decide_mod.Decision("keep", "baseline", "iteration 0: the unchanged kernel").to_json(),
               "commits": {"base": a.commit, "candidate": None, "kept": a.commit},
               "seconds": round(deadline.elapsed(), 3)}
        self.led.append(rec)
        self.echo(f"  baseline {headline:.6f} ms over {len(configs)} configuration(s)")
        self._suite_bench("start", a)
        return rec

    def _suite_bench(self, when: str, v: Version, deferred: bool = False) -> None:
        """Replay backends: the user's bench command once at the start and once at the end, so start and
        final are in the suite's own numbers too (ledger records ``suite``); a replayed gain the suite does
        not show (beyond the noise) is reported.  A backend that defers the start (``defers_suite_start``)
        gets it at the end, just before the final run (``deferred``), and only when a step was kept."""
        done = self.led.of_type("suite")
        start = next((r for r in done if r["when"] == "start" and r.get("configs")), None)
        if not self.backend.suite:
            return
        if when == "start" and self.backend.defers_suite_start and not deferred:
            self.echo("  the bench command (start) runs at the end, beside the final version, if a step is kept")
            return
        if when == "end" and start is None and self.backend.defers_suite_start:
            base = self.version_of(next((r for r in self.led.iterations if r["iteration"] == 0), None))
            if base.digest != v.digest:
                self._suite_bench("start", base, deferred=True)
                start = next((r for r in self.led.of_type("suite") if r["when"] == "start" and r.get("configs")), None)
        if when == "end" and (start is None or start["digest"] == v.digest):
            return                     # nothing kept since the start: its numbers are the final ones
        if any(r["when"] == when and r.get("digest") == v.digest and r.get("configs") for r in done):
            return                     # a resumed loop that kept nothing new: measured already
        try:
            with self.clock.phase("time", runs=1):
                ms = self.backend.suite_bench(v, self.ws, proc.Deadline(self.opt.iteration_budget_s))
        except LoopError as e:
            self.led.append({"type": "suite", "when": when, "error": e.one_line()})
            self.echo(f"  the bench command ({when}) failed: {e.one_line()}")
            return
        if not ms:
            return
        rec: dict[str, Any] = {"type": "suite", "when": when, "version": v.label, "digest": v.digest, "configs": ms,
                               "median_ms": stats.headline_ms(ms.values()), **({"deferred": True} if deferred else {})}
        if when == "end":
            base = next((r for r in self.led.iterations if r["iteration"] == 0), None)
            kept = self.led.last_kept()
            if base and kept and base.get("latency_ms") and kept.get("latency_ms") and start.get("median_ms"):
                replayed = self.led.paired_ratio() or kept["latency_ms"] / base["latency_ms"]
                suite = rec["median_ms"] / start["median_ms"]
                rec["replay_ratio"], rec["suite_ratio"] = replayed, suite
                # always, not only on a disagreement: a step can trade one configuration for another (on an H100
                # approximate division: n=256 0.956x replayed and 0.935x by the suite, n=1024 1.016x and 1.053x)
                rec["by_config"] = self._suite_by_config(start["configs"], ms)
                if abs(math.log(suite / replayed)) > max(0.05, 3 * self.opt.noise_floor):
                    worst = max(rec["by_config"], key=lambda x: abs(math.log(x["suite"] / x["replayed"])), default=None)
                    rec["disagrees"] = (f"from start to final the replays measured a {1 / replayed:.3f}x speedup "
                                        f"and the suite's bench command {1 / suite:.3f}x" +
                                        (f" (most at {worst['test'].rsplit('::', 1)[-1]}: {1 / worst['replayed']:.3f}x and "
                                         f"{1 / worst['suite']:.3f}x)" if worst else ""))
                    self.echo(f"  warning: {rec['disagrees']}")
        self.led.append(rec)
        self.echo(f"  the bench command ({when}): {rec['median_ms']:.6f} ms over {len(ms)} configuration(s)")

    def _suite_by_config(self, start: Mapping[str, float], end: Mapping[str, float]) -> list[dict]:
        """Per recording whose test the suite's bench also timed: the replays' paired ratio and the suite's, final over
        start (where the two disagree, which configuration does)."""
        out = []
        for cfg, test in self.backend.suite_configs().items():
            replayed = self.led.paired_ratio(cfg)
            if replayed and start.get(test) and end.get(test):
                out.append({"config": cfg, "test": test, "replayed": replayed, "suite": end[test] / start[test]})
        return out

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
        pct, basis = decide_mod.roof_pct_of((self._kept_record() or {}).get("roofline"),
                                          simulated=self.led.simulated)
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
        """Append the stop record (rule, reason, manual entries left) to the ledger and say it."""
        self.led.append({"type": "stop", "rule": rule, "reason": reason, "manual": manual or [],
                         "iterations": len(self.led.decisions())})
        self.echo(f"stop: {reason}")

    def run(self) -> LoopResult:
        """Iterate until a stop rule fires (budget, time limit, escalation, exhaustion, the ledger's rules) and return
        the result; the suite's bench runs once more at the end."""
        manual: list[dict] = []
        try:
            self._check_budget()
            while True:
                chk = self.check_stop()
                if chk.stop:
                    raise _Stop(chk.rule, chk.reason)
                left = self.time_left()
                if left is not None and left <= 0:
                    raise _Stop("time-limit", f"--time-limit {self.opt.time_limit_s:g} s reached; go on with --resume")
                n = self.led.next_iteration()
                if self.git.dirty_files():
                    raise LoopError(f"the loop's worktree {self.s.worktree} changed outside the loop: "
                                    + ", ".join(self.git.dirty_files()[:5]),
                                    hint=f"record a manual edit with `{prog()} loop record`, or undo it there")
                self.clock = StepClock()        # the step's cost split starts with its diagnosis
                if self.beam is not None:
                    self._beam_step(n)
                    continue
                a = self.kept_version()
                with self.clock.phase("diagnose", runs=0):
                    diag = self._diagnose(a, n)
                if diag.escalate:
                    raise _Stop("escalate", f"the diagnosis says '{diag.bottleneck}': "
                                + ("; ".join(diag.reasons[:2]) or "a person should look")
                                + f" — handing over ({prog()} loop next shows the evidence)",
                                [r.to_json() for r in diag.recommendations if not r.automatic])
                with self.clock.phase("diagnose", runs=0):
                    choice, manual, skipped = self.choose(diag, a)
                    choice = lookahead_choice(self, a, choice, lambda fv: self.choose(diag, fv)[0])
                for sk in skipped:
                    self.echo(f"  skip {sk}")
                if choice is None:
                    extra = (f"; {len(manual)} manual entr{'y' if len(manual) == 1 else 'ies'} left: run "
                             f"`{prog()} loop next`") if manual else ""
                    raise _Stop("exhausted", "no automatic optimisation left to try" + extra, manual)
                self.iterate(n, a, choice, diag)
        except _Stop as st:
            if self.beam is not None and self.led.iterations:
                self.beam.finish()
            self._suite_bench("end", self.kept_version())
            self.record_stop(st.rule, st.reason, st.manual or manual)
            return self.result(st.rule, st.reason, st.manual or manual)

    def _beam_step(self, n: int) -> None:
        """One step of the beam (``loop.beam``): the best expected move over the frontier."""
        diags: dict[str, LoopDiagnosis] = {}

        def diagnose(v: Version) -> LoopDiagnosis:
            if v.digest not in diags:
                diags[v.digest] = self._diagnose(v, n)
            return diags[v.digest]

        with self.clock.phase("diagnose", runs=0):
            first, last = self.beam.moves(diagnose, n)
        moves = first or last
        if not moves:
            best = diagnose(self.version_of(self.beam.best().record))
            if best.escalate:
                raise _Stop("escalate", f"the diagnosis says '{best.bottleneck}': "
                            + ("; ".join(best.reasons[:2]) or "a person should look")
                            + f" — handing over ({prog()} loop next shows the evidence)",
                            [r.to_json() for r in best.recommendations if not r.automatic])
            raise _Stop("exhausted", f"no automatic optimisation left to try on any of the "
                        f"{len(self.beam.members())} frontier member(s)")
        top, best = moves[0], self.beam.best()
        if self.opt.yield_flat and not promising(top, best):
            raise _Stop(UNPROMISING, f"the best move left ({top.choice.rec.id} {top.choice.transform.name} on iteration "
                        f"{top.member.record['iteration']}) expects x{top.expected:.3f} of the baseline, no gain on the "
                        f"best version's x{best.est:.3f}: the time goes to kernels with more to gain first")
        mv = self.beam.pick(moves, n)
        a = self.beam.start_step(mv, n, stalled=mv is not moves[0])
        self.echo(f"  beam: {mv.kind} on iteration {mv.member.record['iteration']} (x{mv.member.est:.3f} of the "
                  f"baseline), expected x{mv.expected:.3f}; frontier "
                  + ", ".join(f"{m.record['iteration']}:x{m.est:.3f}" for m in self.beam.members()))
        self.iterate(n, a, mv.choice, diagnose(a))

    def _check_budget(self) -> None:
        """Refuse, before any iteration, a --budget too small for one step as the baseline measured it."""
        c, b = self.costs(), self.opt.iteration_budget_s
        need = budget_mod.min_budget_s(c)
        if need is not None and need > b:
            cap = f", one capture {c.candidate_capture_s:.1f} s" if c.candidate_capture_s else ""
            raise _Stop("budget", f"--budget {b:g} s cannot hold one step: the baseline measured one check at "
                        f"{c.verify_s:.1f} s and one run at {c.run_s:.1f} s{cap}; the smallest budget that works "
                        f"is {need} s: raise it with --budget {need}")

    def result(self, rule: str, reason: str, manual: list[dict] | None = None) -> LoopResult:
        """The ``LoopResult`` of the ledger as it stands, stopped by ``rule``."""
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
                          take=self.s.take_commands(kept["commits"]["kept"] if kept else None),
                          simulated=self.led.simulated, paired_ratio=self.led.paired_ratio() if kept else None)

    # ----------------------------------------------------------------------------------
    # one iteration

    def iterate(self, n: int, a: Version, choice: Choice, diag: LoopDiagnosis) -> dict:
        """One iteration: label the candidates, stop when the time left or the budget cannot hold one check and
        comparison, else evaluate them against ``a``."""
        rec = choice.rec
        sweep = len(choice.candidates) > 1
        for i, c in enumerate(choice.candidates):
            c.version = c.version.with_label(f"iter-{n}" + (f"/{i + 1}" if sweep else ""))
        tried = [{"transform": c.transform or choice.transform.name, "params": c.params} for c in choice.candidates]
        meta = {"entry": {"id": rec.id, "name": rec.name, "transform": choice.transform.name, "automatic": True},
                "diagnosis": {**diag.to_json(), "chosen": rec.to_json()},
                "tried": tried}
        if choice.transform.name != rec.transform:
            meta["entry"]["alternative_of"] = rec.transform
        composite = sorted({c.transform for c in choice.candidates if "+" in c.transform})
        if composite:
            meta["entry"]["composite"] = composite
        label = row_label(rec.id, rec.transform, choice.transform.name, choice.candidates)
        left, costs = self.time_left(), self.costs()
        need = costs.iteration_s(1, self.rounds())
        if left is not None and costs.known and need > left * budget_mod.MARGIN:
            # the last steps of a time-limited run are not measured with fewer rounds: stop instead
            pct, basis = decide_mod.roof_pct_of((self._kept_record() or {}).get("roofline"),
                                          simulated=self.led.simulated)
            at = f"; the kept version is at {pct:.0f}% of the {basis}" if pct is not None else ""
            raise _Stop("time-limit", f"--time-limit {self.opt.time_limit_s:g} s: {left:.0f} s left, and one check "
                        f"and comparison of {label} need about {need:.0f} s{at}; go on with --resume")
        plan = self.plan(len(choice.candidates))
        if not plan.fits:
            raise _Stop("budget", f"one check and one comparison of {label} need about "
                        f"{self.costs().iteration_s(1, 1):.0f} s, more than the iteration budget "
                        f"({self.opt.iteration_budget_s:g} s): raise it with --budget")
        self.echo(f"iteration {n}: {_short(label)}")
        return self.evaluate(n, a, choice.candidates, meta, label, plan=plan, clock=self.clock)

