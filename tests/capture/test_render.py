"""The capture summary table in a 100-column terminal."""
from __future__ import annotations

from rich.console import Console

from cutile_diag.capture.render import detail_lines, summary_table
from cutile_diag.capture.summary import CaptureSummary


def _summary(name: str, arch: str, **kw) -> CaptureSummary:
    facts = dict(symbol=None, ops=1289, ops_by_class={"memory": 14}, view_loads=12, ptr_loads=10, view_stores=2,
                 ptr_stores=1, mma_ops=[], loops=2, persistent_loop=True, entry_hints={}, op_hints=0, tma_loads=12,
                 tma_stores=2, global_loads=0, registers=255, shared=230584, spill_bytes=264, threads_per_cta=384)
    return CaptureSummary(name=name, kernel=name, arch=arch, **{**facts, **kw})


def test_summary_table_fits_100_columns(natural_width):
    """TileGym-long kernel names on two archs, one with an FMA fallback, one incomplete: one line
    per row; the name is cut in the middle (both ends tell kernels apart), the rest is below."""
    rows = [_summary(n, a, tensor_core=tc, fma_fallbacks=f, missing=miss)
            for n in ("_persistent_layer_norm_fwd_kernel", "_layer_norm_bwd_dwdb_kernel")
            for a, tc, f, miss in (("sm_90", ["Tensor-core SM90"], 0, []), ("sm_100", None, 3, ["sass.txt"]))]
    t = summary_table(rows)
    assert natural_width(t) <= 100
    console = Console(width=100, record=True, color_system=None)
    console.print(t)
    text = console.export_text()
    assert text.count("_persisten…_fwd_kernel") == 1 and text.count("_layer_nor…dwdb_kernel") == 1
    assert text.count("(incomplete)") == 2 and "FMA fallback" in text and "225.2 KiB" in text
    details = [str(x) for x in detail_lines(rows[0])]
    assert any("persistent loop: [green]yes" in d and "threads per CTA: 384" in d for d in details)
