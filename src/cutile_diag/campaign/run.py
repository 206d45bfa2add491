"""The campaign's run: the optimisation loop on each selected kernel, best expected gain first.

State: ``<out>/campaign.json`` (the plan, the selection, the overall time limit, and per
kernel its status — pending, running, paused (its loop stopped at its time share, or after
its baseline), done, crashed — its time share and its loop's result),
written only by the driver, after every change.  Every kernel's loop is ``loop.api.optimize``,
the entry point ``cutile-diag optimize`` uses: its own branch and worktree, its state under
``<out>/loops/<kernel>``.  ``--resume`` continues: a kernel left running (a killed campaign)
resumes its loop from its ledger; pending ones start.

Time: one overall ``--time-limit``; a kernel starting gets the time left times its expected
gain over the expected gains of the kernels not yet run (``time_share``), and at least what one
step of its loop costs (its baseline measured that) while that much is left: the best expected
gain first.  ``--baselines-first``: every kernel's baseline (iteration 0) is measured before any
loop takes a step, so each has its starting point even when the time runs out; then the steps.
A pass gives a loop at most a few steps (``share_bounds``); time left goes to further passes over the
paused loops (``passes``), ranked again by what their loops measured.
"""
from __future__ import annotations

import json
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..output import prog
from ..errors import CutileDiagError, UsageError
from ..ledger import LEDGER_FILE, Ledger, LedgerError
from ..loop import api
from ..loop import budget as budget_mod
from ..loop.git import Git, slug
from ..loop.session import owned_folder
from ..loop.beam import UNPROMISING
from .plan import CampaignPlan, KernelPlan

STATE_FILE = "campaign.json"
MAX_PASSES = 100           # passes of steps after the first (each must measure something): a guard
PASS_STEPS = 4             # at most this many steps of a loop a pass: between passes the kernels are ranked again
RESUME_S = 5.0             # a paused loop's start before its first step (worktree, its kept version's workers)
STEP_SLACK = 1.2           # the loop's estimate of its next step may exceed the ledger's average
TO_DO = ("pending", "running", "retry", "paused")       # the statuses of a kernel whose loop is still to run
Echo = Callable[[str], None] | None


def ratio_text(r: dict, spec: str = ".3f") -> str | None:
    """A loop result's start/final ratio as the campaign prints it; a simulated one is labelled
    (the simulation spec's number: nothing ran on a GPU, so it is never shown as a speedup)."""
    if r.get("speedup"):
        return f"{r['speedup']:{spec}}x"
    if r.get("simulated_speedup"):
        return f"{r['simulated_speedup']:{spec}}x simulated, not a speedup"
    return None


@dataclass
class Job:
    """One kernel's loop, everything a worker needs (JSON-able: it travels to Ray actors)."""
    name: str
    ref: str
    test_cmd: str | None
    bench_cmd: str | None
    counts: dict
    loops: str                                 # the loops' state root (--out of optimize)
    simulate: str | None = None                # a SimSpec file
    time_limit_s: float | None = None
    resume: bool = False
    options: dict = field(default_factory=dict)
    baseline_only: bool = False                # measure the baseline, then stop (--baselines-first)
    replay: bool = True                        # check and time on recorded launches (--no-replay: the commands)
    replay_dir: str | None = None              # the survey's recordings
    branch_prefix: str | None = None           # the loop's branch: PREFIX-<kernel>-<date> (--branch-prefix)


def short_of(baseline_only: bool) -> str:
    """Why a kernel is not started: no time left at all, or too little for one step of its loop."""
    return "no time left of --time-limit" if baseline_only else "too little of --time-limit left for one step"


def job_text(job: Job) -> str:
    """What a worker starts, as the progress lines say it."""
    if job.baseline_only:
        return "its baseline" + (" (resuming its loop)" if job.resume else "")
    return "resuming its loop" if job.resume else "loop"


def outcome_text(outcome: dict) -> str:
    """What a worker's loop ended with, as the progress lines say it."""
    r = outcome.get("result") or {}
    if outcome["status"] != "done":
        return f"crashed: {outcome.get('error')}"
    if r.get("stop_rule") == api.BASELINE_ONLY:
        return "baseline " + (f"{r['baseline_ms']:.6f} ms" if r.get("baseline_ms") else "not measured") \
            + "; its steps come after every baseline"
    if r.get("stop_rule") == api.AT_ROOF:
        return f"done: {r.get('stop_reason')}"
    return f"{r.get('stop_rule')}, " + (ratio_text(r) or "no speedup")


def run_job(job: Job, echo: Echo = None) -> dict:
    """Run one kernel's loop (in this process); returns {"status": done|crashed, "result"|"error"}."""
    try:
        opts = api.LoopOverrides.from_json(job.options)
        if job.time_limit_s is not None:
            opts.time_limit_s = job.time_limit_s
        if job.resume:
            m = api.Measurement()
        elif job.simulate:
            m = api.Measurement(simulate=job.simulate)
        else:
            c = job.counts or {}
            m = api.Measurement(test_cmd=job.test_cmd, bench_cmd=job.bench_cmd,
                                flops=[f"{k}={v}" for k, v in (c.get("flops") or {}).items()],
                                bytes=[f"{k}={v}" for k, v in (c.get("bytes") or {}).items()],
                                unit=":".join(c["unit"]) if c.get("flops") else None,
                                roof_device=c.get("device"), replay=job.replay, replay_dir=job.replay_dir)
        req = api.OptimizeRequest(kernel=job.ref, measurement=m, options=opts, resume=job.resume, out=job.loops,
                                  baseline_only=job.baseline_only, branch_prefix=job.branch_prefix)
        res = api.optimize(req, echo=echo)
        return {"status": "done", "result": res.to_json()}
    except CutileDiagError as e:
        return {"status": "crashed", "error": e.one_line()}


def resume_command(out: Path, root: Path) -> str:
    """``campaign --resume`` for the campaign in ``out``, as typed here: its --out named unless it is
    the default one of the repository this runs in."""
    default = (root / "cutile-diag-out" / "campaign").resolve()
    if Path(out).resolve() == default and Path.cwd().resolve() == root.resolve():
        return f"{prog()} campaign --resume"
    return f"{prog()} campaign --resume --out {shlex.quote(os.path.relpath(out))}"


def own_out(root: Path, out: Path) -> None:
    """The campaign's folder inside the user's repository stays out of git status (local exclude)."""
    if not (root / ".git").exists():
        return
    own = owned_folder(root, out / "x")
    if own:
        Git(root, (own,)).exclude(own)


class Campaign:
    """The driver's view of ``campaign.json``: the only writer of it and of the report."""

    def __init__(self, out: Path, data: dict):
        self.out, self.data = out, data
        self._started: float | None = None      # this run's clock (start_clock): saves count its time
        self._base = self._saved = 0.0
        self._ledgers: dict[Path, tuple[tuple, Ledger]] = {}     # read ledgers, by their file's size and mtime
        self.explore = False        # the loops that yielded (no promising move) run too: set by ``passes``

    @property
    def path(self) -> Path:
        """``campaign.json`` in the campaign's folder."""
        return self.out / STATE_FILE

    @classmethod
    def load(cls, out: Path) -> "Campaign":
        """The campaign in ``out``; a usage error when there is none."""
        p = out / STATE_FILE
        if not p.is_file():
            raise UsageError(f"no campaign in {out}", hint=f"start one: {prog()} campaign [--out DIR] -- CMD")
        return cls(out, json.loads(p.read_text()))

    @classmethod
    def create(cls, out: Path, plan: CampaignPlan, selected: list[KernelPlan], *, time_limit: float | None,
               simulate: dict[str, str] | None, options: dict, executor: dict,
               baselines_first: bool = False, replay: bool = True,
               branch_prefix: str | None = None) -> "Campaign":
        """A new campaign's state for the selected kernels (all pending), saved, with its folder kept out of git
        status."""
        c = cls(out, {"plan": plan.to_json(), "selected": [k.name for k in selected], "time_limit_s": time_limit,
                      "replay": replay,
                      "spent_s": 0.0, "simulate": simulate or {}, "options": options, "executor": executor,
                      "baselines_first": baselines_first, "branch_prefix": branch_prefix,
                      "kernels": {k.name: {"status": "pending", "attempts": 0} for k in selected}})
        own_out(Path(plan.root), out)
        c.save()
        return c

    def save(self) -> None:
        """Write ``campaign.json`` atomically (temporary file, then rename), with the time spent so far."""
        self.data["spent_s"] = self.spent()
        self._saved = time.monotonic()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    def resume_command(self) -> str:
        """The command line that continues this campaign."""
        return resume_command(self.out, Path(self.plan.root))

    @property
    def plan(self) -> CampaignPlan:
        """The plan, rebuilt from the state."""
        return CampaignPlan.from_json(self.data["plan"])

    def kernel(self, name: str) -> KernelPlan:
        """The plan entry of kernel ``name``."""
        return self.plan.kernel(name)

    def state(self, name: str) -> dict:
        """Kernel ``name``'s mutable state in ``campaign.json`` (status, attempts, result ...)."""
        return self.data["kernels"][name]

    def todo(self, *, baseline_only: bool = False) -> list[str]:
        """The kernels still to run, in rank order; ``baseline_only``: those without a baseline yet."""
        todo = [n for n in self.data["selected"] if self.state(n)["status"] in TO_DO
                and (self.explore or not self.state(n).get("unpromising"))]
        return [n for n in todo if self.ledger(n) is None or not self.ledger(n).iterations] if baseline_only else todo

    def phases(self) -> list[bool]:
        """``baseline_only`` of the first passes over the kernels: every baseline first, then the steps
        (``--baselines-first``), or one pass of whole loops."""
        return [True, False] if self.data.get("baselines_first") else [False]

    def passes(self, started: float, echo: Echo = None) -> Iterator[bool]:
        """``baseline_only`` of each pass an executor runs: the ``phases``, then, under a time limit, more passes of
        steps over the loops still paused while one of them can take a step in the time left and the last pass
        measured something.  A loop that stops before its share ends (its next step would not fit, or nothing is
        left to try) leaves the rest to the others: on an H100 a campaign ended with 60 of its 397 s unused and four
        of five kernels paused without a step.  A loop that yielded (no move expected to gain: ``unpromising``)
        waits until no other loop can take a step; then the passes ``explore``: those loops' other moves."""
        seen = 0                       # iterations measured before the last pass
        for baseline_only in self.phases():
            seen = self.progress()
            yield baseline_only
        for _ in range(MAX_PASSES):
            left, measured = self.time_left(started), self.progress()
            if left is None:
                # no time limit (a plain --resume): loops that yielded in a timed run go on now, once
                if self.explore or not self.yielded():
                    return
                self.explore = True
                yield False
                continue
            fits = self._fitting(left)
            if (measured == seen or not fits) and not self.explore and self.yielded():
                self.explore = True
                fits = self._fitting(left)
                if echo and fits:
                    echo(f"campaign: {left:.0f} s left: the loops that yielded go on with their less promising moves")
            elif measured == seen:
                return
            if not fits:
                return
            if echo:
                echo(f"campaign: {left:.0f} s left of --time-limit: another pass over {len(fits)} paused loop(s)")
            seen = measured
            yield False

    def _fitting(self, left: float) -> list[str]:
        """The kernels to do whose loop can take one step in ``left`` seconds."""
        return [n for n in self.todo() if (b := self.share_bounds(n)) is not None and b[0] <= left]

    def yielded(self) -> list[str]:
        """The kernels whose loop last stopped to give the time to others (rule ``unpromising``), still to do."""
        return [n for n in self.data["selected"] if self.state(n).get("unpromising") and self.state(n)["status"] in TO_DO]

    def progress(self) -> int:
        """Iterations measured over every selected kernel's loop (a pass that adds none ends the passes)."""
        return sum(len(led.iterations) for n in self.data["selected"] if (led := self.ledger(n)) is not None)

    def share_bounds(self, name: str) -> tuple[float, float] | None:
        """(least, most) time one pass gives the kernel's loop, from one step at the costs its ledger measured (with
        slack for a step dearer than the average, and the paused loop's start): at least one step, else it would
        stop before its first; at most ``PASS_STEPS``, so that the next pass ranks the kernels by what their loops
        measured (an H100 campaign gave a flat loop 105 s of six no-change steps while four kernels got no step).
        None before its baseline."""
        step = self.step_cost(name)
        if step is None:
            return None
        return STEP_SLACK * step + RESUME_S, PASS_STEPS * STEP_SLACK * step + RESUME_S

    def ledger_dir(self, name: str) -> Path:
        """Where the campaign keeps this kernel's loop state (the driver's copy under ``<out>/loops``)."""
        st = self.state(name)
        return Path(st["state_dir"]) if st.get("state_dir") else \
            self.out / "loops" / slug(self.kernel(name).ref.rsplit("::", 1)[1])

    def ledger(self, name: str) -> Ledger | None:
        """The driver's copy of the kernel's loop ledger; None when it has none (yet).  Read again only when its
        file changed: every time share asks for every kernel's (its gain and step cost)."""
        d = self.ledger_dir(name)
        try:
            st = (d / LEDGER_FILE).stat()
            key = (st.st_size, st.st_mtime_ns, st.st_ino)
        except OSError:
            key = None
        hit = self._ledgers.get(d)
        if key is not None and hit is not None and hit[0] == key:
            return hit[1]
        try:
            led = Ledger.load(d)
        except LedgerError:
            return None
        if key is not None:
            self._ledgers[d] = (key, led)
        return led

    def step_cost(self, name: str) -> float | None:
        """Seconds one step of this kernel's loop needs to start (one check and one comparison, at
        the costs its ledger measured, within the loop's planning margin); None before its baseline."""
        led = self.ledger(name)
        # a replay loop confirms a keep with the user's test command: a step that cannot fit it cannot keep
        suite = bool(led) and (led.setup.get("backend") or {}).get("backend") == "replay"
        costs = budget_mod.costs_from_ledger(led.iterations, budget_mod.KEEP_PRIOR_S if suite else 0.0) \
            if led else budget_mod.Costs()
        if not costs.known:
            return None
        opts = api.LoopOverrides.from_json(self.data["options"]).apply()
        rounds = budget_mod.comparison_rounds(opts.rounds, costs, opts.iteration_budget_s)
        return costs.iteration_s(1, rounds) / budget_mod.MARGIN

    def retry_crashed(self) -> list[str]:
        """``--resume``: the kernels whose loop crashed run again (from their ledger, if any)."""
        names = [n for n in self.data["selected"] if self.state(n)["status"] == "crashed"]
        for n in names:
            self.state(n)["status"] = "retry"
        self.save()
        return names

    def start_clock(self, started: float) -> None:
        """From now on every save counts the time since ``started`` as spent (a killed run's too)."""
        self._base, self._started, self._saved = self.data["spent_s"], started, time.monotonic()

    def stop_clock(self) -> None:
        """Save with this run's time counted, then stop counting."""
        self.save()
        self._started = None

    def spent(self) -> float:
        """Seconds spent over every run: the saved total, plus this run's while its clock runs."""
        if self._started is None:
            return self.data["spent_s"]
        return self._base + (time.monotonic() - self._started)

    def tick(self, every_s: float = 5.0) -> None:
        """Save now and then while a loop runs, so a ``kill -9`` loses little of the time spent."""
        if time.monotonic() - self._saved >= every_s:
            self.save()

    def time_left(self, started: float) -> float | None:
        """Seconds left of the time limit (None without one); before the clock starts, from ``started``."""
        limit = self.data["time_limit_s"]
        if limit is None:
            return None
        if self._started is not None:
            return limit - self.spent()
        return limit - self.data["spent_s"] - (time.monotonic() - started)

    def time_share(self, name: str, started: float, *, baseline_only: bool = False) -> float | None:
        """The time left times this kernel's share of the expected gain of the kernels still to run, within
        its ``share_bounds`` (at most a few steps a pass, at least one step) while that much is
        left (the best expected gain gets its step first); 0 (not started) when its measured step
        cannot fit.  A baseline is measured whole (None) while any time is left."""
        left = self.time_left(started)
        if left is None:
            return None
        if baseline_only:
            return None if left >= 1.0 else 0.0
        gains = {n: max(self.gain(n), 1e-6) for n in self.todo()}
        share = left * gains[name] / sum(gains.values())
        bounds = self.share_bounds(name)
        if bounds is not None:
            least, most = bounds
            share = min(share, most)
            if share < least:
                # a loop started with less stops before its first step: its start would be time lost
                share = least if least <= left else 0.0
        return max(0.0, min(share, left))

    def gain(self, name: str) -> float:
        """The kernel's expected gain, by which the time left is shared: the plan's (the survey's launch times) until
        its loop has measured it, then the GPU time its current version can still give back (``measured_saving``)
        over the suite's: a survey's times carry the observer's and the host's overhead (TileGym's layer norm read
        0.037 ms a launch in the survey and 0.0155 ms replayed, its headroom 64 % against 14 %)."""
        k = self.kernel(name)
        suite = self.plan.suite_gpu_ms
        saved = measured_saving(k, self.ledger(name)) if suite else None
        return k.expected_gain if saved is None else saved / suite

    def job(self, name: str, time_limit: float | None, *, baseline_only: bool = False) -> Job:
        """The job that runs kernel ``name``'s loop (continuing from its ledger when one exists) within ``time_limit``
        seconds."""
        k = self.kernel(name)
        # a loop started earlier (its ledger exists) continues from its ledger
        resume = Ledger.exists(self.ledger_dir(name))
        options = dict(self.data["options"])
        if time_limit is not None and not self.explore and [n for n in self.todo() if n != name]:
            options["yield_flat"] = True        # the others may use the time better than its unpromising moves
        return Job(name=name, ref=k.ref, test_cmd=k.test_cmd, bench_cmd=k.bench_cmd, counts=k.counts,
                   loops=str(self.out / "loops"), simulate=self.data["simulate"].get(name),
                   time_limit_s=time_limit, resume=resume, options=options,
                   baseline_only=baseline_only, replay=self.data.get("replay", True),
                   replay_dir=next((str(Path(c["replay"]).parent) for c in k.configs if c.get("replay")), None),
                   branch_prefix=self.data.get("branch_prefix"))

    def mark(self, name: str, **fields: Any) -> None:
        """Update kernel ``name``'s state and save."""
        self.state(name).update(fields)
        self.save()


def measured_saving(k: KernelPlan, led: Ledger | None) -> float | None:
    """GPU ms a kernel's loop can still give back by its own measurements: over the plan's configurations, calls x
    (latency - attainable time) of the latest kept version's roofline (configurations matched by recording folder
    or test id); None without a measured version or where none of its configurations matches the plan's."""
    kept = [r for r in (led.iterations if led else []) if r.get("status") == "keep" and r.get("roofline")]
    if not kept:
        return None
    points = kept[-1]["roofline"]
    saved, matched = 0.0, False
    for c in k.configs:
        # a replayed configuration is its recording's folder; the bench command's, the test id the plugin printed
        names = ([Path(c["replay"]).name] if c.get("replay") else []) + list(c.get("tests") or [])
        p = next((points[n] for n in names if isinstance(points.get(n), dict)), None)
        if p is None or p.get("latency_ms") is None or p.get("attainable_ms") is None:
            continue
        matched = True
        saved += (c.get("calls") or 1) * max(0.0, p["latency_ms"] - p["attainable_ms"])
    return saved if matched else None


def record_outcome(c: Campaign, name: str, outcome: dict) -> None:
    """What a worker reports, into the campaign's state (driver side)."""
    st = c.state(name)
    if outcome["status"] == "done":
        r = outcome["result"]
        # a loop stopped by its share of the time limit, after its baseline, or to let others go first, is paused: it
        # goes on later
        rule = r.get("stop_rule")
        c.mark(name, status="paused" if rule in ("time-limit", api.BASELINE_ONLY, UNPROMISING) else "done", result=r,
               state_dir=r["state_dir"], branch=r["branch"], error=None, unpromising=rule == UNPROMISING)
    else:
        c.mark(name, status="crashed", error=outcome.get("error"), result=None,
               crashes=st.get("crashes", 0) + (1 if outcome.get("worker_died") else 0))


def run_campaign(c: Campaign, executor, *, echo: Echo = None) -> None:
    """Run the kernels still to do on ``executor``; the time spent is added up across --resume."""
    say = echo or (lambda _m: None)
    started = time.monotonic()
    todo = c.todo()
    say(f"campaign: {len(todo)} kernel(s) to run on the {executor.name} executor"
        + (f", {c.data['time_limit_s'] - c.data['spent_s']:.0f} s left of --time-limit"
           if c.data["time_limit_s"] is not None else ""))
    c.start_clock(started)
    try:
        executor.run(c, started, echo=say)
    finally:
        c.stop_clock()
