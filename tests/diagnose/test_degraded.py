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


def _loop_ledger(state):
    """A ledger written by the loop's own Ledger: A reverted, B kept (>= 5 %), E kept but demoted."""
    from cutile_diag.ledger import Ledger
    led = Ledger(state)
    led.create({"type": "setup", "kernel": "gather_scale"})
    row = {"type": "iteration", "latency_ms": 1.0, "correctness": "PASS"}
    for it, entry, status, demote in ((0, None, "keep", False), (1, "A", "revert", False),
                                      (2, "B", "keep", False), (3, "E", "keep", True)):
        led.append({**row, "iteration": it, "optimization": entry or "baseline", "status": status,
                    "entry": {"id": entry} if entry else None, "decision": {"demote": demote}})
    return led


@pytest.mark.parametrize("point_at", ["file", "folder"])
def test_cli_ledger_uses_the_loops_rule(example_captures, tmp_path, capsys, point_at):
    led = _loop_ledger(tmp_path / "state")
    assert set(led.tried()) == {"A", "E"}
    target = led.path if point_at == "file" else led.dir
    rc = main(["diagnose", str(example_captures["gather_scale"].path), "--ledger", str(target), "--json"])
    doc = json.loads(capsys.readouterr().out)
    tried = {r["id"]: r["tried"] for r in doc["recommendations"]}
    assert rc == 0 and doc["recommendations"][0]["id"] == "B"     # A demoted, B kept as a win
    assert tried["A"] == 1 and tried["E"] == 1 and tried["B"] == 0


def _bad(path, kind):
    if kind == "folder":
        path.mkdir()
    elif kind == "latin1":
        path.write_bytes("{\"caf\u00e9\": 1}\n".encode("latin-1"))
    else:
        path.write_text("{not json\n")
    return path


@pytest.mark.parametrize("option", ["--ledger", "--roofline", "--ncu"])
@pytest.mark.parametrize("kind, message", [("folder", "folder"), ("latin1", "not UTF-8"), ("garbage", "not JSON")])
def test_cli_bad_evidence_files_are_one_line(example_captures, tmp_path, capsys, option, kind, message):
    f = _bad(tmp_path / "input", kind)
    rc = main(["diagnose", str(example_captures["gather_scale"].path), option, str(f)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("cutile-diag: error:") and "\n" not in err and "Traceback" not in err
    assert message in err, err


def test_cli_tried_normalises_case_and_rejects_unknown_ids(example_captures, capsys):
    cap = str(example_captures["gather_scale"].path)
    assert main(["diagnose", cap, "--tried", "ZZ,d"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cutile-diag: error:") and "'ZZ'" in err and "A,B,C,D" in err and "\n" not in err
    assert main(["diagnose", cap, "--tried", " a ", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["recommendations"][0]["id"] != "A"
    assert [r["tried"] for r in doc["recommendations"] if r["id"] == "A"] == [1]


@pytest.mark.parametrize("edit, skipped", [
    (lambda m: m.update(targets=["sm_90"]), "'targets' is a list"),
    (lambda m: m.update(targets="sm_90"), "'targets' is a string"),
    (lambda m: m.update(kernel="gather_scale"), "'kernel' is a string"),
    (lambda m: m.update(signature="x=f32[16]"), "'signature' is a string"),
    (lambda m: m["signature"].update(spec=["f32[16]"]), "'signature.spec' is a list"),
    (lambda m: m["targets"].update(sm_90=[1]), "'targets.sm_90' is a list"),
])
def test_manifest_of_another_shape_degrades(example_captures, tmp_path, capsys, edit, skipped):
    cap = _copy(example_captures, "gather_scale", tmp_path)
    m = json.loads((cap / "manifest.json").read_text())
    edit(m)
    (cap / "manifest.json").write_text(json.dumps(m))
    rc = main(["diagnose", str(cap), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and any(skipped in n and "ignored" in n for n in doc["notes"]), doc["notes"]
    assert doc["recommendations"][0]["id"] == "A"        # the files themselves still diagnose


def test_manifest_that_is_not_an_object_is_one_line(example_captures, tmp_path, capsys):
    cap = _copy(example_captures, "gather_scale", tmp_path)
    (cap / "manifest.json").write_text("[1, 2]")
    assert main(["diagnose", str(cap)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cutile-diag: error:") and "not a JSON object" in err and "\n" not in err


def test_empty_remarks_are_named_not_checked(example_captures, tmp_path):
    cap = _copy(example_captures, "matmul_f32", tmp_path)
    (cap / "sm_90" / "remarks.yaml").write_text("")
    d = diagnose_capture(cap)
    assert "remarks (TMA selection, FMA fallback): sm_90/remarks.yaml is empty" in _checks(d)
    facts = {f.key: f for f in d.evidence}
    assert facts["remarks.available"].value is False and facts["remarks.available"].detail == "empty"
    assert "remarks.fma_fallback" not in facts and "remarks.tma_stores" not in facts
    assert d.first.id == "D"                       # the IR still proves the f32 mma
    assert "F" in {p["id"] for p in d.possible}    # a TMA store cannot be ruled in or out


def test_unknown_entry_on_a_capture_folder_is_an_error(example_captures, capsys):
    rc = main(["diagnose", str(example_captures["gather_scale"].path), "--entry", "nope"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("cutile-diag: error:") and "no entry 'nope'" in err and "\n" not in err


@pytest.mark.parametrize("corrupt", [b"\x00\xff garbage", b"entry @k() optimization_hints=<default = {}> {\n  %0 ="])
def test_corrupt_loc_tileir_falls_back_to_the_plain_text(example_captures, tmp_path, corrupt):
    cap = _copy(example_captures, "gather_scale", tmp_path)
    (cap / "kernel.loc.tileir").write_bytes(corrupt)
    d = diagnose_capture(cap)
    assert d.first.id == "A"
    assert d.first.evidence_facts[0]["sites"][0]["source"].startswith("kernel.tileir:")
    assert any(n.startswith("kernel.loc.tileir:") and "read kernel.tileir instead" in n for n in d.notes), d.notes
    assert "Python source lines of IR ops: kernel.loc.tileir" in _checks(d)
    assert not any(n.check.startswith("TileIR structure") for n in d.not_checked)
