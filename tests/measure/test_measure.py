"""The one measurement (``cutile_diag.measure``): check -> poison -> time -> post-check, on the CPU
with a fake timer, for a one-shot measurement and for a kept version timed many times."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cutile_diag.harness.timing import BenchOptions  # noqa: E402
from cutile_diag.measure import MeasureRequest, measure_version, prepare, time_prepared  # noqa: E402
from cutile_diag.workload import Workload, WorkloadConfig  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src" / "cutile_diag"
QUICK = BenchOptions(warmup_ms=1, rep_ms=1, min_rep=3, max_rep=3, initial_rep=1, batch=None)


class Timer:
    """A CPU timer backend: every timed repetition really calls ``fn`` (as a GPU's would)."""
    name = "cpu-fake"
    flush_bytes = 0

    def __init__(self):
        self.setups = 0
        self.timed = 0

    def setup(self, fn, opts):
        self.fn = fn
        self.setups += 1
        fn()

    def run(self, n):
        for _ in range(n):
            self.fn()

    def estimate(self, n):
        return 1.0, 0.01

    def time_reps(self, n):
        self.timed += n
        out = []
        for _ in range(n):
            self.fn()
            out.append(1.0)
        return out

    def reset_peak_memory(self):
        pass

    def peak_memory_mb(self):
        return 0

    def teardown(self):
        pass


class Doubler(Workload):
    """y = 2x; ``lazy`` writes y on its first two calls only (skips work once warmed up)."""
    name = "doubler"
    configs = [WorkloadConfig("small", {"n": 32})]
    outputs = ("y",)

    def __init__(self, lazy: bool = False):
        self.lazy, self.calls = lazy, 0

    def make_inputs(self, cfg, seed, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(cfg["n"], generator=g), "y": torch.zeros(cfg["n"])}

    def run(self, inputs):
        self.calls += 1
        if not self.lazy or self.calls <= 2:
            inputs["y"].copy_(2 * inputs["x"])

    def reference(self, inputs):
        return {"y": 2 * inputs["x"].double()}


def test_a_version_is_checked_then_timed_and_its_timed_outputs_checked():
    wl, cfg = Doubler(), Doubler.configs[0]
    r = measure_version(wl, cfg, MeasureRequest(QUICK, device="cpu", check_seed=5), backend=Timer())
    assert r.status == "ok" and r.check.seed == 5 and r.check.passed
    assert r.post_check.passed and r.post_check.seed == 0 and r.median_ms == 1.0


def test_a_kernel_that_skips_work_once_warm_fails_the_post_check():
    wl, cfg = Doubler(lazy=True), Doubler.configs[0]
    r = measure_version(wl, cfg, MeasureRequest(QUICK, device="cpu"), backend=Timer())
    assert r.check.passed                              # its first call was right
    assert r.status == "mismatch" and r.error.startswith("outputs of the timed runs are wrong")


def test_a_kept_version_keeps_its_set_up_and_checks_every_timing():
    """The loop worker's way: prepared once, timed many times, the timer set up once."""
    wl, cfg = Doubler(lazy=True), Doubler.configs[0]
    p = prepare(wl, cfg, seed=3, device="cpu", keep=True)
    timer = Timer()
    first = time_prepared(p, QUICK, backend=timer)
    assert not first.post_check.passed and first.measurement.stats.median == 1.0
    again = time_prepared(p, QUICK, backend=Timer())   # the kept set-up is used, not this one
    assert timer.setups == 1 and timer.timed == 6 and not again.post_check.passed
    assert time_prepared(p, QUICK, post_check=False).post_check is None


def test_only_the_measure_module_poisons_and_post_checks():
    """One function measures a version: no other module in src/ times with a poison or
    compares the timed runs' outputs."""
    found = []
    for f in SRC.rglob("*.py"):
        rel = f.relative_to(SRC).as_posix()
        text = f.read_text()
        if re.search(r"before_timed\s*=", text) and rel not in ("measure/version.py", "harness/timing.py"):
            found.append(f"{rel}: before_timed")
        if "check_outputs(" in text and rel not in ("measure/version.py", "harness/correctness.py"):
            found.append(f"{rel}: check_outputs")
    assert found == []


def test_ceilings_from_a_child_without_a_gpu_are_an_answer_not_an_error():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU")
    from cutile_diag.measure import ceilings_in_child
    ans = ceilings_in_child(measure=False, timeout=120)
    assert ans.ceilings is None and "no CUDA GPU" in ans.why


def test_only_the_ceilings_module_gets_a_devices_ceilings():
    """One way to get ceilings (``measure.ceilings``): no other module reads the cache, measures,
    or takes a preset's committed measurement from ``roofline.peaks`` itself."""
    import ast
    own = {"get_ceilings", "load_cached", "recorded_ceilings", "measure_ceilings"}
    allowed = {"roofline/peaks.py", "roofline/__init__.py", "measure/ceilings.py"}
    found = []
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC).as_posix()
        if rel in allowed:
            continue
        for n in ast.walk(ast.parse(f.read_text())):
            names = {a.name for a in n.names} if isinstance(n, ast.ImportFrom) else \
                {n.attr} if isinstance(n, ast.Attribute) and ast.unparse(n.value).endswith("peaks") else set()
            found += [f"{rel}:{n.lineno}: {x}" for x in names & own]
    assert found == []
