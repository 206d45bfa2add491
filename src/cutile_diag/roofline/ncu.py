"""Nsight Compute measurements of one workload run, for the roofline's ``--ncu``.

Public API::

    ncu_available() -> str | None                          # None when ncu is on PATH
    r = profile_workload("examples:matmul", "4096-f16", timeout_s=300)   # NcuResult
    r.kernels -> [NcuKernel(name, duration_ns, dram_read_bytes, dram_write_bytes, sm_throughput_pct,
                            memory_throughput_pct, achieved_occupancy_pct, registers_per_thread,
                            local_load_insts, local_store_insts, grid_size, block_size)]
    r.dram_bytes, r.duration_ns, r.error
    parse_ncu_csv(text) -> list[NcuKernel]                  # both --page raw and --page details CSV

The workload runs in ``cutile_diag.measure.child`` (mode ``profile``): compile/autotune
first, then one run inside the NVTX range ``cutile_diag_profile``; ncu profiles only the
kernels in that range (``--nvtx --nvtx-include cutile_diag_profile/``) with
``--clock-control none`` so the clocks are the ones the timings ran at.  Spills show as
local-memory instructions (``smsp__sass_inst_executed_op_local_{ld,st}``).
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..procs import kill_group
from ..toolchain import ToolNotFoundError, find_tool, have_tool

# what ``export_report`` writes and ``diagnose.ncu_rules`` reads
EXPORT_SCHEMA = "cutile-diag.ncu-export/1"

METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "smsp__sass_inst_executed_op_local_ld.sum": "local_load_insts",
    "smsp__sass_inst_executed_op_local_st.sum": "local_store_insts",
    "launch__grid_size": "grid_size",
    "launch__block_size": "block_size",
}

_SCALE = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
          "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "%": 1, "": 1}


@dataclass
class NcuKernel:
    """The metrics ``ncu`` reported for one kernel launch."""
    name: str
    duration_ns: float | None = None
    dram_read_bytes: float | None = None
    dram_write_bytes: float | None = None
    sm_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    registers_per_thread: float | None = None
    local_load_insts: float | None = None
    local_store_insts: float | None = None
    grid_size: float | None = None
    block_size: float | None = None

    @property
    def dram_bytes(self) -> float | None:
        """DRAM bytes read plus written, or None when either is missing."""
        if self.dram_read_bytes is None or self.dram_write_bytes is None:
            return None
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def spills(self) -> bool | None:
        """Whether local loads/stores ran (register spills); None when not measured."""
        if self.local_load_insts is None and self.local_store_insts is None:
            return None
        return bool((self.local_load_insts or 0) + (self.local_store_insts or 0))


@dataclass
class NcuResult:
    """The kernels one ``ncu`` run profiled, or the error that stopped it."""
    kernels: list[NcuKernel] = field(default_factory=list)
    error: str | None = None
    command: list[str] = field(default_factory=list)

    @property
    def dram_bytes(self) -> float | None:
        """DRAM bytes over every kernel, or None when one lacks them."""
        vals = [k.dram_bytes for k in self.kernels]
        return sum(vals) if vals and None not in vals else None

    @property
    def duration_ns(self) -> float | None:
        """GPU time over every kernel, or None when one lacks it."""
        vals = [k.duration_ns for k in self.kernels]
        return sum(vals) if vals and None not in vals else None

    def to_json(self) -> dict:
        """The result as JSON, each kernel with its derived bytes and spills."""
        return {"error": self.error, "command": self.command, "dram_bytes": self.dram_bytes,
                "duration_ns": self.duration_ns,
                "kernels": [dict(k.__dict__, dram_bytes=k.dram_bytes, spills=k.spills) for k in self.kernels]}


def ncu_available() -> str | None:
    """None when ``ncu`` can be run, else why not."""
    if have_tool("ncu") or shutil.which("ncu"):
        return None
    return "Nsight Compute (ncu) is not on PATH"


def _num(text: str, unit: str = "") -> float | None:
    t = (text or "").strip().replace(",", "")
    if t in ("", "n/a", "N/A", "-"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return v * _SCALE.get(unit.strip().lower(), 1)


def parse_ncu_csv(text: str) -> list[NcuKernel]:
    """Kernels from ncu ``--csv`` output (``--page raw``: one row per kernel; ``details``: per metric)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    out: dict[str, NcuKernel] = {}
    order: list[str] = []
    if "Metric Name" in header:                      # --page details: long format
        ih = {h: i for i, h in enumerate(header)}
        for r in rows[1:]:
            if len(r) < len(header):
                continue
            kid = r[ih.get("ID", 0)]
            name = r[ih["Kernel Name"]] if "Kernel Name" in ih else kid
            k = out.get(kid)
            if k is None:
                k = out[kid] = NcuKernel(name)
                order.append(kid)
            field_ = METRICS.get(r[ih["Metric Name"]])
            if field_:
                setattr(k, field_, _num(r[ih["Metric Value"]], r[ih.get("Metric Unit", 0)] if "Metric Unit" in ih else ""))
        return [out[i] for i in order]
    # --page raw: header row of metric names, then a units row, then one row per kernel
    # the units row has an empty ID cell; kernel rows carry their ID (0, 1, ...)
    if len(rows) > 1 and not rows[1][0].strip().isdigit():
        units, data = rows[1], rows[2:]
    else:
        units, data = [""] * len(header), rows[1:]
    ih = {h: i for i, h in enumerate(header)}
    kernels = []
    for r in data:
        if len(r) < len(header):
            continue
        k = NcuKernel(r[ih["Kernel Name"]] if "Kernel Name" in ih else r[0])
        for metric, field_ in METRICS.items():
            if metric in ih:
                setattr(k, field_, _num(r[ih[metric]], units[ih[metric]] if ih[metric] < len(units) else ""))
        kernels.append(k)
    return kernels


def _ncu_exe() -> str:
    try:
        return str(find_tool("ncu"))
    except ToolNotFoundError:
        return shutil.which("ncu") or "ncu"


def _ncu_process(cmd: list[str], timeout_s: float | None) -> tuple[str, str, str | None, int | None]:
    """Run one ncu command line: (stdout, stdout + stderr, error or None, exit code).  Both
    profiling paths (a workload's profile run, a user's command) go through here."""
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, errors="replace")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.communicate()
        return "", "", f"ncu killed after {timeout_s:g} s", None
    text = out + "\n" + err
    if "ERR_NVGPUCTRPERM" in text:
        return out, text, ("ncu has no permission for GPU performance counters (ERR_NVGPUCTRPERM): run as "
                           "root or allow non-admin profiling"), proc.returncode
    return out, text, None, proc.returncode


def _run_ncu(ncu_args: list[str], workload: str, config: str, workdir: Path, *, workload_kwargs: dict | None,
             device: int | None, timeout_s: float) -> tuple[list[str], str, str | None, dict]:
    """Run the workload's ``profile`` mode (one run in the NVTX range ``cutile_diag_profile``)
    under ncu with ``ncu_args``: (command, stdout + stderr, error or None, the worker's result)."""
    req, res = workdir / "ncu-request.json", workdir / "ncu-worker.json"
    req.write_text(json.dumps({"mode": "profile", "workload": workload, "workload_kwargs": workload_kwargs or {},
                               "config": config, "device": device}))
    cmd = [_ncu_exe(), "--clock-control", "none", "--nvtx", "--nvtx-include", "cutile_diag_profile/", *ncu_args,
           "--target-processes", "all", sys.executable, "-m", "cutile_diag.measure.child", str(req), str(res)]
    out, text, err, rc = _ncu_process(cmd, timeout_s)
    if err:
        return cmd, text, err, {}
    worker = {}
    if res.exists():
        try:
            worker = json.loads(res.read_text())
        except json.JSONDecodeError:
            worker = {}
    if worker.get("status") not in (None, "ok"):
        return cmd, text, f"the profiled run failed: {worker.get('error')}", worker
    tail = " ".join([ln for ln in text.splitlines() if ln.strip()][-3:])[:400]
    return cmd, text, None, {"rc": rc, "tail": tail, "stdout": out}


def profile_workload(workload: str, config: str, *, workload_kwargs: dict | None = None, device: int | None = None,
                     timeout_s: float = 300.0, extra_args: list[str] | None = None) -> NcuResult:
    """Run one configuration of ``workload`` under ``ncu`` for the roofline metrics (DRAM bytes,
    throughputs, spills); an NcuResult with the error when ncu is missing or fails."""
    why = ncu_available()
    if why:
        return NcuResult(error=why)
    with tempfile.TemporaryDirectory(prefix="cutile-diag-ncu-") as tmp:
        cmd, _, err, info = _run_ncu(["--metrics", ",".join(METRICS), "--csv", "--page", "raw", "--print-units",
                                      "base", *(extra_args or [])], workload, config, Path(tmp),
                                     workload_kwargs=workload_kwargs, device=device, timeout_s=timeout_s)
        if err:
            return NcuResult(error=err, command=cmd)
        kernels = parse_ncu_csv(info["stdout"])
        if not kernels:
            return NcuResult(error=f"ncu reported no kernels in the profiled range (rc {info['rc']}): {info['tail']}",
                             command=cmd)
        return NcuResult(kernels=kernels, command=cmd)

# --- full reports and the rule engine (diagnose --ncu) -------------------------------------------

# metrics kept in an export beside the rules (what collect_ncu reads, plus the launch)
EXPORT_METRICS = (*METRICS, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sector_hit_rate.pct",
                  "launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z",
                  "launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z",
                  "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
                  "sm__maximum_warps_per_active_cycle_pct")


NCU_INSTALLS = Path("/opt/nvidia/nsight-compute")     # where the CUDA toolkit's ncu wrapper looks too


def _report_dirs() -> list[Path]:
    """Where Nsight Compute keeps ``extras/python``: beside the real ``ncu`` binary, else in the
    installs that CUDA's ``bin/ncu`` wrapper script chooses from (``<cuda>/nsight-compute-*`` and
    ``/opt/nvidia/nsight-compute/*``), newest first."""
    exe = shutil.which("ncu")
    roots: list[Path] = []
    if exe:
        real = Path(os.path.realpath(exe))
        roots += [real.parent, *real.parents[:3]]
        roots += sorted(real.parent.parent.glob("nsight-compute*"), reverse=True)
    roots += sorted(NCU_INSTALLS.glob("*"), key=lambda p: _version_key(p.name), reverse=True)
    return [r / "extras" / "python" for r in roots]


def _version_key(name: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in name.split("."))


def ncu_report_module():
    """``ncu_report`` (Nsight Compute's Python report reader): importable as is (the PyPI
    ``ncu-report`` package or PYTHONPATH), else from an Nsight Compute install's
    ``extras/python`` (``_report_dirs``).  None when neither exists."""
    try:
        import ncu_report  # type: ignore[import-not-found]
        return ncu_report
    except ImportError:
        pass
    for cand in _report_dirs():
        if (cand / "ncu_report.py").exists():
            sys.path.insert(0, str(cand))
            try:
                import ncu_report  # type: ignore[import-not-found]
                return ncu_report
            except ImportError:
                sys.path.remove(str(cand))
    return None


def _plain(obj):
    """Reader values as JSON: enums (MsgType, SpeedupType, FocusSeverity are IntEnums, which
    json would write as bare numbers) by name, tuples as lists."""
    import enum
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


# source-correlated metrics (instance values keyed by instruction address), best first: where the
# warps were sampled, else how often each instruction ran
HOTSPOT_METRICS = ("smsp__pcsamp_sample_count", "smsp__pcsamp_warps_issue_stalled_long_scoreboard",
                   "smsp__sass_inst_executed", "inst_executed")


def _hotspots(action, names: set[str], top: int = 8) -> dict:
    """{metric, lines: [{file, line, value, share}]}: a source-correlated metric summed per
    source line through ``IAction.source_info(address)`` (empty when the report has none)."""
    for m in HOTSPOT_METRICS:
        if m not in names:
            continue
        metric = _safe(lambda m=m: action[m])
        if metric is None or not _safe(metric.has_correlation_ids, False):
            continue
        ids = _safe(metric.correlation_ids)
        n = _safe(metric.num_instances, 0) or 0
        per_line: dict[tuple[str, int], float] = {}
        for i in range(n):
            v, pc = _safe(lambda i=i: metric.value(i)), _safe(lambda i=i: ids.value(i))
            info = _safe(lambda pc=pc: action.source_info(pc)) if pc is not None else None
            if not isinstance(v, (int, float)) or info is None:
                continue
            key = (str(_safe(info.file_name, "?")), int(_safe(info.line, 0) or 0))
            per_line[key] = per_line.get(key, 0.0) + float(v)
        total = sum(per_line.values())
        if total > 0:
            best = sorted(per_line.items(), key=lambda kv: -kv[1])[:top]
            return {"metric": m, "lines": [{"file": f, "line": ln, "value": v, "share": round(v / total, 4)}
                                           for (f, ln), v in best]}
    return {}


def _safe(fn, default=None):
    try:
        return fn()
    except Exception:   # the reader raises on absent metrics / older report versions
        return default


def export_report(report: str | Path, *, module=None) -> dict:
    """A ``.ncu-rep`` as plain JSON (``EXPORT_SCHEMA``, read by ``cutile_diag.diagnose.ncu_rules``): per
    kernel its name, duration, launch, a few metrics, the rule results and the source markers."""
    mod = module or ncu_report_module()
    if mod is None:
        raise RuntimeError("the ncu_report module is not available (install Nsight Compute, or pip install ncu-report)")
    ctx = mod.load_report(str(report))
    kernels = []
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            a = rng.action_by_idx(ai)
            names = set(_safe(lambda: list(a.metric_names()), []) or [])
            metrics = {}
            for m in EXPORT_METRICS:
                if m in names:
                    v = _safe(lambda m=m: a[m].value())
                    if isinstance(v, (int, float)):
                        metrics[m] = v
            dims = [int(metrics.get(f"launch__grid_dim_{c}", 0) or 0) for c in "xyz"]
            if not all(dims) and metrics.get("launch__grid_size"):
                dims = [int(metrics["launch__grid_size"]), 1, 1]
            block = [int(metrics.get(f"launch__block_dim_{c}", 0) or 0) for c in "xyz"]
            rules = _safe(lambda: list(a.rule_results_as_dicts()), []) or []
            markers = _safe(lambda: list(a.source_markers()), []) or []
            hot = _hotspots(a, names)
            kernels.append({"name": str(_safe(a.name, "?")), "duration_ns": metrics.get("gpu__time_duration.sum"),
                            "grid": dims if all(dims) else [], "block": block if all(block) else [],
                            "metrics": metrics, "rules": _plain(rules), "source_markers": _plain(markers),
                            "hotspots": hot})
    return {"schema": EXPORT_SCHEMA, "report": str(report), "kernels": kernels}


@dataclass
class NcuReport:
    """What ``profile_report`` made: the export (rules, metrics, hotspots), the report path, or the error."""
    export: dict | None = None
    report: str | None = None
    error: str | None = None
    command: list[str] = field(default_factory=list)


def profile_report(workload: str, config: str, out_dir: str | Path, *, workload_kwargs: dict | None = None,
                   device: int | None = None, timeout_s: float = 600.0, sections: list[str] | None = None) -> NcuReport:
    """Profile one configuration with the rule-carrying sections (``--set full`` unless
    ``sections``) into ``out_dir/ncu.ncu-rep``, then export it (``ncu-export.json`` beside it)."""
    why = ncu_available()
    if why:
        return NcuReport(error=why)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rep = out / "ncu.ncu-rep"
    what = [a for s in sections for a in ("--section", s)] if sections else ["--set", "full"]
    cmd, _, err, info = _run_ncu([*what, "--import-source", "yes", "-f", "-o", str(rep.with_suffix(""))], workload,
                                 config, out, workload_kwargs=workload_kwargs, device=device, timeout_s=timeout_s)
    if err:
        return NcuReport(error=err, command=cmd)
    if not rep.exists():
        return NcuReport(error=f"ncu wrote no report (rc {info['rc']}): {info['tail']}", command=cmd)
    try:
        export = export_report(rep)
    except Exception as e:   # reader missing or report from another version
        return NcuReport(report=str(rep), error=f"cannot read {rep.name}: {e}", command=cmd)
    (out / "ncu-export.json").write_text(json.dumps(export, indent=1))
    return NcuReport(export=export, report=str(rep), command=cmd)


def profile_command(command: list[str], kernel_names: list[str], *, launch_count: int = 100,
                    timeout_s: float | None = None) -> NcuResult:
    """Profile the first ``launch_count`` launches of the named cuTile kernels in a user's command
    (every process it starts).  Kernels are matched by name prefix (cuTile appends a signature
    suffix to the function name); no NVTX range is needed."""
    import re
    why = ncu_available()
    if why:
        return NcuResult(error=why)
    regex = "regex:^(" + "|".join(re.escape(n) for n in sorted(set(kernel_names))) + ")"
    cmd = [_ncu_exe(), "--clock-control", "none", "--metrics", ",".join(METRICS), "--csv", "--page", "raw",
           "--print-units", "base", "--target-processes", "all", "--kernel-name", regex,
           "--launch-count", str(int(launch_count)), *command]
    out, text, err, rc = _ncu_process(cmd, timeout_s)
    if err:
        return NcuResult(error=err, command=cmd)
    kernels = parse_ncu_csv(out)
    if not kernels:
        tail = " ".join([ln for ln in text.splitlines() if ln.strip()][-3:])[:400]
        return NcuResult(error=f"ncu profiled no matching kernel (rc {rc}): {tail}", command=cmd)
    return NcuResult(kernels=kernels, command=cmd)
