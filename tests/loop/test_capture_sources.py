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
    assert it1["capture"]["ok"] and it1["capture"]["source"] == "workload-cpu"
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
    assert "without IR evidence" in base["capture"]["fallback"]
    assert "skipped" in it1["ir_diff"] and it1["diagnosis"]["source"] == "applicability"
