"""The loop end to end on the simulated backend in a temporary git repository: every decision
rule, planted wrong changes always reverted, the stop rules, the guard rail."""
import time

import pytest

from looptools import FakeTransform, RankedDiagnoser, dirty, git, head, make_loop, rec, table_rows, untouched

KERNEL = "vector_add.py"


def kernel_text(repo):
    return (repo / KERNEL).read_text()


def loop_commits(repo):
    return [ln for ln in git(repo, "log", "--format=%s").splitlines() if ln.startswith("cutile-perf")]


def test_keep_rules_fire_and_the_loop_stops_below_two_percent(repo):
    ts = {"fast": FakeTransform("fast", "A"), "mid": FakeTransform("mid", "B"), "tiny": FakeTransform("tiny", "C"),
          "never": FakeTransform("never", "D")}
    spec = {"effects": {"fast": 0.90, "mid": 0.97, "tiny": 0.995, "never": 0.5}}
    r = make_loop(repo, spec, recs=[rec("A", "fast"), rec("B", "mid"), rec("C", "tiny"), rec("D", "never")],
                  transforms=ts)
    res = r.start()
    rules = [it["decision"]["rule"] for it in r.led.iterations]
    assert rules == ["baseline", "keep-baseline", "keep-demote", "keep-stop"]
    assert res.stop_rule == "below-threshold" and ts["never"].applied == 0
    rows = table_rows(r)
    assert [x["status"] for x in rows] == ["keep"] * 4
    # a simulated table says its correctness was not checked (nothing ran on a GPU)
    assert all(x["correctness"] == "not checked (simulated)" for x in rows)
    assert rows == [{**x, "latency_ms": round(x["latency_ms"], 6)} for x in r.led.rows()]
    # every kept step is a commit on the loop's branch; HEAD is the last kept one
    assert git(r.s.worktree, "rev-parse", "--abbrev-ref", "HEAD").startswith("cutile-perf-vector_add-")
    assert len(loop_commits(r.s.worktree)) == 3 and head(r.s.worktree) == r.led.kept_commit() == res.kept_commit
    assert "# fake:tiny" in kernel_text(r.s.worktree) and dirty(r.s.worktree) == [] and untouched(repo, r)
    # the 2-5 % and < 2 % entries are demoted, the >= 5 % win is not
    assert dict(r.led.tried()) == {"B": 1, "C": 1}
    assert res.speedup == pytest.approx(1 / (0.9 * 0.97 * 0.995), rel=0.01)


def test_demoted_entry_ranks_after_untried_ones(repo):
    ts = {"mid": FakeTransform("mid", "B", repeat=True), "fast": FakeTransform("fast", "C")}
    r = make_loop(repo, {"effects": {"mid": 0.97, "fast": 0.9}}, recs=[rec("B", "mid"), rec("C", "fast")],
                  transforms=ts, max_iterations=2)
    r.start()
    assert [it["entry"]["id"] for it in r.led.iterations[1:]] == ["B", "C"]


def test_regression_on_one_config_is_reverted(repo):
    before = kernel_text(repo)
    ts = {"reg": FakeTransform("reg", "A"), "wrong": FakeTransform("wrong", "B")}
    r = make_loop(repo, {"effects": {"reg": {"small": 0.80, "large": 1.06}}, "incorrect": ["wrong"]},
                  recs=[rec("A", "reg"), rec("B", "wrong")], transforms=ts)
    base = head(repo)
    r.start()
    it = r.led.iterations[1]
    assert (it["status"], it["correctness"], it["decision"]["rule"]) == ("revert", "not checked (simulated)", "regression")
    assert it["decision"]["regressions"][0]["config"] == "large"
    assert it["latency_ms"] is not None                 # measured, then reverted
    # the candidate was committed, then reset away, and stays reachable
    cand = it["commits"]["candidate"]
    assert cand and cand != base and it["commits"]["kept"] == base
    assert git(repo, "rev-parse", f"refs/cutile-diag/{r.s.branch}/iter-1") == cand
    assert head(r.s.worktree) == base and kernel_text(r.s.worktree) == before and dirty(r.s.worktree) == [] and untouched(repo, r)


def test_incorrect_transform_is_reverted_before_measuring(repo):
    before = kernel_text(repo)
    ts = {"wrong": FakeTransform("wrong", "H"), "wrong2": FakeTransform("wrong2", "R"),
          "good": FakeTransform("good", "E")}
    r = make_loop(repo, {"incorrect": ["wrong", "wrong2"], "effects": {"good": 0.5}},
                  recs=[rec("H", "wrong"), rec("R", "wrong2"), rec("E", "good")], transforms=ts)
    res = r.start()
    rows = table_rows(r)
    assert [(x["correctness"], x["status"], x["latency_ms"]) for x in rows[1:]] == [("FAIL", "revert", None)] * 2
    assert all(it["decision"]["rule"] == "correctness" for it in r.led.iterations[1:])
    assert not any(("measure", f"iter-{n}") in r.backend.calls for n in (1, 2))     # never timed
    assert loop_commits(r.s.worktree) == [] and kernel_text(r.s.worktree) == before and dirty(r.s.worktree) == [] and untouched(repo, r)
    # two iterations in a row without improvement: stop, the good transform is never reached
    assert res.stop_rule == "no-improvement" and ts["good"].applied == 0


def test_correctness_failure_after_timing_is_reverted(repo):
    from cutile_diag.loop.backends import CorrectnessFailure

    ts = {"lazy": FakeTransform("lazy", "A")}
    r = make_loop(repo, {"effects": {"lazy": 0.5}}, recs=[rec("A", "lazy")], transforms=ts, max_iterations=1)
    real = r.backend.measure

    def measure(versions, ws, deadline, rounds):
        if len(versions) > 1:
            raise CorrectnessFailure("iter-1 on small: outputs of the timed runs are wrong")
        return real(versions, ws, deadline, rounds)
    r.backend.measure = measure
    r.start()
    it = r.led.iterations[1]
    assert (it["correctness"], it["status"], it["decision"]["rule"]) == ("FAIL", "revert", "correctness")
    assert dirty(r.s.worktree) == [] and untouched(repo, r) and loop_commits(r.s.worktree) == []


def test_crash_is_recorded_and_reverted(repo):
    ts = {"boom": FakeTransform("boom", "A")}
    r = make_loop(repo, {"crash": ["boom"]}, recs=[rec("A", "boom")], transforms=ts, max_iterations=1)
    r.start()
    it = r.led.iterations[1]
    # a crash row does not claim PASS
    assert (it["status"], it["correctness"], it["decision"]["rule"]) == ("crash", "-", "crash")
    assert "segfault" in it["decision"]["reason"] and dirty(r.s.worktree) == [] and untouched(repo, r) \
        and head(r.s.worktree) == r.s.start_commit


def test_hang_is_killed_within_the_budget(repo):
    ts = {"hang": FakeTransform("hang", "B")}
    r = make_loop(repo, {"hang": ["hang"]}, recs=[rec("B", "hang")], transforms=ts, max_iterations=1,
                  iteration_budget_s=1.5)
    t0 = time.monotonic()
    r.start()
    took = time.monotonic() - t0
    it = r.led.iterations[1]
    assert it["status"] == "crash" and "killed" in it["decision"]["reason"]
    assert it["seconds"] < 5 and took < 15
    assert table_rows(r)[1]["latency_ms"] is None and dirty(r.s.worktree) == [] and untouched(repo, r)


def test_hang_in_verification(repo):
    ts = {"hang": FakeTransform("hang", "B")}
    r = make_loop(repo, {"hang": ["hang"], "hang_in": "verify"}, recs=[rec("B", "hang")], transforms=ts,
                  max_iterations=1, iteration_budget_s=1.0)
    r.start()
    it = r.led.iterations[1]
    assert (it["status"], it["correctness"]) == ("crash", "FAIL") and dirty(r.s.worktree) == [] and untouched(repo, r)


def test_above_roof_measurement_is_never_a_win(repo):
    ts = {"magic": FakeTransform("magic", "A")}
    spec = {"effects": {"magic": 0.01}, "bytes": {"small": 1.2e8, "large": 9.6e8}, "flops": {"small": 1e6, "large": 8e6}}
    r = make_loop(repo, spec, recs=[rec("A", "magic")], transforms=ts, max_iterations=1)
    r.start()
    base = r.led.iterations[0]
    assert all(p["valid"] for p in base["roofline"].values())
    it = r.led.iterations[1]
    assert (it["status"], it["decision"]["rule"]) == ("revert", "above-roof")
    assert "bandwidth 240 T/s exceeds the" in it["decision"]["reason"] and dirty(r.s.worktree) == [] and untouched(repo, r)


def test_iteration_cap_is_25(repo):
    ts = {"step": FakeTransform("step", "A", repeat=True)}
    # an effect applies once per set (each repeat is a new setting of "step"): setting i gains 0.9^(i+1)
    effects = {f'step{{"i": {i}}}': 0.9 ** (i + 1) for i in range(30)}
    r = make_loop(repo, {"effects": effects}, recs=[rec("A", "step")], transforms=ts, rounds=1)
    res = r.start()
    assert res.stop_rule == "max-iterations" and res.iterations == 25
    assert len(table_rows(r)) == 26 and all(it["status"] == "keep" for it in r.led.iterations)
    assert len(loop_commits(r.s.worktree)) == 25


@pytest.mark.parametrize("bottleneck", ["scheduling", "unknown"])
def test_scheduling_or_unknown_hands_over(repo, bottleneck):
    ts = {"fast": FakeTransform("fast", "A")}
    d = RankedDiagnoser([rec("A", "fast"), rec("L", "", name="Custom plan")], bottleneck=bottleneck, escalate=True)
    r = make_loop(repo, {"effects": {"fast": 0.5}}, diagnoser=d, transforms=ts)
    res = r.start()
    assert res.stop_rule == "escalate" and bottleneck in res.stop_reason
    assert res.iterations == 0 and ts["fast"].applied == 0
    assert [m["id"] for m in res.manual] == ["L"]
    assert r.led.last_stop()["rule"] == "escalate"


def test_nothing_automatic_left_lists_manual_entries(repo):
    r = make_loop(repo, recs=[rec("B", "", name="persistent by hand"), rec("E", "missing_transform")])
    res = r.start()
    assert res.stop_rule == "exhausted" and [m["id"] for m in res.manual] == ["B"]
    assert "loop next" in res.stop_reason


def test_sweep_screens_points_and_keeps_the_fastest(repo):
    ts = {"occ": FakeTransform("occ", "C", params=[{"v": 1}, {"v": 2}, {"v": 3}, {"v": 4}])}
    spec = {"effects": {'occ{"v": 1}': 0.97, 'occ{"v": 2}': 0.80, 'occ{"v": 4}': 0.9},
            "incorrect": ['occ{"v": 3}']}
    r = make_loop(repo, spec, recs=[rec("C", "occ")], transforms=ts, max_iterations=1)
    r.start()
    it = r.led.iterations[1]
    assert it["status"] == "keep" and it["applied"] == ['occ{"v": 2}']
    chosen = [p for p in it["sweep"] if p.get("chosen")]
    assert [p["params"] for p in chosen] == [{"v": 2}]
    assert next(p for p in it["sweep"] if p["params"] == {"v": 3})["result"] == "correctness FAIL"
    assert '# fake:occ{"v": 2}' in kernel_text(r.s.worktree)
    # the other points stay tried on this base: never proposed again from the same version
    assert len(r.led.attempted()) == 4


def test_forbidden_file_edit_by_a_transform_is_refused(repo):
    where = {}

    def tamper():                     # a transform that also edits the tests (in the tree the loop works in)
        wt = where["r"].s.worktree
        (wt / "tests" / "test_vector_add.py").write_text("def test_vector_add():\n    pass  # weakened\n")
        (wt / "tests" / "test_new.py").write_text("x = 1\n")

    ts = {"cheat": FakeTransform("cheat", "A", side_effect=tamper)}
    r = make_loop(repo, {"effects": {"cheat": 0.5}}, recs=[rec("A", "cheat")], transforms=ts, max_iterations=1)
    where["r"] = r
    original = (r.s.worktree / "tests" / "test_vector_add.py").read_text()
    r.start()
    it = r.led.iterations[1]
    assert (it["status"], it["decision"]["rule"]) == ("revert", "forbidden-files")
    assert sorted(it["forbidden"]) == ["tests/test_new.py", "tests/test_vector_add.py"]
    assert ("verify", "iter-1") not in r.backend.calls                  # refused before anything ran
    wt = r.s.worktree
    assert (wt / "tests" / "test_vector_add.py").read_text() == original and not (wt / "tests" / "test_new.py").exists()
    assert dirty(wt) == [] and loop_commits(wt) == [] and untouched(repo, r)


def test_setup_refuses_a_dirty_tree_and_an_existing_branch(repo):
    from cutile_diag.loop.errors import DirtyTreeError, GitError, LoopError
    (repo / "README.md").write_text("edited\n")
    with pytest.raises(DirtyTreeError, match="README.md"):
        make_loop(repo)
    git(repo, "checkout", "-q", "README.md")
    r = make_loop(repo)
    r.start()
    with pytest.raises(LoopError, match="already exists"):
        make_loop(repo)
    import shutil
    shutil.rmtree(r.s.state_dir)
    again = make_loop(repo)                  # the default name is taken (same day): the next loop's gets -2
    assert again.s.branch == r.s.branch + "-2" and again.s.worktree != r.s.worktree
    with pytest.raises(GitError, match="branch .* already exists"):
        make_loop(repo, branch=r.s.branch)   # a name given with --branch is never changed
    assert untouched(repo, r)


def test_baseline_must_be_correct(repo):
    from cutile_diag.loop.errors import LoopError
    r = make_loop(repo, {"incorrect": ["marker:vector_add"]})
    with pytest.raises(LoopError, match="unchanged kernel fails"):
        r.start()
    assert r.led.last_stop()["rule"] == "baseline-failed" and r.led.iterations == []


def test_a_hanging_sweep_point_fails_alone(repo):
    ts = {"occ": FakeTransform("occ", "C", params=[{"v": 1}, {"v": 2}, {"v": 3}])}
    spec = {"effects": {'occ{"v": 1}': 0.95, 'occ{"v": 3}': 0.85}, "hang": ['occ{"v": 2}']}
    r = make_loop(repo, spec, recs=[rec("C", "occ")], transforms=ts, max_iterations=1, iteration_budget_s=4)
    t0 = time.monotonic()
    r.start()
    it = r.led.iterations[1]
    # the hung point was killed at its share of the budget (a budget skip, not a crash verdict);
    # the others were screened and the best kept
    assert (it["status"], it["applied"]) == ("keep", ['occ{"v": 3}']) and time.monotonic() - t0 < 15
    hung = next(p for p in it["sweep"] if p["params"] == {"v": 2})
    assert hung["result"].startswith("skipped (budget) in screening") and "killed" in hung["result"]
    assert hung["failure"] == "budget"
    assert [p["params"] for p in it["sweep"] if p.get("chosen")] == [{"v": 3}]


def test_a_hanging_point_leaves_the_others_their_time_when_the_baseline_took_milliseconds(repo):
    # baseline costs of milliseconds (a loaded machine rounds them above 0): a hung point may run
    # to twice its own estimate or its equal share, not to everything the others are estimated to leave
    from cutile_diag.loop import budget as budget_mod
    for hang_in in ("measure", "verify"):
        ts = {"occ": FakeTransform("occ", "C", params=[{"v": 1}, {"v": 2}, {"v": 3}])}
        spec = {"effects": {'occ{"v": 1}': 0.95, 'occ{"v": 3}': 0.85}, "hang": ['occ{"v": 2}'], "hang_in": hang_in}
        r = make_loop(repo, spec, recs=[rec("C", "occ")], transforms=ts, max_iterations=1, iteration_budget_s=4,
                      branch=f"ms-{hang_in}")
        r.costs = lambda: budget_mod.Costs(verify_s=0.01, run_s=0.002)
        r.start()
        it = r.led.iterations[1]
        assert (it["status"], it["applied"]) == ("keep", ['occ{"v": 3}']), hang_in
        assert next(p for p in it["sweep"] if p["params"] == {"v": 2})["failure"] == "budget"


def test_a_sweep_point_killed_while_checking_is_a_budget_skip_not_a_crash(repo):
    # one point's check outlives its share of the iteration: the ledger says it ran out of time
    ts = {"occ": FakeTransform("occ", "C", params=[{"v": 1}, {"v": 2}])}
    spec = {"effects": {'occ{"v": 1}': 0.9}, "hang": ['occ{"v": 2}'], "hang_in": "verify"}
    r = make_loop(repo, spec, recs=[rec("C", "occ")], transforms=ts, max_iterations=1, iteration_budget_s=4)
    r.start()
    it = r.led.iterations[1]
    hung = next(p for p in it["sweep"] if p["params"] == {"v": 2})
    assert hung["failure"] == "budget" and hung["result"].startswith("skipped (budget)")
    assert it["status"] == "keep" and it["applied"] == ['occ{"v": 1}']


def test_sweep_screening_goes_through_the_roofline_guard(repo):
    # v1 would "win" the screening by being impossibly fast: the guard throws it out, v2 goes on
    ts = {"occ": FakeTransform("occ", "C", params=[{"v": 1}, {"v": 2}])}
    spec = {"effects": {'occ{"v": 1}': 0.01, 'occ{"v": 2}': 0.9},
            "bytes": {"small": 1.2e8, "large": 9.6e8}, "flops": {"small": 1e6, "large": 8e6}}
    r = make_loop(repo, spec, recs=[rec("C", "occ")], transforms=ts, max_iterations=1)
    r.start()
    it = r.led.iterations[1]
    magic = next(p for p in it["sweep"] if p["params"] == {"v": 1})
    assert magic["result"].startswith("above the roof") and not magic.get("chosen")
    assert (it["status"], it["applied"]) == ("keep", ['occ{"v": 2}'])


def test_crash_row_keeps_the_verification_and_the_screening_latency(repo):
    from cutile_diag.loop.errors import CandidateCrash
    ts = {"occ": FakeTransform("occ", "C", params=[{"v": 1}, {"v": 2}])}
    r = make_loop(repo, {"effects": {'occ{"v": 1}': 0.9, 'occ{"v": 2}': 0.8}}, recs=[rec("C", "occ")],
                  transforms=ts, max_iterations=1)
    real = r.backend.measure

    def measure(versions, ws, deadline, rounds):
        if len(versions) > 1 and rounds == r.opt.rounds:      # the full comparison, after screening
            raise CandidateCrash("iter-1/2: the measurement worker died (exit -11)")
        return real(versions, ws, deadline, rounds)
    r.backend.measure = measure
    r.start()
    it = r.led.iterations[1]
    chosen = next(p for p in it["sweep"] if p.get("chosen"))
    # verified PASS before the crash (the ledger keeps it), but a crash row does not claim PASS; the row
    # shows the chosen point's screening latency, said so in the ledger
    assert (it["status"], it["correctness"]) == ("crash", "-")
    assert next(p for p in it["sweep"] if p.get("chosen"))["verification"].startswith("not checked (simulated)")
    assert it["latency_ms"] == chosen["screen_ms"] and it["latency_source"] == "screening"
    assert table_rows(r)[1]["latency_ms"] == round(chosen["screen_ms"], 6) and dirty(r.s.worktree) == [] and untouched(repo, r)
