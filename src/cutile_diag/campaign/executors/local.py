"""The local executor: kernels on this machine's GPUs.

``--gpus 1`` (the default): one GPU (the default device), kernels one after another, in this
process.  ``--gpus N|all``: one worker process per GPU (``ProcessPool``), pinned to it with
``CUDA_VISIBLE_DEVICES``, kernels in parallel under ``handover``'s protocol — the driver (this
process) the only writer of the campaign's files, a dead worker's kernel retried once from the
driver's ledger on another GPU.  Each worker runs in a session of its own and dies with the
driver (PDEATHSIG); the driver kills every worker's process group when the campaign ends.
Under ``--simulate`` nothing runs on a GPU: N fake GPUs are allowed on any machine.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path

from ...errors import UsageError
from ...nvml import nvml_available
from ...procs import die_with_parent, kill_group
from ..run import Campaign, Echo, job_text, outcome_text, record_outcome, run_job, short_of
from .handover import Driver, Event, Running

START_S = 120.0            # a worker process says who it is within this long (imports torch, NVML)


def visible_gpus() -> list[str]:
    """This machine's GPUs as ``CUDA_VISIBLE_DEVICES`` entries: those it already names, else every
    GPU NVML sees (by UUID: NVML's order is not CUDA's), else torch's device indices."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    if nvml_available() is None:
        import pynvml
        try:
            ids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                   for i in range(pynvml.nvmlDeviceGetCount())]
            return [u.decode() if isinstance(u, bytes) else str(u) for u in ids]
        except Exception:
            pass
    try:
        import torch
        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def resolve_gpus(spec: str | int | None, *, simulated: bool) -> list[str]:
    """The GPUs of ``--gpus N|all``, one worker each; [] for one GPU in this process (the default).
    More GPUs than the machine has are refused, except fake ones under ``--simulate``."""
    text = str(spec if spec is not None else 1).strip().lower()
    if text != "all" and not (text.isdigit() and int(text) >= 1):
        raise UsageError(f"--gpus {spec}: give a number of GPUs (1, 2, ...) or 'all'")
    if text == "1":
        return []
    present = visible_gpus()
    if text == "all":
        if not present:
            raise UsageError("--gpus all: this machine has no GPU",
                             hint="under --simulate give a number of fake GPUs, e.g. --gpus 2")
        return present if len(present) > 1 else []
    n = int(text)
    if n <= len(present):
        return present[:n]
    if simulated:                       # fake GPUs: nothing of a simulated loop runs on one
        return [str(i) for i in range(n)]
    raise UsageError(f"--gpus {n}: this machine has {len(present)} GPU(s)",
                     hint=f"--gpus {len(present)} or --gpus all" if present else "run it on a GPU machine")


def _sequential(c: Campaign, started: float, say) -> None:
    """One GPU, kernels one after another, in this process."""
    for baseline_only in c.passes(started, say):
        todo = c.todo(baseline_only=baseline_only)
        for i, name in enumerate(todo, 1):
            share = c.time_share(name, started, baseline_only=baseline_only)
            if share is not None and share < 1.0:
                say(f"[{i}/{len(todo)}] {name}: {short_of(baseline_only)}; `{c.resume_command()}` runs it")
                continue
            job = c.job(name, share, baseline_only=baseline_only)
            st = c.state(name)
            c.mark(name, status="running", attempts=st["attempts"] + 1, time_share_s=share)
            say(f"[{i}/{len(todo)}] {name}: {job_text(job)}"
                + (f", {share:.0f} s of the time limit" if share is not None else ""))
            outcome = run_job(job, echo=lambda m, n=name: (say(f"  {n} │ {m}"), c.tick()))
            record_outcome(c, name, outcome)
            say(f"[{i}/{len(todo)}] {name}: {outcome_text(outcome)}")


class LocalExecutor:
    """This machine: one GPU in this process (``gpus`` []), or one worker process per GPU."""
    name = "local"

    def __init__(self, gpus: list[str] | None = None, spec: str | int | None = None):
        self.gpus, self.spec = list(gpus or []), spec

    def describe(self) -> dict:
        """The executor as the campaign's state records it (its GPU spec and worker count when parallel)."""
        d = {"executor": self.name}
        if self.gpus:
            d.update(gpus=str(self.spec), workers=len(self.gpus))
        return d

    def run(self, c: Campaign, started: float, *, echo: Echo = None) -> None:
        """Run the campaign's kernels in this process on one GPU, or one worker process per GPU."""
        say = echo or (lambda _m: None)
        if not self.gpus:
            _sequential(c, started, say)
        else:
            Driver(ProcessPool(self.gpus)).run(c, started, echo=say)


class ProcessPool:
    """``handover.Pool`` of local processes (``worker_process``), one per GPU, each in a session
    of its own, started with PDEATHSIG, its output in a log file of its own."""
    noun = "worker process"

    def __init__(self, gpus: list[str]):
        self.gpus = gpus
        self.procs: dict[str, subprocess.Popen] = {}
        self.conns: dict[str, Connection] = {}
        self.logs = Path(tempfile.mkdtemp(prefix="cutile-diag-workers-"))
        self.guard = ""
        self.count = 0
        self.index: dict[str, int] = {}     # worker -> its GPU's index in ``gpus``

    def _spawn(self, index: int) -> tuple[str, dict]:
        name = f"gpu{index}-w{self.count}"
        self.count += 1
        self.index[name] = index
        mine, theirs = socket.socketpair()
        src = str(Path(__file__).resolve().parents[3])      # the worker imports this cutile_diag
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": self.gpus[index], "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join([src, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                     if p]])}
        with open(self.logs / f"{name}.log", "wb") as log:
            p = subprocess.Popen([sys.executable, "-m", "cutile_diag.campaign.executors.worker_process",
                                  str(theirs.fileno()), self.guard], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),), start_new_session=True,
                                 preexec_fn=die_with_parent)
        theirs.close()
        self.procs[name], self.conns[name] = p, Connection(mine.detach())
        if not self.conns[name].poll(START_S):
            raise UsageError(f"worker {name} did not start within {START_S:.0f} s (log: {self.logs / name}.log)")
        try:
            info = json.loads(self.conns[name].recv_bytes())
        except (EOFError, OSError):
            raise UsageError(f"worker {name} died at start (log: {self.logs / name}.log): "
                             + (self.logs / f"{name}.log").read_text(errors="replace")[-300:]) from None
        return name, {**info, "gpu": index, "gpu_id": self.gpus[index], "log": str(self.logs / f"{name}.log")}

    def start(self, guard: str, say, simulated: bool = False) -> dict[str, dict]:
        """Spawn one worker process per GPU; refuses GPUs of different models."""
        self.guard = guard
        infos = dict(self._spawn(i) for i in range(len(self.gpus)))
        models = sorted({i["model"] for i in infos.values()})
        if len(models) > 1 and not all(m.startswith("no GPU visible") for m in models):
            raise UsageError(f"this machine's GPUs are of different models: {', '.join(models)}",
                             hint="a campaign compares measurements across kernels: --gpus those of one model "
                                  "(CUDA_VISIBLE_DEVICES)")
        say(f"local: {len(infos)} worker process(es), one per GPU ({models[0]}; logs in {self.logs})")
        return infos

    def _send(self, worker: str, **msg) -> bool:
        try:
            self.conns[worker].send_bytes(json.dumps(msg, default=str).encode())
            return True
        except OSError:
            return False

    def dispatch(self, worker: str, jr: Running, job: dict, resume_from: dict | None) -> None:
        """Send ``job`` to the worker; a worker that cannot be reached is marked dead (its next event says so)."""
        jr.handle = None if self._send(worker, op="run", job=job, resume_from=resume_from) else "dead"

    def _died(self, jr: Running) -> Event:
        p = self.procs[jr.worker]
        kill_group(p)                       # what it started in its session goes with it
        self.conns[jr.worker].close()
        return Event(jr, died=f"exit {p.returncode}")

    def next_event(self, running: list[Running]) -> Event:
        """Wait for a message from a running loop's worker: records, a progress line, its outcome, or its death (EOF
        on its socket)."""
        for jr in running:
            if jr.handle == "dead":
                return self._died(jr)
        by_conn = {self.conns[jr.worker]: jr for jr in running}
        ready = wait(list(by_conn))
        jr = by_conn[ready[0]]
        try:
            msg = json.loads(ready[0].recv_bytes())
        except (EOFError, OSError):
            return self._died(jr)
        if msg["op"] == "record":
            return Event(jr, records=[(msg["rel"], msg["record"])])
        if msg["op"] == "say":
            return Event(jr, say=msg["text"])
        return Event(jr, outcome=msg["outcome"])

    def ack(self, jr: Running) -> None:
        """Tell the worker how many records the driver has written, so its loop may go on."""
        self._send(jr.worker, op="ack", n=jr.received)

    def replace(self, worker: str) -> tuple[str, dict]:
        """A fresh worker process on the dead one's GPU."""
        self.procs.pop(worker, None)
        self.conns.pop(worker, None)
        return self._spawn(self.index[worker])

    def close(self) -> None:
        """Close every socket (idle workers exit), wait a few seconds, then kill each worker's process group."""
        for name, conn in self.conns.items():
            conn.close()                    # an idle worker reads EOF and exits
        end = time.monotonic() + 5
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            kill_group(p)                   # a loop still running, and anything it started
