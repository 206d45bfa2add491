"""A readable digest of one capture: what the kernel does and what the compiler made of it."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..ir_parsers.tileir_ops import LOADS, PTR_MEMORY, STORES, VIEW_MEMORY
from .manifest import CaptureFolder


@dataclass
class CaptureSummary:
    """The facts ``capture`` prints per kernel: TileIR op counts and memory paths, plus the
    cubin side of one arch (TMA, tensor cores, registers, spills) when it was compiled."""
    name: str                               # the capture's name (--name, or the kernel's)
    kernel: str                             # the Python function captured
    symbol: str | None
    arch: str | None
    ops: int
    ops_by_class: dict[str, int]
    view_loads: int
    ptr_loads: int
    view_stores: int
    ptr_stores: int
    mma_ops: list[str]                      # "mmaf f16 x f16 -> f32 (128x64 · 64x128)"
    loops: int
    persistent_loop: bool
    entry_hints: dict
    op_hints: int                           # memory ops carrying latency/allow_tma
    # cubin side (None when the target was not compiled)
    tma_loads: int | None = None
    global_loads: int | None = None
    tma_stores: int | None = None
    tensor_core: list[str] | None = None
    fma_fallbacks: int | None = None
    tma_failures: list[str] = field(default_factory=list)
    registers: int | None = None
    shared: int | None = None
    spill_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    threads_per_cta: int | None = None
    cluster: list[int] | None = None
    sass_instructions: int | None = None
    missing: list[str] = field(default_factory=list)   # required files of this arch not made
    notes: list[str] = field(default_factory=list)

    # the per-arch (cubin-side) part, for --json's per-target facts
    TARGET_FIELDS = ("registers", "shared", "spill_bytes", "spill_stores", "spill_loads", "threads_per_cta",
                     "cluster", "tensor_core", "fma_fallbacks", "tma_loads", "tma_stores", "global_loads",
                     "tma_failures", "sass_instructions", "missing")

    def target_facts(self) -> dict:
        """The per-arch fields (``TARGET_FIELDS``) as a dict."""
        return {k: getattr(self, k) for k in self.TARGET_FIELDS}


def summarize_capture(c: CaptureFolder, arch: str | None = None) -> CaptureSummary:
    """The summary of a capture at ``arch`` (default: the capture's default arch)."""
    mod = c.module
    entry = mod.entries[0]
    ops = list(entry.walk())
    by_class = Counter(op.op_class for op in ops)
    mma = []
    for op in ops:
        if op.name in ("mmaf", "mmai", "mmaf_scaled"):
            t = [x for x in op.operand_types]
            if len(t) >= 3:
                mma.append(f"{op.name} {t[0].elem} x {t[1].elem} -> {t[2].elem} "
                           f"({'x'.join(map(str, t[0].shape))} · {'x'.join(map(str, t[1].shape))})")
            else:
                mma.append(op.name)
    # the grid-size op is get_num_tile_blocks; a persistent loop steps by one of its results
    grid_names = {r for op in ops if op.name == "get_num_tile_blocks" for r in op.results}
    persistent = any(op.name == "for" and dict(zip(op.operand_roles, op.operands)).get("step") in grid_names
                     for op in ops)
    s = CaptureSummary(
        name=c.name, kernel=c.manifest.get("kernel", {}).get("function") or c.name,
        symbol=entry.symbol, arch=None, ops=len(ops),
        ops_by_class=dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
        view_loads=sum(1 for op in ops if op.name in LOADS and op.name in VIEW_MEMORY),
        ptr_loads=sum(1 for op in ops if op.name in LOADS and op.name in PTR_MEMORY),
        view_stores=sum(1 for op in ops if op.name in STORES and op.name in VIEW_MEMORY),
        ptr_stores=sum(1 for op in ops if op.name in STORES and op.name in PTR_MEMORY),
        mma_ops=mma, loops=sum(1 for op in ops if op.name in ("for", "loop")),
        persistent_loop=persistent, entry_hints=entry.hints.get("default", {}),
        op_hints=sum(1 for op in ops if op.hints.get("default")),
    )
    s.notes.extend(c.problems)
    a = arch or c.default_arch
    if a and a in c.targets:
        s.arch = a
        f = c.facts(a)
        r = f.get("remarks") or {}
        s.tma_loads, s.global_loads, s.tma_stores = r.get("tma_loads"), r.get("global_loads"), r.get("tma_stores")
        s.tensor_core = r.get("tensor_core_kinds")
        s.fma_fallbacks = r.get("fma_fallbacks")
        s.tma_failures = sorted({f"{x.get('location')}: {'; '.join(x.get('reasons') or ['no reason given'])}"
                                 for x in r.get("tma_failures") or []})
        s.registers, s.shared = f.get("registers"), f.get("shared")
        if f.get("spill_stores") is not None:
            s.spill_stores, s.spill_loads = f["spill_stores"], f.get("spill_loads", 0)
            s.spill_bytes = s.spill_stores + s.spill_loads
        tp = f.get("threads_per_cta")
        s.threads_per_cta = (tp[0] * tp[1] * tp[2]) if tp else None
        s.cluster = f.get("cluster_shape")
        s.sass_instructions = (f.get("sass") or {}).get("instructions")
        s.missing = list(c.target(a).get("missing", []))
        for err in c.target(a).get("errors", []):
            s.notes.append(f"{a}: {err}")
    return s
