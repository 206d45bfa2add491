"""Diagnoses of the real example captures: the expected first recommendation for the expected
reason, nothing the tuned kernel already does, and evidence that points at real lines."""
from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from cutile_diag.cli import main
from cutile_diag.diagnose.engine import diagnose, diagnose_capture


def _ids(d):
    return [r.id for r in d.recommendations]


def _rec(d, id_):
    return next(r for r in d.recommendations if r.id == id_)


def _sites(rec, key=None):
    return [s for f in rec.evidence_facts if key is None or f["key"] == key for s in f.get("sites", [])]


def test_gather_kernel_first_recommends_tma_loads(diagnoses):
    d = diagnoses["gather_scale"]
    assert d.bottleneck == "memory-bound"
    first = d.first
    assert first.id == "A"
    assert first.reason == "pointer gathers on block-contiguous indices"
    assert first.automatic and first.transform == "gather_to_load"
    sites = _sites(first, "ir.block_contiguous_gathers")
    assert {s["op"] for s in sites} == {"load_ptr_tko", "store_ptr_tko"}
    assert all(s["python"].startswith("gather_scale.py:") for s in sites)
    assert any("1024*bid.x + iota(1024)" in s["detail"] for s in sites)


def test_f32_gemm_first_recommends_tf32_guard_with_the_fma_remark(diagnoses):
    d = diagnoses["matmul_f32"]
    assert d.bottleneck == "compute-bound"
    first = d.first
    assert first.id == "D" and first.transform == "tf32_guard"
    assert first.reason == "f32 mma operands without a tf32 cast"
    remark = _sites(first, "remarks.fma_fallback")
    assert remark and remark[0]["op"] == "RemarkTensorCoreMMA"
    assert "FMA" in remark[0]["detail"]
    assert any("RemarkTensorCoreMMA" in line for line in first.evidence)
    assert [s["op"] for s in _sites(first, "ir.mma_f32_operands")] == ["mmaf"]
    # the register spills that come with the fallback are found too, and tied to D
    m = _rec(d, "M")
    assert any("apply it first" in n for n in m.predicted_effect["notes"])


def test_non_persistent_kernel_over_many_tiles_first_recommends_persistent(diagnoses):
    d = diagnoses["vector_add"]
    assert d.bottleneck == "memory-bound"
    assert d.first.id == "B" and d.first.transform == "persistent_grid"
    assert "16384 tiles" in d.first.reason
    out = [f for f in d.first.evidence_facts if f["key"] == "static.output_tiles"][0]
    assert out["value"] == 16384 and "c=f32[16777216]" in out["source"]


@pytest.mark.parametrize("kernel", ["vector_add", "vector_add_persistent", "matmul", "matmul_f32",
                                    "softmax", "gather_scale"])
def test_loads_without_latency_hints_get_e(diagnoses, kernel):
    d = diagnoses[kernel]
    e = _rec(d, "E")
    assert e.transform == "latency_hints"
    assert {s["op"] for s in _sites(e)} <= {"load_view_tko", "load_ptr_tko"}


FIXTURES = Path(__file__).with_name("fixture_kernels.py")


@pytest.fixture(scope="module")
def fixture_diagnoses(tmp_path_factory):
    from cutile_diag.capture.aot import capture_aot
    out = tmp_path_factory.mktemp("fixture-captures")
    return {k: diagnose_capture(capture_aot(f"{FIXTURES}::{k}", archs=("sm_90",), out_dir=out))
            for k in ("matmul_tuned_no_latency", "copy_f_order")}


def test_tuned_kernel_without_latency_hints_first_recommends_hints(fixture_diagnoses):
    """Persistent, swizzled, occupancy pinned, TMA loads — the latency hint is the finding left."""
    d = fixture_diagnoses["matmul_tuned_no_latency"]
    assert {"A", "B", "I"} <= {a["id"] for a in d.already_applied}
    first = d.first
    assert first.id == "E" and first.transform == "latency_hints"
    assert "lowered to TMA without a latency hint" in first.reason
    assert {s["op"] for s in _sites(first, "ir.loop_loads_without_latency")} == {"load_view_tko"}
    assert [s["op"] for s in _sites(first, "remarks.tma_loads")] == ["RemarkMemoryLoadInstructionSelected"] * 2
    # the re-sweeps of the pinned launch configuration come after it
    assert {"C", "G"} <= set(_ids(d)) and "exploratory" in _rec(d, "C").reason


def test_tma_narrow_contiguous_dimension_recommends_p(fixture_diagnoses):
    d = fixture_diagnoses["copy_f_order"]
    first = d.first
    assert first.id == "P"
    assert "under 16 bytes" in first.reason and "16-byte aligned" in first.reason
    site = _sites(first, "ir.tma_narrow_tiles")[0]
    assert site["op"] == "load_view_tko" and "contiguous dimension 4 x 2 B = 8 B < 16 B" in site["detail"]
    assert _sites(first, "remarks.tma_load_failures")[0]["op"] == "RemarkMemoryTmaLoadFailed"


def test_tiles_over_one_tma_box_are_evidence_and_g_when_tma_fails(tmp_path, evidences):
    from cutile_diag.capture.aot import capture_aot
    from cutile_diag.diagnose.collect_capture import collect_capture
    from cutile_diag.examples import EXAMPLES_DIR
    big = {"A": "f16[4096,4096]", "B": "f16[4096,4096]", "C": "f16[4096,4096]", "TM": 512, "TN": 256, "TK": 64}
    ev = collect_capture(capture_aot(f"{EXAMPLES_DIR / 'matmul.py'}::matmul", big, out_dir=tmp_path, name="big"))
    f = ev.get("ir.tma_oversize_tiles")
    assert f.value == 2 and {s.op for s in f.sites} == {"load_view_tko", "store_view_tko"}   # A 512x64, C 512x256
    assert "tile 512x64 = 32768 elements > one TMA box (16384)" in f.sites[0].detail
    # tileiras split it into boxes (no failure): evidence only, G stays on its weak clause
    assert ev.value("remarks.tma_load_failures") == 0
    assert "TMA box" not in _rec(diagnose(ev), "G").reason
    ev.add("remarks.tma_load_failures", 1, "remarks.yaml")
    ev.add("remarks.tma_failure_reasons", ["box too large"], "remarks.yaml")
    assert _rec(diagnose(ev), "G").reason.startswith("tile larger than one TMA box")


def test_change_line_matches_the_class(diagnoses, example_captures, capsys):
    c = _rec(diagnoses["matmul"], "C")
    assert diagnoses["matmul"].bottleneck == "compute-bound" and c.changes[0].startswith("compute-bound:")
    assert not any(x.startswith("memory-bound:") for x in c.changes)
    assert _rec(diagnoses["vector_add"], "C").changes[0].startswith("memory-bound:")
    main(["diagnose", str(example_captures["matmul"].path)])
    out = capsys.readouterr().out
    assert "change: compute-bound: occupancy x num_ctas" in " ".join(out.split())
    assert "memory-bound: sweep occupancy only" not in out


def test_tuned_kernel_gets_none_of_what_it_already_applies(diagnoses):
    d = diagnoses["matmul_tuned"]
    recommended = set(_ids(d))
    assert not recommended & {"B", "I", "E", "D"}, recommended
    applied = {a["id"] for a in d.already_applied}
    assert {"B", "I", "E"} <= applied
    naive = diagnoses["matmul"]
    assert {"B", "I", "E"} <= set(_ids(naive))


def test_tuned_f32_kernel_is_not_told_to_add_the_tf32_guard(tmp_path):
    from cutile_diag.capture.aot import capture_aot
    from cutile_diag.examples import EXAMPLES_DIR
    f32 = {"A": "f32[2048,2048]", "B": "f32[2048,2048]", "C": "f32[2048,2048]", "TM": 64, "TN": 64, "TK": 32,
           "GROUP_SIZE_M": 8}
    cap = capture_aot(f"{EXAMPLES_DIR / 'matmul.py'}::matmul_tuned", f32, out_dir=tmp_path, name="tuned_f32")
    d = diagnose_capture(cap)
    assert not set(_ids(d)) & {"B", "I", "E", "D"}
    assert "D" in {a["id"] for a in d.already_applied}
    assert d.bottleneck != "unknown"


def test_persistent_kernel_is_not_told_to_be_persistent(diagnoses):
    d = diagnoses["vector_add_persistent"]
    assert "B" not in _ids(d)
    assert "B" in {a["id"] for a in d.already_applied}


def test_softmax(diagnoses):
    d = diagnoses["softmax"]
    assert d.bottleneck == "memory-bound"
    # its one TMA store warp-specialises the kernel (256 threads x 255 registers: one block per
    # SM), which outranks everything else; the NEG_INF padding that keeps the load off TMA next
    assert d.first.id == "F"
    assert "warp-specialises this kernel without mma (256 threads, 255 registers" in d.first.reason
    assert "1 resident block(s) per SM" in d.first.reason
    assert _ids(d)[1] == "P" and "zero padding" in _rec(d, "P").reason
    assert {"Q", "R", "H", "B"} <= set(_ids(d))
    # the exp -> exp2 entry cites the exp op
    assert [s["op"] for s in _sites(_rec(d, "Q"), "ir.exp_ops")] == ["exp"]


def test_every_cited_ir_line_holds_its_op(diagnoses):
    """Evidence lines point at real IR lines (the cited line's text contains the op) and real remarks."""
    checked = 0
    for kernel, d in diagnoses.items():
        for r in d.recommendations + []:
            for f in r.evidence_facts:
                for s in f.get("sites", []):
                    if not s.get("file"):
                        continue
                    path = Path(s["file"])
                    assert path.exists(), (kernel, r.id, s)
                    if s.get("line"):
                        text = path.read_text().splitlines()[s["line"] - 1]
                        op = s["op"]
                        if op == "entry":
                            assert text.startswith("entry @"), (kernel, s)
                        else:
                            assert re.search(rf"\b{re.escape(op)}\b", text), (kernel, r.id, s, text)
                        assert s["source"].endswith(f":{s['line']}")
                        checked += 1
                    elif s.get("op", "").startswith("Remark"):
                        assert s["op"] in path.read_text(), (kernel, s)
                        checked += 1
    assert checked > 30


def test_ir_sites_carry_python_lines(diagnoses):
    d = diagnoses["gather_scale"]
    src = (Path(d.first.evidence_facts[0]["sites"][0]["file"]))
    assert src.name == "kernel.loc.tileir"
    py = d.first.evidence_facts[0]["sites"][0]["python"]
    line = int(py.split(":")[1])
    from cutile_diag.examples import EXAMPLES_DIR
    assert "ct.gather" in (EXAMPLES_DIR / "gather_scale.py").read_text().splitlines()[line - 1]


def test_tried_entries_are_demoted(evidences):
    ev = evidences["gather_scale"]
    base = diagnose(ev)
    assert base.first.id == "A"
    d = diagnose(ev, tried=["A"])
    assert d.first.id != "A"
    assert d.recommendations[-1].id == "A" and d.recommendations[-1].tried == 1
    # tried twice sorts after tried once
    d2 = diagnose(ev, tried={"A": 2, "B": 1})
    assert _ids(d2)[-2:] == ["B", "A"]
    # the last resort appears only when everything applicable was tried
    assert "L" not in _ids(base)
    d3 = diagnose(ev, tried=_ids(base))
    assert _ids(d3)[-1] == "L"


def test_sm100_capture_diagnoses_too(example_captures):
    d = diagnose_capture(example_captures["matmul_f32"], arch="sm_100")
    assert d.first.id == "D"
    assert d.context["arch"] == "sm_100"


def test_cli_json(example_captures):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["diagnose", str(example_captures["gather_scale"].path), "--json"])
    assert rc == 0
    doc = json.loads(buf.getvalue())
    assert doc["bottleneck"] == "memory-bound"
    recs = doc["recommendations"]
    assert recs[0]["id"] == "A"
    for r in recs:
        assert {"id", "name", "evidence", "predicted_effect", "automatic"} <= set(r)
        assert isinstance(r["evidence"], list) and r["evidence"]
        assert {"low", "high"} <= set(r["predicted_effect"])


def test_cli_folder_of_captures(example_captures):
    root = example_captures["vector_add"].path.parent
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["diagnose", str(root), "--json"])
    assert rc == 0
    doc = json.loads(buf.getvalue())
    firsts = {d["kernel"]: d["recommendations"][0]["id"] for d in doc["diagnoses"] if d["recommendations"]}
    assert firsts["gather_scale"] == "A" and firsts["vector_add"] == "B"


def test_cli_rich_output(example_captures, capsys):
    rc = main(["diagnose", str(example_captures["matmul_f32"].path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "compute-bound" in out and "TF32 guard" in out and "RemarkTensorCoreMMA" in out


def test_cli_kernel_ref_is_captured_first(capsys):
    rc = main(["diagnose", "gather_scale", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["recommendations"][0]["id"] == "A"
    assert any(c.startswith("capture:") for c in doc["collected"])


def test_recommendation_table_fits_100_columns(diagnoses):
    """Each entry is one line of a 100-column terminal (why and how it applies go to its block below)."""
    import re
    from rich.console import Console
    from cutile_diag.diagnose.render import render_diagnosis
    for name, d in diagnoses.items():
        console = Console(width=100, record=True, color_system=None)
        render_diagnosis(d, console)
        lines = console.export_text().splitlines()
        for i, r in enumerate(d.recommendations, 1):
            row = [ln for ln in lines if re.match(rf"{r.id} +{re.escape(r.name)} +~.* (none|low|medium|high)$", ln.rstrip())]
            assert len(row) == 1, (name, r.id, lines)
            apply = f"auto: {r.transform}" if r.automatic else "manual"
            assert sum(ln.startswith(f"{i}. {r.id} {r.name} ({apply}): ") for ln in lines) == 1
            assert " ".join(r.reason.split()) in " ".join(" ".join(lines).split())
