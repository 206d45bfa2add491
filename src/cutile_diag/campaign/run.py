"""The campaign's run: the optimisation loop on each selected kernel, best expected gain first.

State: ``<out>/campaign.json`` (the plan, the selection, the overall time limit, and per
kernel its status — pending, running, paused (its loop stopped at its time share), done,
crashed — its time share and its loop's result),
written only by the driver, after every change.  Every kernel's loop is ``loop.api.optimize``,
the entry point ``cutile-diag optimize`` uses: its own branch and worktree, its state under
``<out>/loops/<kernel>``.  ``--resume`` continues: a kernel left running (a killed campaign)
resumes its loop from its ledger; pending ones start.

Time: one overall ``--time-limit``; a kernel starting gets the time left times its expected
gain over the expected gains of the kernels not yet run (``time_share``).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..output import prog
from ..errors import CutileDiagError, UsageError
from ..loop import api
from ..loop.git import slug
from .plan import CampaignPlan, KernelPlan

STATE_FILE = "campaign.json"
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
                                roof_device=c.get("device"))
        req = api.OptimizeRequest(kernel=job.ref, measurement=m, options=opts, resume=job.resume, out=job.loops)
        res = api.optimize(req, echo=echo)
        return {"status": "done", "result": res.to_json()}
    except CutileDiagError as e:
        return {"status": "crashed", "error": e.one_line()}


class Campaign:
    """The driver's view of ``campaign.json``: the only writer of it and of the report."""

    def __init__(self, out: Path, data: dict):
        self.out, self.data = out, data

    @property
    def path(self) -> Path:
        return self.out / STATE_FILE

    @classmethod
    def load(cls, out: Path) -> "Campaign":
        p = out / STATE_FILE
        if not p.is_file():
            raise UsageError(f"no campaign in {out}", hint=f"start one: {prog()} campaign [--out DIR] -- CMD")
        return cls(out, json.loads(p.read_text()))

    @classmethod
    def create(cls, out: Path, plan: CampaignPlan, selected: list[KernelPlan], *, time_limit: float | None,
               simulate: dict[str, str] | None, options: dict, executor: dict) -> "Campaign":
        c = cls(out, {"plan": plan.to_json(), "selected": [k.name for k in selected], "time_limit_s": time_limit,
                      "spent_s": 0.0, "simulate": simulate or {}, "options": options, "executor": executor,
                      "kernels": {k.name: {"status": "pending", "attempts": 0} for k in selected}})
        c.save()
        return c

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    @property
    def plan(self) -> CampaignPlan:
        return CampaignPlan.from_json(self.data["plan"])

    def kernel(self, name: str) -> KernelPlan:
        return self.plan.kernel(name)

    def state(self, name: str) -> dict:
        return self.data["kernels"][name]

    def todo(self) -> list[str]:
        return [n for n in self.data["selected"] if self.state(n)["status"] in ("pending", "running", "retry", "paused")]

    def time_share(self, name: str, started: float) -> float | None:
        """The time left times this kernel's share of the expected gain of the kernels still to run."""
        limit = self.data["time_limit_s"]
        if limit is None:
            return None
        left = limit - self.data["spent_s"] - (time.monotonic() - started)
        gains = {n: max(self.kernel(n).expected_gain, 1e-6) for n in self.todo()}
        return max(0.0, left * gains[name] / sum(gains.values()))

    def job(self, name: str, time_limit: float | None) -> Job:
        k, st = self.kernel(name), self.state(name)
        # a loop started earlier (its ledger exists) continues from its ledger
        resume = st.get("state_dir") is not None and (Path(st["state_dir"]) / "ledger.jsonl").exists() \
            or _ledger_exists(self.out / "loops", k.ref.rsplit("::", 1)[1])
        return Job(name=name, ref=k.ref, test_cmd=k.test_cmd, bench_cmd=k.bench_cmd, counts=k.counts,
                   loops=str(self.out / "loops"), simulate=self.data["simulate"].get(name),
                   time_limit_s=time_limit, resume=resume, options=dict(self.data["options"]))

    def mark(self, name: str, **fields: Any) -> None:
        self.state(name).update(fields)
        self.save()


def _ledger_exists(loops: Path, kernel: str) -> bool:
    return (loops / slug(kernel) / "ledger.jsonl").exists() or (loops / slug(kernel) / "ledger.jsonl.gz").exists()


def record_outcome(c: Campaign, name: str, outcome: dict) -> None:
    """What a worker reports, into the campaign's state (driver side)."""
    st = c.state(name)
    if outcome["status"] == "done":
        r = outcome["result"]
        # a loop stopped by its share of the time limit is paused: --resume continues it
        c.mark(name, status="paused" if r.get("stop_rule") == "time-limit" else "done", result=r,
               state_dir=r["state_dir"], branch=r["branch"], error=None)
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
    try:
        executor.run(c, started, echo=say)
    finally:
        c.data["spent_s"] += time.monotonic() - started
        c.save()
