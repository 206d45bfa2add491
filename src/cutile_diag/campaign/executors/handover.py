"""The hand-over protocol of the parallel executors (``local --gpus N``, ``ray``): one worker per
GPU, the driver the only writer.

Worker side (``LoopWorker``): a worker holds one GPU (``CUDA_VISIBLE_DEVICES``), a cuTile cache
of its own (``CUDA_TILE_CACHE_DIR``) and a scratch folder where its loops keep their state; the
campaign's ``--out`` is closed to it (``forbid_writes``: an audit hook refuses any write there).
Each ledger record a loop stores is handed to the driver, and the loop goes on only once the
driver has written it (or after ``ACK_WAIT_S``): a worker killed at any point has lost nothing but
the record it was handing over, which the loop had not gone past — as a local loop killed just
before writing it, which ``--resume`` recovers from.  While a loop runs, the worker samples its
GPU's SM clock (NVML, every ``SAMPLE_S``): neighbours on one host share power and cooling.

Driver side (``Driver``): dispatches kernels best expected gain first to idle workers (one loop
setup at a time: git branch + worktree creation in the user's repository is not concurrent),
appends every record it is handed to its copy of the loop's ledger,
``<out>/loops/<kernel>/ledger.jsonl`` (and ``perf_results.md``), then acknowledges it.  A dead
worker's kernel is recorded as crashed and retried once, from the driver's ledger (the new worker
gets its records to resume from), on another GPU when the host has one (it waits for one while
another GPU is busy).  Per worker it writes ``<out>/workers.json``: its GPU, the kernels it ran,
their wall times and clock samples.  A ``Pool`` (Ray actors, local processes) carries the
messages; the driver does the rest.
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ...ledger import LEDGER_FILE, TABLE_FILE, Ledger, watched
from ...loop import worktree as worktree_mod
from ...nvml import sample_sm_clock
from ...output import write_atomic
from ..run import Campaign, Echo, Job, job_text, outcome_text, record_outcome, run_job, short_of

ACK_WAIT_S = 120.0         # a loop waits at most this long for the driver to take a record, then goes on
SAMPLE_S = 1.0             # the SM clock of a worker's GPU is sampled this often while a loop runs
WORKERS_FILE = "workers.json"

# --- worker side -------------------------------------------------------------------------------

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
            raise PermissionError(f"{p}: a campaign's worker does not write the campaign's folder {folder} "
                                  "(the driver writes it)")
    sys.addaudithook(hook)


def _nvml_handle(visible: str | None):
    """The NVML handle of the GPU ``visible`` names (a CUDA_VISIBLE_DEVICES entry: index or UUID)."""
    import pynvml
    pynvml.nvmlInit()
    vis = (visible or "0").split(",")[0] or "0"
    return pynvml.nvmlDeviceGetHandleByIndex(int(vis)) if vis.isdigit() else \
        pynvml.nvmlDeviceGetHandleByUUID(vis.encode())     # older pynvml takes bytes only


def gpu_model(visible: str | None) -> str:
    """The model of a worker's GPU (NVML), or why there is none (fake GPUs in tests)."""
    try:
        import pynvml
        name = pynvml.nvmlDeviceGetName(_nvml_handle(visible))
        return name.decode() if isinstance(name, bytes) else name
    except Exception as e:
        return f"no GPU visible ({type(e).__name__})"


class ClockSampler:
    """The SM clock (MHz) of one GPU every ``SAMPLE_S`` in a thread, as ``[seconds since start, MHz]``;
    no samples where NVML has no such GPU (fake GPUs)."""

    def __init__(self, visible: str | None, every_s: float = SAMPLE_S):
        self.every_s, self.samples, self._stop = every_s, [], threading.Event()
        try:
            self._read = (lambda h=_nvml_handle(visible): sample_sm_clock(h))
        except Exception:
            self._read = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            mhz = self._read()
            if mhz is not None:
                self.samples.append([round(time.monotonic() - t0, 2), mhz])
            self._stop.wait(self.every_s)

    def __enter__(self) -> "ClockSampler":
        if self._read is not None:
            self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


class LoopWorker:
    """One GPU's worker: runs one kernel's loop at a time (``run_loop``), its state in a scratch
    folder of its own, each ledger record handed to the driver through ``hand_over``."""

    def __init__(self, guard: str | None = None, gpus: list[str] | None = None):
        self.gpu_ids = [str(g) for g in gpus or []]
        if self.gpu_ids:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
        # a cuTile cache per worker: two workers never compile into (or evict from) one cache
        self.cache = tempfile.mkdtemp(prefix="cutile-diag-worker-cache-")
        os.environ["CUDA_TILE_CACHE_DIR"] = self.cache
        self.scratch = Path(tempfile.mkdtemp(prefix="cutile-diag-worker-loops-")).resolve()   # as loop paths are
        if guard:
            forbid_writes(guard)

    def info(self) -> dict:
        """This worker's process id, GPUs, GPU model, cuTile cache and scratch folder (what the driver's
        ``workers.json`` shows)."""
        return {"pid": os.getpid(), "gpus": self.gpu_ids, "model": gpu_model(os.environ.get("CUDA_VISIBLE_DEVICES")),
                "cache": self.cache, "scratch": str(self.scratch)}

    def run_loop(self, job: dict, resume_from: dict | None, hand_over: Callable[[str, dict], None],
                 echo: Echo = None) -> dict:
        """Run ``job``'s loop here; ``hand_over(loop folder relative to the scratch folder, record)``
        returns once the driver has the record.  The outcome carries the loop's folder (relative),
        whether its ledger is gone, the wall time and the clock samples."""
        j = Job(**job)
        j.loops = str(self.scratch)                    # never the campaign's folder
        if resume_from:                                # the driver's ledger: the loop resumes from it
            Ledger(self.scratch / resume_from["dir"]).adopt(resume_from["records"])
        last: list[str] = []

        def watch(path: Path, record: dict) -> None:
            try:
                rel = Path(path).parent.relative_to(self.scratch).as_posix()
            except ValueError:
                return
            last[:] = [rel]
            hand_over(rel, record)

        t0 = time.monotonic()
        with ClockSampler(os.environ.get("CUDA_VISIBLE_DEVICES")) as clocks, watched(watch):
            outcome = run_job(j, echo=echo)
        r = outcome.get("result") or {}
        rel = (Path(r["state_dir"]).relative_to(self.scratch).as_posix() if r.get("state_dir")
               else (last[0] if last else resume_from["dir"] if resume_from else None))
        # a loop whose baseline never got measured removes its ledger (the next try starts afresh)
        gone = rel is not None and not (self.scratch / rel / LEDGER_FILE).exists()
        return {**outcome, "loop_dir": rel, "ledger_gone": gone, "scratch": str(self.scratch),
                "wall_s": round(time.monotonic() - t0, 2), "clocks": clocks.samples}


# --- driver side -------------------------------------------------------------------------------

@dataclass
class Running:
    """The driver's view of one dispatched loop."""
    name: str
    worker: str
    job_id: str
    resume: bool
    share: float | None = None                       # seconds of the time limit it got
    started: float = field(default_factory=time.monotonic)
    received: int = 0
    setup_seen: bool = False
    finished: bool = False                           # the worker said the loop ended (its outcome follows)
    ledgers: dict = field(default_factory=dict)      # loop folder (relative) -> the driver's Ledger
    handle: Any = None                               # the pool's (Ray refs, ...)


@dataclass
class Event:
    """What a pool reports of one running loop: records handed over (acknowledge them once
    written), a progress line, its outcome, or its worker's death."""
    jr: Running
    records: list | None = None                      # [(loop folder relative to the worker's scratch, record)]
    say: str | None = None
    outcome: dict | None = None
    died: str | None = None


class Pool(Protocol):
    """How the driver reaches its workers (one per GPU)."""
    noun: str                                        # "Ray actor", "worker process": the progress lines say it

    def start(self, guard: str, say: Callable[[str], None], simulated: bool = False) -> dict[str, dict]:
        """Start one worker per GPU; their infos (``gpu``: the GPU's index on the host) by name."""

    def dispatch(self, worker: str, jr: Running, job: dict, resume_from: dict | None) -> None:
        """Start ``job`` on ``worker`` (``resume_from``: the ledger to continue); ``jr.handle`` tracks it."""

    def next_event(self, running: list[Running]) -> Event:
        """The next thing one of ``running`` reports (blocks)."""

    def ack(self, jr: Running) -> None:
        """The driver has written ``jr.received`` records: the loop may go on."""

    def replace(self, worker: str) -> tuple[str, dict]:
        """A fresh worker on the GPU of a dead one: (name, info)."""

    def close(self) -> None:
        """Stop every worker (none left running)."""


def resume_records(c: Campaign, name: str, job: Job) -> dict | None:
    """What a worker needs to resume ``name``'s loop: the driver's ledger and its folder (relative)."""
    if not job.resume:
        return None
    d = c.ledger_dir(name)
    led = c.ledger(name)
    rel = d.relative_to(c.out / "loops").as_posix() if d.is_relative_to(c.out / "loops") else d.name
    return {"dir": rel, "records": led.records if led else []}


def take_records(c: Campaign, jr: Running, records: list) -> None:
    """Records a worker handed over, appended to the driver's copies of the loops' ledgers."""
    for rel, rec in records:
        d = c.out / "loops" / rel
        if rec.get("type") == "setup":               # a new loop: a new ledger
            led = jr.ledgers[rel] = Ledger(d)
            jr.setup_seen = True
            c.mark(jr.name, state_dir=str(d))
        else:
            led = jr.ledgers.get(rel) or jr.ledgers.setdefault(rel, Ledger.load(d))
        led.adopt([rec])
    jr.received += len(records)


def finish(c: Campaign, jr: Running, outcome: dict) -> None:
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
    record_outcome(c, jr.name, {k: v for k, v in outcome.items() if k != "clocks"})


def clock_summary(samples: list) -> dict | None:
    """Min / median / max of the SM clock samples ``(time, MHz)``, or None without samples."""
    mhz = [s[1] for s in samples]
    return {"n": len(mhz), "min": min(mhz), "median": statistics.median(mhz), "max": max(mhz)} if mhz else None


class Driver:
    """Runs a campaign's kernels on a pool of workers, one per GPU (see the module doc)."""

    def __init__(self, pool: Pool):
        self.pool = pool
        self.workers: dict[str, dict] = {}           # name -> info + what it ran (workers.json)
        self.idle: list[str] = []
        self.avoid: dict[str, set] = {}              # kernel -> GPUs its worker died on

    def run(self, c: Campaign, started: float, *, echo: Echo = None) -> None:
        """Start the pool, run every phase's kernels on its workers (a dead worker replaced), and close the pool
        whatever happens."""
        say = echo or (lambda _m: None)
        try:
            simulated = all(c.data["simulate"].get(n) for n in c.data["selected"])
            for name, info in self.pool.start(str(c.out), say, simulated=simulated).items():
                self._add(name, info)
            self._save(c)
            for baseline_only in c.passes(started, say):
                self._phase(c, started, baseline_only, say)
        finally:
            self.pool.close()
            if self.workers:
                self._save(c)

    def _add(self, name: str, info: dict) -> None:
        self.workers[name] = {**info, "kernels": []}
        self.idle.append(name)

    def _save(self, c: Campaign) -> None:
        write_atomic(c.out / WORKERS_FILE, json.dumps(self.workers, indent=1, default=str))

    def _gpu(self, worker: str) -> Any:
        return self.workers[worker].get("gpu")

    def _pick(self, queue: deque, running: dict) -> tuple[str, str] | None:
        """The first kernel of ``queue`` with an idle worker for it: on a GPU its worker did not die
        on, or any idle one when no other GPU is busy (a one-GPU host)."""
        busy = {self._gpu(jr.worker) for jr in running.values()}
        for name in list(queue):
            bad = self.avoid.get(name, set())
            ok = [w for w in self.idle if self._gpu(w) not in bad]
            if ok or not (busy - bad):
                w = (ok or self.idle)[-1]
                queue.remove(name)
                self.idle.remove(w)
                return name, w
        return None

    def _share(self, c: Campaign, name: str, started: float, baseline_only: bool, running: dict) -> float | None:
        """The kernel's share of the time left: ``Campaign.time_share`` (one GPU's view), or more,
        its expected gain's share of the GPU time still free — every worker's time left, less what
        the running loops hold of it — split among the kernels not yet dispatched (the limit is wall
        time: each GPU spends it), and never more than the time left."""
        share = c.time_share(name, started, baseline_only=baseline_only)
        left = c.time_left(started)
        if share is None or left is None or share < 1.0 or baseline_only or len(self.workers) < 2:
            return share
        now = time.monotonic()
        held = sum(max(0.0, min(left, jr.share - (now - jr.started))) for jr in running.values() if jr.share)
        busy = {jr.name for jr in running.values()}
        gains = {n: max(c.gain(n), 1e-6) for n in c.todo() if n not in busy}
        free = len(self.workers) * left - held
        bounds = c.share_bounds(name)
        return min(left, bounds[1] if bounds else left, max(share, free * gains[name] / sum(gains.values())))

    def _phase(self, c: Campaign, started: float, baseline_only: bool, say) -> None:
        queue = deque(c.todo(baseline_only=baseline_only))
        running: dict[str, Running] = {}            # job id -> its loop
        while queue or running:
            while queue and self.idle:
                pick = self._pick(queue, running)
                if pick is None:
                    break
                name, worker = pick
                share = self._share(c, name, started, baseline_only, running)
                if share is not None and share < 1.0:
                    self.idle.append(worker)
                    say(f"{name}: {short_of(baseline_only)}; `{c.resume_command()}` runs it")
                    continue
                job = c.job(name, share, baseline_only=baseline_only)
                c.mark(name, status="running", attempts=c.state(name)["attempts"] + 1, time_share_s=share,
                       worker=worker, gpu=self._gpu(worker))
                say(f"{name}: {job_text(job)} on {worker}"
                    + (f", {share:.0f} s of the time limit" if share is not None else ""))
                jr = Running(name, worker, uuid.uuid4().hex, job.resume, share=share)
                running[jr.job_id] = jr
                self.pool.dispatch(worker, jr, dataclasses.asdict(job), resume_records(c, name, job))
                # loop setups in one repository run one at a time
                while not (jr.resume or jr.setup_seen) and jr.job_id in running:
                    self._handle(c, self.pool.next_event([jr]), running, queue, say)
            if running:
                self._handle(c, self.pool.next_event(list(running.values())), running, queue, say)

    def _handle(self, c: Campaign, ev: Event, running: dict, queue: deque, say) -> None:
        jr = ev.jr
        c.tick()                        # the time spent is saved as it goes (a kill -9 keeps it)
        if ev.say is not None:
            say(f"  {jr.name} │ {ev.say}")
        if ev.records is not None:
            take_records(c, jr, ev.records)
            self.pool.ack(jr)
        if ev.outcome is None and ev.died is None:
            return
        del running[jr.job_id]
        run = {"kernel": jr.name, "attempt": c.state(jr.name)["attempts"], "wall_s": round(time.monotonic()
                                                                                            - jr.started, 2)}
        if ev.died is not None:
            crashes = c.state(jr.name).get("crashes", 0) + 1
            c.mark(jr.name, status="crashed", crashes=crashes, error=f"its {self.pool.noun} died mid-loop ({ev.died})")
            say(f"{jr.name}: its {self.pool.noun} died mid-loop ({ev.died}): recorded as crashed (the campaign's "
                f"ledger keeps every record the worker handed over, {jr.received} in this attempt)")
            self.workers[jr.worker]["kernels"].append({**run, "status": "died", "why": ev.died})
            self.avoid.setdefault(jr.name, set()).add(self._gpu(jr.worker))
            name, info = self.pool.replace(jr.worker)      # on the GPU the dead worker held
            self.workers[name] = {**info, "kernels": []}
            self.idle.insert(0, name)                      # the others first
            if crashes <= 1:
                c.mark(jr.name, status="retry")
                queue.appendleft(jr.name)
                say(f"{jr.name}: retried once, on another worker, from the campaign's ledger")
        else:
            finish(c, jr, ev.outcome)
            clocks = ev.outcome.get("clocks") or []
            self.workers[jr.worker]["kernels"].append({**run, "status": c.state(jr.name)["status"],
                                                       "loop_wall_s": ev.outcome.get("wall_s"),
                                                       "clocks": clock_summary(clocks), "clock_samples": clocks})
            self.idle.append(jr.worker)
            say(f"{jr.name}: {outcome_text(ev.outcome)}")
        self._save(c)

