"""Harness statistics and budget logic on synthetic timings (no GPU)."""
import statistics

import pytest

from cutile_diag.harness.stats import RECORD_KEYS, TimingStats, noise_study, summarize
from cutile_diag.harness.timing import BenchOptions, measure, plan_reps


def test_record_has_exactly_tilegyms_keys_in_order():
    s = summarize([1.0, 2.0, 3.0, 4.0], peak_mem_mb=913.7)
    rec = s.record()
    assert tuple(rec) == RECORD_KEYS == ("mean", "std", "rel_std", "median", "min", "max", "nrep", "peak_mem_mb")
    assert rec["mean"] == 2.5
    assert rec["std"] == pytest.approx(statistics.stdev([1, 2, 3, 4]))        # sample std (n - 1)
    assert rec["rel_std"] == pytest.approx(100 * statistics.stdev([1, 2, 3, 4]) / 2.5)   # percent
    assert rec["median"] == 2.5                                                 # true median, not the lower one
    assert (rec["min"], rec["max"], rec["nrep"], rec["peak_mem_mb"]) == (1.0, 4.0, 4, 913)
    assert isinstance(rec["nrep"], int) and isinstance(rec["peak_mem_mb"], int)
    assert TimingStats.from_record(rec) == s


def test_single_sample_and_bad_samples():
    s = summarize([0.5])
    assert s.std == 0 and s.rel_std == 0 and s.median == 0.5
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])
    with pytest.raises(ValueError):
        summarize([1.0, -0.1])
    with pytest.raises(ValueError, match="lacks"):
        TimingStats.from_record({"mean": 1})


@pytest.mark.parametrize("est,warm,rep", [
    (0.1, 1000, 1000),       # 100 ms / 0.1 ms
    (1.0, 100, 100),
    (50.0, 2, 10),           # min_rep floor
    (0.001, 10000, 1000),    # max_rep cap; warm-up capped at 10 x max_rep
])
def test_plan_reps_budgets(est, warm, rep):
    assert plan_reps(est, BenchOptions(warmup_ms=100, rep_ms=100, min_rep=10, max_rep=1000)) == (warm, rep)


def test_plan_reps_zero_warmup():
    assert plan_reps(1.0, BenchOptions(warmup_ms=0, rep_ms=5, min_rep=3, max_rep=50)) == (0, 5)


class FakeBackend:
    """Deterministic timings; records what the harness asked for."""
    name = "fake"

    def __init__(self, est_ms, samples):
        self.est_ms, self.samples = est_ms, list(samples)
        self.calls = []
        self.flush_bytes = 256 << 20

    def setup(self, fn, opts):
        fn()
        self.calls.append("setup")

    def run(self, n):
        self.calls.append(("run", n))

    def estimate(self, n):
        self.calls.append(("estimate", n))
        return self.est_ms, 0.01

    def time_reps(self, n):
        self.calls.append(("time", n))
        return [self.samples[i % len(self.samples)] for i in range(n)]

    def reset_peak_memory(self):
        self.calls.append("reset")

    def peak_memory_mb(self):
        return 42

    def teardown(self):
        self.calls.append("teardown")


def test_measure_follows_the_budget_and_summarises():
    be = FakeBackend(est_ms=2.0, samples=[2.0, 2.1, 1.9, 2.0])
    order = []

    class Obs:
        def start(self):
            order.append("obs-start")

        def stop(self):
            order.append("obs-stop")
            return {"sm_clock_mhz": {"median": 1980}}

    ran = []
    m = measure(lambda: ran.append(1), BenchOptions(warmup_ms=10, rep_ms=40, min_rep=3, max_rep=100, initial_rep=4),
                backend=be, observers=[Obs()], before_timed=lambda: order.append("poison"))
    assert ("estimate", 4) in be.calls and ("run", 5) in be.calls and ("time", 20) in be.calls
    assert be.calls[-1] == "teardown"
    assert m.stats.nrep == 20 and m.n_warmup == 5 and m.estimate_ms == 2.0
    assert m.stats.median == pytest.approx(2.0) and m.stats.peak_mem_mb == 42
    # a 2 ms kernel is not batched; the timer says so
    assert m.observed == {"sm_clock_mhz": {"median": 1980}, "timer": {"batch": 1},
                          "plan": {"n_warmup": 5, "n_rep": 20, "batch": 1, "sleep_ms": 0.05}}
    assert order == ["poison", "obs-start", "obs-stop"]
    assert ran == [1]                      # setup's single priming call
    assert m.to_json()["stats"] == m.stats.record()


def test_measure_tears_down_when_timing_raises():
    class Boom(FakeBackend):
        def time_reps(self, n):
            raise RuntimeError("kernel crashed")

    be = Boom(1.0, [1.0])
    with pytest.raises(RuntimeError):
        measure(lambda: None, BenchOptions(warmup_ms=1, rep_ms=1), backend=be)
    assert be.calls[-1] == "teardown"


def test_noise_study_spread():
    runs = [summarize([1.0, 1.005, 0.995]), summarize([1.02, 1.025, 1.015]), summarize([0.98, 0.985, 0.975])]
    ns = noise_study(runs)
    assert ns.runs == 3
    assert ns.median_of_medians_ms == pytest.approx(1.0)
    assert ns.spread_pct == pytest.approx((1.02 - 0.98) / 1.0 * 100)
    assert ns.runs_over_1pct == 0 and ns.max_rel_std_pct == pytest.approx(100 * 0.005 / 0.98, rel=1e-6)
    noisy = noise_study([summarize([1.0, 1.5, 0.5])])
    assert noisy.runs_over_1pct == 1
    with pytest.raises(ValueError):
        noise_study([])


def test_options_roundtrip():
    o = BenchOptions(warmup_ms=3, cuda_graph=True)
    assert BenchOptions.from_json(o.to_json()) == o
    assert BenchOptions.from_json({"rep_ms": 7, "bogus": 1}).rep_ms == 7


def test_short_kernels_are_timed_in_batches_with_the_flush_accounted_for():
    from cutile_diag.harness.timing import plan_batch

    class Batching(FakeBackend):
        def batch(self, k):
            self.calls.append(("batch", k))
            return None

        def timer_overhead_ms(self):
            return 0.004

        def timer_info(self):
            return {"flush_ms_per_launch": 0.03}

    opts = BenchOptions(warmup_ms=10, rep_ms=100, min_rep=3, max_rep=1000, batch_sample_ms=2.0)
    assert plan_batch(0.02, opts) == 100 and plan_batch(0.6, opts) == 1
    assert plan_batch(0.02, BenchOptions(batch=None)) == 1 and plan_batch(1.0, BenchOptions(batch=8)) == 8
    assert plan_batch(1e-5, opts) == opts.max_batch
    be = Batching(est_ms=0.02, samples=[0.02])
    m = measure(lambda: None, opts, backend=be)
    # 100 launches of 0.02 ms per sample; 100 ms of kernel time would be 50 samples, but the launch cap
    # (max_rep 1000) holds: 10 samples
    assert ("batch", 100) in be.calls and ("time", 10) in be.calls
    m = measure(lambda: None, BenchOptions(warmup_ms=10, rep_ms=10, min_rep=3, max_rep=1000, batch_sample_ms=2.0),
                backend=be)
    assert ("time", 5) in be.calls                         # here the kernel-time budget is the smaller
    assert m.observed["timer"] == {"batch": 100, "overhead_ms": 0.004, "flush_ms_per_launch": 0.03}

    class NoGraph(Batching):
        def batch(self, k):
            return "CUDA-graph capture failed: RuntimeError: sync in capture"
    be = NoGraph(est_ms=0.02, samples=[0.02])
    m = measure(lambda: None, opts, backend=be)
    assert m.observed["timer"]["batch"] == 1 and "sync in capture" in m.observed["timer"]["batch_fallback"]
    assert ("time", 1000) in be.calls                      # eager: the launch-count budget as before


def test_a_kept_set_up_is_reused_by_later_calls_and_freed_when_the_options_change_or_a_call_fails():
    """A loop worker measures one version many times: the first call sets up (estimate, batch
    graphs), later calls with the same options only warm up and sample, with the same plan."""
    from cutile_diag.harness.timing import Kept

    class Batching(FakeBackend):
        def batch(self, k):
            self.calls.append(("batch", k))

        def warm(self, n):
            self.calls.append(("warm", n))

    be = Batching(est_ms=0.02, samples=[0.02])
    keep = Kept()
    opts = BenchOptions(warmup_ms=10, rep_ms=10, min_rep=3, max_rep=1000, batch_sample_ms=2.0)
    first = measure(lambda: None, opts, backend=be, keep=keep)
    assert [c for c in be.calls if c in ("setup", "teardown") or c[0] in ("estimate", "batch")] == \
        ["setup", ("estimate", 5), ("batch", 100)]
    be.calls.clear()
    again = measure(lambda: None, opts, keep=keep)          # no backend given: the kept one
    assert be.calls == [("warm", first.n_warmup), "reset", ("time", first.stats.nrep)]
    assert again.first_call_s == 0 and again.observed["timer"]["batch"] == 100
    other = Batching(est_ms=0.02, samples=[0.02])
    measure(lambda: None, BenchOptions(warmup_ms=5), backend=other, keep=keep)
    assert be.calls[-1] == "teardown" and "setup" in other.calls     # new options: set up anew

    class Boom(Batching):
        def time_reps(self, n):
            raise RuntimeError("kernel crashed")
    boom = Boom(est_ms=0.02, samples=[0.02])
    with pytest.raises(RuntimeError):
        measure(lambda: None, opts, backend=boom, keep=keep)
    assert boom.calls[-1] == "teardown" and keep.backend is None


def test_a_given_plan_is_sampled_as_given_and_a_kept_set_up_follows_it():
    """A comparison hands every version the baseline's plan: the same warm-up, samples and batch, and the
    longer spin of the two, whatever each process's own estimate would have bought."""
    from cutile_diag.harness.timing import Kept, Plan

    class Spinning(FakeBackend):
        def set_sleep(self, ms):
            self.calls.append(("sleep", ms))

    opts = BenchOptions(warmup_ms=10, rep_ms=40, min_rep=3, max_rep=100)
    base = measure(lambda: None, opts, backend=Spinning(est_ms=2.0, samples=[2.0]))
    made = Plan.from_json(base.observed["plan"])
    assert made == Plan(5, 20, 1, 0.05) and Plan.from_json({"n_rep": 3}) is None and Plan.from_json(None) is None
    # a copy whose estimate read 10 % slower and whose host enqueue is slower: the baseline's counts, its own spin
    be = Spinning(est_ms=2.2, samples=[2.2])
    be.estimate = lambda n: (2.2, 0.2)
    keep = Kept()
    m = measure(lambda: None, opts, backend=be, keep=keep, plan=made)
    assert ("run", 5) in be.calls and ("time", 20) in be.calls and ("sleep", 0.4) in be.calls
    assert m.observed["plan"] == {"n_warmup": 5, "n_rep": 20, "batch": 1, "sleep_ms": 0.4}
    be.calls.clear()
    m = measure(lambda: None, opts, keep=keep, plan=Plan(5, 20, 1, 1.5))      # a longer spin: no new set-up
    assert "setup" not in be.calls and ("sleep", 1.5) in be.calls and m.observed["plan"]["sleep_ms"] == 1.5
    other = Spinning(est_ms=2.2, samples=[2.2])
    measure(lambda: None, opts, backend=other, keep=keep, plan=Plan(7, 30, 1, 0.05))   # other counts: set up anew
    assert be.calls[-1] == "teardown" and "setup" in other.calls and ("time", 30) in other.calls


def test_a_call_whose_time_is_its_hosts_is_timed_as_a_graph():
    """H200, TileGym's persistent layer norm replayed through its wrapper, which calls ``kernel.replace_hints`` (a
    recompile) on every call: eager events read 42 ms for a 0.027 ms kernel, the GPU idle behind Python."""
    from cutile_diag.harness.timing import plan_batch
    opts = BenchOptions()
    assert plan_batch(42.0, opts, host_ms=41.5) > 1          # the host's time: a graph holds the GPU work alone
    assert plan_batch(42.0, opts, host_ms=0.02) == 1         # a long kernel: eager, as before
    assert plan_batch(4.0, opts, host_ms=2.0) == 1           # host time the spin covers: eager
    assert plan_batch(42.0, BenchOptions(sleep=False), host_ms=41.5) == 1
    assert plan_batch(42.0, BenchOptions(batch=None), host_ms=41.5) == 1


def test_a_kernel_replace_hints_gives_anew_is_held_once_per_hints():
    """A wrapper's per-call ``replace_hints`` gives one kernel object per (kernel, hints), kept alive: no recompile
    per call, and no library unload inside a CUDA-graph capture (which aborts the process)."""
    import cuda.tile as ct

    from cutile_diag.examples.vector_add import vector_add
    from cutile_diag.harness.kernels import hold_replaced_kernels

    assert hold_replaced_kernels() and hold_replaced_kernels()      # idempotent
    a, b = vector_add.replace_hints(occupancy=2), vector_add.replace_hints(occupancy=2)
    c = vector_add.replace_hints(occupancy=4)
    assert a is b and a is not c and isinstance(a, ct.kernel)
    assert a._compiler_options.occupancy == 2 and c._compiler_options.occupancy == 4
    assert a.replace_hints(occupancy=2) is not a                     # another source kernel: its own entry
    assert a.replace_hints(occupancy=2) is a.replace_hints(occupancy=2)
