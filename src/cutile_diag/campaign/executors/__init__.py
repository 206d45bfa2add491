"""Where the campaign's loops run: ``local`` (this process, one GPU) or ``ray`` (one actor per GPU).

An executor has ``name``, ``describe()`` and ``run(campaign, started, echo=)``; it takes the
kernels ``campaign.todo()`` lists, gives each ``campaign.time_share`` of the time left, runs
``run.run_job`` for it and hands the outcome to ``run.record_outcome`` (the driver writes).
"""
from __future__ import annotations

from .local import LocalExecutor
from .ray import RayExecutor


def make_executor(name: str, *, ray_address: str | None = None, num_gpus: int | None = None):
    if name == "local":
        return LocalExecutor()
    return RayExecutor(address=ray_address, num_gpus=num_gpus)
