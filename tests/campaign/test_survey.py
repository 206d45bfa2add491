"""The campaign's survey is incremental: a survey killed mid-run keeps the launches of the tests
that finished, and the next run continues with the rest (pytest --deselect)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from cutile_diag.campaign.survey import finished_tests, survey
from cutile_diag.capture.launches import LaunchRecord
from cutile_diag.examples import EXAMPLES_DIR

TESTS = f'''
import os, sys, time
import torch
sys.path.insert(0, {str(EXAMPLES_DIR)!r})
import vector_add


def _launch():
    a = torch.ones(1 << 16)
    vector_add.launch(a, a, torch.empty_like(a))


def test_a():
    _launch()


def test_b():
    _launch()


def test_c():
    _launch()
    if os.environ.get("SLOW_C"):
        time.sleep(60)
'''


def test_a_killed_survey_keeps_finished_tests_and_the_next_run_continues(tmp_path):
    (tmp_path / "test_k.py").write_text(TESTS)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_k.py"]
    state = tmp_path / "state"
    code = ("import sys, pathlib; from cutile_diag.campaign.survey import survey; "
            f"survey({cmd!r}, pathlib.Path({str(state)!r}), execute=False)")
    env = {**os.environ, "SLOW_C": "1"}
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    rec_dir = state / "survey" / "records"
    end = time.monotonic() + 90
    # test_b's launch reaches the file when test_c launches (the observer flushes per test)
    while time.monotonic() < end and not any("test_b" in f.read_text() for f in rec_dir.glob("*/launches-*.jsonl")):
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)          # no clean-up of any kind; the observed pytest dies with it
    child.wait()
    assert any("test_b" in f.read_text() for f in rec_dir.glob("*/launches-*.jsonl"))

    lines: list[str] = []
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        sv = survey(cmd, state, execute=False, echo=lines.append)
    finally:
        os.chdir(old)
    tests = sorted(r.extra["test"] for r in sv.records)
    # test_a finished (the process went on to test_b); test_b was the last on file: run again, once
    assert tests == ["test_k.py::test_a", "test_k.py::test_b", "test_k.py::test_c"]
    assert sv.complete and len(sv.runs) == 2 and sv.runs[1]["deselected"] == 1
    assert any("1 finished test(s) kept" in ln for ln in lines)
    again = survey(cmd, state, execute=False, echo=lines.append)         # complete: reused, nothing runs
    assert len(again.records) == 3 and "complete from an earlier run" in lines[-1]


def test_finished_tests_are_those_a_process_moved_on_from():
    def rec(pid, seq, test):
        return LaunchRecord("k", None, None, (), (), extra={"pid": pid, "seq": seq, "test": test})
    recs = [rec(1, 1, "a"), rec(1, 2, "a"), rec(1, 3, "b"), rec(2, 1, "c"), rec(2, 2, "d")]
    assert finished_tests(recs) == {"a", "c"}
