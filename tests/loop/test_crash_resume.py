"""A crash at any point leaves the repository on the last kept commit and the ledger consistent;
``--resume`` records the crash and carries on."""
import subprocess
import sys
from pathlib import Path

import pytest

from looptools import (FakeTransform, children, dirty, git, head, make_loop, rec, reload_runner, table_rows,
                       untouched)


class Death(BaseException):
    """Stands for the process being killed (not an ordinary error the loop could record)."""


def two_step_loop(repo, hooks=None):
    ts = {"fast": FakeTransform("fast", "A"), "faster": FakeTransform("faster", "B")}
    return make_loop(repo, {"effects": {"fast": 0.9, "faster": 0.9}},
                     recs=[rec("A", "fast"), rec("B", "faster")], transforms=ts, hooks=hooks, max_iterations=3)


def assert_consistent(r, repo):
    rows = table_rows(r)
    assert [x["iteration"] for x in rows] == list(range(len(rows)))
    assert r.led.pending() is None
    assert head(r.s.worktree) == r.led.kept_commit() and dirty(r.s.worktree) == []
    if getattr(r, "user_checkout", None):
        assert untouched(repo, r)


@pytest.mark.parametrize("point", ["before_apply", "after_apply", "after_verify", "after_measure", "after_commit"])
def test_killed_mid_iteration_then_resume(repo, point):
    calls = {"n": 0}

    def die(ctx):
        if ctx["iteration"] == 2:
            calls["n"] += 1
            raise Death(point)

    r = two_step_loop(repo, hooks={point: die})
    with pytest.raises(Death):
        r.start()
    kept_after_1 = r.led.iterations[1]["commits"]["kept"]
    # immediately after the crash: on the last kept commit, the iteration pending in the ledger
    assert head(r.s.worktree) == kept_after_1 and dirty(r.s.worktree) == [] and untouched(repo, r)
    assert r.led.pending()["iteration"] == 2
    assert [x["iteration"] for x in table_rows(r)] == [0, 1]
    r2 = reload_runner(repo, r)
    assert any("died during iteration 2" in m for m in r2.resume_log)
    crash = r2.led.iterations[2]
    assert (crash["status"], crash["decision"]["rule"]) == ("crash", "interrupted")
    # a crash row never claims PASS: the interrupted candidate's correctness is not established
    assert crash["correctness"] == "-"
    # the interrupted candidate counts as tried: resuming does not run the step that killed the loop again
    assert crash["change"]["tried"] == [{"transform": "faster", "params": {}}]
    res = r2.run()
    assert calls["n"] == 1 and r2._transforms["faster"].applied == 1
    assert [x["status"] for x in table_rows(r2)] == ["keep", "keep", "crash"]
    assert res.stop_rule == "exhausted"
    assert_consistent(r2, repo)
    assert "# fake:faster" not in (r2.s.worktree / "vector_add.py").read_text()


def test_crash_after_record_needs_no_recovery(repo):
    def die(ctx):
        if ctx["iteration"] == 1:
            raise Death("after record")

    r = two_step_loop(repo, hooks={"after_record": die})
    with pytest.raises(Death):
        r.start()
    assert r.led.pending() is None and head(r.s.worktree) == r.led.kept_commit()
    r2 = reload_runner(repo, r)
    assert r2.resume_log == []
    r2.run()
    assert [x["status"] for x in table_rows(r2)] == ["keep"] * 3
    assert_consistent(r2, repo)


def test_an_ordinary_exception_is_a_crash_row_and_the_loop_goes_on(repo):
    def boom(ctx):
        if ctx["iteration"] == 1:
            raise RuntimeError("bug in a hook")

    r = two_step_loop(repo, hooks={"after_verify": boom})
    r.start()
    rows = table_rows(r)
    assert rows[1]["status"] == "crash" and "RuntimeError" in r.led.iterations[1]["decision"]["reason"]
    assert "Traceback" in r.led.iterations[1]["error"]
    assert_consistent(r, repo)


HARD_KILL = """
import os, sys
sys.path.insert(0, {tests!r})
from looptools import FakeTransform, make_loop, rec
from pathlib import Path

def die(ctx):
    if ctx["iteration"] == 2:
        os._exit(137)            # no cleanup at all: like kill -9

ts = {{"fast": FakeTransform("fast", "A"), "faster": FakeTransform("faster", "B")}}
r = make_loop(Path({repo!r}), {{"effects": {{"fast": 0.9, "faster": 0.9}}}},
              recs=[rec("A", "fast"), rec("B", "faster")], transforms=ts, hooks={{{point!r}: die}}, max_iterations=3)
r.start()
"""


@pytest.mark.parametrize("point", ["after_apply", "after_commit"])
def test_hard_kill_then_resume(repo, point):
    script = repo.parent / "run.py"
    script.write_text(HARD_KILL.format(tests=str(Path(__file__).parent), repo=str(repo), point=point))
    from looptools import checkout_state
    before = checkout_state(repo)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 137, p.stderr[-2000:]
    assert checkout_state(repo) == before            # the user's checkout: as it was
    from cutile_diag.loop.session import find_state_dir, load_session
    state = find_state_dir(f"{repo / 'vector_add.py'}::vector_add")
    wt = load_session(state)[0].worktree
    # the loop's worktree is wherever the process died: dirty (after apply) or a commit ahead (after commit)
    if point == "after_apply":
        assert dirty(wt) == ["vector_add.py"]
    else:
        assert dirty(wt) == [] and git(wt, "log", "-1", "--format=%s").startswith("cutile-perf vector_add iteration 2")
    ts = {"fast": FakeTransform("fast", "A"), "faster": FakeTransform("faster", "B")}
    from looptools import RankedDiagnoser

    class Stub:                       # reload_runner reads the diagnoser and transforms from a runner
        pass
    stub = Stub()
    stub.s = load_session(state)[0]
    stub.diagnoser = RankedDiagnoser([rec("A", "fast"), rec("B", "faster")])
    stub._transforms = ts
    stub.user_checkout = before
    r2 = reload_runner(repo, stub)
    kept1 = r2.led.iterations[1]["commits"]["kept"]
    assert head(wt) == kept1 and dirty(wt) == [] and untouched(repo, r2)
    assert r2.led.iterations[2]["status"] == "crash"
    res = r2.run()
    # kill -9 mid-step: the step is recorded as tried, so --resume does not retry it (no second kill)
    assert ts["faster"].applied == 0 and res.stop_rule == "exhausted"
    assert [x["status"] for x in table_rows(r2)] == ["keep", "keep", "crash"]
    assert_consistent(r2, repo)


def test_interrupted_baseline_is_measured_again(repo):
    r = two_step_loop(repo)
    real = r.backend.measure

    def die(*a, **k):
        raise Death("during the baseline")
    r.backend.measure = die
    with pytest.raises(Death):
        r.start()
    assert r.led.iterations == []
    r.backend.measure = real
    r2 = reload_runner(repo, r)
    r2.start()
    assert table_rows(r2)[0]["optimization"] == "baseline"
    assert_consistent(r2, repo)


def test_resume_refuses_foreign_changes(repo):
    from cutile_diag.loop.errors import GitError
    r = two_step_loop(repo)
    r.opt.max_iterations = 1
    r.start()
    (r.s.worktree / "README.md").write_text("someone else\n")
    with pytest.raises(GitError, match="uncommitted"):
        reload_runner(repo, r)
    git(r.s.worktree, "commit", "-qam", "a commit on the loop's branch")
    with pytest.raises(GitError, match="commits after the last kept one"):
        reload_runner(repo, r)
    assert untouched(repo, r)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_sigterm_kills_the_hung_child_and_resume_does_not_retry_it(repo, tmp_path):
    import json
    import signal
    import time
    spec = tmp_path / "sim.json"
    spec.write_text(json.dumps({"configs": {"1M": 0.012, "16M": 0.06}, "hang": ["latency_hints"]}))
    ref = f"{repo / 'vector_add.py'}::vector_add"
    argv = [sys.executable, "-m", "cutile_diag", "optimize", ref, "--simulate", str(spec), "--no-capture",
            "--only", "E", "--max-sweep", "1", "--rounds", "1", "--budget", "300"]
    p = subprocess.Popen(argv, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sleeper, t0 = None, time.monotonic()
        while sleeper is None and time.monotonic() - t0 < 90 and p.poll() is None:
            sleeper = next((c for c, cmd in children(p.pid).items() if "time.sleep(3600)" in cmd), None)
            time.sleep(0.1)
        assert sleeper is not None, p.communicate(timeout=5)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143 and "terminated (SIGTERM)" in err and "Traceback" not in err
    assert not _alive(sleeper)                               # the hung child went with the loop
    from cutile_diag.ledger import Ledger
    from cutile_diag.loop.session import find_state_dir
    led = Ledger.load(find_state_dir(ref))
    wt = Path(led.setup["worktree"])
    # like Ctrl-C: the loop's worktree is on the last kept commit, the iteration pending for --resume;
    # the user's checkout was never touched
    assert head(wt) == led.kept_commit() and dirty(wt) == [] and led.pending()["iteration"] == 1
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main" and dirty(repo) == []
    # --resume records the crash (verified before the hang, but a crash row shows '-') and moves on to the next setting, which
    # hangs too (every latency_hints change does here) and is killed at the new budget; two crashes: stop
    res = subprocess.run([sys.executable, "-m", "cutile_diag", "optimize", "--resume", ref, "--budget", "3",
                          "--json"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [(r["status"], r["correctness"]) for r in doc["rows"]] == [("keep", "not checked (simulated)"),
                                                                      ("crash", "-"), ("crash", "-")]
    assert doc["stop_rule"] == "no-improvement" and dirty(wt) == [] and dirty(repo) == []
    first, second = (it["change"]["tried"] for it in Ledger.load(find_state_dir(ref)).iterations[1:])
    assert first[0]["params"] == {} and second[0]["params"] != {}      # the interrupted step was not retried


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_kill_9_takes_the_hung_child_along(repo, tmp_path):
    import json
    import signal
    import time
    spec = tmp_path / "sim.json"
    spec.write_text(json.dumps({"configs": {"1M": 0.012}, "hang": ["latency_hints"]}))
    ref = f"{repo / 'vector_add.py'}::vector_add"
    p = subprocess.Popen([sys.executable, "-m", "cutile_diag", "optimize", ref, "--simulate", str(spec),
                          "--no-capture", "--only", "E", "--max-sweep", "1", "--rounds", "1", "--budget", "300"],
                         cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sleeper, t0 = None, time.monotonic()
        while sleeper is None and time.monotonic() - t0 < 90 and p.poll() is None:
            sleeper = next((c for c, cmd in children(p.pid).items() if "time.sleep(3600)" in cmd), None)
            time.sleep(0.1)
        assert sleeper is not None
        p.send_signal(signal.SIGKILL)           # no handler runs: only the kernel's parent-death signal
        p.wait(timeout=30)
        t0 = time.monotonic()
        while _alive(sleeper) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        assert not _alive(sleeper)
    finally:
        if p.poll() is None:
            p.kill()
