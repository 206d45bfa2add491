"""A campaign to show and to test on any machine: a git repository holding copies of bundled
example kernels (launch wrappers included) with TileGym-style pytest tests — correctness tests
and perf tests that record a benchmark — on CPU tensors, surveyed without executing (``--dry-run``)
and optimised on a simulated GPU (``--simulate``: one spec per kernel below)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from ..examples import EXAMPLES_DIR
from ..loop.api import LoopOverrides
from .api import CampaignRequest, campaign

KERNELS = ("vector_add", "softmax", "row_norm")
GIT_ID = ["-c", "user.name=cutile-diag", "-c", "user.email=cutile-diag@localhost"]

_TESTS = {
    "header": '''import pytest
import torch

RECORD = {"cutile": {"forward": {"median": 1.0, "rel_std": 0.5, "nrep": 10}}}
''',
    "vector_add": '''

@pytest.mark.parametrize("n", [1 << 20, 1 << 22])
def test_perf_vector_add(n, record_property):
    from ops import vector_add
    a, b = torch.ones(n), torch.ones(n)
    vector_add.launch(a, b, torch.empty_like(a))
    record_property("benchmark", RECORD)
''',
    "softmax": '''

@pytest.mark.parametrize("m", [256, 1024])
def test_perf_softmax(m, record_property):
    from ops import softmax
    x = torch.randn(m, 1024, dtype=torch.float16)
    softmax.launch(x, torch.empty_like(x))
    record_property("benchmark", RECORD)
''',
    "row_norm": '''

def test_perf_row_norm(record_property):
    from ops import row_norm
    x = torch.randn(512, 2048)
    row_norm.launch(x, torch.empty_like(x), torch.empty(512), torch.empty(512))
    record_property("benchmark", RECORD)
''',
    "footer": '''

def test_op_reference():
    x = torch.randn(4, 8)
    assert torch.allclose(torch.softmax(x, -1).sum(-1), torch.ones(4))
''',
}

# simulated latencies per configuration, bytes for the roofline, and what each loop step would gain
SPECS = {
    "vector_add": {"configs": {"1M": 0.02, "4M": 0.06}, "bytes": {"1M": 12582912, "4M": 50331648},
                   "effects": {"persistent_grid": 0.85, "latency_hints": 0.92}},
    "softmax": {"configs": {"256": 0.01, "1024": 0.025}, "bytes": {"256": 1048576, "1024": 4194304},
                "effects": {"latency_hints": 0.92, "exp_to_exp2": 0.96}},
    "row_norm": {"configs": {"512": 0.02}, "bytes": {"512": 8392704},
                 "effects": {"gather_to_load": 0.6, "latency_hints": 0.95}},
}


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` under the demo's fixed identity; its stdout, stripped (raises on failure)."""
    return subprocess.run(["git", *GIT_ID, *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(parent: Path, kernels: Sequence[str] = KERNELS) -> Path:
    """``parent/kernels``: a git repository with ``ops/<kernel>.py`` and ``tests/test_ops.py``, committed."""
    r = parent / "kernels"
    (r / "ops").mkdir(parents=True)
    (r / "tests").mkdir()
    git(r, "init", "-q", "-b", "main")
    for name in kernels:
        shutil.copy(EXAMPLES_DIR / f"{name}.py", r / "ops" / f"{name}.py")
    (r / "ops" / "__init__.py").write_text("")
    (r / "tests" / "conftest.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))\n")
    (r / "tests" / "test_ops.py").write_text(
        _TESTS["header"] + "".join(_TESTS[k] for k in kernels) + _TESTS["footer"])
    (r / ".gitignore").write_text("__pycache__/\n")
    git(r, "add", "-A")
    git(r, "commit", "-qm", "kernels and their tests")
    return r


def survey_command() -> list[str]:
    """The demo repository's survey: its perf tests under this interpreter's pytest."""
    return [sys.executable, "-m", "pytest", "tests", "-k", "perf", "-q", "-p", "no:cacheprovider"]


def run_demo(folder: Path, kernels: Sequence[str] = KERNELS, *, echo: Callable[[str], None] | None = None):
    """A fresh repository in ``folder`` and its simulated campaign (two loop steps per kernel at most)."""
    folder = Path(folder).resolve()        # the campaign chdirs into the repository
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    repo = make_repo(folder, kernels)
    (folder / "specs.json").write_text(json.dumps({k: SPECS[k] for k in kernels}, indent=1))
    req = CampaignRequest(command=survey_command(), root=repo, out=repo / "cutile-diag-out" / "campaign",
                          execute=False, simulate={k: SPECS[k] for k in kernels},
                          options=LoopOverrides(max_iterations=2, capture=False))
    import os
    cwd = os.getcwd()
    os.chdir(repo)                     # the survey runs the tests where a user would
    try:
        return campaign(req, echo=echo)
    finally:
        os.chdir(cwd)
