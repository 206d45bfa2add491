"""A newcomer's campaign: every bad input is refused in one line (exit 2) before anything runs —
no survey, no campaign state, no branch — and the run's state survives a kill."""
from __future__ import annotations

import json
import time

import pytest

from cutile_diag.campaign.demo import SPECS, git, make_repo, survey_command
from cutile_diag.cli import main

PYTEST = survey_command()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    r = make_repo(tmp_path, ("vector_add", "row_norm"))
    monkeypatch.chdir(r)
    return r


def _spec(tmp_path, **over) -> str:
    d = {k: SPECS[k] for k in ("vector_add", "row_norm")}
    for k, v in over.items():
        d["vector_add"] = {**d["vector_add"], **v} if isinstance(v, dict) else v
    p = tmp_path / "specs.json"
    p.write_text(json.dumps(d))
    return str(p)


def _refused(capsys, repo, argv, *words):
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("cutile-diag: error:")]
    assert rc == 2 and len(lines) == 1, err
    assert "Traceback" not in err and all(w in lines[0] for w in words), err
    out = repo / "cutile-diag-out" / "campaign"
    # nothing ran: no survey, no campaign, no loop branch
    assert not (out / "survey").exists() and not (out / "campaign.json").exists(), err
    assert not git(repo, "branch", "--list", "cutile-perf-*")
    return lines[0]


@pytest.mark.parametrize("bad,words", [
    ({"colour": "red"}, ("vector_add", "unknown key", "colour")),
    ({"configs": {}}, ("vector_add", "configs")),
    ({"configs": {"1M": -1, "4M": 0.06}}, ("vector_add", "1M", "-1")),
    ({"configs": {"1M": 0.01}, "run_s": -1}, ("vector_add", "run_s", "-1")),
])
def test_a_bad_simulation_spec_is_refused_before_the_survey(capsys, repo, tmp_path, bad, words):
    _refused(capsys, repo, ["campaign", "--simulate", _spec(tmp_path, vector_add=bad), "--", *PYTEST], *words)


@pytest.mark.parametrize("limit", ["0", "-5", "nan"])
def test_a_time_limit_that_is_not_positive_is_refused(capsys, repo, tmp_path, limit):
    _refused(capsys, repo, ["campaign", "--simulate", _spec(tmp_path), f"--time-limit={limit}", "--", *PYTEST],
             "--time-limit")


def test_a_dirty_checkout_is_refused_before_the_survey(capsys, repo, tmp_path):
    (repo / "ops" / "vector_add.py").write_text((repo / "ops" / "vector_add.py").read_text() + "\n# wip\n")
    _refused(capsys, repo, ["campaign", "--simulate", _spec(tmp_path), "--", *PYTEST],
             "uncommitted changes", "ops/vector_add.py")


def test_bad_loop_options_are_refused_before_the_survey(capsys, repo, tmp_path):
    _refused(capsys, repo, ["campaign", "--simulate", _spec(tmp_path), "--max-iterations", "99", "--", *PYTEST],
             "--max-iterations")


def test_an_invalid_spares_count_is_refused(capsys, repo, tmp_path, monkeypatch):
    monkeypatch.setenv("CUTILE_DIAG_SPARES", "two")
    _refused(capsys, repo, ["campaign", "--simulate", _spec(tmp_path), "--", *PYTEST], "CUTILE_DIAG_SPARES", "two")


def test_spares_from_the_environment():
    from cutile_diag.errors import UsageError
    from cutile_diag.loop import spares
    assert spares.wanted(3, env="2") == 2 and spares.wanted(3, env="0") == 0 and spares.wanted(3, env=" ") in (0, 3)
    for bad in ("two", "-1", "1.5"):
        with pytest.raises(UsageError, match="CUTILE_DIAG_SPARES"):
            spares.wanted(3, env=bad)


def test_step_cost_without_rounds_given(tmp_path):
    """No --rounds (the default): one step's cost uses the rounds the loop itself would fit to
    --budget from the measured run time, not int(None)."""
    from cutile_diag.campaign.plan import CampaignPlan, KernelPlan
    from cutile_diag.campaign.run import Campaign
    from cutile_diag.ledger import Ledger
    from cutile_diag.loop import budget
    ks = [KernelPlan("a", "/r/a.py::a", "a.py", expected_gain=0.5), KernelPlan("b", "/r/b.py::b", "b.py", expected_gain=0.5)]
    c = Campaign.create(tmp_path, CampaignPlan(["pytest"], "/r", True, ks, "test"), ks, time_limit=100.0,
                        simulate=None, options={}, executor={"executor": "local"}, baselines_first=True)
    for k, run_s in (("a", 1.0), ("b", 20.0)):
        Ledger(c.ledger_dir(k)).adopt([{"type": "setup"}, {"type": "iteration", "iteration": 0, "status": "keep",
                                                            "costs": {"verify_s": 4.0, "run_s": run_s}}])
    assert c.step_cost("a") == pytest.approx((4.0 + 2 * 3 * 1.0) / budget.MARGIN)      # cheap runs: 3 rounds
    assert c.step_cost("b") == pytest.approx((4.0 + 2 * 2 * 20.0) / budget.MARGIN)     # 6 x 20 s > 600/8: 2
    assert c.time_share("a", time.monotonic()) > 0
    # a replay loop keeps a step only after the user's test command: its step, and its least share, hold one
    Ledger(c.ledger_dir("a")).adopt([{"type": "setup", "backend": {"backend": "replay"}},
                                     {"type": "iteration", "iteration": 0, "status": "keep",
                                      "costs": {"verify_s": 4.0, "run_s": 1.0}}])
    assert c.step_cost("a") == pytest.approx((4.0 + 2 * 3 * 1.0 + budget.KEEP_PRIOR_S) / budget.MARGIN)


def test_resume_retries_crashed_kernels(tmp_path, monkeypatch):
    """A kernel whose loop crashed is run again by --resume (not "0 kernel(s) to run")."""
    from cutile_diag.campaign.plan import CampaignPlan, KernelPlan
    from cutile_diag.campaign.run import Campaign
    ks = [KernelPlan("a", "/r/a.py::a", "a.py", expected_gain=0.5), KernelPlan("b", "/r/b.py::b", "b.py", expected_gain=0.5)]
    c = Campaign.create(tmp_path, CampaignPlan(["pytest"], "/r", True, ks, "test"), ks, time_limit=None,
                        simulate=None, options={}, executor={"executor": "local"})
    c.mark("a", status="crashed", error="boom")
    c.mark("b", status="done")
    c.retry_crashed()
    assert c.todo() == ["a"] and c.state("a")["status"] == "retry"


def test_the_correctness_command_of_a_perf_file_selects_its_correctness_tests(repo, capsys):
    """Perf tests in tests/test_perf.py: `-k 'not perf'` would deselect the whole file (pytest's -k
    matches the file's name); the plan checks the command with --collect-only and derives one that
    runs the file's other tests, saying so."""
    import shlex
    import subprocess
    git(repo, "mv", "tests/test_ops.py", "tests/test_perf.py")
    git(repo, "commit", "-qm", "perf tests in their own file")
    rc = main(["campaign", "--plan", "--dry-run", "--json", "--", *PYTEST])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and sorted(d["selected"]) == ["row_norm", "vector_add"], d["plan"]["kernels"]
    assert any("selects no test" in w for w in d["plan"]["warnings"])
    for k in d["plan"]["kernels"]:
        res = subprocess.run([*shlex.split(k["test_cmd"]), "--collect-only", "-q", "-p", "no:cacheprovider"],
                             cwd=repo, capture_output=True, text=True)
        ids = [ln for ln in res.stdout.splitlines() if "::" in ln]
        assert res.returncode == 0 and ids == ["tests/test_perf.py::test_op_reference"], (k["test_cmd"], res.stdout)
