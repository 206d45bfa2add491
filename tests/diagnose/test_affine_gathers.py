"""2-D gathers in library style: A (tile loads) is offered for affine indices, never for
indices read from memory; the spec-less examples get an IR-based diagnosis with launch facts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cutile_diag.capture.aot import capture_aot
from cutile_diag.diagnose.engine import diagnose_capture
from cutile_diag.examples import EXAMPLES_DIR

HERE = Path(__file__).parent
SPECS = {"X": "f16[4096,4000]", "Y": "f16[4096,4000]", "N": "i32", "TILE_N": 1024}


def _diag(tmp_path, kernel, specs):
    folder = capture_aot(f"{HERE / 'gather_kernels.py'}::{kernel}", specs, out_dir=tmp_path)
    return diagnose_capture(folder, arch="sm_90")


def test_affine_row_gathers_offer_a(tmp_path):
    d = _diag(tmp_path, "rows_affine", SPECS)
    facts = {f.key: f.value for f in d.evidence}
    assert facts["ir.block_contiguous_gathers"] == 2 and facts["ir.irregular_gathers"] == 0
    assert "A" in [r.id for r in d.recommendations]


def test_row_index_from_memory_never_offers_a(tmp_path):
    d = _diag(tmp_path, "rows_from_memory", {**SPECS, "Idx": "i32[4096]"})
    facts = {f.key: f.value for f in d.evidence}
    # the Idx read (the same address in every lane), the X gather and the Y scatter: all irregular
    assert facts["ir.irregular_gathers"] == 3 and facts["ir.block_contiguous_gathers"] == 0
    assert "A" not in [r.id for r in d.recommendations]


@pytest.mark.parametrize("name", ["row_norm", "row_lse"])
def test_plan_of_specless_example_captures_and_diagnoses_from_ir(name, capsys, tmp_path, monkeypatch):
    from cutile_diag.cli import main
    monkeypatch.chdir(tmp_path)
    code = main(["optimize", f"{EXAMPLES_DIR / (name + '.py')}::{name}", "--workload", f"examples:{name}",
                 "--plan", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert doc["capture"]["ok"] is True and doc["capture"]["source"] == "workload-cpu"
    diag = doc["diagnosis"]
    assert diag["source"] == "engine"
    ids = [r["id"] for r in diag["recommendations"]]
    b = next(r for r in diag["recommendations"] if r["id"] == "B")
    assert "blocks on 132 SMs" in b["reason"]          # judged on the launch, not a guess
    if name == "row_norm":
        assert ids[0] == "A"
    else:
        assert "P" in ids and "A" not in ids       # NEG_INF padding keeps the row load off TMA


def test_sibling_loops_and_shared_weight_rows_are_tile_shaped(tmp_path):
    d = _diag(tmp_path, "rows_two_pass_weighted", {"X": "bf16[16384,4096]", "W": "bf16[4096]",
                                                    "Y": "bf16[16384,4096]", "Rstd": "f32[16384]", "N": 4096,
                                                    "EPS": 1e-6, "TILE_N": 2048})
    sites = {f.key: [s.detail for s in f.sites] for f in d.evidence}
    facts = {f.key: f.value for f in d.evidence}
    # both x reads (one per loop), the weight read and the y write; only the one-element Rstd store is not
    assert facts["ir.block_contiguous_gathers"] == 4, sites
    assert facts["ir.irregular_gathers"] == 1 and "lane stride 0" in sites["ir.irregular_gathers"][0]
    assert any("the same in every program" in s for s in sites["ir.block_contiguous_gathers"])
    assert "A" in [r.id for r in d.recommendations]


def test_diagnose_specless_workload_without_gpu_uses_its_intercepted_launch(capsys, monkeypatch, tmp_path):
    from cutile_diag.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["diagnose", "examples:row_norm", "--static", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    facts = {f["key"]: f["value"] for f in doc["evidence"]}
    assert facts["launch.grid_blocks"] == facts["launch.grid"][0] and facts["launch.sm_count"] == 132
    assert facts["ir.block_contiguous_gathers"] == 3
    assert doc["recommendations"][0]["id"] == "A"
