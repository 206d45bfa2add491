"""The Ray executor (``cutile-diag[ray]``): one actor per GPU, kernels in parallel.

Each actor holds one GPU (``num_gpus=1``; Ray sets its ``CUDA_VISIBLE_DEVICES``), has a
cuTile cache of its own (``CUDA_TILE_CACHE_DIR``) and runs whole loops: every comparison of a
loop is measured by the one actor, on its one GPU.  GPUs of different models are refused
(a campaign's measurements must be comparable).  The driver dispatches kernels best expected
gain first; it starts one loop's setup at a time (git branch + worktree creation in the user's
repository is not concurrent).  Without ``--ray-address`` a local Ray instance is started on
this machine's GPUs.

The driver is the only writer of the campaign's files: ``campaign.json``, the report and every
loop's ledger and table.  An actor runs its loop with the loop's state in a scratch folder of
its own; the campaign's ``--out`` is closed to it (an audit hook in the actor refuses any write
there).  Each ledger record the loop stores is handed to the driver (``Worker.poll``), which
appends it to its copy, ``<out>/loops/<kernel>/ledger.jsonl`` (and its ``perf_results.md``), and
only then lets the loop go on (the next poll acknowledges it): an actor killed at any point has
lost nothing but the record it was handing over, which the loop had not gone past — as a local
loop killed just before writing it, which ``--resume`` recovers from.  A dead actor's kernel is
recorded as crashed and retried once, on a fresh actor, from the driver's ledger (the actor gets
its records to resume from).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...ledger import LEDGER_FILE, TABLE_FILE, Ledger, watched
from ...loop import worktree as worktree_mod
from ..run import Campaign, Echo, Job, job_text, outcome_text, record_outcome, run_job

NAMESPACE = "cutile-diag"
ACK_WAIT_S = 120.0         # a loop waits at most this long for the driver to take a record, then goes on
POLL_S = 5.0               # one poll waits at most this long for a record


def check_ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray, which is not installed",
                         hint="pip install 'cutile-diag[ray]'") from None
    return ray


def _gpu_model() -> str:
    """The model of the actor's GPU (NVML), or why there is none (fake GPU resources in tests)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            vis = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
            h = pynvml.nvmlDeviceGetHandleByIndex(int(vis)) if vis.isdigit() else \
                pynvml.nvmlDeviceGetHandleByUUID(vis)
            name = pynvml.nvmlDeviceGetName(h)
            return name.decode() if isinstance(name, bytes) else name
        finally:
            pynvml.nvmlShutdown()
    except Exception as e:
        return f"no GPU visible ({type(e).__name__})"


# audit events that write a path, and the index of that path in the event's arguments
_WRITES = {"os.rename": 1, "os.replace": 1, "os.remove": 0, "os.rmdir": 0, "os.mkdir": 0, "os.truncate": 0,
           "os.link": 1, "os.symlink": 1, "shutil.rmtree": 0, "shutil.copyfile": 1, "shutil.copytree": 1,
           "shutil.move": 1}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def written_path(event: str, args: tuple) -> Any:
    """The path an audit event writes (opened for writing, renamed onto, created, removed), else None."""
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(ch in mode for ch in "wax+")) or \
            (isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        return path if writes else None
    i = _WRITES.get(event)
    return args[i] if i is not None and len(args) > i else None


def forbid_writes(folder: str) -> None:
    """From now on this process may not write under ``folder`` (a PermissionError where it tries)."""
    roots = {os.path.abspath(folder), os.path.realpath(folder)}

    def hook(event: str, args: tuple) -> None:
        p = written_path(event, args)
        if p is None or isinstance(p, int):
            return
        try:
            p = os.path.abspath(os.fsdecode(p))
        except (TypeError, ValueError):
            return
        if any(p == r or p.startswith(r + os.sep) for r in roots):
            raise PermissionError(f"{p}: a campaign's Ray actor does not write the campaign's folder {folder} "
                                  "(the driver writes it)")
    sys.addaudithook(hook)


class _Worker:
    """One GPU's worker: runs one kernel's loop at a time (``run``, in its own process), its state
    in a scratch folder of the actor's; ``poll`` hands the loop's ledger records to the driver."""

    def __init__(self, guard: str | None = None):
        import ray
        self.gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        if self.gpu_ids:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
        # a cuTile cache per actor: two actors never compile into (or evict from) one cache
        self.cache = tempfile.mkdtemp(prefix="cutile-diag-ray-cache-")
        os.environ["CUDA_TILE_CACHE_DIR"] = self.cache
        self.scratch = Path(tempfile.mkdtemp(prefix="cutile-diag-ray-loops-")).resolve()   # as loop paths are
        self.cond = threading.Condition()
        self.job_id: str | None = None
        self.ended: set[str] = set()
        self.records: list[tuple[str, dict]] = []     # (loop folder relative to scratch, record) of this job
        self.acked = 0
        self.finished = True
        if guard:
            forbid_writes(guard)

    def info(self) -> dict:
        return {"pid": os.getpid(), "gpus": self.gpu_ids, "model": _gpu_model(), "cache": self.cache,
                "scratch": str(self.scratch)}

    def _hand_over(self, path: Path, record: dict) -> None:
        """A record the loop stored: the loop goes on once the driver has it (or after ACK_WAIT_S)."""
        try:
            rel = Path(path).parent.relative_to(self.scratch).as_posix()
        except ValueError:
            return
        with self.cond:
            self.records.append((rel, record))
            n = len(self.records)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.acked >= n, timeout=ACK_WAIT_S)

    def run(self, job_id: str, job: dict, resume_from: dict | None = None) -> dict:
        j = Job(**job)
        j.loops = str(self.scratch)                    # never the campaign's folder
        if resume_from:                                # the driver's ledger: the loop resumes from it
            Ledger(self.scratch / resume_from["dir"]).adopt(resume_from["records"])
        with self.cond:
            self.job_id, self.records, self.acked, self.finished = job_id, [], 0, False
        try:
            with watched(self._hand_over):
                outcome = run_job(j)
        finally:
            with self.cond:
                self.finished = True
                self.ended.add(job_id)
                self.cond.notify_all()
        r = outcome.get("result") or {}
        rel = (Path(r["state_dir"]).relative_to(self.scratch).as_posix() if r.get("state_dir")
               else (self.records[-1][0] if self.records else resume_from["dir"] if resume_from else None))
        # a loop whose baseline never got measured removes its ledger (the next try starts afresh)
        gone = rel is not None and not (self.scratch / rel / LEDGER_FILE).exists()
        return {**outcome, "loop_dir": rel, "ledger_gone": gone, "scratch": str(self.scratch)}

    def poll(self, job_id: str, since: int, wait: float = POLL_S) -> dict:
        """The records after the first ``since`` (which the driver has written: the loop may go on)."""
        with self.cond:
            # the driver's first poll may come before the job has started here
            self.cond.wait_for(lambda: self.job_id == job_id or job_id in self.ended, timeout=wait)
            if job_id != self.job_id:
                return {"records": [], "finished": job_id in self.ended}
            if since > self.acked:
                self.acked = since
                self.cond.notify_all()
            self.cond.wait_for(lambda: len(self.records) > since or self.finished, timeout=wait)
            return {"records": self.records[since:], "finished": self.finished}


@dataclass
class _Running:
    """The driver's view of one dispatched loop."""
    name: str
    actor: str
    job_id: str
    resume: bool
    run_ref: Any = None
    poll_ref: Any = None
    received: int = 0
    setup_seen: bool = False
    ledgers: dict = field(default_factory=dict)      # loop folder (relative) -> the driver's Ledger


class RayExecutor:
    name = "ray"

    def __init__(self, *, address: str | None = None, num_gpus: int | None = None):
        self.address, self.num_gpus = address, num_gpus
        self.actors: dict = {}                   # actor name -> handle (named: `ray.get_actor` finds them)
        self.guard: str | None = None

    def _actor(self):
        name = f"cutile-diag-worker-{os.getpid()}-{len(self.actors)}"
        self.actors[name] = self._actor_cls.options(name=name, namespace=NAMESPACE).remote(self.guard)
        return name

    def describe(self) -> dict:
        return {"executor": self.name, "address": self.address}

    def _start(self, say) -> None:
        ray = check_ray()
        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False)
            else:
                # the loops are GPU-bound; their actors take no CPU slot (a 2-core machine runs them all)
                ray.init(num_gpus=self.num_gpus, num_cpus=max(1, min(os.cpu_count() or 1, 4)), namespace=NAMESPACE,
                         include_dashboard=False, log_to_driver=False)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            raise UsageError("the Ray cluster has no GPU", hint="start it on GPU nodes, or use --executor local")
        # a thread runs the loop, another answers the driver's polls
        self._actor_cls = ray.remote(num_gpus=1, num_cpus=0, max_restarts=0, max_concurrency=3)(_Worker)
        for _ in range(gpus):
            self._actor()
        infos = ray.get([a.info.remote() for a in self.actors.values()])
        models = sorted({i["model"] for i in infos})
        if len(models) > 1:
            raise UsageError(f"the Ray cluster has GPUs of different models: {', '.join(models)}",
                             hint="a campaign compares measurements across kernels: run it on one model "
                                  "(a cluster of one GPU type, or --ray-address of such a cluster)")
        say(f"ray: {len(self.actors)} actor(s), one per GPU ({models[0]})")

    def run(self, c: Campaign, started: float, *, echo: Echo = None) -> None:
        import ray
        say = echo or (lambda _m: None)
        self.guard = str(c.out)
        self._start(say)
        idle = list(self.actors)                 # names
        try:
            for baseline_only in c.phases():
                self._phase(c, started, baseline_only, idle, say)
        finally:
            for a in self.actors.values():
                try:
                    ray.kill(a)
                except Exception:
                    pass

    def _phase(self, c: Campaign, started: float, baseline_only: bool, idle: list, say) -> None:
        import ray
        from ray.exceptions import RayActorError
        queue = deque(c.todo(baseline_only=baseline_only))
        running: dict[str, _Running] = {}        # job id -> its loop
        while queue or running:
            while queue and idle:
                name = queue.popleft()
                share = c.time_share(name, started, baseline_only=baseline_only)
                if share is not None and share < 1.0:
                    say(f"{name}: no time left of --time-limit; `campaign --resume` runs it")
                    continue
                actor = idle.pop()
                job = c.job(name, share, baseline_only=baseline_only)
                c.mark(name, status="running", attempts=c.state(name)["attempts"] + 1, time_share_s=share,
                       worker=actor)
                say(f"{name}: {job_text(job)} on {actor}"
                    + (f", {share:.0f} s of the time limit" if share is not None else ""))
                jr = self._dispatch(c, name, actor, job)
                running[jr.job_id] = jr
                self._await_setup(c, jr)
            refs = {jr.run_ref: jr for jr in running.values()}
            refs.update({jr.poll_ref: jr for jr in running.values() if jr.poll_ref is not None})
            ready, _ = ray.wait(list(refs), num_returns=1)
            jr = refs[ready[0]]
            if ready[0] != jr.run_ref:
                self._take(c, jr)
                continue
            del running[jr.job_id]
            try:
                outcome = ray.get(jr.run_ref)
            except RayActorError as e:
                crashes = c.state(jr.name).get("crashes", 0) + 1
                c.mark(jr.name, status="crashed", crashes=crashes,
                       error=f"its Ray actor died mid-loop ({type(e).__name__})")
                say(f"{jr.name}: its Ray actor died mid-loop: recorded as crashed (the campaign's ledger keeps "
                    f"every record the actor handed over, {jr.received} in this attempt)")
                idle.append(self._actor())                 # on the GPU the dead actor held
                if crashes <= 1:
                    c.mark(jr.name, status="retry")
                    queue.appendleft(jr.name)
                    say(f"{jr.name}: retried once, on another actor, from the campaign's ledger")
                continue
            while jr.poll_ref is not None:               # what the loop handed over last
                self._take(c, jr)
            self._finish(c, jr, outcome)
            idle.append(jr.actor)
            say(f"{jr.name}: {outcome_text(outcome)}")

    def _dispatch(self, c: Campaign, name: str, actor: str, job: Job) -> _Running:
        resume_from = None
        if job.resume:
            d = c.ledger_dir(name)
            led = c.ledger(name)
            rel = d.relative_to(c.out / "loops").as_posix() if d.is_relative_to(c.out / "loops") else d.name
            resume_from = {"dir": rel, "records": led.records if led else []}
        jr = _Running(name, actor, uuid.uuid4().hex, job.resume)
        a = self.actors[actor]
        jr.run_ref = a.run.remote(jr.job_id, dataclasses.asdict(job), resume_from)
        jr.poll_ref = a.poll.remote(jr.job_id, 0)
        return jr

    def _take(self, c: Campaign, jr: _Running) -> None:
        """The answer of ``jr``'s poll: its records appended to the driver's ledgers, then the next
        poll (which lets the loop go on) unless the loop has ended."""
        import ray
        from ray.exceptions import RayActorError
        ref, jr.poll_ref = jr.poll_ref, None
        try:
            res = ray.get(ref)
        except RayActorError:
            return                                   # the run's own ref says the actor died
        for rel, rec in res["records"]:
            d = c.out / "loops" / rel
            if rec.get("type") == "setup":           # a new loop: a new ledger
                led = jr.ledgers[rel] = Ledger(d)
                jr.setup_seen = True
                c.mark(jr.name, state_dir=str(d))
            else:
                led = jr.ledgers.get(rel) or jr.ledgers.setdefault(rel, Ledger.load(d))
            led.adopt([rec])
        jr.received += len(res["records"])
        if not res["finished"]:
            jr.poll_ref = self.actors[jr.actor].poll.remote(jr.job_id, jr.received)

    def _await_setup(self, c: Campaign, jr: _Running) -> None:
        """Wait until the loop just dispatched has its branch, worktree and ledger (or has ended):
        loop setups in one repository run one at a time."""
        import ray
        while not (jr.resume or jr.setup_seen) and jr.poll_ref is not None:
            ready, _ = ray.wait([jr.poll_ref, jr.run_ref], num_returns=1)
            if ready[0] == jr.run_ref:
                return
            self._take(c, jr)

    def _finish(self, c: Campaign, jr: _Running, outcome: dict) -> None:
        """The outcome of a loop that ended, its paths those of the driver's copy."""
        rel = outcome.get("loop_dir")
        d = c.out / "loops" / rel if rel else None
        if d is not None and outcome.get("ledger_gone"):
            for f in (LEDGER_FILE, TABLE_FILE):
                (d / f).unlink(missing_ok=True)
            c.mark(jr.name, state_dir=None)
        r = outcome.get("result")
        if r and d is not None:
            r.update(state_dir=str(d), table=str(d / TABLE_FILE), ledger=str(d / LEDGER_FILE))
            led = c.ledger(jr.name)
            wt = Path(r.get("worktree") or "")
            if led is not None and wt.is_dir():
                # loop commands run inside its worktree find the campaign's copy of the loop
                worktree_mod.register(wt, d, Path(led.setup["root"]))
        c.mark(jr.name, worker_scratch=outcome.get("scratch"))
        record_outcome(c, jr.name, outcome)

