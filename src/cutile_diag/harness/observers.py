"""Observers watch the timed phase of a measurement (Kernel Tuner's ``NVMLObserver`` idea).

Public API::

    obs = ClockObserver(device=None, period_s=0.01)   # NVML SM clock + clock-event reasons
    obs.start(); ...timed work...; obs.stop() -> {"sm_clock_mhz": {...}, "clock_event_reasons": int}

An observer never fails a measurement: without NVML it reports why it saw nothing.
"""
from __future__ import annotations

import statistics
import threading
from typing import Any


class ClockObserver:
    """Samples the GPU's SM clock (and clock event reasons) through NVML in a thread while
    started; ``stop`` returns them, or why it could not."""
    def __init__(self, device=None, period_s: float = 0.01):
        self.device = device
        self.period_s = period_s
        self._samples: list[int] = []
        self._reasons = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: str | None = None
        self._handle = None

    def start(self) -> None:
        """Start sampling every ``period_s``; without NVML only the reason is kept."""
        try:
            from ..nvml import nvml_handle_for_torch_device
            self._handle = nvml_handle_for_torch_device(self.device)
        except Exception as e:
            self._error = f"NVML unavailable: {e}"
            return
        self._stop.clear()
        self._samples = []
        self._thread = threading.Thread(target=self._loop, name="cutile-diag-clock", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        from ..nvml import clock_event_reasons, sample_sm_clock
        while not self._stop.is_set():
            c = sample_sm_clock(self._handle)
            if c is not None:
                self._samples.append(c)
            r = clock_event_reasons(self._handle)
            if r is not None:
                self._reasons |= r
            self._stop.wait(self.period_s)

    def stop(self) -> dict[str, Any]:
        """Stop and return the SM clock's median/min/max and the OR of the clock event reasons."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=1.0)
            self._thread = None
        if self._error:
            return {"sm_clock_mhz": None, "clock_observer": self._error}
        if not self._samples:
            return {"sm_clock_mhz": None, "clock_observer": "no samples (timed phase shorter than one period)"}
        s = self._samples
        return {"sm_clock_mhz": {"median": statistics.median(s), "min": min(s), "max": max(s), "n": len(s)},
                "clock_event_reasons": self._reasons}
