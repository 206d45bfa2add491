"""The campaign tests' fixture: a git repository with three kernels (copies of the bundled
examples, launch wrappers included) and TileGym-style pytest tests — correctness tests and
perf tests that record a benchmark — on CPU tensors (the survey runs them with --dry-run)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from cutile_diag.examples import EXAMPLES_DIR

GIT_ID = ["-c", "user.name=test", "-c", "user.email=test@example.com"]

TESTS = '''
import pytest
import torch

from ops import row_norm, softmax, vector_add

RECORD = {"cutile": {"forward": {"median": 1.0, "rel_std": 0.5, "nrep": 10}}}


@pytest.mark.parametrize("n", [1 << 20, 1 << 22])
def test_perf_vector_add(n, record_property):
    a, b = torch.ones(n), torch.ones(n)
    vector_add.launch(a, b, torch.empty_like(a))
    record_property("benchmark", RECORD)


@pytest.mark.parametrize("m", [256, 1024])
def test_perf_softmax(m, record_property):
    x = torch.randn(m, 1024, dtype=torch.float16)
    softmax.launch(x, torch.empty_like(x))
    record_property("benchmark", RECORD)


def test_perf_row_norm(record_property):
    x = torch.randn(512, 2048)
    row_norm.launch(x, torch.empty_like(x), torch.empty(512), torch.empty(512))
    record_property("benchmark", RECORD)


def test_op_reference():
    x = torch.randn(4, 8)
    assert torch.allclose(torch.softmax(x, -1).sum(-1), torch.ones(4))
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *GIT_ID, *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_campaign_repo(tmp_path: Path) -> Path:
    r = tmp_path / "kernels"
    (r / "ops").mkdir(parents=True)
    (r / "tests").mkdir()
    git(r, "init", "-q", "-b", "main")
    for name in ("vector_add", "softmax", "row_norm"):
        shutil.copy(EXAMPLES_DIR / f"{name}.py", r / "ops" / f"{name}.py")
    (r / "ops" / "__init__.py").write_text("")
    (r / "tests" / "conftest.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))\n")
    (r / "tests" / "test_ops.py").write_text(TESTS)
    git(r, "add", "-A")
    git(r, "commit", "-qm", "three kernels and their tests")
    return r
