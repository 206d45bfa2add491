"""Decisions that hold under power-driven noise, on the simulated GPU: a clock a power cap moves
is compared in cycles, runs under a thermal slowdown are dropped, and a comparison samples until
its CI is tight or its cap, where a step the rules cannot decide is inconclusive."""
import json

import pytest
from looptools import FakeTransform, make_loop, rec, table_rows

# a bf16 GEMM at 8192^3: its milliseconds follow an SM clock that a power cap moves by ~4 %
GEMM = {"configs": {"gemm": 2.0}, "flops": {"gemm": 2 * 8192 ** 3}, "bytes": {"gemm": 3 * 2 * 8192 ** 2},
        "unit": ["bf16", "tensor"], "noise": 0.002, "run_noise": 0.001, "samples": 20,
        "clock_mhz": 1980, "clock_noise": 0.04, "clock_drift": 0.001}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTILE_DIAG_CACHE_DIR", str(tmp_path / "cache"))


def test_a_gemm_whose_clock_moves_is_compared_in_cycles_and_calibrates_without_false_keeps():
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.calibrate import calibrate
    cal = calibrate(SimulatedBackend(GEMM), n=12, rounds=3)
    assert cal.n == 12 and cal.false_keeps == 0 and cal.false_reverts == 0 and cal.inconclusive == 0
    assert cal.half_width_pct <= 1.0
    cls = cal.per_class["compute-bound"]
    assert cls["configs"] == ["gemm"] and cls["false_keeps"] == 0 and cls["basis"] == ["cycles"]
    assert json.loads(json.dumps(cal.to_json()))["per_class"]["compute-bound"]["n"] == 12


def test_cycles_remove_most_of_the_clock_noise():
    from cutile_diag.loop import proc, stats
    from cutile_diag.loop.backends import SimulatedBackend, Version, Workspace
    b = SimulatedBackend(GEMM)
    a, c = Version("A", {"k.py": "a"}), Version("B", {"k.py": "b"})
    runs = b.measure([a, c], Workspace(".", ".", []), proc.Deadline(None), 4)
    assert all(r.clock_mhz and r.clock_events == 0x4 for r in runs["A"]["gemm"])    # power cap, read per run
    cc = stats.compare_config("gemm", runs["A"]["gemm"], runs["B"]["gemm"])
    ms_half = 100 * (cc.other[2] - cc.other[1]) / 2
    assert cc.basis == "cycles" and cc.half_width_pct < 1.0 < ms_half and cc.half_width_pct < ms_half / 4
    assert cc.dropped == 0                          # a power cap is no reason to drop a run
    doc = cc.to_json()
    assert doc["basis"] == "cycles" and len(doc["ci95_ms"]) == 2 and "clock_mhz" in doc["baseline_runs"][0]
    # with two rounds the spreads cannot be told apart: milliseconds, the cycles beside them
    two = stats.compare_config("gemm", runs["A"]["gemm"][:2], runs["B"]["gemm"][:2])
    assert two.basis == "ms" and len(two.to_json()["ci95_cycles"]) == 2
    # without clocks (no NVML) the comparison stays in milliseconds, as before
    plain = stats.compare_config("gemm", [stats.RunStat(1.0, 0.2, 100)] * 2, [stats.RunStat(1.0, 0.2, 100)] * 2)
    assert plain.basis == "ms" and "basis" not in plain.to_json()


def test_a_clock_reading_the_time_does_not_follow_keeps_the_decision_in_milliseconds():
    """The H100 case (bench/results/acceptance-h100-s11, matmul): the time steps with the power cap
    faster than NVML's clock follows, so ms x clock spreads 2-3x wider than ms: the loop decides in
    ms and records the cycles beside them."""
    from cutile_diag.loop import proc, stats
    from cutile_diag.loop.backends import SimulatedBackend, Version, Workspace
    spec = {**GEMM, "run_noise": 0.01, "clock_noise": 0.0, "clock_read_noise": 0.03}
    b = SimulatedBackend(spec)
    a, c = Version("A", {"k.py": "a"}), Version("B", {"k.py": "b"})
    runs = b.measure([a, c], Workspace(".", ".", []), proc.Deadline(None), 8)
    assert stats.cycles(runs["A"]["gemm"] + runs["B"]["gemm"])            # the clocks do differ by > 1 %
    cc = stats.compare_config("gemm", runs["A"]["gemm"], runs["B"]["gemm"])
    cyc_half = 100 * (cc.other[2] - cc.other[1]) / 2
    assert cc.basis == "ms" and cc.half_width_pct < cyc_half
    doc = cc.to_json()
    assert doc["basis"] == "ms" and len(doc["ci95_cycles"]) == 2 and "ci95_ms" not in doc


def test_throttled_rounds_are_dropped():
    from cutile_diag.loop import proc, stats
    from cutile_diag.loop.backends import SimulatedBackend, Version, Workspace
    b = SimulatedBackend({"configs": {"c": 1.0}, "noise": 0.002, "run_noise": 0.001, "throttle": 0.25,
                          "throttle_slowdown": 0.3, "seed": 3})
    a, c = Version("A", {"k.py": "a"}), Version("B", {"k.py": "b"})
    runs = b.measure([a, c], Workspace(".", ".", []), proc.Deadline(None), 12)
    slowed = [i for i, (x, y) in enumerate(zip(runs["A"]["c"], runs["B"]["c"])) if x.slowed or y.slowed]
    assert 0 < len(slowed) < 12 and runs["A"]["c"][slowed[0]].slowed or runs["B"]["c"][slowed[0]].slowed
    cc = stats.compare_config("c", runs["A"]["c"], runs["B"]["c"])
    assert cc.dropped == len(slowed) and cc.rounds == 12 - len(slowed) and cc.to_json()["dropped_rounds"] == cc.dropped
    # what is left is the A/A truth: no change, within half a percent
    assert abs(cc.ratio - 1.0) < 0.005 and cc.lo < 1.0 < cc.hi


def test_a_gain_within_noise_sampled_to_the_cap_is_inconclusive_and_does_not_stop_the_loop(repo):
    from cutile_diag.loop.decide import CI_TARGET_PCT, MAX_ROUNDS
    ts = {"meh": FakeTransform("meh", "A"), "meh2": FakeTransform("meh2", "B"), "meh3": FakeTransform("meh3", "C")}
    # 5 % run-to-run noise, no clock to undo it: no number of rounds the cap allows tells 1 % apart
    spec = {"configs": {"c": 1.0}, "run_noise": 0.05, "effects": {"meh": 0.99, "meh2": 0.99, "meh3": 0.99}}
    r = make_loop(repo, spec, recs=[rec("A", "meh"), rec("B", "meh2"), rec("C", "meh3")], transforms=ts,
                  max_iterations=3)
    res = r.start()
    steps = r.led.iterations[1:]
    assert [s["status"] for s in steps] == ["inconclusive"] * 3      # two in a row did not stop the loop
    for s in steps:
        assert s["decision"]["rule"] == "inconclusive" and not s["decision"]["improved"]
        samp = s["sampling"]
        assert samp["capped"] and samp["stopped"] == "rounds" and MAX_ROUNDS - 1 <= samp["rounds"] <= MAX_ROUNDS
        assert samp["half_width_pct"] > CI_TARGET_PCT
    assert res.stop_rule == "max-iterations"
    assert "# fake:meh" not in (r.s.worktree / "vector_add.py").read_text()          # not kept
    assert [row["status"] for row in table_rows(r)][1:] == ["inconclusive"] * 3
    # an inconclusive set was measured without a verdict: the beam may measure it again
    from cutile_diag.loop.beam import measured
    assert not {s["digest"] for s in steps} & measured(r.led.records)


def test_a_tight_memory_bound_step_stops_at_its_first_rounds(repo):
    ts = {"fast": FakeTransform("fast", "A")}
    r = make_loop(repo, {"effects": {"fast": 0.9}}, recs=[rec("A", "fast")], transforms=ts, max_iterations=1)
    r.start()
    step = r.led.iterations[1]
    # the loop's first comparison: its CI is tight at 3 rounds, but the noise behind it is known only at
    # 8 degrees of freedom (2 configurations x 4 rounds' worth): 5 rounds, then it stops
    assert step["status"] == "keep" and step["sampling"] == {**step["sampling"], "rounds": 5, "stopped": "ci",
                                                              "capped": False}


def test_a_pooled_noise_floor_raises_the_floor_and_lets_later_steps_stop_early():
    from cutile_diag.loop import stats
    from cutile_diag.loop.sampling import floor_with_pool
    a = [stats.RunStat(1.0 * (1 + 0.02 * (-1) ** i), 0.1, 100) for i in range(5)]
    b = [stats.RunStat(1.0, 0.1, 100) for _ in range(5)]
    cmp = stats.compare({"c": (a, b)})
    doc = cmp.to_json()
    assert doc["configs"][0]["df"] == 4 and doc["configs"][0]["ss_log"] > 0
    # one comparison holds 4 degrees of freedom: not enough to trust, the floor stays
    assert floor_with_pool(0.005, [doc]) == (0.005, 4)
    floor, df = floor_with_pool(0.005, [doc, doc, None])
    # two: 8, and the pooled noise (a 2 % round-to-round swing is ~1.4 % per measurement) raises the floor
    assert df == 8 and 0.013 < floor < 0.016
    assert floor_with_pool(0.05, [doc, doc])[0] == 0.05           # never below the loop's own floor


def test_a_worker_reply_carries_its_clock_and_a_round_pools_its_two_runs():
    from cutile_diag.loop.backends.workload import _merged, _run_stat
    rep = lambda med, clk, ev: {"stats": {"median": med, "rel_std": 1.0, "nrep": 3}, "samples_ms": [med] * 3,
                                "observed": {"sm_clock_mhz": {"median": clk}, "clock_event_reasons": ev}}
    a1, a2 = _run_stat(rep(1.0, 1980, 0)), _run_stat(rep(1.1, 1800, 0x4 | 0x40))
    assert (a1.clock_mhz, a2.clock_events, a2.slowed) == (1980.0, 0x44, ["hw-thermal"])
    m = _merged([a1, a2])
    assert (m.clock_mhz, m.clock_events, m.nrep, m.slowed) == (1890.0, 0x44, 6, ["hw-thermal"])
    # no NVML in the worker: no clock, compared in milliseconds
    none = _run_stat({"stats": {"median": 1.0}, "observed": {"sm_clock_mhz": None, "clock_observer": "NVML unavailable"}})
    assert none.clock_mhz is None and none.clock_events is None and not none.slowed


def test_calibrate_cli_reports_false_keeps_per_kernel_class(tmp_path, capsys):
    from cutile_diag.cli import main
    spec = tmp_path / "gemm.json"
    spec.write_text(json.dumps(GEMM))
    assert main(["calibrate", "--simulate", str(spec), "-n", "3", "--no-save", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["per_class"]["compute-bound"]["false_keeps"] == 0 and doc["per_class"]["compute-bound"]["n"] == 3
    assert main(["calibrate", "--simulate", str(spec), "-n", "3", "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "per kernel class" in out and "compute-bound" in out and "cycles" in out


def test_calibrate_samples_each_decision_as_the_loop_does():
    """A GEMM whose milliseconds wander 1.5 % a run (no clock explains it): 3 rounds give a CI of several
    percent, so each A/A decision samples on, as a loop's confirmation would, until +-1 % or the cap;
    what reaches the target is decided, the rest is inconclusive, never a keep."""
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.calibrate import calibrate
    from cutile_diag.loop.decide import CI_TARGET_PCT, MAX_ROUNDS
    spec = {**GEMM, "run_noise": 0.015, "clock_mhz": None, "seed": 5}
    b = SimulatedBackend(spec)
    cal = calibrate(b, n=6, rounds=3)
    assert cal.n == 6 and len(cal.rounds_sampled) == 6 and all(3 < r <= MAX_ROUNDS for r in cal.rounds_sampled)
    assert cal.false_keeps <= 1             # a 95 % CI: 1 in 40 A/A decisions is a false keep
    for d in cal.decisions:
        assert d["rounds"] == d["sampling"]["rounds"]
        if d["status"] == "inconclusive":
            assert d["sampling"]["capped"] and d["half_width_pct"] > CI_TARGET_PCT
        else:
            assert d["sampling"]["stopped"] == "ci" and d["half_width_pct"] <= CI_TARGET_PCT
    assert sum(cal.rounds_sampled) == len(cal.rounds_detail["gemm"])
    assert cal.noise_floor_used is not None and json.loads(json.dumps(cal.to_json()))["rounds_sampled"]
