"""Resource reports: cuobjdump resource usage, ptxas -v, ELF .nv.info attributes."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import ParseError


@dataclass
class ResourceUsage:
    """One function's line of ``cuobjdump --dump-resource-usage``.

    SHARED includes the 1 KiB system reserve (ptxas reports 1 024 B less).  REG 255 on a
    warp-specialised TMA/wgmma kernel is the static ceiling, not a spill signal.
    """
    function: str
    registers: int
    stack: int
    shared: int
    local: int
    constant0: int | None = None
    extra: dict[str, int] = field(default_factory=dict)


_FUNC_RE = re.compile(r"^\s*Function\s+(\S+?):?\s*$")
_KV_RE = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def parse_resource_usage(text: str, *, path: str | None = None) -> dict[str, ResourceUsage]:
    """Function -> ResourceUsage from ``cuobjdump -res-usage`` (REG, STACK, SHARED, LOCAL,
    CONSTANT[0]; other keys in ``extra``); a resource line without REG raises ParseError."""
    out: dict[str, ResourceUsage] = {}
    current = None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _FUNC_RE.match(line)
        if m:
            current = m.group(1)
            continue
        if current and "REG:" in line:
            kv = {k: int(v) for k, v in _KV_RE.findall(line)}
            try:
                out[current] = ResourceUsage(
                    function=current, registers=kv["REG"], stack=kv.get("STACK", 0),
                    shared=kv.get("SHARED", 0), local=kv.get("LOCAL", 0),
                    constant0=kv.get("CONSTANT[0]"),
                    extra={k: v for k, v in kv.items()
                           if k not in ("REG", "STACK", "SHARED", "LOCAL", "CONSTANT[0]")})
            except KeyError:
                raise ParseError("resource line without REG", path=path, line=lineno) from None
            current = None
    return out


@dataclass
class PtxasReport:
    """What ``ptxas -v`` says about one function: exact spills and performance advisories."""
    function: str | None
    registers: int | None = None
    barriers: int | None = None
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    cumulative_stack: int | None = None
    smem: int | None = None
    cmem: dict[int, int] = field(default_factory=dict)
    advisories: list[dict] = field(default_factory=list)   # {code, message}

    @property
    def spill_bytes(self) -> int:
        """Spill stores plus spill loads, in bytes."""
        return self.spill_stores + self.spill_loads


_ADVISORY_RE = re.compile(r"ptxas (?:info|warning)\s*:\s*\((C\d+)\)\s*(.*)")
_FUNC_PROPS_RE = re.compile(r"Function properties for (\S+)")
_COMPILING_RE = re.compile(r"Compiling entry function '([^']+)'")
_SPILL_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_BAR_RE = re.compile(r"used (\d+) barriers")
_CSTACK_RE = re.compile(r"(\d+) bytes cumulative stack size")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[(\d+)\]")


def parse_ptxas_verbose(text: str) -> dict[str, PtxasReport]:
    """Per-function reports; advisories mentioning a function attach to it."""
    reports: dict[str, PtxasReport] = {}
    current: str | None = None
    pending: list[dict] = []

    def rep(name: str) -> PtxasReport:
        if name not in reports:
            reports[name] = PtxasReport(function=name)
        return reports[name]

    for line in text.splitlines():
        m = _COMPILING_RE.search(line) or _FUNC_PROPS_RE.search(line)
        if m:
            current = m.group(1)
            rep(current)
        m = _ADVISORY_RE.search(line)
        if m:
            code, msg = m.group(1), m.group(2).strip()
            fm = re.search(r"in the function '([^']+)'", msg)
            target = fm.group(1) if fm else current
            adv = {"code": code, "message": re.sub(r"\s*in the function '[^']+'", "", msg)}
            if target:
                rep(target).advisories.append(adv)
            else:
                pending.append(adv)
            continue
        if current is None:
            continue
        r = rep(current)
        if (m := _SPILL_RE.search(line)):
            r.stack_frame, r.spill_stores, r.spill_loads = map(int, m.groups())
        if (m := _USED_RE.search(line)):
            r.registers = int(m.group(1))
            if (b := _BAR_RE.search(line)):
                r.barriers = int(b.group(1))
            if (c := _CSTACK_RE.search(line)):
                r.cumulative_stack = int(c.group(1))
            if (s := _SMEM_RE.search(line)):
                r.smem = int(s.group(1))
            for size, bank in _CMEM_RE.findall(line):
                r.cmem[int(bank)] = int(size)
    if pending and len(reports) == 1:
        next(iter(reports.values())).advisories.extend(pending)
    return reports


@dataclass
class CubinAttributes:
    """Launch-relevant ``.nv.info.<symbol>`` attributes (EIATTR_*)."""
    function: str
    threads_per_cta: tuple[int, int, int] | None = None       # EIATTR_REQNTID
    cluster_shape: tuple[int, int, int] | None = None         # EIATTR_CTA_PER_CLUSTER
    blocks_are_clusters: bool = False
    max_registers: int | None = None                          # EIATTR_MAXREG_COUNT
    reg_reconfig: bool = False                                # setmaxnreg (warp specialisation)
    num_barriers: int | None = None
    num_mbarriers: int | None = None
    language: str | None = None                               # "TILEIR" for cuTile cubins
    raw: dict[str, str] = field(default_factory=dict)

    @property
    def threads(self) -> int | None:
        """Threads per CTA (x·y·z), or None when the cubin does not fix them."""
        if not self.threads_per_cta:
            return None
        x, y, z = self.threads_per_cta
        return x * y * z

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster (1 without a cluster shape)."""
        if not self.cluster_shape:
            return 1
        x, y, z = self.cluster_shape
        return x * y * z


def _ints(value: str) -> list[int]:
    return [int(v, 16) if v.lower().startswith("0x") else int(v) for v in re.findall(r"0x[0-9a-fA-F]+|\b\d+\b", value)]


def parse_elf_attributes(text: str) -> dict[str, CubinAttributes]:
    """Parse ``cuobjdump -elf`` output: the ``.nv.info.<sym>`` attribute lists."""
    out: dict[str, CubinAttributes] = {}
    current: CubinAttributes | None = None
    attr: str | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith(".nv.info.") and " " not in s:
            sym = s[len(".nv.info."):]
            current = out.setdefault(sym, CubinAttributes(function=sym))
            attr = None
            continue
        if s.startswith(".") and not s.startswith(".nv.info"):
            if current is not None and (s.startswith(".section") or s.startswith(".text") or s.startswith(".nv.")):
                current = None
            continue
        if current is None:
            continue
        if s.startswith("Attribute:"):
            attr = s.split(":", 1)[1].strip()
            if attr == "EIATTR_REG_RECONFIG":
                current.reg_reconfig = True
            elif attr == "EIATTR_BLOCKS_ARE_CLUSTERS":
                current.blocks_are_clusters = True
            continue
        if s.startswith("Value:") and attr:
            value = s.split(":", 1)[1].strip()
            current.raw[attr] = value
            nums = _ints(value)
            if attr == "EIATTR_REQNTID" and nums:
                current.threads_per_cta = tuple((nums + [1, 1])[:3])  # type: ignore[assignment]
            elif attr == "EIATTR_CTA_PER_CLUSTER" and nums:
                current.cluster_shape = tuple((nums + [1, 1])[:3])  # type: ignore[assignment]
            elif attr == "EIATTR_MAXREG_COUNT" and nums:
                current.max_registers = nums[0]
            elif attr == "EIATTR_NUM_BARRIERS" and nums:
                current.num_barriers = nums[0]
            elif attr == "EIATTR_NUM_MBARRIERS" and nums:
                current.num_mbarriers = nums[0]
            elif attr == "EIATTR_LANGUAGE":
                current.language = value.split()[-1] if value else None
            attr = None
    return out
