"""AOT capture reproduces what the JIT compiled on a real H200.

The fixtures are the TileIR texts dumped by ``cutile-diag capture -- python
bench/gpu/launch_examples.py`` on the H200 (bench/results/capture-run-h200/): the
hand-built signature must give byte-identical IR, symbol included (calling convention v1).
"""
from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "jit-h200"


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.tileir")))
def test_aot_tileir_equals_jit_dump(example_captures, name):
    jit = (FIXTURES / f"{name}.tileir").read_text()
    aot = example_captures[name].tileir_text()
    assert aot == jit


def test_native_nv_info_matches_cuobjdump(example_captures):
    """Our .nv.info decoder agrees with cuobjdump -elf where cuobjdump can read the cubin."""
    from cutile_diag.ir_parsers.resources import parse_elf_attributes
    from cutile_diag.toolchain import run_tool
    for name in ("matmul", "vector_add", "softmax"):
        c = example_captures[name]
        cub = c.file("cubin", "sm_90")
        theirs = parse_elf_attributes(run_tool("cuobjdump", ["-elf", str(cub)]).stdout)[c.symbol]
        ours = c.attributes("sm_90")[c.symbol]
        assert ours.threads_per_cta == theirs.threads_per_cta
        assert ours.max_registers == theirs.max_registers
        assert ours.reg_reconfig == theirs.reg_reconfig
        assert ours.num_mbarriers == theirs.num_mbarriers
        assert ours.language == theirs.language == "TILEIR"
