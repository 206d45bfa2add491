"""Helpers for the loop tests: a temporary git repository holding a copy of an example kernel
(with its launch wrapper and CAPTURE_SPECS) plus a test file the loop must never touch, and
helpers that build a session + runner against the simulated backend."""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cutile_diag.examples import EXAMPLES_DIR

GIT_ID = ["-c", "user.name=test", "-c", "user.email=test@example.com"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *GIT_ID, *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    shutil.copy(EXAMPLES_DIR / "vector_add.py", r / "vector_add.py")
    (r / "tests").mkdir()
    (r / "tests" / "test_vector_add.py").write_text("def test_vector_add():\n    assert True\n")
    (r / "README.md").write_text("kernel repo\n")
    git(r, "add", "-A")
    git(r, "commit", "-qm", "initial")
    return r


# --- fake transforms (text appends: enough for the loop machinery; real ones are libcst) --------

@dataclass(frozen=True)
class FakeResult:
    transform: str
    new_source: str
    description: str
    changed_lines: tuple = ()
    params: dict = field(default_factory=dict)
    notes: tuple = ()


class FakeTransform:
    """Appends a marker line; ``params`` sets give a sweep; ``repeat`` allows re-application."""
    kind = "source"

    def __init__(self, name: str, playbook_id: str = "X", params: list[dict] | None = None, repeat: bool = False,
                 side_effect=None):
        self.name, self.playbook_id = name, playbook_id
        self.params = params if params is not None else [{}]
        self.repeat = repeat
        self.side_effect = side_effect
        self.applied = 0

    def _marker(self, params) -> str:
        return f"# fake:{self.name}{json.dumps(params, sort_keys=True) if params else ''}"

    def candidates(self, source: str, kernel: str) -> list[dict]:
        if self.repeat:
            n = source.count(f"# fake:{self.name}")
            return [{"i": n}]
        return [p for p in self.params if self._marker(p) not in source]

    def candidates_for(self, source: str, kernel: str, facts) -> list[dict]:
        return self.candidates(source, kernel)

    def applicable(self, source, kernel, **params):
        return (self._marker(params) not in source, "")

    def why_no_candidates(self, source, kernel):
        return self.applicable(source, kernel)[1]

    def apply(self, source: str, kernel: str, **params):
        if self.side_effect:
            self.side_effect()
        self.applied += 1
        return FakeResult(self.name, source + self._marker(params) + "\n", f"{self.name} {params or ''}".strip(),
                          (source.count("\n") + 1,), dict(params))


def rec(id_: str, transform: str = "", name: str | None = None, **kw):
    from cutile_diag.loop.diagnosis import Rec
    return Rec(id=id_, name=name or f"entry {id_}", transform=transform, **kw)


def diagnosis(*recs, bottleneck="memory-bound", escalate=False):
    from cutile_diag.loop.diagnosis import LoopDiagnosis
    return LoopDiagnosis(bottleneck=bottleneck, escalate=escalate, recommendations=list(recs), source="scripted",
                         reasons=[f"scripted {bottleneck}"])


class RankedDiagnoser:
    """Recommends ``recs`` in order, demoting tried ones like the engine does."""

    def __init__(self, recs, bottleneck="memory-bound", escalate=False):
        self.recs, self.bottleneck, self.escalate = list(recs), bottleneck, escalate
        self.calls = []

    def diagnose(self, ctx):
        import copy
        self.calls.append(ctx)
        rs = []
        for i, r in enumerate(self.recs):
            r = copy.copy(r)
            r.tried = int(ctx.tried.get(r.id, 0))
            r.rank = float(i)
            rs.append(r)
        rs.sort(key=lambda r: (r.tried > 0, r.tried, r.rank))
        return diagnosis(*rs, bottleneck=self.bottleneck, escalate=self.escalate)


SPEC = {"configs": {"small": 0.05, "large": 0.40}, "noise": 0.003, "run_noise": 0.001, "samples": 20}


def make_loop(repo: Path, spec: dict | None = None, *, recs=None, transforms=None, diagnoser=None, hooks=None,
              ref: str | None = None, branch: str | None = None, **opts):
    """A fresh session (branch + ledger) and a runner on the simulated backend."""
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    backend = SimulatedBackend({**SPEC, **(spec or {})})
    # beam 1: these tests drive the greedy walk's rules; test_beam.py passes beam=None (the default width)
    options = LoopOptions(**{"capture": False, "rounds": 3, "beam": 1, **opts})
    before = checkout_state(repo)
    s, led = create_session(ref or f"{repo / 'vector_add.py'}::vector_add", backend=backend.describe(),
                            options=options.to_json(), branch=branch)
    runner = Runner(s, backend, led, diagnoser=diagnoser or RankedDiagnoser(recs or []),
                    transforms=transforms or {}, options=options, hooks=hooks)
    runner.user_checkout = before
    return runner


def reload_runner(repo: Path, runner, *, hooks=None, **opts):
    """A new runner on the same session, as `optimize --resume` builds it."""
    from cutile_diag.loop.backends import backend_from_json
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.session import load_session
    from cutile_diag.loop.setup import check_resume
    s, led = load_session(runner.s.state_dir)
    done = check_resume(s, led)
    options = LoopOptions.from_json(s.options, **opts)
    r = Runner(s, backend_from_json(s.backend), led, diagnoser=runner.diagnoser, transforms=runner._transforms,
               options=options, hooks=hooks)
    r.resume_log = done
    r.user_checkout = getattr(runner, "user_checkout", None)
    return r


def table_rows(runner):
    from cutile_diag.ledger import parse_table
    return parse_table(runner.led.table_path.read_text())


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD")


def dirty(repo: Path) -> list[str]:
    """Changed files of a checkout or the loop's worktree (the loop's state folder aside)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True,
                         text=True).stdout
    return [ln[3:] for ln in out.splitlines() if ln[3:] and not ln[3:].startswith("cutile-diag-out/")]


def checkout_state(repo: Path) -> dict:
    """Everything of the user's checkout the loop must never change: branch, HEAD, index, status
    and every file's bytes (the loop's own state folder aside)."""
    import hashlib
    files = {}
    for f in sorted(repo.rglob("*")):
        rel = f.relative_to(repo).as_posix()
        if rel.startswith((".git/", "cutile-diag-out/")) or rel in (".git", "cutile-diag-out") or not f.is_file():
            continue
        files[rel] = hashlib.sha256(f.read_bytes()).hexdigest()
    return {"branch": git(repo, "symbolic-ref", "--short", "-q", "HEAD"), "head": head(repo),
            "index": git(repo, "ls-files", "-s"), "status": dirty(repo), "files": files}


def untouched(repo: Path, r) -> bool:
    """The user's checkout is exactly as it was when the loop was made (``make_loop`` snapshots it)."""
    now = checkout_state(repo)
    assert now == r.user_checkout, {k: (r.user_checkout[k], now[k]) for k in now if now[k] != r.user_checkout[k]}
    return True


def children(pid: int) -> dict[int, str]:
    """pid -> command line of the live processes whose parent is ``pid`` (Linux /proc)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
    return out


# a minimal workload file; {prelude} runs at import (a probe, a hang, a death)
WORKLOAD_FILE = """
import time, os, sys
from cutile_diag.workload import Workload, WorkloadConfig
{prelude}

class W(Workload):
    name = "w"
    configs = [WorkloadConfig("c", {{}})]
    def make_inputs(self, cfg, seed, device="cuda"): return {{}}
    def run(self, inputs): return None
    def reference(self, inputs): return None
    def flops(self, cfg): return 1.0
    def bytes(self, cfg): return 1.0
"""
