"""Measured ceilings: what this GPU really delivers, measured once and cached.

Public API::

    c = get_ceilings(dev, refresh=False)      # cached per device + driver, measured if missing
    c = measure_ceilings(dev, copy_bytes=1 << 30, gemm_n=8192, dtypes=("bf16", "f16"))
    c = load_cached(dev)                      # None when never measured
    c = recorded_ceilings(dev)                # offline preset: the project's committed measurement, or None
    c.dram_bw -> Quantity(B/s); c.flops["bf16:tensor"] -> Quantity(FLOP/s); c.ceiling("dram") / ("bf16:tensor")
    c.curve -> BandwidthCurve | None          # bandwidth by bytes moved + the launch floor (roofline.curve)
    cache_path() -> ~/.cache/cutile-diag/peaks.json  ($CUTILE_DIAG_CACHE_DIR overrides the folder)

Bandwidth: the faster of a large device-to-device ``copy_`` (default 1 GiB, far beyond L2,
counting bytes read **and** written) and a streaming ``torch.add`` (2 reads + 1 write); compute: a large
``torch.matmul`` (default 8192³) on random
data (zeros run faster: less switching power) per dtype.  Each is timed with CUDA events
after warm-up; the ceiling is the median repetition, the best one is kept alongside.

The size curve (``roofline.curve``: read / write / copy bandwidth by bytes moved, L2 flushed and
warm, and the launch floor) is measured with the ceilings and cached beside them; a cache entry
from before the curve gets its curve measured on its next use (< 30 s on an H200).

Offline presets carry the ceilings this project measured and committed
(``RECORDED_CEILINGS``, H200 only so far) and the committed curve (``roofline/curves/``), so a
recorded latency is checked against what a real device delivered and not only against the
theoretical roof.
"""
from __future__ import annotations

import copy
import datetime as _dt
import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..output import write_atomic
from .curve import BandwidthCurve, measure_curve, preset_curve
from .device import DeviceModel, Quantity
from ..harness.observers import ClockObserver
from ..errors import NoGPUError
from ..workload import torch_dtype

SCHEMA = "cutile-diag.peaks/1"


def cache_dir() -> Path:
    """CUTILE_DIAG_CACHE_DIR, else ``$XDG_CACHE_HOME/cutile-diag`` (default ``~/.cache``)."""
    env = os.environ.get("CUTILE_DIAG_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cutile-diag"


def cache_path() -> Path:
    """The JSON file measured ceilings are cached in, keyed by device."""
    return cache_dir() / "peaks.json"


@dataclass
class Ceilings:
    """A device's measured ceilings: DRAM bandwidth, FLOP/s per ``dtype:unit``, the size curve
    and how they were measured."""
    device_key: str
    device_name: str
    dram_bw: Quantity | None
    flops: dict[str, Quantity] = field(default_factory=dict)
    measured_at: str = ""
    torch_version: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    curve: BandwidthCurve | None = None

    @property
    def recorded_from(self) -> str | None:
        """The committed file an offline preset's ceilings come from (None: measured here)."""
        return self.details.get("recorded_from")

    def ceiling(self, what: str) -> Quantity | None:
        """The DRAM ceiling (``dram``/``bw``/``dram_bw``) or the FLOP ceiling of ``dtype:unit``."""
        if what in ("dram", "bw", "dram_bw"):
            return self.dram_bw
        return self.flops.get(what)

    def to_json(self) -> dict:
        """The ceilings as JSON (the cache entry's form)."""
        return {"device_key": self.device_key, "device_name": self.device_name,
                "dram_bw": self.dram_bw.to_json() if self.dram_bw else None,
                "flops": {k: q.to_json() for k, q in self.flops.items()}, "measured_at": self.measured_at,
                "torch_version": self.torch_version, "details": self.details, "cached": self.cached,
                "curve": self.curve.to_json() if self.curve else None}

    @classmethod
    def from_json(cls, d: dict) -> "Ceilings":
        """The ceilings of a cache entry, marked ``cached``."""
        def q(x):
            return Quantity(x["value"], x["unit"], x["source"]) if x else None
        return cls(device_key=d["device_key"], device_name=d.get("device_name", ""), dram_bw=q(d.get("dram_bw")),
                   flops={k: q(v) for k, v in (d.get("flops") or {}).items()}, measured_at=d.get("measured_at", ""),
                   torch_version=d.get("torch_version"), details=d.get("details") or {}, cached=True,
                   curve=BandwidthCurve.from_json(d["curve"]) if d.get("curve") else None)


_H200_RUN = ("recorded: bench/results/optimize-h200/peaks.json (cutile-diag peaks on an NVIDIA H200, driver "
             "580.159.04, torch 2.11.0+cu130, 2026-12-02T14:35:01Z)")
RECORDED_CEILINGS: dict[str, Ceilings] = {
    "NVIDIA H200": Ceilings(
        device_key="preset NVIDIA H200", device_name="NVIDIA H200",
        dram_bw=Quantity(4240686599731.964, "B/s", f"{_H200_RUN}: torch.add f32 over 1024 MiB arrays, 2 reads + 1 "
                                                   "write, median of 20 (beat memcpy 4.17 TB/s)"),
        flops={"bf16:tensor": Quantity(772997489837774.8, "FLOP/s", f"{_H200_RUN}: torch.matmul bf16 8192^3 on "
                                                                    "random data, median of 10 (cuBLAS)"),
               "f16:tensor": Quantity(727028660536223.0, "FLOP/s", f"{_H200_RUN}: torch.matmul f16 8192^3 on "
                                                                   "random data, median of 10 (cuBLAS)")},
        measured_at="2026-12-02T14:35:01+00:00", torch_version="2.11.0+cu130",
        details={"recorded_from": "bench/results/optimize-h200/peaks.json"},
        curve=preset_curve("NVIDIA H200")),
}


def recorded_ceilings(dev: DeviceModel) -> Ceilings | None:
    """The committed measurement for an offline preset (None: this preset was never measured)."""
    c = RECORDED_CEILINGS.get(dev.name) if dev.kind == "preset" else None
    return copy.deepcopy(c) if c is not None else None


def _read_cache() -> dict:
    p = cache_path()
    if not p.exists():
        return {"schema": SCHEMA, "entries": {}}
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return {"schema": SCHEMA, "entries": {}}   # a corrupt cache is re-measured, not fatal
    if data.get("schema") != SCHEMA or not isinstance(data.get("entries"), dict):
        return {"schema": SCHEMA, "entries": {}}
    return data


def load_cached(dev: DeviceModel) -> Ceilings | None:
    """The cached ceilings of ``dev`` (same name, UUID and driver), or None; an unreadable entry is None."""
    entry = _read_cache()["entries"].get(dev.key)
    if not entry:
        return None
    try:
        return Ceilings.from_json(entry)
    except (KeyError, TypeError):
        return None


def save(c: Ceilings) -> Path:
    """Store ``c`` in the cache under its device key (atomically) and return the cache's path."""
    data = _read_cache()
    d = c.to_json()
    d["cached"] = False
    data["entries"][c.device_key] = d
    write_atomic(cache_path(), json.dumps(data, indent=2))
    return cache_path()


def _time_events(fn, reps: int, warmup: int) -> list[float]:
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e))
    return out


def measure_ceilings(dev: DeviceModel, *, copy_bytes: int = 1 << 30, gemm_n: int = 8192,
                     dtypes: tuple[str, ...] = ("bf16", "f16"), reps: int = 20, curve: bool = True) -> Ceilings:
    """Measure ``dev``'s ceilings: DRAM bandwidth by a large copy, FLOP/s by torch GEMMs per
    dtype (medians of ``reps``), and the size curve; the SM clock is sampled meanwhile."""
    import torch
    if not torch.cuda.is_available():
        raise NoGPUError("measuring ceilings needs a GPU",
                         hint="offline: use --device h200 (it carries this project's recorded H200 ceilings)")
    device = f"cuda:{dev.index}" if dev.index is not None else "cuda"
    details: dict[str, Any] = {}
    obs = ClockObserver(dev.index)
    obs.start()
    try:
        src = torch.empty(copy_bytes, dtype=torch.uint8, device=device)
        src.fill_(1)
        dst = torch.empty_like(src)
        ts = _time_events(lambda: dst.copy_(src), reps, warmup=3)  # noqa: F821 (runs before the del below)
        del src, dst
        med, best = statistics.median(ts), min(ts)
        copy_bw = 2.0 * copy_bytes / (med * 1e-3)
        details["copy"] = {"bytes": copy_bytes, "reps": reps, "median_ms": med, "best_ms": best,
                           "median_bw": copy_bw, "best_bw": 2.0 * copy_bytes / (best * 1e-3)}
        # A streaming kernel (two reads, one write) can beat the copy engine's memcpy on HBM3e
        # (seen on the H200: memcpy 4.11 TB/s, a cuTile vector add 4.23 TB/s), so the
        # ceiling is the faster of the two; otherwise good kernels read as "above the roof".
        n = copy_bytes // 4
        x = torch.ones(n, dtype=torch.float32, device=device)
        y = torch.ones_like(x)
        z = torch.empty_like(x)
        ts = _time_events(lambda: torch.add(x, y, out=z), reps, warmup=3)  # noqa: F821 (runs before the del below)
        del x, y, z
        amed, abest = statistics.median(ts), min(ts)
        add_bw = 3.0 * n * 4 / (amed * 1e-3)
        details["add"] = {"bytes": 3 * n * 4, "reps": reps, "median_ms": amed, "best_ms": abest,
                          "median_bw": add_bw}
        if add_bw > copy_bw:
            dram = Quantity(add_bw, "B/s", f"measured: torch.add f32 over {n * 4 / (1 << 20):.0f} MiB "
                                           f"arrays, 2 reads + 1 write, median of {reps} (beat memcpy "
                                           f"{copy_bw / 1e12:.2f} TB/s; torch {torch.__version__})")
        else:
            dram = Quantity(copy_bw, "B/s", f"measured: device-to-device copy of {copy_bytes / (1 << 20):.0f} MiB, "
                                            f"read + write, median of {reps} (torch {torch.__version__})")
        flops: dict[str, Quantity] = {}
        g = torch.Generator(device=device)
        g.manual_seed(0)
        for dt in dtypes:
            tdt = torch_dtype(dt)
            a = torch.randn(gemm_n, gemm_n, generator=g, device=device, dtype=torch.float32).to(tdt)
            b = torch.randn(gemm_n, gemm_n, generator=g, device=device, dtype=torch.float32).to(tdt)
            c = torch.empty(gemm_n, gemm_n, device=device, dtype=tdt)
            n_reps = max(5, reps // 2)
            ts = _time_events(lambda: torch.matmul(a, b, out=c), n_reps, warmup=3)  # noqa: F821 (runs before the del below)
            del a, b, c
            med, best = statistics.median(ts), min(ts)
            fl = 2.0 * gemm_n ** 3
            flops[f"{dt}:tensor"] = Quantity(fl / (med * 1e-3), "FLOP/s",
                                             f"measured: torch.matmul {dt} {gemm_n}^3 on random data, median of "
                                             f"{n_reps} (torch {torch.__version__}, cuBLAS)")
            details[f"gemm_{dt}"] = {"n": gemm_n, "reps": n_reps, "median_ms": med, "best_ms": best,
                                     "best_flops": fl / (best * 1e-3)}
        torch.cuda.empty_cache()
        size_curve = measure_curve(dev) if curve else None
    finally:
        details.update(obs.stop())
    return Ceilings(device_key=dev.key, device_name=dev.name, dram_bw=dram, flops=flops,
                    measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    torch_version=torch.__version__, details=details, curve=size_curve)


def get_ceilings(dev: DeviceModel, *, refresh: bool = False, measure_if_missing: bool = True,
                 **kw) -> Ceilings | None:
    """Cached ceilings for this device + driver; measured (and cached) when missing or refreshed."""
    if dev.kind != "live":
        return None
    if not refresh:
        c = load_cached(dev)
        if c is not None and (c.curve is not None or not measure_if_missing):
            return c
        if c is not None:                  # cached before the size curve existed: add it
            c.curve = measure_curve(dev)
            save(c)
            return c
        if not measure_if_missing:
            return None
    c = measure_ceilings(dev, **kw)
    save(c)
    return c
