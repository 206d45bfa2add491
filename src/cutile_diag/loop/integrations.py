"""The loop's calls into other stages: AOT capture of a version, and the IR diff between two.

Captures run in a killable child (``loop.capture_child``: a JOB file in, a RESULT file out; a
tileiras crash or hang costs the iteration's budget, never the loop process) and are cached by
version digest.  The IR
diff comes from ``cutile_diag.diff.diff_paths`` on two capture folders; what the ledger
keeps is its summary, whether the two versions are equivalent, and the first changes.
"""
from __future__ import annotations

import functools
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from . import proc

MAX_DIFF_CHANGES = 25
CHILD = "cutile_diag.loop.capture_child"


@dataclass
class CaptureResult:
    """One capture of a version: the folder, or why it failed and which sources were tried; a timeout says nothing
    about the kernel."""
    ok: bool
    path: Path | None = None
    error: str = ""
    seconds: float = 0.0
    cached: bool = False
    source: str = ""                       # specs | workload-run | workload-cpu | command-run
    tried: list = field(default_factory=list)   # sources that did not work, one line each
    timed_out: bool = False                # killed at the time budget: says nothing about the kernel

    # what the loop does without it (bad input: the loop goes on with less evidence, on the record)
    FALLBACK = ("the loop goes on without IR evidence: the diagnosis ranks the transforms that apply to "
                "the source, and iterations have no IR diff")

    def to_json(self) -> dict:
        """The capture as the iteration's record stores it."""
        d = {"ok": self.ok, "path": str(self.path) if self.path else None, "error": self.error,
             "seconds": round(self.seconds, 3), "cached": self.cached}
        if self.source:
            d["source"] = self.source
        if self.tried:
            d["tried"] = list(self.tried)
        if not self.ok:
            d["fallback"] = self.FALLBACK
        return d


def _source_of(folder: Path) -> str:
    try:
        m = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return ""
    return (m.get("launch") or {}).get("source") or ("run" if (m.get("kernel") or {}).get("mode") == "run"
                                                    else "specs")


def capture_version(kernel_file: Path, kernel: str, digest: str, out_dir: Path, *, archs: Sequence[str] = ("sm_90",),
                    args: Sequence[str] = (), deadline: proc.Deadline | None = None, cwd: Path | None = None,
                    env: dict | None = None, cap_s: float = 300.0, sources: Mapping | None = None) -> CaptureResult:
    """Capture ``kernel_file::kernel`` as it is on disk now, into ``out_dir/<digest[:16]>``.
    ``sources`` (``loop.evidence.capture_sources``) says where arguments come from without specs."""
    name = digest[:16]
    folder = out_dir / name
    if (folder / "manifest.json").exists():
        return CaptureResult(True, folder, cached=True, source=_source_of(folder))
    job = {"ref": f"{kernel_file}::{kernel}", "out_dir": str(out_dir), "name": name, "archs": list(archs),
           "args": list(args)}
    if not args and sources:
        job.update(workload=sources.get("workload"), workload_kwargs=dict(sources.get("kwargs") or {}),
                   config=sources.get("config"), command=sources.get("command"))
    timeout = deadline.timeout(cap_s) if deadline else cap_s
    child_env: dict = {"CUDA_HOME": None, "CUDA_PATH": None}   # removed, not emptied (see proc.run)
    child_env.update(env or {})
    with tempfile.TemporaryDirectory(prefix="cutile-diag-capture-") as tmp:
        job_p, res_p = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_p.write_text(json.dumps(job))
        res = proc.run([sys.executable, "-m", CHILD, str(job_p), str(res_p)], cwd=cwd, env=child_env,
                       timeout=timeout)
        try:
            reply = json.loads(res_p.read_text()) if not res.timed_out else None
        except (OSError, ValueError):
            reply = None
    if res.timed_out:
        return CaptureResult(False, error=f"capture killed after {timeout:.0f} s (the time budget)",
                             seconds=res.wall_s, timed_out=True)
    if reply is None:             # the child crashed: its traceback's last line says how
        err = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
        return CaptureResult(False, error=err[-1] if err else f"exit {res.returncode}", seconds=res.wall_s)
    if not reply.get("ok"):
        msg = reply.get("error") or "the capture failed"
        if reply.get("missing_specs"):    # the hint names capture's flags; optimize's differ
            msg += ("; optimize takes these as --capture-arg NAME=SPEC (capture's --arg) or "
                    "--capture-workload REF (capture's --workload)")
        return CaptureResult(False, error=msg, seconds=res.wall_s)
    return CaptureResult(True, folder, seconds=res.wall_s, source=reply.get("source") or _source_of(folder),
                         tried=list(reply.get("tried") or []))


def ir_diff(a: Path | None, b: Path | None, *, entry: str | None = None) -> dict:
    """Summary of the IR diff between two capture folders (``{"skipped": why}`` when it cannot run)."""
    if a is None or b is None:
        return {"skipped": "no capture of " + ("either version" if a is None and b is None else
                                              "the baseline" if a is None else "the candidate")}
    from ..diff import diff_paths
    try:
        res = diff_paths(a, b, entry=entry)
        d = res.to_json()
    except Exception as e:   # the differ's failure must not sink a measured iteration
        try:
            res = diff_paths(a, b)
            d = res.to_json()
        except Exception:
            return {"skipped": f"IR diff failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    changes = d.get("changes") or []
    out = {"equivalent": d.get("equivalent"), "summary": d.get("summary"), "n_changes": len(changes),
           "changes": [_short_change(c) for c in changes[:MAX_DIFF_CHANGES]],
           "warnings": (d.get("warnings") or [])[:10], "cubin": d.get("cubin"), "a": str(a), "b": str(b)}
    occ = resident_change(a, b)
    if occ:
        out["resident_ctas"] = occ
    return out


@functools.lru_cache(maxsize=64)
def _resident(folder: str, arch: str) -> tuple[int | None, str]:
    """Per capture folder (one per version digest, never rewritten): the kept version's is read
    once, not at every candidate."""
    from ..diagnose.collect_capture import resident_ctas
    return resident_ctas(folder, arch)


def resident_change(a: Path, b: Path, arch: str = "sm_90") -> dict | None:
    """Resident CTAs per SM before and after, when the cubin facts change them: a step that takes
    a one-row-per-block kernel from 16 blocks per SM to 1 (a TMA pipeline's 255 registers and
    48 KB of shared memory) is slow before it is timed — the H200 measured 7.4x."""
    try:
        (na, why_a), (nb, why_b) = _resident(str(a), arch), _resident(str(b), arch)
    except Exception:            # evidence only: a capture the collector cannot read changes nothing
        return None
    if na is None or nb is None or na == nb:
        return None
    return {"before": na, "after": nb, "before_why": why_a, "after_why": why_b}


def _short_change(c) -> dict:
    if not isinstance(c, dict):
        return {"detail": str(c)}
    keep = ("kind", "level", "detail", "before", "after", "op", "knob", "arch", "line_before", "line_after", "source")
    out = {k: c[k] for k in keep if k in c and c[k] not in (None, "", [])}
    for k in ("before", "after"):
        if k in out and not isinstance(out[k], (int, float, str, bool)):
            text = json.dumps(out[k], default=str)
            out[k] = text if len(text) <= 200 else text[:199] + "…"
    return out
