"""The local executor: one GPU (the default device), kernels one after another, in this process."""
from __future__ import annotations

from ..run import Campaign, Echo, job_text, outcome_text, record_outcome, run_job


class LocalExecutor:
    """One GPU (the default device), kernels one after another, in this process."""
    name = "local"

    def describe(self) -> dict:
        return {"executor": self.name}

    def run(self, c: Campaign, started: float, *, echo: Echo = None) -> None:
        say = echo or (lambda _m: None)
        for baseline_only in c.phases():
            todo = c.todo(baseline_only=baseline_only)
            for i, name in enumerate(todo, 1):
                share = c.time_share(name, started, baseline_only=baseline_only)
                if share is not None and share < 1.0:
                    say(f"[{i}/{len(todo)}] {name}: no time left of --time-limit; `campaign --resume` runs it")
                    continue
                job = c.job(name, share, baseline_only=baseline_only)
                st = c.state(name)
                c.mark(name, status="running", attempts=st["attempts"] + 1, time_share_s=share)
                say(f"[{i}/{len(todo)}] {name}: {job_text(job)}"
                    + (f", {share:.0f} s of the time limit" if share is not None else ""))
                outcome = run_job(job, echo=lambda m, n=name: say(f"  {n} │ {m}"))
                record_outcome(c, name, outcome)
                say(f"[{i}/{len(todo)}] {name}: {outcome_text(outcome)}")

