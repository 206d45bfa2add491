"""Launch facts from a capture's manifest: the grid, argument specs and SM count of the kernel's
observed ``ct.launch`` (intercepted on CPU inputs, or seen in a run; ``measure.capture``).

With them the grid-vs-SMs, tail-effect and persistence entries are judged on the real grid
("grid 16384 blocks on 132 SMs") instead of a static estimate or "grid size unknown".
"""
from __future__ import annotations

import math

from .evidence import Evidence
from .residency import add_waves


def collect_launch(folder, ev: Evidence, arch: str | None) -> None:
    """Add the manifest's recorded launch to ``ev``: grid, blocks, argument specs, SM count and
    the waves they make; nothing when the capture has no launch."""
    launch = (folder.manifest or {}).get("launch")
    if not launch or not launch.get("grid"):
        return
    grid = [int(g) for g in launch["grid"]]
    blocks = int(launch.get("grid_blocks") or math.prod(grid))
    where = f"{folder.path.name}/manifest.json launch ({launch.get('source', '?')}"
    where += f", configuration {launch['configuration']})" if launch.get("configuration") else ")"
    ev.add("launch.grid", grid, where, f"ct.launch grid {tuple(grid)}")
    ev.add("launch.grid_blocks", blocks, where, f"{blocks} programs")
    args = [f"{a['name']}={a['spec']}" for a in launch.get("args") or [] if a.get("spec")]
    if args:
        ev.add("launch.args", args, where, ", ".join(args))
    sms = launch.get("sm_count")
    if sms:
        ev.add("launch.sm_count", int(sms), where, launch.get("sm_source") or "")
        if "device.sm_count" not in ev:
            ev.add("device.sm_count", int(sms), where, launch.get("sm_source") or "")
    ev.resolve("grid size vs SMs")
    add_waves(ev, "launch", blocks, "blocks", arch)
