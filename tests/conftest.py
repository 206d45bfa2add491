"""Shared fixtures: GPU gating and real captures of the example kernels (built once per run)."""
from __future__ import annotations

import os

import pytest

# tileiras loads libnvvm from $CUDA_HOME when it is set; an older toolkit there breaks compiles
os.environ.pop("CUDA_HOME", None)
os.environ.pop("CUDA_PATH", None)


def _gpu_available() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU"
    try:
        import cuda.tile  # noqa: F401
    except Exception as e:  # pragma: no cover
        return False, f"cuda.tile unusable: {e}"
    return True, ""


def pytest_collection_modifyitems(config, items):
    ok, why = _gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


EXAMPLE_ARCHS = ("sm_90", "sm_100")


@pytest.fixture(scope="session")
def example_captures(tmp_path_factory):
    """Every example kernel captured AOT for sm_90 and sm_100: {kernel name: CaptureFolder}."""
    from cutile_diag.capture.aot import capture_aot
    from cutile_diag.examples import EXAMPLES_DIR, EXAMPLE_KERNELS
    out = tmp_path_factory.mktemp("example-captures")
    caps = {}
    for f, names in EXAMPLE_KERNELS.items():
        for k in names:
            caps[k] = capture_aot(f"{EXAMPLES_DIR / f}::{k}", archs=EXAMPLE_ARCHS, out_dir=out)
    return caps


@pytest.fixture
def natural_width():
    """``natural_width(renderable) -> int``: the columns a rich table takes with no cell wrapped
    (titles and captions wrap to the table's width and do not count)."""
    from rich.console import Console
    from rich.measure import Measurement

    def measure(renderable) -> int:
        wide = Console(width=1000)
        return Measurement.get(wide, wide.options, renderable).maximum
    return measure
