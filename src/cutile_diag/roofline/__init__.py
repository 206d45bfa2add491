"""Stage 3 — the roofline: device model, measured ceilings, static cost, verdicts.

Public API::

    from cutile_diag.roofline import (device_model, live_device, preset, get_ceilings, analyze,
                                      recipe_class, static_count, count_workload, cross_check,
                                      plot_roofline)
    from cutile_diag.measure.roofline import roofline_workload     # measures: above harness and workloads

    pts = roofline_workload(wl, configs, device=dev, ceilings=c, latencies={"4096-f16": 0.25})
    # -> list[RooflinePoint]; measures on the GPU when no latency is given (measure.measure_isolated)

* ``device``      — ``DeviceModel`` (every number a ``Quantity`` with its source), presets,
                    per-variant datasheet figures (kept apart from the clock-derived theoretical peaks)
* ``arch``        — FLOP/clk/SM tables per dtype and unit for sm_80/86/89/90/100/120
* ``peaks``       — measured ceilings (copy + GEMM), cached per device + driver; recorded ones for presets
* ``model``       — classification, percent of roof, the above-roof guard, verdicts
* ``static_cost`` — FLOPs/bytes from the TileIR (loads/stores x tiles x trips, mma 2·M·N·K)
* ``plot``        — PNG/SVG roofline chart
* ``ncu``         — Nsight Compute metrics for one run of a workload
"""
from .device import DeviceModel, Quantity, device_model, live_device, preset, preset_names
from .model import RooflinePoint, analyze, recipe_class
from .peaks import Ceilings, get_ceilings, load_cached, measure_ceilings, recorded_ceilings
from .plot import plot_roofline
from .static_cost import StaticCount, count_workload, cross_check, static_count

__all__ = ["DeviceModel", "Quantity", "device_model", "live_device", "preset", "preset_names", "RooflinePoint",
           "analyze", "recipe_class", "Ceilings", "get_ceilings", "load_cached", "measure_ceilings",
           "recorded_ceilings", "plot_roofline", "StaticCount", "count_workload", "cross_check", "static_count"]
