"""The campaign's survey: the user's command run once under the launch observer, incrementally.

Every Python process of the command appends its launches to ``<state>/survey/records/`` as
they happen (per test under pytest: ``capture.launch_observer`` flushes when
``PYTEST_CURRENT_TEST`` changes), so a survey that is killed keeps what it saw.  The next
survey of the same command continues: the tests that had finished (a process went on to
another test) are kept and passed to pytest as ``--deselect``; the launches of the test that
was cut short are dropped and it runs again.  ``status.json`` says whether the survey ran to
its end; a complete survey is reused as is (``--plan`` a second time runs nothing).
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..capture.launches import LaunchRecord, read_jsonl, write_jsonl
from ..capture.launch_observer import CommandFailedError, NoLaunchesError, observe_command
from ..errors import UsageError

Echo = Callable[[str], None] | None


@dataclass
class Survey:
    command: list[str]
    cwd: str
    executed: bool
    complete: bool
    records: list[LaunchRecord] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"command": self.command, "cwd": self.cwd, "executed": self.executed, "complete": self.complete,
                "launches": len(self.records), "tests": len({r.extra.get("test") for r in self.records} - {None}),
                "runs": self.runs, "warnings": self.warnings}


def is_pytest(cmd: list[str]) -> bool:
    return pytest_prefix(cmd) is not None


def pytest_prefix(cmd: list[str]) -> list[str] | None:
    """The words that start pytest in ``cmd`` (``pytest``, ``python -m pytest``), else None."""
    for i, w in enumerate(cmd):
        if Path(w).name in ("pytest", "py.test"):
            return cmd[:i + 1]
        if w == "-m" and i + 1 < len(cmd) and cmd[i + 1] == "pytest":
            return cmd[:i + 2]
    return None


def _load(rec_dir: Path) -> list[LaunchRecord]:
    out: list[LaunchRecord] = []
    for f in sorted(rec_dir.glob("**/launches-*.jsonl")):
        out.extend(read_jsonl(f))
    return out


def finished_tests(records: list[LaunchRecord]) -> set[str]:
    """Tests some process moved on from: every test of a process but the one it launched last."""
    last: dict[int, tuple[int, str | None]] = {}
    seen: set[str] = set()
    for r in records:
        t = r.extra.get("test")
        if t:
            seen.add(t)
        pid, seq = r.extra.get("pid"), r.extra.get("seq") or 0
        if pid is not None and seq >= last.get(pid, (-1, None))[0]:
            last[pid] = (seq, t)
    return seen - {t for _s, t in last.values()}


def _drop_unfinished(rec_dir: Path, keep: set[str]) -> int:
    """Rewrite the record files without the launches of tests that were cut short."""
    dropped = 0
    for f in rec_dir.glob("**/launches-*.jsonl"):
        recs = read_jsonl(f)
        kept = [r for r in recs if r.extra.get("test") in keep]
        dropped += len(recs) - len(kept)
        if len(kept) != len(recs):
            f.unlink()
            if kept:
                write_jsonl(kept, f)
    return dropped


def survey(cmd: list[str], state: Path, *, execute: bool, echo: Echo = None, fresh: bool = False,
           timeout: float | None = None) -> Survey:
    """Run (or continue, or reuse) the survey of ``cmd`` in ``state/survey``."""
    say = echo or (lambda _m: None)
    root = state / "survey"
    status_path = root / "status.json"
    if fresh and root.exists():
        shutil.rmtree(root)
    status = json.loads(status_path.read_text()) if status_path.is_file() else None
    if status is not None and (status["command"] != cmd or status["executed"] != execute):
        raise UsageError(f"{root} holds the survey of another command"
                         f" ({' '.join(status['command'])[:80]}, {'executed' if status['executed'] else 'dry run'})",
                         hint="give --out FOLDER for another campaign, or --resurvey to start this one afresh")
    rec_dir = root / "records"
    if status is not None and status["complete"]:
        sv = Survey(cmd, status["cwd"], execute, True, _load(rec_dir), status["runs"], status.get("warnings", []))
        say(f"survey: complete from an earlier run ({len(sv.records)} launches); --resurvey runs it again")
        return sv
    runs = list(status["runs"]) if status else []
    run_cmd = list(cmd)
    if runs:                                    # an earlier survey was cut short: continue it
        old = _load(rec_dir)
        done = finished_tests(old) if is_pytest(cmd) else set()
        dropped = _drop_unfinished(rec_dir, done)
        for t in sorted(done):
            run_cmd += ["--deselect", t]
        say(f"survey: continuing a cut-short survey: {len(done)} finished test(s) kept, "
            f"{dropped} launch(es) of an unfinished one dropped")
    cwd = str(Path.cwd())
    this = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "deselected": (len(run_cmd) - len(cmd)) // 2}
    runs.append(this)
    root.mkdir(parents=True, exist_ok=True)

    def save(complete: bool, warnings: list[str]) -> None:
        status_path.write_text(json.dumps({"command": cmd, "cwd": cwd, "executed": execute, "complete": complete,
                                           "runs": runs, "warnings": warnings}, indent=1))
    save(False, [])
    seen = {"n": -1}

    def poll(d: Path) -> None:
        n = sum(f.read_bytes().count(b"\n") for f in d.glob("**/launches-*.jsonl"))
        if n != seen["n"]:
            seen["n"] = n
            say(f"survey: {n} launches recorded")
    sub = rec_dir / f"run-{len(runs)}"
    warnings: list[str] = []
    t0 = time.monotonic()
    try:
        observe_command(run_cmd, execute=execute, timeout=timeout, record_dir=sub, poll=poll,
                        echo=lambda line: say("│ " + line))
    except NoLaunchesError:
        pass                                    # judged below, with the launches of earlier runs
    except CommandFailedError as e:
        # failing tests do not make a survey incomplete: what ran is recorded, and a re-run fails alike
        warnings.append(e.one_line())
        say(f"survey: {e.one_line()}")
    records = _load(rec_dir)
    this["seconds"] = round(time.monotonic() - t0, 1)
    save(True, warnings)
    if not records:
        raise NoLaunchesError("the command launched no cuTile kernel: nothing to optimise",
                              hint="check the selection (e.g. pytest -k) runs cuTile code paths")
    say(f"survey: {len(records)} launches recorded")
    return Survey(cmd, cwd, execute, True, records, runs, warnings)
