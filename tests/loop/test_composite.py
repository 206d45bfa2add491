"""Composite steps: an entry whose transform needs another transform's output (W after A) is
screened as one candidate A+W — also after A alone was reverted — and kept as one row whose
ledger entry lists both steps and each part's diff."""
from __future__ import annotations

from looptools import FakeTransform, make_loop, rec, table_rows


class NeedsMarker(FakeTransform):
    """Applies only to a source that another transform's marker is in (W needs A's tile loads)."""

    def __init__(self, name, playbook_id, needs: str, enabled_by=()):
        super().__init__(name, playbook_id)
        self.needs, self.ENABLED_BY = needs, tuple(enabled_by)

    def candidates(self, source, kernel):
        return super().candidates(source, kernel) if f"# fake:{self.needs}" in source else []

    def why_no_candidates(self, source, kernel):
        return f"needs tile loads: convert with {self.needs} first"


def _ts(enabled=True):
    return {"gather": FakeTransform("gather", "A"),
            "reads": NeedsMarker("reads", "W", "gather", ("gather",) if enabled else ())}


def test_a_slower_alone_and_faster_with_w_ends_with_the_composite_kept(repo):
    spec = {"effects": {"gather": 1.16, "reads": 0.70}}
    r = make_loop(repo, spec, recs=[rec("W", "reads"), rec("A", "gather")], transforms=_ts(), max_iterations=3)
    res = r.start()
    its = r.led.iterations
    kept = [it for it in its[1:] if it["status"] == "keep"]
    assert len(kept) == 1, [(it["optimization"], it["status"]) for it in its]
    k = kept[0]
    assert k["applied"] == ["gather", "reads"] and k["entry"]["id"] == "W"
    assert k["entry"]["composite"] == ["gather+reads"]
    parts = k["change"]["parts"]
    assert [p["transform"] for p in parts] == ["gather", "reads"]
    assert "+# fake:gather" in parts[0]["diff"] and "fake:reads" not in parts[0]["diff"]
    assert "+# fake:reads" in parts[1]["diff"] and "+# fake:gather" not in parts[1]["diff"]
    rows = [row for row in table_rows(r) if row["status"] == "keep" and row["iteration"] != 0]
    assert len(rows) == 1 and rows[0]["optimization"].startswith("A+W: gather")
    assert res.final_ms < res.baseline_ms
    # without the declaration nothing enables W: the loop never measures the pair
    r2 = make_loop(repo, spec, recs=[rec("W", "reads"), rec("A", "gather")], transforms=_ts(False),
                   max_iterations=3, branch="plain")
    r2.start()
    assert all(it["status"] != "keep" for it in r2.led.iterations[1:])
    assert not any("+" in t["transform"] for it in r2.led.iterations for t in it.get("change", {}).get("tried", []))


def test_a_reverted_enabling_step_does_not_block_the_step_it_enables(repo):
    spec = {"effects": {"gather": 1.16, "reads": 0.70}}
    ts = _ts()
    # one setting per step: A is measured alone, with no room for A+W beside it
    r = make_loop(repo, spec, recs=[rec("A", "gather"), rec("W", "reads")], transforms=ts, max_iterations=3,
                  max_sweep=1)
    r.start()
    its = r.led.iterations
    assert its[1]["applied"] == ["gather"] and its[1]["status"] == "revert"
    assert its[2]["base_digest"] == its[1]["base_digest"]          # the same kept version
    assert its[2]["applied"] == ["gather", "reads"] and its[2]["status"] == "keep"
    assert its[2]["optimization"].startswith("A+W: ")


def test_the_enabling_steps_sweep_measures_the_composite_it_enables(repo):
    """A ranked first: its sweep screens A alone and A+W (W recommended below it) side by side."""
    spec = {"effects": {"gather": 1.16, "reads": 0.70}}
    r = make_loop(repo, spec, recs=[rec("A", "gather"), rec("W", "reads")], transforms=_ts(), max_iterations=1)
    r.start()
    it = r.led.iterations[1]
    assert [t["transform"] for t in it["change"]["tried"]] == ["gather", "gather+reads"]
    assert it["status"] == "keep" and it["applied"] == ["gather", "reads"] and it["optimization"].startswith("A+W: ")
    assert [p["entry"] for p in it["change"]["parts"]] == ["A", "W"]
    # not recommended (or --skip W): no composite with it
    r2 = make_loop(repo, spec, recs=[rec("A", "gather"), rec("W", "reads")], transforms=_ts(), max_iterations=1,
                   skip=["W"], branch="skipw")
    r2.start()
    assert [t["transform"] for t in r2.led.iterations[1]["change"]["tried"]] == ["gather"]


def test_composite_lost_is_not_screened_again(repo):
    spec = {"effects": {"gather": 1.30, "reads": 0.90}}           # A+W = 1.17: slower
    r = make_loop(repo, spec, recs=[rec("W", "reads")], transforms=_ts(), max_iterations=5)
    res = r.start()
    tried = [t["transform"] for it in r.led.iterations for t in it.get("change", {}).get("tried", [])]
    assert tried == ["gather+reads"] and res.stop_rule == "exhausted"
    assert r.led.iterations[1]["decision"]["rule"] == "regression"
    # the next diagnosis ranks with what the loop measured: W (as A+W) measured slower
    cal = r.diagnoser.calls[-1].calibration
    assert cal.measured("W") == [cal.steps[0].measured] and cal.steps[0].measured < -0.1
    assert cal.steps[0].cls == "memory-bound" and cal.measured("W", "compute-bound") == []


# --- the bounded lookahead (loop.frontier) ---------------------------------------------------

def _lookahead(repo, follow: float, branch: str, **opts):
    struct = FakeTransform("struct", "B")
    struct.structural = True
    ts = {"struct": struct, "follow": NeedsMarker("follow", "C", "struct")}
    spec = {"effects": {"struct": 1.03, "follow": follow}}
    r = make_loop(repo, spec, recs=[rec("B", "struct"), rec("C", "follow")], transforms=ts, branch=branch,
                  max_iterations=4, **{"keep_going": True, **opts})
    return r, r.start()


def test_lookahead_keeps_a_slightly_slower_structural_step_and_lands_the_follow_up_that_beats_a(repo):
    r, res = _lookahead(repo, 0.90, "la-win")
    its = r.led.iterations
    assert its[1]["applied"] == ["struct"] and its[1]["status"] == "revert"
    assert 1.0 < its[1]["comparison"]["ratio"] <= 1.05
    # iteration 2: the follow-up applies only on the frontier; screened as B+C against the kept version
    assert its[2]["applied"] == ["struct", "follow"] and its[2]["status"] == "keep"
    assert its[2]["change"]["frontier"] == 1 and its[2]["optimization"].startswith("B+C: ")
    assert its[2]["comparison"]["ratio"] < 0.95 and res.final_ms < res.baseline_ms
    assert its[2]["base_digest"] == its[0]["digest"]                 # compared with the kept version


def test_lookahead_follow_up_that_does_not_beat_the_kept_version_does_not_land(repo):
    r, res = _lookahead(repo, 0.985, "la-lose")                       # 1.03 x 0.985 = 1.015: slower than A
    its = r.led.iterations
    assert its[2]["applied"] == ["struct", "follow"] and its[2]["status"] == "revert"
    assert all(it["status"] != "keep" for it in its[1:])
    # a composite built on a frontier is no frontier itself: the lookahead is one step deep
    from cutile_diag.loop.frontier import frontier_record
    assert frontier_record(its[:2], 0.05, r.transforms) is its[1]
    assert frontier_record(its[:3], 0.05, r.transforms) is None


def test_a_frontier_is_correct_by_its_verification_not_by_the_tables_text():
    """What makes a reverted structural step a frontier is its record's verification (a check
    that passed, or the simulated backend's pass), never the ``correctness`` text: a PASS label
    without a passing verification is not correct, a typed pass with another label is."""
    from cutile_diag.ledger import IterationRecord
    from cutile_diag.loop.frontier import frontier_record
    struct = FakeTransform("struct", "B")
    struct.structural = True
    ts = {"struct": struct}

    def rec_with(correctness, verification):
        r = {"type": "iteration", "iteration": 1, "status": "revert", "correctness": correctness,
             "comparison": {"ratio": 1.02}, "decision": {"rule": "insignificant"},
             "change": {"transform": "struct"}, "commits": {"candidate": "c0ffee"}}
        if verification is not None:
            r["verification"] = verification
        return [{"iteration": 0}, r]

    passed = {"passed": True, "summary": "PASS (1 passed)"}
    simulated = {"passed": None, "summary": "not checked (simulated)", "simulated": True}
    assert frontier_record(rec_with("PASS", passed), 0.05, ts) is not None
    assert frontier_record(rec_with("not checked (simulated)", simulated), 0.05, ts) is not None
    # the text says PASS; the verification failed, never ran, or is not the simulated backend's
    assert frontier_record(rec_with("PASS", {"passed": False, "summary": "FAIL"}), 0.05, ts) is None
    assert frontier_record(rec_with("PASS", None), 0.05, ts) is None
    assert frontier_record(rec_with("PASS", {"passed": None, "summary": "?"}), 0.05, ts) is None
    # a passing check whose row text is something else still counts
    assert frontier_record(rec_with("-", passed), 0.05, ts) is not None
    it = IterationRecord.from_json(rec_with("FAIL", simulated)[1])
    assert (it.verified, it.passed, it.simulated_check, it.check_passed) == (True, None, True, True)


def test_lookahead_is_off_without_continue_or_when_zero(repo):
    for branch, opts in (("la-off", {"lookahead": 0.0}), ("la-greedy", {"keep_going": False})):
        r, _ = _lookahead(repo, 0.90, branch, **opts)
        assert not any("follow" in it["applied"] for it in r.led.iterations), branch


def test_the_loop_ranks_with_ledgers_committed_in_the_repository(repo):
    """Committed ledgers (what git tracks, e.g. bench results) join the loop's own measurements."""
    import shutil
    from pathlib import Path

    from looptools import git
    src = Path(__file__).resolve().parents[2] / "bench" / "results" / "optimize-h200" / "gather_scale"
    led = next(p for p in src.iterdir() if p.name.startswith("ledger.jsonl"))
    (repo / "results").mkdir()
    shutil.copy(led, repo / "results" / led.name)
    git(repo, "add", "results")
    git(repo, "commit", "-qm", "results")
    r = make_loop(repo, {}, recs=[], transforms={})
    (repo / "untracked").mkdir()
    shutil.copy(led, repo / "untracked" / led.name)                   # not committed: not read
    cal = r._calibration()
    assert [Path(s).parent.name for s in cal.sources[1:]] == ["results"]
    assert any(s.entry == "A" and s.kernel for s in cal.steps)


def test_the_composite_is_screened_beside_the_step_itself(repo):
    """W applies alone too (read_once over gathers): one sweep screens W and A+W against A."""
    ts = {"gather": FakeTransform("gather", "A"), "reads": FakeTransform("reads", "W")}
    ts["reads"].ENABLED_BY = ("gather",)
    spec = {"effects": {"gather": 0.85, "reads": 0.98}}
    r = make_loop(repo, spec, recs=[rec("W", "reads")], transforms=ts, max_iterations=1)
    r.start()
    it = r.led.iterations[1]
    assert [t["transform"] for t in it["change"]["tried"]] == ["reads", "gather+reads"]
    assert [s["description"].split(":")[0] for s in it["sweep"]] == ["reads", "A+W"]
    assert it["status"] == "keep" and it["applied"] == ["gather", "reads"] and it["optimization"].startswith("A+W: ")


def test_lookahead_option_is_a_fraction():
    import pytest

    from cutile_diag.loop.runner import LoopError, LoopOptions
    assert LoopOptions().lookahead == 0.05 and LoopOptions(lookahead=0).lookahead == 0
    with pytest.raises(LoopError, match="--lookahead must be a fraction"):
        LoopOptions(lookahead=1.5)


def test_each_part_gets_its_own_ir_diff_against_the_version_before_it():
    from cutile_diag.loop.backends import Version
    from cutile_diag.loop.composite import enabled_candidates, part_records
    from cutile_diag.loop.diagnosis import Rec
    ts = _ts()
    a = Version("a", {"k.py": "src\n"}, None, ())
    c = enabled_candidates(Rec("W", "w", "reads"), ts["reads"], a, kernel_file="k.py", kernel="k", transforms=ts,
                           facts={}, attempted=set(), limit=4, skipped=[])[0]
    pairs = []
    parts = part_records(a, c, "k.py", lambda x, y: pairs.append((x.files["k.py"], y.files["k.py"])) or {"n": len(pairs)})
    assert [p["ir_diff"] for p in parts] == [{"n": 1}, {"n": 2}]
    assert pairs[0] == ("src\n", "src\n# fake:gather\n")
    assert pairs[1] == ("src\n# fake:gather\n", c.version.files["k.py"]) and "# fake:reads" in pairs[1][1]
    assert c.result.changed_lines == (2, 3)
