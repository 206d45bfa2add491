"""Where the campaign's loops run: ``local`` (this machine: one GPU in this process, or one worker
process per GPU with ``--gpus N|all``) or ``ray`` (one actor per GPU).

An executor has ``name``, ``describe()`` and ``run(campaign, started, echo=)``; it takes the
kernels ``campaign.todo()`` lists, gives each ``campaign.time_share`` of the time left, runs
``run.run_job`` for it and hands the outcome to ``run.record_outcome`` (the driver writes).
The parallel ones share ``handover`` (the driver the only writer, a dead worker's kernel retried).
"""
from __future__ import annotations

from .local import LocalExecutor, resolve_gpus
from .ray import RayExecutor


def make_executor(name: str, *, ray_address: str | None = None, num_gpus: int | None = None,
                  gpus: str | int | None = None, simulated: bool = False):
    """The executor ``name``; ``gpus``: the local executor's ``--gpus N|all`` (refused where the
    machine has fewer, unless ``simulated``)."""
    if name == "local":
        return LocalExecutor(resolve_gpus(gpus, simulated=simulated), gpus)
    return RayExecutor(address=ray_address, num_gpus=num_gpus)
