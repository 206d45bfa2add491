"""--until-roof: the loop goes on past small steps while the kept version is below F of the
measured ceiling (each continuation recorded); the default stop message reports % of roof."""
from __future__ import annotations

from looptools import FakeTransform, make_loop, rec

from cutile_diag.loop import budget
from cutile_diag.loop.decide import roof_pct_of, stop_rules
from cutile_diag.loop.runner import LoopError, LoopOptions

import pytest


def test_stop_rules_with_headroom():
    tiny = {"improved": False, "stop": True}
    chk = stop_rules([tiny], roof_pct=40.0, until_roof=0.9)
    assert not chk.stop and chk.rule == "until-roof"
    assert "at 40.0% of the measured ceiling, below --until-roof 0.9: going on" in chk.reason
    assert not stop_rules([tiny, tiny], roof_pct=40.0, until_roof=0.9).stop        # past no-improvement too
    chk = stop_rules([tiny], roof_pct=93.0, until_roof=0.9)
    assert chk.stop and chk.rule == "at-roof" and "93.0% of the measured ceiling, at or above" in chk.reason
    assert stop_rules([], roof_pct=90.0, until_roof=0.9).rule == "at-roof"          # before any step too
    assert not stop_rules([], roof_pct=89.9, until_roof=0.9).stop
    assert stop_rules([tiny], roof_pct=93.0).rule == "below-threshold"            # without it: the recipe's rules
    assert stop_rules([tiny], roof_pct=None, until_roof=0.9).stop                  # no ceiling: the recipe rule
    assert stop_rules([tiny] * 25, roof_pct=10.0, until_roof=0.9).rule == "max-iterations"
    # default: the recipe's rule, with the % of roof and the option when the headroom is large
    chk = stop_rules([tiny], roof_pct=40.0)
    assert chk.stop and "40% of the measured ceiling — large headroom: `--until-roof 0.9`" in chk.reason
    assert stop_rules([tiny], roof_pct=88.0).reason.endswith("88% of the measured ceiling (go on with --continue)")
    assert stop_rules([tiny]).reason == "the last step gained less than 2% (go on with --continue)"


def test_roof_pct_is_the_worst_valid_config():
    pts = {"a": {"pct_measured": 70.0}, "b": {"pct_measured": 45.0}, "c": {"pct_measured": 20.0, "valid": False},
           "d": {"pct_measured": None, "pct_datasheet": 10.0}}
    assert roof_pct_of(pts) == (45.0, "measured ceiling") and roof_pct_of({})[0] is None
    assert roof_pct_of({"a": {"pct_measured": None, "pct_datasheet": 30.0}}) == (30.0, "datasheet roof")
    with pytest.raises(LoopError, match="--until-roof"):
        LoopOptions(until_roof=1.5)


def _spec(backend_cls, pct: float) -> dict:
    """A simulated kernel that sits at ``pct`` % of the H200's measured DRAM ceiling."""
    probe = backend_cls({"configs": {"large": 0.4}, "bytes": {"large": 1e9}})
    p = probe.roofline(None, {"large": 0.4})["large"]
    return {"configs": {"large": 0.4}, "bytes": {"large": 1e9 * pct / roof_pct_of({"large": p})[0]}}


def test_loop_goes_on_below_the_roof_and_says_so(repo):
    from cutile_diag.loop.backends import SimulatedBackend
    spec = {**_spec(SimulatedBackend, 40.0),
            "effects": {"tiny": 0.995, "tiny2": 0.996, "good": 0.80}}

    def run(**opts):
        ts = {n: FakeTransform(n, i) for n, i in (("tiny", "A"), ("tiny2", "B"), ("good", "C"))}
        r = make_loop(repo, spec, recs=[rec("A", "tiny"), rec("B", "tiny2"), rec("C", "good")], transforms=ts,
                      branch=f"b{len(opts)}", **opts)
        return r, r.start(), ts

    r, res, ts = run()
    assert res.stop_rule == "below-threshold" and ts["good"].applied == 0
    assert "% of the datasheet roof — large headroom: `--until-roof 0.9`" in res.stop_reason
    r, res, ts = run(until_roof=0.9)
    assert ts["good"].applied == 1 and res.stop_rule == "exhausted"
    rules = [it["decision"]["rule"] for it in r.led.iterations]
    # the small step did not stop the loop: the 20 % step came after it; going on past small
    # steps, a step inside the noise is reverted (#11), not piled up in the kernel
    assert rules[1] == "insignificant" and "keep-baseline" in rules[2:]
    cont = [x for x in r.led.records if x["type"] == "continue"]
    assert cont and all("below --until-roof 0.9: going on" in c["reason"] for c in cont)


def test_time_limit_stops_before_a_step_that_does_not_fit(repo, monkeypatch):
    """--time-limit: the baseline runs, then no step starts that the time left cannot hold; the
    stop is recorded (rule time-limit, % of roof, how to go on) and the option is per run."""
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.runner import Runner
    spec = {**_spec(SimulatedBackend, 40.0), "effects": {"good": 0.80}}
    ts = {"good": FakeTransform("good", "C")}
    r = make_loop(repo, spec, recs=[rec("C", "good")], transforms=ts, until_roof=0.9, time_limit_s=300.0)
    # after the baseline 20 s are left; one check and one comparison cost about 5 + 2 x 2 x 3 s
    monkeypatch.setattr(Runner, "time_left", lambda self: 25.0)
    monkeypatch.setattr(Runner, "costs", lambda self: budget.Costs(verify_s=5.0, run_s=6.0))
    res = r.start()
    assert res.stop_rule == "time-limit"
    assert "--time-limit 300 s: 25 s left" in res.stop_reason and "% of the" in res.stop_reason
    assert "--time-limit 300 s" in res.stop_reason and "go on with --resume" in res.stop_reason
    assert [it["iteration"] for it in r.led.iterations] == [0]
    assert r.led.records[-1]["type"] == "stop" and r.led.records[-1]["rule"] == "time-limit"
    assert LoopOptions.from_json(r.opt.to_json()).time_limit_s is None          # not inherited by --resume
    with pytest.raises(LoopError, match="--time-limit"):
        LoopOptions(time_limit_s=0)


def test_time_limit_cuts_the_iteration_budget(repo, monkeypatch):
    from cutile_diag.loop.runner import Runner
    r = make_loop(repo, {}, recs=[], transforms={}, time_limit_s=50.0, iteration_budget_s=600.0)
    assert 49.0 < r.budget_s() <= 50.0
    monkeypatch.setattr(Runner, "time_left", lambda self: -3.0)
    assert r.budget_s() == 0.0
    res = r.start()
    assert res.stop_rule == "time-limit" and "reached" in res.stop_reason


def test_a_capture_cut_short_by_the_clock_is_no_compile_verdict(repo, monkeypatch):
    """A candidate's capture killed at the time budget is recorded as `budget` (revert), never as
    `does not compile`, and is not cached as the candidate's capture."""
    from cutile_diag.loop.integrations import CaptureResult
    from cutile_diag.loop.runner import Runner
    calls = []

    def fake(self, v, deadline, **_kw):
        calls.append(v.digest)
        if v.commit:                        # the kept version captures
            return CaptureResult(True, None)
        return CaptureResult(False, error="capture killed after 0 s (the time budget)", timed_out=True)

    monkeypatch.setattr(Runner, "capture", fake)
    ts = {"good": FakeTransform("good", "C")}
    r = make_loop(repo, {"effects": {"good": 0.8}}, recs=[rec("C", "good")], transforms=ts, capture=True,
                  max_iterations=1)
    r.start()
    it = r.led.iterations[1]
    assert it["decision"]["rule"] == "budget" and "not a compile failure" in it["decision"]["reason"]
    assert it["status"] == "revert" and it["correctness"] != "FAIL"


def test_roof_pct_is_of_the_attainable_time_when_the_device_has_a_curve():
    """With a size curve (``floor_ms`` set) the loop's % of roof is of the time attainable at the
    kernel's size; a configuration without one falls back to the measured ceiling for all."""
    pts = {"a": {"pct_measured": 66.0, "pct_attainable": 95.0, "floor_ms": 1e-3},
           "b": {"pct_measured": 80.0, "pct_attainable": 92.0, "floor_ms": 1e-3}}
    assert roof_pct_of(pts) == (92.0, "attainable time at its size")
    pts["b"] = {"pct_measured": 80.0, "pct_attainable": 80.0, "floor_ms": None}
    assert roof_pct_of(pts) == (66.0, "measured ceiling")


def test_until_roof_stops_a_kernel_at_its_attainable_time(repo):
    """33.6 MB in 12 µs is 66 % of the H200's 4 GB-copy ceiling but 96 % of what a copy of those bytes
    attains: --until-roof 0.9 no longer keeps the loop chasing a roof no kernel of that size reaches."""
    from cutile_diag.loop.backends import SimulatedBackend
    tiny = ("tiny", "tiny2", "tiny3")
    spec = {"configs": {"lse": 0.012}, "bytes": {"lse": 33.6e6}, "effects": {**{t: 0.996 for t in tiny}, "good": 0.80},
            "ceiling": {"dram_tbps": 4.24, "cached": True}}
    flat = SimulatedBackend(spec).roofline(None, {"lse": 0.012})["lse"]
    sized = SimulatedBackend({**spec, "ceiling": {**spec["ceiling"], "curve": True}}).roofline(None, {"lse": 0.012})["lse"]
    assert flat["pct_measured"] == pytest.approx(66, abs=1) and flat["floor_ms"] is None
    assert sized["pct_attainable"] == pytest.approx(95.6, abs=1) and sized["floor_ms"] > 0

    def run(ceiling, branch):
        steps = (*zip(tiny, "ABD"), ("good", "C"))
        ts = {n: FakeTransform(n, i) for n, i in steps}
        r = make_loop(repo, {**spec, "ceiling": ceiling}, recs=[rec(i, n) for n, i in steps], transforms=ts,
                      branch=branch, until_roof=0.9)
        return r.start(), ts

    # three steps inside the noise: against the flat ceiling (66 % < 90 %) the loop goes on to the good one
    res, ts = run(spec["ceiling"], "flat")
    assert ts["good"].applied == 1
    # against the time attainable at its size it is already there: the loop ends before its first step
    res, ts = run({**spec["ceiling"], "curve": True}, "sized")
    assert not any(t.applied for t in ts.values()) and res.stop_rule == "at-roof"
    assert "% of the attainable time at its size, at or above --until-roof 0.9" in res.stop_reason
