"""A newcomer's campaign, killed and resumed, then run again in the same repository the same day:
the time spent before a ``kill -9`` counts, ``--resume`` finishes it, a second campaign names its
branches so they do not collide (``-2``; ``--branch-prefix``), and every hint ``loop status`` prints
for a campaign's loop works as printed."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cutile_diag.campaign.demo import SPECS, git, make_repo, survey_command

sys.path.insert(0, str(Path(__file__).parent))
from test_campaign import resume_in, run_main  # noqa: E402

PYTEST = survey_command()
SRC = str(Path(__file__).parents[2] / "src")


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """`campaign --baselines-first --time-limit 120 --simulate` (no --rounds) killed with SIGKILL once a
    loop has measured its baseline, then `campaign --resume`."""
    tmp = tmp_path_factory.mktemp("again")
    repo = make_repo(tmp, ("vector_add", "row_norm"))
    spec = tmp / "specs.json"
    spec.write_text(json.dumps({k: SPECS[k] for k in ("vector_add", "row_norm")}))
    out = repo / "cutile-diag-out" / "campaign"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-m", "cutile_diag", "campaign", "--baselines-first", "--time-limit",
                              "120", "--simulate", str(spec), "--max-iterations", "2", "--no-capture", "--", *PYTEST],
                             cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    first = out / "loops" / "vector_add" / "ledger.jsonl"
    while child.poll() is None and time.monotonic() - t0 < 120:
        if first.exists() and '"iteration", "iteration": 0' in first.read_text():
            break
        time.sleep(0.2)
    time.sleep(6.0)                     # some of the loops' time, then no clean-up of any kind
    child.send_signal(signal.SIGKILL)
    child.wait()
    lived = time.monotonic() - t0
    at_kill = json.loads((out / "campaign.json").read_text())
    rc, d = resume_in(repo)
    return repo, spec, out, lived, at_kill, rc, d


def test_a_killed_campaign_counts_its_time_and_resume_finishes_it(killed_and_resumed):
    repo, _spec, out, lived, at_kill, rc, d = killed_and_resumed
    # the time the killed run spent is on record (saved as it went), not 0
    assert 0.5 < at_kill["spent_s"] <= lived, at_kill["spent_s"]
    rows = {r["kernel"]: r for r in d["report"]["kernels"]}
    assert rc == 0 and all(r["status"] == "done" for r in rows.values()), rows
    state = json.loads((out / "campaign.json").read_text())
    assert state["spent_s"] > at_kill["spent_s"]
    assert f"time spent {state['spent_s']:.0f} s" in (out / "campaign.md").read_text()


def test_a_second_campaign_the_same_day_names_its_branches_apart(killed_and_resumed, monkeypatch):
    repo, spec, _out, *_ = killed_and_resumed
    monkeypatch.chdir(repo)
    def branches(pattern):
        return sorted(git(repo, "branch", "--list", "--format=%(refname:short)", pattern).split())
    first = branches("cutile-perf-vector_add-*")
    assert len(first) == 1
    rc, _ = run_main(["campaign", "--out", "cutile-diag-out/second", "--simulate", str(spec), "--select", "vector_add",
                      "--max-iterations", "1", "--no-capture", "--", *PYTEST])
    assert rc == 0
    assert branches("cutile-perf-vector_add-*") == [first[0], first[0] + "-2"]
    rc, _ = run_main(["campaign", "--out", "cutile-diag-out/third", "--simulate", str(spec), "--select", "row_norm",
                      "--branch-prefix", "try", "--max-iterations", "1", "--no-capture", "--", *PYTEST])
    assert rc == 0 and [re.sub(r"\d{8}", "DATE", b) for b in branches("try-*")] == ["try-row_norm-DATE"]


def test_every_hint_loop_status_prints_for_a_campaign_loop_works_as_printed(killed_and_resumed, monkeypatch):
    repo, _spec, out, *_ = killed_and_resumed
    monkeypatch.chdir(repo)
    monkeypatch.setenv("CUTILE_DIAG_PROG", "cutile-diag")
    status = ["loop", "status", "--out", str(out / "loops" / "vector_add")]

    def hints() -> list[str]:
        rc, text = run_main(status)
        assert rc == 0
        return [c for c in re.findall(r"`([^`]+)`", " ".join(text.split())) if c.startswith("cutile-diag ")]
    first = hints()
    assert any(" loop next" in h for h in first) and any(" loop clean" in h for h in first), first
    for h in sorted(first, key=lambda h: " loop clean" in h):         # clean last: it removes the worktree
        rc, _ = run_main(shlex.split(h)[1:])
        assert rc == 0, h
    resume = [h for h in hints() if "optimize --resume" in h]         # the worktree is gone: made again
    assert resume
    rc, _ = run_main([*shlex.split(resume[0])[1:], "--max-iterations", "3"])
    assert rc == 0, resume[0]
