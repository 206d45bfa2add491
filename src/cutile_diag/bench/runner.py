"""Measure a workload configuration: correctness first, then timing; in-process or isolated.

Public API (what the optimisation loop calls)::

    r = measure_config(wl, cfg, BenchOptions(), check=True)          # in this process
    r = measure_isolated("examples:matmul", "4096-f16", options=..., timeout_s=300,
                         workload_kwargs={"source": "variant/matmul.py"})   # killable subprocess
    r.status      # "ok" | "mismatch" | "error" | "timeout" | "unavailable" | "no_gpu"
    r.stats       # TimingStats (TileGym record keys) or None
    r.check, r.post_check                                             # CheckResult or None
    r.median_ms, r.ok, r.error

    run_isolated("pkg.mod:function" | "file.py::function", kwargs, timeout_s) -> JSON-able result
    MeasureResult.from_json(d) / .to_json()

Order of a measurement: (1) check on fresh inputs from ``check_seed`` (None, the default: a
fresh seed per check, recorded in ``r.check.seed``; outputs poisoned);
a failing check stops here — a wrong kernel's time means nothing; (2) new inputs from
``seed``, the reference for them computed up front; (3) warm-up, then outputs poisoned and
the timed repetitions; (4) the outputs the timed runs left are compared with the reference
(``post_check``), which catches kernels that skip work once warmed up.

Isolation: the child is ``python -m cutile_diag.bench.worker`` in its own session; on
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CutileDiagError, NoGPUError
from ..procs import kill_group
from ..workload import Workload, WorkloadConfig, WorkloadError
from ..workloads import load_workload
from .correctness import (
    CheckResult,
    check_outputs,
    check_workload,
    poison_,
    reference_outputs,
    run_outputs,
)
from .stats import TimingStats
from .timing import BenchOptions, Measurement, measure
from ..capture.loader import import_file
from ..source.ref import split_ref
from .observers import ClockObserver

STATUSES = ("ok", "mismatch", "error", "timeout", "unavailable", "no_gpu")


@dataclass
class MeasureResult:
    workload: str
    config: str
    status: str
    error: str | None = None
    stats: TimingStats | None = None
    check: CheckResult | None = None
    post_check: CheckResult | None = None
    measurement: dict[str, Any] = field(default_factory=dict)   # samples, budgets, clocks
    device: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def median_ms(self) -> float | None:
        return self.stats.median if self.stats else None

    def to_json(self) -> dict:
        return {"workload": self.workload, "config": self.config, "status": self.status, "error": self.error,
                "stats": self.stats.record() if self.stats else None,
                "check": self.check.to_json() if self.check else None,
                "post_check": self.post_check.to_json() if self.post_check else None,
                "measurement": self.measurement, "device": self.device, "wall_s": self.wall_s}

    @classmethod
    def from_json(cls, d: dict) -> "MeasureResult":
        return cls(workload=d.get("workload", ""), config=d.get("config", ""), status=d.get("status", "error"),
                   error=d.get("error"), stats=TimingStats.from_record(d["stats"]) if d.get("stats") else None,
                   check=CheckResult.from_json(d.get("check")), post_check=CheckResult.from_json(d.get("post_check")),
                   measurement=d.get("measurement") or {}, device=d.get("device") or {},
                   wall_s=float(d.get("wall_s") or 0.0))


def _device_info(device: str) -> dict:
    import torch
    try:
        idx = torch.device(device).index
        idx = torch.cuda.current_device() if idx is None else idx
        p = torch.cuda.get_device_properties(idx)
        return {"index": idx, "name": p.name, "sm_count": p.multi_processor_count,
                "capability": f"{p.major}.{p.minor}"}
    except Exception:
        return {}


def measure_config(wl: Workload, cfg: WorkloadConfig, options: BenchOptions | None = None, *,
                   check: bool = True, seed: int = 0, check_seed: int | None = None,
                   device: str = "cuda", post_check: bool = True) -> MeasureResult:
    """Check, then time one configuration in this process."""
    import torch
    t0 = time.perf_counter()
    options = options or BenchOptions()
    res = MeasureResult(workload=wl.ref or wl.name, config=cfg.name, status="ok")

    def done(status: str, error: str | None = None) -> MeasureResult:
        res.status, res.error, res.wall_s = status, error, time.perf_counter() - t0
        return res

    why = wl.available()
    if why:
        return done("unavailable", why)
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        return done("no_gpu", "no CUDA GPU visible to torch; use --device <preset> --latency-ms X offline")
    res.device = _device_info(device)
    with torch.no_grad():
        if check:
            res.check = check_workload(wl, cfg, seed=check_seed, device=device)
            if res.check.error:
                return done("error", res.check.error)
            if not res.check.passed:
                return done("mismatch", res.check.summary)
        try:
            inputs = wl.make_inputs(cfg, seed, device)
            expected = reference_outputs(wl, inputs) if (post_check and wl.repeatable) else None
        except WorkloadError:
            raise
        except Exception as e:
            return done("error", f"preparing inputs raised {type(e).__name__}: {e}")
        last: dict[str, Any] = {}

        def fn():
            last["result"] = wl.run(inputs)

        def poison_outputs():
            for n in wl.outputs:
                if n in inputs:
                    poison_(inputs[n])

        observers = []
        if options.sample_clocks:
            observers.append(ClockObserver(device))
        try:
            m: Measurement = measure(fn, options, observers=observers,
                                     before_timed=poison_outputs if expected is not None else None)
        except CutileDiagError:
            raise
        except Exception as e:
            return done("error", f"run raised {type(e).__name__}: {' '.join(str(e).split())[:300]}")
        res.stats = m.stats
        res.measurement = m.to_json()
        if expected is not None:
            actual = run_outputs(wl, inputs, last.get("result"))
            res.post_check = check_outputs(wl, cfg, actual, expected, seed)
            if not res.post_check.passed:
                return done("mismatch", "outputs of the timed runs are wrong: " + res.post_check.summary)
    return done("ok")


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
            proc = subprocess.Popen([sys.executable, "-m", "cutile_diag.bench.worker", str(req), str(out)],
                                    stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=child_env,
                                    start_new_session=True)
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
    """``measure_config`` in a child process that is killed after ``timeout_s`` seconds."""
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
    wl = load_workload(request["workload"], **(request.get("workload_kwargs") or {}))
    return wl, wl.config(request["config"])


__all__ = ["MeasureResult", "measure_config", "measure_isolated", "run_isolated", "IsolatedTimeout",
           "IsolatedError", "resolve_callable", "STATUSES", "NoGPUError"]
