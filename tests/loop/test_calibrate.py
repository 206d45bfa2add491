"""A/A calibration: the noise floor per machine, the false-keep rate of the decision rule."""
import json
import time

import pytest

SPEC = {"configs": {"small": 0.05, "large": 0.4}, "noise": 0.004, "run_noise": 0.002, "samples": 20}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTILE_DIAG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_version_against_itself_gives_an_honest_interval():
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.calibrate import MIN_FLOOR, calibrate
    b = SimulatedBackend(SPEC)
    cal = calibrate(b, n=20, rounds=3)
    assert (cal.n, cal.rounds, cal.configs, cal.machine) == (20, 3, ["large", "small"], "simulated")
    assert cal.false_keeps == 0 and cal.false_reverts == 0 and len(cal.decisions) == 20
    # the simulated run-to-run noise (0.2 % offset + 0.4 % per sample over 20 samples) is what it finds
    assert MIN_FLOOR < cal.noise_floor < 0.01 and 0.05 < cal.half_width_pct < 1.0
    # under the loop's rule (as with --continue) every A/A step is reverted as insignificant
    assert {d["rule"] for d in cal.decisions} == {"insignificant"}
    assert sum(d["ci95"][0] <= 1.0 <= d["ci95"][1] for d in cal.decisions) >= 17     # ~95 % cover no change
    # the first decision samples until the noise rests on 8 degrees of freedom (2 configurations x 4); pooled
    # with it, the next ones stop at their 3 rounds, as a loop's later steps do
    assert cal.rounds_sampled[0] == 5 and cal.rounds_sampled[1:] == [3] * 19
    # both copies were measured, interleaved: one call per decision and one per extra pair of rounds
    assert sum(1 for op, _ in b.calls if op == "measure") == 2 * (20 + 1)


def test_the_false_keep_counter_counts():
    """A 'copy' that is consistently 3 % faster is no A/A: every decision keeps it."""
    from cutile_diag.loop.calibrate import summarize
    from cutile_diag.loop.stats import RunStat
    a = {"c": [RunStat(1.0 + 0.001 * (i % 3), 0.2, 100) for i in range(30)]}
    b = {"c": [RunStat(0.97 * (1.0 + 0.001 * ((i + 1) % 3)), 0.2, 100) for i in range(30)]}
    cal = summarize(a, b, n=10, rounds=3, machine=None, what="planted", backend="test")
    assert cal.false_keeps == 10 and cal.false_keep_rate == 1.0


def test_calibration_stops_at_its_budget_after_two_decisions():
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.calibrate import calibrate
    b = SimulatedBackend(SPEC)
    real = b.measure

    def slow(*a, **k):
        time.sleep(0.25)
        return real(*a, **k)
    b.measure = slow
    cal = calibrate(b, n=20, rounds=2, budget_s=2.5)
    assert 2 <= cal.n < 20 and len(cal.decisions) == cal.n


def test_cli_stores_the_floor_and_a_new_loop_decides_with_it(repo, tmp_path, capsys, cache):
    from cutile_diag.cli import main
    from cutile_diag.ledger import Ledger
    spec = tmp_path / "sim.json"
    spec.write_text(json.dumps(SPEC))
    assert main(["calibrate", "--simulate", str(spec), "-n", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["n"] == 5 and doc["false_keeps"] == 0 and doc["saved_to"]
    stored = json.loads((cache / "noise.json").read_text())["machines"]["simulated"]["latest"]
    assert stored["noise_floor"] == pytest.approx(doc["noise_floor"])
    # rich output says what it measured and that a simulation checks nothing on a GPU
    assert main(["calibrate", "--simulate", str(spec), "-n", "3", "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "false keeps: 0 of 3" in out and "simulated: nothing ran on a GPU" in out
    ref = f"{repo / 'vector_add.py'}::vector_add"
    assert main(["optimize", ref, "--simulate", str(spec), "--no-capture", "--rounds", "2", "--max-iterations", "1",
                 "--only", "E", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    opts = Ledger.load(res["state_dir"]).setup["options"]
    assert opts["noise_floor"] == pytest.approx(doc["noise_floor"]) and opts["noise_source"].startswith("calibrated")


@pytest.mark.parametrize("argv,msg", [
    ([], "give what to calibrate"),
    (["--simulate", "SPEC", "-n", "1"], "-n >= 2"),
    (["--simulate", "SPEC", "--rounds", "x"], "--rounds must be a positive integer"),
    (["--bench-cmd", "no-such-program-here --x"], "is not a command here"),
    (["--test-cmd", "true"], "--test-cmd goes with --bench-cmd"),
    # a workload that cannot exist is named before a measuring process starts, not as a failed correctness check
    (["examples:no_such_kernel"], "unknown workload 'examples:no_such_kernel'"),
    (["missing_file.py::W"], "missing_file.py: no such file"),
    (["replay:no_such_folder"], "no replay recording at no_such_folder"),
])
def test_cli_bad_input_is_one_line(argv, msg, tmp_path, capsys):
    from cutile_diag.cli import main
    spec = tmp_path / "sim.json"
    spec.write_text(json.dumps(SPEC))
    rc = main(["calibrate", *[str(spec) if a == "SPEC" else a for a in argv]])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "correctness check" not in err


def test_worker_rounds_are_abba_after_a_warm_up(monkeypatch, tmp_path):
    """Workload mode measures A B B A within each round, after an unrecorded warm-up of A: a linear
    drift cancels, and each version has one measurement right after the other worker (on the H200,
    following the other process costs a fixed 0.7-0.8 %) and one after itself."""
    from cutile_diag.loop import proc
    from cutile_diag.loop.backends import Version, Workspace, WorkloadBackend
    from cutile_diag.loop.backends.workload import WARM_MAX_RUNS

    log = []

    class FakeWorker:
        loaded = {"ok": True, "passed": True}

        def __init__(self, label):
            self.label = label

        def request(self, req, timeout, what):
            log.append((self.label, req["config"]))
            return {"ok": True, "stats": {"median": 1.0 + 0.01 * len(log)}}

    be = WorkloadBackend("examples:vector_add", configs=["c1", "c2"])
    monkeypatch.setattr(be, "_worker", lambda v, ws, deadline: FakeWorker(v.label))
    a, b = Version("A", {}), Version("B", {"k.py": "x"})
    ws = Workspace(tmp_path, tmp_path, [])
    out = be.measure([a, b], ws, proc.Deadline(None), 2)
    warm = [("A", "c1"), ("A", "c2")] * (WARM_MAX_RUNS // 2)     # the idle GPU warms on the baseline first
    abba = lambda c: [("A", c), ("B", c), ("B", c), ("A", c)]
    baab = lambda c: [("B", c), ("A", c), ("A", c), ("B", c)]
    # every other round starts with the other version, also across calls
    assert log == warm + abba("c1") + abba("c2") + baab("c1") + baab("c2")
    assert [len(out[v][c]) for v in "AB" for c in ("c1", "c2")] == [2, 2, 2, 2]
    assert [r.record["went_first"] for r in out["A"]["c1"]] == [True, False]
    assert [r.record["went_first"] for r in out["B"]["c1"]] == [False, True]
    # a round's two runs of a version pool into one (the warm-up is not recorded)
    w = len(warm)
    assert out["A"]["c1"][0].median == pytest.approx(1.0 + 0.01 * (w + 2.5))
    # back to back (no idle GPU between): no warm-up
    log.clear()
    be.measure([a, b], ws, proc.Deadline(None), 1)
    assert log == abba("c1") + abba("c2")


def test_an_offset_of_one_worker_shows_as_an_offset_across_decisions_not_as_noise():
    """On an H100 a GEMM's A/A copy measured 0.8 % faster in 11 of 12 decisions of one sitting: an offset of one
    worker process, which every decision shares and no number of rounds averages out. calibrate reports it as
    the decisions' mean offset with an interval that excludes 0; without one the interval holds 0."""
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.calibrate import calibrate
    gemm = {"configs": {"8192": 1.4}, "noise": 0.004, "run_noise": 0.002, "samples": 20}
    biased = calibrate(SimulatedBackend({**gemm, "placement_noise": 0.006}), n=12, rounds=3)
    fair = calibrate(SimulatedBackend(gemm), n=12, rounds=3)
    lo, hi = biased.offset_ci_pct
    assert hi < 0 and lo < biased.offset_pct < hi
    assert fair.offset_ci_pct[0] < 0 < fair.offset_ci_pct[1] and fair.false_keeps == 0
    assert abs(biased.offset_pct) > 3 * abs(fair.offset_pct)
    # an offset under the 0.5 % a kept step must clear with its whole interval keeps nothing; twice that does
    assert biased.false_keeps == 0
    worse = calibrate(SimulatedBackend({**gemm, "placement_noise": 0.012}), n=12, rounds=3)
    assert worse.offset_pct < -1.2 and worse.false_keeps >= 6


def test_the_cli_says_when_the_copy_measures_off_across_decisions(tmp_path, capsys):
    from cutile_diag.cli import main
    spec = tmp_path / "sim.json"
    spec.write_text(json.dumps({**SPEC, "placement_noise": 0.006}))
    assert main(["calibrate", "--simulate", str(spec), "-n", "10", "--no-save"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "an offset between the two measurement processes" in out and "is not proven on this machine" in out
    spec.write_text(json.dumps(SPEC))
    assert main(["calibrate", "--simulate", str(spec), "-n", "10", "--no-save"]) == 0
    assert "offset between" not in capsys.readouterr().out


def test_the_copys_offset_is_split_by_which_version_started_the_round():
    """An offset that follows the round order is the order's; one that stays whoever starts is the processes'.
    The backend records who started each round (workload: A B B A, then B A A B)."""
    from cutile_diag.loop.calibrate import summarize
    from cutile_diag.loop.stats import RunStat
    a, b = [], []
    for k in range(12):
        a_first = k % 2 == 0
        a.append(RunStat(1.0, 0.5, 50, record={"went_first": a_first}))
        b.append(RunStat(1.0 if a_first else 0.98, 0.5, 50, record={"went_first": not a_first}))
    cal = summarize({"c": a}, {"c": b}, n=4, rounds=3, machine=None, what="w", backend="workload")
    assert [r["first"] for r in cal.rounds_detail["c"][:3]] == ["A", "B", "A"]
    assert cal.offset_by_first["A"] == pytest.approx(0.0, abs=1e-3)
    assert cal.offset_by_first["B"] == pytest.approx(-2.0, abs=1e-3)
