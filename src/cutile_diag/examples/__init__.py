"""Example cuTile kernels shipped with cutile-diag.

They are the embedded default of ``cutile-diag demo`` and the fixtures of the test suite.
Kernels marked NAIVE leave known performance on the table on purpose: they are the
targets the diagnosis engine and the optimisation loop are tested against.  Each module
declares ``CAPTURE_SPECS`` (the argument spec used for ahead-of-time capture) so that
``cutile-diag capture <module>.py::<kernel>`` works without further arguments.
"""
from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parent

# module file -> kernels, in the order the demo shows them
EXAMPLE_KERNELS: dict[str, tuple[str, ...]] = {
    "vector_add.py": ("vector_add", "vector_add_persistent"),
    "matmul.py": ("matmul", "matmul_f32", "matmul_tuned"),
    "softmax.py": ("softmax",),
    "gather_scale.py": ("gather_scale",),
}

# kernels without CAPTURE_SPECS, like most library kernels: their captures come from their
# workloads (``capture FILE::KERNEL --workload examples:<kernel>``), never from hand-written specs
SPECLESS_KERNELS: dict[str, tuple[str, ...]] = {
    "row_norm.py": ("row_norm",),
    "row_lse.py": ("row_lse",),
    "multipass_norm.py": ("multipass_norm",),
    "persistent_rows.py": ("persistent_rows",),
}


def example_refs() -> list[str]:
    """``path::kernel`` references of every example kernel."""
    return [f"{EXAMPLES_DIR / f}::{k}" for f, ks in EXAMPLE_KERNELS.items() for k in ks]
