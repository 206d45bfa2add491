"""tileiras remarks: an LLVM-remark-style YAML stream of tagged documents.

Document order is not stable across runs, repeated ``Reason`` args are common, and the
cuTile cache stores a cleaned copy; ``parse_remarks`` accepts all of these and returns the
remarks sorted by (name, location, id) with reasons de-duplicated.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import yaml

from ..errors import ParseError

KINDS = ("Passed", "Missed", "Failure", "Analysis")


@dataclass
class Remark:
    """One tileiras optimisation remark: kind, pass, name, location, message and named args."""
    kind: str                     # Passed | Missed | Failure | Analysis
    pass_name: str                # Memory | Tensor-core | Hints | ...
    name: str                     # RemarkMemoryLoadInstructionSelected, ...
    function: str | None
    file: str | None = None
    line: int | None = None
    column: int | None = None
    remark_id: int | None = None
    message: str = ""
    instruction: str | None = None
    shape: list[int] | None = None
    num_ctas: int | None = None
    reasons: list[str] = field(default_factory=list)
    args: dict = field(default_factory=dict)

    @property
    def location(self) -> str:
        """``file.py:line:col`` (file name only), or ``?`` without a location."""
        if self.file is None:
            return "?"
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}:{self.column}"

    # classification helpers used by summaries and diagnosis
    @property
    def is_tma_load(self) -> bool:
        """A load lowered to TMA."""
        return self.name == "RemarkMemoryLoadInstructionSelected" and "TMA" in (self.instruction or "")

    @property
    def is_tma_store(self) -> bool:
        """A store lowered to TMA."""
        return self.name == "RemarkMemoryStoreInstructionSelected" and "TMA" in (self.instruction or "")

    @property
    def is_tma_failure(self) -> bool:
        """A load or store that could not use TMA (the remark says why)."""
        return self.name in ("RemarkMemoryTmaLoadFailed", "RemarkMemoryTmaStoreFailed")

    @property
    def is_tensor_core(self) -> bool:
        """An MMA mapped to tensor cores."""
        return self.name == "RemarkTensorCoreMMA" and self.kind == "Passed"

    @property
    def is_fma_fallback(self) -> bool:
        """An MMA that fell back to FMA on CUDA cores."""
        return self.name == "RemarkTensorCoreMMA" and self.kind == "Failure"

    # schedule / pipeline / resource remarks (names in the tileiras binary; 13.5 emits none of
    # them through the CLI, newer releases print II and NumOps): numbers come from named args
    # first, then from the message text ("Software pipeline applied: 3 stages")
    def number(self, *keys: str, pattern: str | None = None) -> int | None:
        """The first integer among the named ``keys`` of the args (case-insensitive), else group 1 of
        ``pattern`` in the message, else None."""
        for k in keys:
            for ak, av in self.args.items():
                if ak.lower() == k.lower():
                    m = re.search(r"-?\d+", str(av))
                    if m:
                        return int(m.group(0))
        if pattern:
            m = re.search(pattern, self.message, re.I)
            if m:
                return int(m.group(1))
        return None

    @property
    def initiation_interval(self) -> int | None:
        """The modulo schedule's initiation interval (II), when the remark gives one."""
        return self.number("II", "InitiationInterval", pattern=r"(?:\bII|initiation interval)\D{0,5}(\d+)")

    @property
    def num_ops(self) -> int | None:
        """The op count a schedule remark gives, or None."""
        return self.number("NumOps", "Ops", pattern=r"NumOps\s*[=:]?\s*(\d+)")

    @property
    def pipeline_stages(self) -> int | None:
        """The software pipeline's stage count, or None."""
        return self.number("Stages", "NumStages", pattern=r"(\d+)\s*stages?")

    @property
    def is_loop_pipelined(self) -> bool:
        """A loop the compiler software-pipelined."""
        return self.name == "RemarkLoopPipeline" and self.kind == "Passed"

    @property
    def is_loop_not_pipelined(self) -> bool:
        """A loop left unpipelined (missed or failed), or one whose unrolling was disabled."""
        return (self.name == "RemarkLoopPipeline" and self.kind in ("Missed", "Failure")) \
            or self.name == "RemarkLoopUnrollDisabled"

    @property
    def is_schedule(self) -> bool:
        """A schedule remark (it carries an initiation interval)."""
        return self.initiation_interval is not None

    @property
    def smem_bytes(self) -> int | None:
        """The shared memory a RemarkMemorySmemAllocated reports, else None."""
        if self.name != "RemarkMemorySmemAllocated":
            return None
        return self.number("Bytes", "Size", "SharedMemory", pattern=r"(\d+)\s*bytes")

    @property
    def is_register_spill(self) -> bool:
        """A remark of register spills or local memory use."""
        return self.name in ("RemarkPerfRegisterSpill", "RemarkPerfLocalMemoryUsage")

    @property
    def is_hint_out_of_range(self) -> bool:
        """A hint the compiler rejected as out of range."""
        return self.name == "RemarkHintOutOfRange"


class _Loader(yaml.SafeLoader):
    pass


def _tagged(loader, tag_suffix, node):
    data = loader.construct_mapping(node, deep=True)
    data["__kind__"] = tag_suffix
    return data


_Loader.add_multi_constructor("!", _tagged)

_REASON_LOC = re.compile(r"^loc\([^)]*\):\s*")


def _shape(v) -> list[int] | None:
    if v is None:
        return None
    nums = re.findall(r"-?\d+", str(v))
    return [int(n) for n in nums] if nums else None


def parse_remarks(text: str, *, path: str | None = None) -> list[Remark]:
    """The remarks of a tileiras ``--remarks`` YAML stream (empty text: none); malformed YAML
    raises ParseError with its line."""
    if not text.strip():
        return []
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ParseError(f"not a remarks YAML stream: {getattr(e, 'problem', e)}", path=path,
                         line=(mark.line + 1) if mark else None,
                         column=(mark.column + 1) if mark else None) from None
    out: list[Remark] = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict) or "Name" not in doc:
            raise ParseError("remark document without a Name", path=path)
        loc = doc.get("DebugLoc") or {}
        r = Remark(kind=doc.get("__kind__", "Passed"), pass_name=str(doc.get("Pass", "")),
                   name=str(doc["Name"]), function=doc.get("Function"),
                   file=loc.get("File"), line=loc.get("Line"), column=loc.get("Column"))
        reasons: list[str] = []
        for arg in doc.get("Args") or []:
            if not isinstance(arg, dict):
                continue
            for k, v in arg.items():
                if k == "RemarkId":
                    r.remark_id = int(v)
                elif k == "Remark":
                    r.message = str(v)
                elif k == "Instruction":
                    r.instruction = str(v)
                elif k == "Shape":
                    r.shape = _shape(v)
                elif k == "NumCTAs":
                    r.num_ctas = int(v)
                elif k in ("Message", "Msg") and not r.message:
                    r.message = str(v)
                elif k == "Reason":
                    reason = _REASON_LOC.sub("", str(v)).strip()
                    if reason not in reasons:
                        reasons.append(reason)
                else:
                    r.args[k] = v
        r.reasons = reasons
        out.append(r)
    out.sort(key=lambda r: (r.name, r.file or "", r.line or 0, r.column or 0, r.remark_id or 0))
    return out


@dataclass
class RemarkSummary:
    """Counts over a kernel's remarks: load/store paths, TMA failures, MMAs, pipelining, spills."""
    tma_loads: int = 0
    global_loads: int = 0
    ldgsts_loads: int = 0
    tma_stores: int = 0
    tma_failures: list[dict] = field(default_factory=list)   # {location, reasons}
    tensor_core_mma: int = 0
    tensor_core_kinds: list[str] = field(default_factory=list)
    mma_shapes: list[list[int]] = field(default_factory=list)
    fma_fallbacks: int = 0
    index_narrowing_missed: int = 0
    hints_default: int = 0
    counts: dict[str, int] = field(default_factory=dict)


def dedupe(remarks: list[Remark]) -> list[Remark]:
    """tileiras repeats identical remarks (same op, same message) under new RemarkIds; the
    cuTile cache stores them de-duplicated.  Count each (kind, name, location, payload) once
    so raw and cached remarks summarise the same."""
    seen, out = set(), []
    for r in remarks:
        key = (r.kind, r.name, r.function, r.file, r.line, r.column, r.message, r.instruction,
               tuple(r.shape or ()), r.num_ctas, tuple(r.reasons))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def summarize(remarks: list[Remark]) -> RemarkSummary:
    """The summary of ``remarks``, de-duplicated first (see ``dedupe``)."""
    remarks = dedupe(remarks)
    s = RemarkSummary()
    s.counts = dict(Counter(f"{r.kind}:{r.name}" for r in remarks))
    for r in remarks:
        if r.name == "RemarkMemoryLoadInstructionSelected":
            ins = r.instruction or ""
            if "TMA" in ins:
                s.tma_loads += 1
            elif "Ldgsts" in ins:
                s.ldgsts_loads += 1
            else:
                s.global_loads += 1
        elif r.is_tma_store:
            s.tma_stores += 1
        elif r.is_tma_failure:
            s.tma_failures.append({"location": r.location, "line": r.line, "kind": r.name,
                                   "reasons": r.reasons})
        elif r.is_tensor_core:
            s.tensor_core_mma += 1
            if r.instruction and r.instruction not in s.tensor_core_kinds:
                s.tensor_core_kinds.append(r.instruction)
            if r.shape and r.shape not in s.mma_shapes:
                s.mma_shapes.append(r.shape)
        elif r.is_fma_fallback:
            s.fma_fallbacks += 1
        elif r.name == "RemarkTensorViewIndexTypeNarrowing":
            s.index_narrowing_missed += 1
        elif r.name.startswith("RemarkHint"):
            s.hints_default += 1
    return s
