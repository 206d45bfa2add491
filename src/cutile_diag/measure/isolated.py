"""Measure a workload configuration in a killable child process (``measure.measure_version`` inside).

Public API::

    r = measure_isolated("examples:matmul", "4096-f16", options=..., timeout_s=300,
                         workload_kwargs={"source": "variant/matmul.py"})   # killable subprocess
    r.status      # "ok" | "mismatch" | "error" | "timeout" | "unavailable" | "no_gpu"
    r.stats, r.check, r.post_check, r.median_ms, r.ok, r.error        # measure.MeasureResult

    run_isolated("pkg.mod:function" | "file.py::function", kwargs, timeout_s) -> JSON-able result

The measurement itself (check -> poison -> time -> post-check) is ``measure.version``'s; in this
process, call ``measure.measure_version``.

Isolation: the child is ``python -m cutile_diag.measure.child`` in its own session; on
timeout the whole process group is killed (SIGKILL) and the result says so, with the tail
of the child's stderr.  A hang in a kernel therefore costs ``timeout_s`` and nothing else.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..capture.loader import import_file
from ..errors import CutileDiagError, NoGPUError
from .version import STATUSES, MeasureResult, measure_config
from ..procs import die_with_parent, kill_group
from ..source.ref import split_ref
from ..workload import Workload, WorkloadConfig, WorkloadError
from ..workloads import load_workload
from ..harness.timing import BenchOptions

# ---------------------------------------------------------------------------------------
# isolation

def _tail(path: Path, n: int = 2000) -> str:
    try:
        data = path.read_text(errors="replace")
    except OSError:
        return ""
    return data[-n:]


def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln:
            return ln
    return lines[-1] if lines else "no output"


def _spawn(request: dict, timeout_s: float, env: dict | None) -> tuple[dict | None, str, int | None, bool, float]:
    """Run the worker; returns (result JSON or None, stderr tail, returncode, timed_out, wall)."""
    with tempfile.TemporaryDirectory(prefix="cutile-diag-run-") as tmp:
        tmp = Path(tmp)
        req, out = tmp / "request.json", tmp / "result.json"
        req.write_text(json.dumps(request))
        errf, outf = tmp / "stderr.txt", tmp / "stdout.txt"
        child_env = dict(os.environ)
        child_env.update(env or {})
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        t0 = time.perf_counter()
        with open(errf, "wb") as fe, open(outf, "wb") as fo:
            proc = subprocess.Popen([sys.executable, "-m", "cutile_diag.measure.child", str(req), str(out)],
                                    stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=child_env,
                                    start_new_session=True, preexec_fn=die_with_parent)
            timed_out = False
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(proc)        # the session we created: the child and its helpers
        wall = time.perf_counter() - t0
        tail = _tail(errf)
        result = None
        if out.exists() and not timed_out:
            try:
                result = json.loads(out.read_text())
            except json.JSONDecodeError:
                result = None
        return result, tail, proc.returncode, timed_out, wall


def measure_isolated(workload: str, config: str, *, options: BenchOptions | None = None, check: bool = True,
                     seed: int = 0, check_seed: int | None = None, device: int | None = None, post_check: bool = True,
                     workload_kwargs: dict | None = None, timeout_s: float = 300.0,
                     env: dict | None = None) -> MeasureResult:
    """``measure.measure_version`` in a child process that is killed after ``timeout_s`` seconds."""
    request = {"mode": "measure", "workload": workload, "workload_kwargs": workload_kwargs or {},
               "config": config, "options": (options or BenchOptions()).to_json(), "check": check,
               "seed": seed, "check_seed": check_seed, "device": device, "post_check": post_check}
    result, tail, rc, timed_out, wall = _spawn(request, timeout_s, env)
    if timed_out:
        return MeasureResult(workload, config, "timeout", wall_s=wall,
                             error=f"killed after {timeout_s:g} s (a hang, or compile/autotune slower than the "
                                   f"timeout); last stderr: {_last_error_line(tail)}")
    if result is None:
        return MeasureResult(workload, config, "error", wall_s=wall,
                             error=f"worker exited with {rc} and no result: {_last_error_line(tail)}")
    r = MeasureResult.from_json(result)
    r.wall_s = wall
    return r


def run_isolated(target: str, kwargs: dict | None = None, *, timeout_s: float = 300.0,
                 env: dict | None = None) -> Any:
    """Call ``target(**kwargs)`` in a killable child; its return value must be JSON-able."""
    request = {"mode": "call", "target": target, "kwargs": kwargs or {}}
    result, tail, rc, timed_out, wall = _spawn(request, timeout_s, env)
    if timed_out:
        raise IsolatedTimeout(f"{target} killed after {timeout_s:g} s; last stderr: {_last_error_line(tail)}")
    if result is None:
        raise IsolatedError(f"{target}: worker exited with {rc}: {_last_error_line(tail)}")
    if result.get("error"):
        raise IsolatedError(f"{target}: {result['error']}")
    return result.get("value")


class IsolatedTimeout(CutileDiagError):
    """A subprocess measurement ran past its timeout and was killed."""


class IsolatedError(CutileDiagError):
    """A subprocess measurement failed."""


def resolve_callable(target: str):
    """``pkg.mod:function`` or ``path/file.py::function`` -> the function."""
    if "::" in target:
        path, name = split_ref(target)
        mod = import_file(path)
    elif ":" in target:
        import importlib
        modname, name = target.split(":", 1)
        mod = importlib.import_module(modname)
    else:
        raise WorkloadError(f"cannot call '{target}'", hint="give pkg.module:function or file.py::function")
    fn = getattr(mod, name or "", None)
    if not callable(fn):
        raise WorkloadError(f"{target}: no callable named '{name}'")
    return fn


def load_for_request(request: dict) -> tuple[Workload, WorkloadConfig]:
    """The workload and configuration a child request names, loaded with the request's workload arguments."""
    wl = load_workload(request["workload"], **(request.get("workload_kwargs") or {}))
    return wl, wl.config(request["config"])


__all__ = ["MeasureResult", "measure_config", "measure_isolated", "run_isolated", "IsolatedTimeout",
           "IsolatedError", "resolve_callable", "STATUSES", "NoGPUError"]
