"""Classification, percent of roof, verdicts and the above-roof guard."""
import pytest

from cutile_diag.roofline.device import Quantity, preset
from cutile_diag.roofline.model import analyze, recipe_class
from cutile_diag.roofline.peaks import Ceilings

H200 = preset("h200")
BW = H200.peak_dram_bw().value              # 4.814e12
BF16 = H200.peak_flops("bf16", "tensor").value


def ceilings(bw=4.29e12, bf16=777e12):
    return Ceilings(device_key=H200.key, device_name=H200.name,
                    dram_bw=Quantity(bw, "B/s", "measured: test copy"),
                    flops={"bf16:tensor": Quantity(bf16, "FLOP/s", "measured: test gemm")})


@pytest.mark.parametrize("ai,cls", [(0.0, "memory-bound"), (9.99, "memory-bound"), (10.0, "balanced"),
                                    (50.0, "balanced"), (50.01, "compute-bound"), (1e4, "compute-bound"),
                                    (None, "unknown")])
def test_recipe_thresholds(ai, cls):
    assert recipe_class(ai) == cls


def test_memory_bound_point_percentages():
    # 1 GB moved in 0.25 ms = 4.0 TB/s; 0.25 GFLOP -> AI 0.25
    p = analyze("w", "c", latency_ms=0.25, flops=0.25e9, bytes=1e9, unit=("f32", "cuda"), device=H200,
                ceilings=ceilings())
    assert p.achieved_bw == pytest.approx(4e12)
    assert p.ai == pytest.approx(0.25)
    assert p.recipe_class == "memory-bound" and p.bound == "memory"
    assert p.pct_spec == pytest.approx(100 * 4e12 / BW)
    assert p.pct_measured == pytest.approx(100 * 4e12 / 4.29e12)
    assert p.valid and p.level == "near"
    assert "structural change" in p.verdict and "fewer bytes" in p.verdict


def test_compute_bound_point_uses_the_compute_roof():
    flops = 2 * 8192 ** 3
    p = analyze("w", "c", latency_ms=2.0, flops=flops, bytes=3 * 8192 * 8192 * 2, unit=("bf16", "tensor"),
                device=H200, ceilings=ceilings())
    assert p.bound == "compute" and p.recipe_class == "compute-bound"
    assert p.pct_spec == pytest.approx(100 * (flops / 2e-3) / BF16)
    assert p.pct_measured == pytest.approx(100 * (flops / 2e-3) / 777e12)
    assert p.level == "moderate"
    assert "tensor-core" in p.verdict


def test_ridge_overrides_the_recipe_with_a_note():
    # AI 40 is "balanced" for the recipe, but far left of the H200 bf16 ridge (~222 FLOP/B)
    p = analyze("w", "c", latency_ms=1.0, flops=40e9, bytes=1e9, unit=("bf16", "tensor"), device=H200)
    assert p.recipe_class == "balanced" and p.bound == "memory"
    assert p.ridge_spec == pytest.approx(BF16 / BW)
    assert any("ridge" in n and "memory roof applies" in n for n in p.notes)
    # AI 100 is compute-bound by the recipe but still memory-bound on this device
    q = analyze("w", "c", latency_ms=1.0, flops=100e9, bytes=1e9, unit=("bf16", "tensor"), device=H200)
    assert q.recipe_class == "compute-bound" and q.bound == "memory"
    assert any("recipe calls AI 100.0 compute-bound" in n for n in q.notes)


def test_far_below_names_the_resource():
    p = analyze("w", "c", latency_ms=1.0, flops=1e9, bytes=1e9, unit=("f32", "cuda"), device=H200,
                ceilings=ceilings())
    assert p.level == "far" and p.pct_measured < 50
    assert "TMA" in p.verdict and "load_ptr_tko" in p.verdict


def test_guard_above_measured_ceiling_is_invalid():
    # 4.6 TB/s: below the 4.81 spec roof, but 7 % above the 4.29 measured copy ceiling
    p = analyze("w", "c", latency_ms=1.0, flops=1e9, bytes=4.6e9, unit=("f32", "cuda"), device=H200,
                ceilings=ceilings())
    assert not p.valid and p.level == "invalid"
    assert p.verdict.startswith("INVALID")
    assert any("above the measured copy ceiling" in r for r in p.invalid_reasons)


def test_guard_margin_edge():
    c = ceilings(bw=4.0e12)
    ok = analyze("w", "c", latency_ms=1.0, flops=0, bytes=4.11e9, unit=("f32", "cuda"), device=H200, ceilings=c)
    assert ok.valid                                  # 2.75 % above: inside the 3 % noise margin
    bad = analyze("w", "c", latency_ms=1.0, flops=0, bytes=4.13e9, unit=("f32", "cuda"), device=H200, ceilings=c)
    assert not bad.valid                             # 3.25 % above
    strict = analyze("w", "c", latency_ms=1.0, flops=0, bytes=4.05e9, unit=("f32", "cuda"), device=H200,
                     ceilings=c, guard_margin=0.0)
    assert not strict.valid


def test_guard_above_spec_without_ceilings():
    p = analyze("w", "c", latency_ms=1.0, flops=0, bytes=5.2e9, unit=("f32", "cuda"), device=H200)
    assert not p.valid and any("exceeds the spec bandwidth" in r for r in p.invalid_reasons)
    # a FLOP rate above the spec peak is invalid whatever the bandwidth says
    q = analyze("w", "c", latency_ms=1.0, flops=1.2e15 * 1e-3, bytes=1e6, unit=("bf16", "tensor"), device=H200)
    assert not q.valid and any("spec bf16 tensor peak" in r for r in q.invalid_reasons)


def test_guard_checks_flops_against_the_measured_gemm():
    q = analyze("w", "c", latency_ms=1.0, flops=900e12 * 1e-3, bytes=1e6, unit=("bf16", "tensor"), device=H200,
                ceilings=ceilings(bf16=777e12))
    assert not q.valid and any("measured bf16 tensor ceiling" in r for r in q.invalid_reasons)


def test_underfilled_grid_and_tiny_latency_are_called_out():
    p = analyze("w", "c", latency_ms=0.004, flops=1e6, bytes=1e7, unit=("f32", "cuda"), device=H200,
                grid=(64,))
    assert "64 blocks for 132 SMs" in p.verdict
    assert "launch/latency-bound" in p.verdict


def test_no_flops_point_is_memory_bound():
    p = analyze("w", "copy", latency_ms=1.0, flops=0, bytes=2e9, unit=("f32", "cuda"), device=H200)
    assert p.ai == 0 and p.bound == "memory" and p.pct_spec == pytest.approx(100 * 2e12 / BW)


def test_unknown_compute_roof():
    p = analyze("w", "c", latency_ms=1.0, flops=1e12, bytes=1e6, unit=("f8", "tensor"), device=preset("a100"))
    assert any("no f8 tensor compute roof" in n for n in p.notes)


@pytest.mark.parametrize("lat", [0, -1, float("nan"), float("inf")])
def test_bad_latency(lat):
    with pytest.raises(ValueError):
        analyze("w", "c", latency_ms=lat, flops=1, bytes=1, unit=("f32", "cuda"), device=H200)


def test_point_json_roundtrips_through_the_serialiser():
    import json
    from cutile_diag.output import dumps
    p = analyze("w", "c", latency_ms=0.5, flops=1e9, bytes=1e9, unit=("f32", "cuda"), device=H200,
                ceilings=ceilings(), grid=(2, 3))
    d = json.loads(dumps(p))
    assert d["grid"] == [2, 3] and d["roof_bw_spec"]["unit"] == "B/s"
    assert d["achieved_tbps"] == pytest.approx(2.0)
