"""The one way to get a device's measured ceilings (``roofline.peaks``), in this process or a child.

``device_ceilings(dev, measure=...)`` is what every process that may touch the GPU calls (the
campaign's driver, the roofline, the loop's measuring worker): a live GPU's ceilings are cached
per device + driver and measured (seconds: a copy and a GEMM) only when ``measure`` is true and
none is cached; an offline preset's are the project's committed measurement.  The loop's own
process never touches the GPU: ``ceilings_in_child`` asks a killable child
(``measure.isolated.run_isolated``, a typed entry point, not the command line) and gets the answer
as data, ``CeilingAnswer``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CutileDiagError
from ..roofline.device import DeviceModel, live_device
from ..roofline.peaks import Ceilings, get_ceilings, recorded_ceilings


def device_ceilings(dev: DeviceModel, *, measure: bool = False, refresh: bool = False) -> Ceilings | None:
    """The ceilings of ``dev``: for a live GPU the cached ones, measured first when ``measure``
    and none is cached (None otherwise) or when ``refresh``; for a preset the committed
    measurement (or None)."""
    if dev.kind == "live":
        return get_ceilings(dev, refresh=refresh, measure_if_missing=measure)
    return recorded_ceilings(dev)


@dataclass
class CeilingAnswer:
    """A child's answer: the ceilings as ``Ceilings.to_json()`` gives them, or why there are none."""
    ceilings: dict | None = None
    why: str = ""

    def to_json(self) -> dict:
        """The form the child returns through ``run_isolated``."""
        return {"ceilings": self.ceilings, "why": self.why}


def live_ceilings(measure: bool = False) -> dict:
    """Child side of ``ceilings_in_child``: this machine's GPU's ceilings as ``CeilingAnswer.to_json()``;
    errors (no GPU, a failed measurement) come back as ``why``, never as a traceback."""
    try:
        got = device_ceilings(live_device(), measure=measure)
    except CutileDiagError as e:
        return CeilingAnswer(why=e.message).to_json()
    return CeilingAnswer(got.to_json() if got else None, "" if got else "no measured ceiling").to_json()


def ceilings_in_child(*, measure: bool, timeout: float, env: dict | None = None) -> CeilingAnswer:
    """``live_ceilings`` in a killable child (``timeout`` seconds; ``env`` added to its environment)."""
    from .isolated import IsolatedError, IsolatedTimeout, run_isolated
    try:
        d = run_isolated(f"{__name__}:live_ceilings", {"measure": measure}, timeout_s=timeout, env=env)
    except IsolatedTimeout:
        return CeilingAnswer(why=f"measuring the ceiling took longer than {timeout:.0f} s")
    except IsolatedError as e:
        return CeilingAnswer(why=e.message)
    return CeilingAnswer(d.get("ceilings"), d.get("why") or "")
