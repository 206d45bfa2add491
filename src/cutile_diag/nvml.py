"""Thin NVML access (pynvml from nvidia-ml-py) with the pitfalls handled.

Public API::

    nvml_available() -> str | None                   # None if usable, else why not
    nvml_handle_for_torch_device(index_or_device)    # maps through the UUID: NVML numbers
                                                     # physical GPUs and ignores CUDA_VISIBLE_DEVICES
    read_nvml(handle) -> dict[str, (value, source)]  # every field we use, each with its call or error
    sample_sm_clock(handle) -> int | None
    clock_event_reasons(handle) -> int | None        # the clock-event (throttle) reasons mask
    slowdown(mask) -> list[str]                      # its thermal/hardware slowdowns (POWER_CAP apart)

Every NVML call is wrapped: a field that NVML refuses (NotSupported, NoPermission — e.g.
under MIG) comes back as ``(None, "nvmlX: <error>")`` instead of raising, so the device
model can say where each number came from, or why it is missing.
"""
from __future__ import annotations

import functools
from typing import Any


@functools.cache
def nvml_available() -> str | None:
    """None when NVML initialises, else why not."""
    try:
        import pynvml
    except ImportError:
        return "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return f"NVML init failed: {type(e).__name__}: {e}"
    return None


def _uuid_of_torch_device(device) -> str | None:
    import torch
    try:
        props = torch.cuda.get_device_properties(device)
    except Exception:
        return None
    u = getattr(props, "uuid", None)
    if u is None:
        return None
    text = str(u)
    if text.startswith(("GPU-", "MIG-")):
        return text
    return f"GPU-{text}"


def nvml_handle_for_torch_device(device=None):
    """NVML handle of the GPU torch calls ``device`` (default: the current device)."""
    why = nvml_available()
    if why:
        raise RuntimeError(why)
    import pynvml
    import torch
    if device is None:
        device = torch.cuda.current_device()
    uuid = _uuid_of_torch_device(device)
    if uuid:
        for cand in (uuid, uuid.replace("GPU-", "MIG-", 1)):
            try:
                return pynvml.nvmlDeviceGetHandleByUUID(cand.encode() if isinstance(cand, str) else cand)
            except Exception:
                continue
        # a MIG instance: find the parent whose MIG device carries this UUID
        try:
            n = pynvml.nvmlDeviceGetCount()
            for i in range(n):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                if _as_str(pynvml.nvmlDeviceGetUUID(h)) == uuid:
                    return h
        except Exception:
            pass
    # last resort (no UUID from torch): index order, which is wrong under CUDA_VISIBLE_DEVICES
    idx = device if isinstance(device, int) else getattr(torch.device(device), "index", 0) or 0
    return pynvml.nvmlDeviceGetHandleByIndex(idx)


def _as_str(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _call(name: str, fn, *args) -> tuple[Any, str]:
    try:
        return fn(*args), name
    except Exception as e:
        return None, f"{name}: {type(e).__name__}: {e}"


def read_nvml(handle) -> dict[str, tuple[Any, str]]:
    """Every device fact NVML gives for ``handle``: name -> (value or None, source or error)."""
    import pynvml
    out: dict[str, tuple[Any, str]] = {}
    out["name"] = (lambda r: (_as_str(r[0]) if r[0] is not None else None, r[1]))(
        _call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
    out["uuid"] = (lambda r: (_as_str(r[0]) if r[0] is not None else None, r[1]))(
        _call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
    out["sm_clock_max_mhz"] = _call("nvmlDeviceGetMaxClockInfo(SM)", pynvml.nvmlDeviceGetMaxClockInfo,
                                    handle, pynvml.NVML_CLOCK_SM)
    out["mem_clock_max_mhz"] = _call("nvmlDeviceGetMaxClockInfo(MEM)", pynvml.nvmlDeviceGetMaxClockInfo,
                                     handle, pynvml.NVML_CLOCK_MEM)
    out["sm_clock_current_mhz"] = _call("nvmlDeviceGetClockInfo(SM)", pynvml.nvmlDeviceGetClockInfo,
                                        handle, pynvml.NVML_CLOCK_SM)
    out["mem_clock_current_mhz"] = _call("nvmlDeviceGetClockInfo(MEM)", pynvml.nvmlDeviceGetClockInfo,
                                         handle, pynvml.NVML_CLOCK_MEM)
    out["bus_width_bits"] = _call("nvmlDeviceGetMemoryBusWidth", pynvml.nvmlDeviceGetMemoryBusWidth, handle)
    pl, src = _call("nvmlDeviceGetEnforcedPowerLimit", pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    out["power_limit_w"] = ((pl / 1000.0) if pl is not None else None, src)
    mig, src = _call("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle)
    out["mig_mode"] = ((bool(mig[0]) if isinstance(mig, (list, tuple)) else bool(mig)) if mig is not None else None, src)
    drv, src = _call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
    out["driver_version"] = (_as_str(drv) if drv is not None else None, src)
    cc, src = _call("nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    out["compute_capability"] = (tuple(cc) if cc is not None else None, src)
    out["gpu_cores"] = _call("nvmlDeviceGetNumGpuCores", pynvml.nvmlDeviceGetNumGpuCores, handle)
    return out


def sample_sm_clock(handle) -> int | None:
    """The current SM clock in MHz, or None."""
    import pynvml
    try:
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:
        return None


# NVML's clock-event (throttle) reason bits (nvmlClocksEventReason*; the same values as the older
# nvmlClocksThrottleReason*).  A power cap lowers the SM clock steadily: the time scales with it and
# a comparison in cycles undoes it.  Thermal and hardware slowdowns (and the power brake) cut the
# clock abruptly, for part of a run, so the clock read beside it does not describe the run.
POWER_CAP = 0x4
SLOWDOWN = {0x8: "hw-slowdown", 0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "hw-power-brake"}


def slowdown(reasons: int | None) -> list[str]:
    """The thermal/hardware slowdowns in a reasons mask (a run taken under one is not compared)."""
    return [name for bit, name in SLOWDOWN.items() if reasons and reasons & bit]


def clock_event_reasons(handle) -> int | None:
    """The bit mask of why clocks are held down (either NVML spelling), or None."""
    import pynvml
    for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        f = getattr(pynvml, fn, None)
        if f is None:
            continue
        try:
            return int(f(handle))
        except Exception:
            continue
    return None
