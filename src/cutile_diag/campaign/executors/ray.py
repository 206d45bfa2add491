"""The Ray executor (``cutile-diag[ray]``): one actor per GPU, kernels in parallel.

Each actor holds one GPU (``num_gpus=1``; Ray sets its ``CUDA_VISIBLE_DEVICES``), has a
cuTile cache of its own (``CUDA_TILE_CACHE_DIR``) and runs whole loops: every comparison of a
loop is measured by the one actor, on its one GPU.  GPUs of different models are refused
(a campaign's measurements must be comparable).  The driver dispatches kernels best expected
gain first and is the only writer of ``campaign.json`` and the report; it starts one loop's
setup at a time (git branch + worktree creation in the user's repository is not concurrent).
An actor that dies takes its kernel with it: the kernel is recorded as crashed, and retried
once, on a fresh actor, resuming the loop from its ledger.  Without ``--ray-address`` a local
Ray instance is started on this machine's GPUs.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections import deque

from ...errors import UsageError
from ..run import Campaign, Echo, Job, _ledger_exists, ratio_text, record_outcome, run_job

NAMESPACE = "cutile-diag"


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


class _Worker:
    """One GPU's worker: runs one kernel's loop at a time (``run_job``), in its own process."""

    def __init__(self):
        import ray
        self.gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        if self.gpu_ids:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
        # a cuTile cache per actor: two actors never compile into (or evict from) one cache
        self.cache = tempfile.mkdtemp(prefix="cutile-diag-ray-cache-")
        os.environ["CUDA_TILE_CACHE_DIR"] = self.cache

    def info(self) -> dict:
        return {"pid": os.getpid(), "gpus": self.gpu_ids, "model": _gpu_model(), "cache": self.cache}

    def run(self, job: dict) -> dict:
        return run_job(Job(**job))


class RayExecutor:
    name = "ray"

    def __init__(self, *, address: str | None = None, num_gpus: int | None = None):
        self.address, self.num_gpus = address, num_gpus
        self.actors: dict = {}                   # actor name -> handle (named: `ray.get_actor` finds them)

    def _actor(self):
        name = f"cutile-diag-worker-{os.getpid()}-{len(self.actors)}"
        self.actors[name] = self._actor_cls.options(name=name, namespace=NAMESPACE).remote()
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
        self._actor_cls = ray.remote(num_gpus=1, num_cpus=0, max_restarts=0)(_Worker)
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
        from ray.exceptions import RayActorError
        say = echo or (lambda _m: None)
        self._start(say)
        queue = deque(c.todo())
        idle = list(self.actors)                 # names
        running: dict = {}                       # ObjectRef -> (kernel, actor)
        try:
            while queue or running:
                while queue and idle:
                    name = queue.popleft()
                    share = c.time_share(name, started)
                    if share is not None and share < 1.0:
                        say(f"{name}: no time left of --time-limit; `campaign --resume` runs it")
                        continue
                    actor = idle.pop()
                    job = c.job(name, share)
                    c.mark(name, status="running", attempts=c.state(name)["attempts"] + 1, time_share_s=share,
                           worker=actor)
                    say(f"{name}: {'resuming its loop' if job.resume else 'loop'} on {actor}"
                        + (f", {share:.0f} s of the time limit" if share is not None else ""))
                    ref = self.actors[actor].run.remote(dataclasses.asdict(job))
                    running[ref] = (name, actor)
                    self._await_setup(c, name, ref)
                done, _ = ray.wait(list(running), num_returns=1)
                ref = done[0]
                name, actor = running.pop(ref)
                try:
                    outcome = ray.get(ref)
                except RayActorError as e:
                    crashes = c.state(name).get("crashes", 0) + 1
                    c.mark(name, status="crashed", crashes=crashes,
                           error=f"its Ray actor died mid-loop ({type(e).__name__})")
                    say(f"{name}: its Ray actor died mid-loop: recorded as crashed")
                    idle.append(self._actor())                 # on the GPU the dead actor held
                    if crashes <= 1:
                        c.mark(name, status="retry")
                        queue.appendleft(name)
                        say(f"{name}: retried once, on another actor")
                    continue
                record_outcome(c, name, outcome)
                idle.append(actor)
                r = outcome.get("result") or {}
                say(f"{name}: " + (f"{r.get('stop_rule')}, " + (ratio_text(r) or "no speedup")
                                   if outcome["status"] == "done" else f"crashed: {outcome.get('error')}"))
        finally:
            for a in self.actors.values():
                try:
                    ray.kill(a)
                except Exception:
                    pass

    def _await_setup(self, c: Campaign, name: str, ref) -> None:
        """Wait until the loop just dispatched has its branch, worktree and ledger (or has ended):
        loop setups in one repository run one at a time."""
        import ray
        attr = c.kernel(name).ref.rsplit("::", 1)[1]
        while not _ledger_exists(c.out / "loops", attr):
            ready, _ = ray.wait([ref], timeout=0.2)
            if ready:
                return
            time.sleep(0.05)
