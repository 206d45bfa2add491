"""Issue 21, items 3-5: a sweep's candidates compile concurrently (real cuTile AOT compiles, the
ledger's compile intervals overlap) and each step's cost split is recorded and shown; a budget
too small for one step is refused before any iteration, naming the smallest that works; the
loop targets the measured ceiling and measures one first when none is cached."""
from __future__ import annotations

import json
import math
import sys

import pytest

from looptools import FakeTransform, RankedDiagnoser, git, make_loop, rec, untouched

from cutile_diag.loop import budget as budget_mod
from cutile_diag.loop.costs import _busy, overlapping, split_line
from cutile_diag.loop.decide import roof_pct_of


def test_busy_time_counts_overlaps_once_and_overlap_is_detected():
    assert _busy([(0, 2), (1, 3), (5, 6)]) == 4
    a = {"start": "2026-01-01T00:00:00.000+00:00", "end": "2026-01-01T00:00:02.000+00:00"}
    b = {"start": "2026-01-01T00:00:01.000+00:00", "end": "2026-01-01T00:00:03.000+00:00"}
    c = {"start": "2026-01-01T00:00:03.500+00:00", "end": "2026-01-01T00:00:04.000+00:00"}
    assert overlapping([a, b]) and not overlapping([a, c])
    line = split_line({"compile": {"s": 2.0}, "check": {"s": 1.0}, "compiles": [a, b]})
    assert line == "compile 2.0 s (2 in parallel) · check 1.0 s"
    from cutile_diag.loop.costs import StepClock
    clock = StepClock()
    clock.add("time", 10.0, 13.0)
    clock.count("time", requests=3, worker_s=1.25)
    clock.count("time", requests=2, worker_s=1.0)
    assert clock.to_json()["time"]["requests"] == 5 and clock.to_json()["time"]["worker_s"] == 2.25
    assert split_line(clock.to_json()).startswith("time 3.0 s (5 runs, 2.2 s of them timing)")


def _hints():
    """kernel_hints restricted to four settings that each change vector_add's machine code (its
    occupancy settings compile to the kept SASS: no-ops, never screened)."""
    from cutile_diag.transforms.kernel_hints import KernelHints

    class Hints(KernelHints):
        SETTINGS = ({"num_ctas": 2}, {"num_ctas": 4}, {"num_worker_warps": 8},
                    {"num_ctas": 2, "num_worker_warps": 8})

        def candidates(self, source, kernel_name):
            # once a setting is kept the decorator carries it: nothing more to sweep
            return [] if "@ct.kernel(" in source else [{**h, "overwrite": True} for h in self.SETTINGS]
    return Hints()


@pytest.mark.slow
def test_a_four_candidate_sweep_compiles_concurrently(repo, capsys):
    """Real AOT compiles of the vector_add example: a hint sweep's four candidates are compiled
    at the same time in child processes, each capture (and IR diff) comes from its compile, and
    `loop status` shows where the step's time went."""
    r = make_loop(repo, {"effects": {"kernel_hints": 0.9}}, recs=[rec("C", "kernel_hints")],
                  transforms={"kernel_hints": _hints()}, capture=True, max_iterations=1)
    r.start()
    base, it = r.led.iterations
    assert base["capture"]["ok"] and base["step_costs"]["capture"]["s"] > 0
    comp = it["step_costs"]["compiles"]
    assert len(comp) == 4 and all(c["ok"] and c["source"] == "specs" for c in comp), comp
    assert overlapping(comp), comp                   # the four ran at the same time
    sc = it["step_costs"]
    assert sc["compile"]["s"] < sum(c["s"] for c in comp)       # busy time: the overlap counted once
    assert {"check", "time"} <= set(sc) and "capture" not in sc  # no run-based capture of a candidate
    assert it["ir_diff"].get("n_changes") and "skipped" not in it["ir_diff"]   # the IR diff of the compile
    assert untouched(repo, r)
    from cutile_diag.cli import main
    ref = f"{repo / 'vector_add.py'}::vector_add"
    capsys.readouterr()
    assert main(["loop", "status", ref]) == 0
    out = capsys.readouterr().out
    assert "wall time per step:" in out and "(4 in parallel)" in out
    assert main(["loop", "status", ref, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert [c["iteration"] for c in st["costs"]] == [0, 1] and len(st["costs"][1]["compiles"]) == 4



@pytest.mark.slow
def test_compile_children_started_ahead_compile_the_sweep_and_leave_nothing_running(repo, monkeypatch):
    """With spares (``CUTILE_DIAG_SPARES``, on by default on a host of 8+ cores) the sweep's
    compiles run in children started before the step, their imports done; the captures are
    the same as a fresh child's, and no child outlives the loop."""
    from cutile_diag.loop import spares
    started = []
    real = spares.Spares._start
    monkeypatch.setattr(spares.Spares, "_start", lambda self: started.append(real(self)) or started[-1])
    monkeypatch.setenv("CUTILE_DIAG_SPARES", "2")
    r = make_loop(repo, {"effects": {"kernel_hints": 0.9}}, recs=[rec("C", "kernel_hints")],
                  transforms={"kernel_hints": _hints()}, capture=True, max_iterations=1)
    r.start()
    comp = r.led.iterations[1]["step_costs"].get("compiles")
    assert comp, json.dumps(r.led.iterations[1], default=str)[:3000]
    assert len(comp) == 4 and all(c["ok"] and c["source"] == "specs" for c in comp), comp
    assert all(c["spare"] for c in comp), comp     # two started ahead, two as they were taken
    assert r.led.iterations[1]["ir_diff"].get("n_changes")
    assert len(started) == 6 and all(p.poll() is not None for p in started)   # 4 used, 2 spares closed
    assert untouched(repo, r)

CHECK = "import time; time.sleep(0.6)\n"
BENCH = """import time
time.sleep(0.5)
print("tests/test_vector_add.py::test_perf[1M-float32-cutile] ")
print("Cutile: {'forward': {'mean': 0.1, 'std': 0.0001, 'rel_std': 0.1, 'median': 0.1, 'min': 0.1, 'max': 0.1, "
      "'nrep': 50}} ms")
print("PASSED")
"""


def test_slow_commands_make_the_loop_refuse_with_the_minimum_budget(repo):
    """The baseline runs whole (a 2 s budget never kills it), then the loop refuses before any
    iteration, in one line naming the smallest --budget that fits one step."""
    from cutile_diag.loop.backends import CommandBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    (repo / "check.py").write_text(CHECK)
    (repo / "bench.py").write_text(BENCH)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "slow harness")
    cb = CommandBackend(f"{sys.executable} check.py", f"{sys.executable} bench.py")
    options = LoopOptions(capture=False, rounds=3, iteration_budget_s=2)
    s, led = create_session(f"{repo / 'vector_add.py'}::vector_add", backend=cb.describe(), options=options.to_json())
    ts = {"fast": FakeTransform("fast", "A")}
    r = Runner(s, cb, led, diagnoser=RankedDiagnoser([rec("A", "fast")]), transforms=ts, options=options)
    res = r.start()
    base = led.iterations[0]
    assert base["latency_ms"] and base["costs"]["verify_s"] >= 0.6 and base["seconds"] > 2   # not killed at 2 s
    need = budget_mod.min_budget_s(budget_mod.Costs.from_json(base["costs"]))
    assert need > 2 and res.stop_rule == "budget"
    assert f"the smallest budget that works is {need} s: raise it with --budget {need}" in res.stop_reason
    assert "\n" not in res.stop_reason and ts["fast"].applied == 0
    assert not [b for b in led.of_type("begin") if b["iteration"] == 1]
    # the budget it names does fit one step
    assert budget_mod.plan(1, budget_mod.Costs.from_json(base["costs"]), need, rounds=3).fits


def _spec(**ceiling) -> dict:
    return {"configs": {"large": 0.4}, "bytes": {"large": 1.2e9}, "effects": {"good": 0.7},
            "ceiling": ({"dram_tbps": 4.0, **ceiling} if ceiling is not None else None)}


def test_until_roof_without_a_cached_ceiling_measures_one_first(repo):
    said = []
    r = make_loop(repo, _spec(cached=False, measure_s=0.05), recs=[rec("C", "good")],
                  transforms={"good": FakeTransform("good", "C")}, until_roof=0.9, max_iterations=1)
    r.echo = said.append
    r.start()
    base = r.led.iterations[0]
    assert r.backend.calls[0] == ("measure-ceiling", "")            # before anything of the baseline
    assert base["ceiling"]["source"] == "measured" and base["ceiling"]["dram_tbps"] == 4.0
    assert any("none cached for this GPU: measuring it before the baseline" in s for s in said)
    assert said.index(next(s for s in said if "measuring it" in s)) < said.index(
        next(s for s in said if s.startswith("  baseline")))
    pct, basis = roof_pct_of(base["roofline"])
    assert basis == "measured ceiling" and abs(pct - 1.2e9 / 0.4e-3 / 4.0e12 * 100) < 1.0


def test_a_cached_ceiling_is_used_and_no_ceiling_is_said_out_loud(repo):
    said = []
    r = make_loop(repo, _spec(cached=True), recs=[], transforms={}, until_roof=0.9, branch="cached")
    r.echo = said.append
    r.start()
    assert ("measure-ceiling", "") not in r.backend.calls and r.led.iterations[0]["ceiling"]["source"] == "cached"
    r2 = make_loop(repo, {**_spec(), "ceiling": None}, recs=[], transforms={}, until_roof=0.9, branch="none")
    said.clear()
    r2.echo = said.append
    r2.start()
    assert r2.led.iterations[0]["ceiling"]["basis"] == "datasheet roof"
    assert any("% of roof is of the DATASHEET roof" in s for s in said)


def test_the_plan_counts_parallel_compiles_and_checks_once_per_batch():
    """A 4-point sweep with an 18 s capture and a 6 s check: one after another it does not fit
    120 s and a point is dropped; compiled at once (and checked at once) all four fit."""
    c = budget_mod.Costs(verify_s=6.0, run_s=1.0, capture_s=18.0)
    assert budget_mod.plan(4, c, 120.0, rounds=2).skipped
    both = budget_mod.plan(4, c, 120.0, rounds=2, compile_workers=16, check_workers=4)
    assert both.screen == [0, 1, 2, 3] and not both.skipped and both.estimate_s == 18 + 6 + 8 + 4
    assert c.iteration_s(4, 2, compile_workers=2) == 2 * 18 + 4 * 6 + 8 + 4


def test_later_steps_plan_with_a_candidates_compile_not_the_baselines_capture_run():
    """Command mode on TileGym: the baseline's capture is a second run of the test command (87 s);
    a candidate is compiled from the recorded launch in seconds: once a step has timed that, the
    plan and the smallest budget use it."""
    base = {"costs": {"verify_s": 30.0, "run_s": 16.0, "capture_s": 87.0}}
    step = {"costs": {"run_s": 15.0, "compile_s": 6.0}}
    first, later = budget_mod.costs_from_ledger([base]), budget_mod.costs_from_ledger([base, step])
    assert first.candidate_capture_s == 87.0 and later.candidate_capture_s == 6.0
    assert budget_mod.min_budget_s(later) < budget_mod.min_budget_s(first) == math.ceil((87 + 30 + 32) / 0.85)
    assert budget_mod.Costs.from_json(later.to_json()) == later


@pytest.mark.gpu
def test_a_sweeps_workers_load_at_once_each_with_its_own_files(repo):
    """``WorkloadBackend.prepare``: two versions loaded concurrently while the worktree holds the
    first; the second's (wrong) kernel text is what its worker ran — its check fails."""
    pytest.importorskip("torch")
    from cutile_diag.loop.backends import Version, WorkloadBackend, Workspace
    from cutile_diag.loop.proc import Deadline
    ws = Workspace(repo, repo / "state", ["vector_add.py"], kernel_file="vector_add.py")
    good = Version("good", ws.current())
    bad = Version("bad", {"vector_add.py": good.files["vector_add.py"].replace("tile=ta + tb", "tile=ta + tb + 1")})
    b = WorkloadBackend("examples:vector_add", kwargs={"source": str(repo / "vector_add.py")}, configs=["16M-f32"],
                        log_dir=repo / "logs")
    try:
        b.verify(good, ws, Deadline(300))             # the first load learns the configurations
        b.close()
        b.prepare([good, bad], ws, Deadline(300))
        assert set(b.workers) == {good.digest, bad.digest}     # both loaded by prepare, with their own text
        assert b.verify(good, ws, Deadline(60)).passed and not b.verify(bad, ws, Deadline(60)).passed
        assert ws.current() == good.files                      # the worktree was never written
    finally:
        b.close()


def test_a_step_that_may_keep_costs_the_test_command_that_confirms_the_keep():
    """H200 campaign: geglu's tile step was measured and decided in 28 s of a 31.7 s slice; the test command that
    confirms a keep did not fit, and the gain was cut.  A replay loop plans each step with that command in it: the
    prior until one has run, then the longest one measured (a run the clock cut counts as at least that long)."""
    base = {"iteration": 0, "costs": {"verify_s": 5.0, "run_s": 2.0}}
    plain = budget_mod.costs_from_ledger([base])
    assert plain.keep_s == 0.0
    prior = budget_mod.costs_from_ledger([base], budget_mod.KEEP_PRIOR_S)
    assert prior.keep_s == budget_mod.KEEP_PRIOR_S
    assert prior.iteration_s(1, 2) == pytest.approx(plain.iteration_s(1, 2) + budget_mod.KEEP_PRIOR_S)
    ran = {"iteration": 1, "costs": {"verify_s": 4.0}, "step_costs": {"confirm": {"s": 31.5}}}
    assert budget_mod.costs_from_ledger([base, ran], budget_mod.KEEP_PRIOR_S).keep_s == 31.5
    # nothing measured yet: no costs, no prior (the plan cuts nothing)
    assert not budget_mod.costs_from_ledger([], budget_mod.KEEP_PRIOR_S).known
    assert budget_mod.Costs.from_json(prior.to_json()) == prior
