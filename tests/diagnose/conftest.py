"""Helpers for the diagnosis tests: diagnoses of the real example captures, cached per run."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def diagnoses(example_captures):
    """{kernel: Diagnosis} for every example kernel, static evidence from its sm_90 capture."""
    from cutile_diag.diagnose.engine import diagnose_capture
    return {k: diagnose_capture(c, arch="sm_90") for k, c in example_captures.items()}


@pytest.fixture(scope="session")
def evidences(example_captures):
    from cutile_diag.diagnose.collect_capture import collect_capture
    return {k: collect_capture(c, arch="sm_90") for k, c in example_captures.items()}
