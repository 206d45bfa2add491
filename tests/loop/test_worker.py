"""The workload backend's long-lived workers: protocol, timeouts and deaths (no GPU needed), and
one GPU run of the whole loop on an example kernel."""
import sys
from types import SimpleNamespace

import pytest

from cutile_diag.loop.backends import Version, WorkloadBackend, Workspace
from cutile_diag.loop.errors import BackendError, CandidateCrash, MeasurementTimeout
from cutile_diag.loop.proc import Deadline
from looptools import WORKLOAD_FILE



def backend_for(tmp_path, prelude: str):
    f = tmp_path / "wl.py"
    f.write_text(WORKLOAD_FILE.format(prelude=prelude))
    ws = Workspace(tmp_path, tmp_path / "state", ["wl.py"])
    return WorkloadBackend(f"{f}::W", log_dir=tmp_path / "logs"), ws, Version("baseline", ws.current())


def test_worker_reports_a_missing_gpu_as_a_backend_error(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU")
    b, ws, v = backend_for(tmp_path, "print('stray output must not break the protocol')")
    try:
        with pytest.raises(BackendError, match="no CUDA GPU"):
            b.verify(v, ws, Deadline(120))
    finally:
        b.close()
    assert not b.workers


def test_worker_hang_is_killed_at_the_budget(tmp_path):
    b, ws, v = backend_for(tmp_path, "time.sleep(600)")
    with pytest.raises(MeasurementTimeout, match="killed"):
        b.verify(v, ws, Deadline(3))
    assert not b.workers


def test_worker_death_is_a_candidate_crash(tmp_path):
    b, ws, v = backend_for(tmp_path, "os._exit(3)")
    with pytest.raises(CandidateCrash, match="exit 3"):
        b.verify(v, ws, Deadline(60))


def _spares_started(monkeypatch):
    from cutile_diag.loop import spares
    started = []
    real = spares.Spares._start
    monkeypatch.setattr(spares.Spares, "_start", lambda self: started.append(real(self)) or started[-1])
    return started


def test_a_worker_started_ahead_runs_the_version_s_text_not_the_disk_s(tmp_path, monkeypatch):
    """A spare worker (``keep_spares``) gets the version's files as overrides: the version's
    text runs (here it exits with 3), not the worktree's (which would sleep past the budget)."""
    started = _spares_started(monkeypatch)
    b, ws, _ = backend_for(tmp_path, "time.sleep(600)")
    v = Version("cand", {"wl.py": WORKLOAD_FILE.format(prelude="os._exit(3)")})
    b.keep_spares(ws, 2)
    monkeypatch.setattr(ws, "materialize", lambda v: pytest.fail("the version was written into the tree"))
    try:
        with pytest.raises(CandidateCrash, match="exit 3"):
            b.verify(v, ws, Deadline(60))
    finally:
        b.close()
    assert len(started) == 3 and all(p.poll() is not None for p in started)     # one taken, refilled, all gone


def test_a_spare_worker_reports_a_missing_gpu_and_a_hang_like_a_fresh_one(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU")
    started = _spares_started(monkeypatch)
    b, ws, v = backend_for(tmp_path, "print('stray output must not break the protocol')")
    b.keep_spares(ws, 1)
    try:
        with pytest.raises(BackendError, match="no CUDA GPU"):
            b.verify(v, ws, Deadline(120))
        hang = Version("hang", {"wl.py": WORKLOAD_FILE.format(prelude="time.sleep(600)")})
        with pytest.raises(MeasurementTimeout, match="killed"):
            b.verify(hang, ws, Deadline(8))
    finally:
        b.close()
    assert not b.workers and all(p.poll() is not None for p in started)

@pytest.mark.gpu
def test_workload_backend_loop_on_vector_add(repo):
    pytest.importorskip("torch")
    from cutile_diag.loop.factory import backend_spec, make_backend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    k = repo / "vector_add.py"
    spec = backend_spec(workload="examples:vector_add", kernel_file=k, configs=["16M-f32"],
                        bench_options={"rep_ms": 30, "warmup_ms": 20})
    o = LoopOptions(rounds=2, max_sweep=2, max_iterations=2, only=["B", "E"])
    s, led = create_session(f"{k}::vector_add", backend=spec, options=o.to_json())
    b = make_backend(spec, log_dir=s.state_dir / "logs")
    try:
        res = Runner(s, b, led, options=o).start()
    finally:
        b.close()
    base = led.iterations[0]
    assert base["verification"]["passed"] and base["latency_ms"] > 0
    assert all(p["valid"] for p in base["roofline"].values())
    assert res.iterations >= 1 and led.iterations[1]["status"] in ("keep", "revert")


TUNED_WORKLOAD = """
import cuda.tile as ct
from cuda.tile.tune import exhaustive_search        # bound at import, as TileGym binds it
from cutile_diag.workload import Workload, WorkloadConfig, seeded_randn


@ct.kernel
def add_kernel(a, b, c, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    ct.store(c, index=(bid,), tile=ct.load(a, index=(bid,), shape=(TILE,)) + ct.load(b, index=(bid,), shape=(TILE,)))


_tuned = {}


def add(a, b, c):
    import torch
    stream = torch.cuda.current_stream()
    if "tile" not in _tuned:                       # tune once per process, as TileGym's ops do
        res = exhaustive_search([256, 512, 1024, 2048], stream, lambda t: (ct.cdiv(a.shape[0], t), 1, 1),
                                add_kernel, lambda t: (a, b, c, t), quiet=True)
        _tuned["tile"] = res.best.config
    t = _tuned["tile"]
    ct.launch(stream, (ct.cdiv(a.shape[0], t), 1, 1), add_kernel, (a, b, c, t))
    return c


class W(Workload):
    name = "tuned_add"
    outputs = ("c",)
    configs = [WorkloadConfig("1M", {"n": 1 << 20})]

    def make_inputs(self, cfg, seed, device="cuda"):
        import torch
        n = cfg["n"]
        return {"a": seeded_randn((n,), "f32", seed, device), "b": seeded_randn((n,), "f32", seed + 1, device),
                "c": torch.empty(n, device=device)}

    def run(self, inputs):
        return add(inputs["a"], inputs["b"], inputs["c"])

    def reference(self, inputs):
        return {"c": inputs["a"].double() + inputs["b"].double()}

    def flops(self, cfg):
        return float(cfg["n"])

    def bytes(self, cfg):
        return 12.0 * cfg["n"]
"""


@pytest.mark.gpu
def test_a_later_worker_holds_the_first_worker_s_autotune_pick_on_the_gpu(tmp_path):
    """measure.tuning in real workers: the baseline's worker searches, the copy's worker runs its pick only."""
    pytest.importorskip("torch")
    f = tmp_path / "wl.py"
    f.write_text(TUNED_WORKLOAD)
    ws = Workspace(tmp_path, tmp_path / "state", ["wl.py"])
    b = WorkloadBackend(f"{f}::W", log_dir=tmp_path / "logs", bench_options={"rep_ms": 10, "warmup_ms": 5})
    a = Version("baseline", ws.current())
    copy = Version("copy", {"wl.py": TUNED_WORKLOAD + "\n# the same kernel\n"})
    try:
        first = b.verify(a, ws, Deadline(300))
        assert first.passed and "autotune" not in first.summary, first.summary
        assert list(b.tuning) == ["add_kernel#0"]
        second = b.verify(copy, ws, Deadline(300))
        runs = b.measure([a, copy], ws, Deadline(300), 2)
        assert b.tuning_report()["held"] == ["add_kernel#0"]
    finally:
        b.close()
    assert second.passed and "autotune held at the first worker's pick (add_kernel#0)" in second.summary, second.summary
    assert all(len(runs[v]["1M"]) == 2 for v in ("baseline", "copy"))


def test_proc_run_removes_none_env_and_keeps_empty(monkeypatch):
    """None removes a variable (CUDA_HOME must be absent, not empty, for cuTile's tileiras probe)."""
    from cutile_diag.loop import proc
    monkeypatch.setenv("CUTILE_DIAG_PROBE_VAR", "set")
    code = "import os; print(repr(os.environ.get('CUTILE_DIAG_PROBE_VAR')), repr(os.environ.get('OTHER_VAR')))"
    r = proc.run([sys.executable, "-c", code], env={"CUTILE_DIAG_PROBE_VAR": None, "OTHER_VAR": ""}, timeout=60)
    assert r.returncode == 0
    assert r.stdout.strip() == "None ''"


def test_the_first_worker_s_autotune_picks_are_handed_to_every_later_one(tmp_path):
    """measure.tuning: the baseline's worker searches; the load requests of later workers (candidates, calibrate's
    copy) carry its picks, so two processes of one version never run two different autotuned configurations."""
    from cutile_diag.loop.backends.workload import _tuning_note
    b, ws, v = backend_for(tmp_path, "")
    assert "tuning" not in b._load_request(ws, v)
    picks = {"_matmul_kernel#0": {"pick": "namespace(TILE=128)", "space": "ab12"}}
    b._loaded({"ok": True, "configs": ["c"], "tuning": {"made": picks, "pinned": [],
                                                        "searched": {"_matmul_kernel#0": "the first worker searches"}}})
    assert b._load_request(ws, v)["tuning"] == picks
    b._loaded({"ok": True, "configs": ["c"], "tuning": {"made": {"_matmul_kernel#0": {"pick": "other", "space": "x"}}}})
    assert b._load_request(ws, v)["tuning"] == picks                 # the first worker's, not the latest
    b.workers["x"] = SimpleNamespace(loaded={"tuning": {"pinned": ["_matmul_kernel#0"], "searched_again":
                                                         {"_matmul_kernel#1": "its search space changed"}}})
    assert b.tuning_report() == {"picks": picks, "held": ["_matmul_kernel#0"],
                                 "searched_again": {"_matmul_kernel#1": "its search space changed"}}
    b.workers.clear()
    assert _tuning_note({"made": picks, "pinned": [], "searched": {"_matmul_kernel#0": "the first worker searches"}}) == ""
    assert _tuning_note({"pinned": ["_matmul_kernel#0"], "searched_again": {"_matmul_kernel#1": "its search space changed"}}) \
        == ("; autotune held at the first worker's pick (_matmul_kernel#0); autotune searched _matmul_kernel#1 again "
            "(its search space changed)")


def test_every_version_of_a_comparison_samples_by_the_first_measurement_s_plan(tmp_path):
    """harness.timing.Plan: an A/A GEMM read one worker ~1 % apart from its copy for a whole sitting, each having sized
    its own samples and spin; the backend hands every request its configuration's first plan, the spin raised to
    the longest any version needed."""
    b, ws, _ = backend_for(tmp_path, "")
    b._configs = ["c"]

    class FakeWorker:
        def __init__(self, sleep_ms):
            self.sleep_ms, self.asked = sleep_ms, []
            self.loaded, self.checked = {"ok": True, "passed": True}, True

        def alive(self):
            return True

        def request(self, obj, timeout, what):
            self.asked.append(obj.get("plan"))
            plan = dict(obj["plan"] or {"n_warmup": 60, "n_rep": 61, "batch": 1})
            plan["sleep_ms"] = max(plan.get("sleep_ms", 0.0), self.sleep_ms)
            return {"ok": True, "stats": {"median": 1.0}, "samples_ms": [1.0], "plan": plan}

    a, copy = Version("A", {}, None, ()), Version("A'", {"k.py": "x = 1\n"}, None, ())
    wa, wb = FakeWorker(0.1), FakeWorker(0.4)
    b.workers = {a.digest: wa, copy.digest: wb}
    b._busy = float("inf")                    # no warm-up requests: the order below is the rounds'
    b.measure([a, copy], ws, Deadline(60), 2)
    assert wa.asked[0] is None                # the very first request makes the plan ...
    assert all(p["n_rep"] == 61 and p["n_warmup"] == 60 for p in wa.asked[1:] + wb.asked)   # ... everyone samples by
    assert wb.asked[0]["sleep_ms"] == 0.1 and wa.asked[-1]["sleep_ms"] == 0.4    # the longer spin, once needed
    assert b.plans == {"c": {"n_warmup": 60, "n_rep": 61, "batch": 1, "sleep_ms": 0.4}}
