"""The TileGym-style backend: --test-cmd decides correctness, --bench-cmd prints records."""
import sys

import pytest

from looptools import FakeTransform, RankedDiagnoser, dirty, git, rec, table_rows

CHECK = """
import sys
src = open("vector_add.py").read()
print("tests/test_vector_add.py::test_op[cutile] " + ("FAILED" if "WRONG" in src else "PASSED"))
print("1 failed in 0.1s" if "WRONG" in src else "1 passed in 0.1s")
sys.exit(1 if "WRONG" in src else 0)
"""

BENCH = """
import time
src = open("vector_add.py").read()
if "HANG" in src:
    time.sleep(600)
f = 0.001 if "MAGIC" in src else 0.8 if "FAST" in src else 1.0
for shape, base in (("1M", 0.05), ("16M", 0.4)):
    m = base * f
    print(f"tests/test_vector_add.py::Test_VA::test_perf[{shape}-float32-cutile] ")
    print("Cutile: {'forward': {'mean': %r, 'std': %r, 'rel_std': 0.2, 'median': %r, 'min': %r, 'max': %r, "
          "'nrep': 50, 'peak_mem_mb': 12}} ms" % (m, m * 0.002, m, m * 0.99, m * 1.01))
    print("PASSED")
    print(f"tests/test_vector_add.py::Test_VA::test_perf[{shape}-float32-torch] Torch: {{'forward': {{'median': 9.9}}}} ms PASSED")
"""


@pytest.fixture
def cmd_repo(repo):
    (repo / "check.py").write_text(CHECK)
    (repo / "bench.py").write_text(BENCH)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "harness")
    return repo


def make(repo, transforms, recs, counts=None, **opts):
    from cutile_diag.loop.backends import CommandBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    cb = CommandBackend(f"{sys.executable} check.py", f"{sys.executable} bench.py", counts=counts)
    options = LoopOptions(capture=False, rounds=2, **opts)
    s, led = create_session(f"{repo / 'vector_add.py'}::vector_add", backend=cb.describe(), options=options.to_json())
    cb.log_dir = s.state_dir / "logs"
    return Runner(s, cb, led, diagnoser=RankedDiagnoser(recs), transforms=transforms, options=options)


def test_command_backend_loop(cmd_repo):
    ts = {"FAST": FakeTransform("FAST", "A"), "WRONG": FakeTransform("WRONG", "B")}
    r = make(cmd_repo, ts, [rec("A", "FAST"), rec("B", "WRONG")], max_iterations=2)
    r.start()
    base, fast, wrong = r.led.iterations
    assert sorted(base["configs"]) == ["tests/test_vector_add.py::Test_VA::test_perf[16M-float32-cutile]",
                                       "tests/test_vector_add.py::Test_VA::test_perf[1M-float32-cutile]"]
    assert base["latency_ms"] == pytest.approx((0.05 * 0.4) ** 0.5)
    # interleaved A/B runs really ran the two versions: the baseline's files were swapped in for its runs
    for c in fast["comparison"]["configs"]:
        assert c["ratio"] == pytest.approx(0.8)
        assert [run["record"]["nrep"] for run in c["baseline_runs"]] == [50, 50]
    assert (fast["status"], fast["decision"]["rule"]) == ("keep", "keep-baseline")
    assert (wrong["status"], wrong["correctness"]) == ("revert", "FAIL")
    assert "1 failed" in wrong["verification"]["summary"]
    assert dirty(r.s.worktree) == [] and "FAST" in (r.s.worktree / "vector_add.py").read_text()
    assert dirty(cmd_repo) == [] and "FAST" not in (cmd_repo / "vector_add.py").read_text()
    # the commands ran the worktree's code: every check's Python processes loaded the worktree's kernel file
    assert fast["verification"]["imports"]["kernel_file_loaded"] is None      # check.py reads, never imports it
    assert [x["status"] for x in table_rows(r)] == ["keep", "keep", "revert"]
    assert (r.s.state_dir / "logs").is_dir()


def test_command_backend_hang_is_killed(cmd_repo):
    ts = {"hang": FakeTransform("hang", "A")}
    ts["hang"]._marker = lambda params: "# HANG"
    r = make(cmd_repo, ts, [rec("A", "hang")], max_iterations=1, iteration_budget_s=3)
    r.baseline()
    from cutile_diag.loop.budget import min_budget_s
    r.opt.iteration_budget_s = max(3, min_budget_s(r.costs()))    # the smallest budget the loop takes
    r.run()
    it = r.led.iterations[1]
    assert it["status"] == "crash" and "killed" in it["decision"]["reason"] and dirty(r.s.worktree) == []


def test_test_command_selecting_nothing_is_an_error(cmd_repo):
    from cutile_diag.loop.backends import CommandBackend, Version, Workspace
    from cutile_diag.loop.errors import BackendError
    from cutile_diag.loop.proc import Deadline
    cb = CommandBackend(f"{sys.executable} -c 'import sys; sys.exit(5)'", "true")
    ws = Workspace(cmd_repo, cmd_repo / "cutile-diag-out", ["vector_add.py"])
    with pytest.raises(BackendError, match="selected no tests"):
        cb.verify(Version("baseline", ws.current()), ws, Deadline(30))


def test_a_bad_test_command_leaves_nothing_behind(cmd_repo, capsys):
    from cutile_diag.cli import main
    ref = f"{cmd_repo / 'vector_add.py'}::vector_add"
    bench = f"{sys.executable} bench.py"
    state = cmd_repo / "cutile-diag-out" / "optimize" / "vector_add"
    # a program that does not exist: refused before any branch or ledger
    rc = main(["optimize", ref, "--test-cmd", "no-such-prog-xyz -k x", "--bench-cmd", bench, "--no-capture"])
    err = capsys.readouterr().err
    assert rc == 2 and "'no-such-prog-xyz' is not a command here" in err and "Traceback" not in err
    assert git(cmd_repo, "branch", "--show-current") == "main" and not (state / "ledger.jsonl").exists()
    # a command that runs but fails on the unchanged kernel: the baseline fails, the loop is undone
    rc = main(["optimize", ref, "--test-cmd", f"{sys.executable} -c 'import sys; sys.exit(1)'",
               "--bench-cmd", bench, "--no-capture"])
    err = capsys.readouterr().err
    assert rc == 2 and "unchanged kernel fails its correctness check" in err and "nothing was kept" in err
    assert git(cmd_repo, "branch", "--show-current") == "main"
    assert "cutile-perf" not in git(cmd_repo, "branch") and not (state / "ledger.jsonl").exists()
    assert (state / "logs").is_dir()                        # the failing command's output is kept
    # so the fixed command simply starts the loop (no "a loop already exists")
    rc = main(["optimize", ref, "--test-cmd", f"{sys.executable} check.py", "--bench-cmd", bench, "--no-capture",
               "--rounds", "1", "--max-iterations", "1", "--only", "Z", "--json"])
    assert rc == 0, capsys.readouterr().err


def test_resume_takes_new_commands_after_a_failed_baseline(cmd_repo, capsys):
    import json
    from cutile_diag.cli import main
    from cutile_diag.loop.backends import CommandBackend
    from cutile_diag.loop.errors import LoopError
    from cutile_diag.ledger import Ledger
    from cutile_diag.loop.manual import status
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    # a loop whose baseline failed and whose ledger stays (e.g. a loop that was resumed)
    cb = CommandBackend(f"{sys.executable} -c 'import sys; sys.exit(1)'", f"{sys.executable} bench.py")
    opts = LoopOptions(capture=False, rounds=1, max_iterations=1)
    s, led = create_session(f"{cmd_repo / 'vector_add.py'}::vector_add", backend=cb.describe(),
                            options=opts.to_json())
    with pytest.raises(LoopError, match="fails its correctness check"):
        Runner(s, cb, led, diagnoser=RankedDiagnoser([]), transforms={}, options=opts).start()
    st = status(s, Ledger.load(s.state_dir))
    assert st.pending is None and st.last_stop["rule"] == "baseline-failed"
    assert st.hint.startswith("the baseline failed") and "--test-cmd" in st.hint
    ref = f"{cmd_repo / 'vector_add.py'}::vector_add"
    rc = main(["loop", "status", ref])
    out = capsys.readouterr().out
    assert rc == 0 and "interrupted" not in out and "baseline failed" in out
    # --resume with a corrected test command: taken, and on the record
    rc = main(["optimize", "--resume", ref, "--test-cmd", f"{sys.executable} check.py", "--only", "Z", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert json.loads(out)["rows"][0]["optimization"] == "baseline"
    led = Ledger.load(s.state_dir)
    (changed,) = led.of_type("backend")
    assert changed["backend"]["test_cmd"] == f"{sys.executable} check.py"
    assert led.iterations[0]["verification"]["passed"]


def test_counts_give_command_loops_the_roofline_guard(cmd_repo, capsys):
    from cutile_diag.loop.factory import counts_spec
    # 12 MB in 0.05 ms and 192 MB in 0.4 ms: plausible; MAGIC makes them 1000x faster: above any roof
    counts = counts_spec(["16M=1e6"], ["1M=12582912", "16M=201326592"], "f32:cuda", "h200")
    ts = {"MAGIC": FakeTransform("MAGIC", "A"), "FAST": FakeTransform("FAST", "B")}
    r = make(cmd_repo, ts, [rec("A", "MAGIC"), rec("B", "FAST")], counts=counts, max_iterations=2)
    r.start()
    base, magic, fast = r.led.iterations
    assert base["roofline_guard"]["ran"] and len(base["roofline_guard"]["checked"]) == 2
    assert {c["recipe_class"] for c in base["classification"].values()} == {"memory-bound"}
    assert (magic["status"], magic["decision"]["rule"]) == ("revert", "above-roof")
    assert (fast["status"], fast["decision"]["rule"]) == ("keep", "keep-baseline")
    assert all(p["valid"] for p in fast["roofline"].values())


def test_without_counts_the_ledger_and_output_say_the_guard_did_not_run(cmd_repo, capsys):
    from cutile_diag.cli import main
    from cutile_diag.ledger import Ledger
    ref = f"{cmd_repo / 'vector_add.py'}::vector_add"
    rc = main(["optimize", ref, "--test-cmd", f"{sys.executable} check.py", "--bench-cmd",
               f"{sys.executable} bench.py", "--no-capture", "--rounds", "1", "--only", "Z"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "roofline guard not run" in out and "--flops/--bytes" in out
    assert "roofline guard NOT run" in err
    base = Ledger.load(cmd_repo / "cutile-diag-out" / "optimize" / "vector_add").iterations[0]
    assert base["roofline_guard"]["ran"] is False and "could not run" in base["roofline_guard"]["why"]
    # counts need --test-cmd/--bench-cmd, numbers, and a compute roof for FLOPs
    for argv, msg in ((["--simulate", "x.json", "--bytes", "a=1"], "go with --test-cmd"),
                      (["--test-cmd", "true", "--bench-cmd", "true", "--bytes", "a=-1"], "must look like CONFIG=N"),
                      (["--test-cmd", "true", "--bench-cmd", "true", "--flops", "a=1"], "--flops needs --unit")):
        rc = main(["optimize", ref, *argv])
        assert rc == 2 and msg in capsys.readouterr().err
