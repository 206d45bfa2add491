"""What the GPU suites share: the timed run log, the children's environment, a captured run.

Each suite runs as ``python bench/gpu/<suite>.py`` (this folder is first on ``sys.path``) and
imports these instead of carrying its own copy.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
T0 = time.monotonic()          # the suite's start: harness is imported first
LOG: list[str] = []


def elapsed() -> float:
    return time.monotonic() - T0


def log(msg: str) -> None:
    line = f"[{elapsed():6.1f}s] {msg}"
    print(line, flush=True)
    LOG.append(line)


def parse_suite_args(ap) -> tuple[object, Path]:
    """A suite's arguments and its --out folder (made): --tilegym is required unless --dry-run."""
    args = ap.parse_args()
    if not args.dry_run and not args.tilegym:
        ap.error("--tilegym PATH is required (or --dry-run)")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return args, out


def child_env(*checkouts: str | Path | None) -> dict:
    """The environment of a child: this checkout's ``src`` (and each given checkout's ``src`` that
    exists, e.g. TileGym's) first on PYTHONPATH, unbuffered output, no CUDA_HOME / CUDA_PATH (an
    older toolkit there breaks every tileiras compile)."""
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    env["PYTHONUNBUFFERED"] = "1"
    paths = [str(ROOT / "src")] + [str(Path(c) / "src") for c in checkouts if c and (Path(c) / "src").is_dir()]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def plugin_flag() -> str:
    """``-p cutile_diag.pytest_plugin `` (``--print-record``) unless an installed cutile-diag
    registers it already (its pytest11 entry point)."""
    from importlib.metadata import entry_points
    eps = entry_points(group="pytest11")
    return "" if any(e.value == "cutile_diag.pytest_plugin" for e in eps) else "-p cutile_diag.pytest_plugin "


def run_captured(cmd: list[str], timeout: float, env: dict, cwd: Path | None = None) -> tuple[object, str, str, float]:
    """(exit code or "timeout", stdout, stderr, wall seconds) of ``cmd`` run to completion."""
    t = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=str(cwd or ROOT), errors="replace")
        rc, out, err = p.returncode, p.stdout, p.stderr
    except FileNotFoundError as e:
        rc, out, err = "missing", "", str(e)
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    return rc, out, err, time.monotonic() - t
