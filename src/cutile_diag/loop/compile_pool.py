"""Parallel ahead-of-time compilation of a step's candidates (issue 21, item 3).

Each candidate is compiled in its own child process, all at once (up to the host's CPU cores):
the GPU process only checks and times.  A compile child

* sees the candidate's files **at the worktree's paths** without writing them there (the
  worktree holds one version at a time; the children run concurrently): the import system and
  ``linecache`` read the candidate's text for those paths.  So cuTile's bytecode carries the
  same file names as the measuring worker's JIT (debug locations are part of the bytecode, and
  the bytecode is part of cuTile's cache key);
* captures the kernel AOT (``capture.aot.capture_aot``: bytecode, cubin, TileIR, SASS), with the
  launch arguments recorded by the kept version's run (``manifest["launch"]``, the LaunchRecord's
  argument specs) when the candidate changed nothing outside the kernel function (the launch
  is then the same), else with ``--arg``/``CAPTURE_SPECS`` as a plain capture would;
* then compiles the same signature to a cubin through cuTile (``export_kernel(...,
  output_format="cubin")``), which stores it in cuTile's disk cache (``CUDA_TILE_CACHE_DIR``,
  the same the measuring worker reads): its first launch finds it there when its bytecode is
  the same.

The capture folder and the IR diff of each version come from that compile, not from a second
run of the workload or the user's command.  A candidate that cannot be captured this way (no
recorded launch and no specs) falls back to the runner's run-based capture.

Child protocol: ``python -m cutile_diag.loop.compile_pool JOB.json``; one JSON line on stdout
(``{"ok", "path", "source", "error", "kind", "warm"}``).  ``--spare`` instead of the path: the
child imports cuTile's compiler (and with it torch) first, then reads the job's path from stdin
(``loop.spares``: a step's compiles start with their imports done).
"""
from __future__ import annotations

import concurrent.futures as cf
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import CutileDiagError, UsageError
from ..source import overrides
from . import proc
from .integrations import CaptureResult
from .spares import Spares

COMPILE_CAP_S = 300.0


def stamp(t: float) -> str:
    """``t`` (seconds since the epoch) as a UTC ISO time to the millisecond."""
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Compiled:
    """One candidate's compile in a child: its capture result, when it ran, and why a run must capture it instead."""
    label: str
    digest: str
    result: CaptureResult
    start: float                 # wall clock (time.time()): intervals across processes compare
    end: float
    fallback: str = ""           # why the run-based capture must do it ("" : the compile did)
    warm: dict = field(default_factory=dict)
    spare: bool = False          # a child started ahead ran it (loop.spares)

    def to_json(self) -> dict:
        """The compile as the step's cost record shows it."""
        return {"label": self.label, "ok": self.result.ok, "source": self.result.source,
                "error": self.result.error or None, "s": round(self.end - self.start, 3),
                "start": stamp(self.start), "end": stamp(self.end), "warm_cache": self.warm or None,
                "spare": self.spare,
                **({"fallback": self.fallback} if self.fallback else {})}


def recorded_specs(capture: Path | None) -> dict[str, str] | None:
    """The launch arguments a run recorded in a capture's manifest (name -> spec text)."""
    if capture is None:
        return None
    try:
        launch = json.loads((Path(capture) / "manifest.json").read_text()).get("launch") or {}
    except (OSError, ValueError):
        return None
    args = {a["name"]: a["spec"] for a in launch.get("args") or [] if a.get("name") and a.get("spec")}
    return args or None


def launch_block(capture: Path | None) -> dict | None:
    """The ``launch`` block of a capture folder's manifest; None when there is none or it cannot be read."""
    try:
        return json.loads((Path(capture) / "manifest.json").read_text()).get("launch") if capture else None
    except (OSError, ValueError):
        return None


CHILD_ENV = {"CUDA_HOME": None, "CUDA_PATH": None}   # cuTile passes CUDA_HOME on to tileiras, which then fails


def spares(env: Mapping[str, str], cwd: Path, n: int) -> Spares:
    """Compile children started ahead, their imports done (``loop.spares``)."""
    return Spares("cutile_diag.loop.compile_pool", env={**CHILD_ENV, **env}, cwd=cwd, n=n)


def _spare_run(p, path: Path, timeout: float | None) -> proc.ProcResult:
    """The job through a started spare: its path on stdin, the reply on stdout."""
    t0 = time.monotonic()
    try:
        out, err = p.communicate(input=f"{path}\n".encode(), timeout=timeout)
        return proc.ProcResult(p.args, p.returncode, (out or b"").decode(errors="replace"),
                               (err or b"").decode(errors="replace"), False, time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        proc.kill_group(p)
        return proc.ProcResult(p.args, None, "", "", True, time.monotonic() - t0)
    except (BrokenPipeError, OSError) as e:
        proc.kill_group(p)
        return proc.ProcResult(p.args, None, "", f"the compile spare died: {e}", False, time.monotonic() - t0)
    except BaseException:
        proc.kill_group(p)
        raise


def compile_versions(jobs: Sequence[dict], *, deadline: proc.Deadline | None = None,
                     workers: int | None = None, pool: Spares | None = None) -> list[tuple[dict, dict, float, float]]:
    """Run every job (``job_json``) in its own child, concurrently: (job, reply, start, end).
    ``pool``: started children to use first, when they run in this job's environment."""
    n = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    taken = {}
    for job in jobs:          # taken here, in order, not in the threads
        env = {**CHILD_ENV, **(job.get("env") or {})}
        if pool is not None and pool.matches(env, job.get("cwd") or ""):
            taken[job["name"]] = pool.take()

    def one(job: dict):
        t0 = time.time()
        path = Path(job["out_dir"]) / f".{job['name']}.job.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(job))
        timeout = deadline.timeout(COMPILE_CAP_S) if deadline else COMPILE_CAP_S
        spare = taken.get(job["name"])
        if spare is not None:
            res = _spare_run(spare, path, timeout)
        else:
            res = proc.run([sys.executable, "-m", "cutile_diag.loop.compile_pool", str(path)], cwd=job.get("cwd"),
                           env={**CHILD_ENV, **(job.get("env") or {})}, timeout=timeout)
        path.unlink(missing_ok=True)
        if res.timed_out:
            reply = {"ok": False, "kind": "timeout", "error": f"compile killed after {timeout:.0f} s (the time budget)"}
        else:
            lines = [ln for ln in res.stdout.strip().splitlines() if ln.startswith("{")]
            try:
                reply = json.loads(lines[-1])
            except (IndexError, ValueError):
                err = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
                reply = {"ok": False, "kind": "crash", "error": err[-1] if err else f"exit {res.returncode}"}
        reply["spare"] = spare is not None
        return job, reply, t0, time.time()

    if not jobs:
        return []
    with cf.ThreadPoolExecutor(max_workers=n) as ex:   # each thread waits on one child process
        return list(ex.map(one, jobs))


def job_json(*, root: Path, kernel_file: str, kernel: str, files: Mapping[str, str], name: str, out_dir: Path,
             archs: Sequence[str], args: Sequence[str], specs: Mapping[str, str] | None, launch: dict | None,
             env: Mapping[str, str] | None, cwd: Path | None) -> dict:
    """The JSON job a compile child runs: the kernel reference, the candidate's files as overrides, and where its
    arguments come from."""
    return {"ref": f"{Path(root) / kernel_file}::{kernel}", "overrides": {str(Path(root) / p): t for p, t in files.items()},
            "name": name, "out_dir": str(out_dir), "archs": list(archs), "args": list(args),
            "specs": dict(specs or {}), "launch": launch, "env": dict(env or {}), "cwd": str(cwd) if cwd else None}


# ---------------------------------------------------------------------------------------
# the child

def _warm_cache(ref: str, specs: dict | None, arch: str) -> dict:
    """Compile the captured signature to a cubin through cuTile: it lands in cuTile's disk cache."""
    import io
    from cuda.tile.compilation import export_kernel
    from ..capture import loader as loader_mod, spec as spec_mod
    from ..capture.aot import specs_for
    t0 = time.monotonic()
    loaded = loader_mod.load_kernel(ref)
    sig = spec_mod.build_signature(spec_mod.bind(loaded, specs_for(loaded, specs)))
    export_kernel(loaded.kernel, [sig], io.BytesIO(), gpu_code=arch, output_format="cubin")
    from ..capture.cache import default_cache_dir
    return {"arch": arch, "s": round(time.monotonic() - t0, 3), "cache_dir": str(default_cache_dir())}


def _child(job: dict) -> dict:
    import contextlib
    from ..capture.aot import capture_aot
    from ..measure.capture import attach_launch
    overrides.install(job.get("overrides") or {})
    specs: dict = dict(job.get("specs") or {})
    from ..capture import spec as spec_mod
    specs.update(spec_mod.parse_assignments(job.get("args") or []))
    try:
        with contextlib.redirect_stdout(sys.stderr):
            folder = capture_aot(job["ref"], specs or None, archs=job["archs"], out_dir=job["out_dir"],
                                 name=job["name"])
            if job.get("launch"):
                attach_launch(folder, {**job["launch"], "source": "recorded-launch"})
    except UsageError as e:           # no specs to compile with: the run-based capture does it
        return {"ok": False, "kind": "no-specs", "error": e.one_line()}
    except CutileDiagError as e:
        return {"ok": False, "kind": "compile", "error": e.one_line()}
    warm: dict = {}
    try:
        with contextlib.redirect_stdout(sys.stderr):
            warm = _warm_cache(job["ref"], specs or None, job["archs"][0])
    except Exception as e:            # the capture stands; the worker then compiles itself
        warm = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}
    return {"ok": True, "path": str(Path(job["out_dir"]) / job["name"]),
            "source": "recorded-launch" if job.get("launch") else "specs", "warm": warm}


def _preload() -> None:
    """What every compile imports (a spare does it before its job arrives)."""
    import cuda.tile._compile  # noqa: F401  (pulls in torch)
    from ..capture import aot, auto  # noqa: F401


def main(argv: Sequence[str] | None = None) -> int:
    """Compile the job in ``argv[0]`` (``--spare``: preload imports, then read the job's path on stdin) and print the
    reply as one JSON line; 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--spare":
        try:
            _preload()
        except Exception:             # the job itself will say what is missing
            pass
        line = sys.stdin.readline().strip()
        if not line:                  # the pool closed: nothing to do
            return 0
        argv = [line]
    job = json.loads(Path(argv[0]).read_text())
    try:
        reply = _child(job)
    except Exception as e:
        reply = {"ok": False, "kind": "crash", "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
