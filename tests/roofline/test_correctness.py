"""The correctness checker on CPU tensors: tolerance edges, NaN, infinities, poisoning."""
import math

import pytest

torch = pytest.importorskip("torch")

from cutile_diag.harness.correctness import check_workload, compare, poison_  # noqa: E402
from cutile_diag.workload import Tolerance, Workload, WorkloadConfig, default_tolerance  # noqa: E402

TOL = Tolerance(rtol=1e-2, atol=1e-2)


def test_within_tolerance_passes_and_reports_errors():
    e = torch.tensor([1.0, 2.0, -3.0, 0.0], dtype=torch.float64)
    a = (e + torch.tensor([0.005, -0.01, 0.0, 0.009], dtype=torch.float64)).to(torch.float16)
    c = compare(a, e, TOL)
    assert c.passed and c.n_bad == 0
    assert c.max_abs_err == pytest.approx(0.01, abs=2e-3)
    assert c.shape == (4,) and c.dtype == "f16"


def test_tolerance_edge_is_inclusive():
    # |a - e| <= atol + rtol * |e|: exactly on the bound passes, just above fails
    # (binary-exact numbers so that the bound itself has no rounding error)
    tol = Tolerance(rtol=2 ** -6, atol=0.25)
    e = torch.tensor([64.0, -64.0], dtype=torch.float64)
    bound = 0.25 + 2 ** -6 * 64.0                      # 1.25
    assert compare(torch.tensor([64.0 + bound, -64.0 - bound], dtype=torch.float64), e, tol).passed
    c = compare(torch.tensor([64.0 + bound + 2 ** -20, -64.0], dtype=torch.float64), e, tol)
    assert not c.passed and c.n_bad == 1 and c.worst_index == (0,)


def test_mismatch_reports_worst_index_and_values():
    e = torch.zeros(4, 5, dtype=torch.float64)
    a = e.clone().float()
    a[2, 3] = 0.5
    a[1, 1] = 0.05
    c = compare(a, e, TOL)
    assert not c.passed and c.n_bad == 2 and c.n_total == 20
    assert c.worst_index == (2, 3) and c.worst_actual == pytest.approx(0.5) and c.worst_expected == 0
    assert c.max_abs_err == pytest.approx(0.5) and math.isinf(c.max_rel_err)
    assert "worst at [2, 3]" in c.message and "2 of 20" in c.message


def test_nan_never_passes():
    e = torch.ones(3, dtype=torch.float64)
    a = torch.ones(3)
    a[1] = float("nan")
    c = compare(a, e, Tolerance(1.0, 1.0))          # huge tolerance: still fails
    assert not c.passed and c.n_nan == 1 and c.worst_index == (1,)
    assert "NaN in the output" in c.message
    # a NaN in the reference is a broken reference, not a pass
    e2 = torch.tensor([1.0, float("nan")], dtype=torch.float64)
    c2 = compare(torch.tensor([1.0, float("nan")]), e2, Tolerance(1.0, 1.0))
    assert not c2.passed and "NaN in the reference" in c2.message


def test_infinities():
    e = torch.tensor([math.inf, -math.inf, 1.0], dtype=torch.float64)
    assert compare(torch.tensor([math.inf, -math.inf, 1.0]), e, TOL).passed
    c = compare(torch.tensor([-math.inf, -math.inf, 1.0]), e, Tolerance(1e3, 1e3))
    assert not c.passed and c.worst_index == (0,)
    c = compare(torch.tensor([1e30, -math.inf, math.inf]), e, Tolerance(1e3, 1e3))
    assert not c.passed and c.n_bad == 2


def test_shape_and_type_mismatch():
    c = compare(torch.zeros(3), torch.zeros(4), TOL)
    assert not c.passed and "shape [3]" in c.message
    c = compare([1, 2], torch.zeros(2), TOL)
    assert not c.passed and "not a tensor" in c.message


def test_integers_compare_exactly():
    tol = default_tolerance(torch.int32)
    assert (tol.rtol, tol.atol) == (0, 0)
    assert compare(torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([1, 2, 3]), tol).passed
    assert not compare(torch.tensor([1, 2, 4], dtype=torch.int32), torch.tensor([1, 2, 3]), tol).passed


def test_default_tolerances_are_tilegyms():
    assert default_tolerance(torch.float32) == Tolerance(1e-5, 1e-8)
    assert default_tolerance(torch.float16) == Tolerance(1e-2, 1e-2)
    assert default_tolerance(torch.bfloat16) == Tolerance(1e-2, 2e-2)
    assert default_tolerance("f8e4m3") == Tolerance(0.1, 0.1)
    assert default_tolerance("f8e5m2") == Tolerance(0.5, 0.5)


def test_poison():
    f = torch.zeros(3)
    assert poison_(f) and torch.isnan(f).all()
    i = torch.zeros(3, dtype=torch.int16)
    assert poison_(i) and (i == torch.iinfo(torch.int16).max).all()
    assert not poison_(torch.zeros(2, dtype=torch.bool)) and not poison_("x")


class _Scale(Workload):
    """y = 2x on the CPU, with knobs to misbehave."""
    name = "scale"
    configs = [WorkloadConfig("small", {"n": 64})]
    outputs = ("y",)

    def __init__(self, mode="ok"):
        self.mode = mode

    def make_inputs(self, cfg, seed, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(cfg["n"], generator=g), "y": torch.zeros(cfg["n"])}

    def run(self, inputs):
        x, y = inputs["x"], inputs["y"]
        if self.mode == "partial":      # leaves the tail unwritten: the poison must show
            y[:-3] = 2 * x[:-3]
        elif self.mode == "raise":
            raise RuntimeError("launch failed: out of resources")
        elif self.mode == "wrong":
            y.copy_(2 * x + 0.1)
        elif self.mode == "inplace":    # writes the input too: the reference must see clean inputs
            x.mul_(2)
            y.copy_(x)
        else:
            y.copy_(2 * x)

    def reference(self, inputs):
        return {"y": 2 * inputs["x"].double()}

    def flops(self, cfg):
        return cfg["n"]

    def bytes(self, cfg):
        return 8 * cfg["n"]


@pytest.mark.parametrize("mode", ["ok", "inplace"])
def test_check_workload_passes(mode):
    r = check_workload(_Scale(mode), _Scale.configs[0], seed=3, device="cpu")
    assert r.passed and r.seed == 3 and r.summary.startswith("PASS")


def test_check_workload_catches_unwritten_outputs_through_the_poison():
    r = check_workload(_Scale("partial"), _Scale.configs[0], seed=3, device="cpu")
    assert not r.passed
    c = r.comparisons[0]
    assert c.n_nan == 3 and c.n_bad == 3 and c.worst_index == (61,)
    assert "FAIL" in r.summary and "NaN" in r.summary


def test_check_workload_wrong_and_raising():
    r = check_workload(_Scale("wrong"), _Scale.configs[0], seed=3, device="cpu")
    assert not r.passed and r.comparisons[0].n_bad == 64
    r = check_workload(_Scale("raise"), _Scale.configs[0], seed=3, device="cpu")
    assert not r.passed and "RuntimeError" in r.error and "out of resources" in r.summary


def test_check_workload_with_returned_outputs():
    class Ret(_Scale):
        outputs = ()

        def run(self, inputs):
            return 2 * inputs["x"]

        def reference(self, inputs):
            return 2 * inputs["x"].double()

    assert check_workload(Ret(), Ret.configs[0], seed=1, device="cpu").passed


def test_result_json_roundtrip():
    from cutile_diag.harness.correctness import CheckResult
    r = check_workload(_Scale("partial"), _Scale.configs[0], seed=3, device="cpu")
    back = CheckResult.from_json(r.to_json())
    assert back.passed == r.passed and back.comparisons[0].worst_index == (61,)
    assert math.isnan(back.comparisons[0].max_abs_err)


def test_each_check_draws_a_fresh_seed_and_records_it():
    wl, cfg = _Scale("ok"), _Scale.configs[0]
    seeds = {check_workload(wl, cfg, device="cpu").seed for _ in range(4)}
    assert len(seeds) == 4 and all(isinstance(s, int) and s >= 0 for s in seeds)


def test_a_failing_check_names_its_seed_and_replays_exactly():
    wl, cfg = _Scale("wrong"), _Scale.configs[0]
    r = check_workload(wl, cfg, device="cpu")
    assert not r.passed and f"seed {r.seed}" in r.summary and r.to_json()["seed"] == r.seed
    again = check_workload(wl, cfg, seed=r.seed, device="cpu")
    assert again.comparisons[0].worst_actual == r.comparisons[0].worst_actual


def test_measure_config_checks_on_a_fresh_seed_unless_one_is_given():
    from cutile_diag.measure.isolated import measure_config
    wl, cfg = _Scale("wrong"), _Scale.configs[0]      # fails the check: stops before any GPU timing
    a, b = (measure_config(wl, cfg, device="cpu") for _ in range(2))
    assert a.status == b.status == "mismatch" and a.check.seed != b.check.seed
    assert f"seed {a.check.seed}" in a.error
    assert measure_config(wl, cfg, device="cpu", check_seed=7).check.seed == 7


def test_a_launch_with_an_argument_too_many_fails_the_check_in_one_line():
    """The check process (a GPU's, here on CPU tensors): a wrapper that passes the kernel one
    argument more than it takes fails with one line naming the kernel and both counts, before
    anything reaches the driver (cuTile would reject it too, in its own words)."""
    import cuda.tile as ct

    from cutile_diag.examples import vector_add as va

    class ExtraArg(_Scale):
        def run(self, inputs):
            x, y = inputs["x"], inputs["y"]
            ct.launch(None, (1,), va.vector_add, (x, x, y, 64, 1))

    r = check_workload(ExtraArg(), ExtraArg.configs[0], seed=3, device="cpu")
    assert not r.passed
    assert r.error == "the launch of vector_add passes 5 argument(s); the kernel takes 4 (a, b, c, TILE)"
    assert r.summary.count("\n") == 0 and "vector_add" in r.summary
