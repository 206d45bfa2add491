"""The campaign's survey: the user's command run once under the launch observer, incrementally.

Every Python process of the command appends its launches to ``<state>/survey/records/`` as
they happen (per test under pytest: ``measure.observe`` flushes when
``PYTEST_CURRENT_TEST`` changes), so a survey that is killed keeps what it saw.  The next
survey of the same command continues: the tests that had finished (a process went on to
another test) are kept and passed to pytest as ``--deselect``; the launches of the test that
was cut short are dropped and it runs again.  ``status.json`` says whether the survey ran to
its end; a complete survey is reused as is (``--plan`` a second time runs nothing).

An executed survey then times the surveyed tests' ``pytorch`` twins (``campaign.reference``:
TileGym's perf tests run that framework at the same parameters), kept in ``status.json``
under ``reference``.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..capture.launches import LaunchRecord, read_jsonl, write_jsonl
from ..measure.observe import CommandFailedError, NoLaunchesError, observe_command
from ..errors import UsageError
from .reference import time_reference

Echo = Callable[[str], None] | None


@dataclass
class Survey:
    """What the survey saw: every launch the command made, the runs it took (a killed survey continues), the pytorch
    twins' times and the replay folder."""
    command: list[str]
    cwd: str
    executed: bool
    complete: bool
    records: list[LaunchRecord] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reference: dict[str, dict] = field(default_factory=dict)   # test id -> its pytorch twin's median (reference.py)
    replay_dir: str | None = None         # the launches recorded for replay, one folder per signature

    @property
    def seconds(self) -> float:
        """What the survey's runs took, all together."""
        return round(sum(r.get("seconds") or 0.0 for r in self.runs), 1)

    def to_json(self) -> dict:
        """The survey's summary (counts of launches and tests, not the launches themselves)."""
        return {"command": self.command, "cwd": self.cwd, "executed": self.executed, "complete": self.complete,
                "launches": len(self.records), "tests": len({r.extra.get("test") for r in self.records} - {None}),
                "runs": self.runs, "seconds": self.seconds, "warnings": self.warnings, "reference": self.reference,
                "replay_dir": self.replay_dir}


def is_pytest(cmd: list[str]) -> bool:
    """The command runs pytest (``pytest`` or ``python -m pytest``, after any prefix)."""
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


def bounded(cmd: list[str], max_tests: int, cwd: Path | None = None) -> list[str]:
    """The test ids past the first ``max_tests`` of each test function (its parametrisations, in collection
    order), from ``pytest --collect-only``: what a bounded survey deselects.  [] when nothing can be collected."""
    import subprocess
    quiet = [] if any(w in ("-q", "--quiet") or w.startswith("-qq") for w in cmd) else ["-q"]
    try:
        out = subprocess.run([*cmd, "--collect-only", *quiet], capture_output=True, text=True, timeout=600,
                             cwd=cwd, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    per: dict[str, list[str]] = {}
    for ln in out.splitlines():
        if "::" in ln and not ln.startswith((" ", "<")):
            per.setdefault(ln.strip().split("[", 1)[0], []).append(ln.strip())
    return [t for ids in per.values() for t in ids[max_tests:]]


def survey(cmd: list[str], state: Path, *, execute: bool, echo: Echo = None, fresh: bool = False,
           timeout: float | None = None, replay: bool = True, max_tests: int | None = None) -> Survey:
    """Run (or continue, or reuse) the survey of ``cmd`` in ``state/survey``; ``replay``: record the first
    launch of each signature for replay in ``state/survey/replay`` on the way (no extra run); ``max_tests``:
    under pytest, run at most that many parametrisations of each test function."""
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
    replay_dir = root / "replay" if replay else None
    if status is not None and status["complete"] and _load(rec_dir):
        sv = Survey(cmd, status["cwd"], execute, True, _load(rec_dir), status["runs"], status.get("warnings", []),
                    status.get("reference") or {}, str(root / "replay") if (root / "replay").is_dir() else None)
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
    if max_tests is not None and is_pytest(cmd):
        over = bounded(cmd, max_tests)
        run_cmd += [w for t in over if t not in run_cmd for w in ("--deselect", t)]
        say(f"survey: --max-tests {max_tests}: {len(over)} more parametrisation(s) not run")
    cwd = str(Path.cwd())
    this = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "deselected": (len(run_cmd) - len(cmd)) // 2}
    runs.append(this)
    root.mkdir(parents=True, exist_ok=True)

    def save(complete: bool, warnings: list[str], reference: dict | None = None) -> None:
        status_path.write_text(json.dumps({"command": cmd, "cwd": cwd, "executed": execute, "complete": complete,
                                           "runs": runs, "warnings": warnings, "reference": reference or {}},
                                          indent=1))
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
    failed: CommandFailedError | None = None
    try:
        observe_command(run_cmd, execute=execute, timeout=timeout, record_dir=sub, poll=poll,
                        echo=lambda line: say("│ " + line), replay_dir=replay_dir)
    except NoLaunchesError:
        pass                                    # judged below, with the launches of earlier runs
    except CommandFailedError as e:
        # failing tests do not make a survey incomplete: what ran is recorded, and a re-run fails alike
        failed = e
        warnings.append(e.one_line())
        say(f"survey: {e.one_line()}")
    records = _load(rec_dir)
    this["seconds"] = round(time.monotonic() - t0, 1)
    if not records:
        # nothing to keep: no survey is cached, the next run surveys again
        shutil.rmtree(root, ignore_errors=True)
        if failed is not None:
            code = "timed out" if failed.returncode is None else f"exited with {failed.returncode}"
            raise CommandFailedError(f"the survey's command {code} and launched no cuTile kernel; its last lines: "
                                     + (" | ".join(failed.tail)[-900:] or "(no output)"),
                                     hint="fix the command (the survey is not kept: the next run runs it again)",
                                     returncode=failed.returncode, tail=failed.tail)
        raise NoLaunchesError("the command launched no cuTile kernel: nothing to optimise",
                              hint="check the selection (e.g. pytest -k) runs cuTile code paths")
    say(f"survey: {len(records)} launches recorded in {this['seconds']:g} s")
    ref = {}
    prefix = pytest_prefix(cmd)
    if execute and prefix:
        got = time_reference(prefix, {r.extra["test"] for r in records if r.extra.get("test")}, cwd=cwd,
                             timeout=timeout, echo=say)
        ref = got.times
        warnings += got.warnings
    save(True, warnings, ref)
    return Survey(cmd, cwd, execute, True, records, runs, warnings, ref,
                  str(replay_dir) if replay_dir is not None and replay_dir.is_dir() else None)
