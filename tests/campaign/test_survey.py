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


def test_max_tests_bounds_the_survey_to_n_parametrisations_per_test_function(tmp_path, monkeypatch):
    """TileGym's perf tests are parametrised many times over: `--max-tests 1` surveys the first of each
    test function (pytest --collect-only, the rest deselected), and the survey says how long it took."""
    from cutile_diag.campaign.demo import make_repo, survey_command
    repo = make_repo(tmp_path)
    monkeypatch.chdir(repo)
    sv = survey(survey_command(), tmp_path / "state", execute=False, max_tests=1, replay=False)
    tests = sorted({r.extra["test"] for r in sv.records})
    assert tests == ["tests/test_ops.py::test_perf_row_norm", "tests/test_ops.py::test_perf_softmax[256]",
                     "tests/test_ops.py::test_perf_vector_add[1048576]"]
    assert sv.runs[0]["deselected"] == 2 and sv.seconds > 0 and sv.replay_dir is None
def test_a_failing_survey_says_its_exit_code_and_last_lines_and_is_not_kept(tmp_path, monkeypatch):
    """A command that fails before any launch (a missing test path, sys.exit(3)): the error names the
    exit code and the command's last lines; nothing is cached, so the next run surveys again."""
    import pytest as _pytest

    from cutile_diag.measure.observe import CommandFailedError
    monkeypatch.chdir(tmp_path)
    state = tmp_path / "state"
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('setting up')\nprint('no GPU configured here', file=sys.stderr)\nsys.exit(3)\n")
    for _ in range(2):                       # the second run runs the command again (not "no kernel")
        with _pytest.raises(CommandFailedError) as e:
            survey([sys.executable, str(script)], state, execute=False)
        assert "exited with 3" in e.value.one_line() and "no GPU configured here" in e.value.one_line()
        assert not (state / "survey" / "status.json").exists()
    with _pytest.raises(CommandFailedError) as e:
        survey([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/nope.py"], state, execute=False)
    assert "exited with 4" in e.value.one_line() and "tests/nope.py" in e.value.one_line()
