"""The local executor: one GPU (the default device), kernels one after another, in this process."""
from __future__ import annotations

from ..run import Campaign, Echo, ratio_text, record_outcome, run_job


class LocalExecutor:
    """One GPU (the default device), kernels one after another, in this process."""
    name = "local"

    def describe(self) -> dict:
        return {"executor": self.name}

    def run(self, c: Campaign, started: float, *, echo: Echo = None) -> None:
        say = echo or (lambda _m: None)
        todo = c.todo()
        for i, name in enumerate(todo, 1):
            share = c.time_share(name, started)
            if share is not None and share < 1.0:
                say(f"[{i}/{len(todo)}] {name}: no time left of --time-limit; `campaign --resume` runs it")
                continue
            job = c.job(name, share)
            st = c.state(name)
            c.mark(name, status="running", attempts=st["attempts"] + 1, time_share_s=share)
            say(f"[{i}/{len(todo)}] {name}: {'resuming its loop' if job.resume else 'loop'}"
                + (f", {share:.0f} s of the time limit" if share is not None else ""))
            outcome = run_job(job, echo=lambda m, n=name: say(f"  {n} │ {m}"))
            record_outcome(c, name, outcome)
            r = outcome.get("result") or {}
            say(f"[{i}/{len(todo)}] {name}: " + (f"{r.get('stop_rule')}, " + (ratio_text(r) or "no speedup")
                                                 if outcome["status"] == "done" else f"crashed: {outcome.get('error')}"))
