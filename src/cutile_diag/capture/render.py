"""Rich rendering of capture summaries (shared by ``capture`` and ``demo``)."""
from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..output import human_bytes, shorten
from .summary import CaptureSummary


def _yes_no(v, good=True) -> str:
    if v is None:
        return "[dim]?[/]"
    return ("[green]" if bool(v) == good else "[yellow]") + ("yes" if v else "no") + "[/]"


def summary_table(summaries: list[CaptureSummary], title: str = "Captured kernels") -> Table:
    """One line per kernel and arch in 100 columns: a long name is cut in the middle (whole in
    the detail lines), the persistent loop and threads per CTA are in the detail lines."""
    t = Table(title=title, title_justify="left", show_lines=False, header_style="bold", box=box.SIMPLE_HEAD,
              pad_edge=False, collapse_padding=True)
    for col in ("kernel", "arch", "ops", "loads v/p", "TMA ld/st", "MMA", "regs", "smem", "spills"):
        t.add_column(col, justify="right" if col in ("ops", "regs", "smem", "spills") else "left", no_wrap=True)
    for s in summaries:
        tc = ", ".join(x.replace("Tensor-core ", "") for x in (s.tensor_core or [])) or (
            "[red]FMA fallback[/]" if s.fma_fallbacks else ("no MMA" if not s.mma_ops else "[dim]?[/]"))
        spills = "-" if s.spill_bytes is None else (f"[red]{s.spill_bytes} B[/]" if s.spill_bytes else "0")
        # the kernel itself; the capture's name too where --name (or run mode's numbering) differs
        if s.name != s.kernel:
            name = escape(shorten(s.kernel, 12)) + f" [dim]as {escape(shorten(s.name, 9))}[/]"
        else:
            name = escape(shorten(s.kernel, 22))
        if s.missing:
            name = escape(shorten(s.kernel, 9)) + " [red](incomplete)[/]"
        t.add_row(name, s.arch or "-", str(s.ops), f"{s.view_loads}/{s.ptr_loads}",
                  "-" if s.tma_loads is None else f"{s.tma_loads}/{s.tma_stores}",
                  tc, str(s.registers or "-"), human_bytes(s.shared), spills)
    return t


def detail_lines(s: CaptureSummary) -> list[Text | str]:
    """The indented rich-markup lines under a capture's summary row: ops, memory paths, the
    compiler's TMA/MMA choices, hints and the problems (FMA fallback, spills, missing files)."""
    out: list[Text | str] = []
    if s.missing:
        out.append(f"  [bold red]INCOMPLETE[/] ({s.arch}): missing {', '.join(s.missing)}")
    classes = ", ".join(f"{k} {v}" for k, v in s.ops_by_class.items() if k not in ("assume",))
    out.append(f"  ops by class: {classes}")
    out.append(f"  persistent loop: {_yes_no(s.persistent_loop)}; threads per CTA: {s.threads_per_cta or '?'}")
    mem = []
    if s.view_loads or s.view_stores:
        mem.append(f"{s.view_loads} tile loads / {s.view_stores} tile stores (view ops, TMA-eligible)")
    if s.ptr_loads or s.ptr_stores:
        mem.append(f"[yellow]{s.ptr_loads} pointer gathers / {s.ptr_stores} scatters[/] (per-element)")
    if mem:
        out.append("  memory: " + "; ".join(mem))
    if s.tma_loads is not None and (s.view_loads or s.view_stores):
        out.append(f"  compiler chose: {s.tma_loads} TMA loads, {s.global_loads} plain global loads, "
                   f"{s.tma_stores} TMA stores")
    for m in s.mma_ops:
        out.append(f"  mma: {m}")
    if s.entry_hints:
        out.append("  entry hints: " + ", ".join(f"{k}={v}" for k, v in s.entry_hints.items()))
    if s.op_hints:
        out.append(f"  {s.op_hints} memory op(s) carry latency/allow_tma hints")
    for f in s.tma_failures:
        out.append(f"  [yellow]TMA not used[/]: {f}")
    if s.fma_fallbacks:
        out.append(f"  [red]mma fell back to FMA[/] ({s.fma_fallbacks} remark(s)): f32 operands need a tf32 cast")
    if s.spill_bytes:
        out.append(f"  [red]register spills: {s.spill_bytes} bytes[/] (ptxas -v)")
    if s.cluster and s.cluster != [1, 1, 1]:
        out.append(f"  cluster shape: {'x'.join(map(str, s.cluster))}")
    for n in s.notes:
        out.append(f"  [dim]note: {n}[/]")
    return out
