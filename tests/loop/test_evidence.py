"""The loop's per-version evidence: capture sources, the IR diff line, no-op steps."""
import json

from cutile_diag.loop import decide
from cutile_diag.loop.evidence import capture_sources, diff_line, iteration_evidence, no_op, uncredit


def _cap(tmp_path, name, grid):
    d = tmp_path / name
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"launch": {"grid": grid, "args": [{"name": "X", "spec": "f16[8]"}]}}))
    return str(d)


def test_capture_sources_follow_the_backend(tmp_path):
    assert capture_sources({"backend": "workload", "workload": "examples:row_norm", "kwargs": {"source": "k.py"},
                            "configs": ["a", "b"]}) == {"workload": "examples:row_norm",
                                                        "kwargs": {"source": "k.py"}, "config": "a"}
    assert capture_sources({"backend": "command", "test_cmd": "pytest t.py"}) == {"command": "pytest t.py"}
    s = capture_sources({"backend": "simulated"}, "examples:row_lse", kernel_file=tmp_path / "row_lse.py")
    assert s == {"workload": "examples:row_lse", "kwargs": {"source": str(tmp_path / "row_lse.py")}}


def test_empty_diff_is_a_no_op_and_not_credited(tmp_path):
    a, b = _cap(tmp_path, "a", [64]), _cap(tmp_path, "b", [64])
    same = {"equivalent": True, "summary": {}, "a": a, "b": b}
    keep = decide.Decision("keep", "keep-baseline", "6.0% faster", improved=True)
    assert "equal the kept version's" in no_op(same)
    d = uncredit(keep, same)
    assert (d.status, d.rule) == ("revert", "no-op") and "not credited" in d.reason
    assert diff_line(same).startswith("IR: no change")
    # same IR, another grid (a wrapper change): a real change
    other = {**same, "b": _cap(tmp_path, "c", [132])}
    assert no_op(other) is None and uncredit(keep, other) is keep
    changed = {"equivalent": False, "summary": {"semantic_changes": 1, "cubin_changes": 2},
               "changes": [{"detail": "occupancy: unset → 2"}]}
    assert no_op(changed) is None
    assert diff_line(changed) == "IR: 1 semantic, 2 cubin change(s) — occupancy: unset → 2"
    assert diff_line({"skipped": "no capture of the baseline"}) == "IR diff skipped: no capture of the baseline"


def test_iteration_evidence_rows():
    rows = iteration_evidence([
        {"iteration": 0, "status": "keep", "capture": {"ok": True, "source": "workload-cpu"}},
        {"iteration": 1, "status": "revert", "comparison": {"improvement_pct": 3.0},
         "decision": {"rule": "no-op"}, "ir_diff": {"equivalent": True}, "capture": {"skipped": "off"}}])
    assert rows[0]["capture"] == "workload-cpu" and rows[0]["ir_diff"] == "baseline"
    assert rows[1]["rule"] == "no-op" and rows[1]["change_pct"] == 3.0 and rows[1]["capture"] == "off: off"
