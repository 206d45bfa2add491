"""Launch facts that depend on the compiled kernel: resident CTAs per SM, waves and the idle tail.

The residency estimate is made once per capture (``collect_capture`` stores it as
``cubin.resident_ctas``); the launch, static-grid and GPU collectors read that fact through
``resident`` and share the wave arithmetic of ``waves``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .evidence import Evidence

# per-SM hardware limits for the resident-CTA estimate (Hopper/Blackwell/Ampere data-center):
# threads, registers, blocks, shared memory bytes
_SM_LIMITS = {"sm_80": (2048, 65536, 32, 164 * 1024), "sm_90": (2048, 65536, 32, 228 * 1024),
              "sm_100": (2048, 65536, 32, 228 * 1024)}


def ctas_per_sm(ev: Evidence, arch: str) -> tuple[int | None, str]:
    """CTAs per SM the cubin's threads, registers and shared memory allow on ``arch``, and what
    limits them (or None and why it cannot be told)."""
    lim = _SM_LIMITS.get(re.sub(r"[a-z]$", "", arch))
    threads, regs, smem = (ev.value("cubin.threads_per_cta"), ev.value("cubin.registers"),
                           ev.value("cubin.shared_bytes"))
    if lim is None:
        return None, f"no per-SM limits for {arch}"
    if not threads or regs is None:
        return None, "threads per CTA / registers unknown"
    max_thr, max_regs, max_blocks, max_smem = lim
    warps = math.ceil(threads / 32)
    regs_per_warp = math.ceil(max(regs, 1) * 32 / 256) * 256
    by = {"threads": max_thr // threads, "registers": max_regs // (regs_per_warp * warps),
          "blocks": max_blocks, "shared memory": (max_smem // smem) if smem else max_blocks}
    # the occupancy hint only sets the register budget (.maxnreg) the cubin's registers already
    # show; .minnctapersm stays 1, so it caps nothing (H200: occupancy=1 on a 6-block kernel
    # measured +0.8 %, not a drop to one block)
    occ = ev.value("ir.hint_occupancy") or 0
    n = max(1, min(by.values()))
    limiter = min(by, key=by.get)
    txt = f"{threads} threads, {regs} regs, {smem or 0} B smem (limit: {limiter})"
    if occ:
        txt += f", occupancy hint {occ}"
    return n, txt


def resident(ev: Evidence, arch: str | None) -> tuple[int | None, str]:
    """The stored ``cubin.resident_ctas`` with its reason; without it, why it is unknown."""
    fact = ev.get("cubin.resident_ctas")
    if fact is not None:
        return fact.value, fact.detail
    if arch is None:
        return None, "no compiled target"
    return ctas_per_sm(ev, arch)


def add_waves(ev: Evidence, prefix: str, blocks: int, unit: str, arch: str | None) -> None:
    """``<prefix>.waves`` and ``<prefix>.tail_idle`` of ``blocks`` programs on the device's SMs
    (``static``: the output tiles of the captured shapes; ``launch``: an observed grid)."""
    sms = ev.value("device.sm_count")
    if not sms or arch is None:
        return
    per_sm, why = resident(ev, arch)
    if per_sm is None:
        ev.missing("waves / tail effect", why)
        return
    w = Waves.of(blocks, sms, per_sm)
    src = f"{prefix}: {blocks} {unit} / ({sms} SMs x {per_sm} CTAs/SM)"
    ev.add(f"{prefix}.waves", round(w.waves, 3), src, f"resident CTAs per SM estimated from {why}")
    ev.add(f"{prefix}.tail_idle", round(w.tail_idle, 3), src, w.last_wave_text())


@dataclass(frozen=True)
class Waves:
    """How a grid fills the GPU's resident CTA slots, wave by wave."""
    blocks: int
    slots: int               # SMs x resident CTAs per SM
    waves: float
    tail_idle: float         # the idle fraction of the last wave's slots
    last_wave: int           # blocks in the last wave

    @classmethod
    def of(cls, blocks: int, sms: int, per_sm: int) -> "Waves":
        """The waves of ``blocks`` on ``sms`` SMs holding ``per_sm`` CTAs each."""
        slots = sms * per_sm
        waves = blocks / slots
        full = math.ceil(waves)
        tail = (full - waves) / full if full else 0.0
        return cls(blocks, slots, waves, tail, blocks - (full - 1) * slots)

    def last_wave_text(self) -> str:
        """The last wave's fill as a phrase for a fact's detail."""
        return f"last wave holds {self.last_wave} of {self.slots} slots"
