"""Nsight Compute measurements of one workload run, for the roofline's ``--ncu``.

Public API::

    ncu_available() -> str | None                          # None when ncu is on PATH
    r = profile_workload("examples:matmul", "4096-f16", timeout_s=300)   # NcuResult
    r.kernels -> [NcuKernel(name, duration_ns, dram_read_bytes, dram_write_bytes, sm_throughput_pct,
                            memory_throughput_pct, achieved_occupancy_pct, registers_per_thread,
                            local_load_insts, local_store_insts, grid_size, block_size)]
    r.dram_bytes, r.duration_ns, r.error
    parse_ncu_csv(text) -> list[NcuKernel]                  # both --page raw and --page details CSV

The workload runs in ``cutile_diag.bench.worker`` (mode ``profile``): compile/autotune
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
        if self.dram_read_bytes is None or self.dram_write_bytes is None:
            return None
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def spills(self) -> bool | None:
        if self.local_load_insts is None and self.local_store_insts is None:
            return None
        return bool((self.local_load_insts or 0) + (self.local_store_insts or 0))


@dataclass
class NcuResult:
    kernels: list[NcuKernel] = field(default_factory=list)
    error: str | None = None
    command: list[str] = field(default_factory=list)

    @property
    def dram_bytes(self) -> float | None:
        vals = [k.dram_bytes for k in self.kernels]
        return sum(vals) if vals and None not in vals else None

    @property
    def duration_ns(self) -> float | None:
        vals = [k.duration_ns for k in self.kernels]
        return sum(vals) if vals and None not in vals else None

    def to_json(self) -> dict:
        return {"error": self.error, "command": self.command, "dram_bytes": self.dram_bytes,
                "duration_ns": self.duration_ns,
                "kernels": [dict(k.__dict__, dram_bytes=k.dram_bytes, spills=k.spills) for k in self.kernels]}


def ncu_available() -> str | None:
    from ..toolchain import have_tool
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


def profile_workload(workload: str, config: str, *, workload_kwargs: dict | None = None, device: int | None = None,
                     timeout_s: float = 300.0, extra_args: list[str] | None = None) -> NcuResult:
    why = ncu_available()
    if why:
        return NcuResult(error=why)
    from ..toolchain import ToolNotFoundError, find_tool
    try:
        ncu = str(find_tool("ncu"))
    except ToolNotFoundError:
        ncu = shutil.which("ncu") or "ncu"
    with tempfile.TemporaryDirectory(prefix="cutile-diag-ncu-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps({"mode": "profile", "workload": workload, "workload_kwargs": workload_kwargs or {},
                                   "config": config, "device": device}))
        cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", "cutile_diag_profile/",
               "--metrics", ",".join(METRICS), "--csv", "--page", "raw", "--print-units", "base",
               "--target-processes", "all", *(extra_args or []),
               sys.executable, "-m", "cutile_diag.bench.worker", str(req), str(res)]
        env = dict(os.environ)
        env.pop("CUDA_HOME", None)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True, errors="replace")
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.communicate()
            return NcuResult(error=f"ncu killed after {timeout_s:g} s", command=cmd)
        text = out + "\n" + err
        if "ERR_NVGPUCTRPERM" in text:
            return NcuResult(error="ncu has no permission for GPU performance counters (ERR_NVGPUCTRPERM): run as "
                                   "root or allow non-admin profiling", command=cmd)
        worker = {}
        if res.exists():
            try:
                worker = json.loads(res.read_text())
            except json.JSONDecodeError:
                worker = {}
        if worker.get("status") not in (None, "ok"):
            return NcuResult(error=f"the profiled run failed: {worker.get('error')}", command=cmd)
        kernels = parse_ncu_csv(out)
        if not kernels:
            tail = " ".join([ln for ln in text.splitlines() if ln.strip()][-3:])[:400]
            return NcuResult(error=f"ncu reported no kernels in the profiled range (rc {proc.returncode}): {tail}",
                             command=cmd)
        return NcuResult(kernels=kernels, command=cmd)


def profile_command(command: list[str], kernel_names: list[str], *, launch_count: int = 100,
                    timeout_s: float | None = None) -> NcuResult:
    """Profile the first ``launch_count`` launches of the named cuTile kernels in a user's command
    (every process it starts).  Kernels are matched by name prefix (cuTile appends a signature
    suffix to the function name); no NVTX range is needed."""
    import re
    why = ncu_available()
    if why:
        return NcuResult(error=why)
    from ..toolchain import ToolNotFoundError, find_tool
    try:
        ncu = str(find_tool("ncu"))
    except ToolNotFoundError:
        ncu = shutil.which("ncu") or "ncu"
    regex = "regex:^(" + "|".join(re.escape(n) for n in sorted(set(kernel_names))) + ")"
    cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(METRICS), "--csv", "--page", "raw",
           "--print-units", "base", "--target-processes", "all", "--kernel-name", regex,
           "--launch-count", str(int(launch_count)), *command]
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, errors="replace")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.communicate()
        return NcuResult(error=f"ncu killed after {timeout_s:g} s", command=cmd)
    text = out + "\n" + err
    if "ERR_NVGPUCTRPERM" in text:
        return NcuResult(error="ncu has no permission for GPU performance counters (ERR_NVGPUCTRPERM)", command=cmd)
    kernels = parse_ncu_csv(out)
    if not kernels:
        tail = " ".join([ln for ln in text.splitlines() if ln.strip()][-3:])[:400]
        return NcuResult(error=f"ncu profiled no matching kernel (rc {proc.returncode}): {tail}", command=cmd)
    return NcuResult(kernels=kernels, command=cmd)
