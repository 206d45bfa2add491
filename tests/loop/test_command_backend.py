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
f = 0.8 if "FAST" in src else 1.0
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


def make(repo, transforms, recs, **opts):
    from cutile_diag.loop.backends import CommandBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    cb = CommandBackend(f"{sys.executable} check.py", f"{sys.executable} bench.py")
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
    assert dirty(cmd_repo) == [] and "FAST" in (cmd_repo / "vector_add.py").read_text()
    assert [x["status"] for x in table_rows(r)] == ["keep", "keep", "revert"]
    assert (r.s.state_dir / "logs").is_dir()


def test_command_backend_hang_is_killed(cmd_repo):
    ts = {"hang": FakeTransform("hang", "A")}
    ts["hang"]._marker = lambda params: "# HANG"
    r = make(cmd_repo, ts, [rec("A", "hang")], max_iterations=1, iteration_budget_s=3)
    r.start()
    it = r.led.iterations[1]
    assert it["status"] == "crash" and "killed" in it["decision"]["reason"] and dirty(cmd_repo) == []


def test_test_command_selecting_nothing_is_an_error(cmd_repo):
    from cutile_diag.loop.backends import CommandBackend, Version, Workspace
    from cutile_diag.loop.errors import BackendError
    from cutile_diag.loop.proc import Deadline
    cb = CommandBackend(f"{sys.executable} -c 'import sys; sys.exit(5)'", "true")
    ws = Workspace(cmd_repo, cmd_repo / "cutile-diag-out", ["vector_add.py"])
    with pytest.raises(BackendError, match="selected no tests"):
        cb.verify(Version("baseline", ws.current()), ws, Deadline(30))
