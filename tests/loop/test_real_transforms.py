"""A couple of iterations with the real libcst transforms, real AOT captures (tileiras, no GPU),
the diagnosis engine and the IR differ — the simulated GPU only supplies latencies."""
import shutil

import pytest

from cutile_diag.examples import EXAMPLES_DIR
from looptools import dirty, git, head

pytest.importorskip("cuda.tile")


def _tileiras() -> bool:
    from cutile_diag.toolchain import have_tool
    return have_tool("tileiras")


pytestmark = pytest.mark.skipif(not _tileiras(), reason="tileiras is not installed")


def _loop(repo, spec, **opts):
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    b = SimulatedBackend({"configs": {"16M": 0.06}, "noise": 0.003, "samples": 15, **spec})
    o = LoopOptions(rounds=2, max_sweep=1, **opts)
    s, led = create_session(f"{repo / 'vector_add.py'}::vector_add", backend=b.describe(), options=o.to_json())
    return Runner(s, b, led, options=o)


def test_latency_hints_iteration_with_capture_and_ir_diff(repo):
    """On vector_add, sm_90's code for the latency-hinted loads is the kept version's: the step
    is a no-op, reverted without timing; the IR diff still names the hints."""
    r = _loop(repo, {"effects": {"latency_hints": 0.9}}, only=["E"], max_iterations=1)
    r.start()
    base, it = r.led.iterations
    assert base["capture"]["ok"] and it["capture"]["ok"]
    assert it["diagnosis"]["source"] == "engine" and it["entry"]["id"] == "E"
    d = it["ir_diff"]
    assert d["equivalent"] is False and d["n_changes"] >= 2
    assert {c.get("knob") for c in d["changes"] if c["kind"] == "op_hint"} == {"latency"}
    assert (it["status"], it["decision"]["rule"]) == ("revert", "no-op") and "comparison" not in it
    assert "latency=" not in (repo / "vector_add.py").read_text() and dirty(repo) == []


def test_tile_size_iteration_kept_with_capture_and_ir_diff(repo):
    """G on vector_add changes its machine code (another tile): measured, kept, committed on the
    loop's branch; the user's checkout untouched."""
    r = _loop(repo, {"effects": {"tile_size_sweep": 0.9}}, only=["G"], max_iterations=1)
    res = r.start()
    base, it = r.led.iterations
    assert base["capture"]["ok"] and it["capture"]["ok"] and it["entry"]["id"] == "G"
    assert it["ir_diff"]["equivalent"] is False and it["ir_diff"]["n_changes"] >= 1
    wt = r.s.worktree
    assert it["status"] == "keep" and head(wt) == res.kept_commit and dirty(wt) == []
    assert git(wt, "show", "HEAD:vector_add.py") != (repo / "vector_add.py").read_text() and dirty(repo) == []


def test_gather_to_load_on_gather_scale(tmp_path):
    repo = tmp_path / "g"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shutil.copy(EXAMPLES_DIR / "gather_scale.py", repo / "gather_scale.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    b = SimulatedBackend({"configs": {"16M": 0.2}, "effects": {"gather_to_load": 0.3}, "samples": 15})
    o = LoopOptions(rounds=2, max_sweep=1, only=["A"], max_iterations=1)
    s, led = create_session(f"{repo / 'gather_scale.py'}::gather_scale", backend=b.describe(), options=o.to_json())
    r = Runner(s, b, led, options=o)
    r.start()
    it = r.led.iterations[1]
    assert it["entry"]["transform"] == "gather_to_load" and it["status"] == "keep"
    kinds = {c["kind"] for c in it["ir_diff"]["changes"]}
    assert it["ir_diff"]["equivalent"] is False and kinds, it["ir_diff"]
    assert "ct.gather" not in (s.worktree / "gather_scale.py").read_text().split("def gather_scale")[1].split("CAPTURE_SPECS")[0]
