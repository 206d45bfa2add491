"""The loop never touches the user's checkout: it works in its own git worktree, whatever
happens to it (revert, crash, SIGTERM, kill -9), and its measurements run the worktree's code."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cutile_diag.cli import main
from looptools import (WORKLOAD_FILE, FakeTransform, RankedDiagnoser, checkout_state, children, dirty, git, head,
                       make_loop, rec, reload_runner, table_rows, untouched)

USER_EDIT = "# the user's uncommitted work\n"


def user_edits(repo: Path) -> None:
    """What a person does in their checkout while a loop runs: edit the kernel, leave an
    editor's swap file, let a tool write an untracked file."""
    k = repo / "vector_add.py"
    k.write_text(k.read_text() + USER_EDIT)
    (repo / ".vector_add.py.swp").write_bytes(b"\x00swap")
    (repo / "tests" / "out.log").write_text("written by a bench\n")


def assert_user_edits(repo: Path, state: dict) -> None:
    assert (repo / "vector_add.py").read_text().endswith(USER_EDIT)
    assert (repo / ".vector_add.py.swp").read_bytes() == b"\x00swap"
    assert (repo / "tests" / "out.log").read_text() == "written by a bench\n"
    assert checkout_state(repo) == state


def test_a_full_loop_leaves_the_checkout_alone_and_the_result_on_its_branch(repo):
    ts = {"fast": FakeTransform("fast", "A"), "wrong": FakeTransform("wrong", "B")}
    r = make_loop(repo, {"effects": {"fast": 0.9}, "incorrect": ["wrong"]}, recs=[rec("A", "fast"), rec("B", "wrong")],
                  transforms=ts, max_iterations=2)
    res = r.start()
    assert [x["status"] for x in table_rows(r)] == ["keep", "keep", "revert"]
    assert untouched(repo, r) and git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    # the kept result is the loop branch's tip; the worktree sits in the git folder, not the user's tree
    assert git(repo, "rev-parse", r.s.branch) == res.kept_commit == head(r.s.worktree)
    assert "# fake:fast" in git(repo, "show", f"{r.s.branch}:vector_add.py")
    assert Path(git(repo, "rev-parse", "--git-common-dir")).resolve() in Path(r.s.worktree).parents or \
        (repo / ".git").resolve() in Path(r.s.worktree).parents
    # in the user's tree there is only the loop's state folder (git-ignored through .git/info/exclude)
    extra = git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored").splitlines()
    assert extra and all(ln.startswith("!! cutile-diag-out/optimize/vector_add/") for ln in extra)


@pytest.mark.parametrize("how", ["revert", "crash"])
def test_an_edit_in_the_checkout_during_an_iteration_survives(repo, how):
    state = {}

    def meddle(ctx):
        if ctx["iteration"] == 1:
            user_edits(repo)
            state["s"] = checkout_state(repo)
            if how == "crash":
                raise RuntimeError("a bug mid-iteration")

    ts = {"wrong": FakeTransform("wrong", "A")}
    r = make_loop(repo, {"incorrect": ["wrong"]}, recs=[rec("A", "wrong")], transforms=ts, max_iterations=1,
                  hooks={"after_apply": meddle})
    r.start()
    assert r.led.iterations[1]["status"] == ("revert" if how == "revert" else "crash")
    assert_user_edits(repo, state["s"])
    assert dirty(r.s.worktree) == [] and head(r.s.worktree) == r.s.start_commit


HARD_KILL = """
import os, sys
sys.path.insert(0, {tests!r})
from looptools import FakeTransform, make_loop, rec
from pathlib import Path
repo = Path({repo!r})

def die(ctx):
    if ctx["iteration"] == 1:
        k = repo / "vector_add.py"
        k.write_text(k.read_text() + {edit!r})
        (repo / "notes.txt").write_text("mine\\n")
        os._exit(137)            # no cleanup at all: like kill -9

ts = {{"fast": FakeTransform("fast", "A")}}
r = make_loop(repo, {{"effects": {{"fast": 0.9}}}}, recs=[rec("A", "fast")], transforms=ts,
              hooks={{"after_apply": die}}, max_iterations=2)
r.start()
"""


def test_kill_9_then_recover_and_resume_touch_only_the_worktree(repo, capsys):
    script = repo.parent / "run.py"
    script.write_text(HARD_KILL.format(tests=str(Path(__file__).parent), repo=str(repo), edit=USER_EDIT))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 137, p.stderr[-2000:]
    state = checkout_state(repo)
    assert sorted(state["status"]) == ["notes.txt", "vector_add.py"] and state["branch"] == "main"
    from cutile_diag.loop.session import find_state_dir, load_session
    ref = f"{repo / 'vector_add.py'}::vector_add"
    s, led = load_session(find_state_dir(ref))
    assert dirty(s.worktree) == ["vector_add.py"] and led.pending()["iteration"] == 1
    # the candidate was saved before the iteration could fail: what recover promises exists
    saved = Path(led.pending()["saved"])
    assert "# fake:fast" in (saved / "vector_add.py").read_text()
    # `loop recover` from the user's branch, with their uncommitted work: only the worktree is reset
    assert main(["loop", "recover", ref]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "died during iteration 1" in out and "your checkout was not touched" in out and str(saved) in out
    assert checkout_state(repo) == state and dirty(s.worktree) == []
    # nothing left to recover: it changes nothing and says why
    assert main(["loop", "recover", ref]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "nothing to recover" in out and "your checkout is never changed" in out
    assert checkout_state(repo) == state
    # --resume continues in the worktree (the user's dirty checkout is no obstacle and stays as it is)
    stub = type("Stub", (), {})()
    stub.s = s
    stub.diagnoser = RankedDiagnoser([rec("A", "fast")])
    stub._transforms = {"fast": FakeTransform("fast", "A")}
    stub.user_checkout = state
    r2 = reload_runner(repo, stub)
    res = r2.run()
    assert [x["status"] for x in table_rows(r2)] == ["keep", "crash"] and res.stop_rule == "exhausted"
    assert untouched(repo, r2) and head(s.worktree) == r2.led.kept_commit() and dirty(s.worktree) == []


def test_kill_9_then_resume_redoes_the_step_in_the_worktree(repo):
    # a kill right after the candidate was committed: --resume resets the worktree's branch, not the user's
    r = make_loop(repo, {"effects": {"fast": 0.9, "faster": 0.9}}, recs=[rec("A", "fast"), rec("B", "faster")],
                  transforms={"fast": FakeTransform("fast", "A"), "faster": FakeTransform("faster", "B")},
                  max_iterations=3)
    r.start()
    assert untouched(repo, r)
    kept = r.led.kept_commit()
    # simulate the state a kill -9 after a commit leaves: a begin, a commit ahead on the loop branch
    r.led.append({"type": "begin", "iteration": 3, "base_commit": kept, "entry": {"id": "C", "transform": "x"},
                  "tried": [{"transform": "x", "params": {}}]})
    (r.s.worktree / "vector_add.py").write_text("# half written\n")
    git(r.s.worktree, "commit", "-qam", "cutile-perf vector_add iteration 3: x")
    r2 = reload_runner(repo, r)
    assert any("died during iteration 3" in m for m in r2.resume_log)
    assert head(r.s.worktree) == kept and dirty(r.s.worktree) == [] and untouched(repo, r)


def test_recover_refuses_a_branch_checked_out_in_the_users_checkout(repo, capsys):
    r = make_loop(repo, {"effects": {"fast": 0.9}}, recs=[rec("A", "fast")],
                  transforms={"fast": FakeTransform("fast", "A")}, max_iterations=1)
    r.start()
    r.led.append({"type": "begin", "iteration": 2, "base_commit": r.led.kept_commit(), "entry": None})
    # the worktree is gone and the person checked the loop's branch out in their own checkout, with work in it
    git(repo, "worktree", "remove", "--force", str(r.s.worktree))
    git(repo, "checkout", "-q", r.s.branch)
    (repo / "vector_add.py").write_text((repo / "vector_add.py").read_text() + USER_EDIT)
    state = checkout_state(repo)
    ref = f"{repo / 'vector_add.py'}::vector_add"
    for argv in (["loop", "recover", ref], ["optimize", "--resume", ref]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("cutile-diag: error: the loop's branch")
        assert f"is checked out in {repo}" in err and "never in your checkout" in err
        assert checkout_state(repo) == state


def test_out_inside_a_tracked_folder_is_refused(repo, tmp_path, capsys):
    spec = tmp_path / "sim.json"
    spec.write_text(json.dumps({"configs": {"1M": 0.012}}))
    state = checkout_state(repo)
    rc = main(["optimize", f"{repo / 'vector_add.py'}::vector_add", "--simulate", str(spec), "--no-capture",
               "--out", str(repo / "tests")])
    err = capsys.readouterr().err
    assert rc == 2 and "--out tests: that folder holds tracked files" in err
    exclude = repo / ".git" / "info" / "exclude"
    assert checkout_state(repo) == state and "/tests/" not in (exclude.read_text() if exclude.exists() else "")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_an_edit_in_the_checkout_survives_sigterm_and_kill_9(repo, tmp_path, sig):
    spec = tmp_path / "sim.json"
    spec.write_text(json.dumps({"configs": {"1M": 0.012}, "hang": ["latency_hints"]}))
    ref = f"{repo / 'vector_add.py'}::vector_add"
    p = subprocess.Popen([sys.executable, "-m", "cutile_diag", "optimize", ref, "--simulate", str(spec),
                          "--no-capture", "--only", "E", "--max-sweep", "1", "--rounds", "1", "--budget", "300"],
                         cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        hung, t0 = False, time.monotonic()
        while not hung and time.monotonic() - t0 < 90 and p.poll() is None:
            hung = any("time.sleep(3600)" in c for c in children(p.pid).values())
            time.sleep(0.1)
        assert hung, p.communicate(timeout=5)
        user_edits(repo)                      # mid-iteration, in the user's checkout
        state = checkout_state(repo)
        p.send_signal(sig)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == (143 if sig == signal.SIGTERM else -9)
    assert_user_edits(repo, state)
    res = subprocess.run([sys.executable, "-m", "cutile_diag", "optimize", "--resume", ref, "--budget", "2",
                          "--max-iterations", "2", "--json"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in json.loads(res.stdout)["rows"]][:2] == ["keep", "crash"]
    assert_user_edits(repo, state)


# --- the measurements run the worktree's code ---------------------------------------------------

KERNEL_PRELUDE = "import os as _os\nopen(_os.environ['PROBE'], 'a').write(__file__ + '\\n')\n"

CHECK = """import sys
{pre}import pkg.kern
print("1 passed in 0.1s")
"""

BENCH = """import sys
{pre}import pkg.kern
m = 0.05
print("tests/test_k.py::test_perf[1M-cutile] ")
print("Cutile: {{'forward': {{'mean': %r, 'std': 0.0001, 'rel_std': 0.2, 'median': %r, 'min': %r, 'max': %r, "
      "'nrep': 50}}}} ms" % (m, m, m, m))
print("PASSED")
"""



@pytest.fixture
def pkg_repo(tmp_path, monkeypatch):
    """A src-layout package whose kernel module reports, on import, which file was imported;
    PYTHONPATH points at the checkout's src/ the way TileGym users run their tests."""
    from cutile_diag.examples import EXAMPLES_DIR
    repo = tmp_path / "pkgrepo"
    (repo / "src" / "pkg").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "src" / "pkg" / "__init__.py").write_text("")
    (repo / "src" / "pkg" / "kern.py").write_text(KERNEL_PRELUDE + (EXAMPLES_DIR / "vector_add.py").read_text())
    pin = f"sys.path.insert(0, {str(repo / 'src')!r})\n"
    for name, text in (("check.py", CHECK), ("bench.py", BENCH), ("bad_bench.py", BENCH)):
        (repo / name).write_text(text.format(pre=pin if name.startswith("bad") else ""))
    (repo / "wl.py").write_text(WORKLOAD_FILE.format(prelude="import pkg.kern"))
    (repo / "bad_wl.py").write_text(WORKLOAD_FILE.format(prelude=pin + "import pkg.kern"))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pkg")
    probe = tmp_path / "probe.txt"
    monkeypatch.setenv("PROBE", str(probe))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(repo / "src"), os.environ.get("PYTHONPATH", "")]))
    return repo, probe


def _command_loop(repo, bench="bench.py"):
    from cutile_diag.loop.backends import CommandBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    cb = CommandBackend(f"{sys.executable} check.py", f"{sys.executable} {bench}")
    o = LoopOptions(capture=False, rounds=1, max_iterations=1)
    s, led = create_session(f"{repo / 'src' / 'pkg' / 'kern.py'}::vector_add", backend=cb.describe(),
                            options=o.to_json())
    return Runner(s, cb, led, diagnoser=RankedDiagnoser([]), transforms={}, options=o)


def test_command_mode_runs_the_worktrees_code(pkg_repo):
    repo, probe = pkg_repo
    r = _command_loop(repo)
    r.start()
    base = r.led.iterations[0]
    wt_kernel = str((r.s.worktree / "src" / "pkg" / "kern.py").resolve())
    imported = set(probe.read_text().split())
    assert imported == {wt_kernel}                      # every check and bench process: the worktree's copy
    assert base["verification"]["imports"]["kernel_file_loaded"] == wt_kernel


def test_command_mode_refuses_code_from_the_checkout(pkg_repo):
    from cutile_diag.loop.errors import BackendError
    repo, probe = pkg_repo
    r = _command_loop(repo, bench="bad_bench.py")
    with pytest.raises(BackendError, match="imported the checkout's code instead of the loop's worktree") as e:
        r.start()
    assert f"pkg.kern from {(repo / 'src' / 'pkg' / 'kern.py').resolve()}" in e.value.one_line()
    assert "editable install" in e.value.one_line()


@pytest.mark.parametrize("wl,ok", [("wl.py", True), ("bad_wl.py", False)])
def test_workload_mode_runs_the_worktrees_code(pkg_repo, wl, ok):
    from cutile_diag.loop.backends import Version, WorkloadBackend, Workspace
    from cutile_diag.loop.errors import BackendError
    from cutile_diag.loop.proc import Deadline
    from cutile_diag.loop.setup import create_session
    repo, probe = pkg_repo
    # the setup record keeps the checkout's path of the workload file; the worker gets the worktree's
    spec = {"backend": "workload", "workload": f"{repo / wl}::W"}
    s, led = create_session(f"{repo / 'src' / 'pkg' / 'kern.py'}::vector_add", backend=spec, options={})
    ws = Workspace(s.worktree, s.state_dir, s.allowed, origin=s.root, kernel_file=s.kernel_file)
    b = WorkloadBackend(spec["workload"], log_dir=s.state_dir / "logs")
    wt_kernel = str((s.worktree / "src" / "pkg" / "kern.py").resolve())
    try:
        if ok:
            try:
                b.verify(Version("baseline", ws.current()), ws, Deadline(120))
            except BackendError as e:                    # no GPU here: the load still ran and reported
                assert "no CUDA GPU" in e.one_line()
            assert b.imports["kernel_file_loaded"] == wt_kernel
            assert set(probe.read_text().split()) == {wt_kernel}
        else:
            with pytest.raises(BackendError, match="imported the checkout's code"):
                b.verify(Version("baseline", ws.current()), ws, Deadline(120))
    finally:
        b.close()
