"""Classification, percent of roof, verdicts and the above-roof guard."""
import pytest

from cutile_diag.roofline.device import Quantity, preset
from cutile_diag.roofline.model import analyze, recipe_class
from cutile_diag.roofline.peaks import Ceilings, recorded_ceilings

H200 = preset("h200")
BW = H200.theoretical_dram_bw().value              # 4.814e12 (2 x 3201 MHz x 6016 bit)
BF16 = H200.theoretical_flops("bf16", "tensor").value   # 1070e12 at the 1980 MHz max clock
DS_BW, DS_BF16 = 4.8e12, 989.5e12                   # NVIDIA's H200 SXM datasheet


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
    assert p.pct_datasheet == pytest.approx(100 * 4e12 / DS_BW)
    assert p.pct_theoretical == pytest.approx(100 * 4e12 / BW)
    assert p.pct_measured == pytest.approx(100 * 4e12 / 4.29e12)
    assert p.valid and p.level == "near"
    assert "structural change" in p.verdict and "fewer bytes" in p.verdict


def test_compute_bound_point_uses_the_compute_roof():
    flops = 2 * 8192 ** 3
    p = analyze("w", "c", latency_ms=2.0, flops=flops, bytes=3 * 8192 * 8192 * 2, unit=("bf16", "tensor"),
                device=H200, ceilings=ceilings())
    assert p.bound == "compute" and p.recipe_class == "compute-bound"
    # the datasheet's 989, not the 1070 of table rate x max clock, is the "datasheet" figure
    assert p.roof_flops_datasheet.value == pytest.approx(DS_BF16)
    assert p.pct_datasheet == pytest.approx(100 * (flops / 2e-3) / DS_BF16)
    assert p.pct_theoretical == pytest.approx(100 * (flops / 2e-3) / BF16)
    assert p.pct_measured == pytest.approx(100 * (flops / 2e-3) / 777e12)
    assert p.level == "moderate" and "compute roof (measured ceiling)" in p.verdict
    assert "tensor-core" in p.verdict


def test_verdict_cites_the_datasheet_without_ceilings():
    flops = 2 * 8192 ** 3
    p = analyze("w", "c", latency_ms=2.0, flops=flops, bytes=3 * 8192 * 8192 * 2, unit=("bf16", "tensor"),
                device=preset("h100"))
    assert p.pct_measured is None and "compute roof (datasheet)" in p.verdict
    d = p.to_json()
    assert d["pct_theoretical"] < d["pct_datasheet"]       # the theoretical roof is the higher one


def test_unknown_datasheet_figure_is_unknown_not_borrowed():
    # no datasheet figure for f16 CUDA-core math: a compute-bound point has no % of datasheet, and says why
    p = analyze("w", "c", latency_ms=1.0, flops=100e12 * 1e-3, bytes=1e6, unit=("f16", "cuda"), device=H200)
    assert p.bound == "compute" and p.pct_datasheet is None and p.pct_theoretical is not None
    assert any("% of datasheet unknown" in n for n in p.notes)
    assert "(theoretical roof at max clock)" in p.verdict
    # a memory-bound point still has the datasheet bandwidth
    q = analyze("w", "c", latency_ms=1.0, flops=1e6, bytes=2.4e9, unit=("f16", "cuda"), device=H200)
    assert q.pct_datasheet == pytest.approx(50.0)


def test_ridge_overrides_the_recipe_with_a_note():
    # AI 40 is "balanced" for the recipe, but far left of the H200 bf16 ridge (~222 FLOP/B)
    p = analyze("w", "c", latency_ms=1.0, flops=40e9, bytes=1e9, unit=("bf16", "tensor"), device=H200)
    assert p.recipe_class == "balanced" and p.bound == "memory"
    assert p.ridge_theoretical == pytest.approx(BF16 / BW)
    assert p.ridge_datasheet == pytest.approx(DS_BF16 / DS_BW)
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
    assert any("above the measured DRAM ceiling" in r for r in p.invalid_reasons)


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
    assert not p.valid and any("exceeds the theoretical bandwidth" in r for r in p.invalid_reasons)
    # a FLOP rate above the theoretical peak is invalid whatever the bandwidth says
    q = analyze("w", "c", latency_ms=1.0, flops=1.2e15 * 1e-3, bytes=1e6, unit=("bf16", "tensor"), device=H200)
    assert not q.valid and any("theoretical bf16 tensor peak" in r for r in q.invalid_reasons)
    # above the datasheet (quoted at a lower clock) but below the theoretical roof: not a guard
    r = analyze("w", "c", latency_ms=1.0, flops=1.0e15 * 1e-3, bytes=1e6, unit=("bf16", "tensor"), device=H200)
    assert r.valid and r.pct_datasheet > 100


def test_offline_h200_preset_guards_with_the_recorded_ceilings():
    c = recorded_ceilings(H200)
    assert c.dram_bw.value == pytest.approx(4.24e12, rel=1e-3)
    assert c.flops["f16:tensor"].value == pytest.approx(727e12, rel=1e-3)
    flops = 2 * 4096 ** 3
    # 0.18 ms = 764 TFLOP/s: only 71 % of the theoretical roof, but 5 % above the measured cuBLAS f16 ceiling
    p = analyze("w", "c", latency_ms=0.18, flops=flops, bytes=3 * 4096 * 4096 * 2, unit=("f16", "tensor"),
                device=H200, ceilings=c, latency_source="recorded")
    assert not p.valid and p.level == "invalid" and "win" not in p.verdict
    assert any("measured f16 tensor ceiling" in r and "recorded for this preset" in r for r in p.invalid_reasons)
    # 0.2155 ms = 638 TFLOP/s: 88 % of the measured ceiling, a valid point
    q = analyze("w", "c", latency_ms=0.2155, flops=flops, bytes=3 * 4096 * 4096 * 2, unit=("f16", "tensor"),
                device=H200, ceilings=c, latency_source="recorded")
    assert q.valid and q.pct_measured == pytest.approx(87.7, abs=0.1)
    assert any("bench/results/optimize-h200/peaks.json" in n for n in q.notes)
    # bandwidth: 4.40 TB/s is inside the theoretical 4.81 but 3.8 % above the recorded 4.24
    b = analyze("w", "c", latency_ms=1.0, flops=0, bytes=4.40e9, unit=("f32", "cuda"), device=H200, ceilings=c)
    assert not b.valid and any("measured DRAM ceiling" in r for r in b.invalid_reasons)


def test_presets_without_a_measurement_say_so():
    assert recorded_ceilings(preset("a100")) is None and recorded_ceilings(preset("b200")) is None
    p = analyze("w", "c", latency_ms=1.0, flops=0, bytes=1e9, unit=("f32", "cuda"), device=preset("a100"))
    assert any("no measured ceilings" in n and "only the theoretical roof" in n for n in p.notes)


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
    assert p.ai == 0 and p.bound == "memory" and p.pct_theoretical == pytest.approx(100 * 2e12 / BW)
    assert p.pct_datasheet == pytest.approx(100 * 2e12 / DS_BW)


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
    assert d["grid"] == [2, 3] and d["roof_bw_datasheet"]["unit"] == "B/s"
    assert d["roof_bw_theoretical"]["value"] == pytest.approx(BW) and d["roof_bw_measured"]["value"] == 4.29e12
    assert d["achieved_tbps"] == pytest.approx(2.0)
