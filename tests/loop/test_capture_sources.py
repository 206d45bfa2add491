"""The loop captures kernels that ship no CAPTURE_SPECS from the code that launches them, and a
workload that launches nothing costs evidence, never the loop (simulated GPU, real captures)."""
import json
import shutil

import pytest

from cutile_diag.cli import main
from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag.ledger import Ledger
from looptools import git

NOTHING = '''
from cutile_diag.workload import Workload, WorkloadConfig

class Nothing(Workload):
    name = "nothing"
    configs = [WorkloadConfig("c", {})]
    def make_inputs(self, cfg, seed, device="cuda"):
        return {}
    def run(self, inputs):
        return None
    def reference(self, inputs):
        return None
    def flops(self, cfg):
        return 1.0
    def bytes(self, cfg):
        return 1.0
'''


@pytest.fixture
def lse_repo(repo, tmp_path):
    shutil.copy(EXAMPLES_DIR / "row_lse.py", repo / "row_lse.py")
    (repo / "tests" / "nothing_workload.py").write_text(NOTHING)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "row_lse")
    spec = tmp_path / "sim.json"
    spec.write_text(json.dumps({"configs": {"c": 0.2}, "effects": {"latency_hints": 0.9}, "noise": 0.001}))
    return repo, spec


def _optimize(capsys, repo, spec, workload):
    rc = main(["optimize", f"{repo / 'row_lse.py'}::row_lse", "--simulate", str(spec), "--capture-workload",
               workload, "--only", "E", "--max-iterations", "1", "--max-sweep", "1", "--rounds", "1", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return Ledger.load(json.loads(out)["state_dir"]).iterations


def test_every_iteration_has_a_capture_and_an_ir_diff(lse_repo, capsys):
    repo, spec = lse_repo
    base, it1 = _optimize(capsys, repo, spec, "examples:row_lse")
    assert base["capture"]["ok"] and base["capture"]["source"] == "workload-cpu"
    # the candidate is compiled AOT with the launch the baseline's run recorded (no second run)
    assert it1["capture"]["ok"] and it1["capture"]["source"] == "recorded-launch"
    assert [c["source"] for c in it1["step_costs"]["compiles"]] == ["recorded-launch"]
    assert it1["ir_diff"]["equivalent"] is False and it1["ir_diff"]["summary"]["semantic_changes"] >= 1
    assert it1["diagnosis"]["source"] == "engine"
    man = json.loads((repo / "cutile-diag-out/optimize/row_lse/captures" / base["digest"][:16]
                      / "manifest.json").read_text())
    assert man["launch"]["grid"] == [16384] and man["launch"]["source"] == "workload-cpu"


def test_a_workload_that_launches_nothing_costs_evidence_not_the_loop(lse_repo, capsys):
    repo, spec = lse_repo
    base, it1 = _optimize(capsys, repo, spec, f"{repo / 'tests' / 'nothing_workload.py'}::Nothing")
    assert base["capture"]["ok"] is False
    assert "launches nothing on CPU inputs" in base["capture"]["error"]
    assert "Out=DTYPE[d0] (1-D array)" in base["capture"]["error"]        # the hint: real parameter kinds
    # capture's flags named as optimize takes them
    assert "e.g. --arg X=f32[4096,4096] --arg Out=f32[4096] --arg TILE_N=128" in base["capture"]["error"]
    assert "optimize takes these as --capture-arg NAME=SPEC (capture's --arg)" in base["capture"]["error"]
    assert "without IR evidence" in base["capture"]["fallback"]
    assert "skipped" in it1["ir_diff"] and it1["diagnosis"]["source"] == "applicability"


def test_a_launch_that_does_not_match_the_kernel_fails_its_check_and_a_launch_fix_is_no_no_op(lse_repo, capsys):
    """Simulated GPU, captures from the workload's intercepted launch.  An edit whose launch
    passes one argument more than the kernel takes (with a real kernel change beside it) is
    refused in one line naming the kernel and both counts — not recorded PASS with the extra
    argument dropped.  A change of the launch alone (its grid) is a change, measured, and no
    reason says the launch is equal."""
    repo, spec = lse_repo
    rc = main(["optimize", f"{repo / 'row_lse.py'}::row_lse", "--simulate", str(spec), "--capture-workload",
               "examples:row_lse", "--only", "E", "--max-iterations", "3", "--max-sweep", "1", "--rounds", "1",
               "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads(out)
    led = Ledger.load(res["state_dir"])
    n = len(led.iterations)
    f = __import__("pathlib").Path(res["worktree"]) / "row_lse.py"
    kept = f.read_text()
    assert "(x, out, tile_n))" in kept and "ct.log(s)" in kept
    f.write_text(kept.replace("(x, out, tile_n))", "(x, out, tile_n, 1))").replace("ct.log(s)", "ct.log(s + 1.0)"))
    rc = main(["loop", "record", f"{repo / 'row_lse.py'}::row_lse", "--note", "extra argument"])
    out, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1, err
    assert "the launch of row_lse passes 4 argument(s); the kernel takes 3 (X, Out, TILE_N)" in err
    assert len(Ledger.load(res["state_dir"]).iterations) == n and "tile_n, 1))" in f.read_text()
    f.write_text(kept.replace("ct.launch(stream, (m,),", "ct.launch(stream, (m, 1),"))
    rc = main(["loop", "record", f"{repo / 'row_lse.py'}::row_lse", "--note", "2-D grid", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    it = Ledger.load(res["state_dir"]).iterations[-1]
    assert it["ir_diff"]["equivalent"] is True and it["decision"]["rule"] != "no-op"
    assert "launch equal" not in it["decision"]["reason"]


def test_without_specs_the_plan_names_capture_workload(lse_repo, capsys):
    """A simulated loop of a kernel without specs diagnoses from the source; the note says how to
    get a capture without a GPU (--capture-workload), which is what --simulate users can give."""
    repo, spec = lse_repo
    rc = main(["optimize", f"{repo / 'row_lse.py'}::row_lse", "--simulate", str(spec), "--plan"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "capture failed" in out and "--capture-workload REF" in " ".join(out.split())


def test_the_capture_child_answers_in_data_and_is_killed_at_its_budget(tmp_path):
    """The loop's capture child (``loop.capture_child``) returns its failure as fields, not text
    for the parent to parse; past its budget the child is killed and the result says so."""
    from cutile_diag.loop.capture_child import capture
    from cutile_diag.loop.integrations import capture_version
    ref = f"{EXAMPLES_DIR / 'row_lse.py'}::row_lse"
    got = capture({"ref": ref, "out_dir": str(tmp_path / "caps"), "name": "x"})
    assert got["ok"] is False and got["missing_specs"] is True and "\n" not in got["error"]
    assert "no argument specs for row_lse" in got["error"]
    bad = capture({"ref": ref, "out_dir": str(tmp_path / "caps"), "name": "x", "args": ["Nope=f32"]})
    assert bad == {"ok": False, "error": bad["error"], "missing_specs": False}
    assert "has no parameter Nope" in bad["error"]
    res = capture_version(EXAMPLES_DIR / "row_lse.py", "row_lse", "0" * 64, tmp_path / "caps", cap_s=0.05)
    assert res.ok is False and res.timed_out and "killed after" in res.error
