"""The Ray executor (``cutile-diag[ray]``): one actor per GPU, kernels in parallel.

Each actor holds one GPU (``num_gpus=1``; Ray sets its ``CUDA_VISIBLE_DEVICES``) and runs whole
loops: every comparison of a loop is measured by the one actor, on its one GPU.  GPUs of
different models are refused (a campaign's measurements must be comparable).  Without
``--ray-address`` a local Ray instance is started on this machine's GPUs.

The protocol is ``handover``'s (the driver the only writer, each record acknowledged before the
loop goes on, a dead worker's kernel retried once from the driver's ledger); this module only
carries its messages: an actor cannot call the driver, so the driver polls it (``Worker.poll``:
the records after the first ``since``, which also tells the actor the driver has written those).
"""
from __future__ import annotations

import os
import threading
from typing import Any

from ...errors import UsageError
from ...procs import reap_descendants_on_exit
from .handover import ACK_WAIT_S, Driver, Event, LoopWorker, Running

NAMESPACE = "cutile-diag"
POLL_S = 5.0               # one poll waits at most this long for a record


def check_ray():
    """The ``ray`` module; a usage error (install ``cutile-diag[ray]``) when it is missing."""
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray, which is not installed",
                         hint="pip install 'cutile-diag[ray]'") from None
    return ray


class _Worker(LoopWorker):
    """A ``LoopWorker`` in a Ray actor: ``run`` runs a loop (a thread of the actor), ``poll``
    (another thread) answers the driver with the records the loop handed over."""

    def __init__(self, guard: str | None = None):
        import ray
        super().__init__(guard, [str(g) for g in ray.get_gpu_ids()])
        self.cond = threading.Condition()
        self.job_id: str | None = None
        self.ended: set[str] = set()
        self.records: list[tuple[str, dict]] = []     # (loop folder relative to scratch, record) of this job
        self.acked = 0
        self.finished = True

    def _hand_over(self, rel: str, record: dict) -> None:
        with self.cond:
            self.records.append((rel, record))
            n = len(self.records)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.acked >= n, timeout=ACK_WAIT_S)

    def run(self, job_id: str, job: dict, resume_from: dict | None = None) -> dict:
        with self.cond:
            self.job_id, self.records, self.acked, self.finished = job_id, [], 0, False
        try:
            return self.run_loop(job, resume_from, self._hand_over)
        finally:
            with self.cond:
                self.finished = True
                self.ended.add(job_id)
                self.cond.notify_all()

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


class RayPool:
    """``handover.Pool`` on Ray actors (named: ``ray.get_actor`` finds them)."""
    noun = "Ray actor"

    def __init__(self, address: str | None, num_gpus: int | None):
        self.address, self.num_gpus = address, num_gpus
        self.actors: dict[str, Any] = {}
        self.guard: str | None = None
        self.own_instance = False       # this pool started the local Ray instance (and shuts it down)

    def _actor(self) -> str:
        name = f"cutile-diag-worker-{os.getpid()}-{len(self.actors)}"
        self.actors[name] = self._actor_cls.options(name=name, namespace=NAMESPACE).remote(self.guard)
        return name

    @staticmethod
    def _info(name: str, info: dict) -> dict:
        return {**info, "gpu": info["gpus"][0] if info["gpus"] else name}

    def start(self, guard: str, say, simulated: bool = False) -> dict[str, dict]:
        """Join (``--ray-address``) or start a Ray instance and one actor per GPU; refuses a cluster of mixed GPU
        models."""
        ray = check_ray()
        self.guard = guard
        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False)
            else:
                # the loops are GPU-bound; their actors take no CPU slot (a 2-core machine runs them all)
                ray.init(num_gpus=self.num_gpus, num_cpus=max(1, min(os.cpu_count() or 1, 4)), namespace=NAMESPACE,
                         include_dashboard=False, log_to_driver=False)
                self.own_instance = True
                # the instance's agents outlive a kill -9 of this driver: a watcher ends them then
                reap_descendants_on_exit()
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if simulated:
            # a simulation needs no GPU: actors of none, as many as --ray-gpus or the cluster's GPUs (else 2)
            n = self.num_gpus or gpus or 2
        elif gpus < 1:
            raise UsageError("the Ray cluster has no GPU", hint="start it on GPU nodes, or use --executor local")
        # a thread runs the loop, another answers the driver's polls
        self._actor_cls = ray.remote(num_gpus=0 if simulated else 1, num_cpus=0, max_restarts=0,
                                     max_concurrency=3)(_Worker)
        names = [self._actor() for _ in range(n if simulated else gpus)]
        infos = dict(zip(names, ray.get([self.actors[n].info.remote() for n in names])))
        models = sorted({i["model"] for i in infos.values()})
        if len(models) > 1:
            raise UsageError(f"the Ray cluster has GPUs of different models: {', '.join(models)}",
                             hint="a campaign compares measurements across kernels: run it on one model "
                                  "(a cluster of one GPU type, or --ray-address of such a cluster)")
        say(f"ray: {len(self.actors)} actor(s), " + ("simulated GPUs" if simulated else f"one per GPU ({models[0]})"))
        return {n: self._info(n, i) for n, i in infos.items()}

    def dispatch(self, worker: str, jr: Running, job: dict, resume_from: dict | None) -> None:
        """Start the job on the actor, with a first poll for its records."""
        a = self.actors[worker]
        jr.handle = {"run": a.run.remote(jr.job_id, job, resume_from), "poll": a.poll.remote(jr.job_id, 0)}

    def next_event(self, running: list[Running]) -> Event:
        """Wait for a loop's next poll answer (records) or, once polls are done, its outcome; an actor error is its
        death."""
        import ray
        from ray.exceptions import RayActorError
        while True:
            # a loop's outcome once its last poll has answered (what it handed over last comes first)
            refs = {jr.handle["poll"] if jr.handle["poll"] is not None else jr.handle["run"]: jr for jr in running}
            ready, _ = ray.wait(list(refs), num_returns=1)
            jr = refs[ready[0]]
            if ready[0] == jr.handle["run"]:
                try:
                    return Event(jr, outcome=ray.get(ready[0]))
                except RayActorError as e:
                    return Event(jr, died=type(e).__name__)
            jr.handle["poll"] = None
            try:
                res = ray.get(ready[0])
            except RayActorError:
                continue                                 # the run's own ref says the actor died
            jr.finished = res["finished"]
            return Event(jr, records=res["records"])

    def ack(self, jr: Running) -> None:
        """Poll for the records after those the driver has written (the actor's loop may go on)."""
        if not jr.finished:
            jr.handle["poll"] = self.actors[jr.worker].poll.remote(jr.job_id, jr.received)

    def replace(self, worker: str) -> tuple[str, dict]:
        """A new actor in place of a dead one: (name, info)."""
        import ray
        name = self._actor()
        return name, self._info(name, ray.get(self.actors[name].info.remote()))

    def close(self) -> None:
        """Kill every actor, and shut down the Ray instance this pool started."""
        import ray
        for a in self.actors.values():
            try:
                ray.kill(a)
            except Exception:
                pass
        if self.own_instance:
            ray.shutdown()


class RayExecutor:
    """Kernels in parallel on Ray actors, one per GPU, on this machine or the cluster at ``address``."""
    name = "ray"

    def __init__(self, *, address: str | None = None, num_gpus: int | None = None):
        self.address, self.num_gpus = address, num_gpus

    def describe(self) -> dict:
        """The executor as the campaign's state records it."""
        return {"executor": self.name, "address": self.address}

    def run(self, c, started: float, *, echo=None) -> None:
        """Run the campaign's kernels on a pool of Ray actors."""
        Driver(RayPool(self.address, self.num_gpus)).run(c, started, echo=echo)
