"""Measurement the loop can trust: the iteration budget planner, screening that does not
mislead, no noise-level keeps under --continue, options that do not leak into --resume,
rows named after what ran, crash rows that do not claim PASS."""
import json
import sys
import time

import pytest
from looptools import FakeTransform, RankedDiagnoser, dirty, make_loop, rec, reload_runner, table_rows, untouched


# --- the planner (pure arithmetic) ------------------------------------------------------

def test_plan_screens_fewer_points_when_the_budget_is_short():
    from cutile_diag.loop.budget import Costs, plan
    c = Costs(verify_s=20, run_s=18, capture_s=2)
    full = plan(4, c, 1000, rounds=3)
    assert (full.screen, full.skipped, full.confirm_rounds, full.notes) == ([0, 1, 2, 3], [], 3, [])
    short = plan(4, c, 300, rounds=3)
    assert short.screen == [0, 1, 2] and short.skipped == [3] and short.fits
    assert short.estimate_s <= 300 * 0.85 and "screening 3 of 4 settings" in short.notes[0]
    # fewer confirmation rounds (down to 2) come before fewer points
    assert short.confirm_rounds == 2
    tiny = plan(4, c, 30, rounds=3)
    assert tiny.screen == [0] and not tiny.fits
    # nothing known (no baseline costs) or no budget: everything is planned
    assert plan(4, Costs(), 10, rounds=3).screen == [0, 1, 2, 3]


def test_costs_come_from_the_baseline_and_grow_with_slower_iterations():
    from cutile_diag.loop.budget import costs_from_ledger
    c = costs_from_ledger([{"costs": {"verify_s": 1.0, "run_s": 2.0, "capture_s": 0.5}}, {"costs": {"run_s": 3.0}},
                           {"iteration": 2}])
    assert (c.verify_s, c.run_s, c.capture_s) == (1.0, 3.0, 0.5)


def test_a_check_costs_what_the_latest_step_measured_not_the_baselines_cold_start():
    """The baseline's check starts the measuring process and compiles cold (10 s on the H200 for
    TileGym softmax); a step's checks run in processes started ahead: the plan follows the step."""
    from cutile_diag.loop.budget import costs_from_ledger, plan
    base = {"costs": {"verify_s": 10.0, "run_s": 0.1, "capture_s": 6.0}}
    step = {"costs": {"run_s": 0.12, "compile_s": 2.5, "verify_s": 1.5}}
    c = costs_from_ledger([base, step, {"iteration": 2, "costs": {"run_s": 0.11}}])
    assert (c.verify_s, c.run_s, c.compile_s) == (1.5, 0.12, 2.5)
    assert plan(4, costs_from_ledger([base]), 30, rounds=2).skipped          # planned with the cold check
    assert not plan(4, c, 30, rounds=2, compile_workers=16, check_workers=4).skipped


# --- a command-mode loop with slow commands -----------------------------------------------

SLOW_CHECK = """
import sys, time
time.sleep(0.3)
sys.exit(0)
"""

SLOW_BENCH = """
import time
src = open("vector_add.py").read()
time.sleep(0.45)
f = 0.85 if "v=2" in src else 1.0
m = 0.1 * f
print("tests/test_vector_add.py::test_perf[1M-float32-cutile] ")
print("Cutile: {'forward': {'mean': %r, 'std': 0.0001, 'rel_std': 0.1, 'median': %r, 'min': %r, 'max': %r, "
      "'nrep': 50}} ms" % (m, m, m, m))
print("PASSED")
"""


def test_a_sweep_with_slow_commands_fits_its_budget(repo):
    """The issue's TileGym case, scaled down: every run of the benchmark takes a while, the
    budget cannot hold four screened points (even screened unchecked against one run of the kept
    version, as command mode screens); the plan screens fewer, names the rest ``skipped (budget)``
    and the iteration completes (no crash, nothing killed)."""
    from cutile_diag.loop.backends import CommandBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    from looptools import git
    (repo / "check.py").write_text(SLOW_CHECK)
    (repo / "bench.py").write_text(SLOW_BENCH)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "slow harness")
    sweep = FakeTransform("kernel_hints", "C", params=[{"v": 1}, {"v": 2}, {"v": 3}, {"v": 4}])
    cb = CommandBackend(f"{sys.executable} check.py", f"{sys.executable} bench.py")
    options = LoopOptions(capture=False, rounds=2, max_sweep=4, max_iterations=1, iteration_budget_s=6)
    s, led = create_session(f"{repo / 'vector_add.py'}::vector_add", backend=cb.describe(), options=options.to_json())
    r = Runner(s, cb, led, diagnoser=RankedDiagnoser([rec("C", "kernel_hints")]), transforms={"kernel_hints": sweep},
               options=options)
    from looptools import checkout_state
    r.user_checkout = checkout_state(repo)
    r.start()
    base, it = r.led.iterations
    assert base["costs"]["run_s"] >= 0.4 and base["costs"]["verify_s"] >= 0.25
    assert it["status"] in ("keep", "revert") and it["decision"]["rule"] != "crash" and it["seconds"] <= 6
    assert it["plan"]["skipped"] and it["plan"]["estimate_s"] <= 6
    skipped = [p for p in it["sweep"] if p.get("failure") == "budget"]
    assert skipped and all(p["result"] == "skipped (budget)" for p in skipped)
    assert len(skipped) == len(it["plan"]["skipped"]) and dirty(r.s.worktree) == [] and untouched(repo, r)
    # the row names the sweep by what it varied
    assert table_rows(r)[1]["optimization"].startswith("C kernel_hints")


def test_no_crash_row_claims_pass_when_every_point_is_killed(repo):
    ts = {"kernel_hints": FakeTransform("kernel_hints", "C", params=[{"v": 1}, {"v": 2}])}
    r = make_loop(repo, {"crash": ["kernel_hints"]}, recs=[rec("C", "kernel_hints")], transforms=ts,
                  max_iterations=1)
    r.start()
    it = r.led.iterations[1]
    assert it["status"] == "crash" and it["correctness"] == "-"
    assert table_rows(r)[1]["correctness"] == "-"
    assert all(p["result"].startswith("crash in screening") for p in it["sweep"])


# --- screening that does not mislead ---------------------------------------------------------

def test_a_screened_winner_that_loses_its_confirmation_is_dropped(repo):
    """Screening says v=1 is fastest; its confirmation says it is slower: the next-best
    screened point (v=2, really faster) is confirmed and kept in the same iteration."""
    ts = {"kernel_hints": FakeTransform("kernel_hints", "C", params=[{"v": 1}, {"v": 2}, {"v": 3}])}
    spec = {"effects": {'kernel_hints{"v": 1}': 1.05, 'kernel_hints{"v": 2}': 0.90, 'kernel_hints{"v": 3}': 1.0}}
    r = make_loop(repo, spec, recs=[rec("C", "kernel_hints")], transforms=ts, max_iterations=1)
    real = r.backend.measure

    def lying_screen(versions, ws, deadline, rounds):
        out = real(versions, ws, deadline, rounds)
        if rounds == r.opt.screen_rounds and versions[-1].label.endswith("/1"):
            from cutile_diag.loop.stats import RunStat
            out[versions[-1].label] = {c: [RunStat(x.median * 0.7, x.rel_std, x.nrep) for x in rs]
                                       for c, rs in out[versions[-1].label].items()}
        return out
    r.backend.measure = lying_screen
    r.start()
    it = r.led.iterations[1]
    assert [c["params"] for c in it["confirmations"]] == [{"v": 1}, {"v": 2}]
    assert it["confirmations"][0]["status"] == "revert"
    assert (it["status"], it["decision"]["rule"]) == ("keep", "keep-baseline")
    assert it["change"]["params"] == {"v": 2} and next(p for p in it["sweep"] if p["chosen"])["params"] == {"v": 2}
    assert 'v": 2' in (r.s.worktree / "vector_add.py").read_text() and dirty(r.s.worktree) == []
    assert untouched(repo, r)
    assert "v=" not in it["optimization"] or "2" in it["optimization"]


def test_a_confirmation_that_keeps_is_not_called_lost_and_the_row_s_candidate_is_saved(repo):
    """Both confirmed settings gain < 2 % (keep-stop, not an improvement): the first is the row.
    The output says so in order (no "lost its confirmation" after a line that kept it) and
    iterations/<n>/ holds the kept setting, not the last one confirmed."""
    ts = {"kernel_hints": FakeTransform("kernel_hints", "C", params=[{"v": 1}, {"v": 2}, {"v": 3}])}
    spec = {"noise": 0.0005, "run_noise": 0.0,
            "effects": {'kernel_hints{"v": 1}': 0.988, 'kernel_hints{"v": 2}': 0.994, 'kernel_hints{"v": 3}': 1.03}}
    r = make_loop(repo, spec, recs=[rec("C", "kernel_hints")], transforms=ts, max_iterations=1)
    lines = []
    r.echo = lines.append
    r.start()
    it = r.led.iterations[1]
    assert [c["params"] for c in it["confirmations"]] == [{"v": 1}, {"v": 2}]
    assert [c["rule"] for c in it["confirmations"]] == ["keep-stop", "keep-stop"]
    assert it["status"] == "keep" and it["change"]["params"] == {"v": 1}
    text = "\n".join(lines)
    assert "lost its confirmation" not in text
    first = next(ln for ln in lines if "% (" in ln and "->" in ln)
    assert "keep unless a later setting does better" in first
    assert "did not gain enough in its confirmation (keep-stop)" in text
    assert 'the row takes kernel_hints {\'v\': 1}, the best of 2 confirmed settings -> keep' in text
    idir = r.s.iteration_dir(1)
    saved = (idir / "vector_add.py").read_text()
    assert '# fake:kernel_hints{"v": 1}' in saved and '"v": 2' not in saved
    assert '"v": 1' in (idir / "candidate.diff").read_text() and '"v": 2' not in (idir / "candidate.diff").read_text()
    assert (r.s.worktree / "vector_add.py").read_text() == saved


# --- --continue: noise-level steps are reverted -----------------------------------------------

def test_continue_reverts_a_step_whose_ci_includes_no_change(repo):
    ts = {"noop": FakeTransform("noop", "A"), "fast": FakeTransform("fast", "B")}
    spec = {"effects": {"fast": 0.9}}
    r = make_loop(repo, spec, recs=[rec("A", "noop"), rec("B", "fast")], transforms=ts, keep_going=True,
                  max_iterations=2)
    r.start()
    noop, fast = r.led.iterations[1:]
    assert (noop["status"], noop["decision"]["rule"]) == ("revert", "insignificant")
    text = (r.s.worktree / "vector_add.py").read_text()
    assert "# fake:noop" not in text and "# fake:fast" in text and untouched(repo, r)
    assert (fast["status"], fast["decision"]["rule"]) == ("keep", "keep-baseline")


def test_without_continue_a_no_change_step_is_kept_and_the_loop_stops(repo):
    ts = {"noop": FakeTransform("noop", "A")}
    r = make_loop(repo, {}, recs=[rec("A", "noop")], transforms=ts)
    res = r.start()
    assert r.led.iterations[1]["decision"]["rule"] == "keep-stop" and res.stop_rule == "below-threshold"


def test_decide_rule_is_unit_tested_on_a_comparison():
    from cutile_diag.loop import decide, stats
    a = [stats.RunStat(1.0, 0.2, 100) for _ in range(3)]
    same = stats.compare({"c": (a, [stats.RunStat(0.999, 0.2, 100) for _ in range(3)])})
    assert decide.decide(same).status == "keep"
    d = decide.decide(same, keep_going=True)
    assert (d.status, d.rule, d.improved) == ("revert", "insignificant", False)
    faster = stats.compare({"c": (a, [stats.RunStat(0.9, 0.2, 100) for _ in range(3)])})
    assert decide.decide(faster, keep_going=True).rule == "keep-baseline"


# --- options given once ------------------------------------------------------------------------

def test_continue_is_not_inherited_by_a_plain_resume(repo):
    from cutile_diag.loop.runner import LoopOptions
    assert LoopOptions.from_json({"keep_going": True, "rounds": 4}).keep_going is False
    assert LoopOptions.from_json({"keep_going": True}, keep_going=True).keep_going is True
    ts = {"tiny": FakeTransform("tiny", "A"), "tiny2": FakeTransform("tiny2", "B"), "x": FakeTransform("x", "C")}
    spec = {"effects": {"tiny": 0.985, "tiny2": 0.985}}
    r = make_loop(repo, spec, recs=[rec("A", "tiny"), rec("B", "tiny2"), rec("C", "x")], transforms=ts,
                  keep_going=True, max_iterations=1)
    r.start()
    assert r.led.iterations[1]["decision"]["rule"] == "keep-stop"
    r2 = reload_runner(repo, r, max_iterations=5)        # a plain --resume: no keep_going given
    assert r2.opt.keep_going is False
    res = r2.run()
    assert res.stop_rule == "below-threshold" and len(r2.led.iterations) == 2


def test_cli_resume_without_continue_says_so(repo, tmp_path, capsys):
    from cutile_diag.cli import main
    spec = tmp_path / "sim.json"
    spec.write_text(json.dumps({"configs": {"s": 0.05}, "effects": {"latency_hints": 0.995}}))
    ref = f"{repo / 'vector_add.py'}::vector_add"
    assert main(["optimize", ref, "--simulate", str(spec), "--no-capture", "--rounds", "2", "--continue",
                 "--max-iterations", "1", "--only", "E", "--json"]) == 0
    capsys.readouterr()
    assert main(["optimize", "--resume", ref, "--max-iterations", "3"]) == 0
    err = capsys.readouterr().err
    assert "--continue applied to the earlier run only" in err


# --- row labels ---------------------------------------------------------------------------------

def test_a_row_names_the_transform_that_ran_not_the_entry_title(repo):
    """An entry whose own transform has nothing to do runs its alternative: the row says so."""
    class Nothing(FakeTransform):
        def candidates(self, source, kernel):
            return []
    ts = {"tile_size_sweep": Nothing("tile_size_sweep", "G"),
          "kernel_hints": FakeTransform("kernel_hints", "G", params=[{"occupancy": 1}, {"occupancy": 2}])}
    r = make_loop(repo, {"effects": {'kernel_hints{"occupancy": 2}': 0.9}},
                  recs=[rec("G", "tile_size_sweep", name="Tile-size sweep", alternatives=["kernel_hints"])],
                  transforms=ts, max_iterations=1)
    r.start()
    it = r.led.iterations[1]
    row = table_rows(r)[1]["optimization"]
    assert row.startswith("G kernel_hints (in place of tile_size_sweep): ") and "tile-size" not in row.lower()
    assert it["entry"]["transform"] == "kernel_hints" and it["entry"]["alternative_of"] == "tile_size_sweep"
    from cutile_diag.loop.choose import Candidate, row_label
    from looptools import FakeResult
    cands = [Candidate(None, FakeResult("kernel_hints", "", f"occupancy={o}"), {"occupancy": o}) for o in (1, 2)]
    assert row_label("C", "kernel_hints", "kernel_hints", cands) == "C kernel_hints: occupancy sweep (2 settings)"


def test_a_step_that_cannot_fit_the_budget_stops_the_loop_instead_of_crashing(repo):
    """One run takes 0.4 s; a comparison needs two; the budget is 0.65 s: no iteration is started
    (nothing is tried, nothing recorded as a crash) and the stop says what budget it needs."""
    ts = {"fast": FakeTransform("fast", "A")}
    r = make_loop(repo, {"effects": {"fast": 0.8}}, recs=[rec("A", "fast")], transforms=ts, rounds=1,
                  iteration_budget_s=0.65)
    real = r.backend.measure

    def slow(versions, ws, deadline, rounds):
        time.sleep(0.4 * len(versions) * rounds)
        return real(versions, ws, deadline, rounds)
    r.backend.measure = slow
    res = r.start()
    assert res.stop_rule == "budget" and "raise it with --budget" in res.stop_reason
    assert len(r.led.iterations) == 1 and not [b for b in r.led.of_type("begin") if b["iteration"] == 1]
    assert dirty(r.s.worktree) == [] and untouched(repo, r)


def test_a_sweep_point_gets_the_time_its_capture_and_check_need(repo):
    """H200, TileGym rms_norm: a 2-point occupancy sweep with ~26 s per point check and ~25 s
    left was planned down to one point, which was then killed at half of what was left.
    A point now gets what is left minus the estimated cost of the work after it."""
    from cutile_diag.loop import budget as budget_mod, proc
    r = make_loop(repo)
    r.costs = lambda: budget_mod.Costs(verify_s=8.0, run_s=0.1, capture_s=18.0)
    plan = budget_mod.plan(1, r.costs(), 30.0, rounds=2, margin=1.0)
    share = r._share(proc.Deadline(30.0), 2, r._after_s(plan, 0, 0))
    assert share.remaining() > 28.0                     # the old equal share: 15 s
    # three points: the first may not eat the time the other two checks are estimated to need
    plan3 = budget_mod.plan(3, r.costs(), 100.0, rounds=2, margin=1.0)
    first = r._share(proc.Deadline(100.0), 4, r._after_s(plan3, 2, 3))
    assert 25.0 <= first.remaining() <= 100.0 - 2 * 26.0
    # at most twice the point's own estimate: 26 s of capture and check may take 52 s, not all 100
    mine = r._share(proc.Deadline(100.0), 2, r._after_s(plan, 0, 0), r._point_s(plan, check=True))
    assert 50.0 <= mine.remaining() <= 52.0
    # without baseline costs: the equal share, as before
    r.costs = lambda: budget_mod.Costs()
    assert r._share(proc.Deadline(40.0), 4, r._after_s(plan, 0, 0)).remaining() <= 10.0


def test_a_screened_point_killed_while_confirming_is_out_of_time_not_a_crash(repo):
    """H200, TileGym softmax: a latency sweep's winner measured fine in screening, then its
    confirmation ran into the iteration's budget and was killed; that is the clock, not a hang of
    the candidate: the row is a budget revert with the screening latency, never a crash."""
    from cutile_diag.loop.backends import SimulatedBackend
    sweep = FakeTransform("kernel_hints", "C", params=[{"v": 1}, {"v": 2}])
    r = make_loop(repo, {"effects": {'kernel_hints{"v": 2}': 0.9}}, recs=[rec("C", "kernel_hints")],
                  transforms={"kernel_hints": sweep}, max_iterations=1, rounds=2)
    screened: set[str] = set()
    plain = SimulatedBackend.measure

    def measure(versions, ws, deadline, rounds):
        pair = tuple(v.label for v in versions)
        if pair in screened:                    # the second sitting of a screened pair: the confirmation
            r.backend._hang(versions[1], deadline, "measuring")
        screened.add(pair)
        return plain(r.backend, versions, ws, deadline, rounds)
    r.backend.measure = measure
    r.opt.iteration_budget_s = 6
    r.start()
    it = r.led.iterations[-1]
    assert it["status"] == "revert" and it["decision"]["rule"] == "budget"
    assert "time budget ran out while confirming" in it["decision"]["reason"]
    assert it["latency_ms"] is not None and it["latency_source"] == "screening"
    assert it["correctness"] == "not checked (simulated)"          # the point's check passed before the clock ran out


@pytest.mark.parametrize("beam", [1, None])
def test_a_gain_whose_test_command_the_clock_cut_is_tried_again_first(repo, beam):
    """H200, TileGym geglu in a campaign: BLOCK_SIZE 256 -> 512 measured 0.90x (CI 0.897-0.909) on the recordings,
    then the kernel's time slice ended during the test command that confirms a keep.  The step was reverted without a
    verdict, and the next slices went to other entries and never offered it again.  Cut by the clock, a candidate is
    offered once more, and its measured gain puts it first."""
    from cutile_diag.loop.errors import MeasurementTimeout
    ts = {"tile": FakeTransform("tile", "G", params=[{"v": 512}]), "hint": FakeTransform("hint", "C")}
    r = make_loop(repo, {"effects": {'tile{"v": 512}': 0.9, "hint": 0.995}}, recs=[rec("G", "tile"), rec("C", "hint")],
                  transforms=ts, max_iterations=1, rounds=2, beam=beam)
    tests_run = []

    def confirm_keep(v, ws, deadline):
        tests_run.append(v.label)
        if len(tests_run) == 1:                 # the slice's --time-limit ends during the test command
            r.time_left = lambda: 0.5
            raise MeasurementTimeout("the test command was killed at the time budget", label=v.label)
        return None
    r.backend.suite, r.backend.confirm_keep = True, confirm_keep
    r.start()
    cut = r.led.iterations[-1]
    assert cut["decision"]["rule"] == "budget" and cut["comparison"]["ratio"] < 0.95
    assert r.led.attempted() == set() and not r.led.tried()
    r2 = reload_runner(repo, r, max_iterations=2)
    r2.backend.suite, r2.backend.confirm_keep = True, confirm_keep
    r2.run()
    again = r2.led.iterations[2]
    assert again["change"]["params"] == {"v": 512} and again["status"] == "keep"
    assert len(tests_run) == 2


def test_a_candidate_the_clock_cuts_twice_counts_as_tried():
    from cutile_diag.ledger import Ledger
    led = Ledger.__new__(Ledger)
    cut = {"type": "iteration", "status": "revert", "base_digest": "a", "entry": {"id": "G"},
           "change": {"tried": [{"transform": "tile", "params": {"v": 512}}]}, "decision": {"rule": "budget"}}
    led.records = [{"type": "iteration", "iteration": 0, "status": "keep", "digest": "a"}, {**cut, "iteration": 1}]
    assert led.attempted() == set() and not led.tried()
    led.records.append({**cut, "iteration": 2})
    assert led.attempted() == {("a", "tile", '{"v": 512}')} and led.tried() == {"G": 1}
