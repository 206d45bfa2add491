"""GPU evidence (roofline points, host time, baselines, ncu) -> classes and ranking.

Points come from the real roofline model with the H200 preset and recorded latencies, so
these run without a GPU; the @gpu test at the end measures for real.
"""
from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stdout

import pytest

from cutile_diag.cli import main
from cutile_diag.diagnose.collect_gpu import collect_gpu
from cutile_diag.diagnose.engine import diagnose
from cutile_diag.diagnose.evidence import FACTS, Evidence
from cutile_diag.diagnose.playbook import default_playbook
from cutile_diag.roofline.device import preset
from cutile_diag.roofline.model import analyze

DEV = preset("h200")
N = 1 << 24          # vector add 16M f32: 12 bytes and 1 FLOP per element


def _vadd(latency_ms, config="16M-f32", n=N, grid=None):
    return analyze("examples:vector_add", config, latency_ms=latency_ms, flops=n, bytes=12 * n,
                   unit=("f32", "cuda"), device=DEV, grid=grid or (n // 1024,))


def _ev(evidences, kernel):
    return copy.deepcopy(evidences[kernel])


def test_near_roof_memory_bound_caps_the_predicted_effect(evidences):
    ev = _ev(evidences, "vector_add")
    collect_gpu(ev, points=[_vadd(0.0525)], device=DEV, host_ms=0.01)
    d = diagnose(ev)
    assert d.bottleneck == "memory-bound" and d.confidence == "high"
    b = d.first
    assert b.id == "B"
    assert b.predicted_effect["high"] <= 0.26          # at ~80 % of the roof at most ~+25 % is left
    assert any("80% of its roof" in n for n in b.predicted_effect["notes"])
    assert "gpu.grid_blocks" in [f["key"] for f in b.evidence_facts]


def test_far_from_both_roofs_is_latency_bound(evidences):
    ev = _ev(evidences, "vector_add_persistent")
    collect_gpu(ev, points=[_vadd(0.5)], device=DEV, host_ms=0.01)
    d = diagnose(ev)
    assert d.bottleneck == "latency-bound"
    assert d.first.id == "C"                            # occupancy first for latency-bound kernels


def test_host_overhead(evidences):
    ev = _ev(evidences, "vector_add")
    small = _vadd(0.004, "64K-f32", n=1 << 16)
    collect_gpu(ev, points=[small], device=DEV, host_ms=0.04)
    d = diagnose(ev)
    assert d.bottleneck == "host-overhead"
    assert d.first.id == "O"
    assert "K" in [r.id for r in d.recommendations]


def test_above_roof_is_unknown_and_escalates(evidences):
    ev = _ev(evidences, "vector_add")
    collect_gpu(ev, points=[_vadd(0.01)], device=DEV)   # 20 TB/s: impossible
    d = diagnose(ev)
    assert d.bottleneck == "unknown" and d.escalate
    assert any("measurement" in r for r in d.reasons)


def test_sign_flips_against_a_baseline(evidences):
    ev = _ev(evidences, "vector_add")
    now = [_vadd(0.060), _vadd(0.0070, "1M-f32", n=1 << 20)]
    base = [_vadd(0.070), _vadd(0.0050, "1M-f32", n=1 << 20)]
    collect_gpu(ev, points=now, device=DEV, baseline=base, host_ms=0.005)
    assert ev.value("gpu.sign_flips") is True
    d = diagnose(ev)
    assert d.bottleneck == "shape-heterogeneity"
    assert d.first.id == "U"


def test_scheduling_escalates_when_nothing_is_left(evidences):
    ev = _ev(evidences, "vector_add_persistent")
    collect_gpu(ev, points=[_vadd(0.12)], device=DEV, host_ms=0.01)   # ~35 % of the roof
    first = diagnose(ev)
    assert not first.escalate
    d = diagnose(ev, tried=[r.id for r in first.recommendations])
    assert d.bottleneck == "scheduling" and d.escalate
    assert d.recommendations[-1].id == "L"


def test_tail_effect_from_the_launched_grid(evidences):
    ev = _ev(evidences, "matmul")
    # 200 output tiles of a 1-CTA-per-SM kernel on 132 SMs: 1.5 waves, a third idle
    p = analyze("examples:matmul", "odd", latency_ms=0.05, flops=2 * 1792 ** 2 * 4096, bytes=3 * 2 * 4096 * 1792,
                unit=("f16", "tensor"), device=DEV, grid=(200,))
    collect_gpu(ev, points=[p], device=DEV, host_ms=0.01)
    assert ev.value("gpu.waves") == pytest.approx(200 / 132, abs=0.01)
    n = next(r for r in diagnose(ev).recommendations if r.id == "N")
    assert "waves" in n.reason


def test_ncu_metrics(evidences):
    ev = _ev(evidences, "vector_add")
    collect_gpu(ev, points=[_vadd(0.5)], device=DEV, host_ms=0.01,
                ncu={"sm__warps_active.avg.pct_of_peak_sustained_active": 12.0,
                     "launch__registers_per_thread": 28, "dram__bytes.sum": 2.0e8})
    assert ev.value("ncu.achieved_occupancy_pct") == 12.0
    assert ev.value("ncu.registers") == 28
    d = diagnose(ev)
    assert d.bottleneck == "latency-bound" and d.confidence == "medium"


def test_every_playbook_fact_can_be_produced(evidences, tmp_path):
    """Every key a playbook predicate reads is produced by some collector run."""
    from cutile_diag.capture.aot import capture_aot
    from cutile_diag.diagnose.collect_capture import collect_capture
    from cutile_diag.examples import EXAMPLES_DIR
    produced = set()
    for ev in evidences.values():
        produced |= set(ev.facts)
    # an occupancy hint is what puts a .maxnreg budget into the PTX
    hinted = capture_aot(f"{EXAMPLES_DIR / 'vector_add.py'}::vector_add", out_dir=tmp_path, hints={"occupancy": 8})
    hev = collect_capture(hinted)
    assert hev.value("ir.hint_occupancy") == 8 and hev.value("ir.kernel_hints_set") is True
    produced |= set(hev.facts)
    # a capture taken from an intercepted launch carries the launch.* facts
    from cutile_diag.measure.capture import capture_auto
    launched = capture_auto(f"{EXAMPLES_DIR / 'row_lse.py'}::row_lse", workload="examples:row_lse",
                            out_dir=tmp_path / "launched", gpu=False)
    produced |= set(collect_capture(launched.folder).facts)
    ev = _ev(evidences, "matmul")
    now = [analyze("examples:matmul", "a", latency_ms=0.3, flops=1.4e11, bytes=1e8, unit=("f16", "tensor"),
                   device=DEV, grid=(32, 32)),
           _vadd(0.06)]
    collect_gpu(ev, points=now, device=DEV, baseline=[_vadd(0.07, "a")], host_ms=0.01,
                ncu={"spill_bytes": 0, "sm_throughput_pct": 50, "dram_throughput_pct": 40,
                     "achieved_occupancy_pct": 30, "registers": 128, "dram_bytes": 1e8, "l2_hit_pct": 70})
    produced |= set(ev.facts)
    # a multi-pass kernel, schedule remarks (newer tileiras) and an Nsight Compute export
    from pathlib import Path

    from cutile_diag.diagnose.ncu_rules import collect_ncu_rules
    from test_evidence_sources import EXPORT, with_schedule_remarks
    here = Path(__file__).parent
    mp = capture_aot(f"{here / 'multipass_kernels.py'}::rms_two_pass_load", out_dir=tmp_path / "mp")
    mev = collect_capture(with_schedule_remarks(mp, tmp_path))
    collect_ncu_rules(mev, json.loads(EXPORT.read_text()))
    produced |= set(mev.facts)
    used = set().union(*(e.fact_keys() for e in default_playbook().entries))
    assert used <= produced, sorted(used - produced)
    assert produced <= set(FACTS)


def test_harness_records_without_a_roofline(evidences):
    ev = _ev(evidences, "vector_add")
    now = [{"config": "a", "forward": {"median": 0.10, "rel_std": 0.4}}, {"config": "b", "median": 0.30}]
    base = [{"config": "a", "median": 0.12}, {"config": "b", "median": 0.25}]
    collect_gpu(ev, records=now, baseline=base)
    assert ev.value("gpu.latency_ms") == 0.10 and ev.value("gpu.sign_flips") is True
    assert "gpu.roofline_class" not in ev
    d = diagnose(ev)
    assert d.bottleneck == "shape-heterogeneity" and d.first.id == "U"


def test_no_measurement_is_named():
    ev = Evidence()
    collect_gpu(ev, points=[])
    assert any(n.check.startswith("roofline") for n in ev.not_checked)


def test_cli_offline_recorded_latency(capsys):
    rc = main(["diagnose", "examples:vector_add", "--config", "16M-f32", "--device", "h200",
               "--latency-ms", "0.0525", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert doc["bottleneck"] == "memory-bound"
    facts = {f["key"]: f["value"] for f in doc["evidence"]}
    assert facts["gpu.roofline_class"] == "memory-bound" and 75 < facts["gpu.pct_of_roof"] < 85
    assert doc["recommendations"][0]["id"] == "B"


def test_cli_roofline_file(example_captures, tmp_path):
    f = tmp_path / "roofline.json"
    f.write_text(json.dumps({"points": [_vadd(0.0525).to_json()]}))
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["diagnose", str(example_captures["vector_add"].path), "--roofline", str(f), "--json"])
    doc = json.loads(buf.getvalue())
    assert rc == 0 and any(c.startswith("gpu:") for c in doc["collected"])
    assert doc["confidence"] == "high"


@pytest.fixture(scope="module")
def roofline_json(tmp_path_factory):
    """What `cutile-diag roofline WORKLOAD --json` really writes (results[].point.latency_ms ...)."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["roofline", "examples:matmul_f32", "--device", "h200", "--latency-ms", "1024-f32=0.405",
                   "2048-f32=3.1", "--json"])
    assert rc == 0
    f = tmp_path_factory.mktemp("roofline") / "rf.json"
    f.write_text(buf.getvalue())
    assert "latency_ms" not in json.loads(f.read_text())["results"][0]      # nested under 'point'
    return f


def _diagnose_json(*argv):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["diagnose", *argv, "--json"])
    return rc, json.loads(buf.getvalue())


def test_cli_roofline_file_from_the_roofline_command(example_captures, roofline_json):
    rc, doc = _diagnose_json(str(example_captures["matmul_f32"].path), "--roofline", str(roofline_json))
    facts = {f["key"]: f["value"] for f in doc["evidence"]}
    assert rc == 0 and any(c.startswith("gpu: 2 configuration") for c in doc["collected"])
    # the single-valued facts describe the costliest configuration, and the output says which
    assert facts["gpu.latency_ms"] == 3.1 and facts["gpu.configs"] == 2
    assert any("2048-f32 (the costliest of 2" in n for n in doc["notes"])
    assert facts["gpu.roofline_class"] == "compute-bound" and facts["gpu.pct_of_roof"] < 25
    assert doc["recommendations"][0]["id"] == "D"


def test_fma_fallback_stays_first_when_the_gpu_says_latency_bound(example_captures, roofline_json, tmp_path):
    """Low occupancy (ncu) + far from the roof: latency-bound, whose class order puts C before D —
    but the FMA fallback is the root cause, so D still comes first."""
    ncu = tmp_path / "ncu.json"
    ncu.write_text(json.dumps({"kernels": [{"name": "matmul", "duration_ns": 3.1e6, "achieved_occupancy_pct": 11.5,
                                            "registers_per_thread": 255}]}))
    rc, doc = _diagnose_json(str(example_captures["matmul_f32"].path), "--roofline", str(roofline_json),
                             "--ncu", str(ncu))
    facts = {f["key"]: f["value"] for f in doc["evidence"]}
    assert rc == 0 and doc["bottleneck"] == "latency-bound"
    assert facts["ncu.achieved_occupancy_pct"] == 11.5 and facts["ncu.registers"] == 255
    recs = {r["id"]: r for r in doc["recommendations"]}
    assert recs["C"]["rank"] < recs["D"]["rank"]          # the class order alone would pick C
    assert doc["recommendations"][0]["id"] == "D" and recs["D"]["root_cause"]
    assert any("RemarkTensorCoreMMA" in line for line in recs["D"]["evidence"])


def test_offline_latency_names_the_configuration_it_describes(capsys):
    rc = main(["diagnose", "examples:vector_add", "--config", "1M-f32", "--config", "16M-f32", "--device", "h200",
               "--latency-ms", "0.0525", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["context"]["configuration"] == "16M-f32" and doc["kernel"].endswith("(16M-f32)")
    assert "--latency-ms 0.0525 applied to configuration 16M-f32, the costliest of the 2 selected (choose one " \
           "with --config)" in doc["notes"]


def test_latency_ms_on_a_capture_folder_is_an_error(example_captures, capsys):
    assert main(["diagnose", str(example_captures["vector_add"].path), "--device", "h200", "--latency-ms", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cutile-diag: error:") and "need a workload" in err and "\n" not in err


def test_cli_usage_errors(capsys):
    assert main(["diagnose", "examples:vector_add", "--latency-ms", "1"]) == 2
    assert "--device" in capsys.readouterr().err
    assert main(["diagnose", "examples:vector_add", "--device", "h999", "--latency-ms", "1"]) == 2
    assert "unknown device preset" in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_diagnosis_of_an_example_workload(capsys):
    rc = main(["diagnose", "examples:vector_add", "--config", "16M-f32", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    facts = {f["key"]: f["value"] for f in doc["evidence"]}
    assert facts["gpu.roofline_class"] == "memory-bound"
    assert doc["recommendations"]


def test_a_persistent_grid_far_below_the_resident_slots_gets_more_blocks(evidences):
    """vector_add_persistent keeps 12 blocks per SM resident; launched on 2 per SM, entry Y
    (grid_resize) ranks before the hint sweep; with more than half of the slots busy it does not apply."""
    ev = _ev(evidences, "vector_add_persistent")
    assert ev.value("cubin.resident_ctas") == 12 and ev.value("ir.persistent_loop") is True
    collect_gpu(ev, points=[_vadd(0.25, grid=(132 * 2,))], device=DEV, host_ms=0.01)
    d = diagnose(ev)
    y = next(r for r in d.recommendations if r.id == "Y")
    assert y.transform == "grid_resize" and "264 programs for 132 SMs x 12 resident slots" in y.reason
    assert d.ids().index("Y") < d.ids().index("C")
    for per_sm, applies in ((6, True), (7, False), (12, False)):      # up to half of the slots busy
        ev = _ev(evidences, "vector_add_persistent")
        collect_gpu(ev, points=[_vadd(0.25, grid=(132 * per_sm,))], device=DEV, host_ms=0.01)
        assert ("Y" in diagnose(ev).ids()) is applies, per_sm
