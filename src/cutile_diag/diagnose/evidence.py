"""The evidence store: every fact the diagnosis uses, each with where it came from.

A ``Fact`` is one observation (``ir.ptr_loads = 2``) plus its provenance: the IR line and
the Python line behind it, the remark, the SASS count or the measurement.  Collectors
(``collect_tileir``, ``collect_capture``, ``collect_gpu``) add facts and record, under
``not_checked``, every check they could not do and why — a missing piece of evidence is
named, never guessed.

``FACTS`` is the vocabulary: the only keys a collector may add and a playbook predicate may
use.  ``references/evidence-facts.md`` is the same table for people (a test keeps the two in
step).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ..errors import CutileDiagError


class EvidenceError(CutileDiagError):
    """A collector or playbook used a fact key outside the vocabulary (a bug, reported clearly)."""


@dataclass(frozen=True)
class FactSpec:
    """A key of the evidence vocabulary: its value type, producer and meaning."""
    type: str          # int | float | bool | str | list | dict
    producer: str      # tileir | capture | device | launch | gpu | ncu
    description: str


def _f(type_: str, producer: str, description: str) -> FactSpec:
    return FactSpec(type_, producer, description)


# The vocabulary.  Producer = which collector can set the key:
#   tileir  — static analysis of TileIR text (a bare .tileir file is enough)
#   capture — a capture folder: manifest (argument shapes), remarks, SASS, resources, ptxas
#   device  — the device model (a real GPU, or the arch preset when static)
#   gpu     — measurements: roofline result, harness records across configurations
#   launch  — the launches a run capture intercepted (grid, argument shapes)
#   ncu     — Nsight Compute metrics and rule results
FACTS: dict[str, FactSpec] = {
    # --- TileIR structure (static) -------------------------------------------------------
    "ir.kernel": _f("str", "tileir", "Python function name of the analysed entry"),
    "ir.entries": _f("int", "tileir", "entries in the TileIR module (the first / named one is analysed)"),
    "ir.ops": _f("int", "tileir", "ops in the analysed entry"),
    "ir.loads": _f("int", "tileir", "global loads (view + pointer)"),
    "ir.stores": _f("int", "tileir", "global stores (view + pointer)"),
    "ir.view_loads": _f("int", "tileir", "tile-indexed loads (load_view_tko; TMA-eligible)"),
    "ir.view_stores": _f("int", "tileir", "tile-indexed stores (store_view_tko; TMA-eligible)"),
    "ir.ptr_loads": _f("int", "tileir", "per-element pointer loads (load_ptr_tko, from ct.gather)"),
    "ir.ptr_stores": _f("int", "tileir", "per-element pointer stores (store_ptr_tko, from ct.scatter)"),
    "ir.atomics": _f("int", "tileir", "atomic ops (atomic_rmw_tko / atomic_cas_tko / atomic_red_view_tko)"),
    "ir.gather_scatter_views": _f("int", "tileir", "make_gather_scatter_view ops (load/store_advanced_indexing)"),
    "ir.block_contiguous_gathers": _f("int", "tileir",
                                      "pointer loads/stores whose addresses are proven to be one contiguous, "
                                      "tile-aligned block per program (a tile-indexed ct.load/ct.store would do)"),
    "ir.irregular_gathers": _f("int", "tileir", "pointer loads/stores whose addresses are not provably contiguous"),
    "ir.loads_without_latency": _f("int", "tileir", "loads (view or pointer) without a latency hint"),
    "ir.loop_loads_without_latency": _f("int", "tileir", "loads inside a for/loop body without a latency hint"),
    "ir.stores_without_latency": _f("int", "tileir", "stores without a latency hint"),
    "ir.view_stores_allow_tma_unset": _f("int", "tileir", "view stores without an allow_tma hint (TMA allowed by default)"),
    "ir.view_stores_allow_tma_false": _f("int", "tileir", "view stores with allow_tma = false"),
    "ir.view_loads_allow_tma_false": _f("int", "tileir", "view loads with allow_tma = false"),
    "ir.view_loads_allow_tma_unset": _f("int", "tileir", "view loads without an allow_tma hint (TMA allowed by default)"),
    "ir.nonzero_padding_loads": _f("int", "tileir",
                                   "view loads padded with neg_inf / pos_inf / nan / neg_zero (TMA pads zero only)"),
    "ir.persistent_loop": _f("bool", "tileir",
                             "a grid-stride for loop: lower bound from the block id, step from the grid size"),
    "ir.persistent_while": _f("bool", "tileir", "a grid-stride loop written as a while (`loop` op)"),
    "ir.for_loops": _f("int", "tileir", "for loops"),
    "ir.while_loops": _f("int", "tileir", "while loops (`loop` ops)"),
    "ir.max_loop_depth": _f("int", "tileir", "deepest for/loop nesting"),
    "ir.grid_rank": _f("int", "tileir", "grid axes the kernel reads (1 + highest block-id axis used; 0 = none)"),
    "ir.tile_grid_2d": _f("bool", "tileir", "the output is stored as a 2-D grid of tiles indexed by program position"),
    "ir.swizzled": _f("bool", "tileir",
                      "output tile indices are remapped in groups (GROUP_SIZE_M-style: each index mixes a "
                      "division and a remainder of the linear tile id)"),
    "ir.mma_ops": _f("int", "tileir", "mma ops (mmaf / mmai / mmaf_scaled)"),
    "ir.mma_f32_operands": _f("int", "tileir", "mmaf ops with f32 (not tf32) operands: CUDA-core FMA fallback"),
    "ir.mma_tf32_operands": _f("int", "tileir", "mmaf ops with tf32 operands"),
    "ir.mma_shapes": _f("list", "tileir", "[M, N, K] of each mma"),
    "ir.mma_min_dim": _f("int", "tileir", "smallest M/N/K over all mma ops"),
    "ir.exp_ops": _f("int", "tileir", "exp ops (ct.exp; no flush_to_zero, rounding fixed)"),
    "ir.exp2_ops": _f("int", "tileir", "exp2 ops"),
    "ir.ftz_candidates": _f("int", "tileir",
                            "f32 exp2 / rsqrt / sqrt / divf ops without flush_to_zero"),
    "ir.f32_div_full_precision": _f("int", "tileir", "f32 divf ops without rounding<approx>"),
    "ir.make_tokens": _f("int", "tileir", "make_token ops"),
    "ir.join_tokens": _f("int", "tileir", "join_tokens ops"),
    "ir.token_ordered_loads": _f("int", "tileir",
                                 "loads whose token comes from another memory op (they wait for it)"),
    "ir.token_ordered_stores": _f("int", "tileir", "stores whose token comes from another memory op"),
    "ir.hint_occupancy": _f("int", "tileir", "entry occupancy hint (0 = unset)"),
    "ir.hint_num_ctas": _f("int", "tileir", "entry num_cta_in_cga hint = num_ctas (0 = unset)"),
    "ir.hint_num_worker_warps": _f("int", "tileir", "entry num_worker_warps_per_cta hint (0 = unset)"),
    "ir.kernel_hints_set": _f("bool", "tileir", "any entry-level hint (occupancy / num_ctas / num_worker_warps) set"),
    "ir.max_tile_elems": _f("int", "tileir", "largest tile moved by one memory op, in elements"),
    "ir.max_tile_bytes": _f("int", "tileir", "largest tile moved by one memory op, in bytes"),
    "ir.tma_oversize_tiles": _f("int", "tileir",
                                "2-D+ view loads/stores (TMA allowed) whose tile exceeds one TMA box (16K elements): "
                                "tileiras splits it into several boxes"),
    "ir.tma_narrow_tiles": _f("int", "tileir",
                              "2-D+ view loads/stores (TMA allowed) whose contiguous tile dimension is under 16 bytes: "
                              "not TMA-eligible"),
    "ir.max_f32_tile_elems": _f("int", "tileir", "largest f32 tile produced by a non-mma op, in elements"),
    "ir.reductions": _f("int", "tileir", "reduce / scan ops"),
    "ir.debug_ops": _f("int", "tileir", "print_tko / assert ops"),
    "ir.tile_intensity": _f("float", "tileir",
                            "FLOPs per byte moved in the hottest region of one program (trip counts cancel)"),
    "ir.flops_per_iter": _f("float", "tileir", "FLOPs of that region"),
    "ir.bytes_per_iter": _f("float", "tileir", "global bytes moved by that region"),
    "ir.redundant_loads": _f("int", "tileir",
                             "loads that re-read an array another pass (loop or straight-line section) of the same "
                             "program already loaded with an equivalent index expression"),
    "ir.read_passes": _f("int", "tileir", "most passes that load the same array with the same index expression"),
    "ir.reread_bytes_per_program": _f("int", "tileir",
                                      "bytes those re-reads move per program: tile bytes x trip count where the trip "
                                      "count is a constant, else one tile per pass"),
    "ir.reread_share": _f("float", "tileir",
                          "share of one program's global load + store bytes that those re-reads are (the most a "
                          "read-once rewrite removes)"),
    # --- capture folder ------------------------------------------------------------------
    "capture.arch": _f("str", "capture", "target arch of the cubin-side facts"),
    "capture.schema_ok": _f("bool", "capture", "manifest schema is the one this version reads"),
    "static.output_tiles": _f("int", "capture",
                              "output tiles = stored array shape / store tile shape (the grid of a "
                              "one-tile-per-program kernel)"),
    "static.waves": _f("float", "capture", "output tiles / (SMs x occupancy)"),
    "static.tail_idle": _f("float", "capture",
                           "fraction of SM slots idle over the run because the last wave is partial"),
    "static.tile_arch_warnings": _f("list", "capture", "tile shapes outside the target arch's preferred range"),
    "remarks.available": _f("bool", "capture", "a remarks file was read"),
    "remarks.tma_loads": _f("int", "capture", "loads lowered to TMA"),
    "remarks.global_loads": _f("int", "capture", "loads lowered to plain global loads (LDG)"),
    "remarks.ldgsts_loads": _f("int", "capture", "loads lowered to cp.async (LDGSTS)"),
    "remarks.tma_stores": _f("int", "capture", "stores lowered to TMA"),
    "remarks.tma_load_failures": _f("int", "capture", "RemarkMemoryTmaLoadFailed remarks"),
    "remarks.tma_store_failures": _f("int", "capture", "RemarkMemoryTmaStoreFailed remarks"),
    "remarks.tma_failure_reasons": _f("list", "capture", "distinct reasons tileiras gave for TMA failures"),
    "remarks.fma_fallback": _f("int", "capture", "mma ops that fell back to FMA (RemarkTensorCoreMMA failure)"),
    "remarks.tensor_core_mma": _f("int", "capture", "mma ops lowered to tensor cores"),
    "remarks.mma_num_ctas": _f("int", "capture", "CTAs per MMA (sm_100 2-CTA MMA), max over mma ops"),
    "remarks.tma_boxes": _f("list", "capture", "TMA box shapes tileiras chose for loads/stores ([rows, cols] ...)"),
    "remarks.hint_out_of_range": _f("int", "capture", "RemarkHintOutOfRange: hints tileiras ignored or clamped"),
    "remarks.pipelined_loops": _f("int", "capture", "loops tileiras software-pipelined (RemarkLoopPipeline)"),
    "remarks.pipeline_stages": _f("int", "capture", "fewest software-pipeline stages over pipelined loops"),
    "remarks.unpipelined_loops": _f("int", "capture", "loops with a schedule remark but no pipelining / unroll disabled"),
    "remarks.max_initiation_interval": _f("int", "capture", "largest loop initiation interval (II, cycles) in schedule remarks"),
    "remarks.loop_ops": _f("int", "capture", "ops in the loop body with that II (NumOps)"),
    "remarks.smem_bytes": _f("int", "capture", "shared memory tileiras allocated (RemarkMemorySmemAllocated)"),
    "remarks.register_spills": _f("int", "capture", "RemarkPerfRegisterSpill / RemarkPerfLocalMemoryUsage remarks"),
    "cubin.registers": _f("int", "capture", "registers per thread (cuobjdump; 255 on warp-specialised kernels is a ceiling)"),
    "cubin.stack": _f("int", "capture", "stack bytes per thread"),
    "cubin.shared_bytes": _f("int", "capture", "shared memory per CTA (incl. 1 KiB reserve)"),
    "cubin.local_bytes": _f("int", "capture", "local memory per thread"),
    "cubin.spill_bytes": _f("int", "capture", "ptxas spill stores + loads (bytes)"),
    "cubin.spill_stores": _f("int", "capture", "ptxas spill stores (bytes)"),
    "cubin.spill_loads": _f("int", "capture", "ptxas spill loads (bytes)"),
    "cubin.ptxas_advisories": _f("list", "capture", "ptxas performance advisory codes (e.g. C7511)"),
    "cubin.wgmma_serialized": _f("bool", "capture", "ptxas C7511: wgmma serialised for lack of registers"),
    "cubin.threads_per_cta": _f("int", "capture", "threads per CTA (EIATTR_REQNTID)"),
    "cubin.cluster_size": _f("int", "capture", "CTAs per cluster (num_ctas as compiled)"),
    "cubin.warp_specialised": _f("bool", "capture", "register reconfiguration (setmaxnreg) present"),
    "cubin.resident_ctas": _f("int", "capture", "CTAs per SM the threads, registers and shared memory allow"),
    "cubin.maxnreg": _f("int", "capture", "PTX .maxnreg (occupancy hint's register budget)"),
    "sass.instructions": _f("int", "capture", "SASS instructions"),
    "sass.ffma": _f("int", "capture", "FFMA instructions"),
    "sass.fp32_ops": _f("int", "capture", "FADD/FMUL/FFMA-class instructions"),
    "sass.tensor_core": _f("int", "capture", "tensor-core MMA instructions (HGMMA, UTC*MMA, HMMA ...)"),
    "sass.tma_ops": _f("int", "capture", "TMA instructions (UTMALDG, UTMASTG, UBLKCP ...)"),
    "sass.global_loads": _f("int", "capture", "LDG / LDGSTS instructions"),
    "sass.global_stores": _f("int", "capture", "STG instructions"),
    "sass.narrow_global_loads": _f("int", "capture", "LDG narrower than 128 bits"),
    "sass.narrow_global_stores": _f("int", "capture", "STG narrower than 128 bits"),
    "sass.local_ops": _f("int", "capture", "LDL / STL instructions"),
    "sass.mufu_ex2": _f("int", "capture", "MUFU.EX2 instructions"),
    "sass.mufu_rcp": _f("int", "capture", "MUFU.RCP instructions"),
    # --- device ----------------------------------------------------------------------------
    "device.name": _f("str", "device", "device (measured) or preset (static) name"),
    "device.sm_count": _f("int", "device", "streaming multiprocessors"),
    "device.ridge_intensity": _f("float", "device", "FLOP/byte where the kernel's compute roof meets the memory roof"),
    # --- GPU measurements --------------------------------------------------------------------
    "gpu.configs": _f("int", "gpu", "measured configurations"),
    "gpu.latency_ms": _f("float", "gpu", "median kernel time of the primary configuration (ms)"),
    "gpu.roofline_class": _f("str", "gpu", "memory-bound | compute-bound | balanced (primary configuration)"),
    "gpu.pct_of_roof": _f("float", "gpu", "percent of the applicable roof reached (primary configuration)"),
    "gpu.pct_of_ceiling": _f("float", "gpu", "percent of the measured ceiling reached (primary configuration)"),
    "gpu.pct_attainable": _f("float", "gpu", "percent of the time attainable at the kernel's size (launch floor, "
                                             "measured bandwidth for its bytes, compute ceiling; primary configuration)"),
    "gpu.achieved_tbps": _f("float", "gpu", "achieved TB/s"),
    "gpu.achieved_tflops": _f("float", "gpu", "achieved TFLOP/s"),
    "gpu.arithmetic_intensity": _f("float", "gpu", "FLOPs / bytes of the workload (declared)"),
    "gpu.above_roof": _f("bool", "gpu", "a result above the measured ceiling (invalid measurement)"),
    "gpu.wall_ms": _f("float", "gpu", "host wall time per call (ms)"),
    "gpu.kernel_ms": _f("float", "gpu", "device kernel time per call (ms)"),
    "gpu.host_overhead_ratio": _f("float", "gpu", "wall time / kernel time"),
    "gpu.grid_blocks": _f("int", "gpu", "programs launched (product of the grid)"),
    "gpu.waves": _f("float", "gpu", "grid blocks / (SMs x occupancy)"),
    "gpu.tail_idle": _f("float", "gpu", "fraction of SM slots idle because the last wave is partial"),
    "gpu.class_varies": _f("bool", "gpu", "configurations fall into different roofline classes"),
    "gpu.pct_spread": _f("float", "gpu", "max / min percent of roof across configurations"),
    "gpu.sign_flips": _f("bool", "gpu", "against a baseline, some configurations got faster and others slower"),
    "gpu.rel_std": _f("float", "gpu", "run-to-run noise of the primary configuration (percent)"),
    "gpu.variant_gain": _f("float", "gpu",
                           "another kernel variant of the same op timed at the same shape in the same run: "
                           "t_primary / t_fastest_variant - 1 (0 when the primary is the fastest)"),
    "gpu.variant_spread": _f("float", "gpu",
                             "kernel variants of the same op at one shape: slowest / fastest - 1 (largest group)"),
    "gpu.variants": _f("list", "gpu", "the variant comparisons behind gpu.variant_gain, one line each"),
    # --- the observed launch (ct.launch intercepted on CPU inputs, or seen in a run) -----------
    "launch.grid": _f("list", "launch", "grid of the kernel's ct.launch"),
    "launch.grid_blocks": _f("int", "launch", "programs launched (product of the launch grid)"),
    "launch.sm_count": _f("int", "launch", "SMs the launch wrapper saw (the run's GPU, or the CPU stand-in)"),
    "launch.args": _f("list", "launch", "argument specs of the launch (NAME=SPEC: dtype, shape, constants)"),
    "launch.waves": _f("float", "launch", "launch grid blocks / (SMs x resident CTAs per SM)"),
    "launch.tail_idle": _f("float", "launch", "fraction of SM slots idle in the launch's partial last wave"),
    # --- Nsight Compute -------------------------------------------------------------------------
    "ncu.sm_throughput_pct": _f("float", "ncu", "SM throughput, % of peak"),
    "ncu.dram_throughput_pct": _f("float", "ncu", "DRAM throughput, % of peak"),
    "ncu.achieved_occupancy_pct": _f("float", "ncu", "achieved occupancy, %"),
    "ncu.registers": _f("int", "ncu", "registers per thread"),
    "ncu.spill_bytes": _f("int", "ncu", "local-memory spill traffic (bytes)"),
    "ncu.dram_bytes": _f("float", "ncu", "DRAM bytes moved"),
    "ncu.l2_hit_pct": _f("float", "ncu", "L2 hit rate, %"),
    "ncu.rules": _f("list", "ncu", "Nsight Compute rules that reported a finding (rule identifiers)"),
    "ncu.rule_speedup_pct": _f("float", "ncu", "largest speedup (%) a rule estimated"),
}

PRODUCERS = ("tileir", "capture", "device", "launch", "gpu", "ncu")


@dataclass(frozen=True)
class Site:
    """One place a fact was seen: an IR line, a remark, a SASS count, a measurement."""
    source: str                  # 'kernel.loc.tileir:30', 'remarks.yaml', 'sass', 'measurement: roofline'
    detail: str = ""             # the op text, the remark message, ...
    file: str | None = None      # the IR (or other) file the line is in
    line: int | None = None
    python: str | None = None    # 'gather_scale.py:13' when the IR has locations
    op: str | None = None        # op name for IR sites

    def text(self) -> str:
        """``source (python line): detail``, the Python line left out when the source names it."""
        where = self.source + (f" ({self.python})" if self.python and self.python not in self.source else "")
        return f"{where}: {self.detail}" if self.detail else where


@dataclass
class Fact:
    """One fact: its value, where it was read, and the sites behind it."""
    key: str
    value: Any
    source: str                  # primary source, e.g. 'kernel.loc.tileir:30 (gather_scale.py:13)'
    detail: str = ""
    sites: list[Site] = field(default_factory=list)

    def to_json(self) -> dict:
        """The fact as a dict; empty detail, sites and site fields are left out."""
        out = {"key": self.key, "value": self.value, "source": self.source}
        if self.detail:
            out["detail"] = self.detail
        if self.sites:
            out["sites"] = [{k: v for k, v in vars(s).items() if v not in (None, "")} for s in self.sites]
        return out

    def line(self) -> str:
        """One human line: key = value — source: detail."""
        val = self.value
        if isinstance(val, float):
            val = f"{val:.3g}"
        head = f"{self.key} = {val}"
        tail = self.source + (f": {self.detail}" if self.detail else "")
        return f"{head} — {tail}"


@dataclass
class NotChecked:
    """A check the evidence could not make: what is missing and how to get it."""
    check: str                   # what could not be checked
    missing: str                 # which piece of evidence is missing
    how: str = ""                # how to get it

    def text(self) -> str:
        """``check: missing (how)``."""
        return f"{self.check}: {self.missing}" + (f" ({self.how})" if self.how else "")


class Evidence:
    """Facts by key, plus what could not be checked and which collectors ran."""

    def __init__(self, *, kernel: str | None = None):
        self.kernel = kernel
        self.facts: dict[str, Fact] = {}
        self.not_checked: list[NotChecked] = []
        self.collected: list[str] = []        # 'tileir: kernel.loc.tileir', 'capture: sm_90', ...
        self.notes: list[str] = []            # warnings worth showing (schema mismatch, ...)
        self.context: dict[str, Any] = {}     # non-fact context for renderers (paths, arch)

    # --- writing
    def add(self, key: str, value: Any, source: str, detail: str = "",
            sites: Iterable[Site] = ()) -> Fact:
        """Set fact ``key``; a key outside ``FACTS`` raises EvidenceError."""
        if key not in FACTS:
            raise EvidenceError(f"fact key '{key}' is not in the evidence vocabulary")
        fact = Fact(key, value, source, detail, list(sites))
        self.facts[key] = fact
        return fact

    def missing(self, check: str, missing: str, how: str = "") -> None:
        """Record a check that could not be made (once per check)."""
        if not any(n.check == check for n in self.not_checked):
            self.not_checked.append(NotChecked(check, missing, how))

    def resolve(self, check_prefix: str) -> None:
        """Drop not-checked items a later collector did check."""
        self.not_checked = [n for n in self.not_checked if not n.check.startswith(check_prefix)]

    # --- reading
    def __contains__(self, key: str) -> bool:
        return key in self.facts

    def get(self, key: str) -> Fact | None:
        """The fact of ``key``, or None."""
        return self.facts.get(key)

    def value(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` when unknown."""
        f = self.facts.get(key)
        return f.value if f is not None else default

    def values(self) -> dict[str, Any]:
        """Key -> value of every known fact (what predicates read)."""
        return {k: f.value for k, f in self.facts.items()}

    def has_producer(self, producer: str) -> bool:
        """Whether any fact came from ``producer`` (tileir, capture, gpu, ...)."""
        return any(FACTS[k].producer == producer for k in self.facts)

    def to_json(self) -> dict:
        """Facts, checks not made, collectors and notes, as JSON."""
        return {"kernel": self.kernel, "collected": list(self.collected),
                "facts": [f.to_json() for f in self.facts.values()],
                "not_checked": [vars(n) for n in self.not_checked],
                "notes": list(self.notes)}


def facts_markdown() -> str:
    """``references/evidence-facts.md``: the vocabulary as a table (regenerate after edits)."""
    names = {"tileir": "TileIR (static)", "capture": "capture folder", "device": "device model",
             "launch": "observed launch", "gpu": "GPU measurement", "ncu": "Nsight Compute"}
    out = ["# Evidence facts", "",
           "The vocabulary shared by the collectors (`cutile_diag/diagnose/collect_*.py`) and the playbook",
           "predicates (`playbook/*.toml`). A predicate may only use these keys; a collector may only",
           "produce these keys. Generated from `cutile_diag.diagnose.evidence.FACTS` by",
           "`python -c 'from cutile_diag.diagnose.evidence import facts_markdown as f; print(f(), end=\"\")'`;",
           "a test keeps both in step.",
           "",
           "A fact the evidence lacks evaluates to *unknown* in a predicate, and the engine reports",
           "which facts were missing (three-valued logic: `false and unknown` is false,",
           "`true or unknown` is true; `known(x)` tests presence).", ""]
    for prod in PRODUCERS:
        out += [f"## {names[prod]}", "", "| key | type | meaning |", "|---|---|---|"]
        for k, s in FACTS.items():
            if s.producer == prod:
                out.append(f"| `{k}` | {s.type} | {s.description} |")
        out.append("")
    return "\n".join(out)
