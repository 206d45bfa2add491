"""Command mode on recorded launches (issue 29), every run of the user's commands counted by the
fixture of test_command_mode: the baseline's bench command gives the start in the suite's numbers
and records the launches it times for replay; versions are checked and timed on the recording (here a simulated GPU:
CI has none); the test command runs once before a step is kept, the bench command once at the start
and once at the end; a candidate whose replayed outputs differ is reverted without the test command."""
from __future__ import annotations

import sys

import pytest

from looptools import FakeTransform, RankedDiagnoser, checkout_state, rec, untouched
from test_command_mode import lse_cmd, runs  # noqa: F401  (the counting fixture)
from cutile_diag.loop.costs import split_line


def make(repo, transforms, recs, spec, **opts):
    from cutile_diag.loop.backends import CommandBackend, ReplayBackend, SimSpec, SimulatedBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    py = sys.executable
    cb = CommandBackend(f"CUTILE_DIAG_LAUNCH_EXECUTE=0 {py} check.py", f"{py} bench.py")
    options = LoopOptions(**opts)
    before = checkout_state(repo)
    s, led = create_session(f"{repo / 'row_lse.py'}::row_lse", backend=cb.describe(), options=options.to_json())
    cb.log_dir = s.state_dir / "logs"
    rb = ReplayBackend(cb, s.state_dir / "replay", kernel="row_lse", inner=SimulatedBackend(SimSpec.from_json(spec)))
    r = Runner(s, rb, led, diagnoser=RankedDiagnoser(recs), transforms=transforms, options=options)
    r.user_checkout = before
    return r, rb


SPEC = {"configs": {"row_lse-64x300": 0.2}, "effects": {"fast": 0.8, "faster": 0.85, "slow": 1.5},
        "incorrect": ["wrong"], "noise": 0.001, "run_noise": 0.0005}


def test_four_steps_run_the_bench_command_twice_and_the_test_command_once_per_kept_step(lse_cmd):  # noqa: F811
    repo, count = lse_cmd
    ts = {n: FakeTransform(n, p) for n, p in (("fast", "A"), ("wrong", "B"), ("faster", "C"), ("slow", "D"))}
    r, rb = make(repo, ts, [rec("A", "fast"), rec("B", "wrong"), rec("C", "faster"), rec("D", "slow")], SPEC,
                 max_iterations=4, rounds=2, capture=False)
    res = r.start()
    its = r.led.iterations[1:]
    assert [(i["optimization"].rsplit(": ", 1)[1], i["status"]) for i in its] == \
        [("fast", "keep"), ("wrong", "revert"), ("faster", "keep"), ("slow", "revert")]
    seen = runs(count)
    kept = sum(1 for i in its if i["status"] == "keep")
    assert seen.count("bench") == 2 and len(seen) - seen.count("bench") == 1 + kept
    assert seen[0] == "check observed" and seen[1] == "bench" and seen[-1] == "bench"
    # the wrong candidate: its replayed outputs differ, reverted as incorrect, the test command never ran for it
    wrong = its[1]
    assert wrong["correctness"] == "FAIL" and wrong["decision"]["rule"] == "correctness"
    assert "test_cmd" not in wrong and all("test_cmd" in i for i in its if i["status"] == "keep")
    # what only a keep pays (the test command) is its own phase of the step's cost split
    assert all(("confirm" in i["step_costs"]) == (i["status"] == "keep") for i in its)
    assert "confirm" in split_line(its[0]["step_costs"]) and "(the test command)" in split_line(its[0]["step_costs"])
    # start and final in the suite's own numbers, next to the replayed ratio
    suite = r.led.of_type("suite")
    assert [s["when"] for s in suite] == ["start", "end"] and suite[1]["digest"] == its[2]["digest"]
    # the fixture's bench reads `fake:fast` only (x0.8); the replay measured both kept steps (x0.68)
    assert abs(suite[1]["suite_ratio"] - 0.8) < 1e-6 and suite[1]["replay_ratio"] < 0.72 and "disagrees" in suite[1]
    assert res.stop_rule == "max-iterations" and untouched(repo, r)


def test_a_resumed_loop_checks_on_the_recording_without_running_the_baseline_s_commands_again(lse_cmd):  # noqa: F811
    """A campaign resumes each loop in a new process: its baseline was checked by the test command, recorded and
    benched in the earlier run (the ledger says so), so the first check is a replayed one and the suite's start
    is the recorded one (on an H100 the repeat cost a resumed loop 40-60 s of its share)."""
    from cutile_diag.loop.backends import CommandBackend, ReplayBackend, SimSpec, SimulatedBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    repo, count = lse_cmd
    ts = {n: FakeTransform(n, p) for n, p in (("fast", "A"), ("faster", "C"))}
    recs = [rec("A", "fast"), rec("C", "faster")]
    r, rb = make(repo, ts, recs, SPEC, max_iterations=1, rounds=2, capture=False)
    r.start()
    first = runs(count)
    assert first[:2] == ["check observed", "bench"] and r.led.iterations[1]["status"] == "keep"
    # a new process: a new backend over the same recordings, the same ledger
    py = sys.executable
    cb = CommandBackend(f"CUTILE_DIAG_LAUNCH_EXECUTE=0 {py} check.py", f"{py} bench.py")
    rb2 = ReplayBackend(cb, rb.replay_dir, kernel="row_lse", inner=SimulatedBackend(SimSpec.from_json(SPEC)))
    r2 = Runner(r.s, rb2, r.led, diagnoser=RankedDiagnoser(recs), transforms=ts,
                options=LoopOptions(max_iterations=2, rounds=2, capture=False))
    r2.user_checkout = r.user_checkout
    r2.start()
    again = runs(count)                        # (runs() empties the fixture's count)
    its = r2.led.iterations
    assert [i["status"] for i in its[1:]] == ["keep", "keep"]
    # only the kept step's test command and the end's bench command: no baseline check, no second start bench
    assert "check observed" not in again and again.count("bench") == 1 and len(again) == 2, again
    # one start (the recorded one); an end per run that kept something new
    suite = r2.led.of_type("suite")
    assert [s["when"] for s in suite] == ["start", "end", "end"] and suite[2]["digest"] == its[2]["digest"]


def test_without_a_recording_it_is_command_mode(lse_cmd):  # noqa: F811
    """No launch of the kernel recorded for replay (the fixture's bench launches nothing): the loop
    measures with the user's commands, as --no-replay does."""
    from cutile_diag.loop.backends import CommandBackend, ReplayBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    repo, count = lse_cmd
    py = sys.executable
    cb = CommandBackend(f"CUTILE_DIAG_LAUNCH_EXECUTE=0 {py} check.py", f"{py} bench.py")
    s, led = create_session(f"{repo / 'row_lse.py'}::row_lse", backend=cb.describe(), options={})
    rb = ReplayBackend(cb, s.state_dir / "replay", kernel="row_lse")
    r = Runner(s, rb, led, diagnoser=RankedDiagnoser([]), transforms={},
               options=LoopOptions(max_iterations=1, rounds=1, capture=False))
    r.start()
    # the bench run that would have recorded, then the baseline's timing by the commands
    assert runs(count) == ["check observed", "bench", "bench"] and rb.costly_runs and not rb.replaying
    assert "recorded no executed launch of row_lse" in r.led.iterations[0]["verification"]["observed"]["replay"]
    assert not r.led.of_type("suite")


def test_a_disagreement_with_the_suite_is_placed_per_configuration(tmp_path):
    """Each recording names the test it came from, and the suite's bench reports per test: the replays' paired ratio
    per recording beside the suite's own (an H100 layer norm: 1.48x and 1.077x at n=256, 1.026x and 0.973x at 1024)."""
    import json
    from types import SimpleNamespace
    from cutile_diag.ledger import Ledger
    from cutile_diag.loop.runner import Runner

    def it(i, d, base, ratios):
        return {"type": "iteration", "iteration": i, "digest": d, "base_digest": base, "status": "keep",
                "comparison": {"ratio": 1.0}, "configs": {c: {"ratio": x} for c, x in ratios.items()}}
    recs = [{"type": "setup"}, it(0, "o", "o", {}), it(1, "a", "o", {"r256": 0.71, "r1024": 0.975}),
            it(2, "b", "a", {"r256": 0.95, "r1024": 1.0})]
    (tmp_path / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    me = SimpleNamespace(led=Ledger.load(tmp_path),
                         backend=SimpleNamespace(suite_configs=lambda: {"r256": "t[n=256]", "r1024": "t[n=1024]",
                                                                        "r9": "t[gone]"}))
    rows = Runner._suite_by_config(me, {"t[n=256]": 0.0152, "t[n=1024]": 0.0455}, {"t[n=256]": 0.0141, "t[n=1024]": 0.0468})
    assert [(x["test"], round(x["replayed"], 4), round(x["suite"], 4)) for x in rows] == \
        [("t[n=256]", 0.6745, 0.9276), ("t[n=1024]", 0.975, 1.0286)]


def test_a_bare_replay_skips_a_wrapper_change_it_would_not_time(lse_cmd, monkeypatch):  # noqa: F811
    """Recordings without a wrapper call replay the recorded launch: a change to the wrapper (its tile size) would
    time the kept version again, so it is skipped, saying why; a change inside the kernel is still measured."""
    from test_command_mode import _Edit
    repo, count = lse_cmd
    ts = {"wrap": _Edit("wrap", "A", "tile_n = 1 << (n - 1)", "tile_n = 2 << (n - 1)"),
          "fast": _Edit("fast", "B", "ct.exp(x - m.reshape((1, 1)))",
                        "ct.exp2((x - m.reshape((1, 1))) * 1.4426950408889634)")}
    r, rb = make(repo, ts, [rec("A", "wrap"), rec("B", "fast")], SPEC, max_iterations=2, rounds=2, capture=False)
    # the fixture's bench records nothing (no GPU): the recordings as a launch made in a method leaves them
    bare = {"kernel": {"name": "row_lse"}, "executed": True, "wrapper": None,
            "wrapper_missing": "the launch is made by _Op.forward"}
    monkeypatch.setattr(rb, "_recordings", lambda: [(rb.replay_dir / "row_lse-0", bare)])
    r.start()
    its = r.led.iterations[1:]
    assert [i["optimization"].rsplit(": ", 1)[1] for i in its] == ["fast"]
    a = r.led.iterations[0]
    why = r.untimed({"row_lse.py": (repo / "row_lse.py").read_text()},
                    {"row_lse.py": (repo / "row_lse.py").read_text().replace("1 << (n - 1)", "2 << (n - 1)")})
    assert why and "bare launch" in why and "_Op.forward" in why and a["iteration"] == 0
    # a resumed loop chooses its first step before its first check starts the workers: the recordings say it
    from cutile_diag.loop.backends import ReplayBackend
    fresh = ReplayBackend(rb.cmd, rb.replay_dir, kernel="row_lse")
    monkeypatch.setattr(fresh, "_recordings", lambda: [(rb.replay_dir / "row_lse-0", bare)])
    assert fresh.inner is None and "bare launch" in fresh.host_untimed()
    # with the wrapper recorded, the same change is timed
    monkeypatch.setattr(rb, "_recordings", lambda: [(rb.replay_dir / "row_lse-0", {**bare, "wrapper": {"name": "f"}})])
    rb._bare = None
    assert r.untimed({"row_lse.py": "x = 1"}, {"row_lse.py": "x = 2"}) is None


def test_recorded_by_a_survey_the_suites_start_run_waits_for_a_kept_step(lse_cmd, monkeypatch):  # noqa: F811
    """Launches recorded before the loop (a campaign's survey): the baseline runs no bench command; the start runs at
    the end beside the final version when a step was kept, and not at all when none was."""
    repo, count = lse_cmd
    recorded = {"kernel": {"name": "row_lse"}, "executed": True, "wrapper": {"name": "launch"}}
    ts = {"fast": FakeTransform("fast", "A"), "slow": FakeTransform("slow", "B")}
    r, rb = make(repo, ts, [rec("A", "fast"), rec("B", "slow")], SPEC, max_iterations=2, rounds=2, capture=False)
    monkeypatch.setattr(rb, "_recordings", lambda: [(rb.replay_dir / "row_lse-0", recorded)])
    r.start()
    seen = runs(count)
    assert [i["status"] for i in r.led.iterations[1:]] == ["keep", "revert"]
    # no capture: the baseline is checked on the recordings; the keep's test command, then the start and the final
    # bench runs side by side at the end
    assert seen == ["check", "bench", "bench"]
    assert r.led.iterations[0]["verification"]["observed"]["test_cmd"] == "deferred"
    start, end = r.led.of_type("suite")
    assert start["when"] == "start" and start["deferred"] and start["digest"] == r.led.iterations[0]["digest"]
    assert end["when"] == "end" and abs(end["suite_ratio"] - 0.8) < 1e-6


def test_recorded_by_a_survey_a_loop_that_keeps_nothing_runs_no_bench_command(lse_cmd, monkeypatch):  # noqa: F811
    repo, count = lse_cmd
    recorded = {"kernel": {"name": "row_lse"}, "executed": True, "wrapper": {"name": "launch"}}
    r, rb = make(repo, {"slow": FakeTransform("slow", "B")}, [rec("B", "slow")], SPEC, max_iterations=1, rounds=2,
                 capture=False)
    monkeypatch.setattr(rb, "_recordings", lambda: [(rb.replay_dir / "row_lse-0", recorded)])
    r.start()
    assert runs(count) == [] and r.led.of_type("suite") == []


def test_recorded_by_a_survey_tests_failing_on_the_unchanged_kernel_stop_the_loop_at_the_first_keep(
        lse_cmd, monkeypatch):  # noqa: F811
    """The deferred baseline test command: a keep's test failure is checked against the unchanged kernel, and one it
    shares stops the loop in one line instead of reverting every step as incorrect."""
    from cutile_diag.loop.errors import BackendError
    from looptools import git
    repo, count = lse_cmd
    (repo / "row_lse.py").write_text((repo / "row_lse.py").read_text() + "\n# WRONG: a broken test suite\n")
    git(repo, "commit", "-qam", "tests fail")
    recorded = {"kernel": {"name": "row_lse"}, "executed": True, "wrapper": {"name": "launch"}}
    r, rb = make(repo, {"fast": FakeTransform("fast", "A")}, [rec("A", "fast")], SPEC, max_iterations=1, rounds=2,
                 capture=False)
    monkeypatch.setattr(rb, "_recordings", lambda: [(rb.replay_dir / "row_lse-0", recorded)])
    with pytest.raises(BackendError, match="fails on the unchanged kernel too"):
        r.start()
    assert runs(count) == ["check", "check"] and untouched(repo, r)
