"""loop next / record / status / recover: the steps a person or an agent makes by hand."""
import re

import pytest

from looptools import RankedDiagnoser, dirty, git, head, make_loop, rec, table_rows, untouched

SPEC = {"effects": {"marker:PLANTED_FAST": 0.8, "marker:PLANTED_SLOWER": 1.2}, "incorrect": ["marker:PLANTED_WRONG"]}


@pytest.fixture
def started(repo):
    r = make_loop(repo, SPEC)
    r.baseline()
    return r


def edit(wt, marker):
    """A person's edit, made where manual steps happen: the loop's worktree."""
    f = wt / "vector_add.py"
    f.write_text(f.read_text() + f"# {marker}\n")


def test_next_prints_a_recipe_for_this_kernel(started, repo):
    from cutile_diag.loop.manual import next_step
    d = RankedDiagnoser([rec("B", "", name="Persistent grid-stride scheduling", changes=["grid-stride loop"]),
                         rec("E", "latency_hints")])
    ns = next_step(started.s, started.led, diagnoser=d)
    assert ns.rec.id == "B" and not ns.automatic
    text = "\n".join(ns.recipe)
    assert "Kernel vector_add (vector_add.py:12)" in text and "launch()" in text
    assert "wrap its body" in text and "grid-stride loop" in text
    assert re.search(r"loop record( --out \S+)? --entry B\b", ns.command)
    assert started.led.of_type("next")[-1]["entry"]["id"] == "B"
    ns = next_step(started.s, started.led, diagnoser=d, entry="E")
    text = "\n".join(ns.recipe)
    # the loads and stores of this kernel, with their lines and missing hints
    assert "line 14: ct.load(a, index=(bid,), shape=(TILE,))  [no latency; outside loops]" in text
    assert "line 16: ct.store(c" in text and ns.automatic


def test_record_keeps_a_faster_manual_edit(started, repo):
    from cutile_diag.loop.manual import next_step, record_manual
    next_step(started.s, started.led, diagnoser=RankedDiagnoser([rec("B", "", name="persistent")]))
    edit(started.s.worktree, "PLANTED_FAST")
    r = record_manual(started.s, started.led, started.backend, note="grid-stride loop by hand")
    assert (r["status"], r["correctness"], r["decision"]["rule"]) == ("keep", "not checked (simulated)", "keep-baseline")
    assert r["entry"]["id"] == "B" and r["optimization"] == "B manual: grid-stride loop by hand"
    assert head(started.s.worktree) == r["commits"]["kept"] != started.s.start_commit \
        and dirty(started.s.worktree) == [] and untouched(repo, started)
    assert "PLANTED_FAST" in git(started.s.worktree, "show", "HEAD:vector_add.py")


def test_next_does_not_propose_again_the_entry_just_kept(started, repo):
    """B applied by hand and kept as a clear win (not "tried": a win is not demoted) is done:
    `loop next` goes on to the untried entries instead of proposing B again; the automatic
    entry whose sweep still has settings left (E here, untouched) stays proposable."""
    from cutile_diag.loop.manual import next_step, record_manual
    d = RankedDiagnoser([rec("B", "", name="persistent"), rec("E", "latency_hints"), rec("L", "", name="custom")])
    assert next_step(started.s, started.led, diagnoser=d).rec.id == "B"
    edit(started.s.worktree, "PLANTED_FAST")
    r = record_manual(started.s, started.led, started.backend, note="grid-stride loop by hand")
    assert (r["status"], r["decision"]["rule"]) == ("keep", "keep-baseline")
    ns = next_step(started.s, started.led, diagnoser=d)
    assert ns.rec.id == "E" and re.search(r"loop record( --out \S+)? --entry E\b", ns.command)


def test_record_reverts_a_wrong_manual_edit_and_saves_it(started, repo):
    from cutile_diag.loop.manual import record_manual
    edit(started.s.worktree, "PLANTED_WRONG")
    r = record_manual(started.s, started.led, started.backend, entry="L", note="risky rewrite")
    assert (r["status"], r["correctness"], r["latency_ms"]) == ("revert", "FAIL", None)
    assert "PLANTED_WRONG" not in (started.s.worktree / "vector_add.py").read_text() \
        and dirty(started.s.worktree) == [] and untouched(repo, started)
    saved = started.s.iteration_dir(1) / "vector_add.py"
    assert "PLANTED_WRONG" in saved.read_text()
    assert head(started.s.worktree) == started.s.start_commit
    assert table_rows(started)[1]["optimization"] == "L manual: risky rewrite"


def test_record_reverts_a_slower_manual_edit(started, repo):
    from cutile_diag.loop.manual import record_manual
    edit(started.s.worktree, "PLANTED_SLOWER")
    r = record_manual(started.s, started.led, started.backend)
    assert (r["status"], r["decision"]["rule"]) == ("revert", "regression")
    assert r["commits"]["candidate"] and head(started.s.worktree) == started.s.start_commit


def test_record_refuses_edits_to_tests_and_touches_nothing(started, repo):
    from cutile_diag.loop.errors import ForbiddenEditError
    from cutile_diag.loop.manual import record_manual
    edit(started.s.worktree, "PLANTED_FAST")
    (started.s.worktree / "tests" / "test_vector_add.py").write_text("def test_vector_add():\n    pass\n")
    n_records = len(started.led.records)
    with pytest.raises(ForbiddenEditError, match="tests/test_vector_add.py"):
        record_manual(started.s, started.led, started.backend)
    assert sorted(dirty(started.s.worktree)) == ["tests/test_vector_add.py", "vector_add.py"]     # the person's work is intact
    assert len(started.led.records) == n_records and ("verify", "iter-1") not in started.backend.calls


def test_record_with_nothing_changed(started):
    from cutile_diag.loop.errors import LoopError
    from cutile_diag.loop.manual import record_manual
    with pytest.raises(LoopError, match="nothing to record"):
        record_manual(started.s, started.led, started.backend)


def test_status_and_recover(started, repo):
    from cutile_diag.loop.manual import status
    from cutile_diag.loop.runner import recover
    st = status(started.s, started.led)
    assert st.on_branch and st.pending is None and [r["iteration"] for r in st.rows] == [0]
    assert "optimize --resume" in st.hint
    edit(started.s.worktree, "PLANTED_FAST")
    assert "loop record" in status(started.s, started.led).hint
    # an interrupted iteration: pending until recovered
    started.led.append({"type": "begin", "iteration": 1, "base_commit": started.s.start_commit,
                        "entry": {"id": "B", "transform": None}})
    st = status(started.s, started.led)
    assert st.pending["iteration"] == 1 and "recover" in st.hint
    msg = recover(started.s, started.led)
    assert "died during iteration 1" in msg and "your checkout was not touched" in msg
    # the edit in progress is saved before the worktree is reset; no candidate copy is promised (none was written)
    rescued = started.s.iteration_dir(1) / "worktree-at-recovery" / "vector_add.py"
    assert "PLANTED_FAST" in rescued.read_text() and str(rescued.parent) in msg
    assert "candidate's files are saved" not in msg
    assert dirty(started.s.worktree) == [] and untouched(repo, started) and table_rows(started)[1]["status"] == "crash"
    assert recover(started.s, started.led) is None


def test_record_applies_the_stop_rules_and_the_cap(repo):
    from cutile_diag.loop.errors import LoopError
    from cutile_diag.loop.manual import record_manual
    from cutile_diag.loop.runner import LoopOptions
    r = make_loop(repo, {**SPEC, "effects": {**SPEC["effects"], "marker:PLANTED_TINY": 0.995}}, max_iterations=2)
    r.baseline()
    edit(r.s.worktree, "PLANTED_TINY")
    rec1 = record_manual(r.s, r.led, r.backend)
    # < 2 %: kept, and the stop rule the automatic loop applies is recorded for the manual step too
    assert (rec1["status"], rec1["decision"]["rule"]) == ("keep", "keep-stop")
    assert rec1["stop"]["rule"] == "below-threshold" and r.led.last_stop()["rule"] == "below-threshold"
    edit(r.s.worktree, "PLANTED_FAST")
    rec2 = record_manual(r.s, r.led, r.backend)        # a hand-over stop does not block a person's step
    assert rec2["status"] == "keep" and r.led.last_stop()["rule"] == "max-iterations"
    # the iteration cap does
    edit(r.s.worktree, "PLANTED_SLOWER")
    with pytest.raises(LoopError, match="iteration cap is reached") as e:
        record_manual(r.s, r.led, r.backend)
    assert "--max-iterations" in e.value.one_line() and len(r.led.iterations) == 3
    rec3 = record_manual(r.s, r.led, r.backend, options=LoopOptions.from_json(r.s.options, max_iterations=3))
    assert rec3["iteration"] == 3


def test_next_says_why_an_automatic_entry_is_manual_here(repo):
    # an autotuned wrapper sets every hint through its hints_fn: a decorator edit (C) would be a no-op
    from cutile_diag.loop.manual import next_step
    f = repo / "vector_add.py"
    f.write_text(f.read_text() + "\n\ndef tuned(a, b, c, stream, space):\n"
                 "    from cuda.tile.tune import exhaustive_search\n"
                 "    exhaustive_search(space, stream, lambda cfg: (1,), vector_add, lambda cfg: (a, b, c, 1024),\n"
                 "                      lambda cfg: cfg.hints)\n")
    git(repo, "commit", "-qam", "autotuned wrapper")
    r = make_loop(repo, SPEC)
    r.baseline()
    ns = next_step(r.s, r.led, diagnoser=RankedDiagnoser([rec("C", "kernel_hints")]))
    assert ns.rec.id == "C" and not ns.automatic
    assert any("overrides" in w and "no-op" in w for w in ns.not_automatic)
    text = "\n".join(ns.recipe)
    assert "already autotuned (exhaustive_search in tuned()" in text and "widen the search space" in text
    assert re.search(r"loop record( --out \S+)? --entry C\b", ns.command)


@pytest.fixture
def started_with_capture(repo):
    """A loop whose baseline was captured ahead of time (real cuTile AOT of the example kernel)."""
    r = make_loop(repo, SPEC, capture=True)
    r.baseline()
    assert r.capture_off_reason is None
    return r


def test_record_checks_the_edit_before_measuring(started_with_capture, repo):
    """A broken edit fails with the compiler's message, nothing timed, the edit left in the tree;
    an edit that leaves the IR unchanged is reported as a no-op."""
    from cutile_diag.loop.errors import LoopError
    from cutile_diag.loop.manual import record_manual
    r = started_with_capture
    f = r.s.worktree / "vector_add.py"
    good = f.read_text()
    broken = good.replace("tile=ta + tb)", "tile=ta + tb[None, :])", 1)
    f.write_text(broken)
    calls = len(r.backend.calls)
    with pytest.raises(LoopError, match="fails its compile check") as e:
        record_manual(r.s, r.led, r.backend, note="broken")
    assert "rank" in str(e.value)                       # the compiler's own message
    assert "still in the loop's worktree" in e.value.hint
    assert len(r.backend.calls) == calls                 # nothing verified or timed
    assert f.read_text() == broken and len(r.led.iterations) == 1 and r.led.pending() is None
    assert untouched(repo, r)
    f.write_text(good + "# just a comment\n")
    with pytest.raises(LoopError, match="no-op edit"):
        record_manual(r.s, r.led, r.backend)
    assert len(r.backend.calls) == calls and len(r.led.iterations) == 1
    rec_ = record_manual(r.s, r.led, r.backend, allow_noop=True, note="comment")
    assert rec_["ir_diff"]["equivalent"] is True and rec_["iteration"] == 1


def test_a_hint_the_compiler_ignores_is_refused_as_a_no_op(started_with_capture, repo):
    """occupancy=1 on vector_add changes its TileIR but not its SASS or resources: refused before
    any timing; --allow-noop measures it (and the decision does not credit it)."""
    from cutile_diag.loop.errors import LoopError
    from cutile_diag.loop.manual import record_manual
    r = started_with_capture
    f = r.s.worktree / "vector_add.py"
    f.write_text(f.read_text().replace("@ct.kernel\ndef vector_add(", "@ct.kernel(occupancy=1)\ndef vector_add(", 1))
    calls = len(r.backend.calls)
    with pytest.raises(LoopError, match=r"no-op edit: the candidate's machine code \(SASS and resources\)"):
        record_manual(r.s, r.led, r.backend)
    assert len(r.backend.calls) == calls and len(r.led.iterations) == 1
    lines = []
    rec_ = record_manual(r.s, r.led, r.backend, allow_noop=True, note="occupancy=1", echo=lines.append)
    assert any("machine code is unchanged (--allow-noop: measuring)" in ln for ln in lines)
    assert "comparison" in rec_ and rec_["decision"]["rule"] == "no-op" and rec_["status"] == "revert"


def test_a_change_of_the_launch_alone_is_measured_not_refused_as_a_no_op(started_with_capture, repo):
    """The kernel file holds its launch wrapper too: a change there (here the tile the wrapper
    launches with) leaves the spec-captured TileIR equal but is a change; a comment is not."""
    from cutile_diag.loop.errors import LoopError
    from cutile_diag.loop.manual import record_manual
    r = started_with_capture
    f = r.s.worktree / "vector_add.py"
    good = f.read_text()
    f.write_text(good.replace("def launch(", "# the host wrapper\ndef launch("))
    with pytest.raises(LoopError, match="no-op edit: the candidate's TileIR and cubin equal the kept version's, "
                                        "and nothing outside the kernel changed"):
        record_manual(r.s, r.led, r.backend)
    f.write_text(good.replace("tile: int = 1024", "tile: int = 2048"))
    lines = []
    rec_ = record_manual(r.s, r.led, r.backend, note="wrapper tile 2048", echo=lines.append)
    assert rec_["ir_diff"]["equivalent"] is True and rec_["decision"]["rule"] != "no-op"
    assert any("its launch or launch wrapper changed: measuring" in ln for ln in lines)
