"""Minimal ELF64 reader for CUDA cubins (binutils rejects EM_CUDA objects).

Every cuTile cubin built with ``--lineinfo`` embeds its PTX (``.nv_debug_ptx_txt``) and
its TileIR text (``.nv.tileir.debug_txt.<md5>``), so both are recoverable from any cubin,
including cache blobs.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ..errors import ParseError

EM_CUDA = 190


@dataclass(frozen=True)
class ElfSection:
    """One ELF section: its name, type (SHT_*) and bytes (empty for SHT_NOBITS)."""
    name: str
    type: int
    data: bytes


def read_sections(data: bytes, *, path: str | None = None) -> dict[str, ElfSection]:
    """The sections of a 64-bit little-endian CUDA ELF by name; ParseError on anything else."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ParseError("not an ELF file (no \\x7fELF magic)", path=path)
    if data[4] != 2 or data[5] != 1:
        raise ParseError("not a 64-bit little-endian ELF", path=path)
    (e_type, e_machine, _v, _entry, _phoff, e_shoff, _flags, _ehsize, _phentsize, _phnum,
     e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
    if e_machine != EM_CUDA:
        raise ParseError(f"ELF machine {e_machine} is not CUDA ({EM_CUDA})", path=path)
    if e_shoff == 0 or e_shoff + e_shnum * e_shentsize > len(data):
        raise ParseError("truncated ELF section table", path=path)
    raw = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        name, stype, _fl, _addr, soff, size = struct.unpack_from("<IIQQQQ", data, off)
        raw.append((name, stype, soff, size))
    _, _, stroff, strsize = raw[e_shstrndx]
    strtab = data[stroff:stroff + strsize]
    out: dict[str, ElfSection] = {}
    for name_off, stype, soff, size in raw:
        end = strtab.find(b"\0", name_off)
        name = strtab[name_off:end].decode("utf-8", "replace")
        body = b"" if stype == 8 else data[soff:soff + size]   # SHT_NOBITS has no bytes
        out[name] = ElfSection(name, stype, body)
    return out


def _text(sec: ElfSection) -> str:
    return sec.data.replace(b"\0", b"\n").decode("utf-8", "replace")


def embedded_ptx(sections: dict[str, ElfSection]) -> str | None:
    """The PTX tileiras keeps in ``.nv_debug_ptx_txt``, cut before its bookkeeping block (None if absent)."""
    sec = sections.get(".nv_debug_ptx_txt")
    if sec is None:
        return None
    text = _text(sec)
    # the trailing block is tileiras bookkeeping that ptxas cannot assemble
    cut = text.find(".nv_intermediate_source_section")
    if cut >= 0:
        text = text[:cut]
    lines = [ln for ln in text.split("\n")]
    return "\n".join(lines).strip() + "\n"


def embedded_tileir(sections: dict[str, ElfSection]) -> str | None:
    """The TileIR text a cubin carries in ``.nv.tileir.debug_txt*``, newline-terminated (None if absent)."""
    for name, sec in sections.items():
        if name.startswith(".nv.tileir.debug_txt"):
            text = sec.data.rstrip(b"\0").decode("utf-8", "replace")
            return text if text.endswith("\n") else text + "\n"
    return None


def kernel_symbols(sections: dict[str, ElfSection]) -> list[str]:
    """The symbols that have a ``.text.<symbol>`` section."""
    return [n[len(".text."):] for n in sections if n.startswith(".text.")]


def static_shared_bytes(sections: dict[str, ElfSection], symbol: str) -> int | None:
    """The size of ``symbol``'s static shared memory section, or None when it has none."""
    return None if f".nv.shared.{symbol}" not in sections else len(sections[f".nv.shared.{symbol}"].data)


_TARGET_RE = re.compile(r"^\s*\.target\s+(sm_\d+[a-z]?)", re.M)


def ptx_target(ptx: str) -> str | None:
    """The ``.target`` of a PTX text (e.g. ``sm_90a``), or None."""
    m = _TARGET_RE.search(ptx or "")
    return m.group(1) if m else None


def arch_of_ptx_target(target: str | None) -> str | None:
    """'sm_90a' -> 'sm_90'."""
    if not target:
        return None
    m = re.match(r"(sm_\d+)", target)
    return m.group(1) if m else None


_PTX_DIRECTIVES = {
    "reqntid": re.compile(r"\.reqntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?"),
    "maxnreg": re.compile(r"\.maxnreg\s+(\d+)"),
    "minnctapersm": re.compile(r"\.minnctapersm\s+(\d+)"),
    "reqnctapercluster": re.compile(r"\.reqnctapercluster\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?"),
}


def ptx_directives(ptx: str) -> dict[str, object]:
    """The launch-bound directives the PTX declares (reqntid, maxnreg, minnctapersm,
    reqnctapercluster): one int, or a list for the multi-dimensional ones."""
    out: dict[str, object] = {}
    for key, rx in _PTX_DIRECTIVES.items():
        m = rx.search(ptx or "")
        if m:
            vals = [int(g) for g in m.groups() if g]
            out[key] = vals if len(vals) > 1 or key in ("reqntid", "reqnctapercluster") else vals[0]
    return out


# EIATTR codes seen in cuTile cubins (cross-checked against `cuobjdump -elf` 13.5 names).
# An older cuobjdump can refuse a newer cubin ("Unrecognized opcode"), so we decode
# .nv.info ourselves: records are (u8 format, u8 attribute, u16 value-or-size[, bytes]).
EIATTR_NAMES = {
    0x0A: "EIATTR_PARAM_CBANK", 0x10: "EIATTR_REQNTID", 0x11: "EIATTR_FRAME_SIZE",
    0x12: "EIATTR_MIN_STACK_SIZE", 0x17: "EIATTR_KPARAM_INFO", 0x19: "EIATTR_CBANK_PARAM_SIZE",
    0x1B: "EIATTR_MAXREG_COUNT", 0x1C: "EIATTR_EXIT_INSTR_OFFSETS", 0x1E: "EIATTR_CRS_STACK_SIZE",
    0x28: "EIATTR_COOP_GROUP_INSTR_OFFSETS", 0x29: "EIATTR_COOP_GROUP_MASK_REGIDS",
    0x2F: "EIATTR_REGCOUNT", 0x31: "EIATTR_INT_WARP_WIDE_INSTR_OFFSETS", 0x36: "EIATTR_SW_WAR",
    0x37: "EIATTR_CUDA_API_VERSION", 0x38: "EIATTR_NUM_MBARRIERS", 0x39: "EIATTR_MBARRIER_INSTR_OFFSETS",
    0x3D: "EIATTR_CTA_PER_CLUSTER", 0x45: "EIATTR_KPARAM_INFO_V2", 0x4C: "EIATTR_NUM_BARRIERS",
    0x50: "EIATTR_SPARSE_MMA_MASK", 0x54: "EIATTR_REG_RECONFIG", 0x55: "EIATTR_ANNOTATIONS",
    0x5B: "EIATTR_BLOCKS_ARE_CLUSTERS", 0x66: "EIATTR_LANGUAGE", 0x6B: "EIATTR_NVSAL_SW_WAR",
    0x6D: "EIATTR_PREEXIT_USED",
}
EIFMT = {1: "EIFMT_NVAL", 2: "EIFMT_BVAL", 3: "EIFMT_HVAL", 4: "EIFMT_SVAL"}
_LANGUAGES = {7: "TILEIR"}


def nv_info_records(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """Decode an ``.nv.info`` section into (format, attribute, value) records: an int for the
    fixed-size formats, the payload bytes for EIFMT_SVAL."""
    recs, i = [], 0
    while i + 4 <= len(data):
        fmt, attr = data[i], data[i + 1]
        if fmt == 4:
            size = struct.unpack_from("<H", data, i + 2)[0]
            recs.append((fmt, attr, data[i + 4:i + 4 + size]))
            i += 4 + size
        elif fmt in (1, 2, 3):
            recs.append((fmt, attr, struct.unpack_from("<H", data, i + 2)[0]))
            i += 4
        else:   # unknown format: stop rather than misread the rest
            break
    return recs


def nv_info_text(sections: dict[str, ElfSection]) -> str:
    """The per-kernel .nv.info attributes in ``cuobjdump -elf``'s layout (parsed by
    ``ir_parsers.resources.parse_elf_attributes``)."""
    out = []
    for name, sec in sections.items():
        if not name.startswith(".nv.info."):
            continue
        out.append(name)
        for k, (fmt, attr, val) in enumerate(nv_info_records(sec.data), 1):
            nm = EIATTR_NAMES.get(attr, f"unknown Attribute 0x{attr:x}")
            out.append(f"\t<0x{k:x}>")
            out.append(f"\tAttribute:\t{nm}")
            out.append(f"\tFormat:\t{EIFMT.get(fmt, fmt)}")
            if fmt == 1:
                continue
            if isinstance(val, bytes):
                if attr == 0x66 and len(val) >= 4:
                    code = struct.unpack_from("<I", val)[0]
                    text = f"Language:\t {_LANGUAGES.get(code, code)}"
                elif len(val) % 4 == 0:
                    text = " ".join(f"0x{w:x}" for w in struct.unpack_from(f"<{len(val) // 4}I", val))
                else:
                    text = val.hex()
            else:
                text = f"0x{val:x}"
            out.append(f"\tValue:\t{text}")
        out.append("")
    return "\n".join(out) + "\n"
