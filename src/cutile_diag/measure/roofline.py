"""One call from a workload to roofline points: measure (or take recorded latencies), count, place.

Public API (the ``roofline`` command's: ``load_target`` then ``run``)::

    wl = load_target(RooflineRequest(ref, ...))
    r = run(req, wl, latencies=None, show=True)   # -> RooflineRun: device, ceilings, results, plot
    c = run_command(CommandRequest(["pytest", ...]), echo=print)   # -- COMMAND -> CommandRun

    results = roofline_workload(wl, cfgs, device=dev, ceilings=c, latencies=None, options=None,
                                check=True, check_seed=None, isolated=True, timeout_s=300, static=True,
                                ncu=False, on_step=print)
    for r in results: r.config, r.status, r.error, r.point (RooflinePoint | None), r.measure

``latencies`` (config name -> ms) switches a configuration to offline placement: no GPU,
no correctness check.  ``check_seed`` None (the default) checks each configuration on fresh
random inputs from a new seed, recorded in the point's ``check``.  Otherwise each configuration is measured through
``measure.measure_isolated`` (a killable subprocess; ``isolated=False``: ``measure.measure_version`` in this
process).  A configuration whose check fails, raises or times out gets no point — a wrong
kernel has no meaningful speed — and its result says why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .observe import ObservedRun, observe_command
from ..capture.spec import parse_assignments
from ..errors import CutileDiagError, UsageError
from ..output import progress
from ..workload import Workload, WorkloadConfig
from ..workloads import load_workload
from ..workloads.kernel import kernel_workload
from ..roofline import device as device_mod       # read at call time, so a patched live_device is the one used
from ..roofline.device import DeviceModel
from ..roofline.model import RooflinePoint, analyze
from ..roofline.ncu import ncu_available, profile_command
from ..roofline.observed import KernelResult, attach_ncu, roofline_launches
from ..roofline.peaks import Ceilings
from ..roofline.plot import plot_roofline
from ..roofline.static_cost import count_workload, cross_check
from ..harness.timing import BenchOptions
from .ceilings import device_ceilings
from .isolated import measure_isolated
from .version import MeasureRequest, measure_version
from ..roofline.ncu import profile_workload


@dataclass
class ConfigResult:
    """One configuration's roofline outcome: its status, the placed point when it measured, and the static and ncu
    side reports."""
    config: str
    status: str                       # ok | mismatch | error | timeout | unavailable | no_gpu
    error: str | None = None
    point: RooflinePoint | None = None
    measure: Any = None               # measure.MeasureResult
    static: dict[str, Any] | None = None
    ncu: dict[str, Any] | None = None

    def to_json(self) -> dict:
        """The JSON record of this configuration (its point, measurement and side reports)."""
        return {"config": self.config, "status": self.status, "error": self.error,
                "point": self.point.to_json() if self.point else None,
                "measure": self.measure.to_json() if self.measure is not None else None,
                "static": self.static, "ncu": self.ncu}


def static_summary(wl: Workload, cfg: WorkloadConfig, device: DeviceModel) -> dict[str, Any] | None:
    """Static count + cross-check for one configuration (None when the workload has no capture spec)."""
    num_sms = device.sm_count.value if device.sm_count.known else 132
    try:
        cap = wl.capture(cfg, num_sms)
        if cap is None:
            return {"available": False, "reason": "the workload gives no AOT capture spec for this configuration"}
        sc = count_workload(wl, cfg, num_sms)
    except CutileDiagError as e:
        return {"available": False, "reason": f"static count failed: {e.one_line()}"}
    if getattr(wl, "counts_source", "declared") == "static":
        ratios, notes = {}, []            # the workload's counts *are* this count: nothing to cross-check
    else:
        ratios, notes = cross_check(sc, wl.flops(cfg), wl.bytes(cfg), wl.compute_unit(cfg))
    d = sc.to_json()
    d.update({"available": True, "ratios": ratios, "cross_check": notes})
    return d


def roofline_workload(wl: Workload, cfgs: Sequence[WorkloadConfig], *, device: DeviceModel,
                      ceilings: Ceilings | None = None, latencies: dict[str, float] | None = None,
                      options=None, check: bool = True, check_seed: int | None = None,
                      isolated: bool = True, timeout_s: float = 300.0,
                      static: bool = True, ncu: bool = False,
                      on_step: Callable[[str], None] | None = None) -> list[ConfigResult]:
    """Time (or take the recorded latency of) each configuration, count it statically, optionally profile it under
    ncu, and place it on the roofline; a configuration that fails to measure keeps its status and no point."""
    options = options or BenchOptions()
    out: list[ConfigResult] = []
    for cfg in cfgs:
        say = on_step or (lambda _m: None)
        num_sms = device.sm_count.value if device.sm_count.known else 132
        cap = None
        try:
            cap = wl.capture(cfg, num_sms)
        except Exception:
            cap = None
        grid = tuple(cap.grid) if cap is not None else None
        st = None
        if static:
            say(f"{cfg.name}: static count")
            st = static_summary(wl, cfg, device)
        res = ConfigResult(cfg.name, "ok", static=st)
        if latencies is not None and cfg.name in latencies:
            lat, src = float(latencies[cfg.name]), "recorded"
        else:
            say(f"{cfg.name}: check + time")
            if isolated:
                if not wl.ref:
                    raise CutileDiagError(f"workload {wl.name} has no reference string for a subprocess",
                                          hint="load it with load_workload(), or pass isolated=False")
                m = measure_isolated(wl.ref, cfg.name, workload_kwargs=wl.ref_kwargs or None, options=options,
                                     check=check, check_seed=check_seed, timeout_s=timeout_s,
                                     device=device.index if device.kind == "live" else None)
            else:
                m = measure_version(wl, cfg, MeasureRequest(options, check=check, check_seed=check_seed))
            res.measure = m
            if not m.ok:
                res.status, res.error = m.status, m.error
                out.append(res)
                continue
            lat, src = m.stats.median, "measured"
        # a recorded latency is taken as timed the harness's default way: L2 flushed
        flushed = options.flush_l2 if src == "measured" else True
        p = analyze(wl.name, cfg.name, latency_ms=lat, flops=wl.flops(cfg), bytes=wl.bytes(cfg),
                    unit=wl.compute_unit(cfg), device=device, ceilings=ceilings, latency_source=src, grid=grid,
                    l2_flushed=flushed)
        p.counts_source = getattr(wl, "counts_source", "declared")
        if p.counts_source == "static":
            p.notes.insert(0, "FLOPs and bytes are static estimates (the TileIR counted at these specs, grid "
                              f"{grid}; bytes: the minimum DRAM traffic, issued tile traffic capped by the arrays' "
                              f"footprint); the latency is {src}"
                              + ("; a bare kernel has no reference, so its output was not checked"
                                 if src == "measured" else ""))
        if res.measure is not None:
            p.stats = res.measure.stats.record()
            p.check = res.measure.check.to_json() if res.measure.check else None
            clocks = (res.measure.measurement or {}).get("observed", {}).get("sm_clock_mhz")
            if clocks and device.sm_clock_max_mhz.known and clocks.get("median"):
                ratio = clocks["median"] / device.sm_clock_max_mhz.value
                if ratio < 0.95:
                    p.notes.append(f"the SM clock ran at a median {clocks['median']:.0f} MHz during timing, "
                                   f"{100 * (1 - ratio):.0f}% below the {device.sm_clock_max_mhz.value:.0f} MHz "
                                   "the compute roof assumes")
        if st and st.get("available"):
            p.static = st
            p.notes.extend(st.get("cross_check", []))
        elif st:
            p.static = st
            p.notes.append(f"static count: {st.get('reason')}")
        if ncu:
            say(f"{cfg.name}: ncu")
            if not wl.ref:
                res.ncu = {"error": "the workload has no reference string for the profiled subprocess"}
            else:
                nr = profile_workload(wl.ref, cfg.name, workload_kwargs=wl.ref_kwargs or None, timeout_s=timeout_s,
                                      device=device.index if device.kind == "live" else None)
                res.ncu = nr.to_json()
                if nr.dram_bytes is not None and p.bytes > 0:
                    r = nr.dram_bytes / p.bytes
                    res.ncu["dram_vs_declared"] = r
                    p.notes.append(f"ncu measured {nr.dram_bytes / 1e6:.1f} MB of DRAM traffic, {r:.2f}x the "
                                   f"declared {p.bytes / 1e6:.1f} MB"
                                   + (" — the byte model under-counts" if r > 1.15 else
                                      " — traffic below the model: L2 hits or a byte model that over-counts"
                                      if r < 0.85 else ""))
            p.ncu = res.ncu
        res.point = p
        out.append(res)
    return out


# --- the ``roofline WORKLOAD | FILE.py::KERNEL`` command's request ----------------------------

@dataclass
class RooflineRequest:
    """The ``roofline`` command's flags for a workload or a kernel reference, parsed."""
    ref: str                                     # a workload reference, or FILE.py::KERNEL
    kernel: bool = False                         # ref names a @ct.kernel (its --arg specs, --grid)
    arg: list[str] = field(default_factory=list)
    grid: list[int] | None = None
    workload_args: dict[str, str] = field(default_factory=dict)
    configs: list[str] | None = None
    device: str | None = None                    # offline: a preset, with recorded latencies
    gpu: int | None = None
    measure_peaks: bool = True                   # measure missing ceilings (not with recorded latencies)
    ncu: bool = False
    flush_l2: bool = True
    cuda_graph: bool = False
    batch: bool = True
    warmup_ms: float | None = None
    rep_ms: float | None = None
    check: bool = True
    check_seed: int | None = None
    isolated: bool = True
    timeout_s: float = 300.0
    static: bool = True
    plot: str | None = None


@dataclass
class RooflineRun:
    """The ``roofline WORKLOAD`` command's outcome: one result per configuration and the plot written, if any."""
    workload: Workload
    device: DeviceModel
    ceilings: Ceilings | None
    results: list[ConfigResult]
    plot: Path | None = None
    plot_note: str | None = None                 # why --plot wrote nothing

    @property
    def failed(self) -> bool:
        """A configuration that did not measure, or a point that is not valid."""
        return any(r.status != "ok" for r in self.results) or any(
            r.point is not None and not r.point.valid for r in self.results)

    def to_json(self) -> dict:
        """The ``roofline --json`` document of a workload."""
        return {"workload": self.workload.describe(), "device": self.device.to_json(),
                "ceilings": self.ceilings.to_json() if self.ceilings else None,
                "results": [r.to_json() for r in self.results], "plot": str(self.plot) if self.plot else None}


def load_target(req: RooflineRequest) -> Workload:
    """The workload ``req.ref`` names (a bare kernel at its argument specs becomes one)."""
    if req.kernel:
        return kernel_workload(req.ref, parse_assignments(req.arg), req.grid)
    return load_workload(req.ref, **req.workload_args)


def run(req: RooflineRequest, wl: Workload, *,
        latencies: Callable[[list[WorkloadConfig]], dict[str, float] | None] | None = None,
        show: bool = False) -> RooflineRun:
    """Measure every selected configuration, or place recorded latencies on ``req.device``.
    ``latencies``: the selected configurations -> config name -> ms (the caller's --latency-ms,
    parsed against them once the device preset is known good)."""
    cfgs = wl.select(req.configs)
    offline = device_mod.preset(req.device) if req.device else None
    lat = latencies(cfgs) if latencies else None
    if offline is not None:
        dev = offline
        if lat is None:
            raise UsageError(f"--device {req.device} is the offline mode: give the recorded latency",
                             hint="--latency-ms X (or NAME=MS per configuration)")
        missing = [c.name for c in cfgs if c.name not in lat]
        if missing:
            raise UsageError("offline mode needs a latency for every selected configuration",
                             hint="missing: " + ", ".join(missing))
        ceilings = device_ceilings(dev)     # the project's own measurement of this preset, if any
    else:
        dev = device_mod.live_device(req.gpu)
        ceilings = device_ceilings(dev, measure=req.measure_peaks and not lat)
    if req.ncu:
        why = ncu_available()
        if why:
            raise UsageError(f"--ncu: {why}", hint="install Nsight Compute or drop --ncu")
        if dev.kind != "live":
            raise UsageError("--ncu needs a GPU (it profiles a real run); drop --device")
    opts = BenchOptions(flush_l2=req.flush_l2, cuda_graph=req.cuda_graph, **({} if req.batch else {"batch": None}))
    if req.warmup_ms is not None:
        opts.warmup_ms = req.warmup_ms
    if req.rep_ms is not None:
        opts.rep_ms = req.rep_ms
    with progress(len(cfgs), f"roofline {wl.name}", enabled=show) as bar:
        results = roofline_workload(wl, cfgs, device=dev, ceilings=ceilings, latencies=lat, options=opts,
                                    check=req.check and not req.kernel, check_seed=req.check_seed,
                                    isolated=req.isolated, timeout_s=req.timeout_s, static=req.static, ncu=req.ncu,
                                    on_step=lambda m: bar.update(m))
    out = RooflineRun(wl, dev, ceilings, results)
    if req.plot:
        points = [r.point for r in results if r.point is not None]
        if not points:
            out.plot_note = "no valid measurements: nothing to plot"
        else:
            out.plot = plot_roofline(points, dev, ceilings, req.plot)
    return out


# --- the ``roofline -- COMMAND`` form ----------------------------------------------------------

@dataclass
class CommandRequest:
    """``roofline -- COMMAND``: every ct.launch the command makes, timed (or only recorded)."""
    command: list[str]
    dry_run: bool = False                        # record the launches without executing them
    device: str | None = None                    # a preset instead of the live GPU
    gpu: int | None = None
    measure_peaks: bool = True
    ncu: bool = False
    timeout_s: float | None = None
    pad_us: float | None = None
    plot: str | None = None


@dataclass
class CommandRun:
    """The ``roofline -- COMMAND`` outcome: the observed run and one result per kernel it launched."""
    command: list[str]
    observed: ObservedRun
    device: DeviceModel | None
    ceilings: Ceilings | None
    results: list[KernelResult]
    dry_run: bool = False
    plot: Path | None = None
    plot_note: str | None = None                 # why --plot wrote nothing

    @property
    def failed(self) -> bool:
        """A kernel that did not come out as expected (``no_time`` is expected of a dry run)."""
        expected = "no_time" if self.dry_run else "ok"
        return any(r.status not in (expected, "ok") for r in self.results)

    def to_json(self) -> dict:
        """The ``roofline --json`` document of a command, with where its counts and times come from."""
        run, dev, ceilings = self.observed, self.device, self.ceilings
        return {"command": self.command, "returncode": run.returncode, "seconds": round(run.seconds, 3),
                "executed": run.executed, "launches": len(run.records),
                "device": dev.to_json() if dev else None, "ceilings": ceilings.to_json() if ceilings else None,
                "counts_source": "static estimates (TileIR at the recorded shapes)",
                "time_source": "measured (CUDA events around each launch)" if run.executed else None,
                "kernels": [r.to_json() for r in self.results], "warnings": run.warnings,
                "stdout_tail": run.stdout_tail,
                "plot": str(self.plot) if self.plot else None}


def _command_device(req: CommandRequest):
    if req.device:
        dev = device_mod.preset(req.device)
        return dev, device_ceilings(dev)
    if req.dry_run:
        try:
            dev = device_mod.live_device(req.gpu)
        except Exception:           # no GPU: the counts need no device, the bound then stays open
            return None, None
        return dev, None
    dev = device_mod.live_device(req.gpu)
    return dev, device_ceilings(dev, measure=req.measure_peaks)


def run_command(req: CommandRequest, *, echo: Callable[[str], None] | None = None,
                show: bool = False) -> CommandRun:
    """Run (or only record) the command with every launch observed, count each kernel from its
    TileIR at the recorded shapes, place it; ``--ncu`` profiles the command again."""
    cmd = req.command
    if req.ncu:
        why = ncu_available()
        if why:
            raise UsageError(f"--ncu: {why}", hint="install Nsight Compute or drop --ncu")
        if req.dry_run or req.device:
            raise UsageError("--ncu profiles a real run on a GPU: drop --dry-run / --device")
    if not req.dry_run:
        import torch
        if not torch.cuda.is_available():
            raise UsageError("timing a command's kernels needs a CUDA GPU and none is visible",
                             hint="--dry-run records the launches without executing them (static counts only)")
    dev, ceilings = _command_device(req)
    run_ = observe_command(cmd, execute=not req.dry_run, timeout=req.timeout_s, pad_us=req.pad_us, echo=echo)
    with progress(1, "roofline: static counts", enabled=show) as bar:
        results = roofline_launches(run_.records, device=dev, ceilings=ceilings, on_step=lambda m: bar.update(m))
    if req.ncu:
        names = sorted({r.group.kernel for r in results})
        attach_ncu(results, profile_command(cmd, names, timeout_s=req.timeout_s))
    out = CommandRun(cmd, run_, dev, ceilings, results, dry_run=req.dry_run)
    points = [r.point for r in results if r.point is not None]
    if req.plot and points:
        out.plot = plot_roofline(points, dev, ceilings, req.plot, title=f"roofline of {' '.join(cmd)[:60]}")
    elif req.plot:
        out.plot_note = "no measured points: nothing to plot"
    return out
