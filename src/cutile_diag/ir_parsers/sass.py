"""SASS instruction mix from ``cuobjdump -sass`` or ``nvdisasm`` text."""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field

# opcode (first dotted word) -> class; checked in order, first match wins
_CLASSES: list[tuple[str, re.Pattern]] = [
    ("tensor_core", re.compile(r"^(HGMMA|IGMMA|QGMMA|BGMMA|HMMA|IMMA|DMMA|BMMA|UTC\w*MMA\w*|UTCBAR|OMMA|QMMA)$")),
    ("tma", re.compile(r"^(UTMALDG|UTMASTG|UTMAPF|UTMACCTL|UTMACMDFLUSH|UBLKCP|UBLKRED|UBLKPF|UTMAREDG)$")),
    ("global_load", re.compile(r"^(LDG|LDGSTS|LDGDEPBAR)$")),
    ("global_store", re.compile(r"^(STG|REDG|RED)$")),
    ("atomic", re.compile(r"^(ATOMG|ATOM|ATOMS|RED|REDUX)$")),
    ("local", re.compile(r"^(LDL|STL)$")),
    ("shared", re.compile(r"^(LDS|STS|LDSM|STSM|ATOMS|LDGSTS)$")),
    ("ffma", re.compile(r"^FFMA\d*$")),
    ("fp32", re.compile(r"^(FADD|FMUL|FMNMX|FSETP|FSET|FSEL|FCHK|FRND|FSWZADD|FMUL2|FADD2|FFMA2)$")),
    ("half", re.compile(r"^(HADD2|HMUL2|HFMA2|HSETP2|HMNMX2)$")),
    ("fp64", re.compile(r"^(DADD|DMUL|DFMA|DSETP)$")),
    ("mufu", re.compile(r"^MUFU$")),
    ("conversion", re.compile(r"^(F2F|F2I|I2F|F2FP|I2FP|F2IP|FRND)$")),
    ("barrier", re.compile(r"^(BAR|BARRIER|SYNCS|MEMBAR|DEPBAR|WARPSYNC|ERRBAR|CCTL|FENCE|UCGABAR_\w+|ARRIVES|WARPGROUP)$")),
    ("register_reconfig", re.compile(r"^USETMAXREG$")),
    ("control", re.compile(r"^(BRA|BRX|JMP|EXIT|RET|CALL|BSSY|BSYNC|BREAK|NOP|YIELD|WARPSYNC|ELECT|VOTE|VOTEU|ACQBULK|ENDCOLLECTIVE)$")),
]

_INSTR_RE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Za-z0-9_]+)*)\s*([^;]*);")
_FUNC_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
_ENCODING_RE = re.compile(r"/\*\s*(0x[0-9a-f]{16})\s*\*/")
_WIDTH_RE = re.compile(r"\.(8|16|32|64|128|U8|S8|U16|S16)\b")


@dataclass
class SassFunction:
    """One function's SASS: instruction counts by opcode and class, MUFU and MMA forms, global
    access widths, and a digest of its encoding."""
    name: str
    instructions: int = 0
    opcodes: Counter = field(default_factory=Counter)          # base opcode -> count
    full_opcodes: Counter = field(default_factory=Counter)     # opcode with modifiers
    classes: Counter = field(default_factory=Counter)
    mufu: Counter = field(default_factory=Counter)             # EX2, RCP, RSQ, TANH, ...
    mma_forms: Counter = field(default_factory=Counter)        # HGMMA.64x128x16.F32 ...
    global_load_widths: Counter = field(default_factory=Counter)   # bits -> count
    global_store_widths: Counter = field(default_factory=Counter)
    _code: "hashlib._Hash" = field(default_factory=hashlib.sha256, repr=False, compare=False)

    @property
    def digest(self) -> str:
        """The instruction stream's hash (predicates, opcodes, modifiers, operands and, where the
        listing has them, the encodings with their scheduling control bits; not the addresses or
        the function's name): equal digests run the same machine code."""
        return self._code.hexdigest()[:16]

    def to_json(self) -> dict:
        """The counts as JSON (sorted keys; widths as strings)."""
        return {"name": self.name, "instructions": self.instructions, "digest": self.digest,
                "classes": dict(sorted(self.classes.items())),
                "mufu": dict(sorted(self.mufu.items())),
                "mma_forms": dict(sorted(self.mma_forms.items())),
                "global_load_widths": {str(k): v for k, v in sorted(self.global_load_widths.items())},
                "global_store_widths": {str(k): v for k, v in sorted(self.global_store_widths.items())},
                "top_opcodes": dict(self.opcodes.most_common(12))}


def classify_opcode(op: str) -> str:
    """The class of a base SASS opcode (tensor_core, tma, global_load, ffma, mufu, integer, ...)."""
    for cls, rx in _CLASSES:
        if rx.match(op):
            return cls
    if op in ("CS2R", "VIADD", "VIMNMX", "IMNMX"):
        return "integer"
    if op in ("NANOSLEEP", "ELECT"):
        return "control"
    if op.startswith("U"):
        return "uniform"
    if op[:1] in ("I", "L", "S", "P", "R", "M"):  # IADD3, LOP3, SHF, PRMT, ...
        return "integer"
    return "other"


def _width(mods: str, default: int = 32) -> int:
    m = _WIDTH_RE.findall(mods)
    if not m:
        return default
    w = m[-1]
    return int(w.lstrip("US")) if w[0] in "US" else int(w)


def parse_sass(text: str) -> dict[str, SassFunction]:
    """Function -> SassFunction from a ``cuobjdump -sass`` / ``nvdisasm`` listing."""
    funcs: dict[str, SassFunction] = {}
    cur: SassFunction | None = None
    for line in text.splitlines():
        fm = _FUNC_RE.match(line)
        if fm:
            cur = funcs.setdefault(fm.group(1), SassFunction(fm.group(1)))
            continue
        if cur is not None:
            for enc in _ENCODING_RE.findall(line):        # an instruction's words (the 2nd: its control bits)
                cur._code.update(enc.encode())
        m = _INSTR_RE.search(line)
        if not m:
            continue
        if cur is None:
            cur = funcs.setdefault("<unknown>", SassFunction("<unknown>"))
        op, mods = m.group(3), m.group(4) or ""
        cur.instructions += 1
        cur._code.update(f"{(m.group(2) or '').strip()} {op}{mods} {' '.join(m.group(5).split())}\n".encode())
        cur.opcodes[op] += 1
        cur.full_opcodes[op + mods] += 1
        cls = classify_opcode(op)
        cur.classes[cls] += 1
        if op == "MUFU":
            cur.mufu[mods.lstrip(".").split(".")[0] or "?"] += 1
        if cls == "tensor_core":
            cur.mma_forms[op + mods] += 1
        if op == "LDG":
            cur.global_load_widths[_width(mods)] += 1
        if op == "STG":
            cur.global_store_widths[_width(mods)] += 1
    return funcs
