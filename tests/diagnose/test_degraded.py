"""Bad or partial input: the engine degrades to what it can see and names what it could not check."""
from __future__ import annotations

import json
import shutil

import pytest

from cutile_diag.cli import main
from cutile_diag.diagnose.engine import diagnose_capture, diagnose_tileir


def _copy(example_captures, name, tmp_path):
    dst = tmp_path / name
    shutil.copytree(example_captures[name].path, dst)
    return dst


def _checks(d):
    return " | ".join(f"{n.check}: {n.missing}" for n in d.not_checked)


def test_other_schema_version(example_captures, tmp_path):
    cap = _copy(example_captures, "gather_scale", tmp_path)
    m = json.loads((cap / "manifest.json").read_text())
    m["schema"] = "cutile-diag.capture/0"
    del m["targets"]          # an older writer without the targets table
    (cap / "manifest.json").write_text(json.dumps(m))
    d = diagnose_capture(cap)
    assert any("schema" in n and "capture/0" in n for n in d.notes)
    assert {f.key: f.value for f in d.evidence}["capture.schema_ok"] is False
    # the arch folder on disk is still found: remarks and SASS are read
    assert d.context["arch"] == "sm_90"
    assert d.first.id == "A"


def test_missing_remarks_and_ptxas(example_captures, tmp_path):
    cap = _copy(example_captures, "matmul_f32", tmp_path)
    (cap / "sm_90" / "remarks.yaml").unlink()
    (cap / "sm_90" / "ptxas.txt").unlink()
    d = diagnose_capture(cap)
    text = _checks(d)
    assert "remarks (TMA selection, FMA fallback): sm_90/remarks.yaml is not in the capture" in text
    assert "register spills: sm_90/ptxas.txt is not in the capture" in text
    assert d.first.id == "D"                       # the IR alone still proves the f32 mma
    assert "F" in {p["id"] for p in d.possible}    # TMA store unknown without remarks
    assert "M" not in [r.id for r in d.recommendations]


def test_corrupt_remarks(example_captures, tmp_path):
    cap = _copy(example_captures, "softmax", tmp_path)
    (cap / "sm_90" / "remarks.yaml").write_text("--- !Passed\nName: [unclosed\n")
    d = diagnose_capture(cap)
    assert "remarks (TMA selection, FMA fallback): sm_90/remarks.yaml" in _checks(d)
    assert d.recommendations                       # still diagnosed from the IR


def test_no_locations(example_captures, tmp_path):
    cap = _copy(example_captures, "gather_scale", tmp_path)
    (cap / "kernel.loc.tileir").unlink()
    d = diagnose_capture(cap)
    assert "Python source lines of IR ops" in _checks(d)
    site = d.first.evidence_facts[0]["sites"][0]
    assert site["source"].startswith("kernel.tileir:") and "python" not in site


def test_no_tileir_at_all(example_captures, tmp_path):
    cap = _copy(example_captures, "matmul_f32", tmp_path)
    (cap / "kernel.loc.tileir").unlink()
    (cap / "kernel.tileir").unlink()
    d = diagnose_capture(cap)
    assert "TileIR structure" in _checks(d)
    facts = {f.key: f.value for f in d.evidence}
    assert facts["remarks.fma_fallback"] == 1 and facts["cubin.spill_bytes"] > 0
    assert d.bottleneck == "compute-bound"         # the FMA-fallback remark alone says so
    assert d.first.id == "D" and "unknown without the TileIR" in d.first.reason
    assert "M" in [r.id for r in d.recommendations]


def test_no_compiled_target(example_captures, tmp_path):
    cap = _copy(example_captures, "vector_add", tmp_path)
    for a in ("sm_90", "sm_100"):
        shutil.rmtree(cap / a)
    m = json.loads((cap / "manifest.json").read_text())
    m["targets"] = {}
    (cap / "manifest.json").write_text(json.dumps(m))
    d = diagnose_capture(cap)
    assert "the capture has no compiled target" in _checks(d)
    assert "E" in [r.id for r in d.recommendations]


def test_bare_tileir_file_is_static_only(example_captures):
    d = diagnose_tileir(example_captures["gather_scale"].path / "kernel.loc.tileir")
    assert d.first.id == "A"
    text = _checks(d)
    for what in ("remarks", "register spills", "grid size vs SMs", "roofline class"):
        assert what in text
    # B cannot be decided without shapes: recommended with the weak clause, saying why
    b = next(r for r in d.recommendations if r.id == "B")
    assert "grid size is unknown" in b.reason


def test_kernel_with_no_loads_or_stores(tmp_path):
    src = tmp_path / "noload.py"
    src.write_text("import cuda.tile as ct\n\n\n@ct.kernel\ndef no_memory(x, N: ct.Constant[int]):\n"
                   "    t = ct.full((N,), 1.0, dtype=ct.float32)\n    s = ct.sum(t * 2.0)\n")
    from cutile_diag.capture.aot import capture_aot
    cap = capture_aot(f"{src}::no_memory", {"x": "f32[1024]", "N": 64}, out_dir=tmp_path / "caps")
    d = diagnose_capture(cap)
    assert d.bottleneck == "unknown" and d.escalate
    assert d.recommendations == []
    assert any("no global loads" in n for n in d.notes)


def test_tileir_text_with_an_empty_entry():
    d = diagnose_tileir("entry @k_Kt2_I1() optimization_hints=<default = {}> {\n  return\n}\n")
    assert d.bottleneck == "unknown" and d.recommendations == []


def _write(p, data):
    (p.write_bytes if isinstance(data, bytes) else p.write_text)(data)
    return p


def _mkdir(p):
    p.mkdir()
    return p


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "nothing-here", "not a file"),
    (lambda p: _write(p / "k.cubin", b"\x7fELF\x02\x01" + b"\0" * 80), "not TileIR text"),
    (lambda p: _write(p / "k.tileir", ""), "empty file"),
    (lambda p: _write(p / "k.tileir", "def f():\n    pass\n"), "is this TileIR text"),
    (lambda p: _write(p / "k.tileir", "entry @k() optimization_hints=<default = {}> {\n  %0 = make_token : token\n"),
     "truncated"),
    (lambda p: _mkdir(p / "d"), "not a capture folder"),
])
def test_cli_bad_input_is_one_line(tmp_path, capsys, make, message):
    target = make(tmp_path)
    rc = main(["diagnose", str(target)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith("cutile-diag: error:") and "\n" not in err and "Traceback" not in err
    assert message in err


def test_cli_ledger(example_captures, tmp_path, capsys):
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text('{"iteration": 0, "optimization": "baseline"}\n'
                      '{"iteration": 1, "playbook_id": "A", "status": "keep"}\n')
    rc = main(["diagnose", str(example_captures["gather_scale"].path), "--ledger", str(ledger), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["recommendations"][0]["id"] != "A"
    assert [r for r in doc["recommendations"] if r["id"] == "A"][0]["tried"] == 1
    ledger.write_text("{not json\n")
    rc = main(["diagnose", str(example_captures["gather_scale"].path), "--ledger", str(ledger)])
    assert rc == 2 and "not a JSON line" in capsys.readouterr().err
