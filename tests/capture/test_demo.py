"""``cutile-diag demo``: the README's main job on the bundled kernels (no GPU)."""
from __future__ import annotations

import contextlib
import io
import json
import shlex

import pytest

from cutile_diag.cli import main


@pytest.fixture(scope="module")
def demo_json(tmp_path_factory):
    """One JSON demo run shared by the tests (capsys is function-scoped)."""
    out = tmp_path_factory.mktemp("demo")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["demo", "--out", str(out), "--json"])
    assert code == 0
    return out, json.loads(buf.getvalue())


def test_demo_json_captures_diffs_and_diagnoses(demo_json):
    out, doc = demo_json
    assert set(doc["kernels"]) >= {"vector_add", "vector_add_persistent", "matmul", "matmul_f32",
                                   "matmul_tuned", "softmax", "gather_scale"}
    for k in doc["kernels"]:
        assert (out / k / "manifest.json").is_file()
    diff = doc["diff"]["result"]
    assert diff["equivalent"] is False
    kinds = {c["kind"] for c in diff["changes"]}
    assert {"persistent_loop", "op_hint"} <= kinds
    assert set(doc["diagnoses"]) == set(doc["kernels"])        # every kernel, the tuned ones too
    first = {k: d["recommendations"][0]["id"] for k, d in doc["diagnoses"].items()}
    assert first["gather_scale"] == "A" and first["matmul_f32"] == "D"


def test_demo_shows_a_simulated_campaign(demo_json):
    out, doc = demo_json
    rows = {r["kernel"]: r for r in doc["campaign"]["kernels"]}
    assert sorted(rows) == ["row_norm", "softmax", "vector_add"]
    assert all(r["status"] == "done" and r["start_ms"] and r["final_ms"] for r in rows.values())
    # the simulated gather -> tile-load step: the spec's ratio, never reported as a speedup
    assert rows["row_norm"]["speedup"] is None and rows["row_norm"]["simulated_speedup"] > 1.3
    assert (out / "campaign" / "kernels" / "cutile-diag-out" / "campaign" / "campaign.html").is_file()


def test_demo_rich_output_is_readable_and_its_next_commands_run_as_printed(capsys, demo_json, monkeypatch,
                                                                          tmp_path):
    out, _ = demo_json
    monkeypatch.setenv("CUTILE_DIAG_PROG", "./dev")
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--out", str(out), "--kernel", "matmul", "--kernel", "matmul_tuned"]) == 0
    text = capsys.readouterr().out
    assert "structural IR diff: matmul → matmul_tuned" in text
    assert "persistent_loop" in text and "diagnosis: matmul" in text and "diagnosis: matmul_tuned" in text
    assert "DiffResult(" not in text          # a rendering, never a repr
    # the closing hints: whole commands, each on its own line, as ./dev runs them
    nxt = [ln.split("#")[0] for ln in text.split("\nNext:\n", 1)[1].splitlines() if ln.strip()]
    assert [ln.split()[0] for ln in nxt] == ["./dev"] * 3
    assert f"./dev ir-diff {out}/matmul {out}/matmul_tuned --html diff.html" in text
    assert "cutile-diag ir-diff" not in text and "ir-diff A B" not in text
    for line in nxt:
        argv = shlex.split(line)[1:]
        rc = main(argv)
        capsys.readouterr()
        assert rc == (1 if argv[0] == "ir-diff" else 0), line     # ir-diff: 1 = the two differ
    assert (tmp_path / "diff.html").is_file()


def test_demo_unknown_kernel_is_one_line(capsys, tmp_path):
    assert main(["demo", "--out", str(tmp_path), "--kernel", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no example kernel nope" in err[0]
