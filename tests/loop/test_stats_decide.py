"""Interleaved comparison statistics and every decision / stop rule on its own."""
import math

import pytest

from cutile_diag.loop.decide import decide, stop_rules, cumulative_ratios
from cutile_diag.loop.stats import RunStat, compare, compare_config, t975


def runs(*medians, rel=0.5, n=50):
    return [RunStat(m, rel, n) for m in medians]


def cmp_of(per_config: dict):
    """{config: (baseline medians, candidate medians)}"""
    return compare({c: (runs(*a), runs(*b)) for c, (a, b) in per_config.items()})


def test_equal_versions_are_not_significant():
    c = compare_config("x", runs(1.0, 1.001, 0.999), runs(1.0, 0.999, 1.001))
    assert c.lo < 1.0 < c.hi and not c.significantly_faster and not c.significantly_slower


def test_noise_floor_prevents_false_significance():
    # identical, noise-free runs still carry the 0.5 % floor
    c = compare_config("x", [RunStat(1.0)] * 3, [RunStat(0.998)] * 3)
    assert c.method == "noise-floor" and c.lo < 1.0 < c.hi


def test_between_round_noise_uses_t():
    c = compare_config("x", runs(1.0, 1.0, 1.0, rel=0.01), runs(0.90, 0.92, 0.88, rel=0.01))
    assert c.method == "between-round" and c.significantly_faster
    se = c.se_log
    assert math.log(c.hi) == pytest.approx(math.log(c.ratio) + t975(2) * se)


def test_paired_rounds_cancel_drift():
    # the GPU slows down 10 % per round; the candidate is 5 % faster in every round
    a = runs(1.0, 1.1, 1.21, 1.331)
    b = runs(0.95, 1.045, 1.1495, 1.26445)
    c = compare_config("x", a, b)
    assert c.ratio == pytest.approx(0.95) and c.significantly_faster


def test_rule_keep_baseline():
    d = decide(cmp_of({"a": ([1.0] * 3, [0.90] * 3), "b": ([2.0] * 3, [1.8] * 3)}))
    assert (d.status, d.rule, d.improved, d.stop, d.demote) == ("keep", "keep-baseline", True, False, False)


def test_rule_keep_demote():
    d = decide(cmp_of({"a": ([1.0] * 3, [0.97] * 3)}))
    assert (d.status, d.rule, d.improved, d.demote, d.stop) == ("keep", "keep-demote", True, True, False)


def test_rule_keep_but_stop():
    d = decide(cmp_of({"a": ([1.0] * 3, [0.99] * 3)}))
    assert (d.status, d.rule, d.improved, d.stop) == ("keep", "keep-stop", False, True)


def test_going_on_a_small_gain_is_kept_only_when_its_whole_interval_clears_half_a_percent():
    # significant (the CI excludes 1) but the CI reaches down to a 0.2 % gain: an A/A offset of a GEMM looks like this
    loose = cmp_of({"a": ([1.0] * 4, [0.978, 0.99, 0.985, 0.997])})
    assert loose.significantly_faster and 0.995 < loose.hi < 1.0
    d = decide(loose, keep_going=True)
    assert (d.status, d.rule) == ("revert", "insignificant") and "below 0.5%" in d.reason
    assert decide(loose).rule == "keep-stop"               # a stopping loop keeps it, as the recipe says
    tight = cmp_of({"a": ([1.0] * 4, [0.983, 0.985, 0.984, 0.986])})
    assert tight.hi <= 0.995
    assert decide(tight, keep_going=True).rule == "keep-stop"


def test_big_but_noisy_gain_is_not_trusted():
    d = decide(cmp_of({"a": ([1.0, 1.0, 1.0], [0.7, 1.1, 0.95])}))
    assert d.rule == "keep-stop" and not d.improved


def test_rule_regression_on_any_config_reverts_despite_geomean_win():
    d = decide(cmp_of({"a": ([1.0] * 3, [0.70] * 3), "b": ([1.0] * 3, [1.05] * 3)}))
    assert d.status == "revert" and d.rule == "regression"
    assert d.regressions[0]["config"] == "b" and d.improvement_pct > 5


def test_small_slowdown_within_noise_is_kept():
    d = decide(cmp_of({"a": ([1.0] * 3, [1.01] * 3)}))
    assert d.status == "keep" and d.rule == "keep-stop"


def test_rule_cumulative_regression():
    cum = cumulative_ratios([("keep", {"configs": [{"config": "a", "ratio": 1.015}]}),
                             ("revert", {"configs": [{"config": "a", "ratio": 1.5}]})])
    assert cum == {"a": 1.015}
    d = decide(cmp_of({"a": ([1.0] * 3, [1.012] * 3)}), cumulative=cum)
    assert d.status == "revert" and d.rule == "cumulative-regression"


def test_stop_rules():
    imp = {"improved": True}
    flat = {"improved": False}
    assert not stop_rules([imp, flat]).stop
    assert stop_rules([imp, flat, flat]).rule == "no-improvement"
    assert stop_rules([imp] * 25).rule == "max-iterations"
    assert not stop_rules([imp] * 24).stop
    assert stop_rules([imp] * 3, max_iterations=3).rule == "max-iterations"
    assert stop_rules([{"improved": False, "stop": True}]).rule == "below-threshold"
    assert not stop_rules([{"improved": False, "stop": True}], keep_going=True).stop


def test_options_refuse_more_than_25_iterations():
    from cutile_diag.loop.errors import LoopError
    from cutile_diag.loop.runner import LoopOptions
    with pytest.raises(LoopError, match="1..25"):
        LoopOptions(max_iterations=26)


def test_a_tight_interval_that_would_keep_samples_to_the_keep_minimum_and_a_revert_stops_sooner():
    """Three rounds whose ratios happen to agree give a narrow interval on two degrees of freedom: a keep is trusted
    from ``KEEP_MIN_ROUNDS`` rounds on (an H100 A/A sitting kept a GEMM copy at 0.980x after three); a comparison
    that would revert stops at three."""
    from cutile_diag.loop import decide, proc
    from cutile_diag.loop.backends import Version
    from cutile_diag.loop.sampling import sample_to_ci
    from cutile_diag.loop.stats import RunStat
    a, b = Version("A", {"k.py": "a"}, None), Version("B", {"k.py": "b"}, None)

    def sampled(ratio):
        calls = []

        def measure(order, n):
            calls.append(n)
            return {v.label: {"c": [RunStat(1.0 * (ratio if v.label == "B" else 1.0) * (1 + 0.0005 * i))
                                    for i in range(n)]} for v in order}
        start = measure([a, b], 3)
        calls.clear()
        _runs, done, info = sample_to_ci(measure, a, b, proc.Deadline(None), start, 3, 0.01, alternates=True,
                                         noise_floor=0.001)
        return done, info
    done, info = sampled(0.98)
    assert done >= decide.KEEP_MIN_ROUNDS and info["stopped"] == "ci"
    done, info = sampled(1.0)
    assert done == 3 and info["stopped"] == "ci"
