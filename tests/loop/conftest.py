"""The loop tests' fixture: a temporary git repository with a copy of an example kernel (its
launch wrapper and CAPTURE_SPECS included) and a test file the loop must never touch."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from looptools import make_repo  # noqa: E402


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path)
