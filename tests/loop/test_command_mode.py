"""Command mode (issue 21): every run of the user's commands counted with fake commands that
append to a file.  The baseline checks the kernel and records its launch in ONE run of the test
command (the capture compiles from that launch: no second run); a candidate whose capture needs a
run takes it from its own check; a sweep screens its points against one run of the kept version
and checks only what it confirms; the rounds are fitted to --budget from the measured run time;
every step's cost split says where its time went."""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys

import pytest

from cutile_diag.examples import EXAMPLES_DIR
from looptools import FakeTransform, RankedDiagnoser, checkout_state, git, rec, untouched

# a test command on a CPU: the launch wrapper runs on CPU tensors; under the loop's launch observer
# (CUTILE_DIAG_LAUNCH_EXECUTE=0 in the command) the launch is recorded, not executed; without the
# observer a stand-in takes it.  WRONG in the kernel file fails the check.
CHECK = """
import os, sys
observed = bool(os.environ.get("CUTILE_DIAG_LAUNCH_DIR"))
with open({count!r}, "a") as f:
    f.write("check" + (" observed" if observed else "") + "\\n")
import cuda.tile as ct
if not observed:
    ct.launch = lambda *a, **k: None
sys.path.insert(0, os.getcwd())
import torch, row_lse
row_lse.launch(torch.randn(64, 300), torch.empty(64), stream="cpu")
wrong = "WRONG" in open("row_lse.py").read()
print("1 failed in 0.1s" if wrong else "1 passed in 0.1s")
sys.exit(1 if wrong else 0)
"""

# latency from the kernel file: `fake:fast` 0.8x, `fake:slow` 1.5x; a sweep's `fake:tile{"t": N}` N/10
BENCH = """
import json, re
with open({count!r}, "a") as f:
    f.write("bench\\n")
src = open("row_lse.py").read()
m = 0.2 * (0.8 if "fake:fast" in src else 1.5 if "fake:slow" in src else 1.0)
for t in re.findall(r'fake:tile(\\{{.*\\}})', src):
    m *= json.loads(t)["t"] / 10
print("tests/test_row_lse.py::test_perf[64x300-cutile] ")
print("Cutile: {{'forward': {{'median': %r, 'rel_std': 0.2, 'nrep': 50}}}} ms" % m)
print("PASSED")
"""


@pytest.fixture
def lse_cmd(repo, tmp_path):
    shutil.copy(EXAMPLES_DIR / "row_lse.py", repo / "row_lse.py")      # no CAPTURE_SPECS
    count = tmp_path / "runs.txt"
    (repo / "check.py").write_text(CHECK.format(count=str(count)))
    (repo / "bench.py").write_text(BENCH.format(count=str(count)))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "row_lse and its commands")
    return repo, count


def runs(count) -> list[str]:
    out = count.read_text().splitlines() if count.exists() else []
    count.write_text("")
    return out


def make(repo, transforms, recs, branch=None, **opts):
    from cutile_diag.loop.backends import CommandBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    py = sys.executable
    cb = CommandBackend(f"CUTILE_DIAG_LAUNCH_EXECUTE=0 {py} check.py", f"{py} bench.py")
    options = LoopOptions(**opts)
    before = checkout_state(repo)
    s, led = create_session(f"{repo / 'row_lse.py'}::row_lse", backend=cb.describe(), options=options.to_json(),
                            branch=branch)
    cb.log_dir = s.state_dir / "logs"
    r = Runner(s, cb, led, diagnoser=RankedDiagnoser(recs), transforms=transforms, options=options)
    r.user_checkout = before
    return r


class _Edit(FakeTransform):
    """A real change (not a no-op): ``old`` -> ``new`` in the file, its marker line appended (the
    fake benchmark reads it)."""

    def __init__(self, name, playbook_id, old, new):
        super().__init__(name, playbook_id)
        self.old, self.new = old, new

    def apply(self, source, kernel, **params):
        res = super().apply(source, kernel, **params)
        return dataclasses.replace(res, new_source=res.new_source.replace(self.old, self.new, 1))


def test_the_baseline_runs_the_test_command_once_and_captures_from_that_run(lse_cmd):
    """One run of the test command checks the unchanged kernel AND records the launch its capture
    compiles from (before: a second run of the test command in run mode, GPU only).  A candidate
    that changes only the kernel compiles from that launch (no observed check needed); one that
    changes code outside the kernel (its launch may differ) is captured from its own check: still
    one run of the test command per version."""
    repo, count = lse_cmd
    # inside the kernel: exp -> exp2 with log2(e) folded in; outside: the wrapper's tile doubled
    ts = {"fast": _Edit("fast", "A", "ct.exp(x - m.reshape((1, 1)))",
                        "ct.exp2((x - m.reshape((1, 1))) * 1.4426950408889634)"),
          "wrap": _Edit("wrap", "B", "tile_n = 1 << (n - 1)", "tile_n = 2 << (n - 1)")}
    r = make(repo, ts, [rec("A", "fast"), rec("B", "wrap")], max_iterations=2, rounds=2)
    r.baseline()
    assert runs(count) == ["check observed", "bench", "bench"]
    base = r.led.iterations[0]
    assert base["capture"]["ok"] and base["capture"]["source"] == "check-run", base["capture"]
    assert base["verification"]["observed"] == {"launches": 1, "importers": 1, "kernels": ["row_lse"]}
    man = json.loads((r.s.state_dir / "captures" / base["digest"][:16] / "manifest.json").read_text())
    assert man["launch"]["grid"] == [64] and man["launch"]["sm_count"] == 132      # the CPU stand-in's H200
    sc = base["step_costs"]
    assert sc["check"]["runs"] == 1 and sc["compile"]["runs"] == 1 and "capture" not in sc
    assert sc["time"]["runs"] == 2 and sc["wall_s"] >= sc["check"]["s"] + sc["compile"]["s"]
    assert base["costs"]["capture_s"] == pytest.approx(sc["compile"]["s"], abs=0.5)
    r.run()
    fast, wrap = r.led.iterations[1:]
    assert fast["capture"]["source"] == "recorded-launch" and "skipped" not in fast["ir_diff"]
    assert wrap["capture"]["source"] == "check-run" and "skipped" not in wrap["ir_diff"]
    assert runs(count) == ["check"] + ["bench"] * 4 + ["check observed"] + ["bench"] * 4
    for it in (fast, wrap):
        sc = it["step_costs"]
        assert sc["check"]["runs"] == 1 and sc["time"]["runs"] == 4 and "capture" not in sc
        assert {"diagnose", "compile", "check", "time"} <= set(sc) and sc["other_s"] >= 0
    # the kernel-only candidate compiled while its check ran; the other one compiled once, after its check
    sc, sw = fast["step_costs"], wrap["step_costs"]
    assert sc["compile"]["start"] < sc["check"]["end"] and sc["check"]["start"] < sc["compile"]["end"]
    assert len(sw["compiles"]) == 1 and sw["compile"]["start"] >= sw["check"]["end"]
    assert untouched(repo, r)


def test_a_candidate_that_fails_its_observed_check_needs_no_capture(lse_cmd):
    repo, count = lse_cmd
    ts = {"wrong": FakeTransform("wrong", "A")}
    ts["wrong"]._marker = lambda params: "WRONG = 1"          # outside the kernel: its capture needs a run
    r = make(repo, ts, [rec("A", "wrong")], max_iterations=1, rounds=2)
    r.start()
    runs(count)
    it = r.led.iterations[1]
    assert (it["status"], it["correctness"], it["decision"]["rule"]) == ("revert", "FAIL", "correctness")
    assert "capture" not in it and "failed its check" in it["ir_diff"]["skipped"]
    assert it["step_costs"]["check"]["runs"] == 1 and "time" not in it["step_costs"]


def test_without_a_launch_in_the_check_the_capture_says_so_and_takes_no_second_run(lse_cmd):
    """The test command imports cuTile but never launches the kernel: the capture cannot come
    from it, and a run-mode capture of the same command is not tried (it would not see the kernel
    either); the ledger says why."""
    repo, count = lse_cmd
    (repo / "check.py").write_text(CHECK.format(count=str(count)).replace(
        'row_lse.launch(torch.randn(64, 300), torch.empty(64), stream="cpu")', "pass"))
    git(repo, "commit", "-qam", "a test that launches nothing")
    r = make(repo, {}, [], max_iterations=1, rounds=1)
    r.baseline()
    assert runs(count) == ["check observed", "bench"]
    cap = r.led.iterations[0]["capture"]
    tried = " ".join(cap.get("tried") or [])
    assert cap["ok"] is False and "the check run launched no row_lse" in tried
    assert "run of the test command" not in tried and "needs a GPU" not in tried


def test_a_manual_edit_runs_the_test_command_once_too(lse_cmd):
    """`loop record` in command mode: an edit of the kernel compiles from the kept version's
    recorded launch before anything runs; an edit of its launch wrapper is captured from the launch
    its check records.  One run of the test command per edit either way."""
    from cutile_diag.loop.manual import record_manual
    repo, count = lse_cmd
    r = make(repo, {}, [], max_iterations=3, rounds=2)
    r.baseline()
    runs(count)
    f = r.s.worktree / "row_lse.py"
    f.write_text(f.read_text().replace("ct.exp(x - m", "ct.exp2(x - m"))
    lines = []
    kernel_edit = record_manual(r.s, r.led, r.backend, note="exp2", echo=lines.append)
    assert runs(count) == ["check"] + ["bench"] * 4
    assert kernel_edit["capture"]["source"] == "recorded-launch" and "compiles; IR diff" in " ".join(lines)
    f.write_text(f.read_text().replace("tile_n = 1 << (n - 1).bit_length()", "tile_n = 2 << (n - 1).bit_length()"))
    lines.clear()
    wrapper_edit = record_manual(r.s, r.led, r.backend, note="a wider tile", echo=lines.append)
    assert runs(count) == ["check observed"] + ["bench"] * 4
    assert wrapper_edit["capture"]["source"] == "check-run" and "skipped" not in wrapper_edit["ir_diff"]
    assert any("captured from the launch its check records" in ln for ln in lines)


def test_a_failed_compile_from_the_checks_launch_falls_back_to_the_run_based_capture(lse_cmd, monkeypatch):
    """The unchanged kernel passed its check, so its kernel compiles: an AOT compile from the
    recorded launch that fails says nothing against it; the capture falls back to its run-based
    sources (on a GPU a run of the test command in run mode; here none works) and says why."""
    from cutile_diag.loop import compile_pool

    def failing(jobs, deadline=None, workers=None, pool=None):
        return [(j, {"ok": False, "kind": "compile", "error": "tileiras: planted failure"}, 0.0, 0.1) for j in jobs]

    monkeypatch.setattr(compile_pool, "compile_versions", failing)
    repo, count = lse_cmd
    r = make(repo, {}, [], max_iterations=1, rounds=1)
    r.baseline()
    cap = r.led.iterations[0]["capture"]
    assert cap["ok"] is False and cap.get("source") != "check-run"
    assert "the compile from the check run's launch failed: tileiras: planted failure" in cap["tried"][0]
    assert "no argument specs for row_lse" in cap["error"]         # the run-based sources, tried: none works here
    assert runs(count) == ["check observed", "bench"]


SWEEP = [{"t": 9}, {"t": 5}, {"t": 8}]


def _sweep_loop(repo, count, wrong=None, **opts):
    ts = {"tile": FakeTransform("tile", "C", params=SWEEP)}
    if wrong is not None:
        base = ts["tile"]._marker
        ts["tile"]._marker = lambda p: base(p) + ("\nWRONG = 1" if p == wrong else "")
    return make(repo, ts, [rec("C", "tile")], max_iterations=1, rounds=2, capture=False, **opts)


def test_a_sweep_in_command_mode_runs_the_kept_version_once_per_screening_round(lse_cmd):
    """Three settings: screened unchecked against ONE run of the kept version (4 runs, not 6),
    the fastest (t=5) checked and confirmed: one check instead of three."""
    repo, count = lse_cmd
    r = _sweep_loop(repo, count)
    r.baseline()
    runs(count)
    r.run()
    it = r.led.iterations[1]
    assert runs(count) == ["bench"] * 4 + ["check"] + ["bench"] * 4
    assert (it["status"], it["change"]["params"]) == ("keep", {"t": 5})
    rows = {json.dumps(p["params"]): p for p in it["sweep"]}
    assert rows['{"t": 5}']["verification"].startswith("PASS") and rows['{"t": 5}']["chosen"]
    assert rows['{"t": 9}']["verification"] == "checked if confirmed"
    assert [round(rows[k]["screen_ratio"], 3) for k in ('{"t": 9}', '{"t": 5}', '{"t": 8}')] == [0.9, 0.5, 0.8]
    assert it["step_costs"]["check"]["runs"] == 1 and it["step_costs"]["time"]["runs"] == 8
    # the plan counted it that way: one check, 3 + 1 screening runs, 2 x 2 confirmation runs
    from cutile_diag.loop import budget as budget_mod
    c = budget_mod.Costs(verify_s=1.0, run_s=1.0)
    assert c.iteration_s(3, 2, screen_shared=True) == 1 + 4 + 4
    assert c.iteration_s(3, 2) == 3 + 6 + 4


def test_a_screened_winner_that_fails_its_check_gives_way_to_the_next(lse_cmd):
    repo, count = lse_cmd
    r = _sweep_loop(repo, count, wrong={"t": 5})
    r.baseline()
    runs(count)
    r.run()
    it = r.led.iterations[1]
    # screened t=5 (wrong but fast) first; its check fails; t=8, faster than A too, is checked and kept
    assert runs(count) == ["bench"] * 4 + ["check", "check"] + ["bench"] * 4
    assert (it["status"], it["change"]["params"], it["correctness"]) == ("keep", {"t": 8}, "PASS")
    assert [c["rule"] for c in it["confirmations"]] == ["correctness", it["decision"]["rule"]]


def test_a_clear_regression_is_not_measured_past_its_first_round(lse_cmd):
    """50 % slower after one round of A and B: the recipe reverts it (a configuration significantly
    > 2 % slower), so the second round (2 more runs of the benchmark) is not run."""
    repo, count = lse_cmd
    r = make(repo, {"slow": FakeTransform("slow", "A")}, [rec("A", "slow")], max_iterations=1, rounds=2,
             capture=False)
    r.baseline()
    runs(count)
    r.run()
    it = r.led.iterations[1]
    assert runs(count) == ["check", "bench", "bench"]
    assert (it["status"], it["decision"]["rule"], it["rounds_measured"]) == ("revert", "regression", 1)
    assert it["comparison"]["ratio"] == pytest.approx(1.5) and it["step_costs"]["time"]["runs"] == 2


def test_a_sweep_whose_best_setting_is_a_clear_regression_is_neither_checked_nor_confirmed(lse_cmd):
    repo, count = lse_cmd
    ts = {"tile": FakeTransform("tile", "C", params=[{"t": 13}, {"t": 12}])}
    r = make(repo, ts, [rec("C", "tile")], max_iterations=1, rounds=2, capture=False)
    r.baseline()
    runs(count)
    r.run()
    it = r.led.iterations[1]
    assert runs(count) == ["bench"] * 3                       # A once, each setting once: no check
    assert (it["status"], it["decision"]["rule"], it["correctness"]) == ("revert", "regression", "-")
    assert "not checked, not confirmed" in it["decision"]["reason"] and "t': 12" in it["decision"]["reason"]
    assert it["latency_source"] == "screening" and it["latency_ms"] == pytest.approx(0.24)
    # with the lookahead on, a step within its bound may become a frontier: it is confirmed as before
    from cutile_diag.loop.stats import compare, RunStat
    runs_ = {"c": ([RunStat(1.0, 0.1, 50)], [RunStat(1.03, 0.1, 50)])}
    r.opt.keep_going = True
    assert r._clear_regression(compare(runs_)) is None
    r.opt.keep_going = False
    assert r._clear_regression(compare(runs_)).rule == "regression"


def test_rounds_and_sweeps_are_fitted_to_the_budget_from_the_measured_run_time(lse_cmd):
    """Without --rounds: 3 while a comparison's 6 runs take at most 1/8 of --budget, else 2; without
    --max-sweep: 4 settings while their screening runs take at most 1/8 of it, else fewer, down to
    2.  The baseline says which and why; --rounds and --max-sweep win."""
    from cutile_diag.loop import budget as budget_mod
    tilegym = budget_mod.Costs(verify_s=14.0, run_s=19.0)
    n, why = budget_mod.fitted_rounds(tilegym, 600.0)
    assert n == 2 and "--rounds 3, or --budget 912" in why
    assert budget_mod.fitted_rounds(tilegym, 912.0)[0] == 3
    assert budget_mod.fitted_rounds(budget_mod.Costs(verify_s=2.0, run_s=0.8), 600.0) == (3, "")
    assert budget_mod.fitted_rounds(budget_mod.Costs(), 600.0)[0] == 3
    # a sweep screened against one run of the kept version: 4 settings are 5 runs (95 s > 75 s): 3 (76 s) is
    # still more, so 2 (57 s); each beside its own run of the kept version: 8 runs, down to the floor of 2
    k, why = budget_mod.fitted_sweep(tilegym, 600.0, shared=True)
    assert k == 2 and "--max-sweep 4, or --budget 760" in why
    assert budget_mod.fitted_sweep(budget_mod.Costs(run_s=17.0), 600.0, shared=True)[0] == 3
    assert budget_mod.fitted_sweep(tilegym, 600.0)[0] == 2
    assert budget_mod.fitted_sweep(budget_mod.Costs(run_s=0.8), 600.0) == (4, "")
    assert budget_mod.fitted_sweep(budget_mod.Costs(), 600.0, shared=True)[0] == 4
    repo, count = lse_cmd
    (repo / "bench.py").write_text("import time; time.sleep(0.4)\n" + (repo / "bench.py").read_text())
    git(repo, "commit", "-qam", "a slower benchmark")
    r = make(repo, {"fast": FakeTransform("fast", "A")}, [rec("A", "fast")], max_iterations=1, capture=False,
             iteration_budget_s=16)
    r.start()
    base, it = r.led.iterations
    assert base["rounds"]["n"] == 2 and not base["rounds"]["given"] and "1/8 of --budget 16" in base["rounds"]["why"]
    assert base["sweep"]["n"] == 2 and "settings per sweep" in base["sweep"]["why"] and r.max_sweep() == 2
    # command mode: the baseline is timed once (no decision uses its runs; each comparison times A again)
    assert base["rounds"]["baseline"] == 1 and [len(c["runs"]) for c in base["configs"].values()] == [1]
    assert it["plan"]["confirm_rounds"] == 2 and it["step_costs"]["time"]["runs"] == 4
    runs(count)
    r = make(repo, {"fast": FakeTransform("fast", "A")}, [rec("A", "fast")], max_iterations=1, capture=False,
             iteration_budget_s=16, rounds=3, branch="given")
    r.start()
    base, it = r.led.iterations
    assert base["rounds"] == {"n": 3, "baseline": 3, "given": True} and it["plan"]["confirm_rounds"] == 3
    assert base["sweep"]["n"] == 2 and not base["sweep"]["given"]
